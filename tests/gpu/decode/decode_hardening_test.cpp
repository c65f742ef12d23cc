// Issue 18, decode: (1) every pointer BatchDecodeWrapper receives is validated against the widest
// access its kernel makes (docs/design.md, "Validation: pointer alignment and empty steps"): a
// misaligned one throws weft::Error naming it, nothing is written, the CUDA context stays clean,
// and the next valid call on the same context matches the float64 reference; (2) an empty step
// (batch 0, size-0 null index arrays) is accepted eagerly and under CUDA-graph replay, in both
// directions of a re-plan.
// Tests named *Small* belong to the compute-sanitizer subset.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "reference/attention.h"
#include "tests/common/gpu_util.h"
#include "tests/common/test_util.h"
#include "weft/decode.h"
#include "weft/error.h"

namespace weft {
namespace {

using test::DeviceBuffer;
using test::Rng;
using test::thrown_argument;

constexpr std::size_t kSlack = 256;  // bytes past every buffer: shifted or strided views stay inside

template <class T>
T* shifted(T* p, int bytes) {
  return reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(p) + bytes);
}

bool all_ff(const DeviceBuffer& b) {
  const std::vector<uint8_t> v = b.to_vector<uint8_t>(b.bytes());
  return std::all_of(v.begin(), v.end(), [](uint8_t x) { return x == 0xFF; });
}

// Fixed device buffers for up to max_batch requests and `pool_pages` pages (what a serving loop
// keeps for its life), plus the host data of the step currently loaded into them.
struct Decode {
  int32_t hq = 8, hkv = 2, d = 128, page_size = 16;
  DType dtype = DType::kBFloat16;
  int32_t max_batch;
  int64_t pool_pages;
  DeviceBuffer dk, dv, dq, dout, dlse, d_indptr, d_indices, d_last;
  // The loaded step.
  std::vector<int32_t> lens, indptr, indices, last;
  std::vector<float> k, v, q;
  ref::Result exact;
  test::Tolerance tol_o{};

  Decode(int32_t max_batch_, int64_t pool_pages_) : max_batch(max_batch_), pool_pages(pool_pages_) {
    const std::size_t pool = std::size_t(pool_pages) * page_size * hkv * d * 2;
    dk = DeviceBuffer(pool + kSlack);
    dv = DeviceBuffer(pool + kSlack);
    dq = DeviceBuffer(std::size_t(max_batch) * hq * d * 2 + kSlack);
    dout = DeviceBuffer(std::size_t(max_batch) * hq * d * 2 + kSlack);
    dlse = DeviceBuffer(std::size_t(max_batch) * hq * 4 + kSlack);
    d_indptr = DeviceBuffer((max_batch + 1) * 4 + kSlack);
    d_indices = DeviceBuffer(std::size_t(pool_pages) * 4 + kSlack);
    d_last = DeviceBuffer(std::size_t(max_batch) * 4 + kSlack);
  }
  int32_t batch() const { return static_cast<int32_t>(lens.size()); }

  // Fresh random K/V/Q for `lens` (pages drawn from a shuffled pool), uploaded into the fixed
  // buffers, and the float64 reference of that step.
  void load(const std::vector<int32_t>& lens_, Rng& rng) {
    lens = lens_;
    const int64_t b = batch();
    ASSERT_LE(b, max_batch);
    indptr.assign(b + 1, 0);
    last.clear();
    for (int64_t i = 0; i < b; ++i) {
      const int64_t pages = (lens[i] + page_size - 1) / page_size;
      indptr[i + 1] = static_cast<int32_t>(indptr[i] + pages);
      last.push_back(lens[i] == 0 ? 0 : static_cast<int32_t>(lens[i] - (pages - 1) * page_size));
    }
    ASSERT_LE(indptr[b], pool_pages);
    std::vector<int32_t> perm(pool_pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng.engine());
    indices.assign(perm.begin(), perm.begin() + indptr[b]);
    const std::size_t pool = std::size_t(pool_pages) * page_size * hkv * d;
    k = rng.uniform_vec(pool, -1, 1);
    v = rng.uniform_vec(pool, -1, 1);
    q = rng.uniform_vec(std::max<std::size_t>(1, std::size_t(b) * hq * d), -2, 2);
    test::round_inplace(dtype, k);
    test::round_inplace(dtype, v);
    test::round_inplace(dtype, q);
    dk.upload(test::to_half_bits(dtype, k).data(), pool * 2);
    dv.upload(test::to_half_bits(dtype, v).data(), pool * 2);
    dq.upload(test::to_half_bits(dtype, q).data(), std::size_t(b) * hq * d * 2);
    d_indptr.upload(indptr.data(), indptr.size() * 4);
    d_indices.upload(indices.data(), indices.size() * 4);
    d_last.upload(last.data(), last.size() * 4);
    if (b == 0) return;
    ref::RaggedQ rq{q.data(), hq, d, ref::iota_indptr(b)};
    const ref::PagedKV rkv = ref_kv();
    exact = ref::attention(rq, rkv, ref::Options{});
    const ref::Result low = ref::attention_low_precision(rq, rkv, ref::Options{}, dtype, /*round_p=*/true);
    tol_o = test::tolerance_from_baseline(test::compare(ref::to_float(low.o), exact.o), 4.0, 1e-5, 2e-3);
  }
  ref::PagedKV ref_kv() const {
    ref::PagedKV r;
    r.k_pages = k.data();
    r.v_pages = v.data();
    r.num_pages = pool_pages;
    r.page_size = page_size;
    r.num_kv_heads = hkv;
    r.head_dim = d;
    r.indptr = indptr;
    r.indices = indices;
    r.last_page_len = last;
    return r;
  }

  // Views of the loaded step over the fixed buffers (batch 0: [0, ...] views, real pointers).
  TensorView q_view() const { return TensorView(dq.get(), dtype, {batch(), hq, d}); }
  TensorView out_view() const { return TensorView(dout.get(), dtype, {batch(), hq, d}); }
  TensorView lse_view() const { return TensorView(dlse.get(), DType::kFloat32, {batch(), hq}); }
  PagedKVCache cache() const {
    PagedKVCache c;
    c.k_pages = TensorView(dk.get(), dtype, {pool_pages, page_size, hkv, d});
    c.v_pages = TensorView(dv.get(), dtype, {pool_pages, page_size, hkv, d});
    c.layout = KVLayout::kNHD;
    return c;
  }
  PageTable table() const {
    PageTable t;
    t.batch_size = batch();
    t.indptr = {d_indptr.as<int32_t>(), indptr.data(), int64_t(indptr.size())};
    t.indices = {d_indices.as<int32_t>(), indices.data(), int64_t(indices.size())};
    t.last_page_len = {d_last.as<int32_t>(), last.data(), int64_t(last.size())};
    return t;
  }

  void plan(BatchDecodeWrapper& w, DeviceBuffer& ws, cudaStream_t s = nullptr) const {
    w.plan(table(), hq, hkv, d, page_size, dtype, KVLayout::kNHD, AttentionVariant{}, ws.get(), ws.bytes(), s);
  }
  void run(BatchDecodeWrapper& w, cudaStream_t s = nullptr) const {
    const TensorView l = lse_view();
    w.run(q_view(), cache(), table(), out_view(), &l, s);
  }
  void poison(cudaStream_t s = nullptr) {
    dout.poison(s);
    dlse.poison(s);
  }
  // The whole output buffers (not just the loaded batch's rows) still hold the poison.
  bool untouched() const { return all_ff(dout) && all_ff(dlse); }
  // Outputs of the loaded step against the float64 reference.
  void check(const std::string& what) const {
    const int64_t n = int64_t(batch()) * hq;
    const std::vector<float> o = test::from_half_bits(dtype, dout.to_vector<uint16_t>(n * d));
    const test::Comparison co = test::compare(o, exact.o);
    EXPECT_TRUE(test::within(co, tol_o)) << what << ": O " << co.summary();
    const test::Comparison cl = test::compare(dlse.to_vector<float>(n), exact.lse);
    EXPECT_TRUE(test::within(cl, test::Tolerance{1e-5, 2e-3})) << what << ": LSE " << cl.summary();
  }
};

DeviceBuffer workspace_for(const Decode& t) {
  return DeviceBuffer(BatchDecodeWrapper::workspace_size(t.max_batch, t.hq, t.hkv, t.d) + 256);
}

const DecodePath kPaths[] = {DecodePath::kTensorCore, DecodePath::kCudaCore};

// A rejected call: weft::Error naming `arg`, outputs untouched, no CUDA error (the context is
// intact), and then a valid plan + run on the same wrapper and context matches the reference.
void expect_rejected(Decode& t, BatchDecodeWrapper& w, DeviceBuffer& ws, const std::string& arg,
                     const std::function<void()>& bad) {
  SCOPED_TRACE("argument " + arg);
  t.poison();
  WEFT_TEST_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ(thrown_argument(bad), arg);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_TRUE(t.untouched()) << "a rejected call wrote its outputs";
  t.plan(w, ws);
  t.run(w);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "the context must survive the rejected call";
  t.check("valid call after the rejected one");
}

TEST(DecodeHardeningSmall, MisalignedPointersAndStridesAreRejected) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  for (DecodePath path : kPaths) {
    if (!decode_path_available(path)) continue;
    SCOPED_TRACE(decode_path_name(path));
    Decode t(6, 80);
    t.load({37, 0, 700, 5, 130, 1}, rng);
    DeviceBuffer ws = workspace_for(t);
    BatchDecodeWrapper w(t.max_batch, t.hq, t.hkv, t.d, path);
    t.plan(w, ws);
    const TensorView q = t.q_view(), out = t.out_view(), lse = t.lse_view();
    const PagedKVCache cache = t.cache();
    const PageTable table = t.table();
    const int64_t B = t.batch(), H = t.hq, D = t.d;
    auto run = [&](const TensorView& q_, const PagedKVCache& c_, const PageTable& t_, const TensorView& o_,
                   const TensorView& l_) { return [&, q_, c_, t_, o_, l_] { w.run(q_, c_, t_, o_, &l_, nullptr); }; };

    // Q: 16-byte cp.async per row chunk. Base, token stride and head stride.
    TensorView bad = q;
    bad.data = shifted(q.data, 8);
    expect_rejected(t, w, ws, "q", run(bad, cache, table, out, lse));
    expect_rejected(t, w, ws, "q", run(TensorView(q.data, t.dtype, {B, H, D}, {H * D + 4, D, 1}), cache, table, out, lse));
    expect_rejected(t, w, ws, "q", run(TensorView(q.data, t.dtype, {B, H, D}, {H * (D + 8), D + 4, 1}), cache, table, out, lse));
    // O: 16-byte stores (8-byte in the in-kernel merge).
    bad = out;
    bad.data = shifted(out.data, 8);
    expect_rejected(t, w, ws, "out", run(q, cache, table, bad, lse));
    expect_rejected(t, w, ws, "out", run(q, cache, table, TensorView(out.data, t.dtype, {B, H, D}, {H * D + 4, D, 1}), lse));
    // LSE: one float store per row (the fault: +2 bytes passed validation before).
    for (int off : {1, 2, 3}) {
      bad = lse;
      bad.data = shifted(lse.data, off);
      expect_rejected(t, w, ws, "lse", run(q, cache, table, out, bad));
    }
    // Pools: 16-byte cp.async per row. Base of each pool, and a slot stride that misaligns slot 1.
    PagedKVCache c = cache;
    c.k_pages.data = shifted(cache.k_pages.data, 8);
    expect_rejected(t, w, ws, "k_pages", run(q, c, table, out, lse));
    c = cache;
    c.v_pages.data = shifted(cache.v_pages.data, 4);
    expect_rejected(t, w, ws, "v_pages", run(q, c, table, out, lse));
    c = cache;
    c.k_pages.strides = {t.page_size * (t.hkv * D + 8), t.hkv * D + 4, D, 1};
    expect_rejected(t, w, ws, "k_pages", run(q, c, table, out, lse));
    // Page table device copies: int32 loads.
    PageTable tb = table;
    tb.indptr.device = shifted(table.indptr.device, 2);
    expect_rejected(t, w, ws, "kv_indptr", run(q, cache, tb, out, lse));
    tb = table;
    tb.indices.device = shifted(table.indices.device, 2);
    expect_rejected(t, w, ws, "kv_indices", run(q, cache, tb, out, lse));
    tb = table;
    tb.last_page_len.device = shifted(table.last_page_len.device, 2);
    expect_rejected(t, w, ws, "kv_last_page_len", run(q, cache, tb, out, lse));
    // Workspace: the plan layout assumes 256-byte alignment (int4 plan records, float4 partials).
    expect_rejected(t, w, ws, "workspace", [&] {
      w.plan(t.table(), t.hq, t.hkv, t.d, t.page_size, t.dtype, KVLayout::kNHD, AttentionVariant{},
             shifted(ws.get(), 128), ws.bytes() - 128, nullptr);
    });
  }
}

// The views of an empty step without any storage: every pointer null.
struct NullStep {
  TensorView q, out, lse;
  PageTable table;  // batch 0, {nullptr, nullptr, 0} everywhere
  NullStep(const Decode& t)
      : q(nullptr, t.dtype, {0, t.hq, t.d}), out(nullptr, t.dtype, {0, t.hq, t.d}),
        lse(nullptr, DType::kFloat32, {0, t.hq}) {}
};

TEST(DecodeHardeningSmall, EmptyStepEager) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  for (DecodePath path : kPaths) {
    if (!decode_path_available(path)) continue;
    SCOPED_TRACE(decode_path_name(path));
    Decode t(4, 200);
    DeviceBuffer ws = workspace_for(t);
    BatchDecodeWrapper w(t.max_batch, t.hq, t.hkv, t.d, path);
    t.poison();
    // (a) No storage at all: null views, null size-0 arrays (the rejected call), also
    // with return_lse (lse given, empty) and with empty pools.
    const NullStep n(t);
    AttentionVariant var;
    var.return_lse = true;
    EXPECT_EQ(thrown_argument([&] {
                w.plan(n.table, t.hq, t.hkv, t.d, t.page_size, t.dtype, KVLayout::kNHD, var, ws.get(), ws.bytes(), nullptr);
              }),
              "<no throw>");
    EXPECT_EQ(w.plan_info().batch, 0);
    EXPECT_EQ(w.plan_info().num_items, 0);
    EXPECT_EQ(thrown_argument([&] { w.run(n.q, t.cache(), n.table, n.out, &n.lse, nullptr); }), "<no throw>");
    PagedKVCache empty_pools;
    empty_pools.k_pages = TensorView(nullptr, t.dtype, {0, t.page_size, t.hkv, t.d});
    empty_pools.v_pages = TensorView(nullptr, t.dtype, {0, t.page_size, t.hkv, t.d});
    EXPECT_EQ(thrown_argument([&] { w.run(n.q, empty_pools, n.table, n.out, &n.lse, nullptr); }), "<no throw>");
    EXPECT_EQ(thrown_argument([&] {
                w.plan_lengths(nullptr, 0, t.hq, t.hkv, t.d, t.page_size, t.dtype, KVLayout::kNHD, AttentionVariant{},
                               ws.get(), ws.bytes(), nullptr);
              }),
              "<no throw>");
    EXPECT_EQ(thrown_argument([&] { w.run(n.q, t.cache(), n.table, n.out, nullptr, nullptr); }), "<no throw>");
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    // (b) Real buffers, indptr {0} with its device copy: the fixed grid is launched and finds
    // no work; nothing is written anywhere in the buffers.
    t.load({}, rng);
    t.plan(w, ws);
    t.run(w);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_TRUE(t.untouched()) << "a batch-0 run wrote into its outputs";
    // (c) The same wrapper and context then serve a real step.
    t.load({300, 0, 17, 2500}, rng);
    t.plan(w, ws);
    t.poison();
    t.run(w);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    t.check("after empty steps");
  }
}

size_t graph_nodes(cudaGraph_t g) {
  size_t n = 0;
  EXPECT_EQ(cudaGraphGetNodes(g, nullptr, &n), cudaSuccess);
  return n;
}

// Capture run() at batch N; re-plan to batch 0 and replay: nothing written. Re-plan to another
// batch and replay: correct again.
TEST(DecodeHardening, GraphCapturedAtBatchNReplaysAnEmptyStep) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  for (DecodePath path : kPaths) {
    if (!decode_path_available(path)) continue;
    SCOPED_TRACE(decode_path_name(path));
    Decode t(8, 800);
    DeviceBuffer ws = workspace_for(t);
    BatchDecodeWrapper w(t.max_batch, t.hq, t.hkv, t.d, path);
    cudaStream_t s;
    WEFT_TEST_CUDA(cudaStreamCreate(&s));
    t.load({100, 3000, 0, 7, 900}, rng);
    t.plan(w, ws, s);
    cudaGraph_t g;
    WEFT_TEST_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    t.run(w, s);
    WEFT_TEST_CUDA(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t exec;
    WEFT_TEST_CUDA(cudaGraphInstantiate(&exec, g, 0));
    t.poison(s);
    WEFT_TEST_CUDA(cudaGraphLaunch(exec, s));
    WEFT_TEST_CUDA(cudaStreamSynchronize(s));
    t.check("captured step");
    // Empty step: both forms of its page table (indptr {0}, and no arrays at all).
    for (int form = 0; form < 2; ++form) {
      t.load({}, rng);
      if (form == 0) {
        t.plan(w, ws, s);
      } else {
        w.plan(PageTable{}, t.hq, t.hkv, t.d, t.page_size, t.dtype, KVLayout::kNHD, AttentionVariant{}, ws.get(),
               ws.bytes(), s);
      }
      t.poison(s);
      WEFT_TEST_CUDA(cudaGraphLaunch(exec, s));
      WEFT_TEST_CUDA(cudaStreamSynchronize(s));
      EXPECT_TRUE(t.untouched()) << "replay of an empty step wrote outputs (form " << form << ")";
    }
    t.load({5000, 1, 64, 65, 0, 200, 33, 8}, rng);
    t.plan(w, ws, s);
    t.poison(s);
    WEFT_TEST_CUDA(cudaGraphLaunch(exec, s));
    WEFT_TEST_CUDA(cudaStreamSynchronize(s));
    t.check("after the empty step");
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
    cudaStreamDestroy(s);
  }
}

// Capture run() at batch 0 with the real buffers: the kernel is recorded (one node); replayed it
// writes nothing; after a re-plan to batch N with the same buffers it computes that batch.
// Captured with null views instead, nothing is recorded (a later replay could not dereference
// null), and the call is still accepted.
TEST(DecodeHardening, GraphCapturedAtBatchZeroReplaysALaterBatch) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  for (DecodePath path : kPaths) {
    if (!decode_path_available(path)) continue;
    SCOPED_TRACE(decode_path_name(path));
    Decode t(8, 800);
    DeviceBuffer ws = workspace_for(t);
    BatchDecodeWrapper w(t.max_batch, t.hq, t.hkv, t.d, path);
    cudaStream_t s;
    WEFT_TEST_CUDA(cudaStreamCreate(&s));
    t.load({}, rng);
    t.plan(w, ws, s);
    cudaGraph_t g;
    WEFT_TEST_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    t.run(w, s);
    WEFT_TEST_CUDA(cudaStreamEndCapture(s, &g));
    EXPECT_EQ(graph_nodes(g), 1u) << "batch 0 with real buffers must record the fixed-grid kernel";
    cudaGraphExec_t exec;
    WEFT_TEST_CUDA(cudaGraphInstantiate(&exec, g, 0));
    t.poison(s);
    WEFT_TEST_CUDA(cudaGraphLaunch(exec, s));
    WEFT_TEST_CUDA(cudaStreamSynchronize(s));
    EXPECT_TRUE(t.untouched());
    for (const std::vector<int32_t>& lens : {std::vector<int32_t>{40, 0, 1200}, std::vector<int32_t>{9000, 3, 77, 512, 1, 0, 64, 2}}) {
      t.load(lens, rng);
      t.plan(w, ws, s);
      t.poison(s);
      WEFT_TEST_CUDA(cudaGraphLaunch(exec, s));
      WEFT_TEST_CUDA(cudaStreamSynchronize(s));
      t.check("replay of a batch-0 capture after a re-plan to batch " + std::to_string(lens.size()));
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);

    // Null views: accepted, nothing recorded.
    const NullStep n(t);
    w.plan(n.table, t.hq, t.hkv, t.d, t.page_size, t.dtype, KVLayout::kNHD, AttentionVariant{}, ws.get(), ws.bytes(), s);
    WEFT_TEST_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    const std::string thrown = thrown_argument([&] { w.run(n.q, t.cache(), n.table, n.out, &n.lse, s); });
    WEFT_TEST_CUDA(cudaStreamEndCapture(s, &g));
    EXPECT_EQ(thrown, "<no throw>");
    EXPECT_EQ(graph_nodes(g), 0u) << "a batch-0 run with null views must launch nothing";
    cudaGraphDestroy(g);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    cudaStreamDestroy(s);
  }
}

}  // namespace
}  // namespace weft
