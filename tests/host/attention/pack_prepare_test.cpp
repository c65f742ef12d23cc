// PackPlanner::prepare (pack_planner.h): the decode router's sharing feature read with the walk
// over the ids that the following plan() does not repeat. Properties: the feature equals
// decode::shared_prefix_keys' sorted reference (tests/host/decode/router_reference.h) on random
// shared and unshared tables (the forest builder's lead_keys, a fresh planner's prepare, and a
// planner's cached value while its structural key holds); a planner driven as the kAuto wrapper
// drives it (prepare, then plan(prepared) where the route is prefix_share) makes the same
// updates (full / lazy) and the same plan image at every step as one driven as before (plan()).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "attention/plan/pack_planner.h"
#include "tests/host/attention/pack_plan_check.h"
#include "tests/host/decode/random_block_table.h"
#include "tests/host/decode/router_reference.h"

namespace weft::plan {
namespace {

using pack_check::Batch;
using pack_check::random_batch;
using test::random_block_table;
using test::RandomBlockTable;
using test::Rng;

// The reference feature of a CSR batch: its lists copied into rows of one stride.
int64_t reference_keys(const Batch& bt) {
  const int32_t B = bt.batch();
  int32_t stride = 1;
  for (int32_t b = 0; b < B; ++b) stride = std::max(stride, bt.indptr[b + 1] - bt.indptr[b]);
  std::vector<int32_t> rows(size_t(std::max(1, B)) * size_t(stride), -1);
  for (int32_t b = 0; b < B; ++b)
    std::copy(bt.indices.begin() + bt.indptr[b], bt.indices.begin() + bt.indptr[b + 1],
              rows.begin() + size_t(b) * stride);
  return decode::reference::shared_prefix_keys(rows.data(), stride, bt.kv_len.data(), B, bt.page_size);
}

// Random block tables as the router's test draws them (random_block_table.h), read through row
// offsets b * stride as the wrapper's rows view.
TEST(PackPrepare, FeatureEqualsSharedPrefixKeysReference) {
  Rng rng(2222);
  int64_t shared_tables = 0;
  for (int trial = 0; trial < 500; ++trial) {
    const int32_t batch = int32_t(rng.randint(0, 300));
    const RandomBlockTable t = random_block_table(rng, trial, batch);
    const std::vector<int32_t>& ids = t.ids;
    const std::vector<int32_t>& lens = t.lens;
    const int32_t ps = t.page_size, max_blocks = t.max_blocks, stride = int32_t(t.stride);
    std::vector<int32_t> offsets(size_t(batch) + 1);
    for (int32_t b = 0; b <= batch; ++b)
      offsets[b] = b < batch ? b * stride : batch == 0 ? 0 : (batch - 1) * stride + max_blocks;
    const int64_t want = decode::reference::shared_prefix_keys(ids.data(), stride, lens.data(), batch, ps);
    PrefixForestBuilder builder;
    PrefixForest f;
    int64_t got = -1;
    builder.build(offsets.data(), ids.data(), lens.data(), batch, ps, f, &got);
    ASSERT_EQ(got, want) << "trial " << trial << " batch " << batch << " page " << ps;
    PackPlanner planner;
    ASSERT_EQ(planner.prepare(offsets.data(), ids.data(), lens.data(), batch, ps, true), want) << "trial " << trial;
    ASSERT_EQ(planner.prepare(offsets.data(), ids.data(), lens.data(), batch, ps, false), -1) << "trial " << trial;
    shared_tables += want > 0;
  }
  EXPECT_GT(shared_tables, 150);
}

// Two planners over random decode steps (appended tokens, sometimes a structural change: a page
// id rewritten so that two requests share more, a request cut short, a request dropped): `old`
// as the wrapper drove it before (plan() where the route is prefix_share), `now` as it drives it
// now (prepare, with or without building the forest, then plan(prepared)); one step in four the
// route is another (no plan on either). Same feature (the reference's), same updates, same image.
TEST(PackPrepare, PreparedPlansEqualPlainPlans) {
  Rng rng(2223);
  const int32_t page_sizes[] = {1, 16, 64};
  int64_t probed = 0, forests = 0, declined = 0, lazy = 0, full = 0;
  for (int iter = 0; iter < 60; ++iter) {
    const int32_t ps = page_sizes[iter % 3];
    Batch bt = random_batch(rng, ps, 1 + iter % 3, 1 + static_cast<int>(rng.randint(1, 8)),
                            ps == 1 ? 300 : (ps == 16 ? 100 : 30));
    int32_t next_page = bt.indices.empty() ? 0 : *std::max_element(bt.indices.begin(), bt.indices.end()) + 1;
    PackPlanConfig cfg = pack_check::wrapper_config(static_cast<int32_t>(rng.randint(8, 132)), 8, 4);
    cfg.page_size = ps;
    if (iter % 2) cfg.auto_chunk_min = 64;
    WorkPlanBounds wb;
    wb.max_batch = std::max(1, bt.batch());
    wb.max_items = 64 * wb.max_batch * cfg.num_kv_heads + 4 * cfg.num_ctas + 64;
    wb.max_merges = wb.max_batch * cfg.num_kv_heads * 4;
    wb.max_sources = wb.max_items;
    wb.max_slots = 4 * wb.max_items;
    wb.num_ctas = cfg.num_ctas;
    wb.tile_rows = cfg.tile_rows;
    wb.head_dim = 8;
    const WorkPlanLayout layout(wb);
    std::vector<unsigned char> img_old(layout.metadata_bytes()), img_now(layout.metadata_bytes());
    PackPlanner old, now;
    int64_t last = 0;
    for (int step = 0; step < 14; ++step) {
      SCOPED_TRACE(::testing::Message() << "iter " << iter << " step " << step << " batch " << bt.batch());
      const int32_t B = bt.batch();
      const int64_t want = reference_keys(bt);
      const int64_t got =
          now.prepare(bt.indptr.data(), bt.indices.data(), bt.kv_len.data(), B, ps, last > 0 || step % 5 == 0);
      const bool prepared = got >= 0;
      declined += !prepared;
      if (prepared) ASSERT_EQ(got, want);
      last = want;
      if (rng.randint(0, 3) > 0) {  // the route is prefix_share
        const auto k_old = old.plan(bt.indptr.data(), bt.indices.data(), bt.kv_len.data(), B, cfg);
        const auto k_now = now.plan(bt.indptr.data(), bt.indices.data(), bt.kv_len.data(), B, cfg, prepared);
        ASSERT_EQ(k_old, k_now);
        lazy += k_now == PackPlanner::Update::kLazy;
        full += k_now == PackPlanner::Update::kFull;
        std::fill(img_old.begin(), img_old.end(), 0);
        std::fill(img_now.begin(), img_now.end(), 0);
        layout.serialize(old.current(), img_old.data());
        layout.serialize(now.current(), img_now.data());
        ASSERT_TRUE(img_old == img_now) << "plan images differ";
        ASSERT_EQ(old.max_chunk(), now.max_chunk());
      }
      // After a plan, the key that holds gives the cached feature (the reference's as well).
      if (prepared && got == now.prepare(bt.indptr.data(), bt.indices.data(), bt.kv_len.data(), B, ps, false))
        ++probed;
      else if (prepared)
        ++forests;
      // The next step.
      const int change = static_cast<int>(rng.randint(0, 9));
      if (change == 0 && B >= 2) {  // request 1 takes request 0's page at a shared position or one past
        const int32_t n0 = bt.indptr[1] - bt.indptr[0], n1 = bt.indptr[2] - bt.indptr[1];
        const int32_t p = static_cast<int32_t>(rng.randint(0, std::max(0, std::min(n0, n1) - 1)));
        if (n0 > 0 && n1 > 0) bt.indices[size_t(bt.indptr[1] + p)] = bt.indices[size_t(bt.indptr[0] + p)];
      } else if (change == 1 && B >= 1) {  // a request cut short
        const int32_t b = static_cast<int32_t>(rng.randint(0, B - 1));
        bt.kv_len[b] /= 2;
      } else if (change == 2 && B >= 2) {  // the last request leaves
        bt.kv_len.pop_back();
        bt.indices.resize(size_t(bt.indptr[B - 1]));
        bt.indptr.pop_back();
      } else {
        for (int32_t b = 0; b < B; ++b)
          if (rng.randint(0, 3) > 0) {
            const int32_t len = bt.kv_len[b] + 1;
            const int32_t have = bt.indptr[b + 1] - bt.indptr[b], need = (len + ps - 1) / ps;
            if (need > have) {
              bt.indices.insert(bt.indices.begin() + bt.indptr[b + 1], next_page++);
              for (size_t i = b + 1; i < bt.indptr.size(); ++i) bt.indptr[i] += 1;
            }
            bt.kv_len[b] = len;
          }
      }
    }
  }
  EXPECT_GT(lazy, 150);
  EXPECT_GT(full, 60);
  EXPECT_GT(probed, 100);
  EXPECT_GT(forests, 20);
  EXPECT_GT(declined, 5);
  RecordProperty("probed", static_cast<int>(probed));
}

}  // namespace
}  // namespace weft::plan
