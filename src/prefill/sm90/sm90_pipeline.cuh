// Hopper prefill: the pipeline's shared-memory plan (Cfg), its mbarriers (Bars), the tile walk of
// an item and the per-CTA tensor-map copies; shared by the kernel (sm90_kernel.cuh, its roles
// sm90_producer.cuh and sm90_consumer.cuh) and its fp8 K/V roles (sm90_fp8.cuh).
#pragma once
#include <cuda.h>

#include "common/ptx_sm90.cuh"
#include "prefill/kernel/params.h"
#include "prefill/sm90/sm90_launch.h"
#include "prefill/sm90/sm90_params.h"

// Registers of the producer warpgroup on fp8 K/V pools (the TMA warp + the three widening warps):
// 40 lets each widening lane keep WEFT_SM90_FP8_AHEAD 16-byte units in flight without spilling
// (ptxas, sm90_fp8.cuh) and leaves the consumers 232 (ptxas: a few 4-byte spills of barrier ids,
// outside the GEMMs). Experiments builds may set it (-D, a multiple of 8 from 24).
#ifndef WEFT_SM90_FP8_PRODUCER_REGS
#define WEFT_SM90_FP8_PRODUCER_REGS 40
#endif
// Experiments only. 1: the TMA warp widens too, one tile behind its issues (sm90_producer.cuh
// producer): four widening warps, one per SM sub-partition (warp w issues on sub-partition w % 4;
// with three, the TMA warp's sub-partition carries none of the widening). Measured slower (H100,
// same process set, bench/results/h100_fp8_sm90_check_0500b1b.txt: e4m3 L16384 4.90 ms against
// 4.32 with three warps, 0.75-0.84x bf16 against 0.88-0.92x): the TMA issue then waits behind the
// warp's own widening. Off (three widening warps).
#ifndef WEFT_SM90_FP8_TMA_WIDENS
#define WEFT_SM90_FP8_TMA_WIDENS 0
#endif

// Experiments only (CMake -DWEFT_SM90_KV_FIRST=ON / -DWEFT_SM90_Q_DOUBLE=ON, same-call A/B in
// scripts/diag/sm90-dev.sh exp). KV_FIRST: after its first item the producer issues an item's
// first K/V tiles before it waits for the Q buffer (sm90_producer.cuh producer). Q_DOUBLE: two Q
// buffers, the next item's Q loads while the consumers run the current item (CfgOf).
#ifndef WEFT_SM90_KV_FIRST
#define WEFT_SM90_KV_FIRST 0
#endif
#ifndef WEFT_SM90_Q_DOUBLE
#define WEFT_SM90_Q_DOUBLE 0
#endif

namespace weft::prefill::sm90 {

inline constexpr bool kSm90KvFirst = WEFT_SM90_KV_FIRST != 0;
inline constexpr bool kSm90QDouble = WEFT_SM90_Q_DOUBLE != 0;

// Shape of the FA2 functions reused here (mask.cuh, mainloop.cuh, epilogue.cuh): one m16 row
// block per warp (the wgmma accumulator of a warp is 16 rows), kBlockN / 8 n8 blocks of S.
template <int D, class T>
struct Shim {
  using Elem = T;
  static constexpr int kHeadDim = D;
  static constexpr int kMB = 1;
  static constexpr int kFragS = block_n(D) / 8;
  static constexpr int kFragO = D / 8;
  static constexpr int kKStepsPV = block_n(D) / 16;
};

// STAGES: 16-bit K/V stages the consumers read. F8STAGES (fp8 K/V pools, else 0): fp8 landing
// stages of kBlockN x D bytes each for K and V, which the producer warpgroup's other three warps
// widen into the 16-bit stages (sm90_fp8.cuh). d128 fp8: Q 32 KB + 2 x (K + V) 16-bit stages
// (128 KB) + 2 x (K + V) fp8 stages (64 KB) = 224 KB: two of each, a third 16-bit stage does not
// fit next to the fp8 ones (and the fp8 stages buffer the TMA latency the third one hid).
// QBUFS: Q buffers (2: the next item's Q lands while the consumers run the current one);
// VSTAGES: V stages when they differ from the K stages (STAGES; 16-bit pools only).
template <int D, class T, int STAGES, int F8STAGES = 0, int QBUFS = 1, int VSTAGES = STAGES>
struct Cfg {
  static constexpr int kStages = STAGES;    // K stages (and V stages unless VSTAGES says)
  static constexpr int kVStages = VSTAGES;
  static constexpr int kQBufs = QBUFS;
  static constexpr int kMaxStages = STAGES > VSTAGES ? STAGES : VSTAGES;  // barriers per group
  static constexpr int kF8Stages = F8STAGES;
  static constexpr int kBlockN = block_n(D);             // keys per stage
  static constexpr int kHalves = D / 64;                 // 128-byte swizzle: 64 columns per half
  static constexpr int kQHalfBytes = kBlockM * 128;      // 128 rows x 128 B
  static constexpr int kKVHalfBytes = kBlockN * 128;
  static constexpr int kQBytes = kHalves * kQHalfBytes;
  static constexpr int kKVBytes = kHalves * kKVHalfBytes;
  static constexpr int kKV8Bytes = kBlockN * D;          // fp8 stage: [kBlockN][D] bytes, unswizzled
  static constexpr int kOffK = kQBufs * kQBytes;
  static constexpr int kOffV = kOffK + kStages * kKVBytes;
  static constexpr int kOffK8 = kOffV + kVStages * kKVBytes;
  static constexpr int kOffV8 = kOffK8 + kF8Stages * kKV8Bytes;
  static constexpr int kOffBar = kOffV8 + kF8Stages * kKV8Bytes;
  static constexpr int kNumBars = 2 * kQBufs + 5 * kMaxStages + 4 * kF8Stages;
  static constexpr int kOffMaps = (kOffBar + kNumBars * 8 + 127) / 128 * 128;  // 3 x 128 B staging
  static constexpr int kSmemBytes = kOffMaps + 3 * 128 + 1024;  // + alignment slack
  static constexpr int kThreads = 384;
  // setmaxnreg: the CTA's pool is 384 x 168 registers (__launch_bounds__(384, 1)), so producer
  // 24 / consumers 240 uses it all. fp8: the widening warps may take more (WEFT_SM90_FP8_PRODUCER_REGS,
  // sm90_fp8.cuh), the consumers what is left (multiples of 8).
  static constexpr int kProducerRegs = F8STAGES > 0 ? WEFT_SM90_FP8_PRODUCER_REGS : 24;
  static constexpr int kConsumerRegs = kProducerRegs == 24 ? 240 : (384 * 168 - 128 * kProducerRegs) / 256 / 8 * 8;
  static constexpr int kConsumerWarps = 8;
  // fp8: warps 1..3 of the producer warpgroup, and the TMA warp (0) where WEFT_SM90_FP8_TMA_WIDENS
  static constexpr int kWidenWarps = WEFT_SM90_FP8_TMA_WIDENS ? 4 : 3;
  static_assert(D % 64 == 0, "head_dim: whole 64-column halves");
  static_assert(QBUFS >= 1 && QBUFS <= 2 && (F8STAGES == 0 || (VSTAGES == STAGES && QBUFS == 1)),
                "two Q buffers and V stages apart from K: 16-bit pools only");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory");
  static_assert(kProducerRegs % 8 == 0 && kProducerRegs >= 24 && 128 * kProducerRegs + 256 * kConsumerRegs <= 384 * 168,
                "setmaxnreg: the producer and consumer registers fit the CTA pool");
};

// First key of the item's first tile (rounded down to a stage boundary) and the tile count.
template <int kBlockN>
__device__ __forceinline__ int first_tile_key(const ItemGeom& g) { return g.kv_lo & ~(kBlockN - 1); }
template <int kBlockN>
__device__ __forceinline__ int tile_count(const ItemGeom& g) {
  return g.kv_hi > g.kv_lo ? (g.kv_hi - first_tile_key<kBlockN>(g) + kBlockN - 1) / kBlockN : 0;
}

// Barriers (mbarriers, 8 bytes each, after the tiles): q_full, q_empty per Q buffer, then per
// stage k_full, k_empty, v_full, v_empty, v_tma (partial tiles: the V copy completes there, the
// producer zeroes the rows past kv_hi and then arrives on v_full); kMaxStages of each group.
template <class C>
struct Bars {
  uint64_t* base;
  static constexpr int kQ = 2 * C::kQBufs, kS = C::kMaxStages;
  __device__ __forceinline__ uint64_t* q_full(int i = 0) const { return base + i; }
  __device__ __forceinline__ uint64_t* q_empty(int i = 0) const { return base + C::kQBufs + i; }
  __device__ __forceinline__ uint64_t* k_full(int s) const { return base + kQ + s; }
  __device__ __forceinline__ uint64_t* k_empty(int s) const { return base + kQ + kS + s; }
  __device__ __forceinline__ uint64_t* v_full(int s) const { return base + kQ + 2 * kS + s; }
  __device__ __forceinline__ uint64_t* v_empty(int s) const { return base + kQ + 3 * kS + s; }
  __device__ __forceinline__ uint64_t* v_tma(int s) const { return base + kQ + 4 * kS + s; }
  // fp8 landing stages: full (TMA bytes), empty (the widening warps)
  __device__ __forceinline__ uint64_t* k8_full(int s) const { return base + kQ + 5 * kS + s; }
  __device__ __forceinline__ uint64_t* k8_empty(int s) const { return base + kQ + 5 * kS + C::kF8Stages + s; }
  __device__ __forceinline__ uint64_t* v8_full(int s) const { return base + kQ + 5 * kS + 2 * C::kF8Stages + s; }
  __device__ __forceinline__ uint64_t* v8_empty(int s) const { return base + kQ + 5 * kS + 3 * C::kF8Stages + s; }
};

// This CTA's copies of the maps with the row extents of the current plan (see sm90_launch.h,
// kMapBytesPerCta): param -> shared (lane i copies word i), global_dim of the row dimension
// replaced, published to global memory, acquired by every issuing lane. One warp.
template <class C>
__device__ __forceinline__ CUtensorMap* stage_maps(const KernelParams& P, unsigned char* smem, int lane) {
  const PrefillParams& p = P.p;
  CUtensorMap* maps = P.map_scratch + 3 * blockIdx.x;
  uint32_t* stage = reinterpret_cast<uint32_t*>(smem + C::kOffMaps);
  const uint32_t* src[3] = {reinterpret_cast<const uint32_t*>(&P.tm_q), reinterpret_cast<const uint32_t*>(&P.tm_k),
                            reinterpret_cast<const uint32_t*>(&P.tm_v)};
#pragma unroll
  for (int m = 0; m < 3; ++m) stage[m * 32 + lane] = src[m][lane];
  const int nseg = p.plan.header->batch;
  const int total_q = nseg > 0 ? p.plan.qo_indptr[nseg] : 0;
  const int total_kv = nseg > 0 && !p.paged ? p.kv_indptr[p.seg_request[nseg - 1] + 1] : 0;
  __syncwarp();
  const uint32_t sm = ptx90::smem_addr(stage);
  if (lane == 0) {
    ptx90::tensormap_replace_global_dim<2>(sm, max(total_q, 1));
    if (!p.paged) {
      ptx90::tensormap_replace_global_dim<2>(sm + 128, max(total_kv, 1));
      ptx90::tensormap_replace_global_dim<2>(sm + 256, max(total_kv, 1));
    }
  }
  __syncwarp();
#pragma unroll
  for (int m = 0; m < 3; ++m) ptx90::tensormap_publish(maps + m, sm + 128 * m);
#pragma unroll
  for (int m = 0; m < 3; ++m) ptx90::tensormap_acquire(maps + m);
  return maps;
}

}  // namespace weft::prefill::sm90
