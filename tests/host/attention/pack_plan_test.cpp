// Property tests of the prefix forest (prefix_forest.h) and the pack planner (work_plan.h) on
// random prefix trees: every (request, query head, key) is covered exactly once, every item reads
// its rows' own pages, merges list their sources in key order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "attention/plan/prefix_forest.h"
#include "attention/plan/work_plan.h"
#include "tests/host/attention/pack_plan_check.h"
#include "weft/error.h"

namespace weft::plan {
namespace {

using pack_check::Batch;
using pack_check::check_forest;
using pack_check::check_plan;
using pack_check::random_batch;
using test::Rng;

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

// Wide packs (PackPlanConfig::wide_rows): nodes of at least wide_min_rows rows are cut into items
// of up to wide_rows rows (pack_item_requests), stored after the narrow items with their own CTA
// deal; the plan still covers every (request, query head, key) once, each wide item's rows fill
// ceil(rows / tile_rows) slots of their own, merges read the right rows of them.
TEST(PackPlan, WidePacksCoverEveryKeyOnce) {
  Rng rng = Rng::for_current_test();
  const int32_t page_sizes[] = {1, 16, 64};
  const int32_t groups[] = {1, 2, 4, 8, 16};
  int64_t wide = 0;
  for (int iter = 0; iter < 150; ++iter) {
    const int32_t ps = page_sizes[iter % 3];
    const int32_t max_shared = ps == 1 ? 600 : (ps == 16 ? 200 : 60);
    // Wider fan-out than the narrow test (wide nodes need >= wide_min_rows rows), bounded so the
    // coverage arrays (request x head x key) stay small: <= 16^2 requests per one-level tree.
    const int levels = 1 + iter % 2;
    const Batch bt = random_batch(rng, ps, levels, (levels == 1 ? 4 : 2) + static_cast<int>(rng.randint(1, levels == 1 ? 12 : 6)),
                                  max_shared / 4);
    SCOPED_TRACE(::testing::Message() << "iter " << iter << " batch " << bt.batch() << " page " << ps);
    const PrefixForest f = build_prefix_forest(bt.indptr.data(), bt.indices.data(), bt.kv_len.data(), bt.batch(), ps);
    PackPlanConfig cfg;
    cfg.num_ctas = static_cast<int32_t>(rng.randint(1, 264));
    cfg.num_kv_heads = static_cast<int32_t>(rng.randint(1, 2));
    cfg.group_size = groups[rng.randint(0, 4)];
    cfg.tile_rows = 32;
    cfg.wide_rows = rng.randint(0, 1) ? 128 : 64;
    cfg.wide_min_rows = static_cast<int32_t>(rng.randint(33, 96));
    cfg.page_size = ps;
    if (rng.randint(0, 1)) set_pack_traffic(cfg, 128, 2);
    if (iter % 3 == 0)
      cfg.auto_chunk_min = 256;
    else
      cfg.max_chunk = rng.randint(0, 1) ? 0 : static_cast<int32_t>(16 * rng.randint(1, 64));
    const WorkPlan p = make_pack_plan(f, bt.indptr.data(), bt.kv_len.data(), cfg);
    ASSERT_NO_FATAL_FAILURE(check_plan(bt, cfg, p));
    // Every node the selector makes wide has items of more than tile_rows rows unless its pack is
    // small; no item exceeds its node's selected rows.
    for (int32_t i = 0; i < p.num_items(); ++i) {
      const int32_t rows = p.item_row_end[i] - p.item_row_begin[i];
      if (i >= p.num_items() - p.num_wide_items) {
        ++wide;
        ASSERT_EQ(rows, p.item_num_reqs[i] * cfg.group_size) << "a wide item holds whole groups";
      }
    }
    const WorkPlan again = make_pack_plan(f, bt.indptr.data(), bt.kv_len.data(), cfg);
    ASSERT_EQ(again.item_slot, p.item_slot) << "deterministic";
    ASSERT_EQ(again.wide_cta_indptr, p.wide_cta_indptr);
    ASSERT_EQ(again.src_row, p.src_row);
    // Without wide packs the same batch plans only narrow items.
    PackPlanConfig narrow = cfg;
    narrow.wide_rows = 0;
    const WorkPlan q = make_pack_plan(f, bt.indptr.data(), bt.kv_len.data(), narrow);
    ASSERT_EQ(q.num_wide_items, 0);
    ASSERT_TRUE(q.wide_cta_indptr.empty());
    ASSERT_NO_FATAL_FAILURE(check_plan(bt, narrow, q));
  }
  EXPECT_GT(wide, 300) << "the generator must produce wide nodes";
  RecordProperty("wide_items", static_cast<int>(wide));
}

// Wide items cut from their own work (auto_chunk_min; PackPlanScratch::wide_chunk): on random forests
// every (request, query head, key) is still covered once, every wide item stays within
// wide_chunk (<= max_chunk, a multiple of kv_granularity) and every narrow item within max_chunk,
// and the plan's slots stay within PackPlanConfig::max_slots unless the wide items fell back to
// max_chunk (then the plan is the one cut at max_chunk: same slots as an unbounded plan whose
// wide chunk is max_chunk).
TEST(PackPlan, WideItemsChunkedFromOwnWork) {
  Rng rng = Rng::for_current_test();
  const int32_t page_sizes[] = {1, 16, 64};
  const int32_t groups[] = {1, 2, 4, 8};
  int64_t finer = 0, bounded = 0, fell_back = 0;
  for (int iter = 0; iter < 120; ++iter) {
    const int32_t ps = page_sizes[iter % 3];
    const int32_t max_shared = ps == 1 ? 600 : (ps == 16 ? 200 : 60);
    const int levels = 1 + iter % 2;
    const Batch bt = random_batch(rng, ps, levels,
                                  (levels == 1 ? 4 : 2) + static_cast<int>(rng.randint(1, levels == 1 ? 12 : 6)),
                                  max_shared / 2);
    SCOPED_TRACE(::testing::Message() << "iter " << iter << " batch " << bt.batch() << " page " << ps);
    const PrefixForest f = build_prefix_forest(bt.indptr.data(), bt.indices.data(), bt.kv_len.data(), bt.batch(), ps);
    PackPlanConfig cfg;
    cfg.num_ctas = static_cast<int32_t>(rng.randint(1, 264));
    cfg.num_kv_heads = static_cast<int32_t>(rng.randint(1, 2));
    cfg.group_size = groups[rng.randint(0, 3)];
    cfg.tile_rows = 32;
    cfg.wide_rows = 128;
    cfg.wide_min_rows = static_cast<int32_t>(rng.randint(33, 96));
    cfg.page_size = ps;
    cfg.auto_chunk_min = static_cast<int32_t>(16 * rng.randint(1, 16));
    if (rng.randint(0, 1)) set_pack_traffic(cfg, 128, 2);
    PackPlanScratch sc;
    WorkPlan unb;
    make_pack_plan(f, bt.indptr.data(), bt.kv_len.data(), cfg, unb, sc);
    ASSERT_NO_FATAL_FAILURE(check_plan(bt, cfg, unb));
    const int32_t wide_chunk = sc.wide_chunk, max_chunk = sc.max_chunk;
    ASSERT_GT(max_chunk, 0);
    ASSERT_GT(wide_chunk, 0);
    ASSERT_LE(wide_chunk, max_chunk);
    ASSERT_EQ(wide_chunk % cfg.kv_granularity, 0);
    ASSERT_GE(wide_chunk, std::min(max_chunk, cfg.auto_chunk_min));
    finer += wide_chunk < max_chunk && unb.num_wide_items > 0;
    const int32_t n_nar = unb.num_items() - unb.num_wide_items;
    for (int32_t i = 0; i < unb.num_items(); ++i)
      ASSERT_LE(unb.item_kv_end[i] - unb.item_kv_begin[i], i >= n_nar ? wide_chunk : max_chunk) << "item " << i;
    // The slot bound: a bound between the plan cut at max_chunk and the finer plan's slots.
    int32_t coarse_slots = unb.num_slots();
    if (wide_chunk < max_chunk) {  // the coarse plan: a bound no wide-chunked plan fits forces it
      PackPlanConfig tight = cfg;
      tight.max_slots = 1;
      WorkPlan c;
      make_pack_plan(f, bt.indptr.data(), bt.kv_len.data(), tight, c, sc);
      ASSERT_NO_FATAL_FAILURE(check_plan(bt, tight, c));
      ASSERT_EQ(sc.wide_chunk, sc.max_chunk) << "fell back to max_chunk";
      for (int32_t i = 0; i < c.num_items(); ++i) ASSERT_LE(c.item_kv_end[i] - c.item_kv_begin[i], max_chunk);
      coarse_slots = c.num_slots();
      ASSERT_LE(coarse_slots, unb.num_slots()) << "finer wide chunks only add slots";
    }
    PackPlanConfig lim = cfg;
    lim.max_slots = static_cast<int32_t>(rng.randint(std::max(1, coarse_slots - 4), unb.num_slots() + 4));
    WorkPlan b;
    make_pack_plan(f, bt.indptr.data(), bt.kv_len.data(), lim, b, sc);
    ASSERT_NO_FATAL_FAILURE(check_plan(bt, lim, b));
    if (b.num_slots() <= lim.max_slots) {
      ++bounded;
    } else {  // only a plan already cut at max_chunk may exceed it (the wrapper then drops wide packs)
      ++fell_back;
      ASSERT_EQ(sc.wide_chunk, sc.max_chunk);
      ASSERT_EQ(b.num_slots(), coarse_slots);
      ASSERT_GT(coarse_slots, lim.max_slots);
    }
    const WorkPlan again = [&] {
      WorkPlan a;
      PackPlanScratch s2;
      make_pack_plan(f, bt.indptr.data(), bt.kv_len.data(), lim, a, s2);
      return a;
    }();
    ASSERT_EQ(again.item_kv_begin, b.item_kv_begin) << "deterministic";
    ASSERT_EQ(again.item_slot, b.item_slot);
  }
  EXPECT_GT(finer, 15) << "wide items must be cut finer than max_chunk on many forests";
  EXPECT_GT(bounded, 30);
  EXPECT_GT(fell_back, 3);
  RecordProperty("finer", static_cast<int>(finer));
  RecordProperty("fell_back", static_cast<int>(fell_back));
}

// The shape of the bound's loss (perf-notes-decode.md, 48c877e: 32x32 heads, 256 requests on one
// 4096-key root with 128-key suffixes, 264 CTAs ran 64 wide items of 4096 keys on 64 CTAs), at a
// quarter of the heads and CTAs (8 KV heads, 66 CTAs: the same keys per CTA, a smaller coverage
// check): cut from the wide work the root's wide items fill the grid, also head-folded (2 head
// classes of 33 CTAs), one wide item per CTA.
TEST(PackPlan, WideItemsFillTheGrid) {
  const int32_t B = 256, root = 4096, suffix = 128, ps = 16;
  Batch bt;
  bt.page_size = ps;
  for (int32_t b = 0; b < B; ++b) {
    for (int32_t k = 0; k < root / ps; ++k) bt.indices.push_back(k);
    for (int32_t k = 0; k < suffix / ps; ++k) bt.indices.push_back(root / ps + b * (suffix / ps) + k);
    bt.indptr.push_back(static_cast<int32_t>(bt.indices.size()));
    bt.kv_len.push_back(root + suffix);
  }
  const PrefixForest f = build_prefix_forest(bt.indptr.data(), bt.indices.data(), bt.kv_len.data(), B, ps);
  for (int32_t fold : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << "head_fold " << fold);
    PackPlanConfig cfg;
    cfg.num_ctas = 66;
    cfg.num_kv_heads = 8;
    cfg.group_size = 1;
    cfg.tile_rows = 32;
    cfg.page_size = ps;
    cfg.kv_granularity = 64;
    cfg.auto_chunk_min = 256;
    cfg.head_fold = fold;
    cfg.wide_rows = 128;
    cfg.wide_min_rows = 64;
    set_pack_traffic(cfg, 128, 2);
    PackPlanScratch sc;
    WorkPlan p;
    make_pack_plan(f, bt.indptr.data(), bt.kv_len.data(), cfg, p, sc);
    ASSERT_NO_FATAL_FAILURE(check_plan(bt, cfg, p));
    EXPECT_GE(sc.max_chunk, root) << "the packed work's bound leaves the root whole";
    EXPECT_EQ(sc.wide_chunk, 1024) << "2 wide items x 4096 keys x 8 heads / 66 CTAs = 993, rounded";
    EXPECT_EQ(p.num_wide_items, 2 * 8 * (root / 1024));
    int32_t busy = 0, most = 0;
    for (int32_t c = 0; c < cfg.num_ctas; ++c) {
      const int32_t k = p.wide_cta_indptr[c + 1] - p.wide_cta_indptr[c];
      busy += k > 0;
      most = std::max(most, k);
    }
    EXPECT_EQ(busy, 64) << "one wide item per CTA on 64 of 66";
    EXPECT_EQ(most, 1);
    PackPlanConfig off = cfg;  // the coarse plan (a slot bound it cannot meet): 64 wide items
    off.max_slots = 1;
    WorkPlan q;
    make_pack_plan(f, bt.indptr.data(), bt.kv_len.data(), off, q, sc);
    EXPECT_EQ(q.num_wide_items, 2 * 8);
    EXPECT_GT(p.num_slots(), q.num_slots());
  }
}

// The tile selector: narrow below wide_min_rows rows or wide_min_keys node keys, wide from both
// on (never for a node whose rows fit one narrow tile), off without wide_rows.
TEST(PackPlan, TileSelectorPicksWideForManyRows) {
  PackPlanConfig cfg;
  cfg.group_size = 8;
  cfg.tile_rows = 32;
  EXPECT_EQ(pack_item_requests(256, 4096, cfg), 4) << "wide packs off";
  cfg.wide_rows = 128;
  cfg.wide_min_rows = 64;
  EXPECT_EQ(pack_item_requests(4, 4096, cfg), 4) << "32 rows: one narrow tile";
  EXPECT_EQ(pack_item_requests(7, 4096, cfg), 4) << "56 rows < wide_min_rows";
  EXPECT_EQ(pack_item_requests(8, 4096, cfg), 16) << "64 rows";
  EXPECT_EQ(pack_item_requests(256, 16, cfg), 16) << "wide_min_keys 0: any length";
  cfg.wide_min_keys = 2048;
  EXPECT_EQ(pack_item_requests(256, 2047, cfg), 4) << "2047 keys < wide_min_keys";
  EXPECT_EQ(pack_item_requests(256, 2048, cfg), 16);
  EXPECT_EQ(pack_item_requests(7, 8192, cfg), 4) << "both bounds";
  cfg.wide_min_keys = 0;
  cfg.wide_min_rows = 0;
  EXPECT_EQ(pack_item_requests(4, 4096, cfg), 4) << "a node of one narrow tile never goes wide";
  EXPECT_EQ(pack_item_requests(5, 4096, cfg), 16);
  cfg.group_size = 1;
  cfg.wide_min_rows = 64;
  EXPECT_EQ(pack_item_requests(63, 4096, cfg), 32);
  EXPECT_EQ(pack_item_requests(64, 4096, cfg), 128);
}

// The Hopper wide mainloop's condition (wide_rows_loadable; decode wrapper, DecodeOptions::
// prefix_wide_sm90): two 1024-key roots, each shared by 24 requests with a private page (GQA 8:
// 192 rows per root and KV head, wide items of 128 and 64 rows at wide_rows 128). Sharers in two
// consecutive runs: consecutive, and every wide item's row r is request req_list[req_begin +
// row_begin / g] + (r - row_begin) / g (the Q token the kernel's box loads); interleaved (request
// r on root r % 2): not consecutive; whole groups either way. Head-folded plans the same; no wide
// item (wide packs off): false.
TEST(PackPlan, WideRowsLoadableByTheHopperQBoxes) {
  const int32_t ps = 16, root = 64, B = 48, g = 8;
  for (const int32_t fold : {1, 2})
    for (const bool interleaved : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "fold " << fold << (interleaved ? " interleaved" : " consecutive"));
      std::vector<int32_t> indptr{0}, indices, kv_len;
      for (int32_t r = 0; r < B; ++r) {
        const int32_t tree = interleaved ? r % 2 : r / 24;
        for (int32_t i = 0; i < root; ++i) indices.push_back(tree * root + i);
        indices.push_back(2 * root + r);  // private page
        indptr.push_back(static_cast<int32_t>(indices.size()));
        kv_len.push_back(root * ps + 1 + r % (ps - 1));  // a partial private page: every request ends at its root
      }
      const PrefixForest f = build_prefix_forest(indptr.data(), indices.data(), kv_len.data(), B, ps);
      PackPlanConfig cfg;
      cfg.num_ctas = 132;
      cfg.num_kv_heads = 2 * fold;
      cfg.head_fold = fold;
      cfg.group_size = g;
      cfg.tile_rows = 32;
      cfg.page_size = ps;
      cfg.wide_rows = 128;
      cfg.wide_min_rows = 64;
      cfg.auto_chunk_min = 256;
      const WorkPlan p = make_pack_plan(f, indptr.data(), kv_len.data(), cfg);
      ASSERT_GT(p.num_wide_items, 0);
      EXPECT_EQ(wide_rows_loadable(p, g, fold, /*consecutive=*/true), !interleaved);
      EXPECT_TRUE(wide_rows_loadable(p, g, fold, /*consecutive=*/false)) << "whole groups either way";
      if (!interleaved) {
        for (int32_t i = p.num_items() - p.num_wide_items; i < p.num_items(); ++i) {
          const int32_t rb = p.item_row_begin[i];
          const int32_t* req = p.req_list.data() + p.item_req_begin[i];
          for (int32_t r = rb; r < p.item_row_end[i]; ++r)
            ASSERT_EQ(req[r / g], req[rb / g] + (r - rb) / g) << "item " << i << " row " << r;
        }
      }
      PackPlanConfig narrow = cfg;
      narrow.wide_rows = 0;
      const WorkPlan q = make_pack_plan(f, indptr.data(), kv_len.data(), narrow);
      EXPECT_FALSE(wide_rows_loadable(q, g, fold, false)) << "no wide item";
    }
}

// The overlapped wide launch (wide_overlap): on random forests the plan holds the same items (key
// ranges, rows, slots) and merges as the serial plan, every key covered once; a plan that split
// (WorkPlan::wide_split) has each folded copy's narrow items only on its first C0 - W CTAs and its
// wide items only on its last W (1 <= W <= min(C0 - 1, folded wide items)); one that did not is
// the serial plan, deal included.
TEST(PackPlan, WideOverlapSplitsTheGrid) {
  Rng rng = Rng::for_current_test();
  int64_t split = 0, kept = 0;
  for (int iter = 0; iter < 160; ++iter) {
    pack_check::WideCase wc = pack_check::random_wide_case(rng, iter);
    const Batch& bt = wc.bt;
    const PrefixForest& f = wc.forest;
    PackPlanConfig& cfg = wc.cfg;
    SCOPED_TRACE(::testing::Message() << "iter " << iter << " batch " << bt.batch() << " page " << bt.page_size);
    const WorkPlan serial = make_pack_plan(f, bt.indptr.data(), bt.kv_len.data(), cfg);
    PackPlanConfig ov = cfg;
    ov.wide_overlap = 1;
    ov.wide_key_cost = 2.f;
    ov.wide_split_margin = rng.randint(0, 2) ? 0.7f : 1.f;
    const WorkPlan p = make_pack_plan(f, bt.indptr.data(), bt.kv_len.data(), ov);
    ASSERT_EQ(serial.wide_split, 0) << "no split without wide_overlap";
    ASSERT_NO_FATAL_FAILURE(check_plan(bt, ov, p));
    // The same items, dealt differently: compare them as sorted records.
    auto records = [](const WorkPlan& w) {
      std::vector<std::vector<int32_t>> r;
      for (int32_t i = 0; i < w.num_items(); ++i)
        r.push_back({w.item_slot[i], w.item_kv_head[i], w.item_kv_begin[i], w.item_kv_end[i], w.item_row_begin[i],
                     w.item_row_end[i], w.item_num_reqs[i], w.item_page_base[i]});
      std::sort(r.begin(), r.end());
      return r;
    };
    ASSERT_EQ(p.num_wide_items, serial.num_wide_items);
    ASSERT_EQ(records(p), records(serial));
    ASSERT_EQ(p.num_slots(), serial.num_slots());
    ASSERT_EQ(p.num_merges(), serial.num_merges());
    const WorkPlan again = make_pack_plan(f, bt.indptr.data(), bt.kv_len.data(), ov);
    ASSERT_EQ(again.cta_indptr, p.cta_indptr) << "deterministic";
    ASSERT_EQ(again.wide_cta_indptr, p.wide_cta_indptr);
    const int32_t C0 = cfg.num_ctas / cfg.head_fold, n_nar = p.num_items() - p.num_wide_items;
    if (!p.wide_split) {
      ASSERT_EQ(p.cta_indptr, serial.cta_indptr) << "no split: the serial deal";
      ASSERT_EQ(p.wide_cta_indptr, serial.wide_cta_indptr);
      ASSERT_EQ(p.item_slot, serial.item_slot);
      kept += p.num_wide_items > 0;
      continue;
    }
    ASSERT_GT(p.num_wide_items, 0);
    ASSERT_GT(n_nar, 0);
    ASSERT_GE(C0, 2);
    for (int32_t k = 0; k < cfg.head_fold; ++k) {
      int32_t last_nar = -1, first_wide = C0, wide_ctas = 0;
      for (int32_t c = 0; c < C0; ++c) {
        const int32_t g = k * C0 + c;
        const bool nar = p.cta_indptr[g + 1] > p.cta_indptr[g], wide = p.wide_cta_indptr[g + 1] > p.wide_cta_indptr[g];
        ASSERT_FALSE(nar && wide) << "CTA " << g << " runs both kinds";
        if (nar) last_nar = c;
        if (wide) first_wide = std::min(first_wide, c), ++wide_ctas;
      }
      ASSERT_LT(last_nar, first_wide) << "copy " << k << ": narrow CTAs first, wide CTAs last";
      ASSERT_GE(first_wide, 1);
      ASSERT_LE(wide_ctas, p.num_wide_items / cfg.head_fold);
      ++split;
    }
  }
  EXPECT_GT(split, 15) << "the generator must produce plans of both kinds";
  RecordProperty("split", static_cast<int>(split));
  RecordProperty("kept", static_cast<int>(kept));
}

// The forest builder reused over batches (PrefixForestBuilder keeps its buffers) gives the
// one-shot build's forest, also on batches whose requests come grouped by prefix (sorted page
// lists: each request first follows the previous one's path), which random_batch's shuffle rarely
// produces.
TEST(PackPlan, ReusedForestBuilderOnGroupedRequests) {
  Rng rng = Rng::for_current_test();
  PrefixForestBuilder builder;
  PrefixForest reused;
  int64_t nodes = 0;
  for (int iter = 0; iter < 120; ++iter) {
    const int32_t ps = iter % 3 == 0 ? 1 : 16;
    Batch bt = random_batch(rng, ps, 1 + iter % 3, 1 + static_cast<int>(rng.randint(1, 8)), ps == 1 ? 300 : 60);
    if (iter % 2 == 0) {  // requests sorted by their page lists: prefix groups are consecutive
      std::vector<std::vector<int32_t>> lists(bt.batch());
      std::vector<int32_t> order(bt.batch());
      for (int32_t b = 0; b < bt.batch(); ++b) {
        lists[b].assign(bt.indices.begin() + bt.indptr[b], bt.indices.begin() + bt.indptr[b + 1]);
        order[b] = b;
      }
      std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return lists[a] < lists[b]; });
      Batch sorted;
      sorted.page_size = ps;
      for (int32_t b : order) {
        sorted.indices.insert(sorted.indices.end(), lists[b].begin(), lists[b].end());
        sorted.indptr.push_back(static_cast<int32_t>(sorted.indices.size()));
        sorted.kv_len.push_back(bt.kv_len[b]);
      }
      bt = sorted;
    }
    SCOPED_TRACE(::testing::Message() << "iter " << iter << " batch " << bt.batch());
    builder.build(bt.indptr.data(), bt.indices.data(), bt.kv_len.data(), bt.batch(), ps, reused);
    ASSERT_NO_FATAL_FAILURE(check_forest(bt, reused));
    const PrefixForest fresh = build_prefix_forest(bt.indptr.data(), bt.indices.data(), bt.kv_len.data(), bt.batch(), ps);
    ASSERT_EQ(reused.order, fresh.order);
    ASSERT_EQ(reused.shared_pages, fresh.shared_pages);
    ASSERT_EQ(reused.nodes.size(), fresh.nodes.size());
    for (size_t n = 0; n < fresh.nodes.size(); ++n) {
      ASSERT_EQ(reused.nodes[n].parent, fresh.nodes[n].parent);
      ASSERT_EQ(reused.nodes[n].page_begin, fresh.nodes[n].page_begin);
      ASSERT_EQ(reused.nodes[n].page_end, fresh.nodes[n].page_end);
      ASSERT_EQ(reused.nodes[n].req_begin, fresh.nodes[n].req_begin);
      ASSERT_EQ(reused.nodes[n].req_end, fresh.nodes[n].req_end);
    }
    nodes += static_cast<int64_t>(fresh.nodes.size());
  }
  EXPECT_GT(nodes, 200);
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
