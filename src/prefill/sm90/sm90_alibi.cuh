// Hopper prefill: the ALiBi step of the consumer warpgroups (sm90_consumer.cuh, the kernel's ALiBi
// instance: sm90_kernel.cuh Sm90PlanRowsT<true>).
#pragma once
#include "attention/variant.cuh"
#include "prefill/kernel/mask.cuh"
#include "prefill/kernel/params.h"

namespace weft::prefill::sm90 {

// ALiBi logits of a tile (AlibiVariant: scale or soft cap, then slope[h] log2(e) (j - pos)):
// kernel/mask.cuh apply_bias_logits's result with apply_mask_rows's layout and per-row form. Per
// row the variant's slope and the bias of the thread's first key, base = slope (key0 + 2 (lane & 3)
// - pos); per element the bias is one FFMA (slope c + base, c = n 8 + e a constant) and the logit
// one more (raw sm_scale log2(e) + bias; soft cap: cap(raw) + bias). apply_bias_logits converts
// every key distance to float (an I2F per element, a fraction of the FFMA rate): with it the
// ALiBi tile ran at about half the plain tile's speed (H100, causal d128 32/8 L8192: 1.97 ms vs
// 0.99; bench/results/h100_prefill_alibi_sm90_64dccee.json, h100_prefill_sm90_ab_64dccee.txt).
// kCap: soft cap on (p.softcap_pre != 0; uniform over the launch).
template <class Tr, bool kCap>
__device__ __forceinline__ void alibi_logits(float (&s)[Tr::kMB][Tr::kFragS][4], const PrefillParams& p,
                                             const ItemGeom& g, int warp_row0, int key0, int lane) {
  const attn::AlibiVariant v(variant_params_of(p));
#pragma unroll
  for (int mb = 0; mb < Tr::kMB; ++mb) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const attn::AlibiVariant::Row r = variant_row(v, p, g, g.row_begin + warp_row0 + mb * 16 + (lane >> 2) + 8 * h);
      const float base = r.slope_log2 * static_cast<float>(key0 + 2 * (lane & 3) - r.q_pos);
#pragma unroll
      for (int n = 0; n < Tr::kFragS; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float bias = fmaf(r.slope_log2, static_cast<float>(n * 8 + e), base);
          float& x = s[mb][n][2 * h + e];
          x = kCap ? v.softcap(x) + bias : fmaf(x, p.scale_log2, bias);
        }
      }
    }
  }
}
template <class Tr>
__device__ __forceinline__ void apply_alibi_rows(float (&s)[Tr::kMB][Tr::kFragS][4], const PrefillParams& p,
                                                 const ItemGeom& g, int warp_row0, int key0, int lane) {
  if (p.softcap_pre != 0.f) alibi_logits<Tr, true>(s, p, g, warp_row0, key0, lane);
  else alibi_logits<Tr, false>(s, p, g, warp_row0, key0, lane);
}

}  // namespace weft::prefill::sm90
