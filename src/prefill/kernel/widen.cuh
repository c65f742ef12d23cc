// fp8 K/V (PrefillTraits::kFp8): the landed fp8 tile of one K or V step -> the swizzled 16-bit tile
// the unchanged mainloop reads (exact: common/fp8_widen.cuh). Done ONCE per CTA and tile, all
// threads sharing the work (a tile serves every query row of the CTA: 128 rows at the d128 x 128
// tile), between the step's barrier and a second one (prefill_kernel.cuh).
#pragma once
#include "common/rtc_compat.h"

#include "common/fp8_widen.cuh"
#include "prefill/kernel/traits.cuh"

namespace weft::prefill {

// src: [CTA_KV][D] fp8 bytes, unswizzled (copy_kv_tile); dst: [CTA_KV][D] T, swz(). Thread tid
// widens 16-byte chunks tid, tid + kThreads, ...: a warp-wide load reads 4 whole 128-byte rows
// (conflict-free); each chunk c of row r becomes 16-bit chunks 2c and 2c + 1, stored in the
// order that puts the 8 lanes of a store phase (one row, c = 0..7) on 8 distinct bank groups
// (c >= 4 stores 2c + 1 first: chunks 0 2 4 6 9 11 13 15, distinct mod 8 after the row XOR).
// Rows past the item's keys were zero-filled by cp.async: they widen to zeros.
template <class Tr>
__device__ __forceinline__ void widen_kv_tile(typename Tr::Elem* dst, const unsigned char* src, int tid) {
  using T = typename Tr::Elem;
  constexpr int kChunks8 = Tr::kHeadDim / 16;  // 16-byte fp8 chunks per row
  constexpr int kPerThread = Tr::kCtaKV * kChunks8 / Tr::kThreads;
  static_assert(Tr::kCtaKV * kChunks8 % Tr::kThreads == 0, "chunks split evenly over threads");
  // (The 128-row tile holds 128 O accumulators here: its fp8 kernel spills 40-48 bytes, ptxas,
  // where the bf16 one spills none; not unrolling this loop spilled more, 64.)
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int idx = tid + i * Tr::kThreads;
    const int r = idx / kChunks8, c = idx % kChunks8;
    const uint4 v8 = *reinterpret_cast<const uint4*>(src + idx * 16);
    uint4 lo, hi;
    fp8bits::widen16<T, typename Tr::KVElem>(v8, lo, hi);
    const int flip = (c >> 2) & 1;
    *reinterpret_cast<uint4*>(dst + swz<Tr::kHeadDim>(r, 2 * c + flip)) = flip ? hi : lo;
    *reinterpret_cast<uint4*>(dst + swz<Tr::kHeadDim>(r, 2 * c + 1 - flip)) = flip ? lo : hi;
  }
}

}  // namespace weft::prefill
