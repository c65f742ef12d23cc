// Host side of attention/variant.cuh: the variant parameters of a public AttentionVariant, and
// which built-in variant runs it. Host only (uses <cmath>); the kernels see only VariantParams.
#pragma once
#include <cmath>
#include <cstdint>

#include "attention/variant.cuh"
#include "weft/attention.h"

namespace weft::attn {

// sm_scale (0 -> 1 / sqrt(head_dim)) as the kernels use it.
inline double effective_sm_scale(const AttentionVariant& v, int32_t head_dim) {
  return v.sm_scale > 0 ? v.sm_scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

// Scale, soft cap, causal, window and ALiBi slopes of `v` (the custom mask's device arrays are
// set by the run call that receives them). Constants are computed in double, rounded once.
inline VariantParams variant_params(const AttentionVariant& v, int32_t head_dim) {
  constexpr double kLog2eD = 1.4426950408889634;
  const double sm_scale = effective_sm_scale(v, head_dim);
  VariantParams p;
  p.scale_log2 = static_cast<float>(sm_scale * kLog2eD);
  p.sm_scale = static_cast<float>(sm_scale);
  if (v.logits_soft_cap > 0.f) {
    p.soft_cap = v.logits_soft_cap;
    p.softcap_pre = static_cast<float>(sm_scale / v.logits_soft_cap);
    p.softcap_post = static_cast<float>(v.logits_soft_cap * kLog2eD);
  }
  p.causal = v.mask == MaskMode::kCausal ? 1 : 0;
  p.window_left = v.window_left;
  p.alibi_slopes = v.alibi_slopes;
  return p;
}

// The built-in variant a launch uses (kernels are instantiated per variant type).
enum class VariantKind : int32_t { kDefault = 0, kAlibi = 1 };
inline VariantKind variant_kind(const AttentionVariant& v) {
  return v.alibi_slopes != nullptr ? VariantKind::kAlibi : VariantKind::kDefault;
}

}  // namespace weft::attn
