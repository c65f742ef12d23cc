// Scheduler role: the persistent batch-prefill kernel. A fixed grid of plan.num_ctas CTAs; CTA c
// executes work items cta_indptr[c] .. cta_indptr[c+1] - 1 of the plan (longest first, as dealt
// by attention/plan/balance.h). Included by exactly one instantiation file per configuration.
//
// Per item (CTA_Q packed rows x key range; each warp owns kRowsPerWarp = 16 or 32 rows), K/V
// pipeline with 3 K stages and 2 V stages and ONE barrier per KV tile. cp.async groups are
// committed in the fixed order  [Q + K0 + V0] [K1] | per tile t: [V(t+1)] [K(t+2)]  (empty
// groups when past the end), so at the top of tile t "wait until <= 1 group pending" means
// Q, K_t and V_t have landed (pending: K_{t+1} at most); the barrier after it makes them visible
// to every warp AND guarantees every warp finished tile t-1, so the copies issued right after it
// may overwrite tile t-1's buffers: V_{t+1} -> V stage (t+1) % 2 = (t-1) % 2, K_{t+2} -> K stage
// (t+2) % 3 = (t-1) % 3. Prefetch distance: K two tiles, V one tile.
// fp8 K/V (Tr::kFp8): the same groups land fp8 tiles in their own stages (traits.cuh kOffK8 /
// kOffV8); after the step's copies are issued, the CTA widens K_t and V_t into ONE 16-bit K and
// V buffer (widen.cuh) and meets at a second barrier before the math. The widened buffers were
// last read in step t-1, which every warp finished before the first barrier. The K scale of the
// item's KV head is folded into the logit scale (q . (s k8) = s (q . k8)), the V scale into the
// epilogue's 1 / sum (sum p (s v8) / sum p = s (sum p v8) / sum p).
#pragma once
#include "common/rtc_compat.h"
#if !WEFT_RTC
#include <cuda_runtime_api.h>

#include "common/cuda_check.h"
#endif
#include "common/ptx.cuh"
#include "prefill/kernel/epilogue.cuh"
#include "prefill/kernel/load.cuh"
#include "prefill/kernel/mainloop.cuh"
#include "prefill/kernel/mask.cuh"
#include "prefill/kernel/params.h"
#include "prefill/kernel/traits.cuh"
#include "prefill/kernel/widen.cuh"

namespace weft::prefill {


// The built-in variants only (PrefillParams' fields: scale, soft cap, ALiBi, masks): what the
// ahead-of-time kernels run. A variant compiled at run time (weft::jit, jit/jit_variant.cuh)
// passes its own JV, whose kHasBias logits (V::row / V::logit_mul, log2 units) replace the
// built-in logit step; masks and KV ranges stay PrefillParams'.
struct NoJitVariant {
  static constexpr bool kHasBias = false;
};

// Where an item's query rows come from and where its result goes (the Rows policy of
// prefill_item_range). PlanRows: the prefill plan's items, rows of one segment of one request
// (item_geometry, load_q_tile, write_item). The decode wrapper's wide packs pass their own
// (decode/wide_pack.cuh: rows gathered from several requests of a work plan, partial states in
// its slots), so they run this mainloop as it is.
struct PlanRows {
  __device__ __forceinline__ ItemGeom geometry(const PrefillParams& p, int w, int fold) const {
    return item_geometry(p, w, fold);
  }
  template <class Tr>
  __device__ __forceinline__ void load_q(typename Tr::Elem* sq, const PrefillParams& p, const ItemGeom& g,
                                         int tid) const {
    load_q_tile<Tr>(sq, p, g, tid);
  }
  template <class Tr>
  __device__ __forceinline__ void write(const SoftmaxState<Tr>& st, const PrefillParams& p, const ItemGeom& g,
                                        int warp_row0, int lane, float vq) const {
    write_item<Tr>(st, p, g, warp_row0, lane, vq);
  }
};

// Work items w_begin .. w_end - 1 of the plan, in order (prefill_items below runs CTA
// blockIdx.x's range; the fused POD kernel runs the items its scheduler hands out,
// attention/scheduler.cuh). Uses the whole CTA (Tr::kThreads threads) and Tr::kSmemBytes of
// dynamic shared memory.
// fold: the launched CTA's fold word for head-folded plans (plan::fold_word_of_cta; 0: none).
// rows: the items' rows (PlanRows above; the masks read ItemGeom's row_begin / row_end / pos0,
// so a policy whose rows are not one request's tokens runs without causal, window or custom masks).
template <class Tr, class JV, class Rows = PlanRows>
__device__ __forceinline__ void prefill_item_range(const PrefillParams& p, int w_begin, int w_end, const JV& jv,
                                                   int fold, const Rows& rows = Rows{}) {
  using T = typename Tr::Elem;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* sq = reinterpret_cast<T*>(smem_raw);
  T* sk = sq + Tr::kOffK;  // 16-bit K stages (fp8: stage 0 only, the widened tile)
  T* sv = sq + Tr::kOffV;
  // Landing stage s of K / V (16-bit: the stage itself; fp8: the byte stages of traits.cuh).
  auto k_land = [&](int st) -> void* {
    return Tr::kFp8 ? static_cast<void*>(smem_raw + Tr::kOffK8 + st * Tr::kKVTileBytes8) : sk + st * Tr::kKVTileElems;
  };
  auto v_land = [&](int st) -> void* {
    return Tr::kFp8 ? static_cast<void*>(smem_raw + Tr::kOffV8 + st * Tr::kKVTileBytes8) : sv + st * Tr::kKVTileElems;
  };

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int warp_q = warp / Tr::kWarpsKV;
  const int warp_kv = warp % Tr::kWarpsKV;
  const int warp_row0 = warp_q * Tr::kRowsPerWarp;  // first Q tile row of this warp
  const int key_off = warp_kv * Tr::kKVPerWarp;     // first key of each KV tile for this warp

  for (int w = w_begin; w < w_end; ++w) {
    ItemGeom g = rows.geometry(p, w, fold);
    const int n_tiles = (g.kv_hi - g.kv_lo + Tr::kCtaKV - 1) / Tr::kCtaKV;

    // Prologue: [Q + K0 + V0] [K1]. pg1 / pg2: page ids (load.cuh, fetch_page) of tiles t+1
    // and t+2 at the top of tile t (used by that tile's V / K copies); tile t+3's is fetched
    // there, one tile before its first use, so its latency hides behind the math.
    rows.template load_q<Tr>(sq, p, g, tid);
    if (n_tiles > 0) {
      const int32_t pg0 = fetch_page<Tr>(p, g, g.kv_lo, tid);
      load_k_tile<Tr>(k_land(0), p, g, pg0, g.kv_lo, tid);
      load_v_tile<Tr>(v_land(0), p, g, pg0, g.kv_lo, tid);
    }
    ptx::cp_async_commit();
    int32_t pg1 = 0, pg2 = 0;
    if (n_tiles > 1) {
      pg1 = fetch_page<Tr>(p, g, g.kv_lo + Tr::kCtaKV, tid);
      load_k_tile<Tr>(k_land(1), p, g, pg1, g.kv_lo + Tr::kCtaKV, tid);
    }
    ptx::cp_async_commit();
    if (n_tiles > 2) pg2 = fetch_page<Tr>(p, g, g.kv_lo + 2 * Tr::kCtaKV, tid);

    SoftmaxState<Tr> st;
    init_state(st);
    uint32_t qf[Tr::kQInRegs ? Tr::kKStepsQK : 1][4];
    // Exponent scale of the softmax: raw scores x sm_scale log2(e); soft-capped or ALiBi logits
    // are already in the log2 domain (prepare_logits / apply_bias_logits). fp8: kq / vq, the
    // item's KV head's K / V scales (1 for 16-bit pools); kq goes into the scale when the scale
    // is folded, else into the soft cap's argument (prepare_logits re-reads it from L1: no
    // register held through the loop, where the 128-row tile is at its register cap). ALiBi and
    // JIT variants: 16-bit pools only (the wrapper rejects them with fp8).
    const float* kq_ptr = Tr::kFp8 ? p.k_scale + g.kv_head * p.k_scale_stride : nullptr;
    const float kq = Tr::kFp8 ? __ldg(kq_ptr) : 1.f;
    const float scale = JV::kHasBias ? 1.f : softmax_scale(p) * (variant_of(p).folds_scale() ? kq : 1.f);

    int ks = 0;  // K stage of tile t (t % 3)
    for (int t = 0; t < n_tiles; ++t) {
      const int ts = g.kv_lo + t * Tr::kCtaKV;
      const int vs = t & 1;                        // V stage of tile t
      const int ks2 = ks == 0 ? 2 : ks - 1;        // K stage of tile t + 2 ((t + 2) % 3)
      ptx::cp_async_wait<1>();
      __syncthreads();
      if constexpr (Tr::kQInRegs) {
        if (t == 0) {
#pragma unroll
          for (int kk = 0; kk < Tr::kKStepsQK; ++kk)
            ptx::ldmatrix_x4(qf[kk], sq + swz<Tr::kHeadDim>(warp_row0 + (lane & 15), 2 * kk + (lane >> 4)));
        }
      }
      if (t + 1 < n_tiles)
        load_v_tile<Tr>(v_land(vs ^ 1), p, g, pg1, ts + Tr::kCtaKV, tid);
      ptx::cp_async_commit();
      if (t + 2 < n_tiles)
        load_k_tile<Tr>(k_land(ks2), p, g, pg2, ts + 2 * Tr::kCtaKV, tid);
      ptx::cp_async_commit();
      pg1 = pg2;
      if (t + 3 < n_tiles) pg2 = fetch_page<Tr>(p, g, ts + 3 * Tr::kCtaKV, tid);
      if constexpr (Tr::kFp8) {
        widen_kv_tile<Tr>(sk, static_cast<const unsigned char*>(k_land(ks)), tid);
        widen_kv_tile<Tr>(sv, static_cast<const unsigned char*>(v_land(vs)), tid);
        __syncthreads();
      }
      const T* sk_t = sk + (Tr::kFp8 ? 0 : ks) * Tr::kKVTileElems;
      const T* sv_t = sv + (Tr::kFp8 ? 0 : vs) * Tr::kKVTileElems;

      float s[Tr::kMB][Tr::kFragS][4];
      compute_qk<Tr>(s, qf, sq, warp_row0, sk_t, key_off, lane);
      if constexpr (JV::kHasBias) {
        apply_bias_logits<Tr>(s, p, g, jv, warp_row0, ts + key_off, lane);
      } else if constexpr (Tr::kBias) {
        if (p.alibi_slopes != nullptr)  // uniform over the launch
          apply_bias_logits<Tr>(s, p, g, attn::AlibiVariant(variant_params_of(p)), warp_row0, ts + key_off, lane);
        else
          prepare_logits<Tr>(s, p, Tr::kFp8 ? p.k_scale + g.kv_head * p.k_scale_stride : nullptr);
      } else {
        // no ALiBi plan runs this tile (bias_supported)
        prepare_logits<Tr>(s, p, Tr::kFp8 ? p.k_scale + g.kv_head * p.k_scale_stride : nullptr);
      }
      if (tile_needs_mask(p, g, ts, Tr::kCtaKV)) apply_mask<Tr>(s, p, g, warp_row0, ts + key_off, lane);
      online_softmax<Tr>(s, st, scale);
      compute_pv<Tr>(s, st, sv_t, key_off, lane);
      ks = ks == 2 ? 0 : ks + 1;
    }
    ptx::cp_async_wait<0>();
    __syncthreads();

    finish_state(st, scale);
    reduce_row_sums(st);
    const float vq = Tr::kFp8 ? __ldg(p.v_scale + g.kv_head * p.v_scale_stride) : 1.f;
    if constexpr (Tr::kWarpsKV > 1) {
      merge_kv_warps<Tr>(st, reinterpret_cast<float*>(sk), warp_q, warp_kv, lane);
      if (warp_kv == 0) rows.template write<Tr>(st, p, g, warp_row0, lane, vq);
    } else {
      rows.template write<Tr>(st, p, g, warp_row0, lane, vq);
    }
    __syncthreads();  // shared memory (Q, K/V, merge scratch) is reused by the next item
  }
}

// The kernel body: every work item of this CTA.
template <class Tr, class JV>
__device__ __forceinline__ void prefill_items(const PrefillParams& p, const JV& jv) {
  const CtaItems items = cta_items(p);
  prefill_item_range<Tr>(p, items.begin, items.end, jv, items.fold);
}

template <class Tr>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kMinCtasPerSM) batch_prefill_kernel(const PrefillParams p) {
  prefill_items<Tr>(p, NoJitVariant{});
}

#if !WEFT_RTC  // host only (NVRTC: common/rtc_compat.h)
// Host launcher of one instantiation (defined in the instantiation's .cu file). The dynamic
// shared-memory opt-in was set by occupancy_batch_prefill() during plan(), so run() issues only
// the launch (nothing but stream work: safe under graph capture).
template <class Tr>
void launch_batch_prefill(const PrefillParams& p, int num_ctas, cudaStream_t stream) {
  batch_prefill_kernel<Tr><<<num_ctas, Tr::kThreads, Tr::kSmemBytes, stream>>>(p);
  WEFT_CUDA_CHECK_LAUNCH();
}

// Resident CTAs per SM of one instantiation (for the persistent grid size); also opts the kernel
// in to more than 48 KB of dynamic shared memory on the current device.
template <class Tr>
int occupancy_batch_prefill() {
  auto kernel = batch_prefill_kernel<Tr>;
  WEFT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       Tr::kSmemBytes));
  int blocks = 0;
  WEFT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, Tr::kThreads,
                                                                Tr::kSmemBytes));
  return blocks;
}

#endif  // !WEFT_RTC

}  // namespace weft::prefill
