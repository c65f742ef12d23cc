// Random paged batches with prefix sharing and the property checks of prefix forests and pack
// plans (every (request, query head, key) covered exactly once, items read their rows' own pages,
// merges list their sources in key order): shared by pack_plan_test.cpp and
// pack_planner_test.cpp.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <numeric>
#include <vector>

#include "attention/plan/prefix_forest.h"
#include "attention/plan/work_plan.h"
#include "tests/common/test_util.h"

namespace weft::plan::pack_check {

using test::Rng;

// A random paged batch with prefix sharing: 0..3 trees of 1..3 levels (each node a run of full
// pages, 1..fanout children), leaf requests with private suffixes, plus unrelated requests,
// fully shared requests and empty ones. Page ids are a random permutation of the pool.
struct Batch {
  int32_t page_size = 16;
  std::vector<int32_t> indptr{0}, indices, kv_len;
  int32_t batch() const { return static_cast<int32_t>(kv_len.size()); }
};

// A batch from a generated tree (bench::PrefixTreeBatch or anything with indptr / indices / kv_len).
template <class Tree>
Batch batch_of(const Tree& t, int32_t page_size) {
  Batch bt;
  bt.page_size = page_size;
  bt.indptr = t.indptr;
  bt.indices = t.indices;
  bt.kv_len = t.kv_len;
  return bt;
}

inline Batch random_batch(Rng& rng, int32_t page_size, int max_levels, int fanout, int32_t max_shared_pages) {
  Batch bt;
  bt.page_size = page_size;
  int32_t next_page = 0;
  std::vector<std::vector<int32_t>> lists;
  std::vector<int32_t> lens;
  auto fresh = [&](int32_t n) {
    std::vector<int32_t> v(n);
    for (auto& x : v) x = next_page++;
    return v;
  };
  auto add_request = [&](std::vector<int32_t> prefix, int32_t private_tokens) {
    const int32_t full_prefix = static_cast<int32_t>(prefix.size()) * page_size;
    const int32_t more = (private_tokens + page_size - 1) / page_size;
    auto tail = fresh(more);
    prefix.insert(prefix.end(), tail.begin(), tail.end());
    lists.push_back(prefix);
    lens.push_back(full_prefix + private_tokens);
  };
  std::function<void(std::vector<int32_t>, int)> grow = [&](std::vector<int32_t> prefix, int level) {
    const int children = static_cast<int>(rng.randint(1, fanout));
    for (int c = 0; c < children; ++c) {
      auto mine = prefix;
      auto run = fresh(static_cast<int32_t>(rng.randint(1, max_shared_pages)));
      mine.insert(mine.end(), run.begin(), run.end());
      if (level + 1 < max_levels && rng.randint(0, 2) > 0) {
        grow(mine, level + 1);
      } else {
        const int sharers = static_cast<int>(rng.randint(1, fanout));
        for (int s = 0; s < sharers; ++s)
          add_request(mine, rng.randint(0, 9) == 0 ? 0 : static_cast<int32_t>(rng.randint(1, 4096)));
      }
    }
  };
  const int trees = static_cast<int>(rng.randint(0, 3));
  for (int t = 0; t < trees; ++t) grow({}, 0);
  const int loners = static_cast<int>(rng.randint(0, 4));
  for (int i = 0; i < loners; ++i) add_request({}, static_cast<int32_t>(rng.randint(0, 5000)));
  // Shuffle request order and page ids.
  std::vector<int32_t> req(lists.size());
  std::iota(req.begin(), req.end(), 0);
  for (size_t i = req.size(); i > 1; --i) std::swap(req[i - 1], req[rng.randint(0, int64_t(i) - 1)]);
  std::vector<int32_t> pid(next_page);
  std::iota(pid.begin(), pid.end(), 0);
  for (size_t i = pid.size(); i > 1; --i) std::swap(pid[i - 1], pid[rng.randint(0, int64_t(i) - 1)]);
  for (int32_t r : req) {
    for (int32_t pg : lists[r]) bt.indices.push_back(pid[pg]);
    bt.indptr.push_back(static_cast<int32_t>(bt.indices.size()));
    bt.kv_len.push_back(lens[r]);
  }
  return bt;
}

inline void check_forest(const Batch& bt, const PrefixForest& f) {
  const int32_t B = bt.batch(), ps = bt.page_size;
  ASSERT_EQ(f.num_requests(), B);
  std::vector<int32_t> seen(f.order);
  std::sort(seen.begin(), seen.end());
  for (int32_t b = 0; b < B; ++b) ASSERT_EQ(seen[b], b) << "order must list every request once";
  auto page = [&](int32_t b, int32_t i) { return bt.indices[bt.indptr[b] + i]; };
  for (size_t n = 0; n < f.nodes.size(); ++n) {
    const PrefixNode& nd = f.nodes[n];
    ASSERT_GE(nd.req_end - nd.req_begin, 2);
    ASSERT_LT(nd.page_begin, nd.page_end);
    if (nd.parent >= 0) {
      ASSERT_LT(nd.parent, int32_t(n)) << "preorder";
      const PrefixNode& up = f.nodes[nd.parent];
      ASSERT_EQ(up.page_end, nd.page_begin);
      ASSERT_LE(up.req_begin, nd.req_begin);
      ASSERT_GE(up.req_end, nd.req_end);
    } else {
      ASSERT_EQ(nd.page_begin, 0);
    }
    const int32_t first = f.order[nd.req_begin];
    for (int32_t i = nd.req_begin; i < nd.req_end; ++i) {
      const int32_t b = f.order[i];
      ASSERT_GE(bt.kv_len[b] / ps, nd.page_end) << "only full pages are shared";
      for (int32_t pg = 0; pg < nd.page_end; ++pg) ASSERT_EQ(page(b, pg), page(first, pg));
      ASSERT_GE(f.shared_pages[b], nd.page_end);
    }
  }
  // Maximal: the page after a request's shared pages is held by no other request at that position
  // with the same history; and a request with shared pages shares them with someone.
  for (int32_t b = 0; b < B; ++b) {
    const int32_t sp = f.shared_pages[b], full = bt.kv_len[b] / ps;
    ASSERT_LE(sp, full);
    for (int32_t o = 0; o < B; ++o) {
      if (o == b || bt.kv_len[o] / ps <= sp || sp >= full) continue;
      bool same = true;
      for (int32_t pg = 0; pg <= sp && same; ++pg) same = page(o, pg) == page(b, pg);
      ASSERT_FALSE(same) << "requests " << b << " and " << o << " share more than " << sp << " pages";
    }
  }
}

inline void check_plan(const Batch& bt, const PackPlanConfig& cfg, const WorkPlan& p) {
  const int32_t B = bt.batch(), g = cfg.group_size, H = cfg.num_kv_heads, ps = bt.page_size;
  ASSERT_EQ(static_cast<int32_t>(p.cta_indptr.size()), cfg.num_ctas + 1);
  // Narrow items first (the decode kernel's CTA ranges), then the wide ones (the wide kernel's).
  const int32_t n_nar = p.num_items() - p.num_wide_items;
  ASSERT_GE(p.num_wide_items, 0);
  ASSERT_EQ(p.cta_indptr.front(), 0);
  ASSERT_EQ(p.cta_indptr.back(), n_nar);
  for (int32_t c = 0; c < cfg.num_ctas; ++c) ASSERT_LE(p.cta_indptr[c], p.cta_indptr[c + 1]);
  if (p.num_wide_items > 0) {
    ASSERT_GT(cfg.wide_rows, cfg.tile_rows) << "wide items only with wide packs on";
    ASSERT_EQ(static_cast<int32_t>(p.wide_cta_indptr.size()), cfg.num_ctas + 1);
    ASSERT_EQ(p.wide_cta_indptr.front(), n_nar);
    ASSERT_EQ(p.wide_cta_indptr.back(), p.num_items());
    for (int32_t c = 0; c < cfg.num_ctas; ++c) ASSERT_LE(p.wide_cta_indptr[c], p.wide_cta_indptr[c + 1]);
  }
  for (int32_t i = 0; i < p.num_items(); ++i) {
    const int32_t rows = p.item_row_end[i] - p.item_row_begin[i];
    if (i < n_nar)
      ASSERT_LE(rows, cfg.tile_rows) << "item " << i;
    else
      ASSERT_TRUE(rows > cfg.tile_rows && rows <= cfg.wide_rows) << "wide item " << i << " has " << rows << " rows";
  }
  {  // the producer's slot count (WorkPlan::known_slots) is the scan's
    WorkPlan scan = p;
    scan.known_slots = -1;
    ASSERT_EQ(p.num_slots(), scan.num_slots());
  }
  // Which item owns each slot (a wide item fills ceil(rows / tile_rows) slots from its first).
  std::map<int32_t, int32_t> slot_item;
  std::map<int32_t, int32_t> slot_used;
  for (int32_t i = 0; i < p.num_items(); ++i) {
    if (p.item_slot[i] < 0) continue;
    ASSERT_TRUE(slot_item.emplace(p.item_slot[i], i).second) << "slot used twice";
    const int32_t rows = p.item_row_end[i] - p.item_row_begin[i];
    for (int32_t k = 0; k < std::max(1, (rows + cfg.tile_rows - 1) / cfg.tile_rows); ++k) {
      ASSERT_TRUE(slot_used.emplace(p.item_slot[i] + k, i).second) << "slot " << p.item_slot[i] + k << " used twice";
      ASSERT_LT(p.item_slot[i] + k, p.num_slots());
    }
  }
  // Coverage count per (request, query head, key), via difference arrays.
  std::vector<std::vector<int32_t>> cover(static_cast<size_t>(B) * H * g);
  for (int32_t b = 0; b < B; ++b)
    for (int32_t qh = 0; qh < H * g; ++qh) cover[static_cast<size_t>(b) * H * g + qh].assign(bt.kv_len[b] + 1, 0);
  std::vector<int32_t> final_rows(static_cast<size_t>(B) * H * g, 0);
  for (int32_t i = 0; i < p.num_items(); ++i) {
    const int32_t h = p.item_kv_head[i], nr = p.item_num_reqs[i];
    ASSERT_LE(p.item_row_end[i], nr * g);
    ASSERT_TRUE(nr == 1 || p.item_slot[i] >= 0) << "a pack always writes a partial state";
    for (int32_t r = p.item_row_begin[i]; r < p.item_row_end[i]; ++r) {
      const int32_t b = p.req_list[p.item_req_begin[i] + r / g];
      const int32_t qh = h * g + r % g;
      ASSERT_LE(p.item_kv_end[i], bt.kv_len[b]);
      // The item reads this request's own pages.
      for (int32_t k = p.item_kv_begin[i]; k < p.item_kv_end[i]; k += ps)
        ASSERT_EQ(bt.indices[p.item_page_base[i] + k / ps], bt.indices[bt.indptr[b] + k / ps]);
      auto& c = cover[static_cast<size_t>(b) * H * g + qh];
      c[p.item_kv_begin[i]] += 1;
      c[p.item_kv_end[i]] -= 1;
      if (p.item_slot[i] < 0) final_rows[static_cast<size_t>(b) * H * g + qh] += 1;
    }
  }
  for (size_t x = 0; x < cover.size(); ++x) {
    int32_t run = 0;
    for (size_t k = 0; k + 1 < cover[x].size(); ++k) {
      run += cover[x][k];
      ASSERT_EQ(run, 1) << "request " << x / (H * g) << " head " << x % (H * g) << " key " << k;
    }
  }
  // Merges: each output row group once, sources contiguous in key order from 0 to kv_len.
  std::vector<int32_t> merged(static_cast<size_t>(B) * H * g, 0);
  for (int32_t m = 0; m < p.num_merges(); ++m) {
    const int32_t b = p.merge_request[m], h = p.merge_kv_head[m];
    int32_t pos = 0;
    for (int32_t s = p.merge_src_indptr[m]; s < p.merge_src_indptr[m + 1]; ++s) {
      ASSERT_TRUE(slot_item.count(p.src_slot[s]));
      const int32_t i = slot_item[p.src_slot[s]];
      ASSERT_EQ(p.item_kv_begin[i], pos) << "sources in key order, no gap";
      pos = p.item_kv_end[i];
      ASSERT_EQ(p.item_kv_head[i], h);
      for (int32_t r = p.merge_row_begin[m]; r < p.merge_row_end[m]; ++r) {
        const int32_t item_row = p.src_row[s] + r - p.merge_row_begin[m] + p.item_row_begin[i];
        ASSERT_GE(item_row, p.item_row_begin[i]);
        ASSERT_LT(item_row, p.item_row_end[i]);
        ASSERT_EQ(p.req_list[p.item_req_begin[i] + item_row / g], b);
        ASSERT_EQ(item_row % g, r % g);
      }
    }
    ASSERT_EQ(pos, bt.kv_len[b]);
    for (int32_t r = p.merge_row_begin[m]; r < p.merge_row_end[m]; ++r) merged[(static_cast<size_t>(b) * H) * g + h * g + r] += 1;
  }
  for (size_t x = 0; x < merged.size(); ++x)
    ASSERT_EQ(merged[x] + final_rows[x], 1) << "output row " << x << ": merged " << merged[x] << ", final " << final_rows[x];
}

// One case of the wide-pack property tests: a random 1- or 2-level forest (page 1 / 16 / 64 by
// iteration) and a random config with 128-row wide items, head fold 1 or 2 and optional traffic
// costs. The draws' order is fixed (the tests' random streams depend on it).
struct WideCase {
  Batch bt;
  PrefixForest forest;
  PackPlanConfig cfg;
};
inline WideCase random_wide_case(Rng& rng, int iter) {
  static constexpr int32_t kPageSizes[] = {1, 16, 64};
  static constexpr int32_t kGroups[] = {1, 2, 4, 8};
  WideCase c;
  const int32_t ps = kPageSizes[iter % 3];
  const int32_t max_shared = ps == 1 ? 600 : (ps == 16 ? 200 : 60);
  const int levels = 1 + iter % 2;
  c.bt = random_batch(rng, ps, levels,
                      (levels == 1 ? 4 : 2) + static_cast<int>(rng.randint(1, levels == 1 ? 12 : 6)),
                      max_shared / 2);
  c.forest = build_prefix_forest(c.bt.indptr.data(), c.bt.indices.data(), c.bt.kv_len.data(), c.bt.batch(), ps);
  PackPlanConfig& cfg = c.cfg;
  cfg.num_kv_heads = static_cast<int32_t>(rng.randint(1, 2));
  cfg.head_fold = cfg.num_kv_heads == 2 && rng.randint(0, 1) ? 2 : 1;
  cfg.num_ctas = cfg.head_fold * static_cast<int32_t>(rng.randint(1, 132));
  cfg.group_size = kGroups[rng.randint(0, 3)];
  cfg.tile_rows = 32;
  cfg.wide_rows = 128;
  cfg.wide_min_rows = static_cast<int32_t>(rng.randint(33, 96));
  cfg.page_size = ps;
  cfg.auto_chunk_min = static_cast<int32_t>(16 * rng.randint(1, 16));
  if (rng.randint(0, 1)) set_pack_traffic(cfg, 128, 2);
  return c;
}

// The decode wrapper's prefix-sharing config at d128 (bench::pack_bench_config without linking
// the decode component: 32-row tiles, head fold gcd(KV heads, grid), chunks from the packed work
// with decode's 256-key minimum).
inline PackPlanConfig wrapper_config(int32_t num_ctas, int32_t num_kv_heads, int32_t group_size) {
  PackPlanConfig c;
  c.num_ctas = num_ctas;
  c.num_kv_heads = num_kv_heads;
  c.group_size = group_size;
  c.tile_rows = 32;
  c.page_size = 16;
  set_pack_traffic(c, 128, 2);
  c.auto_chunk_min = 256;
  c.head_fold = std::gcd(num_kv_heads, num_ctas);
  return c;
}

}  // namespace weft::plan::pack_check
