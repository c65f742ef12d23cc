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
// (or the soft cap's argument), V's the output (sm90_consumer.cuh).
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
// bench/results/h100_fp8_sm90_check_348f4ed.txt, spread-form loop): ahead 1 at 24 producer
// registers 0.63-0.76x, ahead 4 at 40 (ptxas spills in the producer) 0.74-0.77x, ahead 2 at 40
// 0.77-0.88x, ahead 4 at 48 (consumers at 224) 0.80-0.89x. With SEXT + PAIRROWS below (shipped;
// h100_fp8_sm90_check_0500b1b.txt): 0.88-0.92x (e5m2 0.88-0.97x) against 0.73-0.81x for the
// previous loop in the same process set; four widening warps (TMA_WIDENS, sm90_pipeline.cuh) at
// ahead 4 / 48 registers 0.69-0.83x.
#ifndef WEFT_SM90_FP8_AHEAD
#define WEFT_SM90_FP8_AHEAD 2
#endif
static_assert(WEFT_SM90_FP8_AHEAD >= 1, "WEFT_SM90_FP8_AHEAD: at least one unit ahead");
//   WEFT_SM90_FP8_SEXT: 1 widens each pair through the sign-extended form (fp8_widen.cuh
//     widen_fp8_word_pair: prmt with sign replication, shift, AND, multiply), 0 through the
//     spread form (prmt, shift, two ANDs, multiply). Same bits (host test
//     Fp8Host.WideningSignExtendedFormMatches).
//   WEFT_SM90_FP8_PAIRROWS: 1 gives each quarter-warp two neighbouring key rows (lanes 0..3 the
//     first half of one row, lanes 4..7 the second half of the other), so every lane stores its
//     even chunk first and its stores stay conflict-free without the per-unit selects of the
//     store order (0: one row per quarter-warp, the second half's lanes store their odd chunk
//     first, 4 SEL per unit).
#ifndef WEFT_SM90_FP8_SEXT
#define WEFT_SM90_FP8_SEXT 1
#endif
#ifndef WEFT_SM90_FP8_PAIRROWS
#define WEFT_SM90_FP8_PAIRROWS 1
#endif

__device__ __forceinline__ uint4 lds128(uint32_t a) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
  return v;
}
__device__ __forceinline__ void sts128(uint32_t a, uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(a), "r"(x), "r"(y), "r"(z), "r"(w));
}

// 8 codes (two words) -> the 8 T values of one 16-byte chunk of the 16-bit stage, stored at a.
template <class T, class KV>
__device__ __forceinline__ void widen_store8(uint32_t a, uint32_t w0, uint32_t w1) {
#if WEFT_SM90_FP8_SEXT
  sts128(a, fp8bits::widen_fp8_word_pair<T, KV, 0>(w0), fp8bits::widen_fp8_word_pair<T, KV, 1>(w0),
         fp8bits::widen_fp8_word_pair<T, KV, 0>(w1), fp8bits::widen_fp8_word_pair<T, KV, 1>(w1));
#else
  sts128(a, fp8bits::widen_fp8_pair<T, KV>(__byte_perm(w0, 0u, 0x1404)),
         fp8bits::widen_fp8_pair<T, KV>(__byte_perm(w0, 0u, 0x3424)),
         fp8bits::widen_fp8_pair<T, KV>(__byte_perm(w1, 0u, 0x1404)),
         fp8bits::widen_fp8_pair<T, KV>(__byte_perm(w1, 0u, 0x3424)));
#endif
}

// One landed fp8 tile (src, [kBlockN][D] bytes) -> its 16-bit stage (dst, 128-byte swizzle, 64-
// column halves); shared-memory addresses. wid: widening warp 0..kWidenWarps-1.
// A lane widens 16-code units (one 16-byte load -> two 16-byte stores): D / 16 lanes per key row
// (8 at d128), 4 rows per warp pass, the warps interleaved by pass, so a lane's units are rows
// r0, r0 + kStep, ... (kStep = 4 kWidenWarps: 12 with three warps, 11 or 10 units per lane and
// tile; 16 with four, 8 units). SASS per unit (SEXT + PAIRROWS, bf16 targets): LDS.128, 8 PRMT,
// 8 IMAD.SHL, 8 LOP3, 8 HMUL2, 2 STS.128 with immediate offsets: ~36 instructions, 17 of them
// on the integer pipe, where the spread form with per-unit selects took ~50, 36. Shared memory is explicit (ld/st.shared on 32-bit addresses):
// through generic pointers (the first version) the compiler could not move a load above the
// previous unit's store (possible alias) and every unit paid a full load -> convert -> store round
// trip. Here the loads run WEFT_SM90_FP8_AHEAD units ahead of the conversions (asm volatile keeps
// that issue order).
// Banks: a lane's two chunks (2c, 2c + 1) of the 16-bit row sit at swizzled positions p and p ^ 1
// of one 128-byte half (p = (2c & 7) ^ (r & 7)). PAIRROWS: quarter-warp q of a pass holds rows
// R + q and R + (q ^ 1) (R even): lanes 0..3 the chunks c = 0..3 of one, lanes 4..7 the chunks
// c = 4..7 of the other; loads read bytes 0..63 of one 128-byte row and 64..127 of the next
// (distinct banks), even-chunk stores hit the even positions ^ (r & 7) of half 0 and, as the two
// rows differ in bit 0, the odd ones of half 1 (8 distinct positions), odd-chunk stores the
// reverse. Else: one row per quarter-warp, the lanes of the second half store their odd chunk
// first (same argument, per lane selects).
template <int D, class T, class KV, class C>
__device__ __forceinline__ void widen_tile(uint32_t dst, uint32_t src, int wid, int lane) {
  constexpr int kLanesPerRow = D / 16;
  constexpr int kRowsPerPass = 32 / kLanesPerRow;
  static_assert(D == 128, "fp8 sm90 widening: 8 lanes per key row (the bank argument below)");
  constexpr int kStep = C::kWidenWarps * kRowsPerPass;          // rows between a lane's units
  constexpr int kUnits = (C::kBlockN + kStep - 1) / kStep;       // units of the lane with the most
  constexpr int kAhead = WEFT_SM90_FP8_AHEAD < kUnits ? WEFT_SM90_FP8_AHEAD : kUnits;
  constexpr bool kPairRows = WEFT_SM90_FP8_PAIRROWS != 0;
  static_assert(kStep % 2 == 0, "PAIRROWS: a lane's rows keep their partner row (r ^ 1) in its pass");
  const int c = lane % kLanesPerRow;
  const int q = lane / kLanesPerRow;
  const int r0 = wid * kRowsPerPass + (kPairRows ? q ^ (c >> 2) : q);
  const int h = kPairRows ? 0 : (c >> 2) & 1;                    // 1: odd chunk first
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
  const bool full = C::kBlockN % kStep == 0 || r0 + (kUnits - 1) * kStep < C::kBlockN;
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
      // (The row offset added last, so the two lane bases out + pos, out + (pos ^ 16) are hoisted
      // and each store takes an immediate offset.)
      const uint32_t a0 = out + (pos ^ sw) + i * kStep * 128, a1 = out + (pos ^ sw ^ 16u) + i * kStep * 128;
      if (kPairRows) {  // codes 0..7 -> chunk 2c at a0, 8..15 -> chunk 2c + 1 at a1
        widen_store8<T, KV>(a0, v[i].x, v[i].y);
        widen_store8<T, KV>(a1, v[i].z, v[i].w);
      } else {
        widen_store8<T, KV>(a0, h ? v[i].z : v[i].x, h ? v[i].w : v[i].y);  // first: codes 8h .. 8h + 7
        widen_store8<T, KV>(a1, h ? v[i].x : v[i].z, h ? v[i].y : v[i].w);
      }
    }
  }
  // The consumers' wgmma (async proxy) reads what these generic-proxy stores wrote.
  ptx90::fence_proxy_async_shared();
  __syncwarp();
}

// One tile of the producer's sequence (tile_cnt: its index over the CTA's items): K then V, each
// after its fp8 stage landed and the consumers released the 16-bit stage; lane 0 arrives on the
// fp8 stage's empty barrier and the 16-bit stage's full one.
template <int D, class T, class KV, class C>
__device__ __forceinline__ void widen_kv_tile(uint32_t sb, Bars<C> b, uint32_t tile_cnt, int wid, int lane) {
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

// The widening warps' loop (warps 1..3 of the producer warpgroup): the producer's tile sequence
// (same items, same tile count). The TMA warp, where it widens too, calls widen_kv_tile from its
// own loop (producer, sm90_producer.cuh).
template <int D, class T, class KV, class C, class Rows>
__device__ __forceinline__ void widen_warps(const KernelParams& P, const Rows& rows, unsigned char* smem, Bars<C> b,
                                            int wid, int lane) {
  const PrefillParams& p = P.p;
  uint32_t tile_cnt = 0;
  const uint32_t sb = ptx90::smem_addr(smem);
  const CtaItems items = rows.items(p);
  for (int w = items.begin; w < items.end; ++w) {
    const int n_tiles = tile_count<C::kBlockN>(rows.geometry(p, w, items.fold));
    for (int t = 0; t < n_tiles; ++t, ++tile_cnt) widen_kv_tile<D, T, KV, C>(sb, b, tile_cnt, wid, lane);
  }
}

}  // namespace weft::prefill::sm90
