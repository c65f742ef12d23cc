// The memory-centric profit model of the pack planner (schedule_packs, pack_schedule.cpp):
// named trees where the paper's two schemes must be chosen, the property checks with the model
// on random forests, and the modelled traffic (KV bytes read + partial-state bytes written and
// read back) of the synthetic PAT trees never above the plan without the model.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "attention/plan/prefix_forest.h"
#include "attention/plan/work_plan.h"
#include "bench/prefix_tree.h"
#include "tests/host/attention/pack_plan_check.h"

namespace weft::plan {
namespace {

using pack_check::Batch;
using pack_check::check_plan;
using pack_check::random_batch;
using test::Rng;

// Traffic of a plan in the model's terms: keys read x kv_bytes_per_key + rows of partial items x
// partial_bytes_per_row (written by the item, read by the merge).
int64_t traffic(const WorkPlan& p, const PackPlanConfig& cfg) {
  int64_t t = 0;
  for (int32_t i = 0; i < p.num_items(); ++i) {
    t += int64_t(p.item_kv_end[i] - p.item_kv_begin[i]) * 2 * 128 * 2;
    if (p.item_slot[i] >= 0) t += int64_t(p.item_row_end[i] - p.item_row_begin[i]) * 2 * (128 + 1) * 4;
  }
  (void)cfg;
  return t;
}

PackPlanConfig config(int32_t group, int32_t tile_rows, int32_t page_size, bool model) {
  PackPlanConfig c;
  c.num_ctas = 132;
  c.num_kv_heads = 2;
  c.group_size = group;
  c.tile_rows = tile_rows;
  c.page_size = page_size;
  if (model) set_pack_traffic(c, 128, 2);
  return c;
}

int32_t packs_of(const WorkPlan& p) {
  int32_t n = 0;
  for (int32_t x : p.item_num_reqs) n += x >= 2;
  return n;
}

// Scheme 2 (merge): a one-page root shared by two children of 4 requests each, group 8, 32-row
// tiles (4 requests per pack). Splitting reads the root in 2 packs and its rows get one more
// partial state each; merging each child into its own pack reads the root twice too (once per
// child pack): no KV added, the root's partial states saved. The root gets no pack.
TEST(PackSchedule, ShortRootIsMergedIntoFullChildren) {
  const auto t = bench::make_prefix_tree_batch({1, 2, 8}, {16, 512, 64}, 16);
  const PrefixForest f = build_prefix_forest(t.indptr.data(), t.indices.data(), t.kv_len.data(), t.batch(), 16);
  ASSERT_EQ(f.nodes.size(), 3u);
  PackSchedule s;
  schedule_packs(f, config(8, 32, 16, true), s);
  EXPECT_EQ(s.pack_reqs[0], 0) << "root merged into both children";
  EXPECT_EQ(s.pack_reqs[1], 4);
  EXPECT_EQ(s.pack_reqs[2], 4);
  EXPECT_EQ(s.pack_page_begin[1], 0) << "the children's packs start at the root's page";
  EXPECT_EQ(s.pack_page_begin[2], 0);
  Batch bt;
  bt.page_size = 16;
  bt.indptr = t.indptr;
  bt.indices = t.indices;
  bt.kv_len = t.kv_len;
  for (bool model : {false, true}) {
    const PackPlanConfig cfg = config(8, 32, 16, model);
    const WorkPlan p = make_pack_plan(f, t.indptr.data(), t.kv_len.data(), cfg);
    ASSERT_NO_FATAL_FAILURE(check_plan(bt, cfg, p));
    EXPECT_EQ(packs_of(p), model ? 2 * 2 : 4 * 2) << "model " << model;  // 2 root packs + 1 per child, x 2 heads
  }
  const WorkPlan off = make_pack_plan(f, t.indptr.data(), t.kv_len.data(), config(8, 32, 16, false));
  const WorkPlan on = make_pack_plan(f, t.indptr.data(), t.kv_len.data(), config(8, 32, 16, true));
  EXPECT_LT(traffic(on, config(8, 32, 16, true)), traffic(off, config(8, 32, 16, true)));
}

// Scheme 1 (split): a long root (4096 keys) shared by 16 requests in 16 children of one request
// each; merging any of them would read the root once more (4096 x 512 bytes) to save one partial
// state row group: the root stays one pack set for all, every request reads only its suffix.
TEST(PackSchedule, LongRootStaysPacked) {
  const auto t = bench::make_prefix_tree_batch({1, 16}, {4096, 128}, 16);
  const PrefixForest f = build_prefix_forest(t.indptr.data(), t.indices.data(), t.kv_len.data(), t.batch(), 16);
  ASSERT_EQ(f.nodes.size(), 1u);
  PackSchedule s;
  schedule_packs(f, config(8, 32, 16, true), s);
  EXPECT_EQ(s.pack_reqs[0], 16);
  EXPECT_EQ(s.pack_page_begin[0], 0);
}

// Group 8, 16-row tiles (2 requests per pack), 3 sharers: the first request costs no extra read
// to take out (the pack count stays 2) and takes its partial states with it; the second would
// read the node once more. A 2-page node (32 keys, 16 KiB per read) keeps a pack of the other
// 2 (their partial states, 8.3 KiB, cost less than a read); a 1-page node (8 KiB) is cheaper
// read by each request alone: no pack at all.
TEST(PackSchedule, ShortNodeIsReadAloneLongerKeepsAPack) {
  for (int32_t keys : {32, 16}) {
    const auto t = bench::make_prefix_tree_batch({1, 3}, {keys, 100}, 16);
    const PrefixForest f = build_prefix_forest(t.indptr.data(), t.indices.data(), t.kv_len.data(), t.batch(), 16);
    ASSERT_EQ(f.nodes.size(), 1u);
    PackSchedule s;
    schedule_packs(f, config(8, 16, 16, true), s);
    EXPECT_EQ(s.pack_reqs[0], keys == 32 ? 2 : 0) << keys;
    schedule_packs(f, config(8, 16, 16, false), s);  // without the model: packs of 2 and 1
    EXPECT_EQ(s.pack_reqs[0], 3);
  }
}

// Random forests (1..3 levels, page sizes 1/16/64, groups 1..16): with the model every key is
// still covered once, items read their own pages, merges are in key order; deterministic.
TEST(PackSchedule, RandomForestsWithModelCoverEveryKeyOnce) {
  Rng rng = Rng::for_current_test();
  const int32_t page_sizes[] = {1, 16, 64};
  const int32_t groups[] = {1, 2, 4, 8, 16};
  int64_t merged_nodes = 0;
  for (int iter = 0; iter < 80; ++iter) {
    const int32_t ps = page_sizes[iter % 3];
    const Batch bt = random_batch(rng, ps, 1 + iter % 3, 1 + static_cast<int>(rng.randint(1, 8)),
                                  ps == 1 ? 600 : (ps == 16 ? 200 : 60));
    SCOPED_TRACE(::testing::Message() << "iter " << iter << " batch " << bt.batch());
    const PrefixForest f = build_prefix_forest(bt.indptr.data(), bt.indices.data(), bt.kv_len.data(), bt.batch(), ps);
    PackPlanConfig cfg = config(groups[rng.randint(0, 4)], rng.randint(0, 1) ? 32 : 16, ps, true);
    cfg.num_ctas = static_cast<int32_t>(rng.randint(1, 264));
    cfg.max_chunk = rng.randint(0, 1) ? 0 : static_cast<int32_t>(16 * rng.randint(1, 64));
    cfg.min_sharers = static_cast<int32_t>(rng.randint(2, 3));
    const WorkPlan p = make_pack_plan(f, bt.indptr.data(), bt.kv_len.data(), cfg);
    ASSERT_NO_FATAL_FAILURE(check_plan(bt, cfg, p));
    const WorkPlan again = make_pack_plan(f, bt.indptr.data(), bt.kv_len.data(), cfg);
    ASSERT_EQ(again.item_kv_begin, p.item_kv_begin);
    ASSERT_EQ(again.req_list, p.req_list);
    PackSchedule s;
    schedule_packs(f, cfg, s);
    for (size_t u = 0; u < f.nodes.size(); ++u) merged_nodes += s.pack_page_begin[u] != f.nodes[u].page_begin;
  }
  EXPECT_GT(merged_nodes, 20) << "the generator must reach Scheme 2";
}

// The synthetic PAT trees of the "pat" bench (page 16, groups 1/2/4/8, 16- and 32-row tiles):
// the model's plan never moves more modelled bytes than packing every node.
TEST(PackSchedule, SyntheticTreesNeverCostMore) {
  const std::vector<std::vector<int32_t>> fans = {{1, 4, 16}, {1, 8, 64}, {1, 32}, {1, 256}, {4, 64}, {1, 4, 16, 64}};
  const std::vector<std::vector<int32_t>> lens = {{128, 256, 1024}, {2048, 512}, {4096, 128}, {512, 512, 512}};
  int64_t cheaper = 0;
  for (const auto& fan : fans)
    for (const auto& len : lens) {
      if (len.size() != fan.size() && !(fan.size() == 4 && len.size() == 3)) continue;
      std::vector<int32_t> l = len;
      if (l.size() < fan.size()) l.push_back(128);
      const auto t = bench::make_prefix_tree_batch(fan, l, 16);
      const PrefixForest f = build_prefix_forest(t.indptr.data(), t.indices.data(), t.kv_len.data(), t.batch(), 16);
      for (int32_t g : {1, 2, 4, 8})
        for (int32_t tr : {16, 32}) {
          SCOPED_TRACE(::testing::Message() << "levels " << fan.size() << " group " << g << " tile " << tr);
          PackPlanConfig on = config(g, tr, 16, true), off = config(g, tr, 16, false);
          int64_t keys = 0;
          for (int32_t k : t.kv_len) keys += k;
          on.max_chunk = off.max_chunk = pack_max_chunk(keys, 2, 132, 256, 16);
          const WorkPlan pon = make_pack_plan(f, t.indptr.data(), t.kv_len.data(), on);
          const WorkPlan poff = make_pack_plan(f, t.indptr.data(), t.kv_len.data(), off);
          EXPECT_LE(traffic(pon, on), traffic(poff, off));
          cheaper += traffic(pon, on) < traffic(poff, off);
        }
    }
  EXPECT_GT(cheaper, 10);
}

}  // namespace
}  // namespace weft::plan
