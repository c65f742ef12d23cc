// The Hopper (sm_90a) prefill mainloop (src/prefill/sm90/) against the float64 reference:
// fresh random inputs, NaN-poisoned outputs, lengths off every 128-row / 128-key tile, GQA 1/4/8,
// causal and not, ragged and paged, LSE checked, and bitwise determinism over two runs.
// Runs only on a compute capability 9.0 device (skips elsewhere); each case asserts that the
// wrapper actually launched the sm90 mainloop (sm90::launch_count()).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "prefill/sm90/sm90_launch.h"
#include "prefill_case.h"

namespace weft::test::prefill {
namespace {

AttentionVariant mask_of(bool causal) {
  AttentionVariant v;
  v.mask = causal ? MaskMode::kCausal : MaskMode::kNone;
  v.return_lse = true;
  return v;
}

// Plan + run + reference check, then a second run on re-poisoned outputs must give the same bits.
void run_sm90_case(const Case& c, uint64_t salt, bool expect_sm90 = true) {
  Prepared p;
  prepare(p, c, salt);
  BatchPrefillWrapper w;
  const uint64_t launches = weft::prefill::sm90::launch_count();
  plan_and_run(w, p);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << c.describe();
  if (expect_sm90) {
    ASSERT_EQ(weft::prefill::sm90::launch_count(), launches + 1) << "sm90 mainloop not launched: " << c.describe();
    ASSERT_EQ(w.plan_info().cta_q, 128) << c.describe();
  }
  check_against_reference(p);
  const std::vector<uint16_t> o1 = download_out(p);
  const std::vector<float> l1 = download_lse(p);
  plan_and_run(w, p);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << c.describe();
  const std::vector<uint16_t> o2 = download_out(p);
  const std::vector<float> l2 = download_lse(p);
  EXPECT_EQ(0, std::memcmp(o1.data(), o2.data(), o1.size() * sizeof(uint16_t))) << "O not deterministic: " << c.describe();
  EXPECT_EQ(0, std::memcmp(l1.data(), l2.data(), l1.size() * sizeof(float))) << "LSE not deterministic: " << c.describe();
}

// Single requests whose lengths fall off every tile boundary, both masks, GQA 1/4/8, ragged.
TEST(PrefillSm90, LengthsOffTilesRagged) {
  WEFT_REQUIRE_SM90();
  int i = 0;
  for (int len : {1, 63, 127, 129, 1000}) {
    for (int group : {1, 4, 8}) {
      for (bool causal : {true, false}) {
        Case c;
        c.q_lens = {len};
        c.kv_lens = {len};
        c.num_kv_heads = 2;
        c.num_qo_heads = 2 * group;
        c.paged = false;
        c.variant = mask_of(causal);
        c.dtype = i % 2 ? DType::kFloat16 : DType::kBFloat16;
        // A single short request packs fewer than 65 rows at group 1: the heuristic then picks
        // a small FA2 tile, so force the 128-row tile (the sm90 mainloop) for those.
        c.opt.cta_q = 128;
        SCOPED_TRACE(c.describe());
        run_sm90_case(c, i++);
      }
    }
  }
}

// Append / chunked shapes: queries shorter than the keys (bottom-right causal), several
// requests of mixed lengths in one batch, paged page 16 / 8 (NHD and HND) and ragged.
TEST(PrefillSm90, BatchesPagedAndRagged) {
  WEFT_REQUIRE_SM90();
  int i = 0;
  for (bool paged : {true, false}) {
    for (int group : {1, 4, 8}) {
      for (bool causal : {true, false}) {
        Case c;
        c.q_lens = {129, 1, 300, 127, 63};
        c.kv_lens = {129, 700, 555, 1000, 63};
        c.num_kv_heads = 2;
        c.num_qo_heads = 2 * group;
        c.paged = paged;
        c.page_size = i % 3 == 2 ? 8 : 16;  // page 8: two pieces per 16-key k-step of P V
        c.layout = i % 4 < 2 ? KVLayout::kNHD : KVLayout::kHND;
        c.variant = mask_of(causal);
        c.dtype = i % 3 == 1 ? DType::kFloat16 : DType::kBFloat16;
        c.opt.cta_q = 128;
        SCOPED_TRACE(c.describe());
        run_sm90_case(c, 100 + i++);
      }
    }
  }
}

// Long: 4096 + 17 tokens, causal and not, GQA 4, split-KV allowed (the planner may split:
// partial slots + merge), and a paged variant with page 64.
TEST(PrefillSm90, Long4113) {
  WEFT_REQUIRE_SM90();
  int i = 0;
  for (bool causal : {true, false}) {
    Case c;
    c.q_lens = {4096 + 17};
    c.kv_lens = {4096 + 17};
    c.num_qo_heads = 4;
    c.num_kv_heads = 1;
    c.paged = !causal;
    c.page_size = 64;
    c.variant = mask_of(causal);
    SCOPED_TRACE(c.describe());
    run_sm90_case(c, 200 + i++);
  }
}

// Chunked prefill: a short chunk against a long history (the plan splits the keys: partial
// slots and the merge kernel), and empty / tiny requests (kv_len 0: O = 0, LSE = -inf).
TEST(PrefillSm90, ChunkedSplitAndEmpty) {
  WEFT_REQUIRE_SM90();
  {
    Case c;
    c.q_lens = {512};
    c.kv_lens = {4096 + 512};
    c.num_qo_heads = 8;
    c.num_kv_heads = 1;
    c.paged = true;
    c.page_size = 16;
    c.variant = mask_of(true);
    SCOPED_TRACE(c.describe());
    run_sm90_case(c, 300);
  }
  {
    Case c;
    c.q_lens = {0, 70, 3, 100, 0};
    c.kv_lens = {5, 0, 3, 250, 0};
    c.num_qo_heads = 8;
    c.num_kv_heads = 2;
    c.paged = false;
    c.variant = mask_of(true);
    c.opt.cta_q = 128;
    SCOPED_TRACE(c.describe());
    run_sm90_case(c, 301);
  }
}

// Variants through the shared mask functions: sliding window, soft-cap, custom mask (with fully
// masked rows: O = 0, LSE = -inf).
TEST(PrefillSm90, WindowSoftcapCustom) {
  WEFT_REQUIRE_SM90();
  {
    Case c;
    c.q_lens = {300, 77};
    c.kv_lens = {700, 77};
    c.num_qo_heads = 8;
    c.num_kv_heads = 2;
    c.paged = false;
    c.variant = mask_of(true);
    c.variant.window_left = 200;
    c.opt.cta_q = 128;
    SCOPED_TRACE(c.describe());
    run_sm90_case(c, 400);
  }
  {
    Case c;
    c.q_lens = {257};
    c.kv_lens = {400};
    c.num_qo_heads = 4;
    c.num_kv_heads = 4;
    c.paged = true;
    c.variant = mask_of(false);
    c.variant.logits_soft_cap = 30.f;
    c.opt.cta_q = 128;
    SCOPED_TRACE(c.describe());
    run_sm90_case(c, 401);
  }
  {
    Case c;
    c.q_lens = {150, 40};
    c.kv_lens = {260, 190};
    c.num_qo_heads = 8;
    c.num_kv_heads = 2;
    c.paged = false;
    c.variant.mask = MaskMode::kCustom;
    c.variant.return_lse = true;
    c.fully_masked_rows = true;
    c.opt.cta_q = 128;
    SCOPED_TRACE(c.describe());
    run_sm90_case(c, 402);
  }
}

// head_dim 64 (same kernel, one 64-column half): lengths off the tiles, GQA 1 and 8, both masks,
// ragged and paged (page 16 HND / page 32 NHD), f16 and bf16.
TEST(PrefillSm90, HeadDim64) {
  WEFT_REQUIRE_SM90();
  int i = 0;
  for (int len : {1, 129, 1000}) {
    for (int group : {1, 8}) {
      for (bool causal : {true, false}) {
        Case c;
        c.q_lens = {len, 63};
        c.kv_lens = {len, 200};
        c.num_kv_heads = 2;
        c.num_qo_heads = 2 * group;
        c.head_dim = 64;
        c.paged = i % 2 == 0;
        c.page_size = i % 4 == 0 ? 16 : 32;
        c.layout = i % 4 == 0 ? KVLayout::kHND : KVLayout::kNHD;
        c.variant = mask_of(causal);
        c.dtype = i % 3 == 0 ? DType::kFloat16 : DType::kBFloat16;
        c.opt.cta_q = 128;
        SCOPED_TRACE(c.describe());
        run_sm90_case(c, 600 + i++);
      }
    }
  }
}

// head_dim 256 (128 x 64 tiles, two stages: sm90_launch.h block_n): lengths off the 64-key and
// 128-row tiles, GQA 1/4/8, both masks, ragged and paged (page 16 NHD / 64 HND / 128 NHD, the
// last a multiple of the 64-key stage), f16 and bf16.
TEST(PrefillSm90, HeadDim256) {
  WEFT_REQUIRE_SM90();
  int i = 0;
  for (int len : {1, 65, 1000}) {
    for (int group : {1, 4, 8}) {
      for (bool causal : {true, false}) {
        Case c;
        c.q_lens = {len, 63};
        c.kv_lens = {len + 7, 200};
        c.num_kv_heads = 2;
        c.num_qo_heads = 2 * group;
        c.head_dim = 256;
        c.paged = i % 3 != 0;
        c.page_size = i % 3 == 1 ? 16 : (i % 2 ? 64 : 128);
        c.layout = i % 4 == 1 ? KVLayout::kHND : KVLayout::kNHD;
        c.variant = mask_of(causal);
        c.dtype = i % 2 == 0 ? DType::kFloat16 : DType::kBFloat16;
        c.opt.cta_q = 128;
        SCOPED_TRACE(c.describe());
        run_sm90_case(c, 700 + i++);
      }
    }
  }
}

// head_dim 256 without a forced tile: more than 64 packed rows per request (1500 tokens x group 4)
// takes the sm90 mainloop by default; paged page 16, causal, chunked-style second request.
TEST(PrefillSm90, HeadDim256DefaultTile) {
  WEFT_REQUIRE_SM90();
  Case c;
  c.q_lens = {1500, 900};
  c.kv_lens = {1500, 2100};
  c.num_kv_heads = 2;
  c.num_qo_heads = 8;
  c.head_dim = 256;
  c.paged = true;
  c.page_size = 16;
  c.variant = mask_of(true);
  SCOPED_TRACE(c.describe());
  run_sm90_case(c, 750);
}

// head_dim 256 with a forced 128-row tile exists only as the sm90 tile: pinned to FA2 it is
// rejected before anything runs.
TEST(PrefillSm90, HeadDim256Forced128OnFa2Rejected) {
  WEFT_REQUIRE_SM90();
  Case c;
  c.q_lens = {300};
  c.kv_lens = {300};
  c.num_qo_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 256;
  c.paged = false;
  c.variant = mask_of(true);
  c.opt.cta_q = 128;
  c.opt.mainloop = PrefillMainloop::kFA2;
  Prepared p;
  prepare(p, c, 760);
  BatchPrefillWrapper w;
  EXPECT_THROW(plan_and_run(w, p), Error);
}

// PrefillPlanOptions::deal_heads_together (the default): a batch with more segments than the
// one-tile-at-a-time tail (48 causal prompts of 64..320 tokens: ~260 segments of 32 tokens for
// Llama-3-8B's 32 / 8 heads, 2 head classes on the 33 CTAs of the folded sm90 plan): against the
// reference, and bit for bit the output of the plan without the option (each tile is computed
// whole by one CTA either way). Since 7213575 the sm90 plans deal the head classes in turn
// (heuristics::prefill_heads_in_turn), which takes precedence over deal_heads_together: both runs
// here are that deal, so this checks the in-turn plan of a many-segment batch against the
// reference and that the option leaves the sm90 plan unchanged (the grouped deal itself:
// PrefillPlan.HeadClassesDealtTogetherMatchGroupedLpt, host).
TEST(PrefillSm90, HeadClassesDealtTogetherSameBits) {
  WEFT_REQUIRE_SM90();
  Case c;
  uint64_t x = 12345;
  for (int b = 0; b < 48; ++b) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    const int32_t len = 64 + static_cast<int32_t>((x >> 33) % 257);
    c.q_lens.push_back(len);
    c.kv_lens.push_back(len);
  }
  c.num_kv_heads = 8;
  c.num_qo_heads = 32;
  c.paged = false;
  c.variant = mask_of(true);
  c.opt.deal_heads_together = true;
  Prepared p;
  prepare(p, c, 91);
  BatchPrefillWrapper w;
  plan_and_run(w, p);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_TRUE(w.plan_info().sm90);
  ASSERT_FALSE(w.plan_info().split);
  check_against_reference(p);
  const std::vector<uint16_t> o1 = download_out(p);
  const std::vector<float> l1 = download_lse(p);
  const int32_t items = w.plan_info().num_items;
  p.c.opt.deal_heads_together = false;
  plan_and_run(w, p);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(w.plan_info().num_items, items);
  const std::vector<uint16_t> o2 = download_out(p);
  const std::vector<float> l2 = download_lse(p);
  EXPECT_EQ(0, std::memcmp(o1.data(), o2.data(), o1.size() * sizeof(uint16_t))) << "O differs between the deals";
  EXPECT_EQ(0, std::memcmp(l1.data(), l2.data(), l1.size() * sizeof(float))) << "LSE differs between the deals";
}

// PrefillPlanOptions::mainloop = kFA2 keeps the FA2 kernel (the fallback) on the same device.
TEST(PrefillSm90, PinnedFa2Fallback) {
  WEFT_REQUIRE_SM90();
  Case c;
  c.opt.mainloop = PrefillMainloop::kFA2;
  c.q_lens = {300};
  c.kv_lens = {300};
  c.num_qo_heads = 8;
  c.num_kv_heads = 2;
  c.paged = false;
  c.variant = mask_of(true);
  Prepared p;
  prepare(p, c, 500);
  BatchPrefillWrapper w;
  const uint64_t launches = weft::prefill::sm90::launch_count();
  plan_and_run(w, p);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(w.plan_info().cta_kv, 64);
  EXPECT_EQ(weft::prefill::sm90::launch_count(), launches);
  check_against_reference(p);
}

}  // namespace
}  // namespace weft::test::prefill

namespace weft::test::prefill {
namespace {

// In-kernel merge (sm90_merge.cuh: the CTA that counts a split tile's last slot merges it; no
// merge kernel). A chunked step (256 new tokens on 2048 of history, GQA 4, 2 KV heads: a
// head-folded plan, 8 query tiles on 66 CTAs) planned three ways on the sm90 mainloop: no split
// (min_chunk above every key range), split into >= 128-key chunks and into >= 512-key chunks
// (different items, same merges).
// Each: correct against the float64 reference, the same bits over several eager runs. Then a
// graph captured on the unsplit plan is replayed after re-plans that switch the split on, off
// and change it: each replay must give the eager bits of its plan (a counter left non-zero by a
// replay would leave the next split plan's tiles unmerged: NaN-poisoned rows).
TEST(PrefillSm90, InKernelMergeDeterministicAndGraphReplan) {
  WEFT_REQUIRE_SM90();
  for (bool paged : {true, false}) {
    Case c;
    c.q_lens = {256};
    c.kv_lens = {2048 + 256};
    c.num_qo_heads = 8;
    c.num_kv_heads = 2;
    c.paged = paged;
    c.page_size = 16;
    c.variant = mask_of(true);
    c.opt.cta_q = 128;
    c.opt.mainloop = PrefillMainloop::kSm90;
    SCOPED_TRACE(c.describe());
    Prepared p;
    prepare(p, c, 800 + paged);
    cudaStream_t s;
    WEFT_TEST_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    BatchPrefillWrapper w;
    // Host planner at these shapes (132 SMs, fold 2): 8 items unsplit; 48 items / 8 merges at
    // min_chunk 128; 40 items / 8 merges at 512 (1024 no longer splits).
    const int32_t chunks[3] = {1 << 20, 128, 512};
    std::vector<uint16_t> eager_o[3];
    std::vector<float> eager_l[3];
    PrefillPlanInfo info[3];
    for (int k = 0; k < 3; ++k) {
      SCOPED_TRACE("min_chunk " + std::to_string(chunks[k]));
      p.c.opt.min_chunk = chunks[k];
      const uint64_t launches = weft::prefill::sm90::launch_count();
      plan_only(w, p, s);
      info[k] = w.plan_info();
      ASSERT_TRUE(info[k].sm90);
      ASSERT_EQ(info[k].split, k > 0) << "the case must " << (k > 0 ? "" : "not ") << "split";
      if (k > 0) ASSERT_GT(info[k].num_merges, 0);
      for (int rep = 0; rep < 4; ++rep) {
        p.d_out.poison(s);
        p.d_lse.poison(s);
        run_only(w, p, s);
        WEFT_TEST_CUDA(cudaStreamSynchronize(s));
        if (rep == 0) {
          check_against_reference(p);
          eager_o[k] = download_out(p);
          eager_l[k] = download_lse(p);
        } else {
          EXPECT_EQ(download_out(p), eager_o[k]) << "O not deterministic, run " << rep;
          const std::vector<float> l = download_lse(p);
          EXPECT_EQ(0, std::memcmp(l.data(), eager_l[k].data(), l.size() * sizeof(float)))
              << "LSE not deterministic, run " << rep;
        }
      }
      EXPECT_EQ(weft::prefill::sm90::launch_count(), launches + 4);
    }
    EXPECT_NE(info[1].num_items, info[2].num_items) << "the two splits must differ";

    p.c.opt.min_chunk = chunks[0];
    plan_only(w, p, s);
    cudaGraph_t g;
    WEFT_TEST_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    run_only(w, p, s);
    WEFT_TEST_CUDA(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t exec;
    WEFT_TEST_CUDA(cudaGraphInstantiate(&exec, g, 0));
    for (int k : {0, 1, 0, 2, 1, 1}) {
      SCOPED_TRACE("replay, min_chunk " + std::to_string(chunks[k]));
      p.c.opt.min_chunk = chunks[k];
      plan_only(w, p, s);
      p.d_out.poison(s);
      p.d_lse.poison(s);
      WEFT_TEST_CUDA(cudaGraphLaunch(exec, s));
      WEFT_TEST_CUDA(cudaStreamSynchronize(s));
      EXPECT_EQ(download_out(p), eager_o[k]) << "replay differs from the eager run of the same plan";
      const std::vector<float> l = download_lse(p);
      EXPECT_EQ(0, std::memcmp(l.data(), eager_l[k].data(), l.size() * sizeof(float)));
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
    cudaStreamDestroy(s);
  }
}

}  // namespace
}  // namespace weft::test::prefill
