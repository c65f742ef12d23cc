// Variant role of the prefill kernels: the launch's attention variant (attention/variant.cuh)
// applied to score tiles -- logits (scale, soft cap, ALiBi) and masks (bottom-right causal,
// sliding window, custom bit mask, KV padding), and the item's KV range trimmed with the
// variant's kv_range(), the hook the planner (prefill_plan.cpp) uses too. Semantics:
// include/weft/attention.h.
//
// Logits: without soft cap and bias the scores stay raw and the softmax folds sm_scale * log2(e)
// into its exponent FFMA (the variant's folds_scale()); with a soft cap (prepare_logits) or ALiBi
// (apply_bias_logits) the tile holds log2-domain logits and the softmax runs with scale 1
// (softmax_scale()).
// Masks run only on boundary tiles: a tile is interior when no row of the item can exclude any
// of its keys (tile_needs_mask is uniform over the CTA, so the branch does not diverge).
// ALiBi: a runtime-uniform branch on PrefillParams::alibi_slopes per tile in the FA2 kernel; the
// sm90 mainloop has ALiBi kernels of its own (sm90_kernel.cuh Sm90PlanRowsT, sm90_alibi.cuh).
#pragma once
#include "common/rtc_compat.h"  // <cmath>, <cstdint> (CCCL under NVRTC)

#include "attention/variant.cuh"
#include "prefill/kernel/load.cuh"
#include "prefill/kernel/params.h"

namespace weft::prefill {

// The launch's variant parameters (PrefillParams keeps them as flat fields).
__device__ __forceinline__ attn::VariantParams variant_params_of(const PrefillParams& p) {
  attn::VariantParams v;
  v.scale_log2 = p.scale_log2;
  v.softcap_pre = p.softcap_pre;
  v.softcap_post = p.softcap_post;
  v.causal = p.causal;
  v.window_left = p.window_left;
  v.alibi_slopes = p.alibi_slopes;
  v.custom_mask = p.custom_mask;
  v.mask_indptr = p.mask_indptr;
  return v;
}
// Masks, KV range and soft cap: the default variant (ALiBi adds AlibiVariant's bias on top).
__device__ __forceinline__ attn::DefaultVariant variant_of(const PrefillParams& p) {
  return attn::DefaultVariant(variant_params_of(p));
}

// Exponent scale of the softmax: sm_scale * log2(e) for raw scores, 1 for log2-domain logits.
__device__ __forceinline__ float softmax_scale(const PrefillParams& p) {
  return variant_of(p).folds_scale() && p.alibi_slopes == nullptr ? p.scale_log2 : 1.f;
}

// Effective key range of an item: [kv_begin, kv_end) of the plan, intersected with the variant's
// kv_range() of its first and last rows' positions (keys outside it are masked for every row).
__device__ __forceinline__ void trim_kv_range(const PrefillParams& p, ItemGeom& g, int kv_begin,
                                              int kv_end) {
  const int rows_last = g.row_end - 1;
  const int p_min = g.pos0 + g.row_begin / p.group_size;
  const int p_max = g.pos0 + rows_last / p.group_size;
  const attn::KVRange r = variant_of(p).kv_limits<int>(p_min, p_max);
  const int lo = max(kv_begin, r.begin), hi = min(kv_end, r.end);
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
  return !variant_of(p).box_unmasked(p_min, p_max, ts, te);
}

// Soft-cap: raw scores -> log2-domain logits cap * log2(e) * tanh(s * sm_scale / cap) (the
// softmax then runs with scale 1). Without soft-cap the scores stay raw and the softmax folds
// sm_scale * log2(e) into its exponent FFMA (mainloop.cuh). One uniform branch per tile.
template <class Tr>
__device__ __forceinline__ void prepare_logits(float (&s)[Tr::kMB][Tr::kFragS][4],
                                               const PrefillParams& p, const float* k_scale = nullptr) {
  // k_scale: fp8 K pools, the item's KV head's scale (the raw scores are q . k8); null otherwise.
  const attn::DefaultVariant v = variant_of(p);
  if (v.folds_scale()) return;
  const float kq = k_scale != nullptr ? __ldg(k_scale) : 1.f;
#pragma unroll
  for (int mb = 0; mb < Tr::kMB; ++mb)
#pragma unroll
    for (int n = 0; n < Tr::kFragS; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[mb][n][e] = v.softcap(s[mb][n][e] * kq);
}

// The variant's per-row constants of an item's packed row: rows are the item's tokens x the GQA
// group (row = token * group + head in group), at KV position pos0 + token (apply_bias_logits and
// the sm90 mainloop's ALiBi step).
template <class V>
__device__ __forceinline__ typename V::Row variant_row(const V& v, const PrefillParams& p, const ItemGeom& g, int row) {
  const int tok = row / p.group_size;
  return v.row(g.pos0 + tok, g.kv_head * p.group_size + (row - tok * p.group_size));
}

// A variant with a bias (replaces prepare_logits): raw scores -> v's log2-domain logits. ALiBi
// (p.alibi_slopes != nullptr, v = AlibiVariant): scale or soft cap, then slope[h] * log2(e) *
// (j - pos); a run-time compiled variant (weft::jit): its own logit. Element layout as
// apply_mask's; each row's constants (ALiBi: its slope, L1-resident) are loaded once per tile.
template <class Tr, class V>
__device__ __forceinline__ void apply_bias_logits(float (&s)[Tr::kMB][Tr::kFragS][4],
                                                  const PrefillParams& p, const ItemGeom& g, const V& v,
                                                  int warp_row0, int key0, int lane) {
#pragma unroll
  for (int mb = 0; mb < Tr::kMB; ++mb) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const typename V::Row vr = variant_row(v, p, g, g.row_begin + warp_row0 + mb * 16 + (lane >> 2) + 8 * h);
#pragma unroll
      for (int n = 0; n < Tr::kFragS; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int j = key0 + n * 8 + 2 * (lane & 3) + e;
          s[mb][n][2 * h + e] = v.logit_mul(s[mb][n][2 * h + e], vr, j);
        }
      }
    }
  }
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
  const attn::DefaultVariant v = variant_of(p);
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
          bool ok = v.visible(valid && j < g.kv_hi && j >= g.kv_lo, pos, j);
          if (ok && v.has_custom()) ok = v.custom_allows(g.request, mrow, j, g.real_kv_len);
          if (!ok) s[mb][n][2 * h + e] = -INFINITY;
        }
      }
    }
  }
}

// Keys [begin, end) of an item that none of its rows masks: the variant's kv_limits of its last
// row's position (window: the tightest begin) and of its first row's (causal: the tightest end),
// inside [kv_lo, kv_hi). A tile [ts, ts + n) inside it needs no per-element mask; the same
// decision as tile_needs_mask (masks monotone in the query position), computed once per item
// instead of per tile. Empty with a custom mask (every tile is masked).
__device__ __forceinline__ attn::KVRange unmasked_keys(const PrefillParams& p, const ItemGeom& g) {
  const attn::DefaultVariant v = variant_of(p);
  const int p_min = g.pos0 + g.row_begin / p.group_size;
  const int p_max = g.pos0 + (g.row_end - 1) / p.group_size;
  attn::KVRange r;
  r.begin = max(g.kv_lo, v.kv_limits<int>(p_max, p_max).begin);
  r.end = v.has_custom() ? r.begin : min(g.kv_hi, v.kv_limits<int>(p_min, p_min).end);
  return r;
}

// apply_mask without a custom mask: a row at position pos sees exactly the keys
// [kv_limits(pos, pos)) (exact for one position, variant.cuh) inside [kv_lo, kv_hi), none when
// the row is padding. Per row two limits relative to the thread's first key; per element two
// compares with a constant and a select (apply_mask: the variant's per-element predicate chain
// and a custom-mask branch per element, ~4x the instructions of a whole unmasked tile's softmax
// in the sm90 consumer's SASS).
template <class Tr>
__device__ __forceinline__ void apply_mask_rows(float (&s)[Tr::kMB][Tr::kFragS][4], const PrefillParams& p,
                                                const ItemGeom& g, int warp_row0, int key0, int lane) {
  const attn::DefaultVariant v = variant_of(p);
  const int base = key0 + 2 * (lane & 3);  // key of element (n = 0, e = 0)
#pragma unroll
  for (int mb = 0; mb < Tr::kMB; ++mb) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = g.row_begin + warp_row0 + mb * 16 + (lane >> 2) + 8 * h;
      const int pos = g.pos0 + row / p.group_size;
      const attn::KVRange r = v.kv_limits<int>(pos, pos);
      const int lo = max(g.kv_lo, r.begin) - base;
      const int hi = row < g.row_end ? min(g.kv_hi, r.end) - base : lo;
#pragma unroll
      for (int n = 0; n < Tr::kFragS; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int c = n * 8 + e;  // key - base
          if (c < lo || c >= hi) s[mb][n][2 * h + e] = -INFINITY;
        }
      }
    }
  }
}

// The work items of launched CTA blockIdx.x: [begin, end) of its plan CTA, and its fold word for
// item_geometry (head-folded plans, plan::plan_cta_of / fold_word_of_cta: the launch has
// head_fold CTAs per plan CTA). Shared by the FA2 kernel and both sm90 warp roles.
struct CtaItems {
  int begin, end, fold;
};
__device__ __forceinline__ CtaItems cta_items(const PrefillParams& p) {
  const int c = static_cast<int>(blockIdx.x), plan_ctas = static_cast<int>(gridDim.x) / p.head_fold;
  const int pc = plan::plan_cta_of(c, plan_ctas);
  return {p.plan.cta_indptr[pc], p.plan.cta_indptr[pc + 1], plan::fold_word_of_cta(c, plan_ctas, p.head_fold)};
}

// Work item w of the plan: its segment, request, rows, output slot and the key range the variant
// leaves it (trim_kv_range). Shared by the FA2 and the Hopper (sm90) prefill kernels. fold: the
// launched CTA's fold word (plan::fold_word_of_cta; 0 for unfolded plans): the item's KV head
// and partial slot are expanded for the CTA's sub-head (plan::fold_expand, plan::fold_slot).
__device__ __forceinline__ ItemGeom item_geometry(const PrefillParams& p, int w, int fold) {
  ItemGeom g;
  const plan::PlanPointers& pl = p.plan;
  g.seg = pl.item_request[w];
  g.kv_head = plan::fold_expand(pl.item_kv_head[w], fold);
  g.row_begin = pl.item_row_begin[w];
  g.row_end = pl.item_row_end[w];
  const int slot = pl.item_partial_slot[w];
  g.slot = slot < 0 ? -1 : plan::fold_slot(slot, fold, pl.slot_stride);
  g.request = p.seg_request[g.seg];
  g.token_abs0 = pl.qo_indptr[g.seg];
  g.pos0 = p.seg_pos0[g.seg];
  g.token0 = p.seg_token0[g.seg];
  g.real_kv_len = p.real_kv_len[g.request];
  g.kv_base = p.paged ? p.page_indptr[g.request] : p.kv_indptr[g.request];
  trim_kv_range(p, g, pl.item_kv_begin[w], pl.item_kv_end[w]);
  return g;
}

}  // namespace weft::prefill
