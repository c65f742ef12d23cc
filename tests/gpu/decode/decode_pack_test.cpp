// The decode kernel's generic item path (work plan v2, attention/plan/work_plan.h) and
// DecodeOptions::share_prefixes, against the float64 reference on batches whose requests share
// page prefixes. Tests named *Small* form the compute-sanitizer subset. Prefix forests and wide
// packs: decode_pack_forest_test.cpp.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "attention/plan/prefix_forest.h"
#include "attention/plan/work_plan.h"
#include "attention/variant_host.h"
#include "decode/launch.h"
#include "tests/common/gpu_util.h"
#include "tests/common/test_util.h"
#include "tests/gpu/decode/decode_batch.h"
#include "weft/decode.h"
#include "weft/error.h"

namespace weft {
namespace {

using test::DeviceBuffer;
using test::Rng;
using test_decode::Batch;
using test_decode::CapturedRun;
using test_decode::Case;
using test_decode::check_against_reference;
using test_decode::plan_for;
using test_decode::run_for;
using test_decode::share_pages;
using test_decode::Workspace;

// The generic item path (issue 19): a work plan whose packs hold rows of several requests that
// share a 2-level page prefix (requests 0, 1 share 32 pages, request 2 the first 20 of them,
// request 5 is fully shared: 10 full pages, no private key), plus unrelated and empty requests,
// run through the decode kernel's kPacked path and the work plan's merge, against the float64
// reference of the same page table.
TEST(DecodeSmall, WorkPlanPacksMatchReference) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  // Groups 4 and 8: at head_dim <= 128 the multi-tile kernel runs packs of 3-4 requests of group
  // 8 (24-32 rows) with its 32-row mainloop and the other items with the 16-row one.
  for (int cfg = 0; cfg < 6; ++cfg) {
    const int d = cfg < 2 ? 64 : (cfg < 4 ? 128 : 256);
    Case c;
    c.hkv = 2;
    c.hq = cfg % 2 ? 16 : 8;
    c.d = d;
    c.dtype = d == 128 ? DType::kBFloat16 : DType::kFloat16;
    c.page_size = 16;
    c.lens = {37 * 16 + 5, 37 * 16 + 11, 20 * 16 + 3, 700, 0, 10 * 16};
    SCOPED_TRACE(c.describe());
    Batch bt(c, rng);
    auto share = [&](int dst, int src, int pages) { share_pages(bt.indices, bt.indptr, dst, src, pages); };
    share(1, 0, 32);
    share(2, 0, 20);
    share(5, 0, 10);
    bt.d_indices = DeviceBuffer::from(bt.indices);
    bt.table.indices.device = bt.d_indices.as<int32_t>();
    const int32_t B = int32_t(c.lens.size());
    const plan::PrefixForest forest =
        plan::build_prefix_forest(bt.indptr.data(), bt.indices.data(), c.lens.data(), B, c.page_size);
    ASSERT_GE(forest.nodes.size(), 2u);
    BatchDecodeWrapper w(B, c.hq, c.hkv, c.d);  // the grid of this shape (and the smem opt-in)
    plan::PackPlanConfig pc;
    pc.num_ctas = w.num_ctas();
    pc.num_kv_heads = c.hkv;
    pc.group_size = c.hq / c.hkv;
    pc.tile_rows = decode::pack_tile_rows(c.d);
    pc.page_size = c.page_size;
    pc.max_chunk = 128;  // splits the shared and private ranges: merges of several sources
    const plan::WorkPlan wp = plan::make_pack_plan(forest, bt.indptr.data(), c.lens.data(), pc);
    int packs = 0;
    int wide = 0;
    for (int i = 0; i < wp.num_items(); ++i) {
      packs += wp.item_num_reqs[i] >= 2;
      wide += wp.item_row_end[i] - wp.item_row_begin[i] > 16;
    }
    ASSERT_GT(packs, 0);
    if (c.hq == 16 && c.d <= 128) ASSERT_GT(wide, 0) << "the 32-row mainloop must run";
    plan::WorkPlanBounds wb;
    wb.max_batch = B;
    wb.max_items = wp.num_items();
    wb.max_merges = wp.num_merges();
    wb.max_sources = int32_t(wp.src_slot.size());
    wb.max_slots = wp.num_slots();
    wb.num_ctas = pc.num_ctas;
    wb.tile_rows = pc.tile_rows;
    wb.head_dim = c.d;
    const plan::WorkPlanLayout layout(wb);
    std::vector<unsigned char> image(layout.metadata_bytes(), 0);
    layout.serialize(wp, image.data());
    DeviceBuffer ws(layout.total_bytes());
    ws.upload(image.data(), image.size());
    decode::prepare_decode_work_plan(c.d);
    decode::LaunchArgs a;
    a.q = &bt.tq;
    a.out = &bt.tout;
    a.lse = &bt.tlse;
    a.cache = &bt.cache;
    a.table = &bt.table;
    a.group_size = pc.group_size;
    a.var = attn::variant_params(c.var, c.d);
    a.dtype = c.dtype;
    a.head_dim = c.d;
    a.grid = pc.num_ctas;
    a.stages = decode::decode_stages(c.d);
    a.warps = decode::decode_warps(c.d);
    a.tile_rows = pc.tile_rows;
    for (int run = 0; run < 20; ++run) {  // every later run must give the same bits (20 runs)
      const std::vector<float> first = run == 0 ? std::vector<float>{} : bt.out();
      bt.dout.poison();
      bt.dlse.poison();
      decode::launch_decode_work_plan(a, layout.pointers(ws.get()), nullptr);
      WEFT_TEST_CUDA(cudaDeviceSynchronize());
      if (run == 0) check_against_reference(bt);
      else EXPECT_EQ(bt.out(), first) << "not deterministic";
    }
  }
}


// DecodeOptions::share_prefixes over decode steps: tokens appended to the private suffixes (new
// pages every other step) are re-planned LAZILY (plan_info().lazy_update: only key ranges and
// page bases copied) into a graph captured at the first step; every step's output is bitwise
// equal to a fresh wrapper's plan of the same table and matches the float64 reference. A step
// that changes the sharing (request 7 joins the root prefix) plans fully and stays correct.
TEST(DecodeSmall, SharePrefixesLazyUpdate) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  Case c;
  c.hkv = 2;
  c.hq = 8;  // group 4: up to eight requests per 32-row pack
  c.d = 128;
  c.dtype = DType::kBFloat16;
  const int32_t steps = 6, per_step = 8, B = 8;
  // Final lengths: requests 0..5 share 20 pages, 0..2 8 more; 6, 7 unrelated.
  const std::vector<int32_t> start = {28 * 16 + 5, 28 * 16 + 9, 28 * 16 + 1, 20 * 16 + 3, 20 * 16 + 14, 20 * 16, 300, 41};
  c.lens = start;
  for (auto& l : c.lens) l += (steps - 1) * per_step;
  Batch bt(c, rng, 24);
  const std::vector<int32_t> full_indptr = bt.indptr, full_indices_init = bt.indices;
  std::vector<int32_t> full_indices = full_indices_init;
  auto share = [&](int dst, int src, int pages) { share_pages(full_indices, full_indptr, dst, src, pages); };
  for (int r = 1; r < 6; ++r) share(r, 0, 20);
  for (int r = 1; r < 3; ++r) share(r, 0, 28);
  // The step's table: each request's first ceil(len / 16) pages of its final list, written in place
  // (a captured graph keeps the device pointers).
  auto set_step = [&](const std::vector<int32_t>& lens) {
    bt.c.lens = lens;
    bt.indptr.assign(1, 0);
    bt.indices.clear();
    bt.last.clear();
    for (int b = 0; b < B; ++b) {
      const int32_t pages = (lens[b] + 15) / 16;
      bt.indices.insert(bt.indices.end(), full_indices.begin() + full_indptr[b],
                        full_indices.begin() + full_indptr[b] + pages);
      bt.indptr.push_back(int32_t(bt.indices.size()));
      bt.last.push_back(lens[b] == 0 ? 0 : lens[b] - (pages - 1) * 16);
    }
    bt.d_indptr.upload(bt.indptr.data(), bt.indptr.size() * sizeof(int32_t));
    bt.d_indices.upload(bt.indices.data(), bt.indices.size() * sizeof(int32_t));
    bt.d_last.upload(bt.last.data(), bt.last.size() * sizeof(int32_t));
    bt.table.indptr.host = bt.indptr.data();
    bt.table.indices = {bt.d_indices.as<int32_t>(), bt.indices.data(), int64_t(bt.indices.size())};
    bt.table.last_page_len.host = bt.last.data();
  };
  DecodeOptions opt;
  opt.share_prefixes = true;
  opt.prefix_cost_model = false;  // the sharing plan under test, not the cost model's choice
  const size_t ws_bytes = BatchDecodeWrapper::workspace_size(B, c.hq, c.hkv, c.d, opt);
  DeviceBuffer ws(ws_bytes);
  BatchDecodeWrapper w(B, c.hq, c.hkv, c.d, opt);
  CapturedRun graph;
  const cudaStream_t st = graph.stream();
  int lazy = 0;
  for (int step = 0; step <= steps; ++step) {
    std::vector<int32_t> lens = start;
    for (auto& l : lens) l += std::min(step, steps - 1) * per_step;
    if (step == steps) {  // request 7 now starts with the root prefix's first 2 pages (41 keys: 2 full)
      for (int i = 0; i < 2; ++i) full_indices[full_indptr[7] + i] = full_indices[full_indptr[0] + i];
    }
    set_step(lens);
    SCOPED_TRACE(::testing::Message() << "step " << step);
    w.plan(bt.table, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws.get(), ws_bytes, st);
    lazy += w.plan_info().lazy_update;
    if (step == 0 || step == steps) EXPECT_FALSE(w.plan_info().lazy_update);
    EXPECT_GT(w.plan_info().num_packs, 0);
    if (step == 0) ASSERT_NO_FATAL_FAILURE(graph.capture(w, bt));
    bt.dout.poison();
    bt.dlse.poison();
    ASSERT_NO_FATAL_FAILURE(graph.replay());
    check_against_reference(bt);
    const std::vector<float> got = bt.out(), got_lse = bt.lse();
    // A fresh wrapper and workspace: a full plan of the same table.
    DeviceBuffer ws2(ws_bytes);
    BatchDecodeWrapper fresh(B, c.hq, c.hkv, c.d, opt);
    fresh.plan(bt.table, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws2.get(), ws_bytes, st);
    EXPECT_FALSE(fresh.plan_info().lazy_update);
    EXPECT_EQ(fresh.plan_info().num_items, w.plan_info().num_items);
    bt.dout.poison();
    bt.dlse.poison();
    run_for(fresh, bt, st);
    WEFT_TEST_CUDA(cudaStreamSynchronize(st));
    EXPECT_EQ(bt.out(), got) << "lazy plan and fresh plan differ";
    EXPECT_EQ(bt.lse(), got_lse);
  }
  // Steps 1 and 2 plan fully: at each of them some request's first private page fills up (requests
  // 1 and 4 at step 1; 0, 2, 3 and 5 at step 2), which the structural key covers once the page is
  // full (it could now be shared), and request 5 gets its first private key at step 1. Steps 3..5
  // only append keys: lazy. (H100 at c7848f5 counted 3 with every output equal to the fresh plan's
  // and the reference; the earlier bound steps - 2 = 4 had not been run on a GPU.)
  EXPECT_EQ(lazy, 3) << "decode steps that only append keys must re-plan lazily";
}

// BatchDecodeWrapper::plan_cascade: explicitly stated 3-level sharing (FlashInfer-style levels:
// groups of consecutive requests and their pages) against the float64 reference, bitwise equal
// over two runs; malformed levels throw weft::Error naming "levels" before anything runs, and a
// wrapper without share_prefixes refuses the call.
TEST(DecodeSmall, CascadeLevelsMatchReference) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  for (int g : {1, 4}) {
    Case c;
    c.hkv = 2;
    c.hq = 2 * g;
    c.d = 128;
    c.dtype = g == 1 ? DType::kFloat16 : DType::kBFloat16;
    c.lens = {18 * 16 + 5, 18 * 16 + 40, 16 * 16 + 1, 13 * 16 + 7, 14 * 16, 10 * 16, 500, 33};
    SCOPED_TRACE(c.describe());
    const int32_t B = int32_t(c.lens.size());
    Batch bt(c, rng);
    auto share = [&](int dst, int src, int pages) { share_pages(bt.indices, bt.indptr, dst, src, pages); };
    share(1, 0, 18);
    share(2, 0, 16);
    share(3, 0, 10);
    share(4, 3, 13);
    share(5, 0, 10);
    bt.d_indices.upload(bt.indices.data(), bt.indices.size() * sizeof(int32_t));
    // Level 0: requests 0..5 share 10 pages; level 1: {0,1,2} 6 more, {3,4} 3 more; level 2:
    // {0,1} 2 more. Requests 6, 7 share nothing.
    const std::vector<CascadeLevel> levels = {{{0, 6, 7, 8}, {10, 0, 0}},
                                              {{0, 3, 5, 6, 7, 8}, {6, 3, 0, 0, 0}},
                                              {{0, 2, 3, 4, 5, 6, 7, 8}, {2, 0, 0, 0, 0, 0, 0}}};
    DecodeOptions opt;
    opt.share_prefixes = true;
    opt.prefix_cost_model = false;  // the sharing plan under test, not the cost model's choice
    const size_t ws_bytes = BatchDecodeWrapper::workspace_size(B, c.hq, c.hkv, c.d, opt);
    DeviceBuffer ws(ws_bytes);
    BatchDecodeWrapper w(B, c.hq, c.hkv, c.d, opt);
    w.plan_cascade(bt.table, levels, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws.get(), ws_bytes,
                   nullptr);
    EXPECT_GT(w.plan_info().num_packs, 0);
    EXPECT_FALSE(w.plan_info().lazy_update);
    std::vector<float> first;
    for (int run = 0; run < 2; ++run) {
      bt.dout.poison();
      bt.dlse.poison();
      run_for(w, bt);
      WEFT_TEST_CUDA(cudaDeviceSynchronize());
      if (run == 0) {
        check_against_reference(bt);
        first = bt.out();
      } else {
        EXPECT_EQ(bt.out(), first) << "not deterministic";
      }
    }
    // Malformed levels: pages its members do not share (request 2 has its own 17th page), groups
    // that do not nest, a wrong indptr size. The plan in the workspace stays valid.
    auto bad = [&](std::vector<CascadeLevel> lv) {
      return test::thrown_argument([&] {
        w.plan_cascade(bt.table, lv, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws.get(), ws_bytes,
                       nullptr);
      });
    };
    EXPECT_EQ(bad({{{0, 6, 7, 8}, {10, 0, 0}}, {{0, 3, 5, 6, 7, 8}, {7, 3, 0, 0, 0}}}), "levels");
    EXPECT_EQ(bad({{{0, 6, 7, 8}, {10, 0, 0}}, {{0, 5, 8}, {0, 0}}}), "levels");
    EXPECT_EQ(bad({{{0, 6, 8}, {10, 0, 0}}}), "levels");
    bt.dout.poison();
    run_for(w, bt);
    WEFT_TEST_CUDA(cudaDeviceSynchronize());
    EXPECT_EQ(bt.out(), first) << "a rejected plan_cascade must leave the plan intact";
    // A wrapper without share_prefixes.
    BatchDecodeWrapper plain(B, c.hq, c.hkv, c.d);
    Workspace pws(B, c);
    EXPECT_EQ(test::thrown_argument([&] {
                plain.plan_cascade(bt.table, levels, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var,
                                   pws.buf.get(), pws.bytes, nullptr);
              }),
              "options.share_prefixes");
  }
}

// DecodeOptions::share_prefixes: the same shared-prefix batch through the public wrapper (plan()
// builds the forest and the packs), then a graph captured on it replayed after a re-plan of a
// batch with other sharing and lengths; plan_lengths() and sliding windows are rejected.
TEST(DecodeSmall, SharePrefixesWrapper) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  for (int d : {64, 128}) {
    Case c;
    c.hkv = 2;
    c.hq = 16;  // group 8: up to four requests per 32-row pack (head_dim <= 128)
    c.d = d;
    c.dtype = d == 128 ? DType::kBFloat16 : DType::kFloat16;
    c.lens = {40 * 16 + 5, 40 * 16 + 11, 24 * 16 + 3, 700, 0, 10 * 16};
    SCOPED_TRACE(c.describe());
    const int32_t B = int32_t(c.lens.size());
    DecodeOptions opt;
    opt.share_prefixes = true;
    opt.prefix_cost_model = false;  // the sharing plan under test, not the cost model's choice
    const size_t ws_bytes = BatchDecodeWrapper::workspace_size(B, c.hq, c.hkv, c.d, opt);
    DeviceBuffer ws(ws_bytes);
    BatchDecodeWrapper w(B, c.hq, c.hkv, c.d, opt);
    Batch bt(c, rng);
    auto share = [&](Batch& x, int dst, int src, int pages) {
      share_pages(x.indices, x.indptr, dst, src, pages);
      // In place: a captured graph keeps the page table's device pointer (the caller updates contents).
      x.d_indices.upload(x.indices.data(), x.indices.size() * sizeof(int32_t));
    };
    share(bt, 1, 0, 40);
    share(bt, 2, 0, 24);
    share(bt, 5, 0, 10);
    w.plan(bt.table, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws.get(), ws_bytes, nullptr);
    EXPECT_GT(w.plan_info().num_packs, 0);
    bt.dout.poison();
    bt.dlse.poison();
    run_for(w, bt);
    WEFT_TEST_CUDA(cudaDeviceSynchronize());
    check_against_reference(bt);
    // Graph captured on this plan, replayed after a re-plan (same buffers, other page ids and
    // sharing: request 3 now shares 30 pages with request 0, request 1 only 8).
    {
      CapturedRun graph;
      ASSERT_NO_FATAL_FAILURE(graph.capture(w, bt));
      std::iota(bt.indices.begin(), bt.indices.end(), 0);  // unique pages again (pool has room)
      share(bt, 1, 0, 8);
      share(bt, 3, 0, 30);
      w.plan(bt.table, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws.get(), ws_bytes,
             graph.stream());
      bt.dout.poison();
      bt.dlse.poison();
      ASSERT_NO_FATAL_FAILURE(graph.replay());
      check_against_reference(bt);
    }
    // Rejected: plan_lengths (no page table to find prefixes in), a sliding window.
    EXPECT_THROW(w.plan_lengths(c.lens.data(), B, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var,
                                ws.get(), ws_bytes, nullptr),
                 Error);
    // Bad options: a negative item bound, and packs with a GQA group above 16.
    DecodeOptions bad = opt;
    bad.max_pack_items = -1;
    EXPECT_EQ(test::thrown_argument([&] { BatchDecodeWrapper x(B, c.hq, c.hkv, c.d, bad); }), "options.max_pack_items");
    EXPECT_EQ(test::thrown_argument([&] { BatchDecodeWrapper x(B, 32 * c.hkv, c.hkv, c.d, opt); }),
              "options.share_prefixes");
    AttentionVariant win = c.var;
    win.window_left = 100;
    EXPECT_THROW(w.plan(bt.table, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, win, ws.get(), ws_bytes, nullptr),
                 Error);
  }
}

// Runs `w` (planned on bt, fallen back to standard decode) and a standard wrapper (no
// share_prefixes) on bt: the same path, output and LSE bitwise equal; then against the reference.
void expect_runs_standard_decode(BatchDecodeWrapper& w, Batch& bt) {
  const Case& c = bt.c;
  const int32_t B = int32_t(c.lens.size());
  bt.dout.poison();
  bt.dlse.poison();
  run_for(w, bt);
  WEFT_TEST_CUDA(cudaDeviceSynchronize());
  const std::vector<float> o = bt.out(), l = bt.lse();
  Workspace std_ws(B, c);
  BatchDecodeWrapper standard(B, c.hq, c.hkv, c.d);
  plan_for(standard, bt, std_ws);
  EXPECT_EQ(w.plan_info().path, standard.plan_info().path);
  bt.dout.poison();
  bt.dlse.poison();
  run_for(standard, bt);
  WEFT_TEST_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ(o, bt.out()) << "the fallback is not the standard decode";
  EXPECT_EQ(l, bt.lse());
  check_against_reference(bt);
}

// DecodeOptions::prefix_fallback: a table without any shared full page runs exactly the standard
// decode (plan_info().prefix_fallback, num_packs 0): output and LSE bitwise equal to a wrapper
// without share_prefixes on the same batch (group 1 takes the CUDA-core path there, group 4 the
// tensor cores). Then sharing appears (the work plan, against the reference), disappears (the
// fallback again, bitwise equal again), and with prefix_fallback = false the work-plan kernel
// runs the unshared batch (against the reference).
TEST(DecodeSmall, SharePrefixesNoSharingFallsBack) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  for (int32_t group : {1, 4}) {
    Case c;
    c.hkv = 2;
    c.hq = 2 * group;
    c.d = 128;
    c.dtype = DType::kBFloat16;
    c.lens = {40 * 16 + 5, 33 * 16 + 11, 24 * 16 + 3, 700, 0, 10 * 16, 1, 17};
    SCOPED_TRACE(c.describe());
    const int32_t B = int32_t(c.lens.size());
    DecodeOptions opt;
    opt.share_prefixes = true;
    opt.prefix_cost_model = false;  // the sharing plan under test, not the cost model's choice
    const size_t ws_bytes = BatchDecodeWrapper::workspace_size(B, c.hq, c.hkv, c.d, opt);
    ASSERT_GE(ws_bytes, BatchDecodeWrapper::workspace_size(B, c.hq, c.hkv, c.d)) << "holds the standard plan too";
    DeviceBuffer ws(ws_bytes);
    BatchDecodeWrapper w(B, c.hq, c.hkv, c.d, opt);
    Batch bt(c, rng);  // page ids all distinct: no sharing
    auto plan_share = [&] {
      w.plan(bt.table, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws.get(), ws_bytes, nullptr);
    };
    auto expect_standard = [&] {
      plan_share();
      EXPECT_TRUE(w.plan_info().prefix_fallback);
      EXPECT_EQ(w.plan_info().num_packs, 0);
      expect_runs_standard_decode(w, bt);
    };
    expect_standard();
    const std::vector<int32_t> unshared = bt.indices;
    share_pages(bt.indices, bt.indptr, 1, 0, 33);
    share_pages(bt.indices, bt.indptr, 2, 0, 24);
    bt.d_indices.upload(bt.indices.data(), bt.indices.size() * sizeof(int32_t));
    plan_share();
    EXPECT_FALSE(w.plan_info().prefix_fallback);
    EXPECT_GT(w.plan_info().num_packs, 0);
    bt.dout.poison();
    bt.dlse.poison();
    run_for(w, bt);
    WEFT_TEST_CUDA(cudaDeviceSynchronize());
    check_against_reference(bt);
    bt.indices = unshared;
    bt.d_indices.upload(bt.indices.data(), bt.indices.size() * sizeof(int32_t));
    expect_standard();
    DecodeOptions keep = opt;
    keep.prefix_fallback = false;
    BatchDecodeWrapper wk(B, c.hq, c.hkv, c.d, keep);
    wk.plan(bt.table, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws.get(), ws_bytes, nullptr);
    EXPECT_FALSE(wk.plan_info().prefix_fallback);
    bt.dout.poison();
    bt.dlse.poison();
    run_for(wk, bt);
    WEFT_TEST_CUDA(cudaDeviceSynchronize());
    check_against_reference(bt);
  }
}

// PAT's B[1,4,16] L[128,256,private] tree at heads 64 x 8, d128 bf16, page 16: 16 requests of
// 128 + 256 + private_keys keys (share_pat_1_4_16 makes their page lists share the 128-key root
// and four 256-key nodes).
Case pat_1_4_16_case(int32_t private_keys) {
  Case c;
  c.hkv = 8;
  c.hq = 64;
  c.d = 128;
  c.dtype = DType::kBFloat16;
  c.lens.assign(16, 128 + 256 + private_keys);
  return c;
}
void share_pat_1_4_16(Batch& bt) {
  for (int j = 1; j < 4; ++j) share_pages(bt.indices, bt.indptr, 4 * j, 0, 128 / 16);  // the root
  for (int i = 0; i < 16; ++i)
    if (i % 4) share_pages(bt.indices, bt.indptr, i, 4 * (i / 4), (128 + 256) / 16);  // root + node
  bt.d_indices = DeviceBuffer::from(bt.indices);
  bt.table.indices.device = bt.d_indices.as<int32_t>();
}

// DecodeOptions::prefix_cost_model: a batch whose sharing plan the cost model predicts slower than
// the standard decode (PAT's B[1,4,16] L[128,256,1024] tree at heads 64 x 8: 16 requests sharing a
// 128-key root and 4 x 256-key nodes before 1024 private keys each; the H100 ran it 1.83x slower
// shared, bench/results/h100_all_049f043.json) falls back (prefix_fallback, the sharing plan's
// packs still counted) and runs exactly the standard decode: output and LSE bitwise equal to a
// wrapper without share_prefixes. With the model off the sharing plan runs (against the
// reference). A batch whose sharing wins (PAT's B[1,32] L[2048,512] at heads 32 x 8: 32 requests
// on a 2048-key root, 512 private keys each; 50.3 vs 71.8 us) keeps sharing with the model on.
TEST(DecodeSmall, SharePrefixesCostModelFallsBack) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  const Case c = pat_1_4_16_case(1024);
  SCOPED_TRACE(c.describe());
  const int32_t B = int32_t(c.lens.size());
  Batch bt(c, rng);
  share_pat_1_4_16(bt);
  DecodeOptions opt;
  opt.share_prefixes = true;
  Workspace ws(B, c, opt);
  BatchDecodeWrapper w(B, c.hq, c.hkv, c.d, opt);
  plan_for(w, bt, ws);
  const DecodePlanInfo info = w.plan_info();
  EXPECT_TRUE(info.prefix_fallback);
  EXPECT_FALSE(info.prefix_sharing);
  EXPECT_GT(info.num_packs, 0) << "the sharing plan had packs: the cost model chose";
  EXPECT_GT(info.predicted_share_us, 0.98f * info.predicted_decode_us);
  expect_runs_standard_decode(w, bt);

  DecodeOptions forced = opt;
  forced.prefix_cost_model = false;
  BatchDecodeWrapper wf(B, c.hq, c.hkv, c.d, forced);
  plan_for(wf, bt, ws);
  EXPECT_FALSE(wf.plan_info().prefix_fallback);
  EXPECT_TRUE(wf.plan_info().prefix_sharing);
  EXPECT_EQ(wf.plan_info().num_packs, info.num_packs);
  bt.dout.poison();
  bt.dlse.poison();
  run_for(wf, bt);
  WEFT_TEST_CUDA(cudaDeviceSynchronize());
  check_against_reference(bt);

  Case wc = c;
  wc.hkv = 8;
  wc.hq = 32;
  wc.lens.assign(32, 2048 + 512);
  SCOPED_TRACE(wc.describe());
  Batch wb(wc, rng);
  for (int i = 1; i < 32; ++i) share_pages(wb.indices, wb.indptr, i, 0, 2048 / 16);
  wb.d_indices = DeviceBuffer::from(wb.indices);
  wb.table.indices.device = wb.d_indices.as<int32_t>();
  Workspace wws(32, wc, opt);
  BatchDecodeWrapper ww(32, wc.hq, wc.hkv, wc.d, opt);
  plan_for(ww, wb, wws);
  EXPECT_FALSE(ww.plan_info().prefix_fallback);
  EXPECT_TRUE(ww.plan_info().prefix_sharing);
  EXPECT_LT(ww.plan_info().predicted_share_us, 0.98f * ww.plan_info().predicted_decode_us);
  wb.dout.poison();
  wb.dlse.poison();
  run_for(ww, wb);
  WEFT_TEST_CUDA(cudaDeviceSynchronize());
  check_against_reference(wb);
}

// The decode step after a cost-model fallback: one key appended to every request inside its last
// page (same pages, same sharing: the pack planner itself would update lazily). The workspace
// holds the standard decode image, not a work-plan image whose key arrays a lazy update could
// rewrite, so the step plans fully (no lazy_update), falls back again and matches the reference.
// (Before 68ca6e6 the wrapper took that lazy update and ran the sharing kernel on the balanced
// image.)
TEST(DecodeSmall, SharePrefixesStepAfterCostFallback) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  const Case c = pat_1_4_16_case(1022);  // last page 14 of 16 keys: the next two steps stay in it
  SCOPED_TRACE(c.describe());
  const int32_t B = int32_t(c.lens.size());
  Batch bt(c, rng);
  share_pat_1_4_16(bt);
  DecodeOptions opt;
  opt.share_prefixes = true;
  Workspace ws(B, c, opt);
  BatchDecodeWrapper w(B, c.hq, c.hkv, c.d, opt);
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    if (step > 0) {
      for (auto& l : bt.c.lens) ++l;
      for (auto& l : bt.last) ++l;
      bt.d_last.upload(bt.last.data(), bt.last.size() * sizeof(int32_t));
    }
    plan_for(w, bt, ws);
    EXPECT_TRUE(w.plan_info().prefix_fallback);
    EXPECT_FALSE(w.plan_info().lazy_update);
    bt.dout.poison();
    bt.dlse.poison();
    run_for(w, bt);
    WEFT_TEST_CUDA(cudaDeviceSynchronize());
    check_against_reference(bt);
  }
}

}  // namespace
}  // namespace weft
