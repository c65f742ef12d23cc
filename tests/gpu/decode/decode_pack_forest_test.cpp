// DecodeOptions::share_prefixes on prefix forests (issue 21): random forests, a long root shared by
// few packs, and the wide packs (FA2 tile and the Hopper mainloop, overlapped / serial, graph
// replays), against the float64 reference on batches whose requests share page prefixes. Tests
// named *Small* form the compute-sanitizer subset. The packs' base cases: decode_pack_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "bench/prefix_tree.h"
#include "tests/common/gpu_util.h"
#include "tests/common/pat_chain_trees.h"
#include "tests/common/test_util.h"
#include "tests/gpu/decode/decode_batch.h"
#include "weft/decode.h"

namespace weft {
namespace {

using test::Rng;
using test_decode::Batch;
using test_decode::CapturedRun;
using test_decode::Case;
using test_decode::check_against_reference;
using test_decode::plan_for;
using test_decode::run_for;
using test_decode::share_pages;
using test_decode::Workspace;

// Compute capability 9.0 (the Hopper wide mainloop's device; DecodeOptions::prefix_wide_sm90).
bool device_is_sm90() {
  int dev = 0, major = 0, minor = 0;
  const bool ok = cudaGetDevice(&dev) == cudaSuccess &&
                  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess;
  EXPECT_TRUE(ok) << "device attributes";
  return ok && major == 9 && minor == 0;
}

// The device's SM count (one sm90 wide CTA per SM: DecodeOptions::prefix_wide_sm90_wave).
int32_t sm_count() {
  int dev = 0, sms = 0;
  EXPECT_EQ(cudaGetDevice(&dev), cudaSuccess);
  EXPECT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
  return sms;
}

// Runs the planned wrapper on bt (outputs poisoned) against the float64 reference, then once more:
// bitwise the same output.
void expect_reference_twice(BatchDecodeWrapper& w, Batch& bt) {
  bt.dout.poison();
  bt.dlse.poison();
  run_for(w, bt);
  WEFT_TEST_CUDA(cudaDeviceSynchronize());
  check_against_reference(bt);
  const std::vector<float> first = bt.out();
  bt.dout.poison();
  run_for(w, bt);
  WEFT_TEST_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ(bt.out(), first) << "not bitwise deterministic";
}

// run() captured in a CUDA graph on a stream of its own, replayed 20 times, outputs poisoned
// before each: every replay gives `expected` bitwise.
void expect_graph_replays(BatchDecodeWrapper& w, Batch& bt, const std::vector<float>& expected) {
  CapturedRun graph;
  ASSERT_NO_FATAL_FAILURE(graph.capture(w, bt));
  for (int rep = 0; rep < 20; ++rep) {
    bt.dout.poison(graph.stream());
    bt.dlse.poison(graph.stream());
    ASSERT_NO_FATAL_FAILURE(graph.replay());
    ASSERT_EQ(bt.out(), expected) << "graph replay " << rep << " differs";
  }
}

// Random prefix forests (issue 21): a root of 0-24 shared pages, 1..64 children of 0-12 more
// shared pages each, 1-3 requests per child with private tails of 1..3 pages' worth of keys, plus
// unrelated and empty requests; GQA groups 1-8, head dims 64/128, page sizes 4/16. The wrapper
// with share_prefixes (profit model, packs, multi-tile kernel, merge) against the float64
// reference, and bitwise equal over a second run.
TEST(DecodeSmall, SharePrefixesRandomForests) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  const int32_t heads[][2] = {{8, 2}, {16, 2}, {4, 4}, {32, 4}, {8, 8}};
  for (int iter = 0; iter < 8; ++iter) {
    Case c;
    const auto& hh = heads[rng.randint(0, 4)];
    c.hq = hh[0];
    c.hkv = hh[1];
    c.d = iter % 2 ? 128 : 64;
    c.dtype = iter % 3 ? DType::kBFloat16 : DType::kFloat16;
    c.page_size = iter % 4 == 3 ? 4 : 16;
    const int ps = c.page_size;
    const int root = static_cast<int>(rng.randint(0, 24));
    const int children = iter == 0 ? 64 : static_cast<int>(rng.randint(1, 64));
    std::vector<int> child_pages(children), leader(children), group_of;
    c.lens.clear();
    for (int g = 0; g < children; ++g) {
      child_pages[g] = static_cast<int>(rng.randint(0, 12));
      const int members = static_cast<int>(rng.randint(1, children > 32 ? 2 : 3));
      leader[g] = static_cast<int>(c.lens.size());
      for (int m = 0; m < members; ++m) {
        group_of.push_back(g);
        c.lens.push_back((root + child_pages[g]) * ps + static_cast<int32_t>(rng.randint(1, 3 * ps)));
      }
    }
    const int shared_end = static_cast<int>(c.lens.size());
    c.lens.push_back(static_cast<int32_t>(rng.randint(1, 40 * ps)));  // unrelated
    c.lens.push_back(0);                                              // empty
    SCOPED_TRACE(::testing::Message() << c.describe() << " root " << root << " children " << children);
    const int32_t B = static_cast<int32_t>(c.lens.size());
    DecodeOptions opt;
    opt.share_prefixes = true;
    opt.prefix_cost_model = false;  // the sharing plan under test, not the cost model's choice
    Workspace ws(B, c, opt);
    BatchDecodeWrapper w(B, c.hq, c.hkv, c.d, opt);
    Batch bt(c, rng);
    for (int r = 1; r < shared_end; ++r) share_pages(bt.indices, bt.indptr, r, 0, root);
    for (int r = 0; r < shared_end; ++r) {
      const int g = group_of[r];
      if (r != leader[g]) share_pages(bt.indices, bt.indptr, r, leader[g], root + child_pages[g]);
    }
    bt.d_indices.upload(bt.indices.data(), bt.indices.size() * sizeof(int32_t));
    plan_for(w, bt, ws);
    ASSERT_NO_FATAL_FAILURE(expect_reference_twice(w, bt));
  }
}

// A long root shared by few packs (issue 21): 16 requests (group 4: 8 per 32-row pack, so 2 packs
// per KV head) on a 4096-key root, 8 KV heads. The chunk bound now follows the work after packing
// (PackPlanConfig::auto_chunk_min): 2 x 4096 + the private keys per KV head, so the root is cut into
// several chunks per pack (sizing it from every request's copy gave ~2048-key chunks here, and
// with 32 requests none at all); against the float64 reference, bitwise equal over a second run.
TEST(DecodeSmall, SharePrefixesLongRootFewPacks) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  Case c;
  c.hq = 32;
  c.hkv = 8;
  c.d = 128;
  c.dtype = DType::kBFloat16;
  const int32_t B = 16, root_pages = 256;  // 4096 keys
  for (int32_t b = 0; b < B; ++b) c.lens.push_back(root_pages * 16 + static_cast<int32_t>(rng.randint(1, 48)));
  SCOPED_TRACE(c.describe());
  DecodeOptions opt;
  opt.share_prefixes = true;
  opt.prefix_cost_model = false;  // the sharing plan under test, not the cost model's choice
  Workspace ws(B, c, opt);
  BatchDecodeWrapper w(B, c.hq, c.hkv, c.d, opt);
  Batch bt(c, rng);
  for (int r = 1; r < B; ++r) share_pages(bt.indices, bt.indptr, r, 0, root_pages);
  bt.d_indices.upload(bt.indices.data(), bt.indices.size() * sizeof(int32_t));
  plan_for(w, bt, ws);
  const DecodePlanInfo& info = w.plan_info();
  ASSERT_FALSE(info.prefix_fallback);
  EXPECT_GE(info.num_packs, 2 * c.hkv * 4) << "2 packs per KV head, each cut into >= 4 chunks";
  EXPECT_LE(info.max_chunk, root_pages * 16 / 4) << "the root must be cut into >= 4 chunks per pack";
  EXPECT_GE(info.num_items, w.num_ctas() / 2) << "the grid must be filled";
  ASSERT_NO_FATAL_FAILURE(expect_reference_twice(w, bt));
}
// Wide packs (DecodeOptions::prefix_wide_packs, issue 21): random 1-3 level prefix forests whose
// nodes hold >= 64 query rows (GQA 1, 2, 4 and 8, page sizes 1 and 16, d128 fp16 / bf16) with
// prefix_wide_min_rows = 64, prefix_wide_min_keys = 1 (forcing the wide path below the defaults), so the planner's
// tile selector cuts them into 128-row items run by the wide-pack kernel (the prefill
// FA2 tile, Q rows gathered from the pack's requests, partial states merged by the work plan's
// merge); every plan must have wide items. Against the float64 reference, bitwise equal over a
// second run; and the same table with wide packs off (32-row packs only) also matches. Wide packs
// run overlapped with the decode kernel (DecodeOptions::prefix_wide_overlap, the default: a
// split grid, programmatic launch) and one after the other: the two give the same bits, and the
// overlapped run captured in a CUDA graph replays them 20 times (poisoned outputs before each).
// On an sm_90 device with pages of 16 the wide items run on the Hopper mainloop
// (DecodeOptions::prefix_wide_sm90, plan_info().wide_sm90) at GQA 8, and at smaller groups where
// the items' requests are consecutive; mode 3 runs the same plan on the FA2 tile (prefix_wide_sm90
// off), against the reference too; mode 4 the serial plan with the sm90 tile's wide items cut for
// the decode grid (DecodeOptions::prefix_wide_sm90_wave off; on, mode 1's sm90 plans are cut for
// one wave of the SMs: plan_info().wide_grid).
TEST(DecodeSmall, SharePrefixesWidePacks) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  const bool sm90 = device_is_sm90();
  int sm90_plans = 0;
  const int32_t heads[][2] = {{32, 8}, {16, 4}, {64, 8}, {8, 1}, {16, 2}};
  int64_t wide_total = 0;
  for (int iter = 0; iter < 8; ++iter) {
    Case c;
    const auto& hh = heads[iter % 5];
    c.hq = hh[0];
    c.hkv = hh[1];
    c.d = 128;
    c.dtype = iter % 2 ? DType::kBFloat16 : DType::kFloat16;
    c.page_size = iter % 3 == 1 ? 1 : 16;
    if (iter == 5) c.var.logits_soft_cap = 30.f;  // the soft cap runs in the wide mainloop too
    const int32_t g = c.hq / c.hkv;
    const int ps = c.page_size;
    // Levels: a root of 1..(ps == 1 ? 300 : 40) pages, 1..4 children of 0..(ps == 1 ? 80 : 8)
    // pages, each (at level 3) with 1..3 grandchildren; members per leaf so that the root holds
    // >= 64 rows (>= 64 / g requests) and many leaves do too.
    const int levels = 1 + iter % 3;
    const int root = static_cast<int>(rng.randint(1, ps == 1 ? 300 : 40));
    std::vector<int32_t> lens;
    std::vector<std::vector<std::pair<int, int>>> paths;  // per request: (leader, pages) per level
    const int min_members = (64 + g - 1) / g;
    const int children = levels == 1 ? 1 : static_cast<int>(rng.randint(1, 4));
    for (int ch = 0; ch < children; ++ch) {
      const int ch_pages = levels == 1 ? 0 : static_cast<int>(rng.randint(0, ps == 1 ? 80 : 8));
      const int grand = levels == 3 ? static_cast<int>(rng.randint(1, 3)) : 1;
      const int ch_leader = static_cast<int>(lens.size());
      for (int gc = 0; gc < grand; ++gc) {
        const int gc_pages = levels == 3 ? static_cast<int>(rng.randint(1, ps == 1 ? 40 : 4)) : 0;
        // The first leaf alone fills 64 rows, so the root (which holds every leaf) always does.
        const int lo = ch == 0 && gc == 0 ? min_members : min_members / 2 + 1;
        const int members = static_cast<int>(rng.randint(lo, min_members + 8));
        const int gc_leader = static_cast<int>(lens.size());
        for (int m = 0; m < members; ++m) {
          paths.push_back({{0, root}, {ch_leader, root + ch_pages}, {gc_leader, root + ch_pages + gc_pages}});
          lens.push_back((root + ch_pages + gc_pages) * ps + static_cast<int32_t>(rng.randint(iter == 7 ? 0 : 1, 3 * ps)));
        }
      }
    }
    const int shared_end = static_cast<int>(lens.size());
    lens.push_back(static_cast<int32_t>(rng.randint(1, 40 * ps)));  // unrelated
    lens.push_back(0);                                              // empty
    c.lens = lens;
    SCOPED_TRACE(::testing::Message() << c.describe() << " levels " << levels << " root " << root << " children "
                                      << children << " sharers " << shared_end);
    const int32_t B = static_cast<int32_t>(c.lens.size());
    Batch bt(c, rng);
    for (int r = 0; r < shared_end; ++r)
      for (const auto& [leader, pages] : paths[r])
        if (r != leader) share_pages(bt.indices, bt.indptr, r, leader, pages);
    bt.d_indices.upload(bt.indices.data(), bt.indices.size() * sizeof(int32_t));
    std::vector<float> overlapped;
    bool overlapped_sm90 = false;
    // wide overlapped, wide one after the other, 32-row packs only, wide on the FA2 tile, serial
    // with the decode grid's cut
    for (int mode : {0, 1, 2, 3, 4}) {
      const bool wide = mode != 2;
      SCOPED_TRACE(mode == 0   ? "wide packs, overlapped"
                   : mode == 1 ? "wide packs, serial"
                   : mode == 2 ? "32-row packs only"
                   : mode == 3 ? "wide packs, FA2 tile"
                               : "wide packs, serial, grid cut");
      DecodeOptions opt;
      opt.share_prefixes = true;
      opt.prefix_cost_model = false;  // the sharing plan under test, not the cost model's choice
      opt.prefix_wide_packs = wide;
      opt.prefix_wide_overlap = mode == 0;
      opt.prefix_wide_sm90 = mode != 3;
      opt.prefix_wide_sm90_wave = mode != 4;
      opt.prefix_wide_min_rows = 64;  // below the measured defaults (256 rows, 2048 keys): every
      opt.prefix_wide_min_keys = 1;   // >= 64-row node goes wide, however short
      Workspace ws(B, c, opt);
      BatchDecodeWrapper w(B, c.hq, c.hkv, c.d, opt);
      plan_for(w, bt, ws);
      const DecodePlanInfo& info = w.plan_info();
      ASSERT_FALSE(info.prefix_fallback);
      if (wide) {
        ASSERT_GT(info.num_wide_items, 0) << "the root holds >= 64 rows: it must go wide";
        wide_total += info.num_wide_items;
        // The Hopper mainloop where it runs (sm_90, pages tiling 128 keys): always at GQA 8 (Q
        // gathered per request), at smaller groups where the items' requests are consecutive
        // (the forest's order: a request whose private tail fills a page sits in a child node).
        const bool can = sm90 && mode != 3 && ps >= 8 && !info.wide_split;
        if (g >= 8) EXPECT_EQ(info.wide_sm90, can);
        if (!can) EXPECT_FALSE(info.wide_sm90);
        sm90_plans += info.wide_sm90;
        // One wave of the sm90 tile in its serial plans: at most one CTA per SM.
        if (info.wide_sm90 && mode != 4) {
          EXPECT_GT(info.wide_grid, 0);
          EXPECT_LE(info.wide_grid, sm_count());
        } else {
          EXPECT_EQ(info.wide_grid, 0);
        }
      } else {
        ASSERT_EQ(info.num_wide_items, 0);
      }
      ASSERT_NO_FATAL_FAILURE(expect_reference_twice(w, bt));
      // Same tile, same bits (a split plan keeps the FA2 tile: heuristics::kPackWideSm90SplitPlans).
      if (mode == 1 && info.wide_sm90 == overlapped_sm90)
        EXPECT_EQ(bt.out(), overlapped) << "overlapped and serial wide launches differ";
      if (mode != 0) continue;
      overlapped = bt.out();
      overlapped_sm90 = info.wide_sm90;
      // CUDA graph of the overlapped launch (a programmatic edge between the two kernels), 20 replays.
      ASSERT_NO_FATAL_FAILURE(expect_graph_replays(w, bt, overlapped));
    }
  }
  RecordProperty("wide_items", static_cast<int>(wide_total));
  RecordProperty("sm90_plans", sm90_plans);
  if (sm90) EXPECT_GT(sm90_plans, 0) << "the GQA-8 page-16 forests must run on the Hopper mainloop";
}

// The Hopper wide mainloop's selection (DecodeOptions::prefix_wide_sm90): two 640-key roots shared
// by 24 requests each (private tails of 1-15 keys), wide at prefix_wide_min_rows 64. GQA 4 (96
// rows per root and KV head; Q tile = one box of 32 consecutive tokens): sharers in two
// consecutive runs run on the Hopper mainloop on sm_90, interleaved (request r on root r % 2) on
// the FA2 tile, re-planned on one wrapper. GQA 8 interleaved: the Hopper mainloop (Q gathered, one
// box per request). Each against the float64 reference, bitwise twice; the Hopper plans also
// replayed 20 times from a CUDA graph (poisoned outputs before each).
TEST(DecodeSmall, SharePrefixesWideSm90Selection) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  const bool sm90 = device_is_sm90();
  int sm90_plans = 0;
  for (const int32_t g : {4, 8}) {
    Case c;
    c.hq = 8 * g;
    c.hkv = 8;
    c.d = 128;
    c.dtype = g == 4 ? DType::kBFloat16 : DType::kFloat16;
    const int32_t B = 48, root_pages = 40;  // 640 keys
    for (int32_t b = 0; b < B; ++b) c.lens.push_back(root_pages * 16 + static_cast<int32_t>(rng.randint(1, 15)));
    SCOPED_TRACE(c.describe());
    DecodeOptions opt;
    opt.share_prefixes = true;
    opt.prefix_cost_model = false;  // the sharing plan under test, not the cost model's choice
    opt.prefix_wide_min_rows = 64;
    opt.prefix_wide_min_keys = 1;
    opt.prefix_wide_overlap = false;  // serial plans: the Hopper mainloop's (kPackWideSm90SplitPlans)
    Workspace ws(B, c, opt);
    BatchDecodeWrapper w(B, c.hq, c.hkv, c.d, opt);
    for (const bool interleaved : {false, true}) {
      if (g == 8 && !interleaved) continue;
      SCOPED_TRACE(interleaved ? "interleaved sharers" : "consecutive sharers");
      Batch bt(c, rng);
      for (int r = 0; r < B; ++r) {
        const int leader = interleaved ? r % 2 : r / 24 * 24;
        if (r != leader) share_pages(bt.indices, bt.indptr, r, leader, root_pages);
      }
      bt.d_indices.upload(bt.indices.data(), bt.indices.size() * sizeof(int32_t));
      plan_for(w, bt, ws);
      const DecodePlanInfo& info = w.plan_info();
      ASSERT_GT(info.num_wide_items, 0) << "each root holds >= 96 rows per KV head: it must go wide";
      EXPECT_EQ(info.wide_sm90, sm90 && (g >= 8 || !interleaved));
      sm90_plans += info.wide_sm90;
      ASSERT_NO_FATAL_FAILURE(expect_reference_twice(w, bt));
      if (!info.wide_sm90) continue;
      ASSERT_NO_FATAL_FAILURE(expect_graph_replays(w, bt, bt.out()));
    }
  }
  RecordProperty("sm90_plans", sm90_plans);
}

// The programmatic launch chain of a serial plan cut for one wave of the sm90 tile
// (DecodeOptions::prefix_wide_overlap on, plan_info().wide_grid > 0): the decode kernel of the
// private suffixes starts while wide CTAs still run (its last CTA waits for the wide grid), and the
// work plan's merge is launched programmatically after it. Seeded random trees of the PAT bench's
// shape (test::chain_tree: a 3072..4096-key root shared by 32..48 requests, 64 x 8 heads, suffixes
// of 1..128 keys, pages 16 / 64), which the wrapper's planner plans serial with a wave on an H100
// or H200 grid (host test PackWave.ChainTreesPlanSerialWaves). Each tree: the chain (overlap on)
// against the float64 reference, bitwise twice, 20 replays of a CUDA graph of it (outputs
// poisoned before each), and bitwise equal to the same plan's launches one after the other
// (overlap off: no programmatic edge between the wide and decode kernels).
TEST(DecodeSmall, SharePrefixesWideSm90WaveChain) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  const bool sm90 = device_is_sm90() && sm_count() == 132;  // the grid the host test plans for
  for (int iter = 0; iter < 3; ++iter) {
    const test::ChainTree ct = test::chain_tree(iter);
    const bench::PrefixTreeBatch t = bench::make_prefix_tree_batch(ct.fan, ct.keys, ct.page_size);
    Case c;
    c.hq = ct.hq;
    c.hkv = ct.hkv;
    c.d = 128;
    c.dtype = iter % 2 ? DType::kFloat16 : DType::kBFloat16;
    c.page_size = ct.page_size;
    c.lens = t.kv_len;
    SCOPED_TRACE(::testing::Message() << c.describe() << " root " << ct.keys[0] << " sharers " << ct.fan[1]);
    const int32_t B = static_cast<int32_t>(c.lens.size());
    Batch bt(c, rng);
    ASSERT_EQ(bt.indptr, t.indptr);
    // The tree's page ids (< its pool size, within the batch's), in place: bt.table reads bt.indices.
    std::copy(t.indices.begin(), t.indices.end(), bt.indices.begin());
    bt.d_indices.upload(bt.indices.data(), bt.indices.size() * sizeof(int32_t));
    std::vector<float> chained;
    for (const bool overlap : {true, false}) {
      SCOPED_TRACE(overlap ? "programmatic chain" : "serial launches");
      DecodeOptions opt;
      opt.share_prefixes = true;
      opt.prefix_cost_model = false;  // the sharing plan under test, not the cost model's choice
      opt.prefix_wide_overlap = overlap;
      opt.prefix_wide_min_rows = 64;  // the host test's config (the root holds >= 256 rows per KV head)
      opt.prefix_wide_min_keys = 1;
      Workspace ws(B, c, opt);
      BatchDecodeWrapper w(B, c.hq, c.hkv, c.d, opt);
      plan_for(w, bt, ws);
      const DecodePlanInfo& info = w.plan_info();
      ASSERT_FALSE(info.prefix_fallback);
      ASSERT_GT(info.num_wide_items, 0) << "the root holds >= 256 rows: it must go wide";
      if (sm90) {
        EXPECT_FALSE(info.wide_split) << "a serial plan (PackWave.ChainTreesPlanSerialWaves)";
        EXPECT_TRUE(info.wide_sm90);
        EXPECT_GT(info.wide_grid, 0) << "cut for one wave of the sm90 tile";
      }
      if (overlap) {
        ASSERT_NO_FATAL_FAILURE(expect_reference_twice(w, bt));
        chained = bt.out();
        ASSERT_NO_FATAL_FAILURE(expect_graph_replays(w, bt, chained));
      } else {  // the same plan's kernels one after the other: the same bits
        bt.dout.poison();
        run_for(w, bt);
        WEFT_TEST_CUDA(cudaDeviceSynchronize());
        EXPECT_EQ(bt.out(), chained) << "the programmatic chain and the serial launches differ";
      }
    }
  }
}

// DecodeOptions::prefix_wide_sm90 and prefix_wide_sm90_wave (both on, the defaults) are ignored
// where they do not apply (weft/decode.h): without wide packs (prefix_wide_packs off, or head_dim
// 64: wide packs are head_dim 128 only) and without share_prefixes the plan has no wide items,
// and plan_info() says no sm90 tile and no wave grid. The control (wide packs on at head_dim 128,
// the same batch) has wide items: the batch would go wide. Every plan against the float64
// reference, bitwise equal over a second run.
TEST(DecodeSmall, SharePrefixesWideSm90IgnoredWhereNotApplicable) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  for (int d : {128, 64}) {
    // 0: wide packs on, 1: wide packs off, 2: no share_prefixes
    for (int mode : {0, 1, 2}) {
      Case c;
      c.hkv = 2;
      c.hq = 16;  // GQA 8: the 8 sharers hold 64 query rows, prefix_wide_min_rows below
      c.d = d;
      c.dtype = DType::kBFloat16;
      // 8 requests on a 20-page root with private tails of 1-47 keys, one unrelated, one empty.
      std::vector<int32_t> lens;
      for (int r = 0; r < 8; ++r) lens.push_back(20 * 16 + static_cast<int32_t>(rng.randint(1, 47)));
      lens.push_back(700);
      lens.push_back(0);
      c.lens = lens;
      SCOPED_TRACE(::testing::Message() << c.describe() << " mode " << mode);
      const int32_t B = static_cast<int32_t>(c.lens.size());
      Batch bt(c, rng);
      for (int r = 1; r < 8; ++r) share_pages(bt.indices, bt.indptr, r, 0, 20);
      bt.d_indices.upload(bt.indices.data(), bt.indices.size() * sizeof(int32_t));
      DecodeOptions opt;
      opt.share_prefixes = mode != 2;
      opt.prefix_cost_model = false;  // the sharing plan under test, not the cost model's choice
      opt.prefix_wide_packs = mode != 1;
      opt.prefix_wide_sm90 = true;
      opt.prefix_wide_sm90_wave = true;
      opt.prefix_wide_min_rows = 64;  // the root's 64 rows go wide where wide packs apply
      opt.prefix_wide_min_keys = 1;
      Workspace ws(B, c, opt);
      BatchDecodeWrapper w(B, c.hq, c.hkv, c.d, opt);
      plan_for(w, bt, ws);
      const DecodePlanInfo& info = w.plan_info();
      if (mode == 0 && d == 128) {
        EXPECT_GT(info.num_wide_items, 0) << "control: the root's 64 rows go wide";
      } else {
        EXPECT_EQ(info.num_wide_items, 0);
        EXPECT_FALSE(info.wide_sm90);
        EXPECT_EQ(info.wide_grid, 0);
      }
      if (mode == 2) {
        EXPECT_FALSE(info.prefix_sharing);
        EXPECT_EQ(info.num_packs, 0);
      } else {
        EXPECT_TRUE(info.prefix_sharing);
        EXPECT_GT(info.num_packs, 0);
      }
      ASSERT_NO_FATAL_FAILURE(expect_reference_twice(w, bt));
    }
  }
}

}  // namespace
}  // namespace weft
