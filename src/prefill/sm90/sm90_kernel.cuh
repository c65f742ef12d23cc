// Hopper (sm_90a) prefill kernel: warp-specialized, TMA + mbarrier pipeline, wgmma.
//
// CTA = 3 warpgroups (384 threads), one CTA per SM, persistent over the plan's work items
// (cta_indptr, longest first as dealt by attention/plan/balance.h):
//   warpgroup 0  producer: its first warp issues the TMA loads (Q once per item; K and V tiles
//                into a kStages-deep shared-memory ring, full/empty mbarriers per stage and
//                operand); registers lowered to kProducerRegs with setmaxnreg.
//   warpgroups 1, 2  consumers: each owns 64 of the 128 query rows; per KV tile
//                S = Q K^T (wgmma m64n128k16, A and B from shared memory), mask / online softmax
//                in registers (the FA2 path's functions, same register layout), P packed to 16-bit
//                A fragments in registers, O += P V (wgmma m64n64k16 x 2 halves of head_dim, V
//                read MN-major through the descriptor's transpose bit); registers raised to
//                kConsumerRegs.
// Tile 128 x 128 for d128 (FlashAttention-3's choice): per consumer thread S is 64 fp32, O 64 fp32,
// P 32 b16x2 -- it fits 240 registers without spilling while each S GEMM is 8 wgmma k-steps of
// N = 128 (the wide N keeps the tensor core busy per issued instruction); 128 x 128 x 2 B = 32 KB
// per K or V stage, so Q (32 KB) + 2 stages of K and V (128 KB) leave room under 227 KB.
//
// KV tiles start at multiples of 128 keys of the request (the item's key range is rounded down),
// so a paged tile is a whole number of pages (page sizes dividing 128, or multiples of it) and
// ragged tiles are single TMA boxes. Keys outside [kv_lo, kv_hi) are masked; the V rows of a
// partial last tile are zeroed in shared memory (TMA may have brought another request's rows, or
// a page's unused slots, and 0 * NaN would poison O).
//
// Epilogue: the FA2 path's write_item (final O / LSE, or fp32 partial + base-2 LSE into the plan's
// slot for split items, merged by attention/merge.cu).
#pragma once
#include <cuda.h>
#include <cuda_runtime_api.h>

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
#include "common/types.cuh"

namespace weft::prefill::sm90 {

// Shape of the FA2 functions reused here (mask.cuh, mainloop.cuh, epilogue.cuh): one m16 row
// block per warp (the wgmma accumulator of a warp is 16 rows), kBlockN / 8 n8 blocks of S.
template <int D, class T>
struct Shim {
  using Elem = T;
  static constexpr int kHeadDim = D;
  static constexpr int kMB = 1;
  static constexpr int kFragS = kBlockN / 8;
  static constexpr int kFragO = D / 8;
  static constexpr int kKStepsPV = kBlockN / 16;
};

template <int D, class T>
struct Cfg {
  static constexpr int kStages = 2;
  static constexpr int kHalves = D / 64;                 // 128-byte swizzle: 64 columns per half
  static constexpr int kQHalfBytes = kBlockM * 128;      // 128 rows x 128 B
  static constexpr int kKVHalfBytes = kBlockN * 128;
  static constexpr int kQBytes = kHalves * kQHalfBytes;
  static constexpr int kKVBytes = kHalves * kKVHalfBytes;
  static constexpr int kOffK = kQBytes;
  static constexpr int kOffV = kOffK + kStages * kKVBytes;
  static constexpr int kOffBar = kOffV + kStages * kKVBytes;
  static constexpr int kNumBars = 2 + 4 * kStages;
  static constexpr int kSmemBytes = kOffBar + kNumBars * 8 + 1024;  // + alignment slack
  static constexpr int kThreads = 384;
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = 232;
  static constexpr int kConsumerWarps = 8;
  static_assert(D % 64 == 0, "head_dim: whole 64-column halves");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory");
};

__device__ __forceinline__ ItemGeom item_geometry_sm90(const PrefillParams& p, int w) {
  ItemGeom g;
  const plan::PlanPointers& pl = p.plan;
  g.seg = pl.item_request[w];
  g.kv_head = pl.item_kv_head[w];
  g.row_begin = pl.item_row_begin[w];
  g.row_end = pl.item_row_end[w];
  g.slot = pl.item_partial_slot[w];
  g.request = p.seg_request[g.seg];
  g.token_abs0 = pl.qo_indptr[g.seg];
  g.pos0 = p.seg_pos0[g.seg];
  g.token0 = p.seg_token0[g.seg];
  g.real_kv_len = p.real_kv_len[g.request];
  g.kv_base = p.paged ? p.page_indptr[g.request] : p.kv_indptr[g.request];
  trim_kv_range(p, g, pl.item_kv_begin[w], pl.item_kv_end[w]);
  return g;
}

// First key of the item's first tile (rounded down to a stage boundary) and the tile count.
__device__ __forceinline__ int first_tile_key(const ItemGeom& g) { return g.kv_lo & ~(kBlockN - 1); }
__device__ __forceinline__ int tile_count(const ItemGeom& g) {
  return g.kv_hi > g.kv_lo ? (g.kv_hi - first_tile_key(g) + kBlockN - 1) / kBlockN : 0;
}

template <int D, class T>
__device__ __forceinline__ void producer(const KernelParams& P, unsigned char* smem, uint64_t* bars,
                                         int lane) {
  using C = Cfg<D, T>;
  const PrefillParams& p = P.p;
  uint64_t* q_full = bars + 0;
  uint64_t* q_empty = bars + 1;
  uint64_t* k_full = bars + 2;
  uint64_t* k_empty = k_full + C::kStages;
  uint64_t* v_full = k_empty + C::kStages;
  uint64_t* v_empty = v_full + C::kStages;
  if (lane == 0) {
    ptx90::prefetch_tmap(&P.tm_q);
    ptx90::prefetch_tmap(&P.tm_k);
    ptx90::prefetch_tmap(&P.tm_v);
  }
  const int rows_per_copy = P.rows_per_copy;
  const int copies = kBlockN / rows_per_copy;  // 1 for ragged
  const int gs = p.group_size;
  uint32_t tile_cnt = 0, item_cnt = 0;
  const int w_end = p.plan.cta_indptr[blockIdx.x + 1];
  for (int w = p.plan.cta_indptr[blockIdx.x]; w < w_end; ++w, ++item_cnt) {
    const ItemGeom g = item_geometry_sm90(p, w);
    // Q: 128 packed rows = 128 / group tokens x group heads, one box per 64-column half.
    ptx90::mbar_wait(q_empty, (item_cnt & 1) ^ 1);
    if (lane == 0) {
      ptx90::mbar_arrive_expect_tx(q_full, C::kQBytes);
      const int tok = g.token_abs0 + g.row_begin / gs;
#pragma unroll
      for (int h = 0; h < C::kHalves; ++h)
        ptx90::tma_load_3d(smem + h * C::kQHalfBytes, &P.tm_q, q_full, h * 64, g.kv_head * gs, tok);
    }
    const int n_tiles = tile_count(g);
    const int ts0 = first_tile_key(g);
    for (int t = 0; t < n_tiles; ++t, ++tile_cnt) {
      const int s = tile_cnt % C::kStages;
      const uint32_t ph = (tile_cnt / C::kStages) & 1;
      const int ts = ts0 + t * kBlockN;
      unsigned char* sk = smem + C::kOffK + s * C::kKVBytes;
      unsigned char* sv = smem + C::kOffV + s * C::kKVBytes;
      if (!p.paged) {
        ptx90::mbar_wait(k_empty + s, ph ^ 1);
        if (lane == 0) {
          ptx90::mbar_arrive_expect_tx(k_full + s, C::kKVBytes);
#pragma unroll
          for (int h = 0; h < C::kHalves; ++h)
            ptx90::tma_load_3d(sk + h * C::kKVHalfBytes, &P.tm_k, k_full + s, h * 64, g.kv_head, g.kv_base + ts);
        }
        ptx90::mbar_wait(v_empty + s, ph ^ 1);
        if (lane == 0) {
          ptx90::mbar_arrive_expect_tx(v_full + s, C::kKVBytes);
#pragma unroll
          for (int h = 0; h < C::kHalves; ++h)
            ptx90::tma_load_3d(sv + h * C::kKVHalfBytes, &P.tm_v, v_full + s, h * 64, g.kv_head, g.kv_base + ts);
        }
      } else {
        // Lane i copies rows [i * rows_per_copy, +rows_per_copy) of the tile: one page (or a
        // 128-slot piece of a larger page). Pieces entirely past kv_hi are skipped (their rows
        // are masked; V rows zeroed by the consumers).
        const int j = ts + lane * rows_per_copy;
        const bool active = lane < copies && j < g.kv_hi;
        int page = 0, slot = 0;
        if (active) {
          page = __ldg(p.page_indices + g.kv_base + j / p.page_size);
          slot = j % p.page_size;
        }
        const int n_active = __popc(__ballot_sync(0xffffffffu, active));
        const uint32_t bytes = static_cast<uint32_t>(n_active) * rows_per_copy * 128 * C::kHalves;
        ptx90::mbar_wait(k_empty + s, ph ^ 1);
        if (lane == 0) ptx90::mbar_arrive_expect_tx(k_full + s, bytes);
        __syncwarp();
        if (active) {
#pragma unroll
          for (int h = 0; h < C::kHalves; ++h)
            ptx90::tma_load_4d(sk + h * C::kKVHalfBytes + lane * rows_per_copy * 128, &P.tm_k, k_full + s,
                               h * 64, slot, g.kv_head, page);
        }
        ptx90::mbar_wait(v_empty + s, ph ^ 1);
        if (lane == 0) ptx90::mbar_arrive_expect_tx(v_full + s, bytes);
        __syncwarp();
        if (active) {
#pragma unroll
          for (int h = 0; h < C::kHalves; ++h)
            ptx90::tma_load_4d(sv + h * C::kKVHalfBytes + lane * rows_per_copy * 128, &P.tm_v, v_full + s,
                               h * 64, slot, g.kv_head, page);
        }
      }
    }
  }
}

template <int D, class T>
__device__ __forceinline__ void consumer(const KernelParams& P, unsigned char* smem, uint64_t* bars,
                                         int cwg, int tid_wg) {
  using C = Cfg<D, T>;
  using Tr = Shim<D, T>;
  const PrefillParams& p = P.p;
  uint64_t* q_full = bars + 0;
  uint64_t* q_empty = bars + 1;
  uint64_t* k_full = bars + 2;
  uint64_t* k_empty = k_full + C::kStages;
  uint64_t* v_full = k_empty + C::kStages;
  uint64_t* v_empty = v_full + C::kStages;
  const int lane = tid_wg & 31;
  const int warp = tid_wg >> 5;                  // warp in the warpgroup
  const int warp_row0 = cwg * 64 + warp * 16;    // first tile row of this warp
  const uint32_t sbase = ptx90::smem_addr(smem);
  // Softmax exponent scale (see the FA2 mainloop): raw scores x sm_scale log2 e, or 1 after soft-cap.
  const float scale = p.softcap_pre == 0.f ? p.scale_log2 : 1.f;

  uint32_t tile_cnt = 0, item_cnt = 0;
  const int w_end = p.plan.cta_indptr[blockIdx.x + 1];
  for (int w = p.plan.cta_indptr[blockIdx.x]; w < w_end; ++w, ++item_cnt) {
    const ItemGeom g = item_geometry_sm90(p, w);
    const int n_tiles = tile_count(g);
    const int ts0 = first_tile_key(g);
    SoftmaxState<Tr> st;
    init_state(st);
    ptx90::mbar_wait(q_full, item_cnt & 1);
    if (n_tiles == 0) {
      __syncwarp();
      if (lane == 0) ptx90::mbar_arrive(q_empty);
    }
    for (int t = 0; t < n_tiles; ++t, ++tile_cnt) {
      const int s = tile_cnt % C::kStages;
      const uint32_t ph = (tile_cnt / C::kStages) & 1;
      const int ts = ts0 + t * kBlockN;
      const uint32_t sq = sbase + cwg * 64 * 128;  // this warpgroup's 64 rows of each Q half
      const uint32_t sk = sbase + C::kOffK + s * C::kKVBytes;
      const uint32_t sv = sbase + C::kOffV + s * C::kKVBytes;

      // ---- S = Q K^T ----
      float sacc[1][Tr::kFragS][4];
      ptx90::mbar_wait(k_full + s, ph);
      ptx90::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const uint32_t koff = (kk >> 2) * C::kQHalfBytes + (kk & 3) * 32;
        const uint32_t kvoff = (kk >> 2) * C::kKVHalfBytes + (kk & 3) * 32;
        ptx90::Wgmma<kBlockN, T>::template ss<0>(&sacc[0][0][0], ptx90::desc_sw128(sq + koff, 16, 1024),
                                                 ptx90::desc_sw128(sk + kvoff, 16, 1024), kk > 0);
      }
      ptx90::wgmma_commit();
      ptx90::wgmma_wait<0>();
#pragma unroll
      for (int n = 0; n < Tr::kFragS; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) ptx90::fence_reg(sacc[0][n][e]);
      __syncwarp();
      if (lane == 0) {
        ptx90::mbar_arrive(k_empty + s);
        if (t == n_tiles - 1) ptx90::mbar_arrive(q_empty);
      }

      // ---- mask + online softmax (FA2 functions, same fragment layout) ----
      prepare_logits<Tr>(sacc, p);
      if (tile_needs_mask(p, g, ts, kBlockN) || ts < g.kv_lo) apply_mask<Tr>(sacc, p, g, warp_row0, ts, lane);
      online_softmax<Tr>(sacc, st, scale);
      uint32_t pa[Tr::kKStepsPV][4];
#pragma unroll
      for (int kk = 0; kk < Tr::kKStepsPV; ++kk) {
        pa[kk][0] = ptx::pack2<T>(sacc[0][2 * kk][0], sacc[0][2 * kk][1]);
        pa[kk][1] = ptx::pack2<T>(sacc[0][2 * kk][2], sacc[0][2 * kk][3]);
        pa[kk][2] = ptx::pack2<T>(sacc[0][2 * kk + 1][0], sacc[0][2 * kk + 1][1]);
        pa[kk][3] = ptx::pack2<T>(sacc[0][2 * kk + 1][2], sacc[0][2 * kk + 1][3]);
      }

      // ---- O += P V ----
      ptx90::mbar_wait(v_full + s, ph);
      if (ts + kBlockN > g.kv_hi) {
        // Partial tile: zero V rows >= kv_hi - ts (both consumer warpgroups, rows split between
        // their 256 threads), fence for the async proxy, then a named barrier of the 256.
        const int r0 = max(g.kv_hi - ts, 0);
        const int ct = cwg * 128 + tid_wg;
        for (int idx = ct; idx < (kBlockN - r0) * 8 * C::kHalves; idx += 256) {
          const int h = idx / ((kBlockN - r0) * 8);
          const int rem = idx - h * (kBlockN - r0) * 8;
          const int r = r0 + rem / 8, c = rem % 8;
          *reinterpret_cast<uint4*>(smem + C::kOffV + s * C::kKVBytes + h * C::kKVHalfBytes + r * 128 + c * 16) =
              make_uint4(0, 0, 0, 0);
        }
        ptx90::fence_proxy_async_shared();
        ptx90::named_bar_sync(1, 256);
      }
#pragma unroll
      for (int n = 0; n < Tr::kFragO; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) ptx90::fence_reg(st.o[0][n][e]);
      ptx90::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < Tr::kKStepsPV; ++kk) {
#pragma unroll
        for (int h = 0; h < C::kHalves; ++h) {
          // V half h (64 columns of head_dim), keys 16kk..16kk+15: MN-major, SBO = next 8 keys.
          // LBO is set to the same 1024 (N = 64: one MN block, so it is not used for the stride
          // between MN blocks).
          ptx90::Wgmma<64, T>::template rs<1>(&st.o[0][8 * h][0], pa[kk],
                                              ptx90::desc_sw128(sv + h * C::kKVHalfBytes + kk * 2048, 1024, 1024), 1);
        }
      }
      ptx90::wgmma_commit();
      ptx90::wgmma_wait<0>();
#pragma unroll
      for (int n = 0; n < Tr::kFragO; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) ptx90::fence_reg(st.o[0][n][e]);
      __syncwarp();
      if (lane == 0) ptx90::mbar_arrive(v_empty + s);
    }

    finish_state(st, scale);
    reduce_row_sums(st);
    write_item<Tr>(st, p, g, warp_row0, lane);
  }
}

template <int D, class T>
__global__ void __launch_bounds__(384, 1) prefill_sm90_kernel(const __grid_constant__ KernelParams P) {
#ifdef WEFT_SM90A_ENABLED
  using C = Cfg<D, T>;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~static_cast<uintptr_t>(1023));
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + C::kOffBar);
  const int tid = threadIdx.x;
  if (tid == 0) {
    ptx90::mbar_init(bars + 0, 1);                    // q_full: producer arrive + tx
    ptx90::mbar_init(bars + 1, C::kConsumerWarps);    // q_empty
    for (int s = 0; s < C::kStages; ++s) {
      ptx90::mbar_init(bars + 2 + s, 1);                                  // k_full
      ptx90::mbar_init(bars + 2 + C::kStages + s, C::kConsumerWarps);     // k_empty
      ptx90::mbar_init(bars + 2 + 2 * C::kStages + s, 1);                 // v_full
      ptx90::mbar_init(bars + 2 + 3 * C::kStages + s, C::kConsumerWarps); // v_empty
    }
    ptx90::fence_mbar_init();
  }
  __syncthreads();
  const int wg = tid / 128;
  if (wg == 0) {
    ptx90::setmaxnreg_dec<C::kProducerRegs>();
    if (tid < 32) producer<D, T>(P, smem, bars, tid);
  } else {
    ptx90::setmaxnreg_inc<C::kConsumerRegs>();
    consumer<D, T>(P, smem, bars, wg - 1, tid - (wg * 128));
  }
#else
  __trap();  // built without sm_90a code: never selected (occupancy_prefill_sm90 reports 0)
#endif
}

// ---- host side ----
template <int D, class T>
void launch_prefill_sm90(const PrefillParams& p, const Shapes& s, int num_ctas, cudaStream_t stream) {
  KernelParams kp{};
  kp.p = p;
  make_tensor_maps(kp, s, detail::TypeOf<T>::value, D);
  prefill_sm90_kernel<D, T><<<num_ctas, Cfg<D, T>::kThreads, Cfg<D, T>::kSmemBytes, stream>>>(kp);
  WEFT_CUDA_CHECK_LAUNCH();
}

template <int D, class T>
int occupancy_prefill_sm90() {
  auto kernel = prefill_sm90_kernel<D, T>;
  WEFT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       Cfg<D, T>::kSmemBytes));
  // A build without sm_90a code has only the trapping stub (a handful of registers): report 0.
  cudaFuncAttributes attr{};
  WEFT_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
  if (attr.numRegs < 64) return 0;
  int blocks = 0;
  WEFT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, Cfg<D, T>::kThreads,
                                                                Cfg<D, T>::kSmemBytes));
  return blocks;
}

}  // namespace weft::prefill::sm90
