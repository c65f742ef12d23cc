// Property tests of the work-queue schedule (attention/plan/work_queue.h) on random ragged
// batches: one task per non-empty (row, KV head, split), every (row, head, key) covered exactly
// once, split bounds from the row's own length, merges list their slots in key order, the counts
// of work_queue_shape match the schedule, and the compact image holds every array.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "attention/plan/work_queue.h"
#include "tests/common/test_util.h"
#include "weft/error.h"

namespace weft::plan {
namespace {

using test::Rng;
using test::thrown_argument;

void check_schedule(const std::vector<int32_t>& lens, const std::vector<int32_t>& base, const WorkQueueConfig& cfg) {
  WorkPlan p;
  make_work_queue(lens.data(), base.data(), int32_t(lens.size()), cfg, p);
  const int32_t H = cfg.num_kv_heads, g = cfg.group_size;
  ASSERT_EQ(p.num_ctas, p.num_items());
  ASSERT_TRUE(p.cta_indptr.empty());
  // Coverage: count[(b, h)][key] == 1 over final items and merge sources; every item non-empty
  // unless its row has kv_len 0.
  std::vector<std::vector<int>> cover(lens.size() * H);
  for (size_t b = 0; b < lens.size(); ++b)
    for (int h = 0; h < H; ++h) cover[b * H + h].assign(size_t(lens[b]), 0);
  std::vector<int> slot_item(p.num_items() + 1, -1);
  int empties = 0;
  for (int i = 0; i < p.num_items(); ++i) {
    const int b = p.req_list[p.item_req_begin[i]];
    EXPECT_EQ(p.item_num_reqs[i], 1);
    EXPECT_EQ(p.item_row_begin[i], 0);
    EXPECT_EQ(p.item_row_end[i], g);
    EXPECT_EQ(p.item_page_base[i], base[b]);
    const int k0 = p.item_kv_begin[i], k1 = p.item_kv_end[i];
    ASSERT_LE(0, k0);
    ASSERT_LE(k1, lens[b]);  // row-local bound: never past the row's true length
    if (k0 == k1) {
      EXPECT_EQ(lens[b], 0) << "empty task of a non-empty row";
      EXPECT_EQ(p.item_slot[i], -1);
      ++empties;
    }
    if (cfg.chunk > 0) {
      EXPECT_LE(k1 - k0, cfg.chunk);
      EXPECT_EQ(k0 % cfg.chunk, 0);
    }
    for (int k = k0; k < k1; ++k) ++cover[size_t(b) * H + p.item_kv_head[i]][k];
    if (p.item_slot[i] >= 0) {
      ASSERT_LT(p.item_slot[i], int(slot_item.size()));
      EXPECT_EQ(slot_item[p.item_slot[i]], -1) << "slot used twice";
      slot_item[p.item_slot[i]] = i;
    }
  }
  for (const auto& c : cover)
    for (int v : c) ASSERT_EQ(v, 1);
  int zero_rows = 0;
  for (int32_t l : lens) zero_rows += l == 0;
  EXPECT_EQ(empties, zero_rows * H);
  // Merges: sources in key order, contiguous, of that row and head.
  for (int m = 0; m < p.num_merges(); ++m) {
    int prev_end = 0;
    ASSERT_GE(p.merge_src_indptr[m + 1] - p.merge_src_indptr[m], 2);
    for (int s = p.merge_src_indptr[m]; s < p.merge_src_indptr[m + 1]; ++s) {
      const int i = slot_item[p.src_slot[s]];
      ASSERT_GE(i, 0);
      EXPECT_EQ(p.src_row[s], 0);
      EXPECT_EQ(p.req_list[p.item_req_begin[i]], p.merge_request[m]);
      EXPECT_EQ(p.item_kv_head[i], p.merge_kv_head[m]);
      EXPECT_EQ(p.item_kv_begin[i], prev_end);
      prev_end = p.item_kv_end[i];
    }
    EXPECT_EQ(prev_end, lens[p.merge_request[m]]);
  }
  // Shape counts without building.
  const WorkQueueShape sh = work_queue_shape(lens.data(), int32_t(lens.size()), cfg);
  EXPECT_EQ(sh.tasks, p.num_items());
  EXPECT_EQ(sh.merges, p.num_merges());
  EXPECT_EQ(sh.sources, int64_t(p.src_slot.size()));
  // Full chunks come before the shorter last splits.
  if (cfg.chunk > 0) {
    bool short_seen = false;
    for (int i = 0; i < p.num_items(); ++i) {
      const bool full = p.item_kv_end[i] - p.item_kv_begin[i] == cfg.chunk;
      if (p.item_slot[i] >= 0 && full) EXPECT_FALSE(short_seen) << "full task " << i << " after a short one";
      if (p.item_slot[i] >= 0 && !full) short_seen = true;
    }
  }
  // Compact image: every array where its offset says.
  CompactWorkPlan c;
  pack_compact(p, 16, c);
  WorkPlanHeader h;
  std::memcpy(&h, c.bytes.data(), sizeof h);
  EXPECT_EQ(h.num_items, p.num_items());
  EXPECT_EQ(h.num_merges, p.num_merges());
  EXPECT_EQ(h.tile_rows, 16);
  auto at = [&](size_t off, size_t i) {
    int32_t v;
    std::memcpy(&v, c.bytes.data() + off + 4 * i, 4);
    return v;
  };
  for (int i = 0; i < p.num_items(); ++i) {
    ASSERT_EQ(at(c.item_kv_begin, i), p.item_kv_begin[i]);
    ASSERT_EQ(at(c.item_slot, i), p.item_slot[i]);
    ASSERT_EQ(at(c.item_page_base, i), p.item_page_base[i]);
  }
  for (size_t s = 0; s < p.src_slot.size(); ++s) ASSERT_EQ(at(c.src_slot, s), p.src_slot[s]);
  // Pointers into a copy of the image read the same arrays; the 1-D grid has no cta_indptr.
  float po = 0, pl = 0;
  const WorkPlanPointers w = compact_pointers(c, c.bytes.data(), &po, &pl);
  EXPECT_EQ(w.cta_indptr, nullptr);
  EXPECT_EQ(w.header->num_items, p.num_items());
  EXPECT_EQ(w.partial_o, &po);
  EXPECT_EQ(w.partial_lse, &pl);
  for (int i = 0; i < p.num_items(); ++i) {
    ASSERT_EQ(w.item_kv_end[i], p.item_kv_end[i]);
    ASSERT_EQ(w.item_kv_head[i], p.item_kv_head[i]);
    ASSERT_EQ(w.req_list[w.item_req_begin[i]], p.req_list[p.item_req_begin[i]]);
  }
  for (int m = 0; m <= p.num_merges() && p.num_merges() > 0; ++m)
    ASSERT_EQ(w.merge_src_indptr[m], p.merge_src_indptr[m]);
  for (size_t s = 0; s < p.src_row.size(); ++s) ASSERT_EQ(w.src_row[s], p.src_row[s]);
}

TEST(WorkQueue, SmallExample) {
  WorkQueueConfig cfg;
  cfg.num_kv_heads = 2;
  cfg.group_size = 4;
  cfg.chunk = 32;
  const std::vector<int32_t> lens{70, 0, 32, 5};  // 3 splits (32, 32, 6), empty, 1, 1
  const std::vector<int32_t> base{0, 9, 18, 27};  // block table of row stride 9
  WorkPlan p;
  make_work_queue(lens.data(), base.data(), 4, cfg, p);
  EXPECT_EQ(p.num_items(), 2 * (3 + 1 + 1 + 1));
  EXPECT_EQ(p.num_merges(), 2);
  check_schedule(lens, base, cfg);
}

TEST(WorkQueue, RandomBatchesCoverEveryKeyOnce) {
  Rng rng(2201);
  for (int trial = 0; trial < 200; ++trial) {
    const int batch = rng.randint(0, 24);
    std::vector<int32_t> lens(batch), base(batch);
    for (int b = 0; b < batch; ++b) {
      const int kind = rng.randint(0, 4);
      lens[b] = kind == 0 ? 0 : kind == 1 ? rng.randint(1, 17) : rng.randint(1, 5000);
      base[b] = b * 400;
    }
    WorkQueueConfig cfg;
    cfg.num_kv_heads = rng.randint(1, 4);
    cfg.group_size = rng.randint(1, 16);
    cfg.chunk = 16 * rng.randint(0, 40);
    check_schedule(lens, base, cfg);
  }
}

TEST(WorkQueue, RejectsBadConfig) {
  const std::vector<int32_t> lens{10}, base{0};
  WorkPlan p;
  WorkQueueConfig cfg;
  cfg.chunk = 24;  // not a multiple of 16
  EXPECT_EQ(thrown_argument([&] { make_work_queue(lens.data(), base.data(), 1, cfg, p); }), "cfg.chunk");
  cfg.chunk = 32;
  cfg.group_size = 17;
  EXPECT_EQ(thrown_argument([&] { make_work_queue(lens.data(), base.data(), 1, cfg, p); }), "cfg.group_size");
  cfg.group_size = 4;
  const std::vector<int32_t> neg{-1};
  EXPECT_EQ(thrown_argument([&] { make_work_queue(neg.data(), base.data(), 1, cfg, p); }), "kv_len");
}

}  // namespace
}  // namespace weft::plan
