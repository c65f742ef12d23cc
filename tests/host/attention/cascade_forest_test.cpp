// Explicit multi-level cascades (make_cascade_forest, cascade_forest.h): random nested levels over
// random page lists give forests whose pack plans cover every key once (the pack-plan property
// checks), equal to build_prefix_forest's where the stated levels are the whole sharing; bad
// levels throw weft::Error naming "levels".
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "attention/plan/cascade_forest.h"
#include "attention/plan/work_plan.h"
#include "tests/host/attention/pack_plan_check.h"
#include "weft/error.h"

namespace weft::plan {
namespace {

using pack_check::Batch;
using pack_check::check_forest;
using pack_check::check_plan;
using test::Rng;

// A random cascade: num_levels levels of nested groups (each level splits every group of the
// level above into 1..4 consecutive groups, each sharing 0..max_pages fresh pages), then each
// request's private keys. Page ids are distinct per group, so the levels are the whole sharing
// except where a group did not split (build_prefix_forest then merges the chain into one node).
struct Cascade {
  Batch bt;
  std::vector<std::vector<int32_t>> req_indptr, num_pages;
  std::vector<CascadeLevelSpec> specs() const {
    std::vector<CascadeLevelSpec> v;
    for (size_t l = 0; l < num_pages.size(); ++l)
      v.push_back({req_indptr[l].data(), num_pages[l].data(), static_cast<int32_t>(num_pages[l].size())});
    return v;
  }
};

Cascade random_cascade(Rng& rng, int32_t page_size, int num_levels, int32_t max_pages) {
  Cascade c;
  c.bt.page_size = page_size;
  // Level 0 groups over "slots" that later levels split; requests are the leaves of the last level.
  // Build top-down: counts of children per group per level.
  std::vector<std::vector<int32_t>> children(num_levels);
  int32_t groups = 1;
  for (int l = 0; l < num_levels; ++l) {
    int32_t next = 0;
    for (int32_t g = 0; g < groups; ++g) {
      const int32_t k = static_cast<int32_t>(rng.randint(1, l == 0 ? 3 : 4));
      children[l].push_back(k);
      next += k;
    }
    groups = next;
  }
  // Requests per last-level group: 1..4.
  std::vector<int32_t> per_leaf(groups);
  for (auto& x : per_leaf) x = static_cast<int32_t>(rng.randint(1, 4));
  // Requests under each group of each level, bottom-up.
  std::vector<std::vector<int32_t>> reqs(num_levels);
  reqs[num_levels - 1] = per_leaf;
  for (int l = num_levels - 1; l > 0; --l) {
    size_t at = 0;
    for (int32_t k : children[l]) {
      int32_t s = 0;
      for (int32_t i = 0; i < k; ++i) s += reqs[l][at++];
      reqs[l - 1].push_back(s);
    }
  }
  // Level l's groups are the children at level l: reqs[l] is per group of level l.
  int32_t next_page = 0;
  const int32_t batch = [&] {
    int32_t s = 0;
    for (int32_t x : per_leaf) s += x;
    return s;
  }();
  std::vector<std::vector<int32_t>> lists(batch);
  for (int l = 0; l < num_levels; ++l) {
    c.req_indptr.push_back({0});
    c.num_pages.emplace_back();
    int32_t r = 0;
    for (int32_t n : reqs[l]) {
      const int32_t np = rng.randint(0, 4) == 0 ? 0 : static_cast<int32_t>(rng.randint(1, max_pages));
      std::vector<int32_t> pages(np);
      for (auto& p : pages) p = next_page++;
      for (int32_t b = r; b < r + n; ++b) lists[b].insert(lists[b].end(), pages.begin(), pages.end());
      r += n;
      c.req_indptr[l].push_back(r);
      c.num_pages[l].push_back(np);
    }
  }
  for (int32_t b = 0; b < batch; ++b) {
    const int32_t priv = rng.randint(0, 5) == 0 ? 0 : static_cast<int32_t>(rng.randint(1, 3 * page_size + 7));
    const int32_t more = (priv + page_size - 1) / page_size;
    for (int32_t i = 0; i < more; ++i) lists[b].push_back(next_page++);
    const int32_t len = (static_cast<int32_t>(lists[b].size()) - more) * page_size + priv;
    c.bt.indices.insert(c.bt.indices.end(), lists[b].begin(), lists[b].end());
    c.bt.indptr.push_back(static_cast<int32_t>(c.bt.indices.size()));
    c.bt.kv_len.push_back(len);
  }
  return c;
}

TEST(CascadeForest, RandomLevelsCoverEveryKeyOnce) {
  Rng rng = Rng::for_current_test();
  int64_t nodes = 0, nested = 0;
  for (int iter = 0; iter < 120; ++iter) {
    const int32_t ps = (iter % 3 == 0) ? 1 : (iter % 3 == 1 ? 16 : 64);
    const Cascade c = random_cascade(rng, ps, 1 + iter % 3, ps == 1 ? 40 : 6);
    const Batch& bt = c.bt;
    SCOPED_TRACE(::testing::Message() << "iter " << iter << " batch " << bt.batch());
    const auto specs = c.specs();
    const PrefixForest f = make_cascade_forest(specs.data(), int32_t(specs.size()), bt.indptr.data(),
                                               bt.indices.data(), bt.kv_len.data(), bt.batch(), ps);
    ASSERT_NO_FATAL_FAILURE(check_forest(bt, f));
    // The stated levels are the whole sharing: same shared pages per request as found from ids.
    const PrefixForest found = build_prefix_forest(bt.indptr.data(), bt.indices.data(), bt.kv_len.data(), bt.batch(), ps);
    EXPECT_EQ(f.shared_pages, found.shared_pages);
    PackPlanConfig cfg;
    cfg.num_ctas = static_cast<int32_t>(rng.randint(1, 132));
    cfg.num_kv_heads = static_cast<int32_t>(rng.randint(1, 2));
    cfg.group_size = static_cast<int32_t>(rng.randint(0, 1) ? 1 : 4);
    cfg.page_size = ps;
    cfg.max_chunk = rng.randint(0, 1) ? 0 : static_cast<int32_t>(16 * rng.randint(1, 32));
    const WorkPlan p = make_pack_plan(f, bt.indptr.data(), bt.kv_len.data(), cfg);
    ASSERT_NO_FATAL_FAILURE(check_plan(bt, cfg, p));
    nodes += int64_t(f.nodes.size());
    for (const PrefixNode& n : f.nodes) nested += n.parent >= 0;
  }
  EXPECT_GT(nodes, 100);
  EXPECT_GT(nested, 30);
}

TEST(CascadeForest, BadLevelsThrow) {
  // Requests 0..2 share pages {10, 11}; 0 and 1 also {12}. Page size 4.
  Batch bt;
  bt.page_size = 4;
  bt.indices = {10, 11, 12, 20, 10, 11, 12, 21, 10, 11, 30};
  bt.indptr = {0, 4, 8, 11};
  bt.kv_len = {15, 14, 11};
  std::vector<int32_t> ri0{0, 3}, np0{2}, ri1{0, 2, 3}, np1{1, 0};
  auto forest = [&](std::vector<CascadeLevelSpec> s) {
    return make_cascade_forest(s.data(), int32_t(s.size()), bt.indptr.data(), bt.indices.data(), bt.kv_len.data(), 3,
                               4);
  };
  const PrefixForest f = forest({{ri0.data(), np0.data(), 1}, {ri1.data(), np1.data(), 2}});
  ASSERT_EQ(f.nodes.size(), 2u);
  EXPECT_EQ(f.nodes[1].parent, 0);
  EXPECT_EQ(f.shared_pages, (std::vector<int32_t>{3, 3, 2}));
  std::vector<int32_t> np_bad{3};  // request 2's third page differs
  EXPECT_EQ(test::thrown_argument([&] { forest({{ri0.data(), np_bad.data(), 1}}); }), "levels");
  std::vector<int32_t> ri_bad{0, 2};  // does not end at the batch
  EXPECT_EQ(test::thrown_argument([&] { forest({{ri_bad.data(), np0.data(), 1}}); }), "levels");
  std::vector<int32_t> ri_a{0, 1, 3}, np_a{0, 0}, ri_b{0, 2, 3}, np_b{0, 0};  // {0},{1,2} then {0,1},{2}
  EXPECT_EQ(test::thrown_argument([&] { forest({{ri_a.data(), np_a.data(), 2}, {ri_b.data(), np_b.data(), 2}}); }),
            "levels");
  bt.kv_len[1] = 11;  // request 1's third page is partial: it cannot share it
  EXPECT_EQ(test::thrown_argument([&] { forest({{ri0.data(), np0.data(), 1}, {ri1.data(), np1.data(), 2}}); }),
            "levels");
  std::vector<int32_t> np_neg{-1};
  EXPECT_EQ(test::thrown_argument([&] { forest({{ri0.data(), np_neg.data(), 1}}); }), "levels");
}

}  // namespace
}  // namespace weft::plan
