// BatchDecodeWrapper vs the float64 reference (reference/attention.h) on random paged batches.
// Tests named *Small* form the compute-sanitizer subset (--gtest_filter='*Small*').
#include <gtest/gtest.h>

#include <memory>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tests/gpu/decode/decode_batch.h"
#include "reference/attention.h"
#include "tests/common/gpu_util.h"
#include "tests/common/test_util.h"
#include "weft/decode.h"
#include "weft/error.h"

namespace weft {
namespace {

using test::DeviceBuffer;
using test::Rng;
using test_decode::Batch;
using test_decode::Case;
using test_decode::Workspace;
using test_decode::check_against_reference;
using test_decode::plan_for;
using test_decode::run_for;

// Plan, poison outputs, run, compare.
// opt: the wrapper's options beyond the case's path (warps / stages; opt.path is set from c.path).
void run_case(const Case& c, Rng& rng, DecodeOptions opt = {}) {
  SCOPED_TRACE(c.describe());
  opt.path = c.path;
  Batch bt(c, rng);
  Workspace ws(std::max<int32_t>(1, int32_t(c.lens.size())), c, opt);
  BatchDecodeWrapper w(std::max<int32_t>(1, int32_t(c.lens.size())), c.hq, c.hkv, c.d, opt);
  plan_for(w, bt, ws);
  bt.dout.poison();
  bt.dlse.poison();
  run_for(w, bt);
  WEFT_TEST_CUDA(cudaDeviceSynchronize());
  check_against_reference(bt);
}

std::vector<int32_t> lengths(Rng& rng, int n, int32_t max_len, bool zipf) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) {
    const double u = rng.uniform(0, 1);
    v[i] = static_cast<int32_t>((zipf ? std::pow(u, 4.0) : u) * max_len) + 1;
  }
  return v;
}

const DecodePath kPaths[] = {DecodePath::kTensorCore, DecodePath::kCudaCore};

// Every head dim x dtype x group x page size x layout appears at least once (sampled product).
TEST(DecodeSmall, SampledConfigurations) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  const int dims[] = {64, 128, 256};
  const DType dtypes[] = {DType::kFloat16, DType::kBFloat16};
  const int groups[] = {1, 2, 4, 8, 16};
  const int pages[] = {1, 8, 16, 32, 64};
  int n = 0;
  for (int di = 0; di < 3; ++di)
    for (int gi = 0; gi < 5; ++gi)
      for (DecodePath path : kPaths) {
        if (!decode_path_available(path)) continue;
        Case c;
        c.d = dims[di];
        c.dtype = dtypes[(di + gi) % 2];
        c.hkv = 1 + (gi + di) % 2;
        c.hq = c.hkv * groups[gi];
        c.page_size = pages[(gi + 2 * di) % 5];
        c.layout = (n % 2) ? KVLayout::kHND : KVLayout::kNHD;
        c.path = path;
        c.lens = {0, 1, 17, int32_t(rng.randint(2, 300)), 64, 65, int32_t(rng.randint(300, 700))};
        run_case(c, rng);
        ++n;
      }
  EXPECT_GE(n, 15);
}

// CTA shapes other than the default 4 warps x 2 stages (DecodeOptions::warps_per_cta /
// pipeline_stages; the SM partition's decode runs 4 x 3): the prologue's page-id chain for tiles
// 1 .. S-2 and the page-id ring (tile x + S's ids ride in tile x's group) at every depth, on both
// paths, page sizes 1 and 16, lengths off every tile, split and multi-item CTAs.
TEST(DecodeSmall, WarpsAndStages) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  const int shapes[][2] = {{4, 3}, {2, 6}, {3, 4}, {8, 2}, {2, 8}, {4, 4}};
  int n = 0;
  for (const auto& sh : shapes)
    for (DecodePath path : kPaths) {
      if (!decode_path_available(path)) continue;
      Case c;
      c.hkv = 2;
      c.hq = n % 2 ? 16 : 8;
      c.d = n % 3 == 2 ? 64 : 128;
      c.dtype = n % 2 ? DType::kFloat16 : DType::kBFloat16;
      c.page_size = n % 2 ? 1 : 16;
      c.path = path;
      c.lens = {0, 1, 17, int32_t(rng.randint(2, 300)), 64, 65, int32_t(rng.randint(300, 700)),
                int32_t(rng.randint(2000, 5000))};
      SCOPED_TRACE("warps " + std::to_string(sh[0]) + " stages " + std::to_string(sh[1]));
      DecodeOptions opt;
      opt.warps_per_cta = sh[0];
      opt.pipeline_stages = sh[1];
      run_case(c, rng, opt);
      ++n;
    }
  EXPECT_GE(n, 6);
}

// Every GQA group 1..16 on both paths: the tensor-core path switches from one n8 tile of query
// columns to two between groups 8 and 9, and odd groups leave part of a tile unused.
TEST(DecodeSmall, EveryGroupSize1To16) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  for (int g = 1; g <= 16; ++g)
    for (DecodePath path : kPaths) {
      if (!decode_path_available(path)) continue;
      Case c;
      c.hkv = 2;
      c.hq = 2 * g;
      c.d = g % 3 == 0 ? 64 : 128;
      c.dtype = g % 2 ? DType::kBFloat16 : DType::kFloat16;
      c.page_size = g % 4 == 0 ? 1 : 16;
      c.layout = g % 2 ? KVLayout::kNHD : KVLayout::kHND;
      c.path = path;
      c.lens = {int32_t(rng.randint(1, 40)), 0, int32_t(rng.randint(200, 1500)), 1};
      run_case(c, rng);
    }
}

// GQA groups above the 16-row query tile (MQA-style 24, 32, 64 query heads per KV head): each
// (request, kv head) is cut into several 16-row tiles reading the same keys (the last one
// partial at group 24), at every head dim, both dtypes and paths, split and unsplit lengths.
TEST(DecodeSmall, GroupsAbove16) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  const int groups[] = {24, 32, 64};
  const int dims[] = {64, 128, 256};
  int n = 0;
  for (int gi = 0; gi < 3; ++gi)
    for (int di = 0; di < 3; ++di)
      for (DecodePath path : kPaths) {
        if (!decode_path_available(path)) continue;
        Case c;
        c.hkv = 1 + (gi + di) % 2;
        c.hq = c.hkv * groups[gi];
        c.d = dims[di];
        c.dtype = (gi + di) % 2 ? DType::kFloat16 : DType::kBFloat16;
        c.page_size = (gi + di) % 3 == 0 ? 1 : 16;
        c.layout = n % 2 ? KVLayout::kHND : KVLayout::kNHD;
        c.path = path;
        c.var.window_left = gi == 2 && di == 1 ? 100 : -1;
        c.lens = {int32_t(rng.randint(1, 40)), 0, int32_t(rng.randint(1500, 3000)), 1, 16};
        run_case(c, rng);
        ++n;
      }
  EXPECT_GE(n, 9);
}

// Groups above 16 with enough KV that the plan takes 32-row items (decode::plan_tile_rows: at
// least 2 pieces of 256 keys per CTA), so both epilogue rounds and the 32-row partial slots run.
TEST(DecodeSmall, GroupsAbove16WideItems) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  for (int d : {64, 128}) {
    Case c;
    c.hkv = 2;
    c.hq = 2 * (d == 64 ? 24 : 32);
    c.d = d;
    c.dtype = d == 64 ? DType::kFloat16 : DType::kBFloat16;
    c.lens = {20000, 0, 19000, 21000, 20500, 1};
    SCOPED_TRACE(c.describe());
    Batch bt(c, rng);
    Workspace ws(int32_t(c.lens.size()), c);
    BatchDecodeWrapper w(int32_t(c.lens.size()), c.hq, c.hkv, c.d, c.path);
    plan_for(w, bt, ws);
    EXPECT_EQ(w.plan_info().tile_rows, 32);
    bt.dout.poison();
    bt.dlse.poison();
    run_for(w, bt);
    WEFT_TEST_CUDA(cudaDeviceSynchronize());
    check_against_reference(bt);
  }
}

TEST(DecodeSmall, SplitKVWithEmptyRequests) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  for (DecodePath path : kPaths) {
    if (!decode_path_available(path)) continue;
    Case c;
    c.hq = 8;
    c.hkv = 1;
    c.lens = {0, 3000, 1, 0, 777};
    c.path = path;
    run_case(c, rng);
  }
}

TEST(Decode, LongUniformAndZipfLengths) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  for (int zipf = 0; zipf < 2; ++zipf)
    for (DecodePath path : kPaths) {
      if (!decode_path_available(path)) continue;
      Case c;
      c.hq = 8;
      c.hkv = 1;
      c.d = 128;
      c.page_size = 16;
      c.lens = lengths(rng, 6, 32768, zipf);
      c.lens.push_back(0);
      c.path = path;
      c.layout = zipf ? KVLayout::kHND : KVLayout::kNHD;
      run_case(c, rng);
    }
}

TEST(Decode, ManyRequestsGqa) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  for (DecodePath path : kPaths) {
    Case c;
    c.hq = 32;
    c.hkv = 8;
    c.lens = lengths(rng, 48, 2048, false);
    c.lens[5] = 0;
    c.path = path;
    run_case(c, rng);
  }
}

// Group 1 and 2 (the CUDA-core path's target) with many requests, both paths, a split plan.
TEST(Decode, ManyRequestsSmallGroups) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  for (int g : {1, 2})
    for (DecodePath path : kPaths) {
      Case c;
      c.hkv = 4;
      c.hq = 4 * g;
      c.d = g == 1 ? 128 : 64;
      c.dtype = g == 1 ? DType::kBFloat16 : DType::kFloat16;
      c.lens = lengths(rng, 20, 9000, true);
      c.lens[3] = 0;
      c.path = path;
      run_case(c, rng);
    }
}

// kAuto resolves to choose_decode_path(group, head_dim, dtype); forced paths stay forced.
TEST(DecodeSmall, PathResolution) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  for (int g : {1, 2, 4, 8, 16})
    for (DecodePath path : {DecodePath::kAuto, DecodePath::kTensorCore, DecodePath::kCudaCore}) {
      Case c;
      c.hkv = 1;
      c.hq = g;
      c.lens = {40};
      Batch bt(c, rng);
      Workspace ws(1, c);
      BatchDecodeWrapper w(1, c.hq, c.hkv, c.d, path);
      plan_for(w, bt, ws);
      const DecodePath want = path == DecodePath::kAuto ? choose_decode_path(g, c.d, c.dtype) : path;
      EXPECT_EQ(w.plan_info().path, want) << "group " << g << " forced " << decode_path_name(path);
      EXPECT_NE(w.plan_info().path, DecodePath::kAuto);
    }
}

TEST(DecodeSmall, WindowAndSoftCap) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  for (DecodePath path : kPaths) {
    if (!decode_path_available(path)) continue;
    Case c;
    c.hq = 16;
    c.hkv = 2;
    c.d = 64;
    c.dtype = DType::kFloat16;
    c.page_size = 8;
    c.lens = {1, 100, 2500, 0, 700};
    c.path = path;
    c.var.window_left = 128;
    run_case(c, rng);
    c.var.window_left = -1;
    c.var.logits_soft_cap = 5.f;
    c.var.sm_scale = 0.3;
    run_case(c, rng);
    c.var.window_left = 0;  // only the last key
    run_case(c, rng);
  }
}

TEST(DecodeSmall, NoLseMha) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  for (DecodePath path : kPaths) {
    Case c;
    c.hq = 4;
    c.hkv = 4;
    c.lens = {5, 1000};
    c.with_lse = false;
    c.path = path;
    run_case(c, rng);
  }
}

// Capture run() in a CUDA graph; re-plan with other lengths (and other content), replay.
void graph_replay_after_replan(DecodePath path) {
  SCOPED_TRACE(decode_path_name(path));
  Rng rng = Rng::for_current_test(int(path));
  Case c;
  c.path = path;
  c.hq = 16;
  c.hkv = 2;
  c.d = 128;
  const int32_t max_batch = 8;
  // Two batches sharing every device buffer the graph sees: q/out/lse/table arrays/pools.
  c.lens = {100, 200, 50};
  Case c2 = c;
  c2.lens = {20000, 0, 7, 3000, 64, 129, 1, 9000};
  Rng rng2 = Rng::for_current_test(10 + int(path));
  Batch big(c2, rng2, 8);
  // The first batch: a prefix-sized view over the same buffers, built from its own host data.
  Batch small(c, rng);
  Workspace ws(max_batch, c);
  BatchDecodeWrapper w(max_batch, c.hq, c.hkv, c.d, path);
  cudaStream_t s;
  WEFT_TEST_CUDA(cudaStreamCreate(&s));
  // Stage the small batch into the big batch's buffers (pools are large enough: reuse them).
  auto upload = [&](Batch& src) {
    big.dq.upload(test::to_half_bits(c.dtype, src.q).data(), src.q.size() * 2);
    big.dk.upload(test::to_half_bits(c.dtype, src.k).data(), src.k.size() * 2);
    big.dv.upload(test::to_half_bits(c.dtype, src.v).data(), src.v.size() * 2);
    big.d_indptr.upload(src.indptr.data(), src.indptr.size() * 4);
    big.d_indices.upload(src.indices.data(), src.indices.size() * 4);
    big.d_last.upload(src.last.data(), src.last.size() * 4);
  };
  ASSERT_LE(small.k.size(), big.k.size());
  upload(small);
  PageTable t1 = small.table;
  t1.indptr.device = big.d_indptr.as<int32_t>();
  t1.indices.device = big.d_indices.as<int32_t>();
  t1.last_page_len.device = big.d_last.as<int32_t>();
  PagedKVCache cache1 = small.cache;
  cache1.k_pages.data = big.dk.get();
  cache1.v_pages.data = big.dv.get();
  TensorView q1 = small.tq, o1 = small.tout, l1 = small.tlse;
  q1.data = big.dq.get();
  o1.data = big.dout.get();
  l1.data = big.dlse.get();
  w.plan(t1, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws.buf.get(), ws.bytes, s);
  cudaGraph_t graph;
  WEFT_TEST_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  w.run(q1, cache1, t1, o1, &l1, s);
  WEFT_TEST_CUDA(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  WEFT_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  big.dout.poison(s);
  big.dlse.poison(s);
  WEFT_TEST_CUDA(cudaGraphLaunch(exec, s));
  WEFT_TEST_CUDA(cudaStreamSynchronize(s));
  {
    // Check the small batch's result from the shared buffers.
    small.dout.upload(big.dout.to_vector<uint8_t>(small.c.lens.size() * c.hq * c.d * 2).data(),
                      small.c.lens.size() * c.hq * c.d * 2);
    small.dlse.upload(big.dlse.to_vector<uint8_t>(small.c.lens.size() * c.hq * 4).data(),
                      small.c.lens.size() * c.hq * 4);
    check_against_reference(small);
  }
  // Re-plan for the big batch (different lengths, batch, split) and replay the same graph.
  upload(big);
  w.plan(big.table, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws.buf.get(), ws.bytes, s);
  EXPECT_TRUE(w.plan_info().split);
  big.dout.poison(s);
  big.dlse.poison(s);
  WEFT_TEST_CUDA(cudaGraphLaunch(exec, s));
  WEFT_TEST_CUDA(cudaStreamSynchronize(s));
  check_against_reference(big);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

TEST(Decode, GraphReplayAfterReplan) {
  WEFT_REQUIRE_GPU();
  for (DecodePath path : kPaths) graph_replay_after_replan(path);
}

void repeated_runs_identical(DecodePath path, int32_t hq, int32_t hkv) {
  SCOPED_TRACE(decode_path_name(path));
  Rng rng = Rng::for_current_test(int(path) * 100 + hq / hkv);
  Case c;
  c.hq = hq;
  c.hkv = hkv;
  c.path = path;
  c.lens = {30000, 500, 12000, 1};
  Batch bt(c, rng);
  Workspace ws(4, c);
  BatchDecodeWrapper w(4, c.hq, c.hkv, c.d, path);
  plan_for(w, bt, ws);
  ASSERT_TRUE(w.plan_info().split);
  std::vector<uint16_t> first;
  std::vector<float> first_lse;
  for (int i = 0; i < 20; ++i) {
    bt.dout.poison();
    bt.dlse.poison();
    run_for(w, bt);
    WEFT_TEST_CUDA(cudaDeviceSynchronize());
    const auto o = bt.dout.to_vector<uint16_t>(c.lens.size() * c.hq * c.d);
    const auto l = bt.dlse.to_vector<float>(c.lens.size() * c.hq);
    if (i == 0) {
      first = o;
      first_lse = l;
    } else {
      ASSERT_EQ(o, first) << "run " << i;
      ASSERT_EQ(0, std::memcmp(l.data(), first_lse.data(), l.size() * 4)) << "run " << i;
    }
  }
  check_against_reference(bt);
}

TEST(Decode, RepeatedRunsBitwiseIdenticalWithSplit) {
  WEFT_REQUIRE_GPU();
  for (DecodePath path : kPaths) {
    repeated_runs_identical(path, 32, 8);
    repeated_runs_identical(path, 8, 8);
  }
}

// plan() called again and again while the stream lags far behind (a long memset ahead of it): each
// plan finds the previous copy queued and writes another staging slot (attention/staging_ring.h, 4
// slots), and from the 5th on waits for the oldest; every run must still see its own plan.
// 11 batches of different lengths (split and unsplit plans), each run into its own outputs, then
// every output against the reference. Then the same with one sync per plan (the ring's query path).
TEST(DecodeSmall, BackToBackPlansOnABusyStream) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  const int kSteps = 11;
  std::vector<std::unique_ptr<Batch>> batches;
  int32_t max_batch = 1;
  for (int i = 0; i < kSteps; ++i) {
    Case c;
    const int n = 1 + int(rng.randint(0, 5));
    for (int b = 0; b < n; ++b) c.lens.push_back(int32_t(rng.randint(0, i % 3 == 0 ? 6000 : 700)));
    batches.push_back(std::make_unique<Batch>(c, rng));
    max_batch = std::max(max_batch, n);
  }
  const Case& c0 = batches[0]->c;
  Workspace ws(max_batch, c0);
  BatchDecodeWrapper w(max_batch, c0.hq, c0.hkv, c0.d);
  cudaStream_t s;
  WEFT_TEST_CUDA(cudaStreamCreate(&s));
  DeviceBuffer busy(size_t(1) << 30);
  for (int sync_each : {0, 1}) {
    SCOPED_TRACE(sync_each ? "a sync after each step" : "back to back");
    for (auto& bt : batches) {
      bt->dout.poison(s);
      bt->dlse.poison(s);
    }
    WEFT_TEST_CUDA(cudaMemsetAsync(busy.get(), 0, size_t(1) << 30, s));  // the stream lags behind plan()
    for (auto& bt : batches) {
      plan_for(w, *bt, ws, s);
      run_for(w, *bt, s);
      if (sync_each) WEFT_TEST_CUDA(cudaStreamSynchronize(s));
    }
    WEFT_TEST_CUDA(cudaStreamSynchronize(s));
    for (auto& bt : batches) {
      SCOPED_TRACE(bt->c.describe());
      check_against_reference(*bt);
    }
  }
  cudaStreamDestroy(s);
}

// plan_lengths (KV lengths, no page table at plan time) gives the same bits as plan(), split and
// unsplit, and matches the reference.
TEST(DecodeSmall, PlanLengthsMatchesPlan) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  for (auto lens : {std::vector<int32_t>{5, 3000, 0, 777}, std::vector<int32_t>{40, 1, 130, 64, 900, 17}}) {
    Case c;
    c.lens = lens;
    Batch bt(c, rng);
    const int32_t batch = int32_t(lens.size());
    Workspace ws(batch, c);
    BatchDecodeWrapper w(batch, c.hq, c.hkv, c.d);
    std::vector<uint16_t> got[2];
    for (int mode = 0; mode < 2; ++mode) {
      if (mode == 0)
        plan_for(w, bt, ws);
      else
        w.plan_lengths(lens.data(), batch, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws.buf.get(),
                       ws.bytes, nullptr);
      bt.dout.poison();
      bt.dlse.poison();
      run_for(w, bt);
      WEFT_TEST_CUDA(cudaDeviceSynchronize());
      if (mode == 1) check_against_reference(bt);
      got[mode] = bt.dout.to_vector<uint16_t>(lens.size() * c.hq * c.d);
    }
    EXPECT_EQ(got[0], got[1]);
  }
}

// Rejected calls throw weft::Error naming the argument and leave the output untouched.
TEST(DecodeSmall, BadArgumentsThrowAndWriteNothing) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  Case c;
  c.lens = {10, 300};
  Batch bt(c, rng);
  Workspace ws(4, c);
  BatchDecodeWrapper w(4, c.hq, c.hkv, c.d);
  auto expect_arg = [&](const std::string& arg, auto&& fn) {
    bt.dout.poison();
    WEFT_TEST_CUDA(cudaDeviceSynchronize());
    try {
      fn();
      ADD_FAILURE() << "expected weft::Error for " << arg;
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), arg) << e.what();
    }
    WEFT_TEST_CUDA(cudaDeviceSynchronize());
    const auto o = bt.dout.to_vector<uint16_t>(c.lens.size() * c.hq * c.d);
    for (uint16_t x : o) ASSERT_EQ(x, 0xFFFF) << "output written by a rejected call (" << arg << ")";
  };
  expect_arg("plan", [&] { run_for(w, bt); });
  plan_for(w, bt, ws);
  TensorView q = bt.tq;
  q.dtype = DType::kFloat16;
  expect_arg("q", [&] { w.run(q, bt.cache, bt.table, bt.tout, &bt.tlse, nullptr); });
  q = bt.tq;
  q.shape[1] = 4;
  expect_arg("q", [&] { w.run(q, bt.cache, bt.table, bt.tout, &bt.tlse, nullptr); });
  TensorView o = bt.tout;
  o.shape[0] = 3;
  expect_arg("out", [&] { w.run(bt.tq, bt.cache, bt.table, o, &bt.tlse, nullptr); });
  TensorView l = bt.tlse;
  l.dtype = DType::kFloat16;
  expect_arg("lse", [&] { w.run(bt.tq, bt.cache, bt.table, bt.tout, &l, nullptr); });
  PagedKVCache cache = bt.cache;
  cache.layout = KVLayout::kHND;
  {  // a well-formed HND view of the same pools: only the layout disagrees with the plan
    const auto& k = bt.cache.k_pages;
    cache.k_pages = TensorView(k.data, k.dtype, {k.shape[0], k.shape[2], k.shape[1], k.shape[3]});
    cache.v_pages = TensorView(bt.cache.v_pages.data, k.dtype, {k.shape[0], k.shape[2], k.shape[1], k.shape[3]});
  }
  expect_arg("cache.layout", [&] { w.run(bt.tq, cache, bt.table, bt.tout, &bt.tlse, nullptr); });
  // A table whose lengths differ from the plan.
  std::vector<int32_t> last = bt.last;
  last[0] = last[0] == 1 ? 2 : 1;
  PageTable t = bt.table;
  t.last_page_len.host = last.data();
  expect_arg("table", [&] { w.run(bt.tq, bt.cache, t, bt.tout, &bt.tlse, nullptr); });
  // Plan-time errors.
  expect_arg("num_qo_heads", [&] {
    w.plan(bt.table, 16, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws.buf.get(), ws.bytes, nullptr);
  });
  expect_arg("workspace", [&] {
    w.plan(bt.table, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws.buf.get(), 1024, nullptr);
  });
  AttentionVariant var;
  var.mask = MaskMode::kCustom;
  expect_arg("variant.mask", [&] {
    w.plan(bt.table, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, var, ws.buf.get(), ws.bytes, nullptr);
  });
  var = AttentionVariant{};
  var.return_lse = true;
  w.plan(bt.table, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, var, ws.buf.get(), ws.bytes, nullptr);
  expect_arg("lse", [&] { w.run(bt.tq, bt.cache, bt.table, bt.tout, nullptr, nullptr); });
  EXPECT_THROW(BatchDecodeWrapper(4, 12, 5, 128), Error);
  EXPECT_THROW(BatchDecodeWrapper(4, 8, 2, 96), Error);
}


}  // namespace
}  // namespace weft
