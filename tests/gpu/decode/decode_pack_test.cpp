// The decode kernel's generic item path (work plan v2, attention/plan/work_plan.h) and
// DecodeOptions::share_prefixes, against the float64 reference on batches whose requests share
// page prefixes. Tests named *Small* form the compute-sanitizer subset.
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
    const size_t ws_bytes = BatchDecodeWrapper::workspace_size(B, c.hq, c.hkv, c.d, opt);
    ASSERT_GE(ws_bytes, BatchDecodeWrapper::workspace_size(B, c.hq, c.hkv, c.d)) << "holds the standard plan too";
    DeviceBuffer ws(ws_bytes);
    BatchDecodeWrapper w(B, c.hq, c.hkv, c.d, opt);
    Workspace std_ws(B, c);
    BatchDecodeWrapper standard(B, c.hq, c.hkv, c.d);
    Batch bt(c, rng);  // page ids all distinct: no sharing
    auto plan_share = [&] {
      w.plan(bt.table, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws.get(), ws_bytes, nullptr);
    };
    auto expect_standard = [&] {
      plan_share();
      EXPECT_TRUE(w.plan_info().prefix_fallback);
      EXPECT_EQ(w.plan_info().num_packs, 0);
      bt.dout.poison();
      bt.dlse.poison();
      run_for(w, bt);
      WEFT_TEST_CUDA(cudaDeviceSynchronize());
      const std::vector<float> o = bt.out(), l = bt.lse();
      plan_for(standard, bt, std_ws);
      EXPECT_EQ(w.plan_info().path, standard.plan_info().path);
      bt.dout.poison();
      bt.dlse.poison();
      run_for(standard, bt);
      WEFT_TEST_CUDA(cudaDeviceSynchronize());
      EXPECT_EQ(o, bt.out()) << "the fallback is not the standard decode";
      EXPECT_EQ(l, bt.lse());
      check_against_reference(bt);
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
    const size_t ws_bytes = BatchDecodeWrapper::workspace_size(B, c.hq, c.hkv, c.d, opt);
    DeviceBuffer ws(ws_bytes);
    BatchDecodeWrapper w(B, c.hq, c.hkv, c.d, opt);
    Batch bt(c, rng);
    for (int r = 1; r < shared_end; ++r) share_pages(bt.indices, bt.indptr, r, 0, root);
    for (int r = 0; r < shared_end; ++r) {
      const int g = group_of[r];
      if (r != leader[g]) share_pages(bt.indices, bt.indptr, r, leader[g], root + child_pages[g]);
    }
    bt.d_indices.upload(bt.indices.data(), bt.indices.size() * sizeof(int32_t));
    w.plan(bt.table, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws.get(), ws_bytes, nullptr);
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
  const size_t ws_bytes = BatchDecodeWrapper::workspace_size(B, c.hq, c.hkv, c.d, opt);
  DeviceBuffer ws(ws_bytes);
  BatchDecodeWrapper w(B, c.hq, c.hkv, c.d, opt);
  Batch bt(c, rng);
  for (int r = 1; r < B; ++r) share_pages(bt.indices, bt.indptr, r, 0, root_pages);
  bt.d_indices.upload(bt.indices.data(), bt.indices.size() * sizeof(int32_t));
  w.plan(bt.table, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws.get(), ws_bytes, nullptr);
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
      opt.prefix_wide_packs = wide;
      opt.prefix_wide_overlap = mode == 0;
      opt.prefix_wide_sm90 = mode != 3;
      opt.prefix_wide_sm90_wave = mode != 4;
      opt.prefix_wide_min_rows = 64;  // below the measured defaults (256 rows, 2048 keys): every
      opt.prefix_wide_min_keys = 1;   // >= 64-row node goes wide, however short
      const size_t ws_bytes = BatchDecodeWrapper::workspace_size(B, c.hq, c.hkv, c.d, opt);
      DeviceBuffer ws(ws_bytes);
      BatchDecodeWrapper w(B, c.hq, c.hkv, c.d, opt);
      w.plan(bt.table, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws.get(), ws_bytes, nullptr);
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
    opt.prefix_wide_min_rows = 64;
    opt.prefix_wide_min_keys = 1;
    opt.prefix_wide_overlap = false;  // serial plans: the Hopper mainloop's (kPackWideSm90SplitPlans)
    const size_t ws_bytes = BatchDecodeWrapper::workspace_size(B, c.hq, c.hkv, c.d, opt);
    DeviceBuffer ws(ws_bytes);
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
      w.plan(bt.table, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws.get(), ws_bytes, nullptr);
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

}  // namespace
}  // namespace weft
