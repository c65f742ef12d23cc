// The optimized planner (plan::Planner, serialize with an Image) against the straightforward
// version it replaced (plan_reference.h, kept verbatim): identical plans, field by field and
// makespan bit for bit, and byte-identical workspace images, on random batches. One Planner, one
// Plan and one image buffer are reused across all iterations (what a wrapper does), so stale state
// from a previous, larger or split plan would show up here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "attention/plan/balance.h"
#include "tests/common/test_util.h"
#include "tests/host/attention/plan_reference.h"

namespace weft::plan {
namespace {

void expect_same_plan(const Plan& a, const Plan& b) {
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.num_ctas, b.num_ctas);
  EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
  EXPECT_EQ(a.group_size, b.group_size);
  EXPECT_EQ(a.tile_q, b.tile_q);
  EXPECT_EQ(a.batch, b.batch);
  EXPECT_EQ(a.max_chunk, b.max_chunk);
  EXPECT_EQ(a.split, b.split);
  EXPECT_EQ(a.num_tiles, b.num_tiles);
  EXPECT_EQ(a.cta_indptr, b.cta_indptr);
  EXPECT_EQ(a.item_request, b.item_request);
  EXPECT_EQ(a.item_kv_head, b.item_kv_head);
  EXPECT_EQ(a.item_row_begin, b.item_row_begin);
  EXPECT_EQ(a.item_row_end, b.item_row_end);
  EXPECT_EQ(a.item_kv_begin, b.item_kv_begin);
  EXPECT_EQ(a.item_kv_end, b.item_kv_end);
  EXPECT_EQ(a.item_partial_slot, b.item_partial_slot);
  EXPECT_EQ(a.merge_request, b.merge_request);
  EXPECT_EQ(a.merge_kv_head, b.merge_kv_head);
  EXPECT_EQ(a.merge_row_begin, b.merge_row_begin);
  EXPECT_EQ(a.merge_row_end, b.merge_row_end);
  EXPECT_EQ(a.merge_indptr, b.merge_indptr);
  EXPECT_EQ(a.qo_indptr, b.qo_indptr);
  EXPECT_EQ(a.kv_len, b.kv_len);
  ASSERT_EQ(a.cta_cost.size(), b.cta_cost.size());
  EXPECT_EQ(0, std::memcmp(a.cta_cost.data(), b.cta_cost.data(), a.cta_cost.size() * sizeof(double)))
      << "planned CTA loads differ in some bit";
}

std::vector<int32_t> lengths(test::Rng& rng, int n, int kind) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) {
    switch (kind) {
      case 0: v[i] = static_cast<int32_t>(rng.randint(0, 32768)); break;           // random
      case 1: v[i] = i % 2 ? 32768 : 512; break;                                    // bimodal
      case 2: v[i] = 4096; break;                                                   // uniform
      case 3: v[i] = static_cast<int32_t>(std::pow(rng.uniform(0, 1), 4) * 65536); break;  // skewed
      default: v[i] = static_cast<int32_t>(rng.randint(0, 3)); break;               // tiny, zeros
    }
  }
  return v;
}

TEST(PlanIdentity, PlannerMatchesReferenceOnRandomBatches) {
  test::Rng rng = test::Rng::for_current_test();
  const int groups[] = {1, 2, 3, 4, 8, 16, 24, 32, 64};
  Planner planner;  // reused: warm buffers, state from the previous iteration
  Plan plan;
  std::vector<unsigned char> img_new, img_ref;
  WorkspaceLayout::Image image;
  PlanBounds last_bounds{};
  for (int iter = 0; iter < 400; ++iter) {
    const bool prefill = iter % 4 == 3;
    const int batch = static_cast<int>(rng.randint(0, iter % 7 == 0 ? 300 : 64));
    BatchShape s;
    s.kv_len = lengths(rng, batch, static_cast<int>(rng.randint(0, 4)));
    s.qo_len.assign(batch, 1);
    if (prefill)
      for (int b = 0; b < batch; ++b) s.qo_len[b] = static_cast<int32_t>(rng.randint(0, std::min(s.kv_len[b], 300)));
    if (iter % 3 == 0) {
      s.kv_start.resize(batch);
      for (int b = 0; b < batch; ++b) s.kv_start[b] = std::max(0, s.kv_len[b] - int32_t(rng.randint(1, 5000)));
    }
    BalanceConfig cfg;
    cfg.num_ctas = static_cast<int32_t>(rng.randint(0, 3) == 0 ? rng.randint(1, 8) : rng.randint(1, 300));
    cfg.num_kv_heads = static_cast<int32_t>(rng.randint(1, 8));
    cfg.group_size = groups[rng.randint(0, 8)];
    cfg.row_tiles_together = rng.randint(0, 1) == 1;
    cfg.tile_q = prefill ? static_cast<int32_t>(16 << rng.randint(0, 3)) : static_cast<int32_t>(16 << rng.randint(0, 1));
    cfg.kv_granularity = static_cast<int32_t>(1 << rng.randint(0, 7));
    cfg.min_chunk = static_cast<int32_t>(rng.randint(0, 1) ? 0 : 256);
    const double alphas[] = {0.0, 1.0, 0.5, 4.0, 0.37};  // 0.37, 1.3: non-integral costs (double path)
    const double betas[] = {1.0, 1.0, 0.5, 1.3};
    cfg.alpha = alphas[rng.randint(0, 4)];
    cfg.beta = betas[rng.randint(0, 3)];
    cfg.min_gain = rng.randint(0, 1) ? 0.1 : 0.0;
    cfg.allow_split = rng.randint(0, 5) != 0;
    SCOPED_TRACE(::testing::Message() << "iter " << iter << " batch " << batch << " ctas " << cfg.num_ctas
                                      << " heads " << cfg.num_kv_heads << " group " << cfg.group_size);
    const Plan ref = reference::balance(s, cfg);
    planner.balance(s, cfg, plan);
    ASSERT_NO_FATAL_FAILURE(expect_same_plan(plan, ref));
    if (HasFailure()) return;
    // The convenience function too.
    ASSERT_NO_FATAL_FAILURE(expect_same_plan(balance(s, cfg), ref));

    // Images: a layout that fits, the image buffer reused while the layout stays the same.
    PlanBounds bounds{std::max(batch, 1), std::max(ref.num_tiles, 1), cfg.num_ctas, cfg.tile_q, 128};
    if (iter % 5 != 0 && last_bounds.num_ctas == bounds.num_ctas && last_bounds.tile_q == bounds.tile_q &&
        last_bounds.max_batch >= bounds.max_batch && last_bounds.max_tiles >= bounds.max_tiles) {
      bounds = last_bounds;  // same buffer as the previous iteration: incremental clearing
    } else {
      bounds.max_batch += static_cast<int32_t>(rng.randint(0, 40));
      bounds.max_tiles += static_cast<int32_t>(rng.randint(0, 400));
      image = WorkspaceLayout::Image{};
    }
    last_bounds = bounds;
    const WorkspaceLayout layout(bounds);
    img_new.resize(layout.metadata_bytes());
    img_ref.assign(layout.metadata_bytes(), 0xAB);  // the reference clears the whole region
    if (!image.valid) std::fill(img_new.begin(), img_new.end(), 0xCD);
    reference::serialize(layout, ref, img_ref.data());
    layout.serialize(plan, img_new.data(), &image);
    ASSERT_EQ(0, std::memcmp(img_new.data(), img_ref.data(), img_ref.size())) << "workspace images differ";
  }
}

}  // namespace
}  // namespace weft::plan

namespace weft::plan {
namespace {

// The integral-cost paths of Planner::build one by one against the reference: a counting sort
// (cost range short against the chunk count: causal prefill segments), the radix sort (a range
// of 2^20 keys over few chunks), no sort (equal costs), the split build with its row-tile tie
// order, and large integral costs (alpha 2^19, 2^29-2^30-key requests: keys of the integer queue
// near its 2^(62 - shift) bound's order). One planner reused throughout.
TEST(PlanIdentity, IntegralCostPathsMatchReference) {
  test::Rng rng = test::Rng::for_current_test();
  Planner planner;
  Plan plan;
  for (int iter = 0; iter < 120; ++iter) {
    const int kind = iter % 5;
    BatchShape s;
    BalanceConfig cfg;
    cfg.num_ctas = static_cast<int32_t>(rng.randint(1, 140));
    cfg.num_kv_heads = static_cast<int32_t>(rng.randint(1, 4));
    cfg.group_size = 4;
    cfg.tile_q = 16;
    cfg.kv_granularity = 16;
    cfg.row_tiles_together = rng.randint(0, 1) == 1;
    const int batch = static_cast<int>(rng.randint(1, kind == 0 ? 700 : 120));
    for (int b = 0; b < batch; ++b) {
      int32_t kv = 0, qo = 1;
      switch (kind) {
        case 0: qo = static_cast<int32_t>(rng.randint(1, 4)); kv = 32 * static_cast<int32_t>(rng.randint(1, 14)); break;
        case 1: kv = static_cast<int32_t>(rng.randint(0, 1 << 20)); break;
        case 2: kv = 4096; break;
        case 3: qo = static_cast<int32_t>(rng.randint(1, 40)); kv = static_cast<int32_t>(rng.randint(0, 70000)); break;
        default: kv = static_cast<int32_t>(rng.randint(1 << 29, 1 << 30)); break;
      }
      s.qo_len.push_back(qo);
      s.kv_len.push_back(kv);
    }
    cfg.alpha = kind == 4 ? 524288.0 : static_cast<double>(rng.randint(0, 2));
    cfg.beta = 1.0;
    cfg.min_chunk = kind == 3 ? 256 : 0;
    cfg.allow_split = kind == 3 || rng.randint(0, 1) == 1;
    SCOPED_TRACE(::testing::Message() << "iter " << iter << " kind " << kind << " batch " << batch << " ctas "
                                      << cfg.num_ctas);
    const Plan ref = reference::balance(s, cfg);
    planner.balance(s, cfg, plan);
    ASSERT_NO_FATAL_FAILURE(expect_same_plan(plan, ref));
    if (HasFailure()) return;
  }
}

// Unsplit plans of one tile per (request, KV head) with integral costs (build_whole_units, the
// prefill segments' and the decode batches' path) whose costs take few distinct values: the deal
// takes each run of equal costs at once (Planner::deal_run_int), with runs from 1 to many times the
// CTA count and loads that tie, against the reference's one-at-a-time heap deal (the same CTAs,
// order and loads bit for bit). Also the split makespans of plan_decode's bound search
// (choose_split, makespan() with runs of (cost, count)) through balance() with splitting allowed.
TEST(PlanIdentity, EqualCostRunsMatchReference) {
  test::Rng rng = test::Rng::for_current_test();
  Planner planner;
  Plan plan;
  for (int iter = 0; iter < 300; ++iter) {
    BatchShape s;
    BalanceConfig cfg;
    cfg.num_ctas = static_cast<int32_t>(rng.randint(0, 3) == 0 ? rng.randint(1, 4) : rng.randint(1, 140));
    cfg.num_kv_heads = static_cast<int32_t>(rng.randint(1, 8));
    cfg.group_size = static_cast<int32_t>(1 << rng.randint(0, 2));
    cfg.tile_q = 16 << rng.randint(0, 3);
    cfg.kv_granularity = static_cast<int32_t>(1 << rng.randint(0, 7));
    const int distinct = static_cast<int>(rng.randint(1, 12));
    std::vector<int32_t> values(distinct);
    for (auto& v : values) v = static_cast<int32_t>(rng.randint(0, rng.randint(0, 1) ? 64 : 70000));
    const int batch = static_cast<int>(rng.randint(0, 900));
    for (int b = 0; b < batch; ++b) {
      // Rows within one tile (some requests without rows), keys from the few values.
      const int32_t max_q = cfg.tile_q / cfg.group_size;
      s.qo_len.push_back(rng.randint(0, 9) == 0 ? 0 : static_cast<int32_t>(rng.randint(1, std::max(1, max_q))));
      if (rng.randint(0, 3) == 0) s.qo_len.back() = max_q;  // many equal row counts too
      s.kv_len.push_back(values[rng.randint(0, distinct - 1)]);
    }
    cfg.alpha = static_cast<double>(rng.randint(0, 2));
    cfg.beta = static_cast<double>(rng.randint(1, 3));
    cfg.allow_split = rng.randint(0, 1) == 1;
    cfg.min_gain = rng.randint(0, 1) ? 0.1 : 0.0;
    SCOPED_TRACE(::testing::Message() << "iter " << iter << " batch " << batch << " ctas " << cfg.num_ctas
                                      << " heads " << cfg.num_kv_heads << " distinct " << distinct);
    const Plan ref = reference::balance(s, cfg);
    planner.balance(s, cfg, plan);
    ASSERT_NO_FATAL_FAILURE(expect_same_plan(plan, ref));
    if (HasFailure()) return;
  }
}

// Unsplit one-tile-per-head batches whose distinct costs sit around build_whole_units' run bound
// (runs_pay: the run count stops early once runs are short), with 1 KV head class (the head-folded
// decode plan's path: deal and flatten without a head loop) or several, on grids small and large
// (the integer queue's ring and heap modes), cost spreads of 1 to 4 differing key bytes (the radix
// sort's counted bytes 0-1 and the later ones) and batches already in cost order (no sort): the
// same plans as the reference's one-at-a-time heap deal, one planner reused.
TEST(PlanIdentity, DistinctCostsAroundTheRunBoundMatchReference) {
  test::Rng rng = test::Rng::for_current_test();
  Planner planner;
  Plan plan;
  for (int iter = 0; iter < 300; ++iter) {
    BatchShape s;
    BalanceConfig cfg;
    cfg.num_ctas = static_cast<int32_t>(rng.randint(0, 2) == 0 ? rng.randint(1, 6) : rng.randint(7, 300));
    cfg.num_kv_heads = iter % 2 == 0 ? 1 : static_cast<int32_t>(rng.randint(2, 8));
    cfg.group_size = 4;
    cfg.tile_q = 16;
    cfg.kv_granularity = 16;
    cfg.allow_split = false;
    const int batch = static_cast<int>(rng.randint(1, 600));
    const std::size_t n = std::size_t(batch) * cfg.num_kv_heads;
    // Distinct values: about n / 4 (the bound), a few either side, or all distinct.
    const int64_t around = std::max<int64_t>(1, int64_t(n / 4) + rng.randint(-3, 3));
    const int distinct = static_cast<int>(iter % 5 == 4 ? batch : std::min<int64_t>(batch, around));
    const int spread_bits = 8 * static_cast<int>(rng.randint(1, 4)) - 1;  // keys differing in 1-4 bytes
    std::vector<int32_t> values(distinct);
    for (auto& v : values) v = static_cast<int32_t>(rng.randint(0, (int64_t(1) << std::min(spread_bits, 30)) - 1));
    for (int b = 0; b < batch; ++b) {
      s.qo_len.push_back(1);
      s.kv_len.push_back(b < distinct ? values[b] : values[rng.randint(0, distinct - 1)]);
    }
    if (iter % 7 == 6) std::sort(s.kv_len.begin(), s.kv_len.end(), std::greater<int32_t>());  // in order
    cfg.alpha = static_cast<double>(rng.randint(0, 2));
    cfg.beta = 1.0;
    SCOPED_TRACE(::testing::Message() << "iter " << iter << " batch " << batch << " ctas " << cfg.num_ctas
                                      << " heads " << cfg.num_kv_heads << " distinct " << distinct);
    const Plan ref = reference::balance(s, cfg);
    planner.balance(s, cfg, plan);
    ASSERT_NO_FATAL_FAILURE(expect_same_plan(plan, ref));
    if (HasFailure()) return;
  }
}

// Plan::swap (what the decode wrapper does to make the next plan current) exchanges every field:
// two different plans swapped equal each other's copies.
TEST(PlanIdentity, SwapExchangesEveryField) {
  test::Rng rng = test::Rng::for_current_test();
  BalanceConfig cfg;
  cfg.num_ctas = 33;
  cfg.num_kv_heads = 2;
  cfg.group_size = 4;
  cfg.kv_granularity = 16;
  cfg.head_fold = 3;
  BatchShape s1, s2;
  s1.qo_len = {1};
  s1.kv_len = {8192};  // split: merges and slots
  for (int b = 0; b < 40; ++b) {
    s2.qo_len.push_back(static_cast<int32_t>(rng.randint(1, 3)));
    s2.kv_len.push_back(static_cast<int32_t>(rng.randint(0, 3000)));
  }
  Plan a = balance(s1, cfg);
  cfg.tile_q = 8;
  cfg.head_fold = 5;
  Plan b = balance(s2, cfg);
  b.version = 7;  // every scalar differs between the two
  const Plan a0 = a, b0 = b;
  a.swap(b);
  expect_same_plan(a, b0);
  expect_same_plan(b, a0);
  EXPECT_EQ(a.head_fold, b0.head_fold);
  EXPECT_EQ(b.head_fold, a0.head_fold);
}

}  // namespace
}  // namespace weft::plan
