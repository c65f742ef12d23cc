// Chunk bounds of prefix-sharing plans sized from the work after packing
// (PackPlanConfig::auto_chunk_min, pack_duplicate_keys, pack_work_chunk): a long root shared by
// few packs is cut so that the grid fills (the H100 case of bench/results/h100_pat_4c99f6c.json:
// 32 requests on a 4096-key root, heads 32x8, ran 32 unsplit packs on 32 of 264 CTAs), on the
// PAT bench trees and on random forests the deal's makespan stays within a small factor of the
// mean CTA load, every (request, head, key) is still covered once, the item count stays within
// the wrapper's default workspace bound, and decode steps (one token per request) still re-plan
// lazily.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "attention/plan/pack_planner.h"
#include "bench/prefix_tree.h"
#include "tests/host/attention/pack_plan_check.h"

namespace weft::plan {
namespace {

using pack_check::Batch;
using pack_check::batch_of;
using pack_check::check_plan;
using pack_check::random_batch;
using pack_check::wrapper_config;
using test::Rng;

// Loads in the deal's cost units (rows + keys per item, make_pack_plan's deal).
struct Loads {
  int64_t max = 0, total = 0;
  int32_t busy = 0;  // CTAs with at least one item
};
Loads loads_of(const WorkPlan& p) {
  Loads l;
  for (int32_t c = 0; c < p.num_ctas; ++c) {
    int64_t load = 0;
    for (int32_t i = p.cta_indptr[c]; i < p.cta_indptr[c + 1]; ++i)
      load += (p.item_row_end[i] - p.item_row_begin[i]) + (p.item_kv_end[i] - p.item_kv_begin[i]);
    l.max = std::max(l.max, load);
    l.total += load;
    l.busy += p.cta_indptr[c + 1] > p.cta_indptr[c];
  }
  return l;
}

// The longest-first deal's makespan is at most the mean load + the longest item; items are at
// most max_chunk keys + tile_rows rows, and max_chunk is at most 1/8 above the packed reads per
// CTA (a lower bound of the mean) or the minimum chunk (+ the 16-key rounding): so at most
// ~2.125 max(mean, min chunk) + rows. Checked with slack as 2.25 x + 64.
void expect_balanced(const WorkPlan& p, const PackPlanConfig& cfg) {
  const Loads l = loads_of(p);
  const double mean = double(l.total) / p.num_ctas;
  EXPECT_LE(double(l.max), 2.25 * std::max(mean, double(cfg.auto_chunk_min)) + 64)
      << "makespan " << l.max << " mean " << mean << " items " << p.num_items();
}

// The case: heads 32x8 (group 4, 32-row tiles: 8 requests per pack), 264 CTAs (H100 at
// d128), 32 requests on a 4096-key root with 128 private keys each: 4 packs per KV head. The
// chunk bound from the packed work ((4 x 4096 + 32 x 128) x 8 / 264 = 621 keys per CTA -> 640)
// fills the grid; the bound from every request's keys (4992 per CTA: no cut) left 32 CTAs busy.
TEST(PackChunk, LongRootWithFewPacksFillsTheGrid) {
  const int32_t ps = 16, C = 264;
  const bench::PrefixTreeBatch t = bench::make_prefix_tree_batch({1, 32}, {4096, 128}, ps);
  const Batch bt = batch_of(t, ps);
  const PackPlanConfig cfg = wrapper_config(C, 8, 4);
  PackPlanner planner;
  ASSERT_EQ(planner.plan(bt.indptr.data(), bt.indices.data(), bt.kv_len.data(), bt.batch(), cfg),
            PackPlanner::Update::kFull);
  const WorkPlan& p = planner.current();
  ASSERT_NO_FATAL_FAILURE(check_plan(bt, cfg, p));
  EXPECT_EQ(planner.max_chunk(), 640);
  EXPECT_EQ(pack_duplicate_keys(planner.forest(), cfg), 4096 * (32 - 4));
  const Loads l = loads_of(p);
  EXPECT_GE(l.busy, C / 2) << "items " << p.num_items();
  EXPECT_GE(p.num_items(), C / 2);
  ASSERT_NO_FATAL_FAILURE(expect_balanced(p, cfg));
  // The previous bound (every request's keys per CTA): no cut, 32 busy CTAs, makespan 4096 + rows.
  PackPlanConfig old = cfg;
  old.auto_chunk_min = 0;
  old.max_chunk = pack_max_chunk(32 * (4096 + 128), 8, C, 256, 16);
  const WorkPlan q = make_pack_plan(planner.forest(), bt.indptr.data(), bt.kv_len.data(), old);
  EXPECT_GE(loads_of(q).max, 4096);
  EXPECT_LT(l.max, loads_of(q).max / 4);
}

// The PAT bench's trees x its head configs (264 CTAs): coverage, balance, the workspace bound.
TEST(PackChunk, BenchTreesAreBalanced) {
  const int32_t heads[][2] = {{32, 32}, {16, 8}, {32, 8}, {64, 8}};
  int cases = 0;
  for (const bench::PatTree& tree : bench::pat_trees()) {
    const std::vector<int32_t>& fan = tree.fan;
    const std::vector<int32_t>& len = tree.keys;
    const bench::PrefixTreeBatch t = bench::make_prefix_tree_batch(fan, len, 16);
    const Batch bt = batch_of(t, 16);
    for (const auto& h : heads) {
      SCOPED_TRACE(::testing::Message() << "levels " << fan.size() << " leaves " << fan.back() << " L0 " << len[0]
                                        << " heads " << h[0] << "x" << h[1]);
      const PackPlanConfig cfg = wrapper_config(264, h[1], h[0] / h[1]);
      PackPlanner planner;
      planner.plan(bt.indptr.data(), bt.indices.data(), bt.kv_len.data(), bt.batch(), cfg);
      const WorkPlan& p = planner.current();
      if (h[0] * bt.batch() <= 64 * 32)  // coverage on the smaller ones (the check is O(rows x keys))
        ASSERT_NO_FATAL_FAILURE(check_plan(bt, cfg, p));
      ASSERT_NO_FATAL_FAILURE(expect_balanced(p, cfg));
      EXPECT_LE(p.num_items(), 4 * bt.batch() * h[1] + 2 * 264) << "DecodeOptions::max_pack_items' default";
      // The wrapper's source bound (share_bounds in src/decode/wrapper.cpp): items x tile_rows.
      EXPECT_LE(p.src_slot.size(), size_t(p.num_items()) * size_t(cfg.tile_rows));
      ++cases;
    }
  }
  EXPECT_EQ(cases, 48);
}

// Random forests (1..3 levels, page sizes 1/16/64), random grids, groups and tiles: coverage,
// balance and the wrapper's default item bound.
TEST(PackChunk, RandomForestsAreBalancedAndBounded) {
  Rng rng = Rng::for_current_test();
  const int32_t page_sizes[] = {1, 16, 64};
  for (int iter = 0; iter < 30; ++iter) {
    const int32_t ps = page_sizes[iter % 3];
    const Batch bt = random_batch(rng, ps, 1 + iter % 3, 1 + static_cast<int>(rng.randint(1, 12)),
                                  ps == 1 ? 300 : (ps == 16 ? 60 : 20));
    PackPlanConfig cfg;
    cfg.head_fold = static_cast<int32_t>(1 << rng.randint(0, 2));
    cfg.num_kv_heads = cfg.head_fold * static_cast<int32_t>(rng.randint(1, 2));
    cfg.num_ctas = cfg.head_fold * static_cast<int32_t>(rng.randint(1, 66));
    cfg.group_size = static_cast<int32_t>(1 << rng.randint(0, 3));
    cfg.tile_rows = rng.randint(0, 1) ? 32 : 16;
    cfg.page_size = ps;
    cfg.auto_chunk_min = 16 * static_cast<int32_t>(rng.randint(1, 16));
    if (iter % 2) set_pack_traffic(cfg, 128, 2);
    SCOPED_TRACE(::testing::Message() << "iter " << iter << " batch " << bt.batch() << " ctas " << cfg.num_ctas
                                      << " group " << cfg.group_size << " tile " << cfg.tile_rows);
    PackPlanner planner;
    planner.plan(bt.indptr.data(), bt.indices.data(), bt.kv_len.data(), bt.batch(), cfg);
    const WorkPlan& p = planner.current();
    ASSERT_NO_FATAL_FAILURE(check_plan(bt, cfg, p));
    ASSERT_EQ(planner.max_chunk() % cfg.kv_granularity, 0);
    ASSERT_GE(planner.max_chunk(), cfg.auto_chunk_min);
    ASSERT_NO_FATAL_FAILURE(expect_balanced(p, cfg));
    EXPECT_LE(p.num_items(), 4 * std::max(1, bt.batch()) * cfg.num_kv_heads + 2 * cfg.num_ctas);
    EXPECT_LE(p.src_slot.size(), size_t(p.num_items()) * size_t(cfg.tile_rows));
  }
}

// Decode steps on the long-root case: one token per request per step; the chunk bound follows the
// packed work (the private keys grow 32 per step), which pack_max_chunk's rounding keeps for most
// steps: lazy updates, each equal to a fresh plan's chunks.
TEST(PackChunk, DecodeStepsStayLazy) {
  const int32_t ps = 16;
  const bench::PrefixTreeBatch t = bench::make_prefix_tree_batch({1, 32}, {4096, 100}, ps);
  Batch bt = batch_of(t, ps);
  const PackPlanConfig cfg = wrapper_config(264, 8, 4);
  PackPlanner planner;
  int32_t next_page = *std::max_element(bt.indices.begin(), bt.indices.end()) + 1;
  int lazy = 0;
  const int steps = 64;
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    const auto kind = planner.plan(bt.indptr.data(), bt.indices.data(), bt.kv_len.data(), bt.batch(), cfg);
    lazy += kind == PackPlanner::Update::kLazy;
    ASSERT_NO_FATAL_FAILURE(check_plan(bt, cfg, planner.current()));
    const WorkPlan fresh = make_pack_plan(planner.forest(), bt.indptr.data(), bt.kv_len.data(), cfg);
    ASSERT_EQ(planner.current().num_items(), fresh.num_items());
    std::vector<int32_t> a = planner.current().item_kv_end, b = fresh.item_kv_end;
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    ASSERT_EQ(a, b);
    for (int32_t r = 0; r < bt.batch(); ++r) {  // one token each (a new page when the last is full)
      if (bt.kv_len[r] % ps == 0) {
        bt.indices.insert(bt.indices.begin() + bt.indptr[r + 1], next_page++);
        for (size_t i = r + 1; i < bt.indptr.size(); ++i) ++bt.indptr[i];
      }
      ++bt.kv_len[r];
    }
  }
  EXPECT_GE(lazy, steps - 4) << "the chunk bound must hold over most decode steps";
}

}  // namespace
}  // namespace weft::plan
