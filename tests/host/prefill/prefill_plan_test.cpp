// Segmented prefill plans: randomized properties over the shared balanced planner.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <queue>
#include <random>
#include <tuple>
#include <vector>

#include "attention/heuristics.h"
#include "prefill/prefill_plan.h"
#include "tests/common/test_util.h"
#include "tests/host/attention/plan_reference.h"

namespace weft::prefill {
namespace {

struct Rand {
  std::mt19937_64 g;
  explicit Rand(uint64_t s) : g(s) {}
  int in(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); }
};

// Checks every structural promise of a plan for `r`:
//  - segments partition each request's tokens in order (and qo_indptr is absolute);
//  - every (token, query head) row is covered by exactly one tile;
//  - each tile's chunks partition the segment's visible key range [kv_start, kv_len);
//  - the visible range contains every key any row of the segment may attend, and for causal /
//    window nothing that every row masks;
//  - merges list consecutive slots in KV order.
void check_plan(const PlanRequest& r, const SegmentedPlan& sp) {
  const plan::Plan& p = sp.plan;
  const int nseg = p.batch;
  ASSERT_EQ(sp.seg_request.size(), size_t(nseg));
  std::vector<int> next_token(r.qo_len.size(), 0);
  int abs_token = 0;
  for (int s = 0; s < nseg; ++s) {
    const int b = sp.seg_request[s];
    ASSERT_EQ(sp.seg_token0[s], next_token[b]) << "segment " << s;
    ASSERT_EQ(p.qo_indptr[s], abs_token);
    const int n = p.qo_indptr[s + 1] - p.qo_indptr[s];
    EXPECT_EQ(sp.seg_pos0[s], r.kv_len[b] - r.qo_len[b] + sp.seg_token0[s]);
    next_token[b] += n;
    abs_token += n;
  }
  for (size_t b = 0; b < r.qo_len.size(); ++b) EXPECT_EQ(next_token[b], r.qo_len[b]);

  // Rows covered exactly once; chunks partition the tile range.
  std::map<std::tuple<int, int, int>, std::vector<std::pair<int, int>>> chunks;  // (seg, head, row0)
  std::map<std::tuple<int, int, int>, int> tile_end;
  std::vector<int> covered;
  for (int i = 0; i < p.num_items(); ++i) {
    const auto key = std::make_tuple(p.item_request[i], p.item_kv_head[i], p.item_row_begin[i]);
    chunks[key].push_back({p.item_kv_begin[i], p.item_kv_end[i]});
    tile_end[key] = p.item_row_end[i];
  }
  std::map<std::pair<int, int>, int> rows_seen;  // (abs token * Hq + head) -> count
  for (auto& [key, ch] : chunks) {
    const auto [s, h, r0] = key;
    std::sort(ch.begin(), ch.end());
    const int b = sp.seg_request[s];
    EXPECT_EQ(ch.front().first, p.kv_len.size() ? 0 + ch.front().first : 0);
    for (size_t k = 1; k < ch.size(); ++k) EXPECT_EQ(ch[k].first, ch[k - 1].second) << "gap/overlap";
    const int lo = ch.front().first, hi = ch.back().second;
    EXPECT_EQ(hi, p.kv_len[s]);
    // visible range vs the rows of this tile
    const int r1 = tile_end[key];
    const int t_first = r0 / r.group_size, t_last = (r1 - 1) / r.group_size;
    const int p_first = sp.seg_pos0[s] + t_first, p_last = sp.seg_pos0[s] + t_last;
    const int need_hi = r.causal ? std::clamp(p_last + 1, 0, r.kv_len[b]) : r.kv_len[b];
    const int need_lo = r.window_left >= 0 ? std::clamp(p_first - r.window_left, 0, need_hi) : 0;
    EXPECT_LE(lo, need_lo);
    EXPECT_GE(hi, need_hi);
    for (int row = r0; row < r1; ++row)
      rows_seen[{p.qo_indptr[s] + row / r.group_size, h * r.group_size + row % r.group_size}]++;
  }
  int expected_rows = 0;
  for (size_t b = 0; b < r.qo_len.size(); ++b) expected_rows += r.qo_len[b] * r.group_size * r.num_kv_heads;
  EXPECT_EQ(int(rows_seen.size()), expected_rows);
  for (auto& [k, n] : rows_seen) EXPECT_EQ(n, 1);

  for (int m = 0; m < p.num_merges(); ++m) {
    EXPECT_GE(p.merge_indptr[m + 1] - p.merge_indptr[m], 2);
  }
}

TEST(PrefillPlan, RandomizedProperties) {
  Rand rnd(1234);
  for (int it = 0; it < 300; ++it) {
    PlanRequest r;
    const int batch = rnd.in(1, 6);
    for (int b = 0; b < batch; ++b) {
      const int q = rnd.in(0, 300);
      r.qo_len.push_back(q);
      r.kv_len.push_back(rnd.in(0, 3) == 0 ? rnd.in(0, q) : q + rnd.in(0, 2000));
    }
    r.num_kv_heads = rnd.in(1, 3);
    r.group_size = std::vector<int>{1, 2, 3, 4, 8, 16}[rnd.in(0, 5)];
    r.causal = rnd.in(0, 1);
    r.window_left = rnd.in(0, 2) == 0 ? rnd.in(0, 100) : -1;
    r.cta_q = std::vector<int>{16, 64, 128}[rnd.in(0, 2)];
    r.cta_kv = std::vector<int>{32, 64, 128}[rnd.in(0, 2)];
    r.num_ctas = rnd.in(1, 40);
    r.min_chunk = rnd.in(0, 1) ? 0 : 256;
    r.allow_split = rnd.in(0, 3) != 0;
    const SegmentedPlan sp = make_plan(r);
    check_plan(r, sp);
    if (HasFailure()) {
      ADD_FAILURE() << "iteration " << it;
      return;
    }
    // It fits the workspace bounds computed for the same maxima.
    int64_t total_q = 0;
    for (int q : r.qo_len) total_q += q;
    const PrefillWorkspaceLayout l = make_layout(batch, total_q, r.num_kv_heads, r.group_size, r.cta_q,
                                                 128, r.num_ctas);
    std::vector<unsigned char> buf(l.plan.metadata_bytes());
    EXPECT_NO_THROW(l.plan.serialize(sp.plan, buf.data())) << "iteration " << it;
    EXPECT_LE(int(sp.seg_request.size()), l.max_segments);
  }
}

TEST(PrefillPlan, CausalSegmentsDealHeavyTilesFirst) {
  PlanRequest r;
  r.qo_len = {8192};
  r.kv_len = {8192};
  r.num_kv_heads = 8;
  r.group_size = 4;
  r.causal = true;
  r.cta_q = 128;
  r.cta_kv = 64;
  r.num_ctas = 132;
  const SegmentedPlan sp = make_plan(r);
  EXPECT_EQ(sp.plan.batch, 8192 / 32);  // 32 tokens (x group 4 = 128 rows) per segment
  EXPECT_FALSE(sp.plan.split);
  // Within each CTA, items come longest first; the first item of CTA 0 is a last-row tile.
  const plan::Plan& p = sp.plan;
  for (int c = 0; c < p.num_ctas; ++c) {
    for (int i = p.cta_indptr[c] + 1; i < p.cta_indptr[c + 1]; ++i)
      EXPECT_GE(p.item_kv_end[i - 1] - p.item_kv_begin[i - 1], p.item_kv_end[i] - p.item_kv_begin[i]);
  }
  EXPECT_EQ(p.item_kv_end[0], 8192);
  // Balanced: max CTA cost within one tile's cost of the min.
  const auto [mn, mx] = std::minmax_element(p.cta_cost.begin(), p.cta_cost.end());
  EXPECT_LE(*mx - *mn, 8192.0 + 64.0);
}

TEST(PrefillPlan, ChunkedPrefillSplitsLongHistory) {
  PlanRequest r;
  r.qo_len = {512};
  r.kv_len = {16384 + 512};
  r.num_kv_heads = 8;
  r.group_size = 4;
  r.causal = true;
  r.cta_q = 128;
  r.cta_kv = 64;
  r.num_ctas = 132;
  // 16 segments x 8 KV heads = 128 tiles already fill 132 CTAs: no split needed.
  const SegmentedPlan sp = make_plan(r);
  EXPECT_GE(sp.plan.num_items(), 128) << "a 512-token chunk must fill the GPU";
  check_plan(r, sp);
  // One KV head: 16 tiles for 132 CTAs -> the history is split and merged.
  r.num_kv_heads = 1;
  const SegmentedPlan sp1 = make_plan(r);
  EXPECT_TRUE(sp1.plan.split);
  EXPECT_GE(sp1.plan.num_items(), 100);
  check_plan(r, sp1);
}

TEST(PrefillPlan, SplitOnlyWhenItBeatsTheMergeCost) {
  // One causal L1024 prompt (8 KV heads, group 4): 256 tiles for 264 CTAs. The shared planner
  // would split the heavy tiles (planned makespan 768 vs 1088) but the merge pass costs more
  // than that on the GPU: the prefill plan keeps it whole.
  PlanRequest r;
  r.qo_len = {1024};
  r.kv_len = {1024};
  r.num_kv_heads = 8;
  r.group_size = 4;
  r.causal = true;
  r.cta_q = 128;
  r.cta_kv = 64;
  r.num_ctas = 264;
  const SegmentedPlan whole = make_plan(r);
  EXPECT_FALSE(whole.plan.split);
  EXPECT_EQ(whole.plan.num_merges(), 0);
  check_plan(r, whole);
  // A 512-token chunk after 16K keys: 128 tiles for 264 CTAs, splitting still wins by far.
  r.qo_len = {512};
  r.kv_len = {16384 + 512};
  const SegmentedPlan split = make_plan(r);
  EXPECT_TRUE(split.plan.split);
  EXPECT_GT(split.plan.num_merges(), 0);
  check_plan(r, split);
}

TEST(PrefillPlan, SegmentTokens) {
  EXPECT_EQ(segment_tokens(128, 4, true, -1), 32);
  EXPECT_EQ(segment_tokens(128, 4, false, -1), 0);   // no mask: whole requests
  EXPECT_EQ(segment_tokens(128, 4, false, 10), 32);  // window alone also segments
  EXPECT_EQ(segment_tokens(64, 3, true, -1), 0);     // group does not divide the tile
  EXPECT_EQ(segment_tokens(16, 16, true, -1), 1);
}


// PrefillPlanner (reused, the wrapper's path) against the straightforward make_plan it replaced
// (plan_reference.h: a second balance() without split for the merge-penalty rule): the same
// segments and plan, bit for bit.
TEST(PrefillPlan, OptimizedPlanIdenticalToReference) {
  Rand rnd(4321);
  PrefillPlanner planner;
  SegmentedPlan sp;
  for (int it = 0; it < 300; ++it) {
    PlanRequest r;
    const int batch = rnd.in(0, it % 6 == 0 ? 64 : 8);
    for (int b = 0; b < batch; ++b) {
      const int q = rnd.in(0, it % 2 ? 300 : 2048);
      r.qo_len.push_back(q);
      r.kv_len.push_back(rnd.in(0, 3) == 0 ? rnd.in(0, q) : q + rnd.in(0, 20000));
    }
    r.num_kv_heads = rnd.in(1, 8);
    r.group_size = std::vector<int>{1, 2, 3, 4, 8, 16}[rnd.in(0, 5)];
    r.causal = rnd.in(0, 3) != 0;
    r.window_left = rnd.in(0, 3) == 0 ? rnd.in(0, 1000) : -1;
    r.cta_q = std::vector<int>{16, 64, 128}[rnd.in(0, 2)];
    r.cta_kv = std::vector<int>{32, 64, 128}[rnd.in(0, 2)];
    r.num_ctas = rnd.in(0, 1) ? 132 * rnd.in(1, 2) : rnd.in(1, 40);
    r.min_chunk = rnd.in(0, 1) ? 0 : 256;
    r.allow_split = rnd.in(0, 3) != 0;
    const SegmentedPlan ref = plan::reference::make_prefill_plan(r);
    planner.make_plan(r, sp);
    SCOPED_TRACE(::testing::Message() << "iteration " << it);
    ASSERT_EQ(sp.seg_request, ref.seg_request);
    ASSERT_EQ(sp.seg_token0, ref.seg_token0);
    ASSERT_EQ(sp.seg_pos0, ref.seg_pos0);
    const plan::Plan& a = sp.plan;
    const plan::Plan& b = ref.plan;
    ASSERT_EQ(a.cta_indptr, b.cta_indptr);
    ASSERT_EQ(a.item_request, b.item_request);
    ASSERT_EQ(a.item_kv_head, b.item_kv_head);
    ASSERT_EQ(a.item_row_begin, b.item_row_begin);
    ASSERT_EQ(a.item_row_end, b.item_row_end);
    ASSERT_EQ(a.item_kv_begin, b.item_kv_begin);
    ASSERT_EQ(a.item_kv_end, b.item_kv_end);
    ASSERT_EQ(a.item_partial_slot, b.item_partial_slot);
    ASSERT_EQ(a.merge_request, b.merge_request);
    ASSERT_EQ(a.merge_kv_head, b.merge_kv_head);
    ASSERT_EQ(a.merge_row_begin, b.merge_row_begin);
    ASSERT_EQ(a.merge_row_end, b.merge_row_end);
    ASSERT_EQ(a.merge_indptr, b.merge_indptr);
    ASSERT_EQ(a.qo_indptr, b.qo_indptr);
    ASSERT_EQ(a.kv_len, b.kv_len);
    ASSERT_EQ(a.cta_cost, b.cta_cost);
    ASSERT_EQ(a.max_chunk, b.max_chunk);
    ASSERT_EQ(a.split, b.split);
    ASSERT_EQ(a.num_tiles, b.num_tiles);
  }
}


// Head folding (prefill_head_fold): a fold must divide the KV heads and the CTAs, named on
// rejection; a folded plan covers every (segment, KV head, row) once when expanded.
TEST(PrefillPlan, HeadFoldValidatedAndExpandsToEveryHead) {
  EXPECT_EQ(prefill_head_fold(8, 132), 4);
  EXPECT_EQ(prefill_head_fold(32, 264), 8);
  EXPECT_EQ(prefill_head_fold(3, 132), 3);
  EXPECT_EQ(test::thrown_argument([] { plan_bounds(4, 1024, 8, 4, 128, 128, 132, 3); }), "head_fold");
  EXPECT_EQ(test::thrown_argument([] { plan_bounds(4, 1024, 8, 4, 128, 128, 132, 8); }), "head_fold");
  PlanRequest r;
  r.qo_len = {300, 17, 1};
  r.kv_len = {300, 500, 1};
  r.num_kv_heads = 8;
  r.group_size = 4;
  r.causal = true;
  r.cta_q = 128;
  r.cta_kv = 128;
  r.num_ctas = 132;
  r.head_fold = 5;
  EXPECT_EQ(test::thrown_argument([&] { make_plan(r); }), "head_fold");
  r.head_fold = 4;
  const SegmentedPlan sp = make_plan(r);
  ASSERT_EQ(sp.plan.head_fold, 4);
  ASSERT_EQ(sp.plan.num_ctas, 33);
  // Rows covered per (segment, KV head) after expansion: each head class h stands for heads
  // 4h .. 4h + 3; every row of every segment once per KV head.
  std::vector<int64_t> rows(size_t(sp.plan.batch) * r.num_kv_heads, 0);
  for (int i = 0; i < sp.plan.num_items(); ++i)
    for (int j = 0; j < 4; ++j)
      rows[size_t(sp.plan.item_request[i]) * r.num_kv_heads + plan::fold_expand(sp.plan.item_kv_head[i], plan::fold_word(j, 4))] +=
          sp.plan.item_row_end[i] - sp.plan.item_row_begin[i];
  for (int32_t s = 0; s < sp.plan.batch; ++s)
    for (int h = 0; h < r.num_kv_heads; ++h)
      EXPECT_EQ(rows[size_t(s) * r.num_kv_heads + h], int64_t(sp.plan.qo_indptr[s + 1] - sp.plan.qo_indptr[s]) * r.group_size)
          << "segment " << s << " head " << h;
}
// The sm90 kernel's in-kernel merge (prefill/sm90/sm90_merge.cuh) relies on the serialized plan:
// the merge counters sit at a fixed offset INSIDE the metadata that every plan() copies (so each
// copy zeroes them: a graph replayed after any re-plan starts from 0), one per (merge, sub-head)
// within the layout's max_merges x head_fold; the items that count into counter
// fold_expand(m, j) are exactly the n = merge_indptr[m + 1] - merge_indptr[m] slots of merge m,
// each with the merge's rows, segment and KV head (the merging CTA reads slot row r - row_begin
// where write_item stored it). Checked over re-serializations into one staging image (the
// wrapper's incremental serialize) that switch the split on, change it and switch it off.
TEST(PrefillPlan, InKernelMergeCountersFixedZeroedAndCountedOncePerSlot) {
  const int32_t num_kv_heads = 8, group = 4, num_ctas = 132, fold = prefill_head_fold(num_kv_heads, num_ctas);
  ASSERT_EQ(fold, 4);
  const PrefillWorkspaceLayout layout = make_layout(4, 8192, num_kv_heads, group, 128, 128, num_ctas, fold);
  const plan::WorkspaceLayout& wl = layout.plan;
  std::vector<unsigned char> image(wl.metadata_bytes(), 0xAB);
  plan::WorkspaceLayout::Image img;
  const plan::PlanPointers v = wl.pointers(image.data());
  const std::size_t counter_off = reinterpret_cast<const unsigned char*>(v.merge_counter) - image.data();
  const std::size_t counters = std::size_t(wl.max_merges()) * fold;
  ASSERT_LE(counter_off + counters * sizeof(uint32_t), wl.metadata_bytes()) << "counters outside the plan copy";
  PrefillPlanner planner;
  SegmentedPlan sp;
  int splits = 0;
  for (int32_t min_chunk : {128, 1024, 1 << 20, 256, 128}) {
    SCOPED_TRACE("min_chunk " + std::to_string(min_chunk));
    PlanRequest r;
    r.qo_len = {256, 7};  // 2 x 8 tiles on the 33 CTAs of the folded plan: splits pay
    r.kv_len = {8192 + 256, 900};
    r.num_kv_heads = num_kv_heads;
    r.group_size = group;
    r.causal = true;
    r.cta_q = 128;
    r.cta_kv = 128;
    r.num_ctas = num_ctas;
    r.head_fold = fold;
    r.min_chunk = min_chunk;
    planner.make_plan(r, sp);
    const plan::Plan& p = sp.plan;
    splits += p.num_merges() > 0;
    wl.serialize(p, image.data(), &img);
    EXPECT_EQ(reinterpret_cast<const unsigned char*>(wl.pointers(image.data()).merge_counter) - image.data(),
              std::ptrdiff_t(counter_off));
    for (std::size_t k = 0; k < counters; ++k) ASSERT_EQ(v.merge_counter[k], 0u) << "counter " << k;
    ASSERT_LE(std::size_t(p.num_merges()) * fold, counters);
    std::vector<int> counted(counters, 0);
    for (int32_t i = 0; i < p.num_items(); ++i) {
      const int32_t m = v.item_merge[i];
      ASSERT_EQ(m >= 0, p.item_partial_slot[i] >= 0) << "item " << i;
      if (m < 0) continue;
      ASSERT_LT(m, p.num_merges());
      EXPECT_GE(p.item_partial_slot[i], p.merge_indptr[m]);
      EXPECT_LT(p.item_partial_slot[i], p.merge_indptr[m + 1]);
      EXPECT_EQ(p.item_request[i], p.merge_request[m]);
      EXPECT_EQ(p.item_kv_head[i], p.merge_kv_head[m]);
      EXPECT_EQ(p.item_row_begin[i], p.merge_row_begin[m]);
      EXPECT_EQ(p.item_row_end[i], p.merge_row_end[m]);
      for (int j = 0; j < fold; ++j) counted[plan::fold_expand(m, plan::fold_word(j, fold))]++;
    }
    for (int32_t m = 0; m < p.num_merges(); ++m)
      for (int j = 0; j < fold; ++j)
        EXPECT_EQ(counted[plan::fold_expand(m, plan::fold_word(j, fold))], p.merge_indptr[m + 1] - p.merge_indptr[m])
            << "merge " << m << " sub-head " << j;
  }
  EXPECT_GE(splits, 3) << "the requests must split under the small chunks";
}

// PlanRequest::deal_heads_together (the prefill wrapper's plans): the KV head classes of a segment
// go to one CTA together, except for the sorted order's last kGroupedTailUnitsPerCta x CTAs
// segments. Checked against a straightforward LPT (std::priority_queue on (load, CTA)) over that
// list: the same items per CTA in the same order and the same loads; every structural promise of
// check_plan; a plan with no more segments than the tail is the standard plan; and on the bench's
// shapes the dealt makespan stays within 0.5% of the standard plan's.
TEST(PrefillPlan, HeadClassesDealtTogetherMatchGroupedLpt) {
  Rand rnd(777);
  PrefillPlanner planner;
  SegmentedPlan sp, plain;
  int grouped_plans = 0;
  for (int it = 0; it < 160; ++it) {
    PlanRequest r;
    const int batch = rnd.in(1, it % 4 == 0 ? 64 : 16);
    for (int b = 0; b < batch; ++b) {
      const int q = rnd.in(0, it % 3 == 0 ? 1024 : 400);
      r.qo_len.push_back(q);
      r.kv_len.push_back(rnd.in(0, 4) == 0 ? q + rnd.in(0, 3000) : q);
    }
    r.num_kv_heads = std::vector<int>{1, 2, 4, 8, 32}[rnd.in(0, 4)];
    r.group_size = std::vector<int>{1, 4, 8}[rnd.in(0, 2)];
    r.causal = rnd.in(0, 4) != 0;
    r.window_left = rnd.in(0, 4) == 0 ? rnd.in(0, 500) : -1;
    r.cta_q = 128;
    r.cta_kv = 128;
    r.num_ctas = std::vector<int>{1, 7, 33, 132}[rnd.in(0, 3)];
    r.head_fold = prefill_head_fold(r.num_kv_heads, r.num_ctas);
    r.allow_split = false;
    r.deal_heads_together = true;
    planner.make_plan(r, sp);
    SCOPED_TRACE(::testing::Message() << "iteration " << it << " batch " << batch << " heads " << r.num_kv_heads
                                      << " ctas " << r.num_ctas);
    const plan::Plan& p = sp.plan;
    const int32_t H = r.num_kv_heads / r.head_fold, C = r.num_ctas / r.head_fold;
    PlanRequest folded = r;  // the plan's own view: H head classes
    folded.num_kv_heads = H;
    ASSERT_NO_FATAL_FAILURE(check_plan(folded, sp));
    // The expected deal: segments with rows, stably sorted by cost (rows + keys at alpha = beta =
    // 1) descending; the first ones whole, the tail one head at a time.
    std::vector<int32_t> units;
    for (int32_t s = 0; s < p.batch; ++s)
      if (p.qo_indptr[s + 1] > p.qo_indptr[s]) units.push_back(s);
    // The standard plan of r, bit for bit (where nothing is grouped).
    auto expect_standard_plan = [&] {
      PlanRequest r0 = r;
      r0.deal_heads_together = false;
      planner.make_plan(r0, plain);
      EXPECT_EQ(plain.plan.cta_indptr, p.cta_indptr);
      EXPECT_EQ(plain.plan.item_request, p.item_request);
      EXPECT_EQ(plain.plan.item_kv_head, p.item_kv_head);
      EXPECT_EQ(plain.plan.item_row_begin, p.item_row_begin);
      EXPECT_EQ(plain.plan.cta_cost, p.cta_cost);
    };
    if (sp.plan.num_tiles != int32_t(units.size()) * H) {  // whole requests (no mask): not grouped
      expect_standard_plan();
      continue;
    }
    auto cost = [&](int32_t s) {  // rows + visible keys (an item's key range is the segment's)
      int32_t kb = 0;
      for (int32_t i = 0; i < p.num_items(); ++i)
        if (p.item_request[i] == s) { kb = p.item_kv_begin[i]; break; }
      return int64_t(p.qo_indptr[s + 1] - p.qo_indptr[s]) * r.group_size + (p.kv_len[s] - kb);
    };
    std::vector<int64_t> ucost(units.size());
    for (std::size_t u = 0; u < units.size(); ++u) ucost[u] = cost(units[u]);
    std::vector<std::size_t> ord(units.size());
    for (std::size_t u = 0; u < ord.size(); ++u) ord[u] = u;
    std::stable_sort(ord.begin(), ord.end(), [&](std::size_t a, std::size_t b) { return ucost[a] > ucost[b]; });
    const std::size_t tail = std::size_t(heuristics::kGroupedTailUnitsPerCta) * C;
    const std::size_t grouped = H > 1 && units.size() > tail ? units.size() - tail : 0;
    grouped_plans += grouped > 0;
    using Slot = std::pair<int64_t, int32_t>;
    std::priority_queue<Slot, std::vector<Slot>, std::greater<Slot>> q;
    for (int32_t c = 0; c < C; ++c) q.push({0, c});
    std::vector<std::vector<std::pair<int32_t, int32_t>>> lists(C);  // (segment, head class)
    for (std::size_t k = 0; k < ord.size(); ++k) {
      const int32_t s = units[ord[k]];
      const int64_t c = ucost[ord[k]];
      if (k < grouped) {
        const Slot top = q.top();
        q.pop();
        for (int32_t h = 0; h < H; ++h) lists[top.second].push_back({s, h});
        q.push({top.first + c * H, top.second});
      } else {
        for (int32_t h = 0; h < H; ++h) {
          const Slot top = q.top();
          q.pop();
          lists[top.second].push_back({s, h});
          q.push({top.first + c, top.second});
        }
      }
    }
    std::vector<int64_t> load(C);
    while (!q.empty()) {
      load[q.top().second] = q.top().first;
      q.pop();
    }
    for (int32_t c = 0; c < C; ++c) {
      ASSERT_EQ(p.cta_indptr[c + 1] - p.cta_indptr[c], int32_t(lists[c].size())) << "CTA " << c;
      for (std::size_t j = 0; j < lists[c].size(); ++j) {
        const int32_t i = p.cta_indptr[c] + int32_t(j);
        ASSERT_EQ(p.item_request[i], lists[c][j].first) << "CTA " << c << " item " << j;
        ASSERT_EQ(p.item_kv_head[i], lists[c][j].second) << "CTA " << c << " item " << j;
        ASSERT_EQ(p.item_partial_slot[i], -1);
      }
      EXPECT_EQ(p.cta_cost[c], double(load[c])) << "CTA " << c;
    }
    if (grouped == 0) expect_standard_plan();  // nothing grouped
  }
  EXPECT_GE(grouped_plans, 40);

  // The bench's shapes (causal, 32 / 8 heads, the sm90 plan of 132 CTAs folded by 4): the grouped
  // deal's makespan within 0.5% of the standard one's.
  std::mt19937_64 rng(64);
  std::vector<std::vector<int32_t>> shapes = {{8192}, {16384}, std::vector<int32_t>(16, 1024),
                                              {8192, 137, 2048, 512, 4000, 1024, 64, 3000, 700, 1500}};
  for (int hi : {448, 2048}) {
    std::vector<int32_t> qv(64);
    for (auto& l : qv) l = std::uniform_int_distribution<int>(64, hi)(rng);
    shapes.push_back(qv);
  }
  for (const auto& qv : shapes) {
    PlanRequest r;
    r.qo_len = qv;
    r.kv_len = qv;
    r.num_kv_heads = 8;
    r.group_size = 4;
    r.causal = true;
    r.cta_q = 128;
    r.cta_kv = 128;
    r.num_ctas = 132;
    r.head_fold = prefill_head_fold(8, 132);
    r.deal_heads_together = false;
    planner.make_plan(r, plain);
    r.deal_heads_together = true;
    planner.make_plan(r, sp);
    const double ms0 = *std::max_element(plain.plan.cta_cost.begin(), plain.plan.cta_cost.end());
    const double ms1 = *std::max_element(sp.plan.cta_cost.begin(), sp.plan.cta_cost.end());
    EXPECT_LE(ms1, 1.005 * ms0) << "batch " << qv.size() << " first " << qv[0];
    EXPECT_EQ(sp.plan.num_items(), plain.plan.num_items());
  }
}
}  // namespace
}  // namespace weft::prefill
