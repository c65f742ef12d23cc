// Host tests of decode::DirectPlanner (decode/direct_plan.h): its image is the bytes that
// serialize(plan_decode(...)) writes, fresh and incremental, on random batches.
#include "decode/direct_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "decode/decode_plan.h"
#include "tests/common/test_util.h"

namespace weft::decode {
namespace {

struct DirectCase {
  int32_t hq, hkv, grid, max_batch, max_rows;
};

// Random lengths of several shapes: short distinct (b256-like), equal, zeros mixed in, bimodal,
// long (split candidates, which the direct planner must leave to the general one).
std::vector<int32_t> random_lens(test::Rng& rng, int32_t batch) {
  std::vector<int32_t> lens(batch);
  const int kind = static_cast<int>(rng.randint(0, 5));
  for (int32_t b = 0; b < batch; ++b)
    lens[b] = kind == 0   ? static_cast<int32_t>(rng.randint(512, 4096))
              : kind == 1 ? 2048
              : kind == 2 ? static_cast<int32_t>(rng.randint(0, 3) == 0 ? 0 : rng.randint(1, 300))
              : kind == 3 ? (b % 4 == 0 ? static_cast<int32_t>(rng.randint(8192, 16384))
                                        : static_cast<int32_t>(rng.randint(16, 4096)))
              : kind == 4 ? static_cast<int32_t>(rng.randint(0, 65536))
                          : static_cast<int32_t>(rng.randint(1, 40));
  return lens;
}

// Every step: the general plan serialized into a fresh zeroed buffer (the reference image) and,
// into two long-lived buffers with their Image records, (a) the direct image where the direct
// planner covers the batch, else the general one, (b) the same starting with a fresh Image each
// time. Both must equal the reference byte for byte; whenever the direct planner takes a batch the
// general plan must be unsplit with the same counts.
TEST(DecodeDirectPlan, ImageIdenticalToSerializedPlanOnRandomBatches) {
  test::Rng rng = test::Rng::for_current_test();
  const DirectCase cases[] = {{32, 8, 264, 300, 16},  {32, 8, 132, 64, 16}, {32, 32, 264, 300, 16},
                              {64, 8, 264, 300, 32},  {8, 1, 264, 40, 16},  {28, 4, 100, 128, 16},
                              {64, 2, 264, 80, 32},   {16, 16, 66, 200, 16}, {32, 4, 264, 260, 16}};
  int direct_steps = 0, steps = 0;
  for (const DirectCase& dc : cases) {
    const int32_t fold = decode_head_fold(dc.hkv, dc.grid);
    const int32_t rows_max = dc.max_rows == 32 ? decode_tile_rows(dc.hq / dc.hkv, 128, false) : kPlanTileQ;
    const plan::WorkspaceLayout layout(plan_bounds(dc.max_batch, dc.hq, dc.hkv, 128, dc.grid, rows_max, fold));
    const std::size_t bytes = layout.metadata_bytes();
    std::vector<unsigned char> ref(bytes), inc(bytes, 0xab), fresh(bytes, 0xcd);
    plan::WorkspaceLayout::Image inc_image;
    plan::Planner planner;
    plan::BatchShape shape;
    plan::Plan p;
    DirectPlanner direct;
    for (int iter = 0; iter < 60; ++iter, ++steps) {
      const int32_t batch = static_cast<int32_t>(rng.randint(iter % 7 == 0 ? 0 : 1, dc.max_batch));
      const std::vector<int32_t> lens = random_lens(rng, batch);
      SCOPED_TRACE(::testing::Message() << "heads " << dc.hq << "/" << dc.hkv << " grid " << dc.grid << " iter "
                                        << iter << " batch " << batch);
      batch_shape(lens.data(), batch, -1, shape);
      const int32_t rows = plan_tile_rows(shape, dc.hkv, dc.hq / dc.hkv, dc.grid, rows_max);
      ASSERT_EQ(rows, plan_tile_rows_of(lens.data(), nullptr, batch, dc.hkv, dc.hq / dc.hkv, dc.grid, rows_max));
      const plan::BalanceConfig cfg = balance_config(dc.grid, dc.hq, dc.hkv, rows, fold);
      plan_decode(shape, cfg, planner, p);
      std::memset(ref.data(), 0x5a, bytes);
      layout.serialize(p, ref.data());  // (no Image: the whole region cleared first)
      const bool took = direct.plan(lens.data(), batch, cfg);
      if (took) {
        ++direct_steps;
        ASSERT_FALSE(p.split);
        ASSERT_EQ(direct.num_items(), p.num_items());
        ASSERT_EQ(direct.max_chunk(), p.max_chunk);
        ASSERT_EQ(direct.records(), plan::launch_records_used(p).records);
        ASSERT_EQ(direct.image_bytes(),
                  4 * (8 * std::size_t(p.num_items()) + std::size_t(cfg.num_ctas) +
                       12 * std::size_t(plan::launch_records_used(p).records) + 2 * std::size_t(batch)));
        direct.write(layout, inc.data(), &inc_image);
        plan::WorkspaceLayout::Image fresh_image;
        direct.write(layout, fresh.data(), &fresh_image);
        for (int k = 0; k < 16; ++k) ASSERT_EQ(fresh_image.len[k], inc_image.len[k]) << "array " << k;
      } else {
        // Every unsplit one-tile plan of a non-empty batch is covered at this size: only splits
        // (or split candidates the min_gain rule kept whole) and empty batches fall back.
        if (batch > 0 && !p.split && p.max_chunk <= static_cast<int32_t>(planner.chunk_bound(cfg.min_chunk)) &&
            cfg.group_size <= cfg.tile_q)
          ADD_FAILURE() << "an unsplit plan within the bound was not taken by the direct planner";
        layout.serialize(p, inc.data(), &inc_image);
        layout.serialize(p, fresh.data());
      }
      ASSERT_EQ(std::memcmp(ref.data(), inc.data(), bytes), 0) << (took ? "direct" : "general") << ", incremental";
      ASSERT_EQ(std::memcmp(ref.data(), fresh.data(), bytes), 0) << (took ? "direct" : "general") << ", fresh";
    }
  }
  // Not vacuous: most of the random steps are direct ones.
  EXPECT_GT(direct_steps, steps / 3) << direct_steps << " of " << steps;
  EXPECT_LT(direct_steps, steps) << "no step fell back to the general planner";
}

// Named edge cases against the general path (serialize(plan_decode()) into a zeroed buffer),
// fresh and after every other case in one long-lived buffer: one request of 0 / 1 keys, all
// requests empty, the longest request exactly at the chunk bound L0 and one key past it, one
// and two CTA grids (folded and not), lengths near INT32_MAX (the cost / sort-key limits).
TEST(DecodeDirectPlan, EdgeCasesMatchTheGeneralPath) {
  struct Edge {
    int32_t hq, hkv, grid;
    std::vector<int32_t> lens;
  };
  // L0 of n equal requests on C CTAs at H heads: ceil(n * len * H / C) rounded up to kPlanKVTile
  // (at least kMinChunk); at 8 heads on 264 CTAs (fold 8: 33 CTAs, 1 head) 33 requests of 4096
  // keys give L0 = 4096: the longest exactly at the bound (whole); one key more on one request
  // moves the bound up a granule (still whole); a request of twice the rest is a split candidate.
  std::vector<int32_t> at_bound(33, 4096), past_bound(33, 4096), split_cand(33, 4096);
  past_bound[5] = 4097;
  split_cand[5] = 8192;
  std::vector<int32_t> mixed_zero = {0, 1, 0, 2, 0, 255, 256, 257, 0};
  const int32_t big = INT32_MAX - 1;
  const Edge edges[] = {
      {32, 8, 264, {0}},          {32, 8, 264, {1}},          {32, 8, 264, {0, 0, 0, 0}},
      {32, 8, 264, mixed_zero},   {32, 8, 264, at_bound},     {32, 8, 264, past_bound}, {32, 8, 264, split_cand},
      {8, 1, 1, {0}},             {8, 1, 1, {7, 3, 9}},       {8, 1, 1, {70000, 1, 0}},
      {32, 8, 1, {5, 0, 300}},    {32, 8, 2, {5, 0, 300, 4}}, {32, 8, 8, {1, 2, 3}},
      {32, 8, 16, {1000, 2000}},  {16, 16, 3, {9, 8, 7, 6}},  {8, 1, 1, {big}},
      {8, 1, 264, {big, big}},    {32, 8, 264, {big, 0, 1}},  {8, 1, 2, {big, big, 5}},
      {64, 8, 264, {1, 1, 1}},    {32, 4, 132, {2048}},       {32, 32, 1, {3, 3, 3}},
  };
  for (const Edge& e : edges) {
    const int32_t batch = static_cast<int32_t>(e.lens.size());
    SCOPED_TRACE(::testing::Message() << "heads " << e.hq << "/" << e.hkv << " grid " << e.grid << " batch " << batch
                                      << " first len " << e.lens[0]);
    const int32_t fold = decode_head_fold(e.hkv, e.grid);
    const int32_t max_batch = std::max(batch, 40);
    const plan::WorkspaceLayout layout(plan_bounds(max_batch, e.hq, e.hkv, 128, e.grid, kPlanTileQ, fold));
    const std::size_t bytes = layout.metadata_bytes();
    const plan::BatchShape shape = batch_shape(e.lens.data(), batch, -1);
    const int32_t rows = plan_tile_rows(shape, e.hkv, e.hq / e.hkv, e.grid, kPlanTileQ);
    const plan::BalanceConfig cfg = balance_config(e.grid, e.hq, e.hkv, rows, fold);
    plan::Planner planner;
    plan::Plan p;
    plan_decode(shape, cfg, planner, p);
    std::vector<unsigned char> ref(bytes, 0x5a), fresh(bytes, 0xcd);
    layout.serialize(p, ref.data());
    DirectPlanner direct;
    const bool took = direct.plan(e.lens.data(), batch, cfg);
    if (!took) {
      // Only split plans (or split candidates) may fall back.
      EXPECT_GT(p.max_chunk, 0);
      EXPECT_GT(*std::max_element(e.lens.begin(), e.lens.end()), planner.chunk_bound(cfg.min_chunk))
          << "an unsplit plan within the bound was not taken";
      continue;
    }
    EXPECT_FALSE(p.split);
    ASSERT_EQ(direct.num_items(), p.num_items());
    ASSERT_EQ(direct.max_chunk(), p.max_chunk);
    ASSERT_EQ(direct.records(), plan::launch_records_used(p).records);
    plan::WorkspaceLayout::Image img;
    direct.write(layout, fresh.data(), &img);
    EXPECT_EQ(std::memcmp(ref.data(), fresh.data(), bytes), 0) << "fresh";
    // Incremental: the image of a different plan first (the general path's, of a longer batch),
    // then the direct one over it.
    std::vector<int32_t> other(static_cast<std::size_t>(max_batch), 300);
    const plan::BatchShape oshape = batch_shape(other.data(), max_batch, -1);
    plan::Plan op;
    plan_decode(oshape, balance_config(e.grid, e.hq, e.hkv, rows, fold), planner, op);
    std::vector<unsigned char> inc(bytes, 0xab);
    plan::WorkspaceLayout::Image inc_image;
    layout.serialize(op, inc.data(), &inc_image);
    ASSERT_TRUE(direct.plan(e.lens.data(), batch, cfg));
    direct.write(layout, inc.data(), &inc_image);
    EXPECT_EQ(std::memcmp(ref.data(), inc.data(), bytes), 0) << "incremental";
  }
}

// The configurations it leaves to the general planner: a group above the tile, non-integral
// costs, an empty batch, a request past the chunk bound.
TEST(DecodeDirectPlan, LeavesOtherPlansToTheGeneralPlanner) {
  DirectPlanner d;
  const std::vector<int32_t> lens = {100, 200, 250};  // within min_chunk (256): unsplit
  plan::BalanceConfig cfg = balance_config(264, 32, 8, kPlanTileQ, 8);
  EXPECT_TRUE(d.plan(lens.data(), 3, cfg));
  EXPECT_FALSE(d.plan(lens.data(), 0, cfg));
  plan::BalanceConfig wide = balance_config(264, 64, 2, kPlanTileQ, 2);  // group 32 on 16-row tiles
  EXPECT_FALSE(d.plan(lens.data(), 3, wide));
  plan::BalanceConfig frac = cfg;
  frac.alpha = 0.5;
  EXPECT_FALSE(d.plan(lens.data(), 3, frac));
  const std::vector<int32_t> one_long = {40000};  // one request over 33 CTAs: split candidate
  EXPECT_FALSE(d.plan(one_long.data(), 1, cfg));
  plan::BalanceConfig nosplit = cfg;
  nosplit.allow_split = false;
  EXPECT_TRUE(d.plan(one_long.data(), 1, nosplit));
}

}  // namespace
}  // namespace weft::decode
