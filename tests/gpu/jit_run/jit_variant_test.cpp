// Run-time compiled variants (weft/jit.h) on the GPU: the built-in examples (sigmoid attention,
// distance bias, soft cap) and the default variant written as a JIT source, through the normal
// decode and prefill wrappers, against the float64 reference with the same logit
// (reference/custom_logits.h); user-source errors at plan() time; the disk cache across Variants.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "reference/custom_logits.h"
#include "tests/gpu/decode/decode_batch.h"
#include "weft/jit.h"
#include "weft/jit_examples.h"
#include "weft/prefill.h"

namespace {
using namespace weft;
using test::DeviceBuffer;
using test_decode::Batch;
using test_decode::Case;
namespace ex = weft::jit::examples;

constexpr int kMaxDistance = 64;

// One example: its source, host params and the reference logit.
struct Example {
  std::string name;
  jit::VariantSource src;
  std::vector<unsigned char> params;
  ref::LogitFn logit;
  bool normalize = true;
};

template <class P>
std::vector<unsigned char> bytes_of(const P& p) {
  const auto* b = reinterpret_cast<const unsigned char*>(&p);
  return std::vector<unsigned char>(b, b + sizeof(P));
}

// The examples; the distance table (device) lives in `table`.
std::vector<Example> examples(int32_t hq, DeviceBuffer& table, std::vector<float>& table_host, test::Rng& rng) {
  std::vector<Example> v;
  v.push_back({"default", ex::default_variant(), {}, [](double s, int64_t, int64_t, int64_t) { return s; }, true});
  // cap 0.5: well inside the scores' range (|score| ~ 0.7), so the cap changes the output by
  // ~30% relative (the "teeth" check below).
  const ex::SoftCapParams cap{0.5f};
  v.push_back({"soft_cap", ex::soft_cap(), bytes_of(cap),
               [](double s, int64_t, int64_t, int64_t) { return 0.5 * std::tanh(s / 0.5); }, true});
  const ex::SigmoidParams sg{1.5f, -1.f};
  v.push_back({"sigmoid", ex::sigmoid(), bytes_of(sg),
               [](double s, int64_t, int64_t, int64_t) {
                 const double x = 1.5 * s - 1.0;
                 return -std::log1p(std::exp(-x));
               },
               false});
  table_host = rng.uniform_vec(size_t(hq) * kMaxDistance, -2.0, 0.0);
  table = DeviceBuffer::from(table_host);
  const ex::DistanceBiasParams db{table.as<float>(), kMaxDistance, 0};
  const std::vector<float>* th = &table_host;
  v.push_back({"distance_bias", ex::distance_bias(), bytes_of(db),
               [th](double s, int64_t p, int64_t j, int64_t h) {
                 int64_t d = std::llabs(p - j);
                 d = std::min<int64_t>(d, kMaxDistance - 1);
                 return s + (*th)[h * kMaxDistance + d];
               },
               true});
  return v;
}

void expect_close(const std::string& what, const std::vector<float>& out, const std::vector<float>& lse,
                  const ref::Result& exact, const std::vector<double>& softmax_o, bool teeth) {
  // bf16 inputs, P rounded to bf16 for the tensor-core P.V, bf16 output: ~4e-3 relative L2. The
  // absolute bound scales with the output's magnitude (sigmoid attention sums, not averages: its
  // outputs reach ~50, where one bf16 rounding step is 0.25).
  double ref_max = 1.0;
  for (double x : exact.o) ref_max = std::max(ref_max, std::fabs(x));
  const test::Tolerance tol{1.5e-2, 3e-2 * ref_max};
  const test::Comparison got = test::compare(out, exact.o);
  std::printf("%-36s out %s\n", what.c_str(), got.summary().c_str());
  EXPECT_TRUE(test::within(got, tol)) << what << " out " << got.summary();
  const test::Comparison gl = test::compare(lse, exact.lse);
  EXPECT_TRUE(test::within(gl, test::Tolerance{1e-4, 5e-3})) << what << " lse " << gl.summary();
  if (teeth) {  // the variant's reference differs from plain softmax attention well beyond tol
    const test::Comparison plain = test::compare(out, softmax_o);
    EXPECT_GT(plain.rel_l2, 4 * tol.rel_l2) << what << ": indistinguishable from plain attention";
  }
}

TEST(JitVariantGpu, DecodeExamplesMatchReference) {
  WEFT_REQUIRE_GPU();
  test::Rng rng = test::Rng::for_current_test();
  Case c;
  c.lens = {0, 1, 37, 300, 1200, 4100};
  c.hq = 8;
  c.hkv = 2;
  c.d = 128;
  DeviceBuffer table;
  std::vector<float> table_host;
  for (const Example& e : examples(c.hq, table, table_host, rng)) {
    for (DecodePath path : {DecodePath::kTensorCore, DecodePath::kCudaCore}) {
      if (path == DecodePath::kCudaCore && e.name != "distance_bias") continue;  // one cc specialization
      auto v = jit::Variant::create(e.src);
      Case cs = c;
      cs.path = path;
      cs.var.jit = v.get();
      cs.var.jit_params = e.params.empty() ? nullptr : e.params.data();
      Batch bt(cs, rng);
      test_decode::Workspace ws(int32_t(cs.lens.size()), cs);
      BatchDecodeWrapper w(int32_t(cs.lens.size()), cs.hq, cs.hkv, cs.d, path);
      bt.dout.poison();
      bt.dlse.poison();
      test_decode::plan_for(w, bt, ws);
      test_decode::run_for(w, bt);
      WEFT_TEST_CUDA(cudaDeviceSynchronize());
      const ref::OwnedKV kv = ref::gather_paged(bt.ref_kv());
      const ref::RaggedQ rq{bt.q.data(), cs.hq, cs.d, ref::iota_indptr(int64_t(cs.lens.size()))};
      const ref::RaggedKV rkv{kv.k.data(), kv.v.data(), cs.hkv, cs.d, kv.kv_indptr};
      const ref::Options opt = ref::options_from(cs.var);
      const ref::Result exact = ref::attention_custom_logits(rq, rkv, opt, e.logit, e.normalize);
      const ref::Result plain = ref::attention(rq, rkv, opt);
      expect_close("decode " + e.name + " " + decode_path_name(path), bt.out(), bt.lse(), exact, plain.o,
                   e.name != "default");
      if (e.name == "default") {  // the JIT default variant is the AOT kernels' code (NVRTC-compiled)
        AttentionVariant aot = cs.var;
        aot.jit = nullptr;
        aot.jit_params = nullptr;
        std::vector<float> jit_out = bt.out();
        bt.dout.poison();
        w.plan(bt.table, cs.hq, cs.hkv, cs.d, cs.page_size, cs.dtype, cs.layout, aot, ws.buf.get(), ws.bytes, nullptr);
        test_decode::run_for(w, bt);
        WEFT_TEST_CUDA(cudaDeviceSynchronize());
        const std::vector<float> aot_out = bt.out();
        int64_t differ = 0;
        for (size_t i = 0; i < aot_out.size(); ++i) differ += !(aot_out[i] == jit_out[i]) && !(std::isnan(aot_out[i]) && std::isnan(jit_out[i]));
        std::printf("decode %s: JIT default vs AOT: %lld of %zu outputs differ\n", decode_path_name(path),
                    static_cast<long long>(differ), aot_out.size());
        std::vector<double> aot_d(aot_out.begin(), aot_out.end());
        EXPECT_LT(test::compare(jit_out, aot_d).rel_l2, 1e-3) << "JIT default variant far from the AOT kernel";
      }
      // Sigmoid (kSoftmax = false) needs the LSE output.
      if (!e.normalize)
        EXPECT_EQ(test::thrown_argument([&] { w.run(bt.tq, bt.cache, bt.table, bt.tout, nullptr, nullptr); }), "lse");
    }
  }
}

TEST(JitVariantGpu, PrefillExamplesMatchReference) {
  WEFT_REQUIRE_GPU();
  test::Rng rng = test::Rng::for_current_test();
  Case c;
  c.lens = {200, 77, 513, 0};
  c.hq = 8;
  c.hkv = 2;
  c.d = 128;
  const std::vector<int32_t> q_lens = {200, 1, 100, 0};
  std::vector<int32_t> qo{0};
  for (int32_t l : q_lens) qo.push_back(qo.back() + l);
  const int64_t total_q = qo.back();
  DeviceBuffer table;
  std::vector<float> table_host;
  for (const Example& e : examples(c.hq, table, table_host, rng)) {
    auto v = jit::Variant::create(e.src);
    Case cs = c;
    cs.var.mask = MaskMode::kCausal;
    cs.var.jit = v.get();
    cs.var.jit_params = e.params.empty() ? nullptr : e.params.data();
    Batch bt(cs, rng);  // K/V pages and table (its q is decode-shaped: unused here)
    std::vector<float> q = rng.uniform_vec(size_t(total_q) * cs.hq * cs.d, -2, 2);
    test::round_inplace(cs.dtype, q);
    DeviceBuffer dq = DeviceBuffer::from(test::to_half_bits(cs.dtype, q));
    DeviceBuffer dout(size_t(total_q) * cs.hq * cs.d * 2), dlse(size_t(total_q) * cs.hq * 4);
    dout.poison();
    dlse.poison();
    const TensorView tq(dq.get(), cs.dtype, {total_q, cs.hq, cs.d}), tout(dout.get(), cs.dtype, {total_q, cs.hq, cs.d});
    const TensorView tlse(dlse.get(), DType::kFloat32, {total_q, cs.hq});
    PrefillBounds b;
    b.max_batch = int32_t(q_lens.size());
    b.max_total_q = total_q;
    b.num_qo_heads = cs.hq;
    b.num_kv_heads = cs.hkv;
    b.head_dim = cs.d;
    DeviceBuffer ws(BatchPrefillWrapper::workspace_size(b));
    BatchPrefillWrapper w;
    w.plan_paged(qo.data(), bt.table, cs.page_size, cs.hq, cs.hkv, cs.d, cs.dtype, cs.var, ws.get(),
                 BatchPrefillWrapper::workspace_size(b), b, nullptr);
    w.run_paged(tq, bt.cache, bt.table, tout, &tlse, nullptr);
    WEFT_TEST_CUDA(cudaDeviceSynchronize());
    const ref::OwnedKV kv = ref::gather_paged(bt.ref_kv());
    const ref::RaggedQ rq{q.data(), cs.hq, cs.d, qo};
    const ref::RaggedKV rkv{kv.k.data(), kv.v.data(), cs.hkv, cs.d, kv.kv_indptr};
    const ref::Options opt = ref::options_from(cs.var);
    const ref::Result exact = ref::attention_custom_logits(rq, rkv, opt, e.logit, e.normalize);
    const ref::Result plain = ref::attention(rq, rkv, opt);
    const std::vector<float> out = test::from_half_bits(cs.dtype, dout.to_vector<uint16_t>(size_t(total_q) * cs.hq * cs.d));
    expect_close("prefill " + e.name, out, dlse.to_vector<float>(size_t(total_q) * cs.hq), exact, plain.o,
                 e.name != "default");
  }
}

TEST(JitVariantGpu, SourceErrorAtPlanIsAnErrorAndTheContextSurvives) {
  WEFT_REQUIRE_GPU();
  test::Rng rng = test::Rng::for_current_test();
  jit::VariantSource s = ex::soft_cap();
  s.source += "struct Broken { int x = ; };\n";
  auto v = jit::Variant::create(s);
  const ex::SoftCapParams cap{2.f};
  Case c;
  c.lens = {64, 65};
  c.var.jit = v.get();
  c.var.jit_params = &cap;
  Batch bt(c, rng);
  test_decode::Workspace ws(2, c);
  BatchDecodeWrapper w(2, c.hq, c.hkv, c.d);
  try {
    test_decode::plan_for(w, bt, ws);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "jit.source");
    EXPECT_NE(std::string(e.what()).find("soft_cap.cu at line 7"), std::string::npos) << e.what();
  }
  // Missing params, ALiBi together with a JIT variant: rejected before anything.
  EXPECT_EQ(test::thrown_argument([&] {
              AttentionVariant av;
              auto good = jit::Variant::create(ex::soft_cap());
              av.jit = good.get();
              w.plan(bt.table, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, av, ws.buf.get(), ws.bytes, nullptr);
            }),
            "variant.jit_params");
  // The wrapper still works with a built-in variant afterwards.
  AttentionVariant plain;
  w.plan(bt.table, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, plain, ws.buf.get(), ws.bytes, nullptr);
  w.run(bt.tq, bt.cache, bt.table, bt.tout, &bt.tlse, nullptr);
  WEFT_TEST_CUDA(cudaDeviceSynchronize());
}

TEST(JitVariantGpu, WarmCacheLoadsWithoutCompiling) {
  WEFT_REQUIRE_GPU();
  test::Rng rng = test::Rng::for_current_test();
  const std::string dir = (std::filesystem::temp_directory_path() / "weft_jit_gpu_cache_test").string();
  std::filesystem::remove_all(dir);
  jit::Options o;
  o.cache_dir = dir;
  const ex::SoftCapParams cap{2.f};
  Case c;
  c.lens = {100, 2000};
  for (int round = 0; round < 2; ++round) {
    auto v = jit::Variant::create(ex::soft_cap(), o);
    c.var.jit = v.get();
    c.var.jit_params = &cap;
    Batch bt(c, rng);
    test_decode::Workspace ws(2, c);
    BatchDecodeWrapper w(2, c.hq, c.hkv, c.d);
    test_decode::plan_for(w, bt, ws);
    test_decode::plan_for(w, bt, ws);  // second plan: the loaded kernel is reused
    const jit::Stats st = v->stats();
    EXPECT_EQ(st.compiled, round == 0 ? 1 : 0);
    EXPECT_EQ(st.disk_hits, round == 0 ? 0 : 1);
    EXPECT_EQ(st.memory_hits, 1);
    std::printf("round %d: compile %.2f s, load %.2f ms\n", round, st.compile_seconds, st.load_ms);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
