// Paged batches shaped as PAT's synthetic prefix trees (pure C++, shared by weft-plan-bench and
// the weft-bench "pat" group): `fan` = nodes per level (PAT's B, e.g. {1, 4, 16}: one root, 4
// children in all, 16 leaves), `keys` = keys per node at each level (PAT's L, e.g. {128, 256,
// 1024}). The leaves are the requests: a request's sequence is its ancestors' keys then its own
// leaf's keys (the private suffix), so its last level is never shared. Nodes of a level are
// spread evenly over the level above (fan[l] / fan[l-1] children each). Every level length is
// a multiple of the page size except possibly the leaves', so shared levels are whole pages.
// Page ids are shuffled over the pool (seeded) as a serving cache's free list would hand them out.
#pragma once
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attention/heuristics.h"
#include "attention/plan/pack_planner.h"
#include "attention/plan/work_plan.h"
#include "decode/decode_plan.h"

namespace weft::bench {

struct PrefixTreeBatch {
  std::vector<int32_t> indptr{0}, indices, kv_len, last_page_len;
  int64_t num_pages = 0;    // pool size (page ids are 0 .. num_pages - 1)
  int64_t unique_keys = 0;  // every node's keys once
  int32_t batch() const { return static_cast<int32_t>(kv_len.size()); }
};

inline PrefixTreeBatch make_prefix_tree_batch(const std::vector<int32_t>& fan, const std::vector<int32_t>& keys,
                                              int32_t page_size, uint64_t seed = 7) {
  PrefixTreeBatch t;
  const size_t levels = fan.size();
  // Page runs of every node, level by level; node n of level l hangs under node n / (fan[l] /
  // fan[l-1]) of level l - 1.
  std::vector<std::vector<std::vector<int32_t>>> runs(levels);
  int32_t next = 0;
  for (size_t l = 0; l < levels; ++l) {
    const int32_t pages = (keys[l] + page_size - 1) / page_size;
    runs[l].resize(fan[l]);
    for (auto& r : runs[l]) {
      r.resize(pages);
      for (auto& p : r) p = next++;
    }
    t.unique_keys += int64_t(fan[l]) * keys[l];
  }
  t.num_pages = next;
  std::vector<int32_t> perm(next);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937_64(seed));
  for (int32_t leaf = 0; leaf < fan[levels - 1]; ++leaf) {
    int32_t len = 0;
    for (size_t l = 0; l < levels; ++l) {
      int32_t node = leaf;
      for (size_t up = levels - 1; up > l; --up) node /= fan[up] / fan[up - 1];
      for (int32_t p : runs[l][node]) t.indices.push_back(perm[p]);
      len += keys[l];
    }
    t.indptr.push_back(static_cast<int32_t>(t.indices.size()));
    t.kv_len.push_back(len);
    t.last_page_len.push_back(len - (static_cast<int32_t>(t.indptr.back() - t.indptr[t.indptr.size() - 2]) - 1) * page_size);
  }
  return t;
}

// "1-4-16": a tree's fan or level lengths as the bench names them.
inline std::string join_dims(const std::vector<int32_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "-" : "") + std::to_string(v[i]);
  return s;
}

// The "pat" bench's trees (PAT's synthetic configurations, bench/cases_decode_pat.cu): {fan, keys}
// per tree, 12 of them.
struct PatTree {
  std::vector<int32_t> fan, keys;
};
inline std::vector<PatTree> pat_trees() {
  std::vector<PatTree> trees;
  for (auto fan : {std::vector<int32_t>{1, 4, 16}, {1, 8, 64}})
    for (auto keys : {std::vector<int32_t>{128, 256, 1024}, {512, 512, 512}}) trees.push_back({fan, keys});
  for (auto fan : {std::vector<int32_t>{1, 32}, {1, 256}, {4, 64}})
    for (auto keys : {std::vector<int32_t>{2048, 512}, {4096, 128}}) trees.push_back({fan, keys});
  for (auto keys : {std::vector<int32_t>{128, 256, 1024, 128}, {512, 512, 512, 512}})
    trees.push_back({{1, 4, 16, 64}, keys});
  return trees;
}

// The pack plan config and workspace bounds BatchDecodeWrapper uses for such a batch (its
// share_bounds; chunks from the packed work, at least decode's 256-key minimum chunk, 16-key
// tile; its head fold), for the host-side plan timings.
inline weft::plan::PackPlanConfig pack_bench_config(int32_t page_size, int32_t num_ctas, int32_t num_kv_heads,
                                                    int32_t group_size, int32_t head_dim) {
  weft::plan::PackPlanConfig pc;
  pc.num_ctas = num_ctas;
  pc.num_kv_heads = num_kv_heads;
  pc.group_size = group_size;
  pc.tile_rows = weft::decode::pack_tile_rows(head_dim);
  pc.page_size = page_size;
  weft::plan::set_pack_traffic(pc, head_dim, 2);
  pc.auto_chunk_min = weft::decode::kMinChunk;  // chunks from the packed work (PackPlanConfig::auto_chunk_min)
  pc.head_fold = weft::decode::decode_head_fold(num_kv_heads, num_ctas);
  return pc;
}
inline weft::plan::WorkPlanBounds pack_bench_bounds(int32_t batch, int32_t num_ctas, int32_t num_kv_heads,
                                                    int32_t head_dim) {
  weft::plan::WorkPlanBounds wb;
  wb.max_batch = batch;
  wb.max_items = 4 * batch * num_kv_heads + 2 * num_ctas;
  wb.max_merges = batch * num_kv_heads;
  wb.max_sources = wb.max_slots = wb.max_items;
  wb.num_ctas = num_ctas;
  wb.tile_rows = weft::decode::pack_tile_rows(head_dim);
  wb.head_dim = head_dim;
  return wb;
}

// The pack plan BatchDecodeWrapper makes of a prefix-tree batch with the default DecodeOptions
// (share_prefixes on, wide packs from heuristics::kPackWideMinRows rows and kPackWideMinKeys keys,
// overlap, one sm90 wave of `sms` CTAs when the wide items can load there), d128, 16-bit KV:
// decode/wrapper_plan.cpp's config and its two re-plans, for host-side replays (the prefix-sharing
// cost model: weft-plan-bench --filter pat-cost, tests/host/decode/pack_cost_test.cpp). The
// device-dependent inputs are given: grid (the decode grid, 264 on H100), sms (132), sm90 (the
// Hopper wide tile runs this shape: decode::wide_sm90_shape and an sm90 device).
inline weft::plan::PackPlanConfig pat_wrapper_plan(const PrefixTreeBatch& t, int32_t num_qo_heads, int32_t num_kv_heads,
                                                    int32_t grid, int32_t sms, bool sm90, int32_t page_size,
                                                    weft::plan::PackPlanner& planner) {
  const int32_t g = num_qo_heads / num_kv_heads, d = 128;
  weft::plan::PackPlanConfig pc = pack_bench_config(page_size, grid, num_kv_heads, g, d);
  pc.kv_granularity = weft::decode::kPlanKVTile;
  pc.wide_rows = weft::decode::kWidePackRows;
  pc.wide_min_rows = weft::heuristics::kPackWideMinRows;
  pc.wide_min_keys = weft::heuristics::kPackWideMinKeys;
  pc.wide_overlap = 1;
  pc.wide_key_cost = weft::heuristics::kPackWideKeyCost;
  pc.wide_split_margin = weft::heuristics::kPackWideSplitMargin;
  pc.max_slots = 4 * t.batch() * num_kv_heads + 2 * grid;  // the wrapper's share_bounds at max_batch = batch
  if (sm90) {
    pc.wide_wave_ctas = sms;
    pc.wide_item_keys = weft::heuristics::kPackWideSm90ItemKeys;
  }
  planner.reset();
  planner.plan(t.indptr.data(), t.indices.data(), t.kv_len.data(), t.batch(), pc);
  if (pc.wide_wave_ctas > 0 && planner.current().wide_grid > 0 &&
      !weft::plan::wide_rows_loadable(planner.current(), g, pc.head_fold, /*consecutive=*/g < 8)) {
    pc.wide_wave_ctas = 0;
    pc.wide_item_keys = 0;
    planner.reset();
    planner.plan(t.indptr.data(), t.indices.data(), t.kv_len.data(), t.batch(), pc);
  }
  if (planner.current().num_slots() > pc.max_slots) {
    pc.wide_rows = 0;
    planner.reset();
    planner.plan(t.indptr.data(), t.indices.data(), t.kv_len.data(), t.batch(), pc);
  }
  return pc;
}

}  // namespace weft::bench
