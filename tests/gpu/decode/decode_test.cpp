// BatchDecodeWrapper vs the float64 reference (reference/attention.h) on random paged batches.
// Tests named *Small* form the compute-sanitizer subset (--gtest_filter='*Small*').
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attention/plan/prefix_forest.h"
#include "attention/plan/work_plan.h"
#include "attention/variant_host.h"
#include "decode/launch.h"
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

struct Workspace {
  DeviceBuffer buf;
  size_t bytes = 0;
  Workspace(int32_t max_batch, const Case& c)
      : bytes(BatchDecodeWrapper::workspace_size(max_batch, c.hq, c.hkv, c.d)) {
    buf = DeviceBuffer(bytes);
  }
};

void plan_for(BatchDecodeWrapper& w, Batch& bt, Workspace& ws, cudaStream_t s = nullptr) {
  const Case& c = bt.c;
  w.plan(bt.table, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws.buf.get(), ws.bytes, s);
}

void run_for(BatchDecodeWrapper& w, Batch& bt, cudaStream_t s = nullptr) {
  w.run(bt.tq, bt.cache, bt.table, bt.tout, bt.c.with_lse ? &bt.tlse : nullptr, s);
}

// Compare the batch's outputs with the float64 reference; tolerance from the low-precision
// emulation of the same computation.
void check_against_reference(const Batch& bt) {
  const Case& c = bt.c;
  ref::RaggedQ rq{bt.q.data(), c.hq, c.d, ref::iota_indptr(int64_t(c.lens.size()))};
  const ref::PagedKV rkv = bt.ref_kv();
  const ref::Options opt = ref::options_from(c.var);
  const ref::Result exact = ref::attention(rq, rkv, opt);
  const ref::Result low = ref::attention_low_precision(rq, rkv, opt, c.dtype, /*round_p=*/true);
  const test::Comparison base = test::compare(ref::to_float(low.o), exact.o);
  const test::Tolerance tol = test::tolerance_from_baseline(base, 4.0, 1e-5, 2e-3);
  const test::Comparison got = test::compare(bt.out(), exact.o);
  EXPECT_TRUE(test::within(got, tol)) << c.describe() << "\n got " << got.summary() << "\n baseline "
                                      << base.summary();
  if (c.with_lse) {
    const test::Comparison gl = test::compare(bt.lse(), exact.lse);
    EXPECT_TRUE(test::within(gl, test::Tolerance{1e-5, 2e-3})) << c.describe() << " lse " << gl.summary();
  }
  // kv_len 0 rows: exactly O = 0 and LSE = -inf.
  const std::vector<float> o = bt.out(), l = bt.lse();
  for (size_t b = 0; b < c.lens.size(); ++b) {
    if (c.lens[b] != 0) continue;
    for (int64_t i = 0; i < int64_t(c.hq) * c.d; ++i) ASSERT_EQ(o[b * c.hq * c.d + i], 0.f) << "request " << b;
    if (c.with_lse)
      for (int h = 0; h < c.hq; ++h) ASSERT_TRUE(std::isinf(l[b * c.hq + h]) && l[b * c.hq + h] < 0);
  }
}

// Plan, poison outputs, run, compare.
void run_case(const Case& c, Rng& rng) {
  SCOPED_TRACE(c.describe());
  Batch bt(c, rng);
  Workspace ws(std::max<int32_t>(1, int32_t(c.lens.size())), c);
  BatchDecodeWrapper w(std::max<int32_t>(1, int32_t(c.lens.size())), c.hq, c.hkv, c.d, c.path);
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


// The generic item path (issue 19): a work plan whose packs hold rows of several requests that
// share a 2-level page prefix (requests 0, 1 share 32 pages, request 2 the first 20 of them,
// request 5 is fully shared: 10 full pages, no private key), plus unrelated and empty requests,
// run through the decode kernel's kPacked path and the work plan's merge, against the float64
// reference of the same page table.
TEST(DecodeSmall, WorkPlanPacksMatchReference) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  for (int d : {64, 128, 256}) {
    Case c;
    c.hkv = 2;
    c.hq = 8;
    c.d = d;
    c.dtype = d == 128 ? DType::kBFloat16 : DType::kFloat16;
    c.page_size = 16;
    c.lens = {37 * 16 + 5, 37 * 16 + 11, 20 * 16 + 3, 700, 0, 10 * 16};
    SCOPED_TRACE(c.describe());
    Batch bt(c, rng);
    auto share = [&](int dst, int src, int pages) {
      for (int i = 0; i < pages; ++i) bt.indices[bt.indptr[dst] + i] = bt.indices[bt.indptr[src] + i];
    };
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
    pc.tile_rows = 16;
    pc.page_size = c.page_size;
    pc.max_chunk = 128;  // splits the shared and private ranges: merges of several sources
    const plan::WorkPlan wp = plan::make_pack_plan(forest, bt.indptr.data(), c.lens.data(), pc);
    int packs = 0;
    for (int i = 0; i < wp.num_items(); ++i) packs += wp.item_num_reqs[i] >= 2;
    ASSERT_GT(packs, 0);
    plan::WorkPlanBounds wb;
    wb.max_batch = B;
    wb.max_items = wp.num_items();
    wb.max_merges = wp.num_merges();
    wb.max_sources = int32_t(wp.src_slot.size());
    wb.max_slots = wp.num_slots();
    wb.num_ctas = pc.num_ctas;
    wb.tile_rows = 16;
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
    a.tile_rows = 16;
    for (int run = 0; run < 2; ++run) {  // the second run must give the same bits
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


// DecodeOptions::share_prefixes: the same shared-prefix batch through the public wrapper (plan()
// builds the forest and the packs), then a graph captured on it replayed after a re-plan of a
// batch with other sharing and lengths; plan_lengths() and sliding windows are rejected.
TEST(DecodeSmall, SharePrefixesWrapper) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  for (int d : {64, 128}) {
    Case c;
    c.hkv = 2;
    c.hq = 16;  // group 8: two requests per 16-row pack
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
      for (int i = 0; i < pages; ++i) x.indices[x.indptr[dst] + i] = x.indices[x.indptr[src] + i];
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
    cudaStream_t st;
    WEFT_TEST_CUDA(cudaStreamCreate(&st));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    WEFT_TEST_CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    run_for(w, bt, st);
    WEFT_TEST_CUDA(cudaStreamEndCapture(st, &graph));
    WEFT_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    std::iota(bt.indices.begin(), bt.indices.end(), 0);  // unique pages again (pool has room)
    share(bt, 1, 0, 8);
    share(bt, 3, 0, 30);
    w.plan(bt.table, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws.get(), ws_bytes, st);
    bt.dout.poison();
    bt.dlse.poison();
    WEFT_TEST_CUDA(cudaGraphLaunch(exec, st));
    WEFT_TEST_CUDA(cudaStreamSynchronize(st));
    check_against_reference(bt);
    WEFT_TEST_CUDA(cudaGraphExecDestroy(exec));
    WEFT_TEST_CUDA(cudaGraphDestroy(graph));
    WEFT_TEST_CUDA(cudaStreamDestroy(st));
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

}  // namespace
}  // namespace weft
