// Host tests of how decode drives the planner (no GPU): bounds, windows, split decisions.
#include "decode/decode_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "tests/common/test_util.h"
#include "tests/host/attention/plan_reference.h"
#include "weft/error.h"

namespace weft::decode {
namespace {

TEST(DecodePlan, BoundsHoldForEveryBatchUpToMax) {
  test::Rng rng = test::Rng::for_current_test();
  const int32_t grid = 264, max_batch = 64;
  for (int group : {1, 4, 16}) {
    const int32_t hkv = 32 / group > 0 ? 32 / group : 1, hq = hkv * group;
    const plan::WorkspaceLayout layout(plan_bounds(max_batch, hq, hkv, 128, grid));
    std::vector<char> buf(layout.metadata_bytes());
    for (int iter = 0; iter < 40; ++iter) {
      const int32_t batch = static_cast<int32_t>(rng.randint(0, max_batch));
      std::vector<int32_t> lens(batch);
      for (auto& l : lens) l = static_cast<int32_t>(rng.randint(0, iter % 2 ? 131072 : 600));
      const int32_t window = iter % 3 == 0 ? static_cast<int32_t>(rng.randint(0, 4096)) : -1;
      const plan::Plan p = plan::balance(batch_shape(lens.data(), batch, window), balance_config(grid, hq, hkv));
      ASSERT_NO_THROW(layout.serialize(p, buf.data()));
      for (int i = 0; i < p.num_items(); ++i) {
        const int32_t b = p.item_request[i];
        if (window >= 0) ASSERT_GE(p.item_kv_begin[i], std::max(0, lens[b] - 1 - window));
        const int32_t start = window >= 0 ? std::max(0, lens[b] - 1 - window) : 0;
        if (p.item_partial_slot[i] >= 0) ASSERT_EQ((p.item_kv_begin[i] - start) % kPlanKVTile, 0);
        ASSERT_EQ(p.item_row_end[i] - p.item_row_begin[i], group);
      }
    }
  }
}

TEST(DecodePlan, SplitOnlyWhenItHelps) {
  std::vector<int32_t> lens(128, 4096);
  plan::Plan p = plan::balance(batch_shape(lens.data(), 128, -1), balance_config(264, 32, 8));
  EXPECT_FALSE(p.split);  // 1024 tiles for 264 CTAs: no need to split
  lens = {32768};
  p = plan::balance(batch_shape(lens.data(), 1, -1), balance_config(264, 32, 8));
  EXPECT_TRUE(p.split);
  EXPECT_GE(p.max_chunk, kMinChunk);
  lens = {200};  // shorter than the minimum chunk: never split
  p = plan::balance(batch_shape(lens.data(), 1, -1), balance_config(264, 32, 8));
  EXPECT_FALSE(p.split);
  // A window shrinks the planned range to the last window_left + 1 keys.
  lens = {100000};
  p = plan::balance(batch_shape(lens.data(), 1, 127), balance_config(264, 8, 8));
  for (int i = 0; i < p.num_items(); ++i) EXPECT_EQ(p.item_kv_begin[i], 100000 - 128);
}

double plan_makespan(const plan::Plan& p) {
  double m = 0;
  for (double c : p.cta_cost) m = std::max(m, c);
  return m;
}

// balance() alone cuts 32 tiles of 32K keys into 9 chunks each (288 items on 264 CTAs, some
// CTAs run two); plan_decode finds 8 chunks of 4096 (256 items) and a ~1.8x lower makespan.
TEST(DecodePlan, SearchAvoidsChunkCountOvershoot) {
  std::vector<int32_t> lens = {32768};
  const plan::BalanceConfig cfg = balance_config(264, 32, 32);
  const plan::BatchShape shape = batch_shape(lens.data(), 1, -1);
  const plan::Plan base = plan::balance(shape, cfg);
  const plan::Plan p = plan_decode(shape, cfg);
  EXPECT_TRUE(p.split);
  EXPECT_EQ(p.num_items(), 256);
  EXPECT_EQ(p.max_chunk, 4096);
  EXPECT_LT(plan_makespan(p), 0.6 * plan_makespan(base));
}

// Randomized: the search never returns a plan with a larger makespan than balance(), and keeps
// every structural property (chunks whole 64-key tiles, slots consecutive per merge).
TEST(DecodePlan, SearchNeverWorseThanBalance) {
  test::Rng rng = test::Rng::for_current_test();
  for (int iter = 0; iter < 60; ++iter) {
    const int32_t batch = static_cast<int32_t>(rng.randint(1, 40));
    const int32_t hkv = iter % 3 == 0 ? 32 : 8;
    std::vector<int32_t> lens(batch);
    for (auto& l : lens) l = static_cast<int32_t>(rng.randint(0, iter % 2 ? 65536 : 3000));
    const plan::BalanceConfig cfg = balance_config(264, 32, hkv);
    const plan::BatchShape shape = batch_shape(lens.data(), batch, -1);
    const plan::Plan base = plan::balance(shape, cfg);
    const plan::Plan p = plan_decode(shape, cfg);
    EXPECT_LE(plan_makespan(p), plan_makespan(base));
    int64_t keys = 0;
    for (int i = 0; i < p.num_items(); ++i) {
      keys += p.item_kv_end[i] - p.item_kv_begin[i];
      if (p.item_partial_slot[i] >= 0) ASSERT_EQ(p.item_kv_begin[i] % kPlanKVTile, 0);
    }
    int64_t want = 0;
    for (int32_t l : lens) want += int64_t(l) * hkv;
    EXPECT_EQ(keys, want);
  }
}

// Item height: 32 rows for groups above 16 at head_dim <= 128 (4-tile tensor-core kernel), 16
// otherwise and whenever the CUDA-core path is forced; plan bounds and tiles follow it.
TEST(DecodePlan, TileRowsByGroupAndHeadDim) {
  EXPECT_EQ(decode_tile_rows(16, 128, false), kPlanTileQ);
  EXPECT_EQ(decode_tile_rows(17, 128, false), kPlanTileQWide);
  EXPECT_EQ(decode_tile_rows(64, 64, false), kPlanTileQWide);
  EXPECT_EQ(decode_tile_rows(32, 256, false), kPlanTileQ);
  EXPECT_EQ(decode_tile_rows(32, 128, true), kPlanTileQ);
  const plan::PlanBounds b = plan_bounds(8, 64, 1, 128, 132, kPlanTileQWide);
  EXPECT_EQ(b.tile_q, kPlanTileQWide);
  EXPECT_EQ(b.max_tiles, 8 * 4);  // MQA 64/1: bounded by four 16-row tiles per request
  // Plan height: a batch whose wide tiles give < 1 piece of 256 keys per CTA plans 16 rows.
  const int32_t one[] = {32768};
  EXPECT_EQ(plan_tile_rows(batch_shape(one, 1, -1), 1, 32, 264, kPlanTileQWide), kPlanTileQ);  // 128 pieces
  const std::vector<int32_t> many(32, 16384);
  EXPECT_EQ(plan_tile_rows(batch_shape(many.data(), 32, -1), 1, 32, 264, kPlanTileQWide), kPlanTileQWide);
  EXPECT_EQ(plan_tile_rows(batch_shape(many.data(), 32, -1), 1, 32, 264, kPlanTileQ), kPlanTileQ);
  EXPECT_THROW(plan_bounds(8, 64, 1, 128, 132, 24), Error);
  const int32_t lens[] = {4096, 100, 0};
  const plan::Plan p = plan_decode(batch_shape(lens, 3, -1), balance_config(132, 48, 2, kPlanTileQWide));
  for (int i = 0; i < p.num_items(); ++i) {
    EXPECT_LE(p.item_row_end[i] - p.item_row_begin[i], kPlanTileQWide);
    EXPECT_EQ(p.item_row_begin[i] % kPlanTileQWide, 0);
  }
}

TEST(DecodePlan, BadShapesThrow) {
  EXPECT_THROW(plan_bounds(0, 32, 8, 128, 132), Error);
  EXPECT_THROW(plan_bounds(8, 30, 8, 128, 132), Error);
  EXPECT_NO_THROW(plan_bounds(8, 64, 2, 128, 132));  // group 32: two 16-row tiles per kv head
  EXPECT_EQ(plan_bounds(8, 64, 1, 128, 132).max_tiles, 8 * 4);  // MQA 64/1: four tiles
  EXPECT_THROW(plan_bounds(8, 32, 8, 96, 132), Error);
  try {
    plan_bounds(8, 30, 8, 128, 132);
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "num_qo_heads");
  }
}


// plan_decode with a reused planner and plan (the wrapper's path) against the straightforward
// version it replaced (plan_reference.h: balance() re-run per candidate bound): the same plan, bit
// for bit, on random decode batches of every shape the wrapper plans (GQA groups, item heights,
// windows, grids, lengths that do and do not split).
TEST(DecodePlan, OptimizedPlanIdenticalToReference) {
  test::Rng rng = test::Rng::for_current_test();
  plan::Planner planner;
  plan::Plan p;
  plan::BatchShape shape;
  const int32_t heads[][2] = {{32, 8}, {32, 32}, {64, 8}, {8, 8}, {64, 1}, {48, 2}, {32, 4}, {16, 8}};
  for (int iter = 0; iter < 300; ++iter) {
    const int32_t batch = static_cast<int32_t>(rng.randint(0, iter % 5 == 0 ? 256 : 40));
    const auto& hh = heads[rng.randint(0, 7)];
    const int32_t grid = static_cast<int32_t>(rng.randint(0, 2) == 0 ? 264 : rng.randint(1, 300));
    const int32_t rows = decode_tile_rows(hh[0] / hh[1], 128, rng.randint(0, 3) == 0);
    const int32_t window = rng.randint(0, 3) == 0 ? static_cast<int32_t>(rng.randint(0, 8000)) : -1;
    std::vector<int32_t> lens(batch);
    const int kind = static_cast<int>(rng.randint(0, 3));
    for (int32_t b = 0; b < batch; ++b)
      lens[b] = kind == 0   ? static_cast<int32_t>(rng.randint(0, 65536))
                : kind == 1 ? (b % 2 ? 32768 : 512)
                : kind == 2 ? 4096
                            : static_cast<int32_t>(rng.randint(0, 3000));
    const plan::BalanceConfig cfg = balance_config(grid, hh[0], hh[1], rows);
    SCOPED_TRACE(::testing::Message() << "iter " << iter << " batch " << batch << " grid " << grid);
    const plan::Plan ref = plan::reference::plan_decode(batch_shape(lens.data(), batch, window), cfg);
    batch_shape(lens.data(), batch, window, shape);
    plan_decode(shape, cfg, planner, p);
    ASSERT_EQ(p.cta_indptr, ref.cta_indptr);
    ASSERT_EQ(p.item_request, ref.item_request);
    ASSERT_EQ(p.item_kv_head, ref.item_kv_head);
    ASSERT_EQ(p.item_row_begin, ref.item_row_begin);
    ASSERT_EQ(p.item_row_end, ref.item_row_end);
    ASSERT_EQ(p.item_kv_begin, ref.item_kv_begin);
    ASSERT_EQ(p.item_kv_end, ref.item_kv_end);
    ASSERT_EQ(p.item_partial_slot, ref.item_partial_slot);
    ASSERT_EQ(p.merge_request, ref.merge_request);
    ASSERT_EQ(p.merge_kv_head, ref.merge_kv_head);
    ASSERT_EQ(p.merge_row_begin, ref.merge_row_begin);
    ASSERT_EQ(p.merge_row_end, ref.merge_row_end);
    ASSERT_EQ(p.merge_indptr, ref.merge_indptr);
    ASSERT_EQ(p.qo_indptr, ref.qo_indptr);
    ASSERT_EQ(p.kv_len, ref.kv_len);
    ASSERT_EQ(p.cta_cost, ref.cta_cost);
    ASSERT_EQ(p.max_chunk, ref.max_chunk);
    ASSERT_EQ(p.split, ref.split);
    ASSERT_EQ(p.num_tiles, ref.num_tiles);
    ASSERT_EQ(p.batch, ref.batch);
    // The convenience overload gives the same.
    ASSERT_EQ(plan_decode(shape, cfg).item_kv_end, ref.item_kv_end);
  }
}

// Head folding (plan::Plan::head_fold): the folded plan, serialized and expanded the way the
// decode kernel expands it (decode_common.cuh: launched CTA c reads record c, later items get
// kv_head * fold + j, slot s * fold + j, merge slots fold apart), covers every (request, KV head,
// row, key) exactly once, uses every expanded partial slot once and inside the workspace, and each
// merge's expanded slots are exactly its tile's split items' slots in key order. Its makespan
// (per launched CTA) matches the unfolded plan's within the LPT bound (the largest chunk).
TEST(DecodePlan, HeadFoldExpandsToEveryHeadOnce) {
  test::Rng rng = test::Rng::for_current_test();
  const int32_t heads[][2] = {{32, 8}, {32, 32}, {64, 8}, {8, 8}, {64, 1}, {48, 2}, {32, 4}, {16, 8}, {28, 4}};
  EXPECT_EQ(decode_head_fold(8, 264), 8);
  EXPECT_EQ(decode_head_fold(32, 264), 8);
  EXPECT_EQ(decode_head_fold(1, 264), 1);
  EXPECT_EQ(decode_head_fold(4, 132), 4);
  EXPECT_EQ(decode_head_fold(5, 132), 1);
  EXPECT_THROW(balance_config(264, 32, 8, kPlanTileQ, 3), Error);
  for (int iter = 0; iter < 120; ++iter) {
    const auto& hh = heads[rng.randint(0, 8)];
    const int32_t hq = hh[0], hkv = hh[1], group = hq / hkv;
    const int32_t grid = iter % 3 == 0 ? 132 : 264;
    const int32_t fold = decode_head_fold(hkv, grid);
    const int32_t max_batch = 48;
    const int32_t batch = static_cast<int32_t>(rng.randint(0, max_batch));
    const int32_t rows = decode_tile_rows(group, 128, rng.randint(0, 3) == 0);
    std::vector<int32_t> lens(batch);
    for (auto& l : lens) l = static_cast<int32_t>(rng.randint(0, iter % 2 ? 70000 : 700));
    const plan::BatchShape shape = batch_shape(lens.data(), batch, -1);
    SCOPED_TRACE(::testing::Message() << "iter " << iter << " heads " << hq << "/" << hkv << " grid " << grid
                                      << " batch " << batch);
    const plan::Plan p = plan_decode(shape, balance_config(grid, hq, hkv, rows, fold));
    ASSERT_EQ(p.head_fold, fold);
    const plan::WorkspaceLayout layout(plan_bounds(max_batch, hq, hkv, 128, grid, rows, fold));
    std::vector<char> buf(layout.total_bytes());
    layout.serialize(p, buf.data());
    const plan::PlanPointers v = layout.pointers(buf.data());
    ASSERT_EQ(v.header->head_fold, fold);
    // Emulated launch: per launched CTA, its items expanded.
    struct Piece { int32_t kb, ke, slot; };
    std::vector<std::vector<Piece>> cover(size_t(batch) * hkv * group);  // per (request, kv head, row)
    const int64_t slots_cap = int64_t(layout.max_slots()) * fold;
    std::vector<int> slot_used(size_t(slots_cap), 0);
    std::vector<double> load(grid, 0.0);
    double biggest_fold = 0;
    // One record per launched CTA (PlanBounds::launch_records), its sub-head in its fold word
    // (what decode_common.cuh load_first_item reads); every (plan CTA, sub-head) with items
    // launched once (the zero records past the last busy CTA stand for empty plan CTAs).
    ASSERT_EQ(v.num_ctas, grid / fold);
    ASSERT_EQ(v.head_fold, fold);
    ASSERT_EQ(v.slot_stride, layout.max_slots());
    ASSERT_EQ(layout.num_records(), grid);
    const int32_t S = v.slot_stride;
    std::vector<int32_t> launched(size_t(grid), -1);  // (plan CTA, sub-head) -> launched CTA
    plan::fold_launch_order(p, [&](int32_t c, int32_t pc, int32_t j, int32_t) {
      ASSERT_EQ(launched[size_t(pc) * fold + j], -1);
      launched[size_t(pc) * fold + j] = c;
    });
    for (int32_t x : launched) ASSERT_GE(x, 0);
    for (int32_t c = 0; c < grid; ++c) {
      const plan::CtaRecord& r = v.cta_first[c];
      const int32_t pc = int32_t(std::find(launched.begin(), launched.end(), c) - launched.begin()) / fold;
      if (r.item_begin == r.item_end) {  // runs nothing: the plan CTA it stands for has no item
        ASSERT_EQ(p.cta_indptr[pc], p.cta_indptr[pc + 1]);
        continue;
      }
      const int32_t word = r.fold;
      const int32_t j = plan::fold_sub_head(word), y = plan::fold_count(word);
      ASSERT_EQ(y, fold);
      ASSERT_LT(j, fold);
      ASSERT_EQ(launched[size_t(pc) * fold + j], c);
      ASSERT_EQ(r.item_begin, p.cta_indptr[pc]);
      ASSERT_EQ(r.item_end, p.cta_indptr[pc + 1]);
      for (int32_t i = r.item_begin; i < r.item_end; ++i) {
        int32_t req = v.item_request[i], kvh = v.item_kv_head[i] * y + j, rb = v.item_row_begin[i];
        int32_t re = v.item_row_end[i], kb = v.item_kv_begin[i], ke = v.item_kv_end[i];
        int32_t slot = v.item_partial_slot[i] < 0 ? -1 : j * S + v.item_partial_slot[i];
        ASSERT_EQ(slot, v.item_partial_slot[i] < 0 ? -1 : plan::fold_slot(v.item_partial_slot[i], word, S));
        if (i == r.item_begin) {  // the record holds the first item, as the plan does
          ASSERT_EQ(r.request, req);
          ASSERT_EQ(plan::fold_expand(r.kv_head, word), kvh);
          ASSERT_EQ(r.partial_slot < 0 ? -1 : plan::fold_slot(r.partial_slot, word, S), slot);
          ASSERT_EQ(r.kv_begin, kb);
          ASSERT_EQ(r.merge, v.item_merge[i]);
        }
        ASSERT_GE(kvh, 0);
        ASSERT_LT(kvh, hkv);
        if (slot >= 0) {
          ASSERT_LT(slot, slots_cap);
          ASSERT_EQ(slot_used[slot]++, 0);
          const int32_t m = v.item_merge[i];
          ASSERT_GE(m, 0);
          // The merge's expanded slots are j * S + s0 + k, k < n: this item's slot is one of them.
          const int32_t s0 = v.merge_indptr[m], n = v.merge_indptr[m + 1] - s0;
          ASSERT_GE(slot - (j * S + s0), 0);
          ASSERT_LT(slot - (j * S + s0), n);
          ASSERT_EQ(v.merge_request[m], req);
          ASSERT_EQ(v.merge_kv_head[m] * y + j, kvh);
        }
        const double cost = plan::chunk_cost(balance_config(grid, hq, hkv, rows), re - rb, ke - kb);
        load[c] += cost;
        biggest_fold = std::max(biggest_fold, cost);
        for (int32_t row = rb; row < re; ++row) cover[(size_t(req) * hkv + kvh) * group + row].push_back({kb, ke, slot});
      }
    }
    for (int32_t b = 0; b < batch; ++b)
      for (int32_t row = 0; row < hkv * group; ++row) {
        auto& pcs = cover[size_t(b) * hkv * group + row];
        std::sort(pcs.begin(), pcs.end(), [](const Piece& a, const Piece& c) { return a.kb < c.kb; });
        ASSERT_FALSE(pcs.empty()) << "request " << b << " row " << row;
        int32_t at = 0;
        for (const Piece& pc : pcs) {
          ASSERT_EQ(pc.kb, at);
          at = pc.ke;
        }
        ASSERT_EQ(at, lens[b]);
        // Split rows: their slots are consecutive expanded slots of one merge, in key order.
        if (pcs.size() > 1)
          for (size_t k = 1; k < pcs.size(); ++k) ASSERT_EQ(pcs[k].slot, pcs[k - 1].slot + 1);
      }
    // Folding replicates a plan of the same quality: the makespan per launched CTA is within the
    // largest chunk of the unfolded plan's (LPT's bound on both).
    const plan::Plan full = plan_decode(shape, balance_config(grid, hq, hkv, rows));
    double ms_full = 0, ms_fold = 0, biggest = 0;
    for (double x : full.cta_cost) ms_full = std::max(ms_full, x);
    for (double x : load) ms_fold = std::max(ms_fold, x);
    for (int i = 0; i < full.num_items(); ++i)
      biggest = std::max(biggest, plan::chunk_cost(balance_config(grid, hq, hkv, rows), full.item_row_end[i] - full.item_row_begin[i],
                                             full.item_kv_end[i] - full.item_kv_begin[i]));
    EXPECT_LE(ms_fold, ms_full + std::max(biggest, biggest_fold) + 1e-9);
  }
}

// plan::fold_launch_order: the launched CTAs of a folded plan run what the unfolded plan's CTAs
// ran (its LPT deal of equal items: one tile's chunks on consecutive CTAs, the next head's after
// them), the order of the bench rows that the plain sub-head-major launch left 3-10% slower in
// issue 19's A/B at 9b9ac8c (b1/kv1024 and kv4096: busy CTAs first, one per SM of the first
// wave; b128/kv4096: a request's heads on neighbouring CTAs). Where every plan CTA starts in one
// tile (b1/kv32768) the order is sub-head major: launched CTA c runs plan CTA c % P.
TEST(DecodePlan, FoldLaunchOrderFollowsTheUnfoldedDeal) {
  struct Shape {
    int32_t batch, kv, hq, hkv, grid;
  };
  const Shape same[] = {{1, 1024, 32, 8, 264},   {1, 4096, 32, 8, 264},  {1, 1024, 32, 32, 264},
                        {1, 4096, 32, 32, 264},  {8, 1024, 32, 8, 264},  {32, 4096, 32, 8, 264},
                        {128, 4096, 16, 8, 264}, {128, 4096, 16, 16, 264}, {32, 4096, 16, 8, 132},
                        {1, 1024, 16, 8, 132},   {1, 32768, 16, 16, 264}};
  for (const Shape& sh : same) {
    SCOPED_TRACE(::testing::Message() << "b" << sh.batch << " kv" << sh.kv << " " << sh.hq << "/" << sh.hkv
                                      << " grid " << sh.grid);
    const std::vector<int32_t> lens(size_t(sh.batch), sh.kv);
    const plan::BatchShape shape = batch_shape(lens.data(), sh.batch, -1);
    const int32_t fold = decode_head_fold(sh.hkv, sh.grid);
    ASSERT_GT(fold, 1);
    const plan::Plan full = plan_decode(shape, balance_config(sh.grid, sh.hq, sh.hkv));
    const plan::Plan p = plan_decode(shape, balance_config(sh.grid, sh.hq, sh.hkv, kPlanTileQ, fold));
    int32_t n = 0;
    plan::fold_launch_order(p, [&](int32_t c, int32_t pc, int32_t j, int32_t) {
      ++n;
      ASSERT_EQ(p.cta_indptr[pc + 1] - p.cta_indptr[pc], full.cta_indptr[c + 1] - full.cta_indptr[c]) << "cta " << c;
      for (int32_t i = p.cta_indptr[pc], k = full.cta_indptr[c]; i < p.cta_indptr[pc + 1]; ++i, ++k) {
        ASSERT_EQ(p.item_request[i], full.item_request[k]) << "cta " << c;
        ASSERT_EQ(p.item_kv_head[i] * fold + j, full.item_kv_head[k]) << "cta " << c;
        ASSERT_EQ(p.item_kv_begin[i], full.item_kv_begin[k]) << "cta " << c;
        ASSERT_EQ(p.item_kv_end[i], full.item_kv_end[k]) << "cta " << c;
      }
    });
    ASSERT_EQ(n, sh.grid);
  }
  // One request of 32K keys, 8 KV heads on 264 CTAs: 33 chunks per head fill all 33 plan CTAs.
  const std::vector<int32_t> lens(1, 32768);
  const plan::Plan p = plan_decode(batch_shape(lens.data(), 1, -1), balance_config(264, 32, 8, kPlanTileQ, 8));
  plan::fold_launch_order(p, [&](int32_t c, int32_t pc, int32_t j, int32_t c0) {
    ASSERT_EQ(pc, c % 33);
    ASSERT_EQ(j, c / 33);
    ASSERT_EQ(c0, pc);
  });
}

// The full launch records of a plan: one per launched CTA in fold_launch_order (what serialize
// wrote for every decode plan before the launch modes), from the plan's arrays.
std::vector<plan::CtaRecord> full_launch_records(const plan::Plan& p, const plan::PlanPointers& v) {
  std::vector<plan::CtaRecord> out(size_t(p.num_ctas) * p.head_fold);
  plan::fold_launch_order(p, [&](int32_t c, int32_t pc, int32_t j, int32_t) {
    plan::CtaRecord r{};
    r.item_begin = p.cta_indptr[pc];
    r.item_end = p.cta_indptr[pc + 1];
    if (r.item_begin < r.item_end) {
      const int32_t i = r.item_begin;
      r.request = p.item_request[i];
      r.kv_head = p.item_kv_head[i];
      r.row_begin = p.item_row_begin[i];
      r.row_end = p.item_row_end[i];
      r.kv_begin = p.item_kv_begin[i];
      r.kv_end = p.item_kv_end[i];
      r.partial_slot = p.item_partial_slot[i];
      r.token0 = p.qo_indptr[r.request];
      r.merge = v.item_merge[i];
    }
    r.fold = plan::fold_word(j, p.head_fold);
    out[size_t(c)] = r;
  });
  return out;
}

// Launch records up to the last busy launched CTA (plan::launch_records_used): over random folded
// plans, the records serialize writes, read by launched CTA as load_first_item reads them, give
// every launched CTA the same item range, first item and sub-head as the full launch records (one per
// launched CTA) did; the records past them are zero (an empty item range, as an empty plan CTA's),
// in fresh and reused (incremental) images alike; the bench's shapes write the records expected
// (b1/kv4096: 128 of 264).
TEST(DecodePlan, LaunchRecordsUpToTheLastBusyCta) {
  test::Rng rng = test::Rng::for_current_test();
  const int32_t heads[][2] = {{32, 8}, {32, 32}, {64, 8}, {8, 8}, {64, 1}, {48, 2}, {32, 4}, {16, 8}, {28, 4}};
  const int32_t max_batch = 300;
  int shorter = 0;  // plans that wrote fewer records than launched CTAs
  for (int iter = 0; iter < 400; ++iter) {
    const auto& hh = heads[rng.randint(0, 8)];
    const int32_t hq = hh[0], hkv = hh[1];
    const int32_t grid = iter % 4 == 0 ? static_cast<int32_t>(rng.randint(1, 300)) : iter % 4 == 1 ? 132 : 264;
    const int32_t fold = decode_head_fold(hkv, grid);
    const int32_t batch = static_cast<int32_t>(rng.randint(0, iter % 3 == 0 ? max_batch : 12));
    const int32_t rows = decode_tile_rows(hq / hkv, 128, rng.randint(0, 3) == 0);
    std::vector<int32_t> lens(batch);
    const int kind = static_cast<int>(rng.randint(0, 3));
    for (int32_t b = 0; b < batch; ++b)
      lens[b] = kind == 0   ? static_cast<int32_t>(rng.randint(0, 70000))
                : kind == 1 ? (b % 2 ? 32768 : 512)
                : kind == 2 ? int32_t(1024) << rng.randint(0, 5)
                            : static_cast<int32_t>(rng.randint(0, 3000));
    if (kind == 2)  // uniform batches (the bench's)
      for (auto& l : lens) l = lens[0];
    const plan::BatchShape shape = batch_shape(lens.data(), batch, -1);
    SCOPED_TRACE(::testing::Message() << "iter " << iter << " heads " << hq << "/" << hkv << " grid " << grid
                                      << " batch " << batch << " kind " << kind);
    const plan::Plan p = plan_decode(shape, balance_config(grid, hq, hkv, rows, fold));
    const plan::WorkspaceLayout layout(plan_bounds(max_batch, hq, hkv, 128, grid, rows, fold));
    ASSERT_EQ(layout.num_records(), grid);
    std::vector<char> buf(layout.metadata_bytes());
    layout.serialize(p, buf.data());
    const plan::PlanPointers v = layout.pointers(buf.data());
    const plan::LaunchRecords lr = plan::launch_records_used(p);
    ASSERT_LE(lr.records, grid);
    shorter += lr.records < grid;
    const std::vector<plan::CtaRecord> full = full_launch_records(p, v);
    for (int32_t c = 0; c < grid; ++c) {
      const plan::CtaRecord &r = v.cta_first[c], &f = full[size_t(c)];
      if (c >= lr.records) {  // zero: no item
        const plan::CtaRecord zero{};
        ASSERT_EQ(std::memcmp(&r, &zero, sizeof(r)), 0) << "cta " << c;
      }
      ASSERT_EQ(r.item_end - r.item_begin > 0, f.item_end - f.item_begin > 0) << "cta " << c;
      if (f.item_begin == f.item_end) continue;  // no item: the kernel returns before reading more
      ASSERT_EQ(std::memcmp(&r, &f, sizeof(r)), 0) << "cta " << c;
    }
    // The same plan into a buffer that held other plans of this layout (the staging slots'
    // incremental images): byte for byte the fresh image.
    if (iter % 4 != 0) {
      static plan::WorkspaceLayout::Image image[2];
      static std::vector<char> slot[2];
      static plan::PlanBounds last[2];
      const int k = grid == 132 ? 0 : 1;
      const plan::PlanBounds b = layout.bounds();
      if (slot[k].size() != buf.size() || last[k].head_fold != b.head_fold || last[k].tile_q != b.tile_q ||
          last[k].max_tiles != b.max_tiles) {
        slot[k].assign(buf.size(), 0);
        image[k] = {};
        last[k] = b;
      }
      layout.serialize(p, slot[k].data(), &image[k]);
      ASSERT_EQ(std::memcmp(slot[k].data(), buf.data(), buf.size()), 0);
    }
  }
  EXPECT_GT(shorter, 50);
  // The bench's Llama-3-8B shapes on 264 CTAs (fold 8, 33 plan CTAs).
  struct Want {
    int32_t batch, kv, records;
  };
  const Want want[] = {{1, 1024, 32},  {1, 4096, 128}, {1, 16384, 256}, {1, 32768, 264},
                       {8, 4096, 256}, {32, 4096, 256}, {256, 4096, 264}};
  for (const Want& w : want) {
    const std::vector<int32_t> lens(size_t(w.batch), w.kv);
    const plan::Plan p = plan_decode(batch_shape(lens.data(), w.batch, -1), balance_config(264, 32, 8, kPlanTileQ, 8));
    EXPECT_EQ(plan::launch_records_used(p).records, w.records) << "b" << w.batch << " kv" << w.kv;
  }
}

}  // namespace
}  // namespace weft::decode
