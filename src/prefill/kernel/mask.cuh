// Variant role: logits transform (scale, soft-cap) and masks (bottom-right causal, sliding
// window, custom bit mask, KV padding). Semantics: include/weft/attention.h.
//
// Logits: raw scores stay raw and the softmax folds sm_scale * log2(e) into its exponent FFMA
// (no soft-cap); with a soft-cap the scale goes into the tanh argument / output and the softmax
// runs with scale 1.
// Masks run only on boundary tiles: a tile is interior when no row of the item can exclude any
// of its keys (tile_needs_mask is uniform over the CTA, so the branch does not diverge).
#pragma once
#include <cmath>
#include <cstdint>

#include "prefill/kernel/load.cuh"
#include "prefill/kernel/params.h"

namespace weft::prefill {

// Effective key range of an item: [kv_begin, kv_end) of the plan, trimmed by the causal limit of
// its last row and the window limit of its first row (keys outside it are masked for every row).
__device__ __forceinline__ void trim_kv_range(const PrefillParams& p, ItemGeom& g, int kv_begin,
                                              int kv_end) {
  const int rows_last = g.row_end - 1;
  const int p_min = g.pos0 + g.row_begin / p.group_size;
  const int p_max = g.pos0 + rows_last / p.group_size;
  int lo = kv_begin, hi = kv_end;
  if (p.causal) hi = min(hi, p_max + 1);
  if (p.window_left >= 0) lo = max(lo, p_min - p.window_left);
  g.kv_lo = lo;
  g.kv_hi = max(hi, lo);
}

// True when some row of the item may exclude some key of [ts, ts + CTA_KV).
__device__ __forceinline__ bool tile_needs_mask(const PrefillParams& p, const ItemGeom& g, int ts,
                                                int cta_kv) {
  const int te = ts + cta_kv;  // exclusive
  if (te > g.kv_hi || p.custom_mask != nullptr) return true;
  const int p_min = g.pos0 + g.row_begin / p.group_size;
  const int p_max = g.pos0 + (g.row_end - 1) / p.group_size;
  if (p.causal && te - 1 > p_min) return true;
  if (p.window_left >= 0 && ts < p_max - p.window_left) return true;
  return false;
}

// Soft-cap: raw scores -> log2-domain logits cap * log2(e) * tanh(s * sm_scale / cap) (the
// softmax then runs with scale 1). Without soft-cap the scores stay raw and the softmax folds
// sm_scale * log2(e) into its exponent FFMA (mainloop.cuh). One uniform branch per tile.
template <class Tr>
__device__ __forceinline__ void prepare_logits(float (&s)[Tr::kMB][Tr::kFragS][4],
                                               const PrefillParams& p) {
  if (p.softcap_pre == 0.f) return;
#pragma unroll
  for (int mb = 0; mb < Tr::kMB; ++mb)
#pragma unroll
    for (int n = 0; n < Tr::kFragS; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[mb][n][e] = p.softcap_post * tanhf(s[mb][n][e] * p.softcap_pre);
}

__device__ __forceinline__ bool custom_bit(const PrefillParams& p, const ItemGeom& g, int mrow,
                                           int j) {
  const int64_t k = static_cast<int64_t>(mrow) * g.real_kv_len + j;
  const uint8_t byte = __ldg(p.custom_mask + __ldg(p.mask_indptr + g.request) + (k >> 3));
  return (byte >> (k & 7)) & 1;
}

// Per-element mask of a boundary tile. s[mb][n][e]: row block mb of the warp, n8 block n of the
// warp's keys, element e (e = 0,1: row g, keys 2t, 2t+1; e = 2,3: row g + 8). The row positions
// are recomputed here (boundary tiles only) rather than kept in registers across the loop.
// Padding rows of a partial tile (row >= row_end) are fully masked, so they never read past the
// request's custom-mask bits.
template <class Tr>
__device__ __forceinline__ void apply_mask(float (&s)[Tr::kMB][Tr::kFragS][4],
                                           const PrefillParams& p, const ItemGeom& g,
                                           int warp_row0, int key0, int lane) {
#pragma unroll
  for (int mb = 0; mb < Tr::kMB; ++mb) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = g.row_begin + warp_row0 + mb * 16 + (lane >> 2) + 8 * h;
      const int tok = row / p.group_size;
      const int pos = g.pos0 + tok;     // absolute KV position of the row's query token
      const int mrow = g.token0 + tok;  // row of the request's custom mask
      const bool valid = row < g.row_end;
#pragma unroll
      for (int n = 0; n < Tr::kFragS; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int j = key0 + n * 8 + 2 * (lane & 3) + e;
          bool ok = valid && j < g.kv_hi && j >= g.kv_lo;
          if (p.causal) ok = ok && j <= pos;
          if (p.window_left >= 0) ok = ok && j >= pos - p.window_left;
          if (ok && p.custom_mask != nullptr) ok = custom_bit(p, g, mrow, j);
          if (!ok) s[mb][n][2 * h + e] = -INFINITY;
        }
      }
    }
  }
}

}  // namespace weft::prefill
