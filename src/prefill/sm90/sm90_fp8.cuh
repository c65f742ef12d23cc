// Hopper prefill on fp8 K/V pools (issue 23): the widening warps.
//
// wgmma reads its B operand (K of S = Q K^T, V of O += P V) from shared memory in the A operand's
// type, and with bf16 Q / P that is bf16: fp8 B tiles need a 16-bit copy (wgmma's fp8 forms take
// fp8 on both sides). So per tile the producer warp lands the fp8 K and V tiles (half the TMA
// bytes) in their own stages (Cfg::kF8Stages, [kBlockN][D] bytes, unswizzled), and the three
// other warps of the producer warpgroup, idle in the 16-bit kernel, widen them into the 16-bit
// stages the unchanged consumers read (128-byte swizzle, 64-column halves), exact
// (common/fp8_widen.cuh: bit moves + one bf16x2 FMA per pair). Hand-offs: k8_full / v8_full
// (TMA bytes) -> widen -> k_full / v_full (kWidenWarps arrivals) and k8_empty / v8_empty
// (kWidenWarps arrivals) back to the producer; the widening of tile t+1 overlaps the consumers'
// math on tile t. The scales stay out of the tiles: K's multiplies the softmax exponent scale
// (or the soft cap's argument), V's the output (sm90_kernel.cuh consumer).
//
// Work split and banks: widen_tile. Registers: the producer warpgroup runs at Cfg::kProducerRegs
// (WEFT_SM90_FP8_PRODUCER_REGS, sm90_pipeline.cuh), the consumers at what the CTA's pool leaves.
#pragma once
#include "common/fp8_widen.cuh"
#include "common/ptx_sm90.cuh"
#include "prefill/kernel/load.cuh"
#include "prefill/sm90/sm90_pipeline.cuh"

namespace weft::prefill::sm90 {

// Widening knobs. The shipped values are the defaults; an experiments build may override them
// with -D (scripts/diag/fp8_sm90_check.sh VARIANTS: one tree per setting, A/B in one device call;
// the library reads no environment).
//   WEFT_SM90_FP8_AHEAD: units a lane has loaded ahead of the one it converts (>= 1).
// Measured (H100, e4m3 vs the bf16 sm90 prefill of the same process, 4 shapes;
// bench/results/h100_fp8_sm90_check_348f4ed.txt): ahead 1 at 24 producer registers 0.63-0.76x,
// ahead 4 at 40 (ptxas spills in the producer) 0.74-0.77x, ahead 2 at 40 (shipped) 0.77-0.88x,
// ahead 4 at 48 (consumers at 224) 0.80-0.89x: within 5% of the shipped setting either way per
// shape, and not run under the sanitizer, so not taken.
#ifndef WEFT_SM90_FP8_AHEAD
#define WEFT_SM90_FP8_AHEAD 2
#endif
static_assert(WEFT_SM90_FP8_AHEAD >= 1, "WEFT_SM90_FP8_AHEAD: at least one unit ahead");

__device__ __forceinline__ uint4 lds128(uint32_t a) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
  return v;
}
__device__ __forceinline__ void sts128(uint32_t a, uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(a), "r"(x), "r"(y), "r"(z), "r"(w));
}

// One landed fp8 tile (src, [kBlockN][D] bytes) -> its 16-bit stage (dst, 128-byte swizzle, 64-
// column halves); shared-memory addresses. wid: widening warp 0..kWidenWarps-1.
// A lane widens 16-code units (one 16-byte load -> two 16-byte stores): D / 16 lanes per key row
// (8 at d128), 32 / (D / 16) rows per warp pass, the warps interleaved by row, so a lane's units
// are rows r0, r0 + kStep, ... (kStep = 12 at d128: 11 or 10 units per lane and tile). Shared
// memory is explicit (ld/st.shared on 32-bit addresses): through generic pointers (the first
// version) the compiler could not move a load above the previous unit's store (possible alias)
// and every unit paid a full load -> convert -> store round trip. Here the loads run
// WEFT_SM90_FP8_AHEAD units ahead of the conversions (asm volatile keeps that issue order).
// Banks: a quarter-warp's loads read one 128-byte key row (conflict-free). A lane's two chunks
// (2c, 2c + 1) of the 16-bit row sit at swizzled positions p and p ^ 1 of one 128-byte half;
// lanes of the first half of a row store their even chunk first, lanes of the second half their
// odd one, so each store instruction's quarter-warp covers 8 distinct positions (conflict-free).
template <int D, class T, class KV, class C>
__device__ __forceinline__ void widen_tile(uint32_t dst, uint32_t src, int wid, int lane) {
  constexpr int kLanesPerRow = D / 16;
  constexpr int kRowsPerPass = 32 / kLanesPerRow;
  static_assert(D == 128, "fp8 sm90 widening: 8 lanes per key row (the bank argument below)");
  constexpr int kStep = C::kWidenWarps * kRowsPerPass;          // rows between a lane's units
  constexpr int kUnits = (C::kBlockN + kStep - 1) / kStep;       // units of the lane with the most
  constexpr int kAhead = WEFT_SM90_FP8_AHEAD < kUnits ? WEFT_SM90_FP8_AHEAD : kUnits;
  const int c = lane % kLanesPerRow;
  const int r0 = wid * kRowsPerPass + lane / kLanesPerRow;
  const int h = (c >> 2) & 1;                                    // 1: odd chunk first
  // Chunk 2c + h of row r sits at half (2c) / 8, position ((2c + h) & 7) ^ (r & 7); the other
  // chunk at that position ^ 1 (16 bytes over).
  const uint32_t in = src + r0 * D + c * 16;
  const uint32_t out = dst + ((2 * c) >> 3) * C::kKVHalfBytes + r0 * 128;
  const uint32_t pos = static_cast<uint32_t>((((2 * c + h) & 7) ^ (r0 & 7)) << 4);
#ifdef WEFT_SM90_FP8_NO_WIDEN
  // Diagnostic build only (scripts/diag/fp8_sm90_check.sh NOWIDEN=1, CMAKE_CUDA_FLAGS): no
  // widening, the consumers read whatever the 16-bit stages hold (wrong results): the time of the
  // fp8 pipeline without its conversion work, the bound of this design. Never shipped.
  const bool full = false;
  if (true) return;
#else
  // Lanes hold kUnits or kUnits - 1 units (rows r0 + i kStep < kBlockN): only the last may be absent.
  static_assert((kUnits - 1) * kStep < C::kBlockN, "every lane holds at least kUnits - 1 units");
  const bool full = r0 + (kUnits - 1) * kStep < C::kBlockN;
#endif
  // Unit i's load; every lane loads all kUnits (a missing last unit reloads the first one: the
  // loads stay unconditional, so the compiler keeps only the units in flight live).
  auto load = [&](int i) { return lds128(in + (i < kUnits - 1 || full ? i : 0) * kStep * D); };
  uint4 v[kUnits];
#pragma unroll
  for (int i = 0; i < kAhead; ++i) v[i] = load(i);
#pragma unroll
  for (int i = 0; i < kUnits; ++i) {
    if (i + kAhead < kUnits) v[i + kAhead] = load(i + kAhead);
    if (i < kUnits - 1 || full) {
      // Row r0 + i kStep: as kStep % 4 == 0, its swizzle term (r & 7) is (r0 & 7) ^ ((i kStep) & 7)
      // (adding 0 or 4 mod 8 flips bit 2 at most): the lane's position XOR a constant.
      static_assert(kStep % 4 == 0, "row steps keep the swizzle term a constant XOR");
      const uint32_t sw = (static_cast<uint32_t>(i * kStep) & 7u) << 4;
      const uint32_t a = out + i * kStep * 128 + (pos ^ sw);
      const uint32_t w0 = h ? v[i].z : v[i].x, w1 = h ? v[i].w : v[i].y;  // first: codes 8h .. 8h + 7
      const uint32_t w2 = h ? v[i].x : v[i].z, w3 = h ? v[i].y : v[i].w;
      sts128(a, fp8bits::widen_fp8_pair<T, KV>(__byte_perm(w0, 0u, 0x1404)),
             fp8bits::widen_fp8_pair<T, KV>(__byte_perm(w0, 0u, 0x3424)),
             fp8bits::widen_fp8_pair<T, KV>(__byte_perm(w1, 0u, 0x1404)),
             fp8bits::widen_fp8_pair<T, KV>(__byte_perm(w1, 0u, 0x3424)));
      sts128(a ^ 16u, fp8bits::widen_fp8_pair<T, KV>(__byte_perm(w2, 0u, 0x1404)),
             fp8bits::widen_fp8_pair<T, KV>(__byte_perm(w2, 0u, 0x3424)),
             fp8bits::widen_fp8_pair<T, KV>(__byte_perm(w3, 0u, 0x1404)),
             fp8bits::widen_fp8_pair<T, KV>(__byte_perm(w3, 0u, 0x3424)));
    }
  }
  // The consumers' wgmma (async proxy) reads what these generic-proxy stores wrote.
  ptx90::fence_proxy_async_shared();
  __syncwarp();
}

// The widening warps' loop: the producer's tile sequence (same items, same tile count), K then V
// of each tile.
template <int D, class T, class KV, class C>
__device__ __forceinline__ void widen_warps(const KernelParams& P, unsigned char* smem, Bars<C> b, int wid,
                                            int lane) {
  const PrefillParams& p = P.p;
  uint32_t tile_cnt = 0;
  const uint32_t sb = ptx90::smem_addr(smem);
  const CtaItems items = cta_items(p);
  for (int w = items.begin; w < items.end; ++w) {
    const int n_tiles = tile_count<C::kBlockN>(item_geometry(p, w, items.fold));
    for (int t = 0; t < n_tiles; ++t, ++tile_cnt) {
      const int s8 = tile_cnt % C::kF8Stages, s = tile_cnt % C::kStages;
      const uint32_t ph8 = (tile_cnt / C::kF8Stages) & 1, ph = (tile_cnt / C::kStages) & 1;
      ptx90::mbar_wait(b.k8_full(s8), ph8);
      ptx90::mbar_wait(b.k_empty(s), ph ^ 1);
      widen_tile<D, T, KV, C>(sb + C::kOffK + s * C::kKVBytes, sb + C::kOffK8 + s8 * C::kKV8Bytes, wid, lane);
      if (lane == 0) {
        ptx90::mbar_arrive(b.k8_empty(s8));
        ptx90::mbar_arrive(b.k_full(s));
      }
      ptx90::mbar_wait(b.v8_full(s8), ph8);
      ptx90::mbar_wait(b.v_empty(s), ph ^ 1);
      widen_tile<D, T, KV, C>(sb + C::kOffV + s * C::kKVBytes, sb + C::kOffV8 + s8 * C::kKV8Bytes, wid, lane);
      if (lane == 0) {
        ptx90::mbar_arrive(b.v8_empty(s8));
        ptx90::mbar_arrive(b.v_full(s));
      }
    }
  }
}

}  // namespace weft::prefill::sm90
