// Prefill with ALiBi (AttentionVariant::alibi_slopes, attention/variant.cuh AlibiVariant) against
// the float64 reference: every head dim, GQA groups 1/4/8/32, paged (page 1 and 16, NHD and HND)
// and ragged K/V, causal / none / sliding window / soft cap / custom mask, every tile with the
// bias step (cta_q 16, 64, 128 at d64), split and unsplit plans; on the FA2 mainloop the d128
// heuristic's 128-row tile gives way to the 64-row one; on a compute capability 9.0 device the
// sm90 mainloop runs ALiBi (forced kSm90 and kAuto: PrefillAlibiSm90*, each case checking that it
// launched; sm90_consumer.cuh's bias step); negative tests.
// Tests named *Small* form the compute-sanitizer subset.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "prefill/sm90/sm90_launch.h"
#include "prefill_case.h"
#include "weft/error.h"
#include "weft/prefill.h"

namespace weft::test::prefill {
namespace {

// ALiBi's published slopes: 2^(-8 (h + 1) / H) (H a power of two; other H use the same formula).
std::vector<float> typical_slopes(int32_t num_qo_heads) {
  std::vector<float> s(num_qo_heads);
  for (int32_t h = 0; h < num_qo_heads; ++h)
    s[h] = static_cast<float>(std::pow(2.0, -8.0 * double(h + 1) / double(num_qo_heads)));
  return s;
}
// Random slopes in [lo, hi] (seeded per test).
std::vector<float> random_slopes(int32_t num_qo_heads, uint64_t salt, double lo = 0.0, double hi = 1.0) {
  Rng rng = Rng::for_current_test(salt + 77);
  std::vector<float> s(num_qo_heads);
  for (float& x : s) x = static_cast<float>(rng.uniform(lo, hi));
  return s;
}

AttentionVariant variant(MaskMode m, int32_t window = -1, float cap = 0.f) {
  AttentionVariant v;
  v.mask = m;
  v.window_left = window;
  v.logits_soft_cap = cap;
  return v;
}

// Head dims x groups x K/V storage x masks x tiles, sampled so every value of each axis appears
// with several of the others.
TEST(PrefillAlibiSmall, HeadDimsGroupsPagedRaggedMasks) {
  WEFT_REQUIRE_GPU();
  const int32_t dims[] = {64, 128, 256};
  const int32_t groups[] = {1, 4, 8, 32};
  struct Storage {
    bool paged;
    int32_t page_size;
    KVLayout layout;
  };
  const Storage storages[] = {{true, 1, KVLayout::kNHD}, {true, 16, KVLayout::kHND}, {false, 0, KVLayout::kNHD},
                              {true, 16, KVLayout::kNHD}};
  const AttentionVariant variants[] = {variant(MaskMode::kCausal), variant(MaskMode::kNone),
                                       variant(MaskMode::kCausal, 37), variant(MaskMode::kNone, 20, 30.f),
                                       variant(MaskMode::kCausal, -1, 15.f)};
  uint64_t salt = 0;
  int n = 0;
  for (int di = 0; di < 3; ++di)
    for (int gi = 0; gi < 4; ++gi)
      for (int si = 0; si < 2; ++si) {
        Case c;
        c.head_dim = dims[di];
        c.num_kv_heads = groups[gi] == 32 ? 1 : 2;
        c.num_qo_heads = c.num_kv_heads * groups[gi];
        c.dtype = (di + gi) % 2 ? DType::kFloat16 : DType::kBFloat16;
        const Storage& st = storages[(2 * gi + si + di) % 4];
        c.paged = st.paged;
        c.page_size = st.page_size;
        c.layout = st.layout;
        c.variant = variants[(di + 2 * gi + si) % 5];
        c.q_lens = {1, 37, 0, 130};
        c.kv_lens = {1, 37, 19, 300};
        c.alibi_slopes = (n % 2) ? typical_slopes(c.num_qo_heads) : random_slopes(c.num_qo_heads, salt);
        SCOPED_TRACE(c.describe());
        run_and_check(c, ++salt);
        ++n;
      }
  EXPECT_EQ(n, 24);
}

// Every tile with the bias step, forced (cta_q 16 and 64 at every head dim, 128 at d64), each
// causal with a window on paged and ragged K/V; split plans with long histories.
TEST(PrefillAlibiSmall, EveryBiasTile) {
  WEFT_REQUIRE_GPU();
  uint64_t salt = 100;
  for (int32_t d : {64, 128, 256})
    for (int32_t cta_q : {16, 64, 128}) {
      if (cta_q == 128 && d != 64) continue;  // d128 x 128 has no bias step; d256 has no 128 tile
      for (bool paged : {true, false}) {
        Case c;
        c.head_dim = d;
        c.num_qo_heads = 8;
        c.num_kv_heads = 2;
        c.paged = paged;
        c.page_size = 16;
        c.variant = variant(MaskMode::kCausal, paged ? 100 : -1);
        c.q_lens = {70, 5, 200};
        c.kv_lens = {70, 900, 260};
        c.opt.cta_q = cta_q;
        c.alibi_slopes = typical_slopes(c.num_qo_heads);
        SCOPED_TRACE(c.describe());
        run_and_check(c, ++salt);
      }
    }
}

// Long single requests: plans that split KV (partial states merged by the merge pass), with
// the bias of every chunk relative to the same query positions.
TEST(PrefillAlibi, SplitKvLongHistory) {
  WEFT_REQUIRE_GPU();
  uint64_t salt = 200;
  for (int32_t d : {64, 128, 256}) {
    Case c;
    c.head_dim = d;
    c.num_qo_heads = 4;
    c.num_kv_heads = 4;
    c.paged = d != 128;
    c.page_size = d == 64 ? 1 : 16;
    c.variant = variant(d == 256 ? MaskMode::kNone : MaskMode::kCausal);
    c.q_lens = {16, 3};
    c.kv_lens = {6000, 4500};
    c.alibi_slopes = random_slopes(c.num_qo_heads, salt, 0.0, 0.05);  // reach far keys
    Prepared p;
    prepare(p, c, ++salt);
    BatchPrefillWrapper w;
    plan_and_run(w, p);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << c.describe();
    check_against_reference(p);
  }
}

// d128 with many rows: the heuristic picks the 128-row tile. On the FA2 mainloop (forced kFA2, or
// any device but compute capability 9.0) its kernel has no bias step, so an ALiBi plan runs the
// 64-row tile; on a compute capability 9.0 device kAuto takes the sm90 mainloop's 128-row tile,
// ALiBi included.
TEST(PrefillAlibi, D128LargeTileOnEachMainloop) {
  WEFT_REQUIRE_GPU();
  Case c;
  c.head_dim = 128;
  c.num_qo_heads = 32;
  c.num_kv_heads = 8;
  c.paged = true;
  c.page_size = 16;
  c.variant = variant(MaskMode::kCausal);
  c.q_lens = {1024, 512};
  c.kv_lens = {1024, 800};
  c.alibi_slopes = typical_slopes(c.num_qo_heads);
  {
    // Without ALiBi this shape takes the 128-row tile (FA2 or sm90).
    Case plain = c;
    plain.alibi_slopes.clear();
    Prepared p;
    prepare(p, plain, 1);
    BatchPrefillWrapper w;
    plan_only(w, p);
    EXPECT_EQ(w.plan_info().cta_q, 128);
  }
  for (PrefillMainloop m : {PrefillMainloop::kFA2, PrefillMainloop::kAuto}) {
    c.opt.mainloop = m;
    SCOPED_TRACE(c.describe());
    Prepared p;
    prepare(p, c, 2);
    BatchPrefillWrapper w;
    const uint64_t launches = weft::prefill::sm90::launch_count();
    plan_and_run(w, p);
    const bool sm90 = m == PrefillMainloop::kAuto && is_sm90();
    EXPECT_EQ(w.plan_info().sm90, sm90);
    EXPECT_EQ(w.plan_info().cta_q, sm90 ? 128 : 64);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(weft::prefill::sm90::launch_count(), launches + (sm90 ? 1 : 0));
    check_against_reference(p);
  }
}

// Custom masks combine with ALiBi (the mask excludes keys after the bias).
TEST(PrefillAlibiSmall, CustomMask) {
  WEFT_REQUIRE_GPU();
  Case c;
  c.head_dim = 128;
  c.num_qo_heads = 8;
  c.num_kv_heads = 2;
  c.paged = false;
  c.variant = variant(MaskMode::kCustom);
  c.q_lens = {33, 7};
  c.kv_lens = {90, 7};
  c.fully_masked_rows = true;
  c.alibi_slopes = random_slopes(c.num_qo_heads, 5);
  run_and_check(c, 300);
}

// c (no ALiBi) against c with all-zero slopes, the same inputs (same salt): the same bits of O and
// LSE; sm90: both plans run the sm90 mainloop.
void expect_zero_slopes_match_no_alibi(const Case& c, bool sm90) {
  Prepared a, b;
  prepare(a, c, 7);
  Case cz = c;
  cz.alibi_slopes.assign(c.num_qo_heads, 0.f);
  prepare(b, cz, 7);  // same salt: same inputs
  BatchPrefillWrapper wa, wb;
  plan_and_run(wa, a);
  plan_and_run(wb, b);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  if (sm90) ASSERT_TRUE(wa.plan_info().sm90 && wb.plan_info().sm90);
  EXPECT_EQ(download_out(a), download_out(b)) << c.describe();
  const std::vector<float> la = download_lse(a), lb = download_lse(b);
  ASSERT_EQ(la.size(), lb.size());
  for (size_t i = 0; i < la.size(); ++i) ASSERT_EQ(la[i], lb[i]) << "lse " << i;
}

// All-zero slopes run the ALiBi kernel path with a zero bias: bit-identical to no ALiBi when
// both hold log2-domain logits, i.e. with a soft cap (without one the default path keeps raw
// scores and folds the scale into its exp2 FFMA: one rounding fewer).
TEST(PrefillAlibiSmall, ZeroSlopesMatchNoAlibiBitwise) {
  WEFT_REQUIRE_GPU();
  for (bool paged : {true, false}) {
    Case c;
    c.head_dim = 64;
    c.num_qo_heads = 4;
    c.num_kv_heads = 1;
    c.paged = paged;
    c.variant = variant(MaskMode::kCausal, paged ? 30 : -1, 20.f);
    c.q_lens = {50, 9};
    c.kv_lens = {80, 300};
    c.opt.cta_q = 64;
    expect_zero_slopes_match_no_alibi(c, /*sm90=*/false);
  }
}

// The kernel reads the slopes at run time: new contents without a re-plan take effect.
TEST(PrefillAlibiSmall, SlopesReadAtRunTime) {
  WEFT_REQUIRE_GPU();
  Case c;
  c.head_dim = 128;
  c.num_qo_heads = 4;
  c.num_kv_heads = 2;
  c.variant = variant(MaskMode::kCausal);
  c.q_lens = {20, 40};
  c.kv_lens = {60, 40};
  c.alibi_slopes = typical_slopes(4);
  Prepared p;
  prepare(p, c, 9);
  BatchPrefillWrapper w;
  plan_and_run(w, p);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  check_against_reference(p);
  p.c.alibi_slopes = random_slopes(4, 11);
  p.d_alibi.upload(p.c.alibi_slopes.data(), p.c.alibi_slopes.size() * sizeof(float));
  p.d_out.poison();
  p.d_lse.poison();
  run_only(w, p);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  check_against_reference(p);
}

TEST(PrefillAlibiSmall, MisalignedSlopesRejectedAtPlan) {
  WEFT_REQUIRE_GPU();
  Case c;
  c.head_dim = 64;
  c.q_lens = {4};
  c.kv_lens = {8};
  c.alibi_slopes = typical_slopes(c.num_qo_heads);
  for (bool paged : {true, false}) {
    c.paged = paged;
    Prepared p;
    prepare(p, c, 13);
    p.c.variant.alibi_slopes = reinterpret_cast<const float*>(p.d_alibi.as<char>() + 2);
    BatchPrefillWrapper w;
    EXPECT_EQ(thrown_argument([&] { plan_only(w, p); }), "variant.alibi_slopes") << c.describe();
    EXPECT_FALSE(w.planned());
    // The aligned pointer then plans and runs.
    p.c.variant.alibi_slopes = p.d_alibi.as<float>();
    plan_and_run(w, p);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    check_against_reference(p);
  }
}

// The FA2 d128 x 128-row tile has no bias step: forced on the FA2 mainloop it is rejected (so is
// kSm90 on a device without the sm90 mainloop); under kAuto on a compute capability 9.0 device the
// forced 128-row tile is the sm90 mainloop's, which runs ALiBi.
TEST(PrefillAlibiSmall, ForcedTileWithoutBiasStepRejected) {
  WEFT_REQUIRE_GPU();
  Case c;
  c.head_dim = 128;
  c.q_lens = {4};
  c.kv_lens = {8};
  c.opt.cta_q = 128;
  c.opt.mainloop = PrefillMainloop::kFA2;
  c.alibi_slopes = typical_slopes(c.num_qo_heads);
  Prepared p;
  prepare(p, c, 17);
  {
    BatchPrefillWrapper w;
    EXPECT_EQ(thrown_argument([&] { plan_only(w, p); }), "opt.cta_q");
    EXPECT_FALSE(w.planned());
  }
  p.c.opt.mainloop = PrefillMainloop::kSm90;
  if (!is_sm90()) {
    BatchPrefillWrapper w;
    EXPECT_EQ(thrown_argument([&] { plan_only(w, p); }), "opt.mainloop");
    EXPECT_FALSE(w.planned());
    return;
  }
  for (PrefillMainloop m : {PrefillMainloop::kSm90, PrefillMainloop::kAuto}) {
    p.c.opt.mainloop = m;
    BatchPrefillWrapper w;
    plan_and_run(w, p);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_TRUE(w.plan_info().sm90);
    check_against_reference(p);
  }
}

// ---- the sm90 mainloop (compute capability 9.0 devices) ----

// Plan + run on the sm90 mainloop (asserted through plan_info and the launch counter), the float64
// reference, then a second run on re-poisoned outputs: the same bits.
void run_sm90_alibi(const Case& c, uint64_t salt) {
  SCOPED_TRACE(c.describe());
  Prepared p;
  prepare(p, c, salt);
  BatchPrefillWrapper w;
  const uint64_t launches = weft::prefill::sm90::launch_count();
  plan_and_run(w, p);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_TRUE(w.plan_info().sm90);
  ASSERT_EQ(weft::prefill::sm90::launch_count(), launches + 1) << "sm90 mainloop not launched";
  check_against_reference(p);
  const std::vector<uint16_t> o1 = download_out(p);
  const std::vector<float> l1 = download_lse(p);
  p.d_out.poison();
  p.d_lse.poison();
  run_only(w, p);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(download_out(p), o1) << "O not deterministic";
  const std::vector<float> l2 = download_lse(p);
  ASSERT_EQ(l1.size(), l2.size());
  for (size_t i = 0; i < l1.size(); ++i) ASSERT_EQ(std::memcmp(&l1[i], &l2[i], sizeof(float)), 0) << "lse " << i;
}

// Head dims 64/128/256 x bf16/fp16 x GQA 1/2/4/8 x ragged / paged page 16 (NHD, HND) x causal,
// none, causal + window, window + soft cap, causal + soft cap; lengths off every 128-row and
// 128-key (d256: 64-key) tile, q_len 1, an empty request, kv_len 1, bottom-right causal alignment
// (kv_len > q_len). Forced kSm90 and kAuto alternate (kAuto takes the sm90 mainloop where the
// heuristic picks the 128-row tile: > 64 packed rows per request).
TEST(PrefillAlibiSm90Small, HeadDimsGroupsStorageMasks) {
  WEFT_REQUIRE_SM90();
  const int32_t dims[] = {64, 128, 256};
  const int32_t groups[] = {1, 2, 4, 8};
  const AttentionVariant variants[] = {variant(MaskMode::kCausal), variant(MaskMode::kNone),
                                       variant(MaskMode::kCausal, 150), variant(MaskMode::kNone, 60, 30.f),
                                       variant(MaskMode::kCausal, -1, 15.f)};
  uint64_t salt = 400;
  int n = 0;
  for (int di = 0; di < 3; ++di)
    for (int gi = 0; gi < 4; ++gi)
      for (int si = 0; si < 2; ++si) {
        Case c;
        c.head_dim = dims[di];
        c.num_kv_heads = 2;
        c.num_qo_heads = 2 * groups[gi];
        c.dtype = (di + gi + si) % 2 ? DType::kFloat16 : DType::kBFloat16;
        const int storage = (2 * gi + si + di) % 3;  // 0 ragged, 1 paged NHD, 2 paged HND
        c.paged = storage != 0;
        c.page_size = 16;
        c.layout = storage == 2 ? KVLayout::kHND : KVLayout::kNHD;
        c.variant = variants[(di + 2 * gi + si) % 5];
        c.variant.return_lse = true;
        c.q_lens = {1, 129, 0, 63, 300};
        c.kv_lens = {1, 257, 19, 200, 300};
        c.opt.mainloop = (n % 2) ? PrefillMainloop::kAuto : PrefillMainloop::kSm90;
        if (c.opt.mainloop == PrefillMainloop::kAuto) c.q_lens = {1, 129, 0, 200, 300};  // > 64 rows per request
        c.alibi_slopes = (n % 3) ? typical_slopes(c.num_qo_heads) : random_slopes(c.num_qo_heads, salt);
        run_sm90_alibi(c, ++salt);
        ++n;
      }
  EXPECT_EQ(n, 24);
}

// Long histories (chunked prefill: a few new tokens on thousands of keys) and split-KV plans (the
// in-kernel merge, sm90_merge.cuh): the bias of every chunk relative to the same query positions.
TEST(PrefillAlibiSm90, ChunkedAndSplitKv) {
  WEFT_REQUIRE_SM90();
  uint64_t salt = 500;
  for (int32_t d : {64, 128, 256})
    for (bool paged : {true, false}) {
      Case c;
      c.head_dim = d;
      c.num_qo_heads = 8;
      c.num_kv_heads = 2;
      c.paged = paged;
      c.page_size = 16;
      c.variant = variant(d == 256 && !paged ? MaskMode::kNone : MaskMode::kCausal, d == 64 ? 1000 : -1);
      c.variant.return_lse = true;
      c.q_lens = {256, 1, 37};
      c.kv_lens = {2048 + 256, 4500, 3000};
      c.opt.mainloop = PrefillMainloop::kSm90;
      c.opt.min_chunk = 128;  // split the long key ranges
      c.alibi_slopes = random_slopes(c.num_qo_heads, salt, 0.0, 0.05);  // reach far keys
      run_sm90_alibi(c, ++salt);
    }
}

// Custom mask + ALiBi on the sm90 mainloop (fully masked rows: O = 0, LSE = -inf).
TEST(PrefillAlibiSm90Small, CustomMask) {
  WEFT_REQUIRE_SM90();
  Case c;
  c.head_dim = 128;
  c.num_qo_heads = 8;
  c.num_kv_heads = 2;
  c.paged = false;
  c.variant = variant(MaskMode::kCustom);
  c.variant.return_lse = true;
  c.q_lens = {33, 7, 140};
  c.kv_lens = {90, 7, 200};
  c.fully_masked_rows = true;
  c.opt.mainloop = PrefillMainloop::kSm90;
  c.alibi_slopes = random_slopes(c.num_qo_heads, 5);
  run_sm90_alibi(c, 600);
}

// All-zero slopes on the sm90 mainloop, soft cap on (both hold log2-domain logits): the ALiBi
// tile loop and the plain one give the same bits.
TEST(PrefillAlibiSm90Small, ZeroSlopesMatchNoAlibiBitwise) {
  WEFT_REQUIRE_SM90();
  for (bool paged : {true, false}) {
    Case c;
    c.head_dim = 128;
    c.num_qo_heads = 8;
    c.num_kv_heads = 2;
    c.paged = paged;
    c.variant = variant(MaskMode::kCausal, paged ? 90 : -1, 20.f);
    c.variant.return_lse = true;
    c.q_lens = {150, 9};
    c.kv_lens = {200, 300};
    c.opt.mainloop = PrefillMainloop::kSm90;
    expect_zero_slopes_match_no_alibi(c, /*sm90=*/true);
  }
}

}  // namespace
}  // namespace weft::test::prefill
