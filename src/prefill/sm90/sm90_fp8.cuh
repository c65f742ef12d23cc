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
// Work split: a warp widens whole key rows, D / 8 lanes per row (8 codes -> one 16-byte chunk of
// the 16-bit row): 2 rows per warp pass at d128, the three warps interleaved by row. A warp's
// 8-byte loads read 256 consecutive bytes (conflict-free); each quarter-warp's 16-byte stores
// cover the 8 distinct swizzled chunks of one 128-byte row (conflict-free).
// Registers: the warpgroup runs at Cfg::kProducerRegs (24); the loop keeps a handful live.
#pragma once
#include "common/fp8_widen.cuh"
#include "common/ptx_sm90.cuh"
#include "prefill/kernel/load.cuh"
#include "prefill/sm90/sm90_pipeline.cuh"

namespace weft::prefill::sm90 {

// One landed fp8 tile (src) -> its 16-bit stage (dst). wid: widening warp 0..kWidenWarps-1.
template <int D, class T, class KV, class C>
__device__ __forceinline__ void widen_tile(unsigned char* dst, const unsigned char* src, int wid, int lane) {
  constexpr int kUnits = D / 8;               // 8-code units per key row
  constexpr int kRowsPerPass = 32 / kUnits;   // rows of one warp pass (2 at d128)
  static_assert(32 % kUnits == 0, "a warp pass covers whole rows (head_dim <= 256)");
  constexpr int kStep = C::kWidenWarps * kRowsPerPass;  // rows between a warp's passes
  const int c = lane % kUnits;
  int r = wid * kRowsPerPass + lane / kUnits;
  const unsigned char* in = src + r * D + c * 8;
  unsigned char* out = dst + (c >> 3) * C::kKVHalfBytes;  // this lane's 64-column half
  const int cx = c & 7;                                   // its 16-byte chunk of the 128-byte row
#ifdef WEFT_SM90_FP8_NO_WIDEN
  // Diagnostic build only (scripts/diag/fp8_sm90_check.sh NOWIDEN=1, CMAKE_CUDA_FLAGS): no
  // widening, the consumers read whatever the 16-bit stages hold (wrong results): the time of the
  // fp8 pipeline without its conversion work, the bound of this design. Never shipped.
  r = C::kBlockN;
#endif
#pragma unroll 2
  for (; r < C::kBlockN; r += kStep, in += kStep * D) {
    const uint2 v = *reinterpret_cast<const uint2*>(in);
    uint4 o;
    o.x = fp8bits::widen_fp8_pair<T, KV>(__byte_perm(v.x, 0u, 0x1404));
    o.y = fp8bits::widen_fp8_pair<T, KV>(__byte_perm(v.x, 0u, 0x3424));
    o.z = fp8bits::widen_fp8_pair<T, KV>(__byte_perm(v.y, 0u, 0x1404));
    o.w = fp8bits::widen_fp8_pair<T, KV>(__byte_perm(v.y, 0u, 0x3424));
    *reinterpret_cast<uint4*>(out + r * 128 + ((cx ^ (r & 7)) << 4)) = o;  // 128-byte swizzle
  }
  // The consumers' wgmma (async proxy) reads what these generic stores wrote.
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
  const CtaItems items = cta_items(p);
  for (int w = items.begin; w < items.end; ++w) {
    const int n_tiles = tile_count<C::kBlockN>(item_geometry(p, w, items.fold));
    for (int t = 0; t < n_tiles; ++t, ++tile_cnt) {
      const int s8 = tile_cnt % C::kF8Stages, s = tile_cnt % C::kStages;
      const uint32_t ph8 = (tile_cnt / C::kF8Stages) & 1, ph = (tile_cnt / C::kStages) & 1;
      ptx90::mbar_wait(b.k8_full(s8), ph8);
      ptx90::mbar_wait(b.k_empty(s), ph ^ 1);
      widen_tile<D, T, KV, C>(smem + C::kOffK + s * C::kKVBytes, smem + C::kOffK8 + s8 * C::kKV8Bytes, wid, lane);
      if (lane == 0) {
        ptx90::mbar_arrive(b.k8_empty(s8));
        ptx90::mbar_arrive(b.k_full(s));
      }
      ptx90::mbar_wait(b.v8_full(s8), ph8);
      ptx90::mbar_wait(b.v_empty(s), ph ^ 1);
      widen_tile<D, T, KV, C>(smem + C::kOffV + s * C::kKVBytes, smem + C::kOffV8 + s8 * C::kKV8Bytes, wid, lane);
      if (lane == 0) {
        ptx90::mbar_arrive(b.v8_empty(s8));
        ptx90::mbar_arrive(b.v_full(s));
      }
    }
  }
}

}  // namespace weft::prefill::sm90
