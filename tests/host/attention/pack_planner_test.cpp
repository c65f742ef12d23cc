// Lazy update of prefix-sharing plans (PackPlanner, pack_planner.h): over random decode steps
// (tokens appended to private suffixes, new pages from the pool), every lazily updated plan passes
// the pack-plan property checks and holds exactly the items and merges of a fresh plan of the same
// table (only the CTA deal and slot numbers may differ), and its image equals a full serialize;
// structural changes (a page id rewritten so that requests share more, a shorter request, another
// batch) fall back to a full plan.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <vector>

#include "attention/plan/pack_planner.h"
#include "tests/host/attention/pack_plan_check.h"
#include "weft/error.h"

namespace weft::plan {
namespace {

using pack_check::Batch;
using pack_check::check_plan;
using pack_check::random_batch;
using test::Rng;

// Appends `tokens` keys to request b, taking new page ids from next_page when its last page fills.
void append_tokens(Batch& bt, int32_t b, int32_t tokens, int32_t& next_page) {
  const int32_t ps = bt.page_size;
  const int32_t len = bt.kv_len[b] + tokens;
  const int32_t have = bt.indptr[b + 1] - bt.indptr[b], need = (len + ps - 1) / ps;
  if (need > have) {
    std::vector<int32_t> more(need - have);
    for (auto& x : more) x = next_page++;
    bt.indices.insert(bt.indices.begin() + bt.indptr[b + 1], more.begin(), more.end());
    for (size_t i = b + 1; i < bt.indptr.size(); ++i) bt.indptr[i] += need - have;
  }
  bt.kv_len[b] = len;
}

// An item as a fresh plan and a lazy plan must agree on it: rows (requests through req_list),
// KV head and source, key range, final or partial.
using ItemKey = std::tuple<int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, bool>;
std::vector<ItemKey> items_of(const WorkPlan& p) {
  std::vector<ItemKey> v;
  for (int32_t i = 0; i < p.num_items(); ++i)
    v.emplace_back(p.req_list[p.item_req_begin[i]], p.item_num_reqs[i], p.item_kv_head[i], p.item_row_begin[i],
                   p.item_row_end[i], p.item_page_base[i], p.item_kv_begin[i], p.item_kv_end[i], p.item_slot[i] < 0);
  std::sort(v.begin(), v.end());
  return v;
}
// Merges with their sources as (item key range, source row), in key order.
std::vector<std::vector<int32_t>> merges_of(const WorkPlan& p) {
  std::vector<int32_t> item_of_slot(p.num_slots() + 1, -1);
  for (int32_t i = 0; i < p.num_items(); ++i)
    if (p.item_slot[i] >= 0) item_of_slot[p.item_slot[i]] = i;
  std::vector<std::vector<int32_t>> v;
  for (int32_t m = 0; m < p.num_merges(); ++m) {
    std::vector<int32_t> e{p.merge_request[m], p.merge_kv_head[m], p.merge_row_begin[m], p.merge_row_end[m]};
    for (int32_t s = p.merge_src_indptr[m]; s < p.merge_src_indptr[m + 1]; ++s) {
      const int32_t i = item_of_slot[p.src_slot[s]];
      e.insert(e.end(), {p.item_kv_begin[i], p.item_kv_end[i], p.src_row[s], p.item_num_reqs[i]});
    }
    v.push_back(e);
  }
  std::sort(v.begin(), v.end());
  return v;
}

WorkPlanLayout layout_for(const PackPlanConfig& cfg, int32_t batch) {
  WorkPlanBounds wb;
  wb.max_batch = std::max(1, batch);
  wb.max_items = 64 * std::max(1, batch) * cfg.num_kv_heads + 4 * cfg.num_ctas + 64;
  wb.max_merges = std::max(1, batch) * cfg.num_kv_heads * 4;
  wb.max_sources = wb.max_items;
  wb.max_slots = 4 * wb.max_items;  // wide items fill several slots
  wb.num_ctas = cfg.num_ctas;
  wb.tile_rows = cfg.tile_rows;
  wb.head_dim = 8;
  return WorkPlanLayout(wb);
}

// The image of a plan as the decode wrapper keeps it: a full plan copies the whole image, a lazy
// update, with `moved`, only the span PackPlanner::serialize_moved writes and returns, else (the
// workspace may hold an older version) the whole image again. The staging buffer written
// alternates between two (a ring's slots, which may hold an older image: only the copied span
// must be right). The device image must equal a full serialize of the plan, the previous plans'
// entries past this one's counts (unread by the kernels) cleared in the device image and both
// slots before a full plan (a full plan with FEWER items than the one before, e.g. a coarser
// chunk bound, left them behind).
struct ImageCheck {
  explicit ImageCheck(const WorkPlanLayout& l)
      : layout(l), device(l.metadata_bytes()), fresh(l.metadata_bytes()), staging{device, device} {}
  void step(const PackPlanner& planner, bool lazy, bool moved) {
    const WorkPlan& p = planner.current();
    std::vector<unsigned char>& slot = staging[++steps % 2];
    size_t at = 0, bytes = layout.metadata_bytes();
    if (!lazy) {
      for (auto* v : {&device, &staging[0], &staging[1]}) std::fill(v->begin(), v->end(), 0);
      layout.serialize(p, slot.data());
    } else if (moved) {
      std::tie(at, bytes) = planner.serialize_moved(layout, slot.data());
      ASSERT_GE(at, layout.item_kv_offset());
      ASSERT_EQ(at + bytes, layout.item_kv_offset() + layout.item_kv_bytes());
      spans += bytes < layout.item_kv_bytes();
    } else {
      layout.serialize(p, slot.data());  // the wrapper when the workspace may hold an older version
    }
    std::copy_n(slot.begin() + at, bytes, device.begin() + at);
    std::fill(fresh.begin(), fresh.end(), 0);
    layout.serialize(p, fresh.data());
    ASSERT_TRUE(std::equal(device.begin(), device.end(), fresh.begin()))
        << "lazy image differs at byte "
        << std::mismatch(device.begin(), device.end(), fresh.begin()).first - device.begin() << " (item_kv at "
        << layout.item_kv_offset() << ", " << layout.item_kv_bytes() << " bytes; items " << p.num_items()
        << ", wide " << p.num_wide_items << ", ctas " << p.num_ctas << ", lazy " << lazy << ", moved " << moved
        << ")";
  }
  const WorkPlanLayout& layout;
  std::vector<unsigned char> device, fresh, staging[2];
  int64_t steps = 0, spans = 0;  // spans: moved copies shorter than the three arrays
};

TEST(PackPlanner, LazyUpdateEqualsFreshPlan) {
  Rng rng = Rng::for_current_test();
  const int32_t page_sizes[] = {1, 16, 64};
  int64_t lazy = 0, full = 0, wide_lazy = 0;
  for (int iter = 0; iter < 40; ++iter) {
    const int32_t ps = page_sizes[iter % 3];
    Batch bt = random_batch(rng, ps, 1 + iter % 3, 1 + static_cast<int>(rng.randint(1, 8)),
                            ps == 1 ? 300 : (ps == 16 ? 100 : 30));
    int32_t next_page = bt.indices.empty() ? 0 : *std::max_element(bt.indices.begin(), bt.indices.end()) + 1;
    PackPlanConfig cfg;
    cfg.num_ctas = static_cast<int32_t>(rng.randint(1, 132));
    cfg.num_kv_heads = static_cast<int32_t>(rng.randint(1, 2));
    if (iter % 4 >= 2) {  // head folding (PackPlanConfig::head_fold) on half the cases
      cfg.head_fold = static_cast<int32_t>(1 << rng.randint(1, 2));
      cfg.num_kv_heads = cfg.head_fold * static_cast<int32_t>(rng.randint(1, 2));
      cfg.num_ctas = cfg.head_fold * static_cast<int32_t>(rng.randint(1, 40));
    }
    cfg.group_size = static_cast<int32_t>(rng.randint(0, 1) ? 1 : 4 * rng.randint(1, 2));
    cfg.page_size = ps;
    cfg.max_chunk = rng.randint(0, 1) ? 0 : static_cast<int32_t>(16 * rng.randint(4, 64));
    if (iter % 3 == 1) {  // chunks from the packed work (auto_chunk_min; max_chunk then ignored)
      cfg.auto_chunk_min = static_cast<int32_t>(16 * rng.randint(1, 16));
    }
    if (iter % 2) {  // the profit model (pack_schedule.cpp) and 32-row tiles on every other case
      set_pack_traffic(cfg, 128, 2);
      cfg.tile_rows = 32;
    }
    if (iter % 4 == 1 || iter % 4 == 2) {  // wide packs (PackPlanConfig::wide_rows) on half the cases
      cfg.wide_rows = 128;
      cfg.wide_min_rows = static_cast<int32_t>(rng.randint(0, 1) ? 64 : 33);
      if (iter % 4 == 1) {  // the overlapped launch's split grid (where estimated faster) on half of them
        cfg.wide_overlap = 1;
        cfg.wide_key_cost = 2.f;
        cfg.wide_split_margin = 0.7f;
      }
    }
    const WorkPlanLayout layout = layout_for(cfg, bt.batch());
    ImageCheck image(layout);
    PackPlanner planner;
    for (int step = 0; step < 12; ++step) {
      SCOPED_TRACE(::testing::Message() << "iter " << iter << " step " << step << " batch " << bt.batch());
      const auto kind = planner.plan(bt.indptr.data(), bt.indices.data(), bt.kv_len.data(), bt.batch(), cfg);
      if (step == 0) ASSERT_EQ(kind, PackPlanner::Update::kFull);
      const WorkPlan& p = planner.current();
      ASSERT_NO_FATAL_FAILURE(check_plan(bt, cfg, p));
      const PrefixForest f = build_prefix_forest(bt.indptr.data(), bt.indices.data(), bt.kv_len.data(), bt.batch(), ps);
      const WorkPlan fresh = make_pack_plan(f, bt.indptr.data(), bt.kv_len.data(), cfg);
      ASSERT_EQ(items_of(p), items_of(fresh));
      ASSERT_EQ(merges_of(p), merges_of(fresh));
      ASSERT_EQ(p.req_list, fresh.req_list);
      const bool is_lazy = kind == PackPlanner::Update::kLazy;
      lazy += is_lazy;
      full += !is_lazy;
      wide_lazy += is_lazy && p.num_wide_items > 0;
      ASSERT_NO_FATAL_FAILURE(image.step(planner, is_lazy, /*moved=*/step % 3 != 1));
      // The next step: one decode token for most requests, sometimes a longer jump.
      for (int32_t b = 0; b < bt.batch(); ++b)
        if (rng.randint(0, 3) > 0) append_tokens(bt, b, rng.randint(0, 9) == 0 ? int32_t(rng.randint(2, 80)) : 1, next_page);
    }
  }
  EXPECT_GT(lazy, 200) << "most decode steps must re-plan lazily";
  EXPECT_GT(wide_lazy, 5) << "lazy updates of plans with wide items";
  EXPECT_GT(full, 40) << "lazy " << lazy << " full " << full;
  RecordProperty("lazy_updates", static_cast<int>(lazy));
}

// Head folding (PackPlanConfig::head_fold): the plan of one head class replicated holds exactly
// the items and merges of the unfolded plan, passes the property checks, and its deal is as
// balanced (the folded deal is the unfolded deal's greedy on C / f CTAs, replicated: its
// makespan in cost units rows + keys is checked against the unfolded one's).
TEST(PackPlanner, HeadFoldHoldsTheUnfoldedPlan) {
  Rng rng = Rng::for_current_test();
  const int32_t page_sizes[] = {1, 16, 64};
  int64_t folded_items = 0, wide_items = 0;
  for (int iter = 0; iter < 60; ++iter) {
    const int32_t ps = page_sizes[iter % 3];
    const Batch bt = random_batch(rng, ps, 1 + iter % 3, 1 + static_cast<int>(rng.randint(1, 8)),
                                  ps == 1 ? 300 : (ps == 16 ? 100 : 30));
    PackPlanConfig cfg;
    const int32_t f = static_cast<int32_t>(1 << rng.randint(1, 3));
    cfg.num_kv_heads = f * static_cast<int32_t>(rng.randint(1, 2));
    cfg.num_ctas = f * static_cast<int32_t>(rng.randint(1, 40));
    cfg.group_size = static_cast<int32_t>(1 << rng.randint(0, 3));
    cfg.tile_rows = rng.randint(0, 1) ? 32 : 16;
    cfg.page_size = ps;
    cfg.max_chunk = rng.randint(0, 1) ? 0 : static_cast<int32_t>(16 * rng.randint(4, 64));
    if (iter % 2) set_pack_traffic(cfg, 128, 2);
    if (iter % 4 >= 2) {  // wide packs on half the cases: both blocks of items are folded
      cfg.wide_rows = 128;
      cfg.wide_min_rows = 64;
    }
    SCOPED_TRACE(::testing::Message() << "iter " << iter << " fold " << f << " heads " << cfg.num_kv_heads << " ctas "
                                      << cfg.num_ctas);
    const PrefixForest forest =
        build_prefix_forest(bt.indptr.data(), bt.indices.data(), bt.kv_len.data(), bt.batch(), ps);
    const WorkPlan plain = make_pack_plan(forest, bt.indptr.data(), bt.kv_len.data(), cfg);
    cfg.head_fold = f;
    const WorkPlan folded = make_pack_plan(forest, bt.indptr.data(), bt.kv_len.data(), cfg);
    ASSERT_NO_FATAL_FAILURE(check_plan(bt, cfg, folded));
    ASSERT_EQ(items_of(folded), items_of(plain));
    ASSERT_EQ(merges_of(folded), merges_of(plain));
    ASSERT_EQ(folded.req_list, plain.req_list);
    ASSERT_EQ(folded.num_slots(), plain.num_slots());
    auto makespan = [](const WorkPlan& p) {
      int64_t worst = 0;
      for (int32_t c = 0; c < p.num_ctas; ++c) {
        int64_t load = 0;
        for (int32_t i = p.cta_indptr[c]; i < p.cta_indptr[c + 1]; ++i)
          load += (p.item_row_end[i] - p.item_row_begin[i]) + (p.item_kv_end[i] - p.item_kv_begin[i]);
        worst = std::max(worst, load);
      }
      return worst;
    };
    // Greedy longest-first on identical head classes: the folded makespan is the unfolded one's
    // within one item's cost (the greedy bound), here checked as at most the unfolded + max item.
    int64_t max_item = 0;
    for (int32_t i = 0; i < plain.num_items(); ++i)
      max_item = std::max<int64_t>(max_item, (plain.item_row_end[i] - plain.item_row_begin[i]) +
                                                 (plain.item_kv_end[i] - plain.item_kv_begin[i]));
    EXPECT_LE(makespan(folded), makespan(plain) + max_item);
    folded_items += folded.num_items();
    wide_items += folded.num_wide_items;
  }
  EXPECT_GT(folded_items, 1000);
  EXPECT_GT(wide_items, 50) << "the wide cases must make wide items";
}

// The structural key holds exactly the ids it must (the per-node paths of PackPlanner::ReqKey):
// a page id rewritten inside a request's first t_b = min(full pages, shared pages + 1) ids (any
// sharer of a node, not only the one whose ids the key keeps; a fresh id or another request's
// id at that position) plans fully, one past them is taken lazily; between the rewrites, decode
// appends (head folds, cut private suffixes, new pages moving the page bases). Every plan holds
// a fresh plan's items and merges, a lazy image equals a full serialize of the plan.
TEST(PackPlanner, KeyCoversExactlyTheTruncatedLists) {
  Rng rng = Rng::for_current_test();
  const int32_t page_sizes[] = {16, 64, 16, 64, 16, 1};
  int64_t lazy = 0, full = 0, inside = 0, outside = 0, spans = 0;
  for (int iter = 0; iter < 18; ++iter) {
    const int32_t ps = page_sizes[iter % 6];
    Batch bt = random_batch(rng, ps, 1 + iter % 3, 1 + static_cast<int>(rng.randint(1, 5)),
                            ps == 1 ? 100 : (ps == 16 ? 30 : 10));
    if (bt.batch() == 0) continue;
    int32_t next_page = bt.indices.empty() ? 0 : *std::max_element(bt.indices.begin(), bt.indices.end()) + 1;
    PackPlanConfig cfg;
    cfg.head_fold = iter % 2 ? 1 : static_cast<int32_t>(1 << rng.randint(1, 3));
    cfg.num_kv_heads = cfg.head_fold * static_cast<int32_t>(rng.randint(1, 2));
    cfg.num_ctas = cfg.head_fold * static_cast<int32_t>(rng.randint(1, 40));
    cfg.group_size = static_cast<int32_t>(1 << rng.randint(0, 3));
    cfg.tile_rows = 16;
    cfg.page_size = ps;
    cfg.max_chunk = iter % 3 == 2 ? 0 : static_cast<int32_t>(16 * rng.randint(4, 32));  // cut suffixes
    const WorkPlanLayout layout = layout_for(cfg, bt.batch());
    ImageCheck image(layout);
    PackPlanner planner;
    auto step = [&](PackPlanner::Update expect, bool any) {
      const auto kind = planner.plan(bt.indptr.data(), bt.indices.data(), bt.kv_len.data(), bt.batch(), cfg);
      if (!any) ASSERT_EQ(kind, expect);
      const WorkPlan& p = planner.current();
      const PrefixForest f = build_prefix_forest(bt.indptr.data(), bt.indices.data(), bt.kv_len.data(), bt.batch(), ps);
      const WorkPlan fresh = make_pack_plan(f, bt.indptr.data(), bt.kv_len.data(), cfg);
      ASSERT_EQ(items_of(p), items_of(fresh));
      ASSERT_EQ(merges_of(p), merges_of(fresh));
      const bool is_lazy = kind == PackPlanner::Update::kLazy;
      if (is_lazy) ASSERT_NO_FATAL_FAILURE(check_plan(bt, cfg, p));
      lazy += is_lazy;
      full += !is_lazy;
      ASSERT_NO_FATAL_FAILURE(image.step(planner, is_lazy, /*moved=*/true));
    };
    ASSERT_NO_FATAL_FAILURE(step(PackPlanner::Update::kFull, false));
    for (int round = 0; round < 16; ++round) {
      SCOPED_TRACE(::testing::Message() << "iter " << iter << " round " << round);
      // Decode appends (a full plan when the deal drifted or a chunk count moved).
      for (int32_t b = 0; b < bt.batch(); ++b)
        if (rng.randint(0, 2) > 0) append_tokens(bt, b, rng.randint(0, 7) == 0 ? int32_t(rng.randint(2, 60)) : 1, next_page);
      ASSERT_NO_FATAL_FAILURE(step(PackPlanner::Update::kLazy, true));
      // Then one page id rewritten in a request's list, against the key of the plan just made.
      const int32_t b = static_cast<int32_t>(rng.randint(0, bt.batch() - 1));
      const int32_t n = bt.indptr[b + 1] - bt.indptr[b];
      if (n == 0) continue;
      const int32_t t = std::min(bt.kv_len[b] / ps, planner.forest().shared_pages[b] + 1);
      const int32_t pos = rng.randint(0, 1) && t > 0 ? static_cast<int32_t>(rng.randint(0, t - 1))
                                                      : static_cast<int32_t>(rng.randint(0, n - 1));
      int32_t& id = bt.indices[bt.indptr[b] + pos];
      const int32_t o = static_cast<int32_t>(rng.randint(0, bt.batch() - 1));  // another request's id there
      const int32_t was = id;
      id = rng.randint(0, 1) && bt.indptr[o + 1] - bt.indptr[o] > pos ? bt.indices[bt.indptr[o] + pos] : next_page++;
      const bool in_key = pos < t && id != was;
      inside += in_key;
      outside += pos >= t;
      ASSERT_NO_FATAL_FAILURE(step(in_key ? PackPlanner::Update::kFull : PackPlanner::Update::kLazy, false))
          << "request " << b << " page " << pos << " of " << n << ", t_b " << t << ": " << was << " -> " << id;
    }
    spans += image.spans;
  }
  EXPECT_GT(inside, 60);
  EXPECT_GT(outside, 30);
  EXPECT_GT(lazy, 100) << "full " << full;
  EXPECT_GT(spans, 0) << "lazy copies of fewer than the three key arrays";
  RecordProperty("in_key", static_cast<int>(inside));
  RecordProperty("past_key", static_cast<int>(outside));
  RecordProperty("lazy_updates", static_cast<int>(lazy));
}

// Structural changes are never taken lazily: the result is a full plan equal to a fresh one.
TEST(PackPlanner, StructureChangesPlanFully) {
  // Pages: requests 0..2 share {10, 11}; private pages after. Page size 4.
  Batch bt;
  bt.page_size = 4;
  bt.indices = {10, 11, 20, 21, 10, 11, 30, 31, 10, 11, 40, 41};
  bt.indptr = {0, 4, 8, 12};
  bt.kv_len = {15, 15, 15};
  PackPlanConfig cfg;
  cfg.num_ctas = 4;
  cfg.num_kv_heads = 2;
  cfg.group_size = 2;
  cfg.page_size = 4;
  PackPlanner pl;
  auto plan = [&] { return pl.plan(bt.indptr.data(), bt.indices.data(), bt.kv_len.data(), bt.batch(), cfg); };
  ASSERT_EQ(plan(), PackPlanner::Update::kFull);
  bt.kv_len = {16, 16, 15};  // appends within the last pages
  ASSERT_EQ(plan(), PackPlanner::Update::kLazy);
  ASSERT_NO_FATAL_FAILURE(check_plan(bt, cfg, pl.current()));
  // Request 2's private keys only in its partial page, then none: a fully shared request has no
  // private item (a lazy update would keep an empty one).
  bt.kv_len = {16, 16, 11};
  ASSERT_EQ(plan(), PackPlanner::Update::kFull);
  bt.kv_len = {16, 16, 9};
  ASSERT_EQ(plan(), PackPlanner::Update::kLazy);
  bt.kv_len = {16, 16, 8};
  ASSERT_EQ(plan(), PackPlanner::Update::kFull);
  for (int32_t len : {8, 10}) {  // and back: a private item again
    bt.kv_len[2] = len;
    plan();
    ASSERT_NO_FATAL_FAILURE(check_plan(bt, cfg, pl.current()));
    const PrefixForest f = build_prefix_forest(bt.indptr.data(), bt.indices.data(), bt.kv_len.data(), 3, 4);
    const WorkPlan fresh = make_pack_plan(f, bt.indptr.data(), bt.kv_len.data(), cfg);
    ASSERT_EQ(items_of(pl.current()), items_of(fresh));
    ASSERT_EQ(merges_of(pl.current()), merges_of(fresh));
  }
  bt.kv_len = {16, 16, 15};
  ASSERT_EQ(plan(), PackPlanner::Update::kFull);
  bt.indices[6] = 20;  // request 1's first private page becomes request 0's: they now share 3 pages
  ASSERT_EQ(plan(), PackPlanner::Update::kFull);
  ASSERT_NO_FATAL_FAILURE(check_plan(bt, cfg, pl.current()));
  EXPECT_EQ(pl.forest().nodes.size(), 2u);
  bt.indices[1] = 99;  // request 0 no longer shares page 1
  ASSERT_EQ(plan(), PackPlanner::Update::kFull);
  ASSERT_NO_FATAL_FAILURE(check_plan(bt, cfg, pl.current()));
  ASSERT_EQ(plan(), PackPlanner::Update::kLazy);  // unchanged table: lazy, same plan
  bt.kv_len = {6, 16, 15};  // a request shorter than its truncated key
  ASSERT_EQ(plan(), PackPlanner::Update::kFull);
  ASSERT_NO_FATAL_FAILURE(check_plan(bt, cfg, pl.current()));
  cfg.num_ctas = 5;  // another config
  ASSERT_EQ(plan(), PackPlanner::Update::kFull);
  bt.kv_len = {6, 16, 17};  // more keys than pages: the full plan throws
  EXPECT_THROW(plan(), Error);
  bt.kv_len = {6, 16, 15};
  ASSERT_EQ(plan(), PackPlanner::Update::kFull) << "a throw drops the cached plan";
}

}  // namespace
}  // namespace weft::plan
