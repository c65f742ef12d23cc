// The one-wave cut of wide items for a wide tile that takes a whole SM (PackPlanConfig::
// wide_wave_ctas, the decode wrapper's Hopper mainloop: DecodeOptions::prefix_wide_sm90_wave):
// on the PAT bench's minimum shared8 row the wide items are cut for one wave of 132 CTAs (fewer,
// longer items; fewer partial sources per row); on random forests every (request, query head,
// key) is still covered once, the wide items sit on the first wide_grid CTAs, split plans keep
// their deal, and decode steps still update lazily.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "attention/plan/pack_planner.h"
#include "bench/prefix_tree.h"
#include "tests/common/pat_chain_trees.h"
#include "tests/host/attention/pack_plan_check.h"

namespace weft::plan {
namespace {

using pack_check::Batch;
using pack_check::batch_of;
using pack_check::check_plan;
using pack_check::random_batch;
using test::Rng;

// The decode wrapper's config at d128 with wide packs (decode/wrapper_plan.cpp, without linking
// the decode component): wrapper_config with 16-key granularity and 128-row wide items from 256
// rows and 2048 keys, overlap estimate on.
PackPlanConfig wide_config(int32_t num_ctas, int32_t num_kv_heads, int32_t group_size) {
  PackPlanConfig c = pack_check::wrapper_config(num_ctas, num_kv_heads, group_size);
  c.kv_granularity = 16;
  c.wide_rows = 128;
  c.wide_min_rows = 256;
  c.wide_min_keys = 2048;
  c.wide_overlap = 1;
  c.wide_key_cost = 2.f;
  c.wide_split_margin = 0.7f;
  return c;
}

int32_t max_sources(const WorkPlan& p) {
  int32_t m = 0;
  for (int32_t i = 0; i < p.num_merges(); ++i) m = std::max(m, p.merge_src_indptr[i + 1] - p.merge_src_indptr[i]);
  return m;
}

// The PAT bench's minimum shared8 row (heads 64x8, B[1,32] L[4096,128], page 16; H100: 264-CTA
// decode grid, 132 SMs). Over the decode grid: 2 row tiles x 8 KV heads x 16 chunks of 256 keys
// = 256 wide items (two waves of the sm90 tile), 17 sources per row. One wave of 132 (head fold
// 8: 16 CTAs per head class, 128 launched): 2 x 8 x 8 items of 512 keys, one per CTA, 9 sources.
TEST(PackWave, MinimumRowRunsOneWave) {
  const int32_t ps = 16;
  const bench::PrefixTreeBatch t = bench::make_prefix_tree_batch({1, 32}, {4096, 128}, ps);
  const Batch bt = batch_of(t, ps);
  const PackPlanConfig grid = wide_config(264, 8, 8);
  PackPlanScratch sc;
  WorkPlan before;
  const PrefixForest f = build_prefix_forest(bt.indptr.data(), bt.indices.data(), bt.kv_len.data(), bt.batch(), ps);
  make_pack_plan(f, bt.indptr.data(), bt.kv_len.data(), grid, before, sc);
  ASSERT_NO_FATAL_FAILURE(check_plan(bt, grid, before));
  EXPECT_EQ(before.wide_split, 0) << "a serial plan (the sm90 tile's)";
  EXPECT_EQ(before.num_wide_items, 256);
  EXPECT_EQ(before.wide_grid, 0);
  EXPECT_EQ(max_sources(before), 17);

  PackPlanConfig wave = grid;
  wave.wide_wave_ctas = 132;
  wave.wide_item_keys = 256;
  WorkPlan p;
  make_pack_plan(f, bt.indptr.data(), bt.kv_len.data(), wave, p, sc);
  ASSERT_NO_FATAL_FAILURE(check_plan(bt, wave, p));
  EXPECT_EQ(sc.wide_chunk, 512);
  EXPECT_EQ(p.wide_split, 0);
  EXPECT_EQ(p.num_wide_items, 128);
  EXPECT_EQ(p.wide_grid, 128);
  EXPECT_EQ(max_sources(p), 9);
  for (int32_t c = 0; c < wave.num_ctas; ++c)
    EXPECT_EQ(p.wide_cta_indptr[c + 1] - p.wide_cta_indptr[c], c < 128 ? 1 : 0) << "CTA " << c;
  // The narrow (private-suffix) items are the same items on the same CTAs.
  EXPECT_EQ(p.cta_indptr, before.cta_indptr);
  EXPECT_LT(p.num_slots(), before.num_slots());
  // Without a fixed cost per item the model still takes one wave here (equal chunks).
  wave.wide_item_keys = 0;
  make_pack_plan(f, bt.indptr.data(), bt.kv_len.data(), wave, p, sc);
  EXPECT_EQ(p.num_wide_items, 128);
}

// Random forests, groups, grids, head folds, waves (also past the grid: clamped), overlap on or
// off: coverage; a plan that splits over the grid keeps that deal (no wave); otherwise the wide
// items sit on the first f x (min(wave, grid) / f) CTAs, never more items than the uncut wave
// needs, and the plan is deterministic.
TEST(PackWave, RandomForestsCoverEveryKeyOnce) {
  Rng rng = Rng::for_current_test();
  int64_t waves = 0, kept_split = 0;
  for (int iter = 0; iter < 160; ++iter) {
    pack_check::WideCase wc = pack_check::random_wide_case(rng, iter);
    const Batch& bt = wc.bt;
    const PrefixForest& f = wc.forest;
    PackPlanConfig& cfg = wc.cfg;
    SCOPED_TRACE(::testing::Message() << "iter " << iter << " batch " << bt.batch() << " page " << bt.page_size);
    if (rng.randint(0, 1)) {
      cfg.wide_overlap = 1;
      cfg.wide_key_cost = 2.f;
      cfg.wide_split_margin = rng.randint(0, 2) ? 0.7f : 1.f;
    }
    const WorkPlan base = make_pack_plan(f, bt.indptr.data(), bt.kv_len.data(), cfg);
    PackPlanConfig wv = cfg;
    wv.wide_wave_ctas = cfg.head_fold * static_cast<int32_t>(rng.randint(1, 140));
    wv.wide_item_keys = static_cast<int32_t>(rng.randint(0, 512));
    const WorkPlan p = make_pack_plan(f, bt.indptr.data(), bt.kv_len.data(), wv);
    ASSERT_NO_FATAL_FAILURE(check_plan(bt, wv, p));
    const WorkPlan again = make_pack_plan(f, bt.indptr.data(), bt.kv_len.data(), wv);
    ASSERT_EQ(again.wide_cta_indptr, p.wide_cta_indptr) << "deterministic";
    ASSERT_EQ(again.item_kv_begin, p.item_kv_begin);
    ASSERT_EQ(again.src_slot, p.src_slot);
    if (base.num_wide_items == 0) {
      ASSERT_EQ(p.wide_grid, 0);
      continue;
    }
    if (base.wide_split) {  // split over the grid: that plan, untouched
      ASSERT_EQ(p.wide_split, 1);
      ASSERT_EQ(p.wide_grid, 0);
      ASSERT_EQ(p.wide_cta_indptr, base.wide_cta_indptr);
      ASSERT_EQ(p.item_kv_end, base.item_kv_end);
      ++kept_split;
      continue;
    }
    ASSERT_EQ(p.wide_split, 0);
    const int32_t grid = std::min(wv.wide_wave_ctas, cfg.num_ctas) / cfg.head_fold * cfg.head_fold;
    ASSERT_EQ(p.wide_grid, grid);
    for (int32_t c = grid; c < cfg.num_ctas; ++c)
      ASSERT_EQ(p.wide_cta_indptr[c + 1], p.wide_cta_indptr[c]) << "CTA " << c << " past the wave";
    ++waves;
  }
  EXPECT_GT(waves, 8) << "the generator must produce serial plans with wide items";
  EXPECT_GT(kept_split, 5) << "and split ones";
  RecordProperty("waves", static_cast<int>(waves));
  RecordProperty("kept_split", static_cast<int>(kept_split));
}

// Decode steps (one token per request) on a wave-cut plan: the wide cut is a function of the
// forest, so the steps update lazily, each with a fresh plan's items.
TEST(PackWave, DecodeStepsStayLazy) {
  const int32_t ps = 16;
  const bench::PrefixTreeBatch t = bench::make_prefix_tree_batch({1, 32}, {2048, 100}, ps);
  Batch bt = batch_of(t, ps);
  PackPlanConfig cfg = wide_config(264, 8, 8);
  cfg.wide_overlap = 0;  // this shorter root's plan would split over the grid (then no wave)
  cfg.wide_wave_ctas = 132;
  cfg.wide_item_keys = 256;
  PackPlanner planner;
  int32_t next_page = *std::max_element(bt.indices.begin(), bt.indices.end()) + 1;
  int lazy = 0;
  const int steps = 24;
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    const auto kind = planner.plan(bt.indptr.data(), bt.indices.data(), bt.kv_len.data(), bt.batch(), cfg);
    lazy += kind == PackPlanner::Update::kLazy;
    ASSERT_GT(planner.current().num_wide_items, 0);
    ASSERT_EQ(planner.current().wide_grid, 128);
    ASSERT_NO_FATAL_FAILURE(check_plan(bt, cfg, planner.current()));
    const WorkPlan fresh = make_pack_plan(planner.forest(), bt.indptr.data(), bt.kv_len.data(), cfg);
    std::vector<int32_t> a = planner.current().item_kv_end, b = fresh.item_kv_end;
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    ASSERT_EQ(a, b);
    ASSERT_EQ(planner.current().wide_cta_indptr, fresh.wide_cta_indptr);
    for (int32_t r = 0; r < bt.batch(); ++r) {  // one token each (a new page when the last is full)
      if (bt.kv_len[r] % ps == 0) {
        bt.indices.insert(bt.indices.begin() + bt.indptr[r + 1], next_page++);
        for (size_t i = r + 1; i < bt.indptr.size(); ++i) ++bt.indptr[i];
      }
      ++bt.kv_len[r];
    }
  }
  EXPECT_GE(lazy, steps / 2);
}

// The GPU test of the programmatic launch chain (DecodeSmall.SharePrefixesWideSm90WaveChain) runs
// test::chain_tree(0..2) with wide packs from 64 rows: the decode wrapper's config on an H100
// (264-CTA decode grid, 132 SMs, overlap estimate on) must plan each serial (no split) with its
// wide items cut for one wave, so the chain is what that test runs.
TEST(PackWave, ChainTreesPlanSerialWaves) {
  for (int iter = 0; iter < 6; ++iter) {  // the GPU test's 3 and 3 more
    const test::ChainTree ct = test::chain_tree(iter);
    const bench::PrefixTreeBatch t = bench::make_prefix_tree_batch(ct.fan, ct.keys, ct.page_size);
    const Batch bt = batch_of(t, ct.page_size);
    SCOPED_TRACE(::testing::Message() << "iter " << iter << " heads " << ct.hq << "x" << ct.hkv << " page "
                                      << ct.page_size << " root " << ct.keys[0] << " requests " << bt.batch());
    PackPlanConfig cfg = wide_config(264, ct.hkv, ct.hq / ct.hkv);
    cfg.page_size = ct.page_size;
    cfg.wide_min_rows = 64;
    cfg.wide_min_keys = 1;
    cfg.wide_wave_ctas = 132;
    cfg.wide_item_keys = 256;
    const PrefixForest f =
        build_prefix_forest(bt.indptr.data(), bt.indices.data(), bt.kv_len.data(), bt.batch(), ct.page_size);
    const WorkPlan p = make_pack_plan(f, bt.indptr.data(), bt.kv_len.data(), cfg);
    ASSERT_NO_FATAL_FAILURE(check_plan(bt, cfg, p));
    EXPECT_GT(p.num_wide_items, 0);
    EXPECT_EQ(p.wide_split, 0);
    EXPECT_GT(p.wide_grid, 0);
  }
}

}  // namespace
}  // namespace weft::plan
