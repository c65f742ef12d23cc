// GPU tests (one GPU, world size 1): the TP layer runner (weft/tp_layer.h).
//  * Every stage of the unsplit layer against a float64 CPU reference computed from the GPU's
//    own inputs of that stage (QKV, attention on the paged cache, O, fused residual + norm, gate/
//    up, SiLU-mul, down, second fused call): catches a wrong transpose or offset in any stage.
//  * The split and split + overlap schedules (planner's cut, a cut inside a request, a cut at a
//    request boundary; 2 and 16 comm CTAs) equal the unsplit, unoverlapped layer (bf16 tolerance),
//    also after capturing one whole layer step in a CUDA graph and replaying it (replay: the same
//    bits as the eager run of that schedule, twice).
//  * Same inputs, same bits (eager overlap run twice); rejected arguments name themselves.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common/gpu_util.h"
#include "common/test_util.h"
#include "gpu/tp/tp_schedule_cases.h"
#include "reference/attention.h"
#include "reference/parallel.h"
#include "reference/rmsnorm.h"
#include "weft/comm.h"
#include "weft/error.h"
#include "weft/tp_layer.h"

namespace {

using weft::DType;
using weft::TensorView;
using weft::TpLayer;
using weft::TpLayerOptions;
using weft::TpSchedule;
using weft::test::DeviceBuffer;

constexpr DType kDt = DType::kBFloat16;

std::vector<float> download(const TensorView& t) {
  std::vector<uint16_t> bits(static_cast<std::size_t>(t.numel()));
  if (cudaMemcpy(bits.data(), t.data, bits.size() * 2, cudaMemcpyDeviceToHost) != cudaSuccess)
    throw std::runtime_error("download " + t.describe());
  return weft::test::from_half_bits(kDt, bits);
}
std::vector<uint16_t> download_bits(const void* p, std::size_t n) {
  std::vector<uint16_t> bits(n);
  if (cudaMemcpy(bits.data(), p, n * 2, cudaMemcpyDeviceToHost) != cudaSuccess) throw std::runtime_error("download");
  return bits;
}

// C[m, n] = sum_k A[m, k] W[n, k] in double.
std::vector<double> gemm_ref(const std::vector<float>& a, const std::vector<float>& w, int64_t M, int64_t N, int64_t K) {
  std::vector<double> c(static_cast<std::size_t>(M * N));
  weft::ref::parallel_for(M, [&](int64_t m) {
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += double{a[m * K + k]} * double{w[n * K + k]};
      c[m * N + n] = s;
    }
  });
  return c;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& ref, double rel_l2, const std::string& what) {
  const weft::test::Comparison c = weft::test::compare(got, ref);
  EXPECT_EQ(c.nan_count, 0) << what << ": " << c.summary();
  EXPECT_LE(c.rel_l2, rel_l2) << what << ": " << c.summary();
}
std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

struct Fixture {
  weft::TpLayerShape shape;
  weft::TpLayerBounds bounds;
  weft::TpBatch batch;
  std::unique_ptr<weft::Communicator> comm;
  std::unique_ptr<TpLayer> layer;
  int64_t T = 0, H = 0;
  DeviceBuffer x, res0, res, out;
  std::vector<uint16_t> x_bits, res0_bits;
  cudaStream_t s = nullptr;

  Fixture() {
    shape.hidden = 1024;
    shape.num_qo_heads = 8;
    shape.num_kv_heads = 2;
    shape.head_dim = 128;
    shape.intermediate = 2048;
    shape.dtype = kDt;
    batch.q_lens = {300, 213};
    batch.ctx_lens = {0, 64};
    bounds.max_tokens = 1024;
    bounds.max_batch = 4;
    bounds.max_kv_tokens = 2048;
    bounds.page_size = 16;
    weft::CommOptions co;
    co.max_tokens = bounds.max_tokens;
    co.max_hidden = shape.hidden;
    comm = std::make_unique<weft::Communicator>(weft::Communicator::new_unique_id(), 0, 1, co);
    layer = std::make_unique<TpLayer>(*comm, shape, bounds, /*seed=*/26);
    T = 513;
    H = shape.hidden;
    const std::size_t bytes = static_cast<std::size_t>(T * H) * 2;
    x = DeviceBuffer(bytes);
    res0 = DeviceBuffer(bytes);
    res = DeviceBuffer(bytes);
    out = DeviceBuffer(bytes);
    auto rng = weft::test::Rng::for_current_test();
    auto xv = rng.uniform_vec(T * H, -1.0, 1.0);
    auto rv = rng.uniform_vec(T * H, -1.0, 1.0);
    weft::test::round_inplace(kDt, xv);
    weft::test::round_inplace(kDt, rv);
    x_bits = weft::test::to_half_bits(kDt, xv);
    res0_bits = weft::test::to_half_bits(kDt, rv);
    x.upload(x_bits.data(), bytes);
    res0.upload(res0_bits.data(), bytes);
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) throw std::runtime_error("stream");
  }
  ~Fixture() {
    if (s) {
      cudaStreamSynchronize(s);
      cudaStreamDestroy(s);
    }
  }
  TensorView tv(const DeviceBuffer& b) const { return TensorView(b.get(), kDt, {T, H}); }
  // Resets the residual, poisons out, enqueues one step (no sync).
  void enqueue(cudaStream_t st) {
    cudaMemcpyAsync(res.get(), res0.get(), static_cast<std::size_t>(T * H) * 2, cudaMemcpyDeviceToDevice, st);
    out.poison(st);
    layer->run(tv(x), tv(res), tv(out), st);
  }
  struct Result {
    std::vector<uint16_t> out, res;
  };
  Result run_once(const TpLayerOptions& o) {
    layer->plan(batch, o, s);
    enqueue(s);
    if (cudaStreamSynchronize(s) != cudaSuccess) throw std::runtime_error("sync");
    return {download_bits(out.get(), T * H), download_bits(res.get(), T * H)};
  }
};

TEST(TpLayer, UnsplitStagesMatchFloat64Reference) {
  WEFT_REQUIRE_GPU();
  Fixture f;
  TpLayerOptions o;
  o.schedule = TpSchedule::kUnsplit;
  o.comm_ctas = 8;
  const Fixture::Result r = f.run_once(o);
  ASSERT_EQ(f.layer->split_tokens(), f.T);
  const TpLayer::Views v = f.layer->views();
  const int64_t T = f.T, H = f.H, I = f.shape.intermediate, hq = 8, hkv = 2, d = 128;
  const int64_t nqkv = (hq + 2 * hkv) * d;
  const auto x = weft::test::from_half_bits(kDt, f.x_bits);
  const auto res0 = weft::test::from_half_bits(kDt, f.res0_bits);
  const auto qkv = download(v.qkv), attn = download(v.attn), o_ = download(v.o), h2 = download(v.h2);
  const auto gu = download(v.gate_up), act = download(v.act), down = download(v.down);
  const auto out = weft::test::from_half_bits(kDt, r.out), res = weft::test::from_half_bits(kDt, r.res);
  // 1. QKV GEMM (bf16 output: ~2^-9 relative rounding per element).
  expect_close(qkv, gemm_ref(x, download(v.w_qkv), T, nqkv, H), 1e-2, "qkv");
  // 2. Attention on the paged cache: q from qkv, K/V from the pool after the append; the
  //    appended tokens must be this step's k / v columns of qkv.
  const auto kp = download(v.k_pages), vp = download(v.v_pages);
  const auto& indptr = f.layer->kv_indptr();
  const auto& indices = f.layer->kv_indices();
  {
    int64_t row = 0, bad = 0;
    for (std::size_t b = 0; b < f.batch.q_lens.size(); ++b)
      for (int32_t i = 0; i < f.batch.q_lens[b]; ++i, ++row) {
        const int64_t pos = f.batch.ctx_lens[b] + i;
        const int64_t page = indices[indptr[b] + pos / 16], sl = pos % 16;
        for (int64_t e = 0; e < hkv * d; ++e) {
          const float kq = qkv[row * nqkv + hq * d + e], vq = qkv[row * nqkv + (hq + hkv) * d + e];
          if (kp[(page * 16 + sl) * hkv * d + e] != kq || vp[(page * 16 + sl) * hkv * d + e] != vq) ++bad;
        }
      }
    EXPECT_EQ(bad, 0) << "appended K/V differ from the projected k / v";
  }
  std::vector<float> q(static_cast<std::size_t>(T * hq * d));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t e = 0; e < hq * d; ++e) q[t * hq * d + e] = qkv[t * nqkv + e];
  weft::ref::RaggedQ rq{q.data(), hq, d, {0, 300, 513}};
  weft::ref::PagedKV pkv;
  pkv.k_pages = kp.data();
  pkv.v_pages = vp.data();
  pkv.num_pages = v.k_pages.size(0);
  pkv.page_size = 16;
  pkv.num_kv_heads = hkv;
  pkv.head_dim = d;
  pkv.indptr = indptr;
  pkv.indices = indices;
  pkv.last_page_len = f.layer->kv_last_page_len();
  weft::ref::Options ao;
  ao.causal = true;
  expect_close(attn, weft::ref::attention(rq, pkv, ao).o, 2e-2, "attention");
  // 3. O projection.
  expect_close(o_, gemm_ref(attn, download(v.w_o), T, H, hq * d), 1e-2, "o");
  // 4. Fused residual + norm (world 1): residual rounded first, norm from the rounded residual.
  const auto w1 = download(v.w_post_attn_norm), w2 = download(v.w_next_norm);
  const weft::ref::FusedNormResult n1 =
      weft::ref::fused_add_rmsnorm(o_.data(), res0.data(), w1.data(), T, H, 1e-5, weft::ref::rounding_of(kDt));
  expect_close(h2, n1.out, 1e-2, "h2");
  // 5. Gate/up, SiLU-mul, down.
  expect_close(gu, gemm_ref(h2, download(v.w_gate_up), T, 2 * I, H), 1e-2, "gate_up");
  std::vector<double> act_ref(static_cast<std::size_t>(T * I));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < I; ++i) {
      const double g = gu[t * 2 * I + i], u = gu[t * 2 * I + I + i];
      act_ref[t * I + i] = g / (1 + std::exp(-g)) * u;
    }
  expect_close(act, act_ref, 1e-2, "silu_mul");
  expect_close(down, gemm_ref(act, download(v.w_down), T, H, I), 1e-2, "down");
  // 6. Second fused call: from the first call's residual (bit-exact on the GPU) plus down.
  std::vector<float> res1(n1.residual.begin(), n1.residual.end());
  const weft::ref::FusedNormResult n2 =
      weft::ref::fused_add_rmsnorm(down.data(), res1.data(), w2.data(), T, H, 1e-5, weft::ref::rounding_of(kDt));
  int64_t res_bad = 0;
  for (std::size_t i = 0; i < res.size(); ++i) res_bad += res[i] != static_cast<float>(n2.residual[i]);
  EXPECT_EQ(res_bad, 0) << "residual after both calls differs from round(round(res + o) + down)";
  expect_close(out, n2.out, 1e-2, "out");
}

TEST(TpLayer, SplitAndOverlapEqualUnsplitAlsoAfterGraphReplay) {
  WEFT_REQUIRE_GPU();
  Fixture f;
  TpLayerOptions base;
  base.schedule = TpSchedule::kUnsplit;
  const Fixture::Result ref = f.run_once(base);
  const auto ref_out = to_double(weft::test::from_half_bits(kDt, ref.out));
  const auto ref_res = to_double(weft::test::from_half_bits(kDt, ref.res));
  const weft::test::TpScheduleCase cases[] = {{TpSchedule::kSplit, 0, 8},     {TpSchedule::kOverlap, 0, 8}, {TpSchedule::kOverlap, 0, 2},
                        {TpSchedule::kOverlap, 300, 16}, {TpSchedule::kSplit, 257, 4}, {TpSchedule::kOverlap, 100, 8}};
  for (const weft::test::TpScheduleCase& c : cases) {
    const TpLayerOptions o = c.options();
    const std::string tag = c.tag();
    const Fixture::Result eager = f.run_once(o);
    const int64_t m1 = f.layer->split_tokens();
    std::printf("[ %s ] m1 = %lld of %lld (planner: wave_neutral %d)\n", tag.c_str(), static_cast<long long>(m1),
                static_cast<long long>(f.T), f.layer->split().wave_neutral ? 1 : 0);
    EXPECT_GT(m1, 0) << tag;
    EXPECT_LT(m1, f.T) << tag << ": the layer was not split";
    if (c.split > 0) EXPECT_EQ(m1, c.split) << tag;
    // Row-wise stages are identical; GEMM tiling / the attention plan of a half may round
    // differently than the whole: bf16 tolerance.
    expect_close(weft::test::from_half_bits(kDt, eager.out), ref_out, 1e-2, tag + " out");
    expect_close(weft::test::from_half_bits(kDt, eager.res), ref_res, 1e-2, tag + " residual");
    // Same inputs, same bits.
    const Fixture::Result again = f.run_once(o);
    EXPECT_TRUE(again.out == eager.out && again.res == eager.res) << tag << ": not deterministic";
    // One whole layer step captured (both streams) and replayed twice.
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    WEFT_TEST_CUDA(cudaStreamBeginCapture(f.s, cudaStreamCaptureModeThreadLocal));
    f.enqueue(f.s);
    WEFT_TEST_CUDA(cudaStreamEndCapture(f.s, &graph));
    WEFT_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    for (int rep = 0; rep < 2; ++rep) {
      WEFT_TEST_CUDA(cudaGraphLaunch(exec, f.s));
      WEFT_TEST_CUDA(cudaStreamSynchronize(f.s));
      EXPECT_TRUE(download_bits(f.out.get(), f.T * f.H) == eager.out) << tag << ": graph replay " << rep << " out";
      EXPECT_TRUE(download_bits(f.res.get(), f.T * f.H) == eager.res) << tag << ": graph replay " << rep
                                                                       << " residual";
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    if (HasFailure()) return;
  }
}

TEST(TpLayer, RejectsBadArguments) {
  WEFT_REQUIRE_GPU();
  using weft::test::thrown_argument;
  Fixture f;
  EXPECT_EQ(thrown_argument([&] { f.layer->run(f.tv(f.x), f.tv(f.res), f.tv(f.out), f.s); }), "plan");
  TpLayerOptions o;
  o.comm_ctas = 0;
  EXPECT_EQ(thrown_argument([&] { f.layer->plan(f.batch, o, f.s); }), "options.comm_ctas");
  o.comm_ctas = 8;
  o.gemm_sms = 100000;
  EXPECT_EQ(thrown_argument([&] { f.layer->plan(f.batch, o, f.s); }), "options.gemm_sms");
  o.gemm_sms = 0;
  o.split_tokens = 514;
  EXPECT_EQ(thrown_argument([&] { f.layer->plan(f.batch, o, f.s); }), "options.split_tokens");
  o.split_tokens = 0;
  weft::TpBatch big = f.batch;
  big.q_lens = {1000, 100};
  EXPECT_EQ(thrown_argument([&] { f.layer->plan(big, o, f.s); }), "batch.q_lens");
  f.layer->plan(f.batch, o, f.s);
  const TensorView short_x(f.x.get(), kDt, {f.T - 1, f.H});
  EXPECT_EQ(thrown_argument([&] { f.layer->run(short_x, f.tv(f.res), f.tv(f.out), f.s); }), "x");
  EXPECT_EQ(thrown_argument([&] { f.layer->run(f.tv(f.x), f.tv(f.res), f.tv(f.res), f.s); }), "out");
  weft::TpLayerShape bad = f.shape;
  bad.num_kv_heads = 3;
  EXPECT_EQ(thrown_argument([&] { TpLayer l(*f.comm, bad, f.bounds, 1); }), "shape.num_kv_heads");
  weft::TpLayerBounds bb = f.bounds;
  bb.max_tokens = 1 << 20;
  bb.max_kv_tokens = 1 << 20;
  EXPECT_EQ(thrown_argument([&] { TpLayer l(*f.comm, f.shape, bb, 1); }), "comm");
}

}  // namespace
