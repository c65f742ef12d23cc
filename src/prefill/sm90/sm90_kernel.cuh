// Hopper (sm_90a) prefill kernel: warp-specialized, TMA + mbarrier pipeline, wgmma.
//
// CTA = 3 warpgroups (384 threads), one CTA per SM, persistent over the plan's work items
// (cta_indptr, longest first as dealt by attention/plan/balance.h):
//   warpgroup 0  producer: its first warp issues the TMA loads (Q once per item; K and V tiles
//                into a kStages-deep shared-memory ring, full/empty mbarriers per stage and
//                operand; on paged 16-bit pools its second warp issues the V tiles, producer_v);
//                registers lowered to kProducerRegs with setmaxnreg.
//   warpgroups 1, 2  consumers: each owns 64 of the 128 query rows; per KV tile
//                S = Q K^T (wgmma m64n128k16, A and B from shared memory), mask / online softmax
//                in registers (the FA2 path's functions, same register layout), P packed to 16-bit
//                A fragments in registers, O += P V (wgmma m64n64k16 x 2 halves of head_dim, V
//                read MN-major through the descriptor's transpose bit); registers raised to
//                kConsumerRegs.
// Tile 128 x 128 for d64/d128 (FlashAttention-3's choice at d128): per consumer thread S is 64 fp32,
// O 64 fp32, P 32 b16x2 -- it fits 240 registers without spilling while each S GEMM is 8 wgmma
// k-steps of N = 128 (the wide N keeps the tensor core busy per issued instruction); 128 x 128 x
// 2 B = 32 KB per K or V stage, so Q (32 KB) + 3 stages of K and V (192 KB) fit under 227 KB.
// d256: tile 128 x 64 (sm90_launch.h, block_n): S 32 fp32 + O 128 fp32 + P 16 b16x2 per consumer
// thread; Q 64 KB + 2 stages of K and V (32 KB each) = 192 KB, so two stages only.
//
// KV tiles start at multiples of kBlockN keys of the request (the item's key range is rounded
// down), so a paged tile is a whole number of pages (page sizes dividing kBlockN, or multiples of
// it) and ragged tiles are single TMA boxes. Keys outside [kv_lo, kv_hi) are masked; the V rows of a
// partial last tile are zeroed in shared memory (TMA may have brought another request's rows, or
// a page's unused slots, and 0 * NaN would poison O).
//
// fp8 K/V pools (KV = __nv_fp8_e4m3 / e5m2, bf16 Q / O, d128, paged): the producer warp lands
// fp8 tiles in stages of their own and warps 1..3 of its warpgroup widen them into the 16-bit
// stages above (sm90_fp8.cuh); the consumers are unchanged but for the per-item K scale in the
// softmax exponent and the V scale in the output.
//
// Epilogue: the FA2 path's write_item (final O / LSE, or fp32 partial + base-2 LSE into the plan's
// slot for split items); after its items, the CTA merges the split tiles whose last slot it
// counted (sm90_merge.cuh), so no merge kernel follows.
//
// Files by role (this one: the kernel entry, the plan's Rows policy, the pipeline configuration
// per variant and the host launch): sm90_producer.cuh (warpgroup 0: TMA loads, the V warp, the
// start prefetch), sm90_consumer.cuh (warpgroups 1, 2: wgmma mainloop, online softmax, epilogue
// call), sm90_fp8.cuh (the fp8 widening warps), sm90_pipeline.cuh (shared-memory plan, mbarriers,
// tile walk), sm90_merge.cuh (in-kernel merge of split tiles), sm90_params.h / sm90_launch.h
// (kernel parameters, tensor maps, instance macros).
#pragma once
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <type_traits>


#include "common/cuda_check.h"
#include "common/ptx.cuh"
#include "common/ptx_sm90.cuh"
#include "prefill/kernel/epilogue.cuh"
#include "prefill/kernel/load.cuh"
#include "prefill/kernel/mainloop.cuh"
#include "prefill/kernel/mask.cuh"
#include "prefill/kernel/params.h"
#include "prefill/sm90/sm90_launch.h"
#include "prefill/sm90/sm90_params.h"
#include "prefill/sm90/sm90_fp8.cuh"
#include "prefill/sm90/sm90_merge.cuh"
#include "prefill/sm90/sm90_pipeline.cuh"
#include "prefill/sm90/sm90_consumer.cuh"
#include "prefill/sm90/sm90_producer.cuh"
#include "common/types.cuh"

namespace weft::prefill::sm90 {

// Where the kernel's items come from and where their rows go (the Rows policy, as the FA2
// mainloop's PlanRows in prefill_kernel.cuh). Sm90PlanRows: the prefill plan (cta_items,
// item_geometry, write_item, the in-kernel merge of split tiles), its tensor maps staged per CTA
// with the plan's row extents (stage_maps). The decode wrapper's wide packs pass their own
// (decode/wide_pack_sm90.cuh: a work plan's wide items whose Q rows are contiguous tokens, partial
// states in the work plan's slots, the kernel-parameter maps as they are).
//   kStageMaps           per-CTA copies of the maps with the plan's extents (sm90_launch.h)
//   kTriggerDependents   griddepcontrol.launch_dependents at the kernel's start (a programmatic
//                        dependent launch after it may start at once)
//   kGatherQ             at GQA groups >= 8, the Q tile as 128 / group boxes of one token each
//                        (q_token(p, g, j): the token of tile rows j * group ..), the map's box
//                        one token deep (Shapes::q_box_tokens); smaller groups: the one box of
//                        128 / group consecutive tokens from g.token_abs0
//   kBias                the ALiBi kernel (sm90_consumer.cuh, sm90_alibi.cuh): every tile's logits
//                        get the bias; launched where p.alibi_slopes is set (launch_prefill_sm90)
// kAlibi: the plan's ALiBi kernels (16-bit pools) are instances of their own rather than a branch
// in the plain ones: a launch-uniform branch (per tile or per item) in one kernel changed the
// plain path's register allocation (d256: 56 -> 64-100 spill bytes stored, ptxas) and cost it 1-3%
// (H100, interleaved old/new processes: causal d128 L8192 0.989 -> 1.021 ms, L16384 3.508 ->
// 3.556, d256 L8192 1.565 -> 1.594; bench/results/h100_prefill_sm90_ab_64dccee.txt). Six more
// kernels (d64/d128/d256 x bf16/fp16) in the same translation units.
// kTriggerDependents: every prefill plan's grid is one wave of persistent CTAs (at most one per
// SM), so a kernel launched programmatically after it (the POD partition's decode,
// LaunchArgs::programmatic) is dispatched once every prefill CTA holds its SM, onto the SMs the
// capped grid leaves free; a plain launch after it is unaffected.
template <bool kAlibi>
struct Sm90PlanRowsT {
  static constexpr bool kStageMaps = true;
  static constexpr bool kBias = kAlibi;
  static constexpr bool kTriggerDependents = true;
  static constexpr bool kGatherQ = false;
  __device__ __forceinline__ CtaItems items(const PrefillParams& p) const { return cta_items(p); }
  __device__ __forceinline__ ItemGeom geometry(const PrefillParams& p, int w, int fold) const {
    return item_geometry(p, w, fold);
  }
  template <class Tr>
  __device__ __forceinline__ void write(const SoftmaxState<Tr>& st, const PrefillParams& p, const ItemGeom& g,
                                        int warp_row0, int lane, float vq) const {
    write_item<Tr>(st, p, g, warp_row0, lane, vq);
  }
  template <class T, int D>
  __device__ __forceinline__ void merge(const PrefillParams& p, const CtaItems& items, int tid_c) const {
    merge_split_items<T, D>(p, items, tid_c);
  }
};
using Sm90PlanRows = Sm90PlanRowsT<false>;

// kVariant bit 0: intra-warpgroup overlap; bit 1: ping-pong between the consumer warpgroups;
// bit 2: three K/V stages instead of two (d64/d128: a third d256 stage does not fit); bit 3: P V
// as one N = 128 wgmma per k-step (d128).
// KV: the K/V pools' element type, T or an fp8 type: then two 16-bit and two fp8 stages (the
// shared memory of Cfg), whatever bit 2 says.
// kSm90QDouble (16-bit pools): two Q buffers where they fit: d64 next to three K and V stages;
// d128 with two K and three V stages (Q 64 KB + K 64 KB + V 96 KB = 224 KB; the producer issues K
// then V per tile, so a third V stage keeps V as far ahead as before while K loses one stage);
// d256 (Q 64 KB) keeps one.
template <int D, class T, class KV, int kVariant>
using CfgOf = std::conditional_t<
    sizeof(KV) == 1, Cfg<D, T, 2, 2>,
    std::conditional_t<kSm90QDouble && D == 64, Cfg<D, T, (kVariant & 4) ? 3 : 2, 0, 2>,
                       std::conditional_t<kSm90QDouble && D == 128, Cfg<D, T, 2, 0, 2, (kVariant & 4) ? 3 : 2>,
                                          Cfg<D, T, (kVariant & 4) && D != 256 ? 3 : 2>>>>;

// Rows: Sm90PlanRows (the prefill plan) or the decode wrapper's wide packs (see Sm90PlanRows).
template <int D, class T, class KV, int kVariant, class Rows = Sm90PlanRows>
__global__ void __launch_bounds__(384, 1) prefill_sm90_kernel(const __grid_constant__ KernelParams P,
                                                              const __grid_constant__ Rows rows) {
#ifdef WEFT_SM90A_ENABLED
  if constexpr (Rows::kTriggerDependents) ptx::grid_launch_dependents();
  using C = CfgOf<D, T, KV, kVariant>;
  constexpr bool kF8 = C::kF8Stages > 0;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~static_cast<uintptr_t>(1023));
  Bars<C> b{reinterpret_cast<uint64_t*>(smem + C::kOffBar)};
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int i = 0; i < C::kQBufs; ++i) {
      ptx90::mbar_init(b.q_full(i), 1);                 // producer arrive + tx
      ptx90::mbar_init(b.q_empty(i), C::kConsumerWarps);
    }
    for (int s = 0; s < C::kMaxStages; ++s) {  // full: TMA (arrive + tx), or fp8: the widening warps
      ptx90::mbar_init(b.k_full(s), kF8 ? C::kWidenWarps : 1);
      ptx90::mbar_init(b.k_empty(s), C::kConsumerWarps);
      ptx90::mbar_init(b.v_full(s), kF8 ? C::kWidenWarps : 1);
      ptx90::mbar_init(b.v_empty(s), C::kConsumerWarps);
      ptx90::mbar_init(b.v_tma(s), 1);
    }
    for (int s = 0; s < C::kF8Stages; ++s) {
      ptx90::mbar_init(b.k8_full(s), 1);
      ptx90::mbar_init(b.k8_empty(s), C::kWidenWarps);
      ptx90::mbar_init(b.v8_full(s), 1);
      ptx90::mbar_init(b.v8_empty(s), C::kWidenWarps);
    }
    ptx90::fence_mbar_init();
  }
  __syncthreads();
  const int wg = tid / 128;
  if (wg == 0) {
    ptx90::setmaxnreg_dec<C::kProducerRegs>();
    if (tid < 32) producer<D, T, KV, C>(P, rows, smem, b, tid);
    else if constexpr (kF8) widen_warps<D, T, KV, C>(P, rows, smem, b, tid / 32 - (C::kWidenWarps == 4 ? 0 : 1), tid & 31);
    else if (tid < 64) {
      if (tid == 32) start_prefetch<C>(P, rows);
      if (P.p.paged) {
        __syncwarp();
        producer_v<D, C>(P, rows, smem, b, tid - 32);
      }
    }
  } else {
    ptx90::setmaxnreg_inc<C::kConsumerRegs>();
    consumer<D, T, C, (kVariant & 1) != 0, (kVariant & 2) != 0, (kVariant & 8) != 0>(P, rows, smem, b, wg - 1,
                                                                                     tid - (wg * 128));
  }
#else
  __trap();  // built without sm_90a code: never selected (occupancy_prefill_sm90 reports 0)
#endif
}

// ---- host side ----
// Pipeline variant (kVariant of prefill_sm90_kernel): 0 (plain: S, softmax, P V in turn), 3
// (overlap + ping-pong, two stages, P V as two N = 64 halves) or 15 (3 + three stages + one
// N = 128 P V per k-step), the shipped one. (Variants 1, 2, 7, 11 were measured and dropped: perf
// notes.) A build compiles ONE variant: 15, or the one an experiments build names with
// -DWEFT_SM90_PIPELINE=0|3 (scripts/diag/sm90-dev.sh builds one tree per variant for its A/B).
// The library reads no environment, and the shipped build carries no kernel it never launches.
#ifndef WEFT_SM90_PIPELINE_VARIANT
#define WEFT_SM90_PIPELINE_VARIANT 15
#endif
inline constexpr int kPipelineVariant = WEFT_SM90_PIPELINE_VARIANT;
static_assert(kPipelineVariant == 0 || kPipelineVariant == 3 || kPipelineVariant == 15,
              "WEFT_SM90_PIPELINE must be 0, 3 or 15");

template <int D, class T, class KV, int V, class Rows = Sm90PlanRows>
void launch_variant(const KernelParams& kp, int num_ctas, cudaStream_t stream) {
  using C = CfgOf<D, T, KV, V>;
  prefill_sm90_kernel<D, T, KV, V, Rows><<<num_ctas, C::kThreads, C::kSmemBytes, stream>>>(kp, Rows{});
}

template <int D, class T, class KV>
void launch_prefill_sm90(const PrefillParams& p, const Shapes& s, int num_ctas, cudaStream_t stream) {
  KernelParams kp{};
  kp.p = p;
  make_tensor_maps(kp, s, detail::TypeOf<T>::value, detail::TypeOf<KV>::value, D);
  if constexpr (sizeof(KV) == 2) {  // ALiBi: 16-bit pools (the wrapper rejects it with fp8 K/V)
    if (p.alibi_slopes != nullptr)
      launch_variant<D, T, KV, kPipelineVariant, Sm90PlanRowsT<true>>(kp, num_ctas, stream);
    else
      launch_variant<D, T, KV, kPipelineVariant>(kp, num_ctas, stream);
  } else {
    launch_variant<D, T, KV, kPipelineVariant>(kp, num_ctas, stream);
  }
  WEFT_CUDA_CHECK_LAUNCH();
  note_launch();
}

template <int D, class T, class KV, int V, class Rows = Sm90PlanRows>
int occupancy_variant() {
  const void* k = reinterpret_cast<const void*>(prefill_sm90_kernel<D, T, KV, V, Rows>);
  constexpr int kSmem = CfgOf<D, T, KV, V>::kSmemBytes;
  WEFT_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  cudaFuncAttributes attr{};
  WEFT_CUDA_CHECK(cudaFuncGetAttributes(&attr, k));
  if (attr.numRegs < 64) return 0;
  int b = 0;
  WEFT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, k, CfgOf<D, T, KV, V>::kThreads, kSmem));
  return b;
}

// Resident CTAs per SM: 1 by design (the persistent grid is one CTA per SM), 0 when the build has
// no sm_90a code (the trapping stub uses a handful of registers). Also opts the kernel in to its
// dynamic shared memory (16-bit pools: the ALiBi kernel as well; the smaller of the two counts).
template <int D, class T, class KV>
int occupancy_prefill_sm90() {
  int blocks = occupancy_variant<D, T, KV, kPipelineVariant>();
  if constexpr (sizeof(KV) == 2)
    blocks = std::min(blocks, occupancy_variant<D, T, KV, kPipelineVariant, Sm90PlanRowsT<true>>());
  return blocks < 1 ? blocks : 1;
}

}  // namespace weft::prefill::sm90
