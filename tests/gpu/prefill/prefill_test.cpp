// Batch prefill vs the float64 reference. PrefillSmall.* is the fast subset (compute-sanitizer);
// Prefill.* adds long sequences and sweeps. Every run poisons O and LSE with NaN first.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "attention/heuristics.h"
#include "prefill_case.h"

namespace weft::test::prefill {
namespace {

AttentionVariant causal() {
  AttentionVariant v;
  v.mask = MaskMode::kCausal;
  v.return_lse = true;
  return v;
}

TEST(PrefillSmall, CausalPagedNHD) {
  WEFT_REQUIRE_GPU();
  Case c;
  c.q_lens = {1, 17, 33, 70};
  c.kv_lens = {1, 40, 33, 151};
  c.num_qo_heads = 8;
  c.num_kv_heads = 2;
  c.variant = causal();
  run_and_check(c);
}

TEST(PrefillSmall, NonCausalRaggedF16) {
  WEFT_REQUIRE_GPU();
  Case c;
  c.q_lens = {5, 64, 100};
  c.kv_lens = {77, 64, 129};
  c.num_qo_heads = 4;
  c.num_kv_heads = 4;
  c.head_dim = 64;
  c.dtype = DType::kFloat16;
  c.paged = false;
  run_and_check(c);
}

TEST(PrefillSmall, HeadDimsDtypesLayouts) {
  WEFT_REQUIRE_GPU();
  int i = 0;
  for (int d : {64, 128, 256}) {
    for (DType dt : {DType::kFloat16, DType::kBFloat16}) {
      Case c;
      c.q_lens = {3, 45};
      c.kv_lens = {50, 45 + 19};
      c.num_qo_heads = 4;
      c.num_kv_heads = 2;
      c.head_dim = d;
      c.dtype = dt;
      c.paged = i % 3 != 2;
      c.page_size = i % 2 ? 1 : 16;
      c.layout = i % 4 < 2 ? KVLayout::kNHD : KVLayout::kHND;
      c.variant = i % 2 ? causal() : AttentionVariant{};
      run_and_check(c, i++);
    }
  }
}

TEST(PrefillSmall, EmptyAndTinyRequests) {
  WEFT_REQUIRE_GPU();
  for (bool paged : {true, false}) {
    Case c;
    c.q_lens = {0, 1, 3, 1, 2, 0};
    c.kv_lens = {5, 0, 0, 1, 2, 0};  // kv_len 0 with queries: O = 0, LSE = -inf
    c.num_qo_heads = 4;
    c.num_kv_heads = 1;
    c.paged = paged;
    c.page_size = 1;
    c.variant = causal();
    run_and_check(c, paged);
  }
}

TEST(PrefillSmall, WindowSoftcapCustom) {
  WEFT_REQUIRE_GPU();
  {
    Case c;  // sliding window, causal
    c.q_lens = {90, 7};
    c.kv_lens = {200, 300};
    c.variant = causal();
    c.variant.window_left = 37;
    run_and_check(c, 1);
  }
  {
    Case c;  // soft-cap, non-causal, HND
    c.q_lens = {33, 65};
    c.kv_lens = {99, 65};
    c.layout = KVLayout::kHND;
    c.variant.logits_soft_cap = 5.f;
    c.variant.sm_scale = 0.3;
    run_and_check(c, 2);
  }
  {
    Case c;  // custom mask with fully masked rows (every 3rd query of request 0)
    c.q_lens = {20, 41};
    c.kv_lens = {60, 41};
    c.num_qo_heads = 6;
    c.num_kv_heads = 2;
    c.variant.mask = MaskMode::kCustom;
    c.fully_masked_rows = true;
    c.custom_density = 0.3;
    run_and_check(c, 3);
  }
  {
    Case c;  // window without causal on ragged K/V
    c.q_lens = {50};
    c.kv_lens = {180};
    c.paged = false;
    c.variant.window_left = 20;
    run_and_check(c, 4);
  }
}

TEST(PrefillSmall, SplitKVChunk) {
  WEFT_REQUIRE_GPU();
  Case c;  // one short chunk against long history: tiles < CTAs, so KV is split and merged
  c.q_lens = {37};
  c.kv_lens = {3000};
  c.variant = causal();
  Prepared p;
  prepare(p, c);
  BatchPrefillWrapper w;
  plan_and_run(w, p);
  WEFT_TEST_CUDA(cudaDeviceSynchronize());
  EXPECT_TRUE(w.plan_info().split) << "expected a split-KV plan";
  EXPECT_GT(w.plan_info().num_merges, 0);
  check_against_reference(p);
}

TEST(PrefillSmall, DeterministicRepeatedRuns) {
  WEFT_REQUIRE_GPU();
  Case c;
  c.q_lens = {100, 9};
  c.kv_lens = {2500, 700};
  c.variant = causal();
  Prepared p;
  prepare(p, c);
  BatchPrefillWrapper w;
  plan_and_run(w, p);
  WEFT_TEST_CUDA(cudaDeviceSynchronize());
  const auto o1 = download_out(p);
  const auto l1 = download_lse(p);
  for (int rep = 0; rep < 3; ++rep) {
    p.d_out.poison();
    p.d_lse.poison();
    run_only(w, p);
    WEFT_TEST_CUDA(cudaDeviceSynchronize());
    EXPECT_EQ(download_out(p), o1) << "run " << rep;
    const auto l2 = download_lse(p);
    EXPECT_EQ(0, std::memcmp(l2.data(), l1.data(), l1.size() * 4)) << "run " << rep;
  }
}

TEST(PrefillSmall, GraphReplayAfterReplan) {
  WEFT_REQUIRE_GPU();
  // Two generation steps with different lengths but equal totals, so step 2's inputs can be
  // copied into the buffers whose pointers the graph captured. Ragged K/V (same total rows).
  Case c;
  c.q_lens = {40, 23};
  c.kv_lens = {300, 500};
  c.paged = false;
  c.variant = causal();
  c.opt.cta_q = 64;  // graph users pin the tile configuration
  Prepared p;
  prepare(p, c);
  cudaStream_t s;
  WEFT_TEST_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  BatchPrefillWrapper w;
  plan_only(w, p, s);
  cudaGraph_t g;
  WEFT_TEST_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  run_only(w, p, s);
  WEFT_TEST_CUDA(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t ge;
  WEFT_TEST_CUDA(cudaGraphInstantiate(&ge, g, 0));
  p.d_out.poison(s);
  p.d_lse.poison(s);
  WEFT_TEST_CUDA(cudaGraphLaunch(ge, s));
  WEFT_TEST_CUDA(cudaStreamSynchronize(s));
  check_against_reference(p);

  Case c2 = c;
  c2.q_lens = {50, 13};
  c2.kv_lens = {650, 150};
  Prepared p2;
  prepare(p2, c2, 7);
  auto copy = [&](const DeviceBuffer& dst, const DeviceBuffer& src) {
    ASSERT_EQ(dst.bytes(), src.bytes());
    WEFT_TEST_CUDA(cudaMemcpyAsync(dst.get(), src.get(), src.bytes(), cudaMemcpyDeviceToDevice, s));
  };
  copy(p.d_q, p2.d_q);
  copy(p.d_k, p2.d_k);
  copy(p.d_v, p2.d_v);
  copy(p.d_kv_indptr, p2.d_kv_indptr);
  p2.d_ws = std::move(p.d_ws);  // plan step 2 into the captured workspace
  p2.ws_bytes = p.ws_bytes;
  p2.bounds = p.bounds;
  plan_only(w, p2, s);
  EXPECT_EQ(w.plan_info().cta_q, 64);
  p.d_out.poison(s);
  p.d_lse.poison(s);
  WEFT_TEST_CUDA(cudaGraphLaunch(ge, s));
  copy(p2.d_out, p.d_out);
  copy(p2.d_lse, p.d_lse);
  WEFT_TEST_CUDA(cudaStreamSynchronize(s));
  check_against_reference(p2);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
}

// plan() called back to back while the stream lags far behind (a long memset ahead of it): the
// wrapper's staging ring (attention/staging_ring.h, heuristics::plan_staging_slots slots for a small
// plan) lets the first S plans write a slot each without waiting for a copy queued behind the
// memset, and only plan S + 1 waits (for the oldest copy, so the memset has then finished). Then
// every plan + run, back to back and with one sync per step, against the reference: each run must
// see its own plan. One layout for all (common bounds, cta_q 64), each case its own workspace.
TEST(PrefillSmall, BackToBackPlansOnABusyStream) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  const int kSteps = 7;
  std::vector<std::unique_ptr<Prepared>> ps;
  PrefillBounds bounds{};
  for (int i = 0; i < kSteps; ++i) {
    Case c;
    const int n = 1 + int(rng.randint(0, 4));
    for (int b = 0; b < n; ++b) {
      c.q_lens.push_back(int32_t(rng.randint(1, 90)));
      c.kv_lens.push_back(c.q_lens.back() + int32_t(rng.randint(0, i % 3 == 0 ? 3000 : 400)));
    }
    c.variant = causal();
    c.opt.cta_q = 64;
    ps.push_back(std::make_unique<Prepared>());
    prepare(*ps.back(), c, uint64_t(i));
    bounds.max_batch = std::max(bounds.max_batch, ps.back()->bounds.max_batch);
    bounds.max_total_q = std::max(bounds.max_total_q, ps.back()->bounds.max_total_q);
    bounds.num_qo_heads = c.num_qo_heads;
    bounds.num_kv_heads = c.num_kv_heads;
    bounds.head_dim = c.head_dim;
  }
  for (auto& p : ps) {  // one layout: the ring's slots are not re-made between plans
    p->bounds = bounds;
    p->ws_bytes = BatchPrefillWrapper::workspace_size(bounds);
    p->d_ws = DeviceBuffer(p->ws_bytes);
  }
  cudaStream_t s;
  WEFT_TEST_CUDA(cudaStreamCreate(&s));
  cudaEvent_t memset_done;
  WEFT_TEST_CUDA(cudaEventCreateWithFlags(&memset_done, cudaEventDisableTiming));
  const std::size_t kBusy = std::size_t(4) << 30;  // ~1.5 ms of memset on an H100
  DeviceBuffer busy(kBusy);
  BatchPrefillWrapper w;
  plan_only(w, *ps[0], s);  // warm: the ring, the grid and the kernel choice are set up
  WEFT_TEST_CUDA(cudaStreamSynchronize(s));
  const int S = heuristics::plan_staging_slots(0);
  ASSERT_LT(S, kSteps);
  WEFT_TEST_CUDA(cudaMemsetAsync(busy.get(), 0, kBusy, s));
  WEFT_TEST_CUDA(cudaEventRecord(memset_done, s));
  for (int i = 0; i < S; ++i) plan_only(w, *ps[std::size_t(i)], s);
  EXPECT_EQ(cudaEventQuery(memset_done), cudaErrorNotReady) << S << " plans waited for a copy behind the memset";
  (void)cudaGetLastError();
  plan_only(w, *ps[std::size_t(S)], s);  // every slot's copy queued: waits for the oldest
  EXPECT_EQ(cudaEventQuery(memset_done), cudaSuccess) << "plan " << S + 1 << " wrote a slot whose copy was queued";
  WEFT_TEST_CUDA(cudaStreamSynchronize(s));
  for (int sync_each : {0, 1}) {
    SCOPED_TRACE(sync_each ? "a sync after each step" : "back to back");
    for (auto& p : ps) {
      p->d_out.poison(s);
      p->d_lse.poison(s);
    }
    WEFT_TEST_CUDA(cudaMemsetAsync(busy.get(), 0, kBusy, s));
    for (auto& p : ps) {
      plan_only(w, *p, s);
      run_only(w, *p, s);
      if (sync_each) WEFT_TEST_CUDA(cudaStreamSynchronize(s));
    }
    WEFT_TEST_CUDA(cudaStreamSynchronize(s));
    for (auto& p : ps) check_against_reference(*p);
  }
  cudaEventDestroy(memset_done);
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace weft::test::prefill
