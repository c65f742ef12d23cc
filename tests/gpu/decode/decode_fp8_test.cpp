// Decode on fp8 (e4m3 / e5m2) KV pools with per-head or per-tensor scales, Q and O bf16.
// Two levels (issue 23):
//   1. against the float64 reference run on the DEQUANTIZED cache (scale * fp8 value): only the
//      kernel's own arithmetic differs, so the tolerance is the 16-bit kernel's
//      (check_against_reference: 4x the bf16 emulation's error);
//   2. against the same kernel on the bf16 cache the fp8 one was quantized from: the
//      quantization error, reported as a distribution (max / mean / rms, relative to the
//      output's rms) and bounded loosely.
// Also: bitwise determinism, negative cases (each rejected before any launch: out untouched).
// Tests named *Small* form the compute-sanitizer subset.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "tests/gpu/decode/decode_batch.h"
#include "weft/decode.h"
#include "weft/error.h"
#include "weft/fp8.h"

namespace weft {
namespace {

using test::DeviceBuffer;
using test::Rng;
using test_decode::Batch;
using test_decode::Case;
using test_decode::Workspace;

struct Fp8Spec {
  DType format = DType::kFloat8E4M3;
  bool per_head = true;
};

// Quantizes a Batch's (bf16-rounded) pools in place: head h's values are first multiplied by
// 1 + 3 (h % 4) so the heads need different scales; scale = amax / fp8_max (per head or over the
// tensor); bt.k / bt.v become the dequantized values (what the reference sees), the device
// pools fp8 bytes. Keeps the bf16 pools (of the multiplied values) for the level-2 comparison.
struct Fp8Batch {
  Batch& bt;
  Fp8Spec spec;
  std::vector<float> ks, vs;  // scales
  std::vector<float> k16, v16;  // bf16 values before quantization
  DeviceBuffer dk8, dv8, dks, dvs, dk16, dv16;
  PagedKVCache cache16;

  int64_t head_of(int64_t i) const {
    const Case& c = bt.c;
    const int64_t row = i / c.d;  // NHD: [page][slot][head]; HND: [page][head][slot]
    return c.layout == KVLayout::kNHD ? row % c.hkv : (row / c.page_size) % c.hkv;
  }

  Fp8Batch(Batch& b, const Fp8Spec& s) : bt(b), spec(s) {
    const Case& c = bt.c;
    const float fmax = fp8_max(s.format);
    for (std::vector<float>* pool : {&bt.k, &bt.v}) {
      for (size_t i = 0; i < pool->size(); ++i)
        (*pool)[i] = test::round_to(c.dtype, (*pool)[i] * float(1 + 3 * (head_of(int64_t(i)) % 4)));
    }
    k16 = bt.k;
    v16 = bt.v;
    auto scales = [&](const std::vector<float>& x) {
      std::vector<float> amax(c.hkv, 0.f);
      for (size_t i = 0; i < x.size(); ++i) amax[head_of(int64_t(i))] = std::max(amax[head_of(int64_t(i))], std::fabs(x[i]));
      if (!s.per_head) amax.assign(1, *std::max_element(amax.begin(), amax.end()));
      for (float& a : amax) a = a > 0 ? a / fmax : 1.f;
      return amax;
    };
    ks = scales(bt.k);
    vs = scales(bt.v);
    auto quantize = [&](std::vector<float>& x, const std::vector<float>& sc) {
      std::vector<uint8_t> q(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        const float scl = sc[s.per_head ? head_of(int64_t(i)) : 0];
        q[i] = fp8_from_float(x[i] / scl, s.format);
        x[i] = scl * fp8_to_float(q[i], s.format);  // exact in double: the reference's input
      }
      return q;
    };
    dk8 = DeviceBuffer::from(quantize(bt.k, ks));
    dv8 = DeviceBuffer::from(quantize(bt.v, vs));
    dks = DeviceBuffer::from(ks);
    dvs = DeviceBuffer::from(vs);
    dk16 = DeviceBuffer::from(test::to_half_bits(c.dtype, k16));
    dv16 = DeviceBuffer::from(test::to_half_bits(c.dtype, v16));
    cache16 = bt.cache;
    cache16.k_pages.data = dk16.get();
    cache16.v_pages.data = dv16.get();
    bt.cache.k_pages.data = dk8.get();
    bt.cache.v_pages.data = dv8.get();
    bt.cache.k_pages.dtype = bt.cache.v_pages.dtype = s.format;
    for (TensorView* t : {&bt.cache.k_pages, &bt.cache.v_pages}) {  // same shape, 1-byte strides
      const TensorView like = *t;
      *t = TensorView(like.data, s.format, {like.shape[0], like.shape[1], like.shape[2], like.shape[3]});
    }
    bt.cache.k_scale = {dks.as<float>(), ks.data(), int64_t(ks.size())};
    bt.cache.v_scale = {dvs.as<float>(), vs.data(), int64_t(vs.size())};
  }
};

struct ErrorStats {
  double max_abs = 0, mean_abs = 0, rms = 0, ref_rms = 0;
  void print(const char* what) const {
    std::printf("[fp8] %s: max_abs %.3e mean_abs %.3e rms %.3e (rms of the bf16 output %.3e, relative rms %.3e)\n",
                what, max_abs, mean_abs, rms, ref_rms, rms / std::max(ref_rms, 1e-30));
  }
};
ErrorStats error_stats(const std::vector<float>& got, const std::vector<float>& ref) {
  ErrorStats e;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(double(got[i]) - ref[i]);
    e.max_abs = std::max(e.max_abs, d);
    e.mean_abs += d;
    e.rms += d * d;
    e.ref_rms += double(ref[i]) * ref[i];
  }
  const double n = std::max<size_t>(1, got.size());
  e.mean_abs /= n;
  e.rms = std::sqrt(e.rms / n);
  e.ref_rms = std::sqrt(e.ref_rms / n);
  return e;
}

// Runs the case on fp8 pools (level 1 vs the reference, determinism) and on the bf16 pools
// it came from (level 2); returns the level-2 statistics.
ErrorStats run_fp8_case(const Case& c, const Fp8Spec& s, Rng& rng, bool print = false) {
  SCOPED_TRACE(c.describe() + " " + dtype_name(s.format) + (s.per_head ? " per-head" : " per-tensor"));
  Batch bt(c, rng);
  Fp8Batch fb(bt, s);
  const int32_t max_batch = std::max<int32_t>(1, int32_t(c.lens.size()));
  Workspace ws(max_batch, c);
  BatchDecodeWrapper w(max_batch, c.hq, c.hkv, c.d, c.path);
  test_decode::plan_for(w, bt, ws);
  bt.dout.poison();
  bt.dlse.poison();
  test_decode::run_for(w, bt);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  test_decode::check_against_reference(bt);
  const std::vector<float> o8 = bt.out();
  const size_t bytes = c.lens.size() * c.hq * c.d * 2;
  std::vector<uint8_t> bits1(bytes), bits2(bytes);
  bt.dout.download(bits1.data(), bytes);
  bt.dout.poison();
  test_decode::run_for(w, bt);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  bt.dout.download(bits2.data(), bytes);
  EXPECT_TRUE(bits1 == bits2) << "not bitwise deterministic";
  // Level 2: the same wrapper and plan on the bf16 pools.
  bt.dout.poison();
  w.run(bt.tq, fb.cache16, bt.table, bt.tout, c.with_lse ? &bt.tlse : nullptr, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const ErrorStats e = error_stats(o8, bt.out());
  if (print) e.print((c.describe() + " " + dtype_name(s.format) + " vs bf16").c_str());
  // Loose sanity bound on the quantization error (3 / 2 mantissa bits: ~3.6% / 7.2% rms per
  // element; the logits amplify K's share where the softmax is sharp, as with the x10 heads
  // here). Measured on H100 (bench/results/h100_fp8_tests_sanitizer_db79d51.txt): relative rms
  // 5.0-6.2% (e4m3) and 13-16% (e5m2) on the long cases.
  EXPECT_LT(e.rms, (s.format == DType::kFloat8E4M3 ? 0.10 : 0.20) * e.ref_rms + 1e-3);
  return e;
}

Case make_case(std::vector<int32_t> lens, int32_t hq, int32_t hkv, DecodePath path, int32_t page = 16,
               KVLayout layout = KVLayout::kNHD) {
  Case c;
  c.lens = std::move(lens);
  c.hq = hq;
  c.hkv = hkv;
  c.d = 128;
  c.dtype = DType::kBFloat16;
  c.page_size = page;
  c.layout = layout;
  c.path = path;
  return c;
}

const DType kFormats[] = {DType::kFloat8E4M3, DType::kFloat8E5M2};
const DecodePath kPaths[] = {DecodePath::kTensorCore, DecodePath::kCudaCore};

TEST(DecodeFp8Small, BothPathsFormatsAndScaleGranularities) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  for (DType f : kFormats)
    for (DecodePath p : kPaths)
      for (bool per_head : {true, false})
        run_fp8_case(make_case({1, 17, 0, 300, 64}, 8, 2, p), {f, per_head}, rng);
}

TEST(DecodeFp8Small, EdgeShapes) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  for (DecodePath p : kPaths) {
    run_fp8_case(make_case({5, 1, 33}, 4, 4, p, /*page=*/1), {DType::kFloat8E4M3, true}, rng);          // page 1, group 1
    run_fp8_case(make_case({40, 129}, 16, 1, p, 16, KVLayout::kHND), {DType::kFloat8E5M2, true}, rng);  // group 16, HND
    run_fp8_case(make_case({0, 0}, 8, 2, p), {DType::kFloat8E4M3, true}, rng);                           // all empty
  }
  // GQA group 32 (32-row tensor-core items) and a soft cap + sliding window.
  run_fp8_case(make_case({70, 3}, 32, 1, DecodePath::kAuto), {DType::kFloat8E4M3, true}, rng);
  Case c = make_case({200, 31}, 8, 2, DecodePath::kAuto, 16);
  c.var.logits_soft_cap = 30.f;
  c.var.window_left = 50;
  run_fp8_case(c, {DType::kFloat8E5M2, false}, rng);
}

// Long requests: split items merged in the kernel; the level-2 error distribution printed for
// the Llama-3-8B (32 / 8 heads) and Llama-2-7B (32 / 32) head shapes.
TEST(DecodeFp8, SplitLongRequestsAndErrorDistribution) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  for (DType f : kFormats) {
    run_fp8_case(make_case({4000, 9000, 1}, 32, 8, DecodePath::kAuto), {f, true}, rng, /*print=*/true);
    run_fp8_case(make_case({3000, 500}, 32, 32, DecodePath::kAuto), {f, true}, rng, /*print=*/true);
  }
}

// Every rejected call names its argument and leaves out untouched (nothing launched).
TEST(DecodeFp8Small, Negative) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  Case c = make_case({20, 7}, 8, 2, DecodePath::kAuto);
  Batch bt(c, rng);
  Fp8Batch fb(bt, {DType::kFloat8E4M3, true});
  Workspace ws(2, c);
  BatchDecodeWrapper w(2, c.hq, c.hkv, c.d);
  test_decode::plan_for(w, bt, ws);
  auto rejected = [&](const PagedKVCache& cache, const char* arg) {
    bt.dout.poison();
    const std::vector<uint16_t> before = bt.dout.to_vector<uint16_t>(2 * 8 * 128);
    EXPECT_EQ(test::thrown_argument([&] { w.run(bt.tq, cache, bt.table, bt.tout, &bt.tlse, nullptr); }), arg);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_TRUE(bt.dout.to_vector<uint16_t>(2 * 8 * 128) == before) << arg;
  };
  PagedKVCache no_scale = bt.cache;
  no_scale.k_scale = {};
  rejected(no_scale, "k_scale");
  PagedKVCache bad_size = bt.cache;
  bad_size.v_scale.size = 3;
  rejected(bad_size, "v_scale");
  std::vector<float> neg = fb.vs;
  neg[1] = -1.f;
  PagedKVCache bad_value = bt.cache;
  bad_value.v_scale.host = neg.data();
  rejected(bad_value, "v_scale");
  PagedKVCache mixed = bt.cache;
  mixed.v_pages.dtype = DType::kFloat8E5M2;
  rejected(mixed, "v_pages");
  PagedKVCache scaled16 = fb.cache16;
  scaled16.k_scale = bt.cache.k_scale;
  scaled16.v_scale = bt.cache.v_scale;
  rejected(scaled16, "k_scale");
  // ALiBi with fp8 pools (no instance).
  {
    Case ca = c;
    ca.slopes = {0.5f, 0.25f, 0.125f, 0.0625f, 0.03f, 0.02f, 0.01f, 0.005f};
    Batch ba(ca, rng);
    Fp8Batch fa(ba, {DType::kFloat8E4M3, true});
    BatchDecodeWrapper wa(2, c.hq, c.hkv, c.d);
    test_decode::plan_for(wa, ba, ws);
    EXPECT_EQ(test::thrown_argument([&] { wa.run(ba.tq, ba.cache, ba.table, ba.tout, &ba.tlse, nullptr); }),
              "variant.alibi_slopes");
  }
  // f16 q with fp8 pools and head_dim 64: not in the instance table.
  {
    Case ch = c;
    ch.dtype = DType::kFloat16;
    Batch bh(ch, rng);
    Fp8Batch fh(bh, {DType::kFloat8E4M3, true});
    BatchDecodeWrapper wh(2, c.hq, c.hkv, c.d);
    test_decode::plan_for(wh, bh, ws);
    EXPECT_EQ(test::thrown_argument([&] { wh.run(bh.tq, bh.cache, bh.table, bh.tout, &bh.tlse, nullptr); }),
              "cache.k_pages");
    Case c64 = c;
    c64.d = 64;
    Batch b64(c64, rng);
    Fp8Batch f64(b64, {DType::kFloat8E5M2, true});
    Workspace ws64(2, c64);
    BatchDecodeWrapper w64(2, c.hq, c.hkv, 64);
    test_decode::plan_for(w64, b64, ws64);
    EXPECT_EQ(test::thrown_argument([&] { w64.run(b64.tq, b64.cache, b64.table, b64.tout, &b64.tlse, nullptr); }),
              "cache.k_pages");
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace weft
