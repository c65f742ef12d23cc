// Issue 18, prefill: (1) every pointer run_paged / run_ragged / plan_* receive is validated against
// the widest access of the kernels (docs/design.md, "Validation: pointer alignment and empty
// steps"): a misaligned one throws weft::Error naming it, nothing is written, the context stays
// clean and the next valid call matches the float64 reference; byte-granular mask bits need no
// alignment and are accepted at any address; (2) an empty step (batch 0, size-0 null arrays) is
// accepted eagerly and under CUDA-graph replay, in both directions of a re-plan.
// Tests named *Small* belong to the compute-sanitizer subset.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "prefill_case.h"
#include "weft/error.h"

namespace weft::test::prefill {
namespace {

using weft::test::thrown_argument;

template <class T>
T* shifted(T* p, int bytes) {
  return reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(p) + bytes);
}

bool all_ff(const DeviceBuffer& b) {
  const std::vector<uint8_t> v = b.to_vector<uint8_t>(b.bytes());
  return std::all_of(v.begin(), v.end(), [](uint8_t x) { return x == 0xFF; });
}
bool untouched(const Prepared& p) { return all_ff(p.d_out) && all_ff(p.d_lse); }

Case hardening_case(bool paged, MaskMode mask) {
  Case c;
  c.q_lens = {5, 40, 1, 0};
  c.kv_lens = {20, 300, 64, 9};
  c.num_qo_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 128;
  c.paged = paged;
  c.variant.mask = mask;
  return c;
}

// A rejected call: weft::Error naming `arg`, outputs untouched, no CUDA error, and then a valid
// plan + run on the same wrapper and context matches the reference.
void expect_rejected(Prepared& p, BatchPrefillWrapper& w, const std::string& arg, const std::function<void()>& bad) {
  SCOPED_TRACE("argument " + arg);
  p.d_out.poison();
  p.d_lse.poison();
  WEFT_TEST_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ(thrown_argument(bad), arg);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_TRUE(untouched(p)) << "a rejected call wrote its outputs";
  plan_and_run(w, p);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "the context must survive the rejected call";
  check_against_reference(p);
}

TEST(PrefillHardeningSmall, MisalignedPointersPaged) {
  WEFT_REQUIRE_GPU();
  Prepared p;
  prepare(p, hardening_case(true, MaskMode::kCustom));
  BatchPrefillWrapper w;
  plan_only(w, p);
  const TensorView q = p.q_view(), out = p.out_view(), lse = p.lse_view();
  const PagedKVCache cache = p.cache();
  const PageTable table = p.table();
  const CustomMaskDevice mask = p.mask();
  const int64_t T = p.total_q, H = p.c.num_qo_heads, D = p.c.head_dim;
  auto run = [&](TensorView q_, PagedKVCache c_, PageTable t_, TensorView o_, TensorView l_, CustomMaskDevice m_) {
    return [&w, q_, c_, t_, o_, l_, m_] { w.run_paged(q_, c_, t_, o_, &l_, nullptr, &m_); };
  };
  // Q: 16-byte cp.async per row chunk.
  TensorView bad = q;
  bad.data = shifted(q.data, 8);
  expect_rejected(p, w, "q", run(bad, cache, table, out, lse, mask));
  expect_rejected(p, w, "q", run(TensorView(q.data, p.c.dtype, {T, H, D}, {H * D + 4, D, 1}), cache, table, out, lse, mask));
  // O: 4-byte stores by the kernel, 8-byte by the merge; rows are checked at 16 like Q.
  bad = out;
  bad.data = shifted(out.data, 8);
  expect_rejected(p, w, "out", run(q, cache, table, bad, lse, mask));
  expect_rejected(p, w, "out", run(q, cache, table, TensorView(out.data, p.c.dtype, {T, H, D}, {H * (D + 8), D + 4, 1}), lse, mask));
  // LSE: float stores.
  for (int off : {1, 2}) {
    bad = lse;
    bad.data = shifted(lse.data, off);
    expect_rejected(p, w, "lse", run(q, cache, table, out, bad, mask));
  }
  // Pools: 16-byte cp.async per row.
  PagedKVCache c = cache;
  c.k_pages.data = shifted(cache.k_pages.data, 8);
  expect_rejected(p, w, "k_pages", run(q, c, table, out, lse, mask));
  c = cache;
  c.v_pages.data = shifted(cache.v_pages.data, 2);
  expect_rejected(p, w, "v_pages", run(q, c, table, out, lse, mask));
  c = cache;
  c.v_pages.strides[1] += 4;  // NHD slot stride: slot 1 at +8 bytes
  c.v_pages.strides[0] += 16 * 4;
  expect_rejected(p, w, "v_pages", run(q, c, table, out, lse, mask));
  // Page table and mask indptr device copies: int32 loads.
  PageTable t = table;
  t.indptr.device = shifted(table.indptr.device, 2);
  expect_rejected(p, w, "kv_indptr", run(q, cache, t, out, lse, mask));
  t = table;
  t.indices.device = shifted(table.indices.device, 2);
  expect_rejected(p, w, "kv_indices", run(q, cache, t, out, lse, mask));
  t = table;
  t.last_page_len.device = shifted(table.last_page_len.device, 2);
  expect_rejected(p, w, "kv_last_page_len", run(q, cache, t, out, lse, mask));
  CustomMaskDevice m = mask;
  m.indptr = shifted(mask.indptr, 2);
  expect_rejected(p, w, "mask.indptr", run(q, cache, table, out, lse, m));
  // Workspace: 256-byte aligned plan layout.
  expect_rejected(p, w, "workspace", [&] {
    w.plan_paged(p.qo_indptr.data(), p.table(), p.c.page_size, p.c.num_qo_heads, p.c.num_kv_heads, p.c.head_dim,
                 p.c.dtype, p.c.variant, shifted(p.d_ws.get(), 128), p.ws_bytes - 128, p.bounds, nullptr,
                 p.mask_indptr.data(), p.c.opt);
  });
}

TEST(PrefillHardeningSmall, MisalignedPointersRagged) {
  WEFT_REQUIRE_GPU();
  Prepared p;
  prepare(p, hardening_case(false, MaskMode::kCustom));
  BatchPrefillWrapper w;
  plan_only(w, p);
  const TensorView q = p.q_view(), out = p.out_view(), lse = p.lse_view();
  const int64_t TK = p.total_kv, HK = p.c.num_kv_heads, D = p.c.head_dim;
  const TensorView k(p.d_k.get(), p.c.dtype, {TK, HK, D}), v(p.d_v.get(), p.c.dtype, {TK, HK, D});
  const int32_t* kv_indptr = p.d_kv_indptr.as<int32_t>();
  const CustomMaskDevice mask = p.mask();
  auto run = [&](TensorView k_, TensorView v_, const int32_t* ip, TensorView l_, CustomMaskDevice m_) {
    return [&w, &q, &out, k_, v_, ip, l_, m_] { w.run_ragged(q, k_, v_, ip, out, &l_, nullptr, &m_); };
  };
  TensorView bad = k;
  bad.data = shifted(k.data, 8);
  expect_rejected(p, w, "k", run(bad, v, kv_indptr, lse, mask));
  expect_rejected(p, w, "k", run(TensorView(k.data, p.c.dtype, {TK, HK, D}, {HK * D + 4, D, 1}), v, kv_indptr, lse, mask));
  bad = v;
  bad.data = shifted(v.data, 4);
  expect_rejected(p, w, "v", run(k, bad, kv_indptr, lse, mask));
  expect_rejected(p, w, "v", run(k, TensorView(v.data, p.c.dtype, {TK, HK, D}, {HK * (D + 8), D + 4, 1}), kv_indptr, lse, mask));
  // The ragged kv_indptr is a bare device pointer: int32 loads (unchecked before issue 18).
  expect_rejected(p, w, "kv_indptr", run(k, v, shifted(kv_indptr, 2), lse, mask));
  CustomMaskDevice m = mask;
  m.indptr = shifted(mask.indptr, 2);
  expect_rejected(p, w, "mask.indptr", run(k, v, kv_indptr, lse, m));
  bad = lse;
  bad.data = shifted(lse.data, 2);
  expect_rejected(p, w, "lse", run(k, v, kv_indptr, bad, mask));
}

// Mask bits are read one byte at a time: a bit array at an odd address is valid and gives the
// same result as the aligned one (if a wider load crept in, this would fault or differ).
TEST(PrefillHardeningSmall, MaskBitsAtAnOddAddress) {
  WEFT_REQUIRE_GPU();
  for (bool paged : {true, false}) {
    SCOPED_TRACE(paged ? "paged" : "ragged");
    Prepared p;
    prepare(p, hardening_case(paged, MaskMode::kCustom));
    DeviceBuffer odd(p.mask_bits.size() + 16);
    odd.poison();
    WEFT_TEST_CUDA(cudaMemcpy(odd.as<uint8_t>() + 3, p.mask_bits.data(), p.mask_bits.size(), cudaMemcpyHostToDevice));
    BatchPrefillWrapper w;
    plan_only(w, p);
    p.d_out.poison();
    p.d_lse.poison();
    const CustomMaskDevice m{odd.as<uint8_t>() + 3, p.d_mask_indptr.as<int32_t>()};
    const TensorView lse = p.lse_view();
    if (paged) {
      w.run_paged(p.q_view(), p.cache(), p.table(), p.out_view(), &lse, nullptr, &m);
    } else {
      const TensorView k(p.d_k.get(), p.c.dtype, {p.total_kv, p.c.num_kv_heads, p.c.head_dim});
      const TensorView v(p.d_v.get(), p.c.dtype, {p.total_kv, p.c.num_kv_heads, p.c.head_dim});
      w.run_ragged(p.q_view(), k, v, p.d_kv_indptr.as<int32_t>(), p.out_view(), &lse, nullptr, &m);
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    check_against_reference(p);
  }
}

// Views of an empty step over a prepared case's real buffers (shape 0, real pointers), and the
// same without storage (null pointers).
struct EmptyViews {
  TensorView q, out, lse, k, v;
  std::vector<int32_t> zero{0};
  PageTable table;  // batch 0
  const int32_t* kv_indptr = nullptr;
  EmptyViews(const Prepared& p, bool real) {
    const Case& c = p.c;
    q = TensorView(real ? p.d_q.get() : nullptr, c.dtype, {0, c.num_qo_heads, c.head_dim});
    out = TensorView(real ? p.d_out.get() : nullptr, c.dtype, {0, c.num_qo_heads, c.head_dim});
    lse = TensorView(real ? p.d_lse.get() : nullptr, DType::kFloat32, {0, c.num_qo_heads});
    k = TensorView(real && !c.paged ? p.d_k.get() : nullptr, c.dtype, {0, c.num_kv_heads, c.head_dim});
    v = TensorView(real && !c.paged ? p.d_v.get() : nullptr, c.dtype, {0, c.num_kv_heads, c.head_dim});
    if (real) {
      if (c.paged) {
        table.indptr = {p.d_page_indptr.as<int32_t>(), zero.data(), 1};
        table.indices = {p.d_page_indices.as<int32_t>(), nullptr, 0};
        table.last_page_len = {p.d_last.as<int32_t>(), nullptr, 0};
      } else {
        kv_indptr = p.d_kv_indptr.as<int32_t>();
      }
    }
  }
  const int32_t* qo_host() const { return q.data != nullptr ? zero.data() : nullptr; }
};

void plan_empty(BatchPrefillWrapper& w, const Prepared& p, const EmptyViews& e, cudaStream_t s,
                const PrefillPlanOptions& opt = {}) {
  const Case& c = p.c;
  const int32_t* mi = c.variant.mask == MaskMode::kCustom ? e.qo_host() : nullptr;  // {0} or none
  if (c.paged)
    w.plan_paged(e.qo_host(), e.table, c.page_size, c.num_qo_heads, c.num_kv_heads, c.head_dim, c.dtype, c.variant,
                 p.d_ws.get(), p.ws_bytes, p.bounds, s, mi, opt);
  else
    w.plan_ragged(e.qo_host(), e.qo_host(), 0, c.num_qo_heads, c.num_kv_heads, c.head_dim, c.dtype, c.variant,
                  p.d_ws.get(), p.ws_bytes, p.bounds, s, mi, opt);
}

void run_empty(BatchPrefillWrapper& w, const Prepared& p, const EmptyViews& e, cudaStream_t s,
               const CustomMaskDevice* mask) {
  if (p.c.paged)
    w.run_paged(e.q, p.cache(), e.table, e.out, &e.lse, s, mask);
  else
    w.run_ragged(e.q, e.k, e.v, e.kv_indptr, e.out, &e.lse, s, mask);
}

TEST(PrefillHardeningSmall, EmptyStepEager) {
  WEFT_REQUIRE_GPU();
  for (bool paged : {true, false})
    for (MaskMode mode : {MaskMode::kCausal, MaskMode::kCustom}) {
      SCOPED_TRACE(std::string(paged ? "paged" : "ragged") + (mode == MaskMode::kCustom ? " custom" : " causal"));
      Prepared p;
      prepare(p, hardening_case(paged, mode));
      BatchPrefillWrapper w;
      p.d_out.poison();
      p.d_lse.poison();
      // (a) No storage: null views, null arrays, no mask (planned custom).
      const EmptyViews none(p, false);
      EXPECT_EQ(thrown_argument([&] { plan_empty(w, p, none, nullptr); }), "<no throw>");
      EXPECT_EQ(w.plan_info().num_items, 0);
      EXPECT_EQ(thrown_argument([&] { run_empty(w, p, none, nullptr, nullptr); }), "<no throw>");
      EXPECT_EQ(thrown_argument([&] { w.run_paged(none.q, p.cache(), PageTable{}, none.out, nullptr, nullptr); }),
                paged ? "<no throw>" : "plan");
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(cudaGetLastError(), cudaSuccess);
      // (b) Real buffers, shape 0: the kernels are launched and find no work.
      const EmptyViews real(p, true);
      plan_empty(w, p, real, nullptr);
      const CustomMaskDevice m = p.mask();
      run_empty(w, p, real, nullptr, mode == MaskMode::kCustom ? &m : nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_TRUE(untouched(p)) << "a batch-0 run wrote into its outputs";
      // (c) The same wrapper and context then serve the real step.
      plan_and_run(w, p);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      check_against_reference(p);
    }
}

size_t graph_nodes(cudaGraph_t g) {
  size_t n = 0;
  EXPECT_EQ(cudaGraphGetNodes(g, nullptr, &n), cudaSuccess);
  return n;
}

// Capture at batch N (tile configuration left to the heuristic); re-plan to batch 0: the plan
// keeps N's configuration and the replay writes nothing; re-plan to N: the replay is correct.
TEST(PrefillHardening, GraphCapturedAtBatchNReplaysAnEmptyStep) {
  WEFT_REQUIRE_GPU();
  for (bool paged : {true, false}) {
    SCOPED_TRACE(paged ? "paged" : "ragged");
    Case c = hardening_case(paged, MaskMode::kCausal);
    c.q_lens = {300, 700, 1, 0};  // long queries: the heuristic picks a large query tile
    c.kv_lens = {300, 900, 64, 9};
    Prepared p;
    prepare(p, c);
    BatchPrefillWrapper w;
    cudaStream_t s;
    WEFT_TEST_CUDA(cudaStreamCreate(&s));
    plan_only(w, p, s);
    const PrefillPlanInfo captured = w.plan_info();
    cudaGraph_t g;
    WEFT_TEST_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    run_only(w, p, s);
    WEFT_TEST_CUDA(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t exec;
    WEFT_TEST_CUDA(cudaGraphInstantiate(&exec, g, 0));
    p.d_out.poison(s);
    p.d_lse.poison(s);
    WEFT_TEST_CUDA(cudaGraphLaunch(exec, s));
    WEFT_TEST_CUDA(cudaStreamSynchronize(s));
    check_against_reference(p);
    for (bool real : {true, false}) {
      const EmptyViews e(p, real);
      plan_empty(w, p, e, s);
      EXPECT_EQ(w.plan_info().cta_q, captured.cta_q) << "an empty step must keep the captured tile configuration";
      EXPECT_EQ(w.plan_info().cta_kv, captured.cta_kv);
      p.d_out.poison(s);
      p.d_lse.poison(s);
      WEFT_TEST_CUDA(cudaGraphLaunch(exec, s));
      WEFT_TEST_CUDA(cudaStreamSynchronize(s));
      EXPECT_TRUE(untouched(p)) << "replay of an empty step wrote outputs (real buffers: " << real << ")";
    }
    plan_only(w, p, s);
    p.d_out.poison(s);
    p.d_lse.poison(s);
    WEFT_TEST_CUDA(cudaGraphLaunch(exec, s));
    WEFT_TEST_CUDA(cudaStreamSynchronize(s));
    check_against_reference(p);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
    cudaStreamDestroy(s);
  }
}

// Capture at batch 0 with the real buffers (tile configuration forced, as the prefill graph
// contract asks): the kernels are recorded; the replay writes nothing; after a re-plan to batch N
// with the same buffers the replay computes batch N. With null views nothing is recorded.
void graph_captured_at_batch_zero(int32_t cta_q) {
  for (bool paged : {true, false}) {
    SCOPED_TRACE(std::string(paged ? "paged" : "ragged") + " cta_q " + std::to_string(cta_q));
    Case c = hardening_case(paged, MaskMode::kCausal);
    c.opt.cta_q = cta_q;
    Prepared p;
    prepare(p, c);
    BatchPrefillWrapper w;
    cudaStream_t s;
    WEFT_TEST_CUDA(cudaStreamCreate(&s));
    const EmptyViews e(p, true);
    plan_empty(w, p, e, s, c.opt);
    cudaGraph_t g;
    WEFT_TEST_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    run_empty(w, p, e, s, nullptr);
    WEFT_TEST_CUDA(cudaStreamEndCapture(s, &g));
    EXPECT_GE(graph_nodes(g), 1u) << "batch 0 with real buffers must record the fixed-grid kernels";
    cudaGraphExec_t exec;
    WEFT_TEST_CUDA(cudaGraphInstantiate(&exec, g, 0));
    p.d_out.poison(s);
    p.d_lse.poison(s);
    WEFT_TEST_CUDA(cudaGraphLaunch(exec, s));
    WEFT_TEST_CUDA(cudaStreamSynchronize(s));
    EXPECT_TRUE(untouched(p));
    plan_only(w, p, s);
    ASSERT_EQ(w.plan_info().cta_q, cta_q);
    p.d_out.poison(s);
    p.d_lse.poison(s);
    WEFT_TEST_CUDA(cudaGraphLaunch(exec, s));
    WEFT_TEST_CUDA(cudaStreamSynchronize(s));
    check_against_reference(p);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);

    const EmptyViews none(p, false);
    plan_empty(w, p, none, s, c.opt);
    WEFT_TEST_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    const std::string thrown = thrown_argument([&] { run_empty(w, p, none, s, nullptr); });
    WEFT_TEST_CUDA(cudaStreamEndCapture(s, &g));
    EXPECT_EQ(thrown, "<no throw>");
    EXPECT_EQ(graph_nodes(g), 0u) << "a batch-0 run with null views must launch nothing";
    cudaGraphDestroy(g);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    cudaStreamDestroy(s);
  }
}

// The FA2 kernel (64-row tiles).
TEST(PrefillHardening, GraphCapturedAtBatchZeroReplaysALaterBatch) {
  WEFT_REQUIRE_GPU();
  graph_captured_at_batch_zero(64);
}

// 128-row tiles: on sm_90 this selects the Hopper mainloop where eligible (D128, this case's group
// and page size), whose TMA maps take their extents from the tensors at run() time; the contract
// (same buffers, any later plan) must hold for it as well.
TEST(PrefillHardening, GraphCapturedAtBatchZeroReplaysALaterBatchTile128) {
  WEFT_REQUIRE_GPU();
  graph_captured_at_batch_zero(128);
}

}  // namespace
}  // namespace weft::test::prefill
