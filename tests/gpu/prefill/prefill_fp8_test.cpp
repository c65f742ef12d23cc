// Batch prefill on fp8 (e4m3 / e5m2) paged K/V pools with per-head or per-tensor scales, bf16 Q
// and O (issue 23). Two levels:
//   1. against the float64 reference run on the DEQUANTIZED cache (scale * fp8 value): only the
//      kernel's own arithmetic differs, so the tolerance is the bf16 kernel's
//      (check_against_reference);
//   2. against the float64 reference on the bf16 values the cache was quantized from: the
//      quantization error, reported as a distribution and bounded loosely.
// Also: bitwise determinism, the 16- and 128-row tiles, split keys, the variants (causal, window,
// soft cap, custom mask with fully masked rows), edge shapes, and rejected arguments (before any
// launch: out untouched). PrefillFp8Small.* is the compute-sanitizer subset.
// The mainloops: fp8 pools run the Hopper mainloop's fp8 instances under PrefillMainloop::kAuto
// (attention/heuristics.cpp) and kSm90 where it is eligible (sm_90, 128-row tiles, page sizes
// tiling 128 keys: src/prefill/sm90/sm90_fp8.cuh), the FA2 kernel's elsewhere and under kFA2. Each
// case names the one it expects (checked through plan_info().sm90 and sm90::launch_count());
// PrefillFp8Sm90* cover the sm90 path (masks, GQA, page sizes, lengths off every 128-key tile,
// empty requests, q_len 1) and the dispatch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "prefill/sm90/sm90_launch.h"
#include "prefill_case.h"
#include "reference/attention.h"
#include "weft/error.h"

namespace weft::test::prefill {
namespace {

const DType kFormats[] = {DType::kFloat8E4M3, DType::kFloat8E5M2};

AttentionVariant causal() {
  AttentionVariant v;
  v.mask = MaskMode::kCausal;
  v.return_lse = true;
  return v;
}

Case fp8_case(std::vector<int32_t> q, std::vector<int32_t> kv, int32_t hq, int32_t hkv, DType f,
              bool per_head = true) {
  Case c;
  c.q_lens = std::move(q);
  c.kv_lens = std::move(kv);
  c.num_qo_heads = hq;
  c.num_kv_heads = hkv;
  c.head_dim = 128;
  c.dtype = DType::kBFloat16;
  c.kv_fp8 = f;
  c.fp8_per_head = per_head;
  return c;
}

// Which mainloop a case must run on: kSm90 (requested with PrefillMainloop::kSm90 and asserted on
// sm_90 devices; elsewhere the FA2 kernel runs it under kAuto), kAutoSm90 (the case's own options,
// kAuto: the sm90 mainloop asserted on sm_90 devices, FA2 elsewhere), kFa2 (any device), kAny.
enum class Expect { kAny, kSm90, kAutoSm90, kFa2 };

// Level 1 + determinism; level 2 printed when `print` (returns the relative rms).
double run_fp8(const Case& case_in, bool print = false, Expect expect = Expect::kAny) {
  Case c = case_in;
  if (expect == Expect::kSm90 && is_sm90()) c.opt.mainloop = PrefillMainloop::kSm90;
  SCOPED_TRACE(c.describe());
  Prepared p;
  prepare(p, c);
  BatchPrefillWrapper w;
  const uint64_t launches = weft::prefill::sm90::launch_count();
  plan_and_run(w, p);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const bool want_sm90 = (expect == Expect::kSm90 || expect == Expect::kAutoSm90) && is_sm90();
  if (want_sm90 || expect == Expect::kFa2 || expect == Expect::kAutoSm90) {
    EXPECT_EQ(w.plan_info().sm90, want_sm90) << "mainloop";
    EXPECT_EQ(weft::prefill::sm90::launch_count(), launches + (want_sm90 ? 1 : 0)) << "sm90 launches";
  }
  check_against_reference(p);
  const std::vector<uint16_t> o1 = download_out(p);
  const std::vector<float> l1 = download_lse(p);
  p.d_out.poison();
  p.d_lse.poison();
  run_only(w, p);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(o1 == download_out(p)) << "O not bitwise deterministic";
  const std::vector<float> l2 = download_lse(p);
  EXPECT_EQ(0, std::memcmp(l1.data(), l2.data(), l1.size() * sizeof(float))) << "LSE not bitwise deterministic";

  // Level 2: against the exact attention of the bf16 values before quantization.
  ref::RaggedQ rq{p.q.data(), c.num_qo_heads, c.head_dim, p.qo_indptr};
  ref::RaggedKV rkv{p.k16.data(), p.v16.data(), c.num_kv_heads, c.head_dim, p.kv_indptr};
  ref::Options opt = ref::options_from(c.variant);
  if (c.variant.mask == MaskMode::kCustom) {
    opt.custom_mask = p.mask_bits.data();
    opt.mask_indptr.assign(p.mask_indptr.begin(), p.mask_indptr.end());
  }
  const ref::Result r16 = ref::attention(rq, rkv, opt);
  const std::vector<float> o = from_half_bits(c.dtype, o1);
  double max_abs = 0, sum_abs = 0, sq = 0, ref_sq = 0;
  for (size_t i = 0; i < o.size(); ++i) {
    const double d = std::fabs(double(o[i]) - r16.o[i]);
    max_abs = std::max(max_abs, d);
    sum_abs += d;
    sq += d * d;
    ref_sq += r16.o[i] * r16.o[i];
  }
  const double n = std::max<size_t>(1, o.size());
  const double rms = std::sqrt(sq / n), ref_rms = std::sqrt(ref_sq / n);
  if (print)
    std::printf("[fp8] %s vs bf16: max_abs %.3e mean_abs %.3e rms %.3e (rms of the bf16 output %.3e, relative rms %.3e)\n",
                c.describe().c_str(), max_abs, sum_abs / n, rms, ref_rms, rms / std::max(ref_rms, 1e-30));
  // Loose bound: 3 / 2 mantissa bits (e4m3 / e5m2), amplified by the x10 heads' sharp softmax.
  EXPECT_LT(rms, (*c.kv_fp8 == DType::kFloat8E4M3 ? 0.10 : 0.25) * ref_rms + 1e-3);
  return rms / std::max(ref_rms, 1e-30);
}

TEST(PrefillFp8Small, FormatsScalesAndTiles) {
  WEFT_REQUIRE_GPU();
  for (DType f : kFormats)
    for (bool per_head : {true, false})
      for (int32_t cta_q : {0, 16}) {
        // q_len 0 (empty request), kv_len 1, lengths off every tile, a kv_len-0 request with
        // queries (O = 0, LSE = -inf). The FA2 kernel pinned (the sm90 path: PrefillFp8Sm90Small).
        Case c = fp8_case({1, 17, 0, 70, 5}, {1, 40, 9, 151, 0}, 8, 2, f, per_head);
        c.variant = per_head ? causal() : AttentionVariant{};
        c.variant.return_lse = true;
        c.opt.cta_q = cta_q;
        c.opt.mainloop = PrefillMainloop::kFA2;
        run_fp8(c, false, Expect::kFa2);
      }
}

TEST(PrefillFp8Small, EdgeShapesAndVariants) {
  WEFT_REQUIRE_GPU();
  {  // page size 1, group 1, HND
    Case c = fp8_case({33, 1}, {50, 64}, 4, 4, DType::kFloat8E4M3);
    c.page_size = 1;
    c.layout = KVLayout::kHND;
    c.variant = causal();
    run_fp8(c, false, Expect::kFa2);  // page 1: FA2 on every device (sm90 pages tile 128 keys)
  }
  {  // group 16, page 5 (per-row page look-ups), 64 rows per tile (-> the 128-row tile)
    Case c = fp8_case({4, 2}, {77, 130}, 16, 1, DType::kFloat8E5M2);
    c.page_size = 5;
    c.variant.return_lse = true;
    run_fp8(c, false, Expect::kFa2);
  }
  {  // soft cap + sliding window (K scale inside the cap's argument)
    Case c = fp8_case({40, 100}, {90, 300}, 8, 2, DType::kFloat8E4M3);
    c.variant = causal();
    c.variant.window_left = 37;
    c.variant.logits_soft_cap = 30.f;
    c.opt.mainloop = PrefillMainloop::kFA2;
    run_fp8(c, false, Expect::kFa2);
  }
  {  // custom mask with fully masked rows (O = 0, LSE = -inf)
    Case c = fp8_case({20, 9}, {45, 30}, 4, 2, DType::kFloat8E5M2, false);
    c.variant.mask = MaskMode::kCustom;
    c.variant.return_lse = true;
    c.fully_masked_rows = true;
    c.opt.mainloop = PrefillMainloop::kFA2;
    run_fp8(c, false, Expect::kFa2);
  }
}

// The sm90 mainloop's fp8 instances (cta_q 128 forces its tile for these short requests): every
// mask it runs, GQA 1..16, page sizes 16 / 32 / 128 (NHD and HND), lengths off every 128-key
// tile, an empty request, a kv_len-0 request with queries, q_len 1, per-head and per-tensor scales.
TEST(PrefillFp8Sm90Small, MasksGroupsPagesAndLengths) {
  WEFT_REQUIRE_SM90();
  for (DType f : kFormats) {
    {  // group 4, causal, lengths off every tile, empty request, kv_len 0 with queries
      Case c = fp8_case({1, 17, 0, 70, 5, 3}, {1, 40, 9, 151, 0, 300}, 8, 2, f);
      c.variant = causal();
      c.opt.cta_q = 128;
      run_fp8(c, false, Expect::kSm90);
    }
    {  // no mask, per-tensor scales, group 1, HND
      Case c = fp8_case({33, 1, 130}, {50, 300, 257}, 4, 4, f, false);
      c.layout = KVLayout::kHND;
      c.variant.return_lse = true;
      c.opt.cta_q = 128;
      run_fp8(c, false, Expect::kSm90);
    }
    {  // group 16, page 32
      Case c = fp8_case({4, 2, 9}, {77, 130, 260}, 16, 1, f);
      c.page_size = 32;
      c.variant.return_lse = true;
      c.opt.cta_q = 128;
      run_fp8(c, false, Expect::kSm90);
    }
    {  // group 8, page 128 (one box per tile), causal
      Case c = fp8_case({130, 1}, {200, 129}, 16, 2, f);
      c.page_size = 128;
      c.variant = causal();
      c.opt.cta_q = 128;
      run_fp8(c, false, Expect::kSm90);
    }
    {  // q_len 1 everywhere
      Case c = fp8_case({1, 1, 1}, {1, 128, 129}, 8, 2, f);
      c.variant = causal();
      c.opt.cta_q = 128;
      run_fp8(c, false, Expect::kSm90);
    }
    {  // soft cap + sliding window (K scale inside the cap's argument)
      Case c = fp8_case({40, 100}, {90, 300}, 8, 2, f);
      c.variant = causal();
      c.variant.window_left = 37;
      c.variant.logits_soft_cap = 30.f;
      c.opt.cta_q = 128;
      run_fp8(c, false, Expect::kSm90);
    }
    {  // custom mask with fully masked rows (O = 0, LSE = -inf)
      Case c = fp8_case({20, 9}, {45, 300}, 4, 2, f, false);
      c.variant.mask = MaskMode::kCustom;
      c.variant.return_lse = true;
      c.fully_masked_rows = true;
      c.opt.cta_q = 128;
      run_fp8(c, false, Expect::kSm90);
    }
  }
}

// The wrapper's choice on long prompts (the 128-row tile): kAuto takes the sm90 path on fp8 pools
// where it can run, kSm90 as well (page 8, the smallest sm90 page, too) and is an error where that
// path cannot run (page 1, a forced 16-row tile), before any launch; kFA2 pins the FA2 kernel.
TEST(PrefillFp8Sm90Small, Dispatch) {
  WEFT_REQUIRE_SM90();
  Case c = fp8_case({200, 77}, {333, 77}, 8, 2, DType::kFloat8E4M3);
  c.variant = causal();
  run_fp8(c, false, Expect::kAutoSm90);  // kAuto
  run_fp8(c, false, Expect::kSm90);
  c.page_size = 8;
  run_fp8(c, false, Expect::kSm90);
  c.opt.mainloop = PrefillMainloop::kFA2;
  run_fp8(c, false, Expect::kFa2);
  auto plan_err = [](Case cc) {
    Prepared q;
    prepare(q, cc);
    BatchPrefillWrapper wq;
    return test::thrown_argument([&] { plan_only(wq, q); });
  };
  c.opt.mainloop = PrefillMainloop::kSm90;
  c.page_size = 1;
  EXPECT_EQ(plan_err(c), "opt.mainloop");
  c.page_size = 16;
  c.opt.cta_q = 16;
  EXPECT_EQ(plan_err(c), "opt.cta_q");
}

TEST(PrefillFp8, SplitLongRequestsAndErrorDistribution) {
  WEFT_REQUIRE_GPU();
  for (DType f : kFormats) {
    // a long request split over CTAs (merge pass) next to short ones; 128-row tiles
    Case c = fp8_case({300, 7, 129}, {3000, 700, 129}, 32, 8, f);
    c.variant = causal();
    run_fp8(c, true, Expect::kSm90);
    c.opt.mainloop = PrefillMainloop::kFA2;  // the same case on the FA2 kernel
    run_fp8(c, true, Expect::kFa2);
    Case h = fp8_case({512}, {4096 + 512}, 8, 2, f);  // chunked prefill after a long history
    h.variant = causal();
    run_fp8(h, true, Expect::kSm90);
    Case s = fp8_case({1, 16, 3}, {5000, 2048, 33}, 8, 8, f, false);  // 16-row tiles, split keys
    s.variant.return_lse = true;
    run_fp8(s, true);
  }
}

TEST(PrefillFp8Small, RejectedArguments) {
  WEFT_REQUIRE_GPU();
  Case c = fp8_case({5, 9}, {40, 20}, 4, 2, DType::kFloat8E4M3);
  c.variant.return_lse = true;
  Prepared p;
  prepare(p, c);
  BatchPrefillWrapper w;
  auto plan_err = [&](Case cc) {
    Prepared q;
    prepare(q, cc);
    q.c.opt = cc.opt;  // keep the option under test (prepare sets kv_dtype from kv_fp8)
    BatchPrefillWrapper wq;
    return test::thrown_argument([&] { plan_only(wq, q); });
  };
  {
    Case b = c;
    b.opt.kv_dtype = DType::kFloat32;
    EXPECT_EQ(plan_err(b), "opt.kv_dtype");
    b = c;
    b.opt.kv_dtype = DType::kFloat8E4M3;
    b.opt.cta_q = 64;
    EXPECT_EQ(plan_err(b), "opt.cta_q");
    b = c;
    b.opt.kv_dtype = DType::kFloat8E5M2;
    b.alibi_slopes = {0.5f, 0.25f, 0.125f, 0.0625f};
    EXPECT_EQ(plan_err(b), "variant.alibi_slopes");
  }
  {  // f16 q, head_dim 64, ragged K/V (16-bit cases planned with an fp8 kv_dtype)
    Case b;
    b.q_lens = {5};
    b.kv_lens = {9};
    b.dtype = DType::kFloat16;
    b.opt.kv_dtype = DType::kFloat8E4M3;
    EXPECT_EQ(plan_err(b), "dtype");
    b.dtype = DType::kBFloat16;
    b.head_dim = 64;
    EXPECT_EQ(plan_err(b), "head_dim");
    b.head_dim = 128;
    b.paged = false;
    EXPECT_EQ(plan_err(b), "opt.kv_dtype");
  }
  // run(): pools that differ from the plan, missing scales. Nothing launched: out stays poisoned.
  plan_only(w, p);
  p.d_out.poison();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint16_t> poisoned = download_out(p);
  const TensorView lse = p.lse_view();
  auto run_err = [&](const PagedKVCache& kc) {
    return test::thrown_argument([&] { w.run_paged(p.q_view(), kc, p.table(), p.out_view(), &lse, nullptr); });
  };
  PagedKVCache other = p.cache();
  other.k_pages.dtype = other.v_pages.dtype = DType::kFloat8E5M2;
  EXPECT_EQ(run_err(other), "k_pages");
  PagedKVCache no_scale = p.cache();
  no_scale.k_scale = {};
  EXPECT_EQ(run_err(no_scale), "k_scale");
  PagedKVCache bad_size = p.cache();
  bad_size.v_scale.size = 3;
  EXPECT_EQ(run_err(bad_size), "v_scale");
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(download_out(p) == poisoned);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace weft::test::prefill
