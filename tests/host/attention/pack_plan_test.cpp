// Property tests of the prefix forest (prefix_forest.h) and the pack planner (work_plan.h) on
// random prefix trees: every (request, query head, key) is covered exactly once, every item reads
// its rows' own pages, merges list their sources in key order.
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
#include "weft/error.h"

namespace weft::plan {
namespace {

using test::Rng;

// A random paged batch with prefix sharing: 0..3 trees of 1..3 levels (each node a run of full
// pages, 1..fanout children), leaf requests with private suffixes, plus unrelated requests,
// fully shared requests and empty ones. Page ids are a random permutation of the pool.
struct Batch {
  int32_t page_size = 16;
  std::vector<int32_t> indptr{0}, indices, kv_len;
  int32_t batch() const { return static_cast<int32_t>(kv_len.size()); }
};

Batch random_batch(Rng& rng, int32_t page_size, int max_levels, int fanout, int32_t max_shared_pages) {
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

void check_forest(const Batch& bt, const PrefixForest& f) {
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

void check_plan(const Batch& bt, const PackPlanConfig& cfg, const WorkPlan& p) {
  const int32_t B = bt.batch(), g = cfg.group_size, H = cfg.num_kv_heads, ps = bt.page_size;
  ASSERT_EQ(static_cast<int32_t>(p.cta_indptr.size()), cfg.num_ctas + 1);
  ASSERT_EQ(p.cta_indptr.back(), p.num_items());
  // Which item owns each slot.
  std::map<int32_t, int32_t> slot_item;
  for (int32_t i = 0; i < p.num_items(); ++i)
    if (p.item_slot[i] >= 0) ASSERT_TRUE(slot_item.emplace(p.item_slot[i], i).second) << "slot used twice";
  // Coverage count per (request, query head, key), via difference arrays.
  std::vector<std::vector<int32_t>> cover(static_cast<size_t>(B) * H * g);
  for (int32_t b = 0; b < B; ++b)
    for (int32_t qh = 0; qh < H * g; ++qh) cover[static_cast<size_t>(b) * H * g + qh].assign(bt.kv_len[b] + 1, 0);
  std::vector<int32_t> final_rows(static_cast<size_t>(B) * H * g, 0);
  for (int32_t i = 0; i < p.num_items(); ++i) {
    const int32_t h = p.item_kv_head[i], nr = p.item_num_reqs[i];
    ASSERT_LE(p.item_row_end[i] - p.item_row_begin[i], cfg.tile_rows);
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

TEST(PackPlan, RandomPrefixForestsCoverEveryKeyOnce) {
  Rng rng = Rng::for_current_test();
  const int32_t page_sizes[] = {1, 16, 64};
  const int32_t groups[] = {1, 2, 4, 8, 16, 32};
  int64_t packs = 0, multi_level = 0;
  for (int iter = 0; iter < 150; ++iter) {
    const int32_t ps = page_sizes[iter % 3];
    const int32_t max_shared = ps == 1 ? 600 : (ps == 16 ? 200 : 60);
    const Batch bt = random_batch(rng, ps, 1 + iter % 3, 1 + static_cast<int>(rng.randint(1, 8)), max_shared);
    SCOPED_TRACE(::testing::Message() << "iter " << iter << " batch " << bt.batch() << " page " << ps);
    const PrefixForest f = build_prefix_forest(bt.indptr.data(), bt.indices.data(), bt.kv_len.data(), bt.batch(), ps);
    ASSERT_NO_FATAL_FAILURE(check_forest(bt, f));
    PackPlanConfig cfg;
    cfg.num_ctas = static_cast<int32_t>(rng.randint(1, 264));
    cfg.num_kv_heads = static_cast<int32_t>(rng.randint(1, 3));
    cfg.group_size = groups[rng.randint(0, 5)];
    cfg.tile_rows = cfg.group_size > 16 ? 32 : 16;
    cfg.page_size = ps;
    cfg.max_chunk = rng.randint(0, 1) ? 0 : static_cast<int32_t>(16 * rng.randint(1, 64));
    cfg.min_sharers = static_cast<int32_t>(rng.randint(2, 3));
    const WorkPlan p = make_pack_plan(f, bt.indptr.data(), bt.kv_len.data(), cfg);
    ASSERT_NO_FATAL_FAILURE(check_plan(bt, cfg, p));
    const WorkPlan again = make_pack_plan(f, bt.indptr.data(), bt.kv_len.data(), cfg);
    ASSERT_EQ(again.item_slot, p.item_slot) << "deterministic";
    ASSERT_EQ(again.item_kv_begin, p.item_kv_begin);
    ASSERT_EQ(again.src_slot, p.src_slot);
    for (int32_t i = 0; i < p.num_items(); ++i) packs += p.item_num_reqs[i] >= 2;
    for (const PrefixNode& n : f.nodes) multi_level += n.parent >= 0;
  }
  EXPECT_GT(packs, 500) << "the generator must produce sharing";
  EXPECT_GT(multi_level, 50) << "and nested prefixes";
}

// Two requests sharing a 2-level prefix read each shared key once: the packs' keys plus the
// private suffixes equal the unique keys of the batch, per kv head.
TEST(PackPlan, TwoLevelPrefixIsReadOnce) {
  // Pages: level 1 = {10, 11}, level 2 = {12} shared by requests 0 and 1; request 2 shares level
  // 1 only; private pages after. Page size 4.
  Batch bt;
  bt.page_size = 4;
  bt.indices = {10, 11, 12, 20, 10, 11, 12, 21, 22, 10, 11, 30};
  bt.indptr = {0, 4, 9, 12};
  bt.kv_len = {3 * 4 + 2, 3 * 4 + 7, 2 * 4 + 3};
  const PrefixForest f = build_prefix_forest(bt.indptr.data(), bt.indices.data(), bt.kv_len.data(), 3, 4);
  ASSERT_EQ(f.nodes.size(), 2u);
  EXPECT_EQ(f.nodes[0].page_end, 2);
  EXPECT_EQ(f.nodes[0].req_end - f.nodes[0].req_begin, 3);
  EXPECT_EQ(f.nodes[1].page_begin, 2);
  EXPECT_EQ(f.nodes[1].page_end, 3);
  EXPECT_EQ(f.nodes[1].parent, 0);
  EXPECT_EQ(f.shared_pages, (std::vector<int32_t>{3, 3, 2}));
  PackPlanConfig cfg;
  cfg.num_ctas = 8;
  cfg.num_kv_heads = 2;
  cfg.group_size = 4;
  cfg.page_size = 4;
  const WorkPlan p = make_pack_plan(f, bt.indptr.data(), bt.kv_len.data(), cfg);
  ASSERT_NO_FATAL_FAILURE(check_plan(bt, cfg, p));
  int64_t keys = 0;
  for (int32_t i = 0; i < p.num_items(); ++i) keys += p.item_kv_end[i] - p.item_kv_begin[i];
  const int64_t unique = 3 * 4 /*shared pages*/ + 2 + 7 + 3 /*private*/;
  EXPECT_EQ(keys, unique * cfg.num_kv_heads);
}

TEST(PackPlan, BadInputThrows) {
  const int32_t indptr[] = {0, 1};
  const int32_t indices[] = {0};
  const int32_t len_bad[] = {40};  // needs 3 pages of 16
  EXPECT_THROW(build_prefix_forest(indptr, indices, len_bad, 1, 16), Error);
  const int32_t len[] = {10};
  const PrefixForest f = build_prefix_forest(indptr, indices, len, 1, 16);
  PackPlanConfig cfg;
  cfg.num_ctas = 0;
  EXPECT_THROW(make_pack_plan(f, indptr, len, cfg), Error);
}

}  // namespace
}  // namespace weft::plan
