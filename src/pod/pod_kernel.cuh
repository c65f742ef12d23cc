// The fused POD kernel (POD-Attention §4): one launch over a fixed grid of G CTAs (the device's
// resident slots). Each CTA binds itself at run time, with the SM-aware scheduler of
// attention/scheduler.cuh, to prefill or decode work and runs it with the standard kernel bodies:
//   prefill: virtual CTA v = work item v of the prefill plan (dealt to ONE list in
//            longest-first order, so claims hand out the heaviest items first), run by
//            prefill_item_range (the FA2 mainloop);
//   decode:  virtual CTA v = item list v of the balanced decode plan, run by decode_items (the
//            tensor-core decode mainloop; split tiles merged in-kernel by their last CTA).
// It claims again after each unit (same op until exhausted, then the other op: switch-over), and
// when both are exhausted counts itself done; the last CTA resets the scheduler's counters.
// Both bodies use the whole CTA (4 warps) and the same dynamic shared memory (the larger of the
// two layouts); claims are broadcast through 4 bytes of static shared memory.
#pragma once
#include "attention/scheduler.cuh"
#include "decode/decode_tc.cuh"
#include "pod/pod_launch.h"
#include "prefill/kernel/prefill_kernel.cuh"

namespace weft::pod {

template <class T>
struct PodParams {
  prefill::PrefillParams pre;
  decode::DecodeParams<T> dec;
  const attn::sched::BindPlan* bind;
  attn::sched::Counters* counters;
};

template <class T, int D>
struct PodTraits {
  static constexpr prefill::TileConfig kTile = prefill_tile(D);
  using Prefill = prefill::PrefillTraits<D, kTile.cta_q, kTile.cta_kv, T>;
  using Mainloop = decode::TcMainloop<T, D, 1, attn::DefaultVariant>;
  static constexpr int kStages = decode_stages(D);
  static constexpr size_t kDecodeSmem = decode::SmemLayout<T, D>::bytes(kStages, kDecodeWarps);
  static constexpr size_t kSmem =
      size_t(Prefill::kSmemBytes) > kDecodeSmem ? size_t(Prefill::kSmemBytes) : kDecodeSmem;
  static_assert(Prefill::kThreads == kThreads, "prefill tile must run 4 warps");
  static_assert(kDecodeSmem <= size_t(Prefill::kSmemBytes), "decode stages must fit the prefill tile's smem");
};

// One side's claim loop: units of `op` until the side is exhausted. s_v: the broadcast slot; the
// barriers around it also separate one unit's shared-memory use from the next's (and from the
// other side's units).
template <class T, int D, int kOp>
__device__ __forceinline__ void run_side(const PodParams<T>& p, int* s_v) {
  using Tr = PodTraits<T, D>;
  for (;;) {
    if (threadIdx.x == 0) *s_v = attn::sched::claim(*p.bind, p.counters, kOp);
    __syncthreads();  // the claim is visible; every thread is done with the previous unit's smem
    const int v = *s_v;
    __syncthreads();  // every thread has read it before thread 0 claims again
    if (v < 0) return;
    if constexpr (kOp == 0)
      prefill::prefill_item_range<typename Tr::Prefill>(p.pre, v, v + 1, prefill::NoJitVariant{}, /*fold=*/0);
    else
      decode::decode_items<T, D, decode::kTileQ, typename Tr::Mainloop, false, decode::DecodeParams<T>,
                           typename Tr::Mainloop, Tr::kStages>(p.dec, v);  // p.dec.stages = kStages
  }
}

// The two orders are separate code paths (each side's loop inlined twice): with one loop over
// both bodies, the bodies' hoisted loop invariants were live together (ptxas: 260 B of spills at
// d128 against 60 B here; a non-inlined decode body spilled 808 B around the call).
template <class T, int D>
__global__ void __launch_bounds__(kThreads, 1) pod_kernel(const PodParams<T> p) {
  __shared__ int s_bind;
  if (threadIdx.x == 0) s_bind = attn::sched::first_op(*p.bind, p.counters);
  __syncthreads();
  const int first = s_bind;
  __syncthreads();
  if (first == 0) {
    run_side<T, D, 0>(p, &s_bind);
    run_side<T, D, 1>(p, &s_bind);
  } else {
    run_side<T, D, 1>(p, &s_bind);
    run_side<T, D, 0>(p, &s_bind);
  }
  attn::sched::finish(p.counters);
}

}  // namespace weft::pod
