// Variant role: logits transform (scale, soft-cap) and masks (bottom-right causal, sliding
// window, custom bit mask, KV padding). Semantics: include/weft/attention.h.
//
// Logits are kept in the log2 domain: x = s * log2(e), so softmax uses ex2 directly and the
// scale is folded into one multiply (no soft-cap) or into the tanh argument / output (soft-cap).
// Masks run only on boundary tiles: a tile is interior when no row of the item can exclude any
// of its keys (tile_needs_mask is uniform over the CTA, so the branch does not diverge).
#pragma once
#include <cmath>
#include <cstdint>

#include "prefill/kernel/load.cuh"
#include "prefill/kernel/params.h"

namespace weft::prefill {

// Positions of the two rows a thread owns in the m16n8 accumulator layout (rows g and g + 8).
struct RowMask {
  int32_t pos[2];    // absolute KV position of the row's query token (p in attention.h)
  int32_t mrow[2];   // row index in the request's custom mask (token inside the request)
  bool valid[2];     // row < row_end (padding rows of a partial tile are fully masked on
                     // boundary tiles, so they never read past the request's mask bits)
};

__device__ __forceinline__ RowMask make_row_mask(const PrefillParams& p, const ItemGeom& g,
                                                 int first_row_of_warp, int lane) {
  RowMask rm;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = g.row_begin + first_row_of_warp + (lane >> 2) + 8 * h;
    const int tok = row / p.group_size;
    rm.pos[h] = g.pos0 + tok;
    rm.mrow[h] = g.token0 + tok;
    rm.valid[h] = row < g.row_end;
  }
  return rm;
}

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

// Raw score (fp32 accumulator of q.k) -> log2-domain logit.
__device__ __forceinline__ float logit_log2(const PrefillParams& p, float s) {
  if (p.softcap_pre != 0.f) return p.softcap_post * tanhf(s * p.softcap_pre);
  return s * p.scale_log2;
}

__device__ __forceinline__ bool custom_bit(const PrefillParams& p, const ItemGeom& g, int mrow,
                                           int j) {
  const int64_t k = static_cast<int64_t>(mrow) * g.real_kv_len + j;
  const uint8_t byte = __ldg(p.custom_mask + __ldg(p.mask_indptr + g.request) + (k >> 3));
  return (byte >> (k & 7)) & 1;
}

// Per-element mask of a boundary tile. s[n][e]: n8 block n of the warp's keys, element e
// (e = 0,1: row g, keys 2t, 2t+1; e = 2,3: row g + 8).
template <int kFragS>
__device__ __forceinline__ void apply_mask(float (&s)[kFragS][4], const PrefillParams& p,
                                           const ItemGeom& g, const RowMask& rm, int key0,
                                           int lane) {
#pragma unroll
  for (int n = 0; n < kFragS; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int h = e >> 1;
      const int j = key0 + n * 8 + 2 * (lane & 3) + (e & 1);
      const int pos = rm.pos[h];
      bool ok = rm.valid[h] && j < g.kv_hi && j >= g.kv_lo;
      if (p.causal) ok = ok && j <= pos;
      if (p.window_left >= 0) ok = ok && j >= pos - p.window_left;
      if (ok && p.custom_mask != nullptr) ok = custom_bit(p, g, rm.mrow[h], j);
      if (!ok) s[n][e] = -INFINITY;
    }
  }
}

}  // namespace weft::prefill
