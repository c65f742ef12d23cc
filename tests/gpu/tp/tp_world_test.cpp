// GPU tests at world size 2 (the first two GPUs, one thread per rank: tests/gpu/comm/rank_group.h;
// skipped with a reason when < 2 GPUs are visible): the TP layer (weft/tp_layer.h) with real
// fused all-reduce calls between ranks. Each rank's layer has its own seed (26 + rank: different
// shards, so the rank sums matter); x is the same on every rank (the replicated normalized input).
//  * Unsplit: both fused calls against the float64 reference of the all-reduce + add + norm
//    (ref::allreduce_add_rmsnorm) on the ranks' own o / down partials: h2 and out on every rank,
//    the residual rows the rank owns (owned_tokens(T)); rows it does not own stay bit-identical
//    to the input residual (the RESIDUAL CONTRACT); out and h2 bit-identical across ranks.
//  * kSplit and kOverlap (planner's cut, cuts inside / at the request boundary, 2..16 comm CTAs)
//    equal kUnsplit: out on every rank to bf16 rounding, bit-identical across ranks; the residual
//    rows owned per half (owned_tokens(m1) of A, m1 + owned_tokens(T - m1) of B) agree with the
//    unsplit residual of those rows (taken from the rank that owns them unsplit), the others are
//    untouched; every owned row is owned by exactly one rank.
//  * The same step twice: the same bits.
// Off the LSA path (the NCCL fallback: e.g. a runtime NCCL other than the headers') the same
// checks run with the fallback's contract: every rank updates every residual row, the sum is
// rounded to bf16 before the residual add (looser residual tolerance), and the bitwise
// cross-rank / determinism checks (LSA guarantees) are left out.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/gpu_util.h"
#include "common/test_util.h"
#include "gpu/tp/tp_schedule_cases.h"
#include "gpu/comm/rank_group.h"
#include "reference/rmsnorm.h"
#include "weft/comm.h"
#include "weft/tp_layer.h"

namespace {

using weft::DType;
using weft::TensorView;
using weft::TpLayer;
using weft::TpLayerOptions;
using weft::TpSchedule;
using weft::test::DeviceBuffer;
using weft::test::RankGroup;

constexpr DType kDt = DType::kBFloat16;
constexpr int kWorld = 2;

std::vector<uint16_t> bits_of(const void* p, std::size_t n) {
  std::vector<uint16_t> b(n);
  if (cudaMemcpy(b.data(), p, n * 2, cudaMemcpyDeviceToHost) != cudaSuccess) throw std::runtime_error("download");
  return b;
}
std::vector<float> floats(const std::vector<uint16_t>& b) { return weft::test::from_half_bits(kDt, b); }
std::vector<double> doubles(const std::vector<uint16_t>& b) {
  const auto f = floats(b);
  return std::vector<double>(f.begin(), f.end());
}

void expect_close(const std::vector<float>& got, const std::vector<double>& ref, double rel_l2, const std::string& what) {
  const weft::test::Comparison c = weft::test::compare(got, ref);
  EXPECT_EQ(c.nan_count, 0) << what << ": " << c.summary();
  EXPECT_LE(c.rel_l2, rel_l2) << what << ": " << c.summary();
}

constexpr int kEveryRank = -3;  // owner[t] on the fallback path: every rank updates row t

// Rows [begin, begin + count) as a mask over T rows.
void mark(std::vector<int>& owner, int64_t begin, int64_t count, int rank) {
  for (int64_t t = begin; t < begin + count; ++t) owner[t] = owner[t] < 0 ? rank : -2;  // -2: owned twice
}

struct World {
  weft::TpLayerShape shape;
  weft::TpLayerBounds bounds;
  weft::TpBatch batch;
  int64_t T = 513, H = 1024;
  std::unique_ptr<RankGroup> g;
  std::vector<std::unique_ptr<TpLayer>> layers;
  std::vector<std::unique_ptr<DeviceBuffer>> x, res0, res, out;
  std::vector<uint16_t> x_bits, res0_bits;

  World() {
    shape.hidden = H;
    shape.num_qo_heads = 8;
    shape.num_kv_heads = 2;
    shape.head_dim = 128;
    shape.intermediate = 2048;
    shape.dtype = kDt;
    batch.q_lens = {300, 213};  // T = 513: odd, so the two-shot slices are unequal
    batch.ctx_lens = {0, 64};
    bounds.max_tokens = 1024;
    bounds.max_batch = 4;
    bounds.max_kv_tokens = 2048;
    bounds.page_size = 16;
    weft::CommOptions co;
    co.max_tokens = bounds.max_tokens;
    co.max_hidden = H;
    // Every call two-shot (the halves here are >= 100 rows, above the world-2 one-shot limit of
    // 64 KiB anyway): the residual ownership contract below is two-shot's.
    co.one_shot_max_bytes = 0;
    g = std::make_unique<RankGroup>(std::vector<int>{0, 1}, co);
    auto rng = weft::test::Rng::for_current_test();
    auto xv = rng.uniform_vec(T * H, -1.0, 1.0), rv = rng.uniform_vec(T * H, -1.0, 1.0);
    weft::test::round_inplace(kDt, xv);
    weft::test::round_inplace(kDt, rv);
    x_bits = weft::test::to_half_bits(kDt, xv);
    res0_bits = weft::test::to_half_bits(kDt, rv);
    layers.resize(kWorld);
    x.resize(kWorld);
    res0.resize(kWorld);
    res.resize(kWorld);
    out.resize(kWorld);
    const std::size_t bytes = static_cast<std::size_t>(T * H) * 2;
    g->parallel([&](int r) {
      layers[r] = std::make_unique<TpLayer>(g->comm(r), shape, bounds, /*seed=*/26 + r);
      x[r] = std::make_unique<DeviceBuffer>(bytes);
      res0[r] = std::make_unique<DeviceBuffer>(bytes);
      res[r] = std::make_unique<DeviceBuffer>(bytes);
      out[r] = std::make_unique<DeviceBuffer>(bytes);
      x[r]->upload(x_bits.data(), bytes);
      res0[r]->upload(res0_bits.data(), bytes);
    });
    // The norm weights are replicated parameters (the owner of a row normalizes it for every
    // rank, and ownership moves with the split): rank 0's are copied to every rank.
    const TpLayer::Views v0 = layers[0]->views();
    const std::vector<uint16_t> n1 = bits_of(v0.w_post_attn_norm.data, H), n2 = bits_of(v0.w_next_norm.data, H);
    g->parallel([&](int r) {
      const TpLayer::Views v = layers[r]->views();
      if (cudaMemcpy(v.w_post_attn_norm.data, n1.data(), H * 2, cudaMemcpyHostToDevice) != cudaSuccess ||
          cudaMemcpy(v.w_next_norm.data, n2.data(), H * 2, cudaMemcpyHostToDevice) != cudaSuccess)
        throw std::runtime_error("norm weight upload");
    });
  }
  ~World() {
    try {
      g->parallel([&](int r) {
        cudaStreamSynchronize(g->stream(r));
        layers[r].reset();
        x[r].reset();
        res0[r].reset();
        res[r].reset();
        out[r].reset();
      });
    } catch (...) {
    }
  }
  TensorView tv(int r, const DeviceBuffer& b) const {
    return TensorView(b.get(), kDt, {T, H}, weft::Device::kCUDA, g->device(r));
  }
  struct Step {
    std::vector<std::vector<uint16_t>> out, res;  // per rank
    std::vector<int64_t> m1;
  };
  // plan + one step on every rank (residual reset, out poisoned), collected per rank.
  Step run(const TpLayerOptions& o) {
    Step st;
    st.out.resize(kWorld);
    st.res.resize(kWorld);
    st.m1.resize(kWorld);
    g->parallel([&](int r) {
      cudaStream_t s = g->stream(r);
      layers[r]->plan(batch, o, s);
      cudaMemcpyAsync(res[r]->get(), res0[r]->get(), static_cast<std::size_t>(T * H) * 2, cudaMemcpyDeviceToDevice, s);
      out[r]->poison(s);
      layers[r]->run(tv(r, *x[r]), tv(r, *res[r]), tv(r, *out[r]), s);
      g->comm(r).check_remote_errors(s);  // synchronizes s
      st.out[r] = bits_of(out[r]->get(), T * H);
      st.res[r] = bits_of(res[r]->get(), T * H);
      st.m1[r] = layers[r]->split_tokens();
    });
    return st;
  }
  // Owner of each row under a split at m1 (m1 == T: unsplit); -1 none, -2 more than one.
  bool lsa() const { return g->comm(0).path() == weft::CommPath::kLsa; }
  std::vector<int> owners(int64_t m1) {
    if (!lsa()) return std::vector<int>(T, kEveryRank);  // fallback: all rows on every rank
    std::vector<int> owner(T, -1);
    for (int r = 0; r < kWorld; ++r) {
      const auto a = g->comm(r).owned_tokens(m1);
      mark(owner, a.first, a.second, r);
      if (m1 < T) {
        const auto b = g->comm(r).owned_tokens(T - m1);
        mark(owner, m1 + b.first, b.second, r);
      }
    }
    return owner;
  }
};

#define WEFT_REQUIRE_TWO_GPUS()                                                                  \
  do {                                                                                           \
    WEFT_REQUIRE_GPU();                                                                          \
    if (weft::test::visible_gpus() < 2)                                                          \
      GTEST_SKIP() << "needs 2 GPUs, " << weft::test::visible_gpus() << " visible";              \
  } while (0)

// Rows of `rank`'s residual: owned ones (owner == rank) close to ref rows, the others bit-equal
// to the input residual.
void check_residual(const World& w, const std::vector<uint16_t>& got, const std::vector<int>& owner, int rank,
                    const std::vector<double>& ref_rows, double rel_l2, const std::string& what) {
  std::vector<float> g_owned;
  std::vector<double> r_owned;
  int64_t untouched_bad = 0;
  const auto gf = floats(got);
  for (int64_t t = 0; t < w.T; ++t)
    for (int64_t h = 0; h < w.H; ++h) {
      const std::size_t i = static_cast<std::size_t>(t * w.H + h);
      if (owner[t] == rank || owner[t] == kEveryRank) {
        g_owned.push_back(gf[i]);
        r_owned.push_back(ref_rows[i]);
      } else {
        untouched_bad += got[i] != w.res0_bits[i];
      }
    }
  EXPECT_GT(g_owned.size(), 0u) << what << ": rank " << rank << " owns no row";
  expect_close(g_owned, r_owned, rel_l2, what + " owned residual rows, rank " + std::to_string(rank));
  EXPECT_EQ(untouched_bad, 0) << what << ": rank " << rank << " wrote residual rows it does not own";
}

TEST(TpLayerWorld2, UnsplitFusedCallsMatchFloat64Reference) {
  WEFT_REQUIRE_TWO_GPUS();
  World w;
  if (!w.lsa()) std::printf("note: NCCL fallback path (%s)\n", w.g->comm(0).path_reason().c_str());
  TpLayerOptions o;
  o.schedule = TpSchedule::kUnsplit;
  const World::Step st = w.run(o);
  const int64_t T = w.T, H = w.H;
  // Intermediates of the step (valid after it completes): o, h2, down per rank; the norm weights.
  std::vector<std::vector<float>> o_(kWorld), h2(kWorld), down(kWorld), w1(kWorld), w2(kWorld);
  w.g->parallel([&](int r) {
    const TpLayer::Views v = w.layers[r]->views();
    o_[r] = floats(bits_of(v.o.data, T * H));
    h2[r] = floats(bits_of(v.h2.data, T * H));
    down[r] = floats(bits_of(v.down.data, T * H));
    w1[r] = floats(bits_of(v.w_post_attn_norm.data, H));
    w2[r] = floats(bits_of(v.w_next_norm.data, H));
  });
  const auto res0 = floats(w.res0_bits);
  const std::vector<int> owner = w.owners(T);
  for (int64_t t = 0; t < T; ++t)
    ASSERT_TRUE(owner[t] >= 0 || owner[t] == kEveryRank) << "row " << t << " owned by no rank or by two";
  EXPECT_TRUE(w1[0] == w1[1] && w2[0] == w2[1]) << "norm weights not replicated";
  // Call 1: residual' = round(res0 + o0 + o1), h2 = norm(residual') * w1.
  const weft::ref::FusedNormResult n1 = weft::ref::allreduce_add_rmsnorm(
      {o_[0].data(), o_[1].data()}, res0.data(), w1[0].data(), T, H, 1e-5, weft::ref::rounding_of(kDt));
  // Call 2 from the reference residual of call 1.
  std::vector<float> res1(n1.residual.begin(), n1.residual.end());
  const weft::ref::FusedNormResult n2 = weft::ref::allreduce_add_rmsnorm(
      {down[0].data(), down[1].data()}, res1.data(), w2[0].data(), T, H, 1e-5, weft::ref::rounding_of(kDt));
  for (int r = 0; r < kWorld; ++r) {
    const std::string tag = "rank " + std::to_string(r);
    expect_close(h2[r], n1.out, 1e-2, "h2, " + tag);
    expect_close(floats(st.out[r]), n2.out, 1e-2, "out, " + tag);
    // fp32 sums vs float64: a rounded residual element may differ by one bf16 ulp (rare); the
    // fallback rounds the all-reduced sum to bf16 before the add (one more rounding).
    check_residual(w, st.res[r], owner, r, n2.residual, w.lsa() ? 2e-3 : 1e-2, "unsplit");
  }
  // The partials differ between ranks (different seeds), so a sum that dropped a rank fails above.
  EXPECT_FALSE(o_[0] == o_[1]) << "rank partials equal: the reduction is not exercised";
  if (!w.lsa()) return;  // below: LSA guarantees (bit-identical on all ranks)
  EXPECT_TRUE(st.out[0] == st.out[1]) << "out differs between ranks";
  EXPECT_TRUE(weft::test::to_half_bits(kDt, h2[0]) == weft::test::to_half_bits(kDt, h2[1])) << "h2 differs between ranks";
}

TEST(TpLayerWorld2, SplitAndOverlapEqualUnsplit) {
  WEFT_REQUIRE_TWO_GPUS();
  World w;
  if (!w.lsa()) std::printf("note: NCCL fallback path (%s)\n", w.g->comm(0).path_reason().c_str());
  TpLayerOptions base;
  base.schedule = TpSchedule::kUnsplit;
  const World::Step ref = w.run(base);
  ASSERT_EQ(ref.m1[0], w.T);
  // The unsplit residual of every row, from the rank that owns it unsplit.
  const std::vector<int> owner_u = w.owners(w.T);
  std::vector<double> ref_res(static_cast<std::size_t>(w.T * w.H));
  {
    std::vector<std::vector<double>> per(kWorld);
    for (int r = 0; r < kWorld; ++r) per[r] = doubles(ref.res[r]);
    for (int64_t t = 0; t < w.T; ++t) {
      ASSERT_TRUE(owner_u[t] >= 0 || owner_u[t] == kEveryRank);
      const int src = owner_u[t] >= 0 ? owner_u[t] : 0;
      for (int64_t h = 0; h < w.H; ++h) ref_res[t * w.H + h] = per[src][t * w.H + h];
    }
  }
  const std::vector<double> ref_out = doubles(ref.out[0]);
  if (w.lsa()) EXPECT_TRUE(ref.out[0] == ref.out[1]) << "unsplit out differs between ranks";
  const weft::test::TpScheduleCase cases[] = {{TpSchedule::kSplit, 0, 8},      {TpSchedule::kOverlap, 0, 8}, {TpSchedule::kOverlap, 0, 2},
                        {TpSchedule::kOverlap, 300, 16}, {TpSchedule::kSplit, 257, 4}, {TpSchedule::kOverlap, 101, 4}};
  for (const weft::test::TpScheduleCase& c : cases) {
    const TpLayerOptions o = c.options();
    const std::string tag = c.tag();
    const World::Step st = w.run(o);
    const int64_t m1 = st.m1[0];
    std::printf("[ %s ] m1 = %lld of %lld\n", tag.c_str(), static_cast<long long>(m1), static_cast<long long>(w.T));
    EXPECT_EQ(st.m1[1], m1) << tag << ": ranks planned different cuts";
    EXPECT_GT(m1, 0) << tag;
    EXPECT_LT(m1, w.T) << tag << ": the layer was not split";
    if (c.split > 0) EXPECT_EQ(m1, c.split) << tag;
    if (w.lsa()) EXPECT_TRUE(st.out[0] == st.out[1]) << tag << ": out differs between ranks";
    for (int r = 0; r < kWorld; ++r) expect_close(floats(st.out[r]), ref_out, 1e-2, tag + " out, rank " + std::to_string(r));
    const std::vector<int> owner = w.owners(m1);
    for (int64_t t = 0; t < w.T; ++t)
      ASSERT_TRUE(owner[t] >= 0 || owner[t] == kEveryRank) << tag << ": row " << t << " owned by no rank or two";
    for (int r = 0; r < kWorld; ++r) check_residual(w, st.res[r], owner, r, ref_res, 1e-2, tag);
    if (!w.lsa()) {
      if (HasFailure()) return;
      continue;
    }
    const World::Step again = w.run(o);
    for (int r = 0; r < kWorld; ++r)
      EXPECT_TRUE(again.out[r] == st.out[r] && again.res[r] == st.res[r]) << tag << ": rank " << r << " not deterministic";
    if (HasFailure()) return;
  }
}

}  // namespace
