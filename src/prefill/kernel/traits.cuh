// Compile-time shape of one prefill kernel instantiation and its shared-memory layout.
#pragma once
#include "common/rtc_compat.h"

#include "common/ptx.cuh"
#include "prefill/kernel/params.h"
#include "prefill/prefill_config.h"

namespace weft::prefill {

// KV: the K/V pools' element type: T, or (bf16 Q / O, head_dim 128) an fp8 type, __nv_fp8_e4m3 /
// __nv_fp8_e5m2 (kFp8: tiles land as fp8 bytes and are widened to T once per CTA in shared
// memory; see kOffK8 below and prefill_kernel.cuh).
template <int HEAD_DIM, int CTA_Q, int CTA_KV, class T, class KV = T>
struct PrefillTraits {
  using Elem = T;
  using KVElem = KV;
  static constexpr bool kFp8 = sizeof(KV) == 1;
  // 16-byte chunks per K/V row as stored in the pool and landed by cp.async (= kChunks for 16-bit
  // pools; half of it for fp8).
  static constexpr int kKVChunks = HEAD_DIM * static_cast<int>(sizeof(KV)) / 16;
  static constexpr int kHeadDim = HEAD_DIM;
  static constexpr int kCtaQ = CTA_Q;
  static constexpr int kCtaKV = CTA_KV;
  static constexpr int kRowsPerWarp = rows_per_warp_of(HEAD_DIM, CTA_Q);  // 16 or 32
  static constexpr int kMB = kRowsPerWarp / 16;                          // m16 row blocks per warp
  static constexpr int kWarpsQ = warps_q_of(HEAD_DIM, CTA_Q);
  static constexpr int kWarpsKV = warps_kv_of(HEAD_DIM, CTA_Q, CTA_KV);  // warps sharing one row block
  static constexpr int kWarps = kWarpsQ * kWarpsKV;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kKVPerWarp = CTA_KV / kWarpsKV;          // keys per warp per KV tile
  static constexpr int kFragS = kKVPerWarp / 8;                 // n8 blocks of S per warp
  static constexpr int kFragO = HEAD_DIM / 8;                   // n8 blocks of O per warp
  static constexpr int kKStepsQK = HEAD_DIM / 16;               // k16 steps of Q.K^T
  static constexpr int kKStepsPV = kKVPerWarp / 16;             // k16 steps of P.V
  static constexpr int kChunks = HEAD_DIM / 8;                  // 16-byte chunks per row
  static constexpr bool kQInRegs = q_in_regs(HEAD_DIM, CTA_Q);
  static constexpr bool kBias = bias_supported(HEAD_DIM, CTA_Q);  // ALiBi step compiled in
  static constexpr int kKStages = weft::prefill::kKStages;
  static constexpr int kVStages = weft::prefill::kVStages;
  // __launch_bounds__ min CTAs per SM = 1 (register cap 255). Measured: the 16-row d128 tiles
  // need ~230-245 registers (O 64 + Q 32 + S 32 accumulators plus hoisted ldmatrix addresses);
  // capping at 128 (2 CTAs of 256 threads) spills 432 B, at 168 (3 CTAs of 128) 128 B. With 255,
  // 4-warp tiles (incl. the 32-row d128 tile) fit 2 CTAs per SM and 8-warp tiles 1.
  static constexpr int kMinCtasPerSM = 1;

  // Shared memory (16-bit elements): Q [CTA_Q][D], K [3][CTA_KV][D], V [2][CTA_KV][D],
  // every row XOR-swizzled on 16-byte chunks (see swz()).
  static constexpr int kQElems = CTA_Q * HEAD_DIM;
  static constexpr int kKVTileElems = CTA_KV * HEAD_DIM;
  static constexpr int kOffK = kQElems;
  static constexpr int kOffV = kOffK + kKStages * kKVTileElems;
  static constexpr int kSmemBytes = (kOffV + kVStages * kKVTileElems) * 2;

  static_assert(kSmemBytes == static_cast<int>(smem_bytes_of(HEAD_DIM, CTA_Q, CTA_KV)), "smem");
  // fp8 pools use the same shared memory (same occupancy and plans as the 16-bit kernel):
  // 16-bit K stage 0 and V stage 0 hold the widened tiles the mainloop reads; the fp8 landing
  // stages (3 K, 2 V, kKVTileBytes8 each, unswizzled [CTA_KV][D] bytes) sit in the otherwise
  // unused 16-bit K stages 1-2 (room for 4) and V stage 1 (room for 2). Byte offsets.
  static constexpr int kKVTileBytes8 = CTA_KV * HEAD_DIM;
  static constexpr int kOffK8 = (kOffK + kKVTileElems) * 2;
  static constexpr int kOffV8 = (kOffV + kKVTileElems) * 2;
  static_assert(!kFp8 || (HEAD_DIM == 128 && sizeof(T) == 2),
                "fp8 K/V: head_dim 128 (128-byte fp8 rows: 8 chunks, whole-row copies) and 16-bit Q / O");
  static_assert(kFp8 || sizeof(KV) == sizeof(T), "16-bit K/V have Q's type");
  static_assert(kKVPerWarp % 16 == 0, "each warp needs whole k16 steps of P.V");
  static_assert(kThreads % kChunks == 0, "loaders assume a fixed chunk column per thread");
  static_assert(kWarpsKV == 1 || kMB == 1, "cross-warp merge handles one row block per warp");
  static_assert(!kQInRegs || kMB == 1, "Q fragments in registers only for 16-row warps");
  static_assert(HEAD_DIM % 64 == 0, "swizzle assumes rows of >= 128 bytes");
  // Cross-warp merge (kWarpsKV > 1) reuses the K/V stages as fp32 scratch.
  static constexpr int kMergeFloats = kWarps * 32 * (kFragO * 4 + 4);
  static_assert(kWarpsKV == 1 || kMergeFloats * 4 <= (kKStages + kVStages) * kKVTileElems * 2,
                "merge scratch");
};

// Swizzled element offset of 16-byte chunk `chunk` of row `row` in a [rows][D] tile: chunk bits
// 0..2 are XORed with row bits 0..2, so the 8 row addresses of one ldmatrix 8x8 matrix (same
// logical chunk, 8 consecutive rows) fall in 8 distinct 16-byte bank groups (conflict-free),
// and a row of >= 128 bytes keeps its chunks inside the row.
template <int HEAD_DIM>
__device__ __forceinline__ int swz(int row, int chunk) {
  return row * HEAD_DIM + ((chunk ^ (row & 7)) << 3);
}

}  // namespace weft::prefill
