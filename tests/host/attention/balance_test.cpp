// Property tests of the balanced split-KV planner (src/attention/plan/balance.h).
#include "attention/plan/balance.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "tests/common/test_util.h"
#include "weft/error.h"

namespace weft::plan {
namespace {

using test::Rng;

// Lengths 0..max_len: uniform or Zipf-skewed (most short, a few very long).
std::vector<int32_t> random_lengths(Rng& rng, int n, int32_t max_len, bool zipf) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) {
    if (zipf) {
      const double u = rng.uniform(0.0, 1.0);
      const double x = std::pow(u, 4.0);  // heavy mass near 0, tail to max_len
      v[i] = static_cast<int32_t>(x * max_len);
      if (rng.randint(0, 9) == 0) v[i] = static_cast<int32_t>(rng.randint(max_len / 2, max_len));
    } else {
      v[i] = static_cast<int32_t>(rng.randint(0, max_len));
    }
  }
  return v;
}

// Checks every invariant a kernel relies on; returns nothing, fails the test on violation.
void check_plan(const BatchShape& s, const BalanceConfig& cfg, const Plan& p) {
  ASSERT_EQ(p.version, kPlanVersion);
  ASSERT_EQ(p.num_ctas, cfg.num_ctas);
  ASSERT_EQ(static_cast<int>(p.cta_indptr.size()), cfg.num_ctas + 1);
  ASSERT_EQ(p.cta_indptr.front(), 0);
  ASSERT_EQ(p.cta_indptr.back(), p.num_items());
  for (int c = 0; c < cfg.num_ctas; ++c) ASSERT_LE(p.cta_indptr[c], p.cta_indptr[c + 1]);
  const int n = p.num_items();
  ASSERT_EQ(static_cast<int>(p.item_kv_head.size()), n);
  ASSERT_EQ(static_cast<int>(p.item_partial_slot.size()), n);

  // Coverage: per (request, head, row range) the chunks partition [kv_start, kv_len) exactly once.
  using Key = std::tuple<int32_t, int32_t, int32_t, int32_t>;
  std::map<Key, std::vector<std::pair<int32_t, int32_t>>> ranges;  // (kv_begin, slot)
  std::map<Key, std::vector<int32_t>> ends;
  double max_chunk_cost = 0;
  for (int i = 0; i < n; ++i) {
    const int32_t b = p.item_request[i];
    ASSERT_GE(b, 0);
    ASSERT_LT(b, p.batch);
    ASSERT_GE(p.item_kv_head[i], 0);
    ASSERT_LT(p.item_kv_head[i], cfg.num_kv_heads);
    ASSERT_LE(p.item_kv_begin[i], p.item_kv_end[i]);
    ASSERT_LE(p.item_row_end[i] - p.item_row_begin[i], cfg.tile_q);
    ASSERT_GT(p.item_row_end[i], p.item_row_begin[i]);
    ASSERT_EQ(p.item_row_begin[i] % cfg.tile_q, 0);
    if (p.item_partial_slot[i] >= 0) {
      ASSERT_LE(p.item_kv_end[i] - p.item_kv_begin[i], p.max_chunk);
    }
    Key k{b, p.item_kv_head[i], p.item_row_begin[i], p.item_row_end[i]};
    ranges[k].push_back({p.item_kv_begin[i], p.item_partial_slot[i]});
    ends[k].push_back(p.item_kv_end[i]);
    max_chunk_cost = std::max(max_chunk_cost, chunk_cost(cfg, p.item_row_end[i] - p.item_row_begin[i],
                                                         p.item_kv_end[i] - p.item_kv_begin[i]));
  }
  // Every tile appears.
  int64_t expected_tiles = 0;
  for (size_t b = 0; b < s.kv_len.size(); ++b) {
    const int64_t rows = int64_t(s.qo_len[b]) * cfg.group_size;
    expected_tiles += tiles_per_head(s.qo_len[b], cfg.group_size, cfg.tile_q) * cfg.num_kv_heads;
    for (int32_t h = 0; h < cfg.num_kv_heads; ++h) {
      for (int64_t r0 = 0; r0 < rows; r0 += cfg.tile_q) {
        Key k{int32_t(b), h, int32_t(r0), int32_t(std::min<int64_t>(rows, r0 + cfg.tile_q))};
        auto it = ranges.find(k);
        ASSERT_NE(it, ranges.end()) << "tile not covered: b=" << b << " h=" << h << " r0=" << r0;
        // Sort chunks by kv_begin and check contiguity from kv_start to kv_len.
        std::vector<std::tuple<int32_t, int32_t, int32_t>> cs;  // begin, end, slot
        for (size_t j = 0; j < it->second.size(); ++j)
          cs.push_back({it->second[j].first, ends[k][j], it->second[j].second});
        std::sort(cs.begin(), cs.end());
        int32_t pos = s.kv_start.empty() ? 0 : s.kv_start[b];
        for (auto& [kb, ke, slot] : cs) {
          ASSERT_EQ(kb, pos) << "gap/overlap in tile b=" << b << " h=" << h;
          pos = ke;
        }
        ASSERT_EQ(pos, s.kv_len[b]);
        if (cs.size() == 1) {
          ASSERT_EQ(std::get<2>(cs[0]), -1) << "unsplit tile must write the final output";
        } else {
          // Split: slots are consecutive in KV order and belong to exactly one merge entry.
          const int32_t first = std::get<2>(cs[0]);
          for (size_t j = 0; j < cs.size(); ++j) ASSERT_EQ(std::get<2>(cs[j]), first + int32_t(j));
          int found = 0;
          for (int m = 0; m < p.num_merges(); ++m) {
            if (p.merge_request[m] == int32_t(b) && p.merge_kv_head[m] == h &&
                p.merge_row_begin[m] == std::get<2>(k)) {
              ++found;
              ASSERT_EQ(p.merge_row_end[m], std::get<3>(k));
              ASSERT_EQ(p.merge_indptr[m], first);
              ASSERT_EQ(p.merge_indptr[m + 1], first + int32_t(cs.size()));
            }
          }
          ASSERT_EQ(found, 1);
        }
      }
    }
  }
  ASSERT_EQ(static_cast<int64_t>(ranges.size()), expected_tiles);
  ASSERT_EQ(p.num_tiles, expected_tiles);
  // Every slot used once; merges ordered consistently.
  std::vector<int> slot_use(p.num_partial_slots(), 0);
  for (int i = 0; i < n; ++i)
    if (p.item_partial_slot[i] >= 0) slot_use[p.item_partial_slot[i]]++;
  for (int u : slot_use) ASSERT_EQ(u, 1);
  ASSERT_EQ(p.split, p.num_merges() > 0);
  // Bounds used by the fixed workspace layout.
  ASSERT_LE(p.num_items(), p.num_tiles + cfg.num_ctas);
  ASSERT_LE(p.num_merges(), cfg.num_ctas);
  ASSERT_LE(p.num_partial_slots(), 2 * cfg.num_ctas);
  // Balance: within one chunk.
  std::vector<double> load(cfg.num_ctas, 0);
  for (int c = 0; c < cfg.num_ctas; ++c)
    for (int i = p.cta_indptr[c]; i < p.cta_indptr[c + 1]; ++i)
      load[c] += chunk_cost(cfg, p.item_row_end[i] - p.item_row_begin[i], p.item_kv_end[i] - p.item_kv_begin[i]);
  for (int c = 0; c < cfg.num_ctas; ++c) ASSERT_DOUBLE_EQ(load[c], p.cta_cost[c]);
  if (n > 0) {
    const auto [mn, mx] = std::minmax_element(load.begin(), load.end());
    ASSERT_LE(*mx - *mn, max_chunk_cost + 1e-9) << "imbalance beyond one chunk";
  }
}

bool same_plan(const Plan& a, const Plan& b) {
  return a.cta_indptr == b.cta_indptr && a.item_request == b.item_request &&
         a.item_kv_head == b.item_kv_head && a.item_row_begin == b.item_row_begin &&
         a.item_row_end == b.item_row_end && a.item_kv_begin == b.item_kv_begin &&
         a.item_kv_end == b.item_kv_end && a.item_partial_slot == b.item_partial_slot &&
         a.merge_request == b.merge_request && a.merge_kv_head == b.merge_kv_head &&
         a.merge_row_begin == b.merge_row_begin && a.merge_row_end == b.merge_row_end &&
         a.merge_indptr == b.merge_indptr && a.qo_indptr == b.qo_indptr && a.kv_len == b.kv_len;
}

TEST(BalancePlanner, RandomizedDecodeAndPrefillBatches) {
  Rng rng = Rng::for_current_test();
  const int groups[] = {1, 2, 4, 8, 16, 24, 32, 64};
  for (int iter = 0; iter < 120; ++iter) {
    const bool zipf = iter % 2 == 1;
    const bool prefill = iter % 5 == 4;
    const int batch = static_cast<int>(rng.randint(1, 96));
    BatchShape s;
    s.kv_len = random_lengths(rng, batch, 32768, zipf);
    s.qo_len.assign(batch, 1);
    if (prefill)
      for (int b = 0; b < batch; ++b) s.qo_len[b] = static_cast<int32_t>(rng.randint(0, std::min(s.kv_len[b], 300)));
    if (iter % 3 == 0) {  // sliding window
      s.kv_start.resize(batch);
      for (int b = 0; b < batch; ++b) s.kv_start[b] = std::max(0, s.kv_len[b] - int32_t(rng.randint(1, 5000)));
    }
    BalanceConfig cfg;
    cfg.num_ctas = static_cast<int32_t>(rng.randint(1, 300));
    cfg.num_kv_heads = static_cast<int32_t>(rng.randint(1, 8));
    cfg.group_size = groups[rng.randint(0, 7)];
    cfg.row_tiles_together = rng.randint(0, 1) == 1;
    cfg.tile_q = prefill ? 64 : 16;
    cfg.kv_granularity = static_cast<int32_t>(1 << rng.randint(0, 6));
    cfg.min_chunk = static_cast<int32_t>(rng.randint(0, 1) ? 0 : 256);
    cfg.alpha = rng.randint(0, 1) ? 1.0 : 0.0;
    cfg.min_gain = rng.randint(0, 1) ? 0.1 : 0.0;
    SCOPED_TRACE(::testing::Message() << "iter " << iter << " batch " << batch << " ctas " << cfg.num_ctas);
    const Plan p = balance(s, cfg);
    ASSERT_NO_FATAL_FAILURE(check_plan(s, cfg, p));
    ASSERT_TRUE(same_plan(p, balance(s, cfg))) << "planner is not deterministic";
  }
}

// Decode with a GQA group of 32 and 16-row tiles: each (request, kv head) has two row tiles
// reading the same keys. With row_tiles_together, chunk c of tile 0 and chunk c of tile 1 go to
// consecutive CTAs in one wave (equal costs keep the tie order); without, tile 0's chunks come
// first. Coverage is checked by check_plan either way.
TEST(BalancePlanner, RowTilesOfOneHeadAreDealtTogether) {
  BatchShape s;
  s.kv_len.assign(32, 4096);
  s.qo_len.assign(32, 1);
  BalanceConfig cfg;
  cfg.num_ctas = 264;
  cfg.num_kv_heads = 1;
  cfg.group_size = 32;
  cfg.tile_q = 16;
  cfg.kv_granularity = 16;
  cfg.min_chunk = 256;
  cfg.row_tiles_together = true;
  const Plan p = balance(s, cfg);
  ASSERT_NO_FATAL_FAILURE(check_plan(s, cfg, p));
  ASSERT_TRUE(p.split);
  // CTA c's first item; for every CTA holding row tile 0 of a (request, chunk), the next CTA
  // holds row tile 1 of the same (request, chunk).
  int pairs = 0;
  for (int c = 0; c + 1 < cfg.num_ctas; ++c) {
    const int i = p.cta_indptr[c], j = p.cta_indptr[c + 1];
    if (i == p.cta_indptr[c + 1] || j == p.cta_indptr[c + 2]) continue;
    if (p.item_row_begin[i] != 0) continue;
    EXPECT_EQ(p.item_request[j], p.item_request[i]) << "cta " << c;
    EXPECT_EQ(p.item_kv_begin[j], p.item_kv_begin[i]) << "cta " << c;
    EXPECT_EQ(p.item_row_begin[j], 16) << "cta " << c;
    ++pairs;
  }
  EXPECT_GT(pairs, 64);
  cfg.row_tiles_together = false;
  const Plan q = balance(s, cfg);
  ASSERT_NO_FATAL_FAILURE(check_plan(s, cfg, q));
  EXPECT_EQ(q.item_row_begin[q.cta_indptr[1]], 0) << "generation order: tile 0's chunks first";
}

// heads_in_turn on unsplit plans against a direct statement of it: tiles in generation order
// (request, kv_head, row tile), a stable sort by cost descending, a stable partition by KV head,
// then the LPT deal (lowest (load, CTA) first) and each CTA's items in deal order. One tile per
// request and head (Planner::build_whole_units) and several (build), integral costs and not (the
// double queue), the planner reused (stale state would show); plus check_plan's invariants and
// each CTA's heads non-decreasing.
TEST(BalancePlanner, HeadsInTurnDealsHeadByHead) {
  Rng rng = Rng::for_current_test();
  Planner planner;
  Plan p;
  for (int iter = 0; iter < 120; ++iter) {
    const int batch = static_cast<int>(rng.randint(1, 80));
    BatchShape s;
    s.kv_len = random_lengths(rng, batch, 16384, iter % 2 == 0);
    s.qo_len.resize(batch);
    BalanceConfig cfg;
    cfg.num_ctas = static_cast<int32_t>(rng.randint(1, 40));
    cfg.num_kv_heads = static_cast<int32_t>(rng.randint(2, 4));
    cfg.group_size = 4;
    cfg.tile_q = 128;
    cfg.kv_granularity = 128;
    cfg.allow_split = false;
    cfg.alpha = iter % 3 == 2 ? 0.37 : 1.0;
    cfg.heads_in_turn = true;
    const bool one_tile = iter % 4 < 2;  // segments of one tile per head (build_whole_units)
    for (int b = 0; b < batch; ++b)
      s.qo_len[b] = std::min<int32_t>(s.kv_len[b], static_cast<int32_t>(one_tile ? rng.randint(1, 32) : rng.randint(0, 200)));
    SCOPED_TRACE(::testing::Message() << "iter " << iter << " batch " << batch << " ctas " << cfg.num_ctas);
    planner.balance(s, cfg, p);
    ASSERT_NO_FATAL_FAILURE(check_plan(s, cfg, p));
    struct T {
      int32_t b, h, r0, r1;
      double cost;
    };
    std::vector<T> tiles;
    for (int b = 0; b < batch; ++b)
      for (int32_t h = 0; h < cfg.num_kv_heads; ++h) {
        const int32_t rows = s.qo_len[b] * cfg.group_size;
        for (int32_t r0 = 0; r0 < rows; r0 += cfg.tile_q) {
          const int32_t r1 = std::min(rows, r0 + cfg.tile_q);
          tiles.push_back({b, h, r0, r1, chunk_cost(cfg, r1 - r0, s.kv_len[b])});
        }
      }
    std::stable_sort(tiles.begin(), tiles.end(), [](const T& x, const T& y) { return x.cost > y.cost; });
    std::stable_sort(tiles.begin(), tiles.end(), [](const T& x, const T& y) { return x.h < y.h; });
    std::vector<double> load(cfg.num_ctas, 0.0);
    std::vector<std::vector<T>> per_cta(cfg.num_ctas);
    for (const T& t : tiles) {
      const int c = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
      load[c] += t.cost;
      per_cta[c].push_back(t);
    }
    for (int c = 0; c < cfg.num_ctas; ++c) {
      ASSERT_EQ(p.cta_indptr[c + 1] - p.cta_indptr[c], static_cast<int32_t>(per_cta[c].size())) << "cta " << c;
      for (std::size_t k = 0; k < per_cta[c].size(); ++k) {
        const int i = p.cta_indptr[c] + static_cast<int>(k);
        const T& t = per_cta[c][k];
        ASSERT_EQ(p.item_request[i], t.b) << "cta " << c << " item " << k;
        ASSERT_EQ(p.item_kv_head[i], t.h) << "cta " << c << " item " << k;
        ASSERT_EQ(p.item_row_begin[i], t.r0) << "cta " << c << " item " << k;
        ASSERT_EQ(p.item_row_end[i], t.r1) << "cta " << c << " item " << k;
        if (k > 0) ASSERT_LE(p.item_kv_head[i - 1], p.item_kv_head[i]);
      }
    }
    // Deterministic: the same plan again (the planner's scratch reused).
    Plan q;
    planner.balance(s, cfg, q);
    ASSERT_TRUE(same_plan(p, q));
  }
}

TEST(BalancePlanner, NoSplitWhenNotNeeded) {
  // 128 requests x 8 heads of 4K keys on 132 CTAs: each tile is far below total / CTAs.
  BatchShape s;
  s.kv_len.assign(128, 4096);
  s.qo_len.assign(128, 1);
  BalanceConfig cfg{132, 8, 4, 16, 64, 256};
  Plan p = balance(s, cfg);
  check_plan(s, cfg, p);
  EXPECT_FALSE(p.split);
  EXPECT_EQ(p.num_merges(), 0);
  EXPECT_EQ(p.num_items(), 128 * 8);
  for (int32_t slot : p.item_partial_slot) EXPECT_EQ(slot, -1);
  // Tiles just above total / CTAs: splitting would not lower the makespan, so it is not done.
  s.kv_len.assign(32, 4096);
  s.qo_len.assign(32, 1);
  cfg = BalanceConfig{264, 8, 4, 16, 64, 256};
  p = balance(s, cfg);
  check_plan(s, cfg, p);
  EXPECT_FALSE(p.split);
  // allow_split = false never splits, even a single long request.
  s.kv_len.assign(1, 32768);
  s.qo_len.assign(1, 1);
  cfg.allow_split = false;
  p = balance(s, cfg);
  EXPECT_FALSE(p.split);
  EXPECT_EQ(p.num_items(), 8);
}

TEST(BalancePlanner, SplitsLongRequestAcrossCtas) {
  BatchShape s;
  s.kv_len = {32768};
  s.qo_len = {1};
  BalanceConfig cfg{132, 1, 8, 16, 64, 256};
  const Plan p = balance(s, cfg);
  check_plan(s, cfg, p);
  EXPECT_TRUE(p.split);
  EXPECT_EQ(p.max_chunk % 64, 0);
  EXPECT_GE(p.max_chunk, 256);
  EXPECT_EQ(p.num_merges(), 1);
  EXPECT_GT(p.num_items(), 64);
}

TEST(BalancePlanner, EmptyRequestsGetOneItem) {
  BatchShape s;
  s.kv_len = {0, 5, 0};
  s.qo_len = {1, 1, 1};
  BalanceConfig cfg{4, 2, 2, 16, 16, 0};
  const Plan p = balance(s, cfg);
  check_plan(s, cfg, p);
  EXPECT_EQ(p.num_items(), 6);
  int empty = 0;
  for (int i = 0; i < p.num_items(); ++i) empty += p.item_kv_begin[i] == p.item_kv_end[i];
  EXPECT_EQ(empty, 4);
  // Empty batch.
  s = {};
  const Plan e = balance(s, cfg);
  EXPECT_EQ(e.num_items(), 0);
  EXPECT_EQ(e.cta_indptr, std::vector<int32_t>(5, 0));
}

TEST(BalancePlanner, BadInputThrowsNamingField) {
  BatchShape s;
  s.kv_len = {4, -1};
  s.qo_len = {1, 1};
  BalanceConfig cfg{4, 1, 1, 16, 16, 0};
  try {
    balance(s, cfg);
    FAIL() << "expected weft::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "shape.kv_len[1]");
  }
  s.kv_len = {4, 4};
  cfg.num_ctas = 0;
  EXPECT_THROW(balance(s, cfg), Error);
  cfg.num_ctas = 4;
  cfg.tile_q = 0;
  EXPECT_THROW(balance(s, cfg), Error);
  cfg.tile_q = 16;
  s.qo_len = {1};
  EXPECT_THROW(balance(s, cfg), Error);
  s.qo_len = {1, 1};
  s.kv_start = {5, 0};
  EXPECT_THROW(balance(s, cfg), Error);
  s.kv_start = {};
  cfg.kv_granularity = 0;
  EXPECT_THROW(balance(s, cfg), Error);
}

// A folded layout (PlanBounds::head_fold) rejects a bad fold and a plan of another fold, naming them.
TEST(WorkspaceLayoutTest, HeadFoldBoundsChecked) {
  PlanBounds b;
  b.max_batch = 4;
  b.max_tiles = 8;
  b.num_ctas = 33;
  b.tile_q = 16;
  b.head_dim = 128;
  b.head_fold = 0;
  EXPECT_EQ(test::thrown_argument([&] { WorkspaceLayout x(b); }), "head_fold");
  b.head_fold = 8;
  const WorkspaceLayout folded(b);
  b.head_fold = 1;
  const WorkspaceLayout plain(b);
  EXPECT_GT(folded.total_bytes(), plain.total_bytes());  // records, counters, slots x 8
  BatchShape shape;
  shape.qo_len = {1, 1};
  shape.kv_len = {100, 5000};
  BalanceConfig cfg;
  cfg.num_ctas = 33;
  cfg.num_kv_heads = 1;
  cfg.group_size = 4;
  cfg.tile_q = 16;
  const Plan unfolded = balance(shape, cfg);  // head_fold 1
  std::vector<char> buf(folded.metadata_bytes());
  EXPECT_EQ(test::thrown_argument([&] { folded.serialize(unfolded, buf.data()); }), "plan");
  cfg.head_fold = 8;
  const Plan p = balance(shape, cfg);
  ASSERT_NO_THROW(folded.serialize(p, buf.data()));
  EXPECT_EQ(folded.deserialize(buf.data()).head_fold, 8);
}

TEST(WorkspaceLayoutTest, FixedOffsetsRoundTripAndBounds) {
  Rng rng = Rng::for_current_test();
  PlanBounds bounds{64, 64 * 8, 132, 16, 128};
  WorkspaceLayout layout(bounds);
  EXPECT_EQ(layout.max_items(), 64 * 8 + 132);
  EXPECT_GE(layout.total_bytes(), layout.metadata_bytes() + sizeof(float) * 2 * 132 * 16 * 129);
  std::vector<char> buf(layout.metadata_bytes());
  const PlanPointers base = layout.pointers(buf.data());
  for (int iter = 0; iter < 30; ++iter) {
    BatchShape s;
    const int batch = static_cast<int>(rng.randint(1, 64));
    s.kv_len = random_lengths(rng, batch, 32768, iter % 2);
    s.qo_len.assign(batch, 1);
    BalanceConfig cfg{132, 8, 4, 16, 64, 0};
    const Plan p = balance(s, cfg);
    layout.serialize(p, buf.data());
    // Pointers never depend on the plan.
    const PlanPointers v = layout.pointers(buf.data());
    EXPECT_EQ(v.item_request, base.item_request);
    EXPECT_EQ(v.partial_o, base.partial_o);
    const Plan q = layout.deserialize(buf.data());
    EXPECT_TRUE(same_plan(p, q));
    EXPECT_EQ(v.header->num_items, p.num_items());
    EXPECT_EQ(v.header->num_merges, p.num_merges());
    // Each CTA's record repeats its item range and first item.
    for (int c = 0; c < p.num_ctas; ++c) {
      const CtaRecord& r = v.cta_first[c];
      ASSERT_EQ(r.item_begin, p.cta_indptr[c]) << "cta " << c;
      ASSERT_EQ(r.item_end, p.cta_indptr[c + 1]) << "cta " << c;
      if (r.item_begin == r.item_end) continue;
      const int i = r.item_begin;
      EXPECT_EQ(r.request, p.item_request[i]);
      EXPECT_EQ(r.kv_head, p.item_kv_head[i]);
      EXPECT_EQ(r.row_begin, p.item_row_begin[i]);
      EXPECT_EQ(r.row_end, p.item_row_end[i]);
      EXPECT_EQ(r.kv_begin, p.item_kv_begin[i]);
      EXPECT_EQ(r.kv_end, p.item_kv_end[i]);
      EXPECT_EQ(r.partial_slot, p.item_partial_slot[i]);
      EXPECT_EQ(r.token0, p.qo_indptr[r.request]);
    }
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(v.cta_first) % 16, 0u);
    // Every array lies inside the metadata region, partials after it, 256-byte aligned.
    const char* b0 = buf.data();
    EXPECT_LE(reinterpret_cast<const char*>(v.kv_len + bounds.max_batch), b0 + layout.metadata_bytes());
    EXPECT_EQ(reinterpret_cast<const char*>(v.partial_o) - b0, static_cast<std::ptrdiff_t>(layout.metadata_bytes()));
    EXPECT_EQ((reinterpret_cast<const char*>(v.partial_lse) - b0) % 256, 0);
  }
  // A plan beyond the bounds is rejected.
  BatchShape big;
  big.kv_len.assign(65, 10);
  big.qo_len.assign(65, 1);
  const Plan p = balance(big, BalanceConfig{132, 8, 4, 16, 64, 0});
  EXPECT_THROW(layout.serialize(p, buf.data()), Error);
  const Plan other = balance(BatchShape{{1}, {10}, {}}, BalanceConfig{100, 8, 4, 16, 64, 0});
  EXPECT_THROW(layout.serialize(other, buf.data()), Error);
  EXPECT_THROW(WorkspaceLayout(PlanBounds{0, 1, 1, 16, 128}), Error);
}

}  // namespace
}  // namespace weft::plan
