// Attention variants as functors: the ONE place that says what a logit is and which keys a query
// may see. Semantics: include/weft/attention.h (pipeline: scale, soft cap, ALiBi, masks; causal
// masks bottom-right aligned). Used by the decode kernels (decode_tc.cuh, decode_cc.cuh), the FA2
// prefill kernel (prefill/kernel/mask.cuh) and both planners (decode_plan.cpp batch_shape,
// prefill_plan.cpp make_plan), which trim KV ranges with the same kv_range() the kernels use.
//
// A variant is a small struct holding its runtime parameters (VariantParams, a POD passed by
// value inside the kernel parameters) with these members:
//   kHasBias          compile time: the logit depends on (q position, k position, head). When
//                     false, kernels never compute positions or heads for the logit (the default
//                     variant costs nothing per element beyond scale / soft cap).
//   Row row(q_pos, qo_head)            per-row constants of the logit (device: may load), hoisted
//                                      out of the key loop by the kernels;
//   float logit(raw, row, k_pos)       raw dot product -> logit in LOG2 units (device);
//                                      logit_mul(): the same with the multiply-form soft cap;
//   float transform(raw)               the position-free part (scale, soft cap), log2 units;
//   bool masked(q_pos, k_pos)          position masks (causal, sliding window), host + device;
//                                      visible(ok, q_pos, k_pos): ok && !masked(), the
//                                      kernels' per-element form;
//   KVRange kv_range(q_first, q_last, kv_len)
//                                      [begin, end): every key any query position in
//                                      [q_first, q_last] may attend lies inside (host + device;
//                                      exact for one query position: keys inside are unmasked);
//   bool box_unmasked(q_first, q_last, k_begin, k_end)
//                                      no (q, k) of the box is masked (interior tiles skip masks);
//   custom-mask hook (prefill):  has_custom(), custom_allows(request, mask_row, k_pos, kv_len).
// Positions are absolute KV positions: query i of a request with q_len queries and kv_len keys
// sits at kv_len - q_len + i.
//
// Kernels construct their variant through VariantFactory<V>::make(kernel params) (below).
// Adding a variant (docs/design.md "Variants"): derive from DefaultVariant in this file, override
// what changes (e.g. Row / row() / logit() for a bias, masked() + kv_range() for a new mask, and
// set kHasBias), add its instance to the kernels' launch selection, and a test against the
// float64 reference.
//
// Kept NVRTC-compilable: no <cmath>, <string>, <sstream> or <vector>; device math is CUDA's
// built-in tanhf and __ldg only. The host-usable parts (masked, kv_range, box_unmasked) are
// plain constexpr-friendly integer code that g++ compiles too (host tests include this file).
#pragma once
#include "common/rtc_compat.h"  // fixed-width integers (CCCL's under NVRTC)

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define WEFT_VARIANT_HD __host__ __device__ __forceinline__
#define WEFT_VARIANT_D __device__ __forceinline__
#define WEFT_VARIANT_HAS_DEVICE 1
#else
#define WEFT_VARIANT_HD inline
#define WEFT_VARIANT_HAS_DEVICE 0
#endif

namespace weft::attn {

// log2(e): logits are kept in log2 units (exp2 in the softmax).
inline constexpr float kLog2e = 1.4426950408889634f;

// Runtime parameters of the built-in variants (built on the host by variant_params() in
// attention/variant_host.h; a plain struct, copied by value into the kernel parameters).
// Pointers first, then 4-byte fields: 56 bytes, no inner padding.
struct VariantParams {
  const float* alibi_slopes = nullptr;   // device, [num_qo_heads], natural-log units; null: off
  const uint8_t* custom_mask = nullptr;  // device, packed bits (reference/attention.h); null: off
  const int32_t* mask_indptr = nullptr;  // device, [batch + 1] byte offsets of each request's bits
  float scale_log2 = 0.f;     // sm_scale * log2(e): the logit of a raw score without soft cap
  float sm_scale = 0.f;       // (soft cap, transform(): divided by soft_cap)
  float soft_cap = 0.f;       // > 0: soft cap on
  float softcap_pre = 0.f;    // sm_scale / soft_cap (0 when off): the multiply-form soft cap
  float softcap_post = 0.f;   // soft_cap * log2(e)
  int32_t causal = 0;         // bottom-right aligned causal mask
  int32_t window_left = -1;   // keys k >= q - window_left; < 0: off
};

// A half-open key range [begin, end); empty when begin >= end.
struct KVRange {
  int32_t begin = 0, end = 0;
};

// The current flags: scale, soft cap, causal, sliding window, custom mask. No bias.
struct DefaultVariant {
  static constexpr bool kHasBias = false;
  VariantParams p;

  WEFT_VARIANT_HD explicit DefaultVariant(const VariantParams& params) : p(params) {}

  // ---- masks (host + device) ----
  // int arithmetic (positions < 2^31), as the kernels' per-element masks always were.
  WEFT_VARIANT_HD bool masked(int q_pos, int k_pos) const { return !visible(true, q_pos, k_pos); }
  // The kernels' per-element form: ok && !masked(q_pos, k_pos), folded into a running predicate
  // (this form, not !masked(), keeps the d128 x 128-row prefill tile at 0 spills: ptxas).
  WEFT_VARIANT_HD bool visible(bool ok, int q_pos, int k_pos) const {
    if (p.causal) ok = ok && k_pos <= q_pos;
    if (p.window_left >= 0) ok = ok && k_pos >= q_pos - p.window_left;
    return ok;
  }

  // Keys any of the query positions q_first .. q_last may attend: [begin, end) inside
  // [0, kv_len). causal: end = q_last + 1; window: begin = q_first - window_left (the masks are
  // monotone in q, so the extreme rows bound the union). Clamped so that 0 <= begin <= end <=
  // kv_len. For q_first == q_last the keys inside are exactly the unmasked ones.
  // The same bounds before clamping to [0, kv_len): begin may be negative, end past kv_len
  // (2^31 - 1 when unbounded). Kernels intersect them with a range already inside
  // [0, kv_len) (a plan item's), which is all trim needs; the planners use kv_range().
  // I: the integer type of the arithmetic (host planners: int64_t, so no window or position
  // overflows; kernels: int, as their per-item trimming always was).
  template <class I>
  WEFT_VARIANT_HD KVRange kv_limits(I q_first, I q_last) const {
    KVRange r;
    r.begin = p.window_left >= 0 ? static_cast<int32_t>(q_first - p.window_left) : 0;
    r.end = p.causal ? static_cast<int32_t>(q_last + 1) : 2147483647;
    return r;
  }
  template <class I>
  WEFT_VARIANT_HD KVRange kv_range(I q_first, I q_last, I kv_len) const {
    I end = kv_len;
    if (p.causal) end = q_last + 1 < 0 ? I(0) : (q_last + 1 > kv_len ? kv_len : q_last + 1);
    I begin = 0;
    if (p.window_left >= 0) {
      begin = q_first - p.window_left;
      begin = begin < 0 ? I(0) : (begin > end ? end : begin);
    }
    KVRange r;
    r.begin = static_cast<int32_t>(begin);
    r.end = static_cast<int32_t>(end);
    return r;
  }

  // True when no (q, k) with q in [q_first, q_last], k in [k_begin, k_end) is masked by
  // masked() (the custom mask is not considered: a kernel checks has_custom() separately).
  // Monotone masks: the causal limit is tightest for q_first, the window for q_last.
  WEFT_VARIANT_HD bool box_unmasked(int q_first, int q_last, int k_begin, int k_end) const {
    if (p.causal && k_end - 1 > q_first) return false;
    if (p.window_left >= 0 && k_begin < q_last - p.window_left) return false;
    return true;
  }

  WEFT_VARIANT_HD bool has_custom() const { return p.custom_mask != nullptr; }

#if WEFT_VARIANT_HAS_DEVICE
  // ---- logits (device) ----
  struct Row {};
  WEFT_VARIANT_D Row row(int /*q_pos*/, int /*qo_head*/) const { return Row{}; }

  // Scale and soft cap: raw * sm_scale * log2(e), or cap * log2(e) * tanh(raw * sm_scale / cap).
  // The soft cap has two evaluation orders of the same formula, kept so that every kernel's
  // results stay bit-identical to what they were before the variants existed:
  //   transform()      (raw * sm_scale) / cap      decode (the division hides under memory time;
  //                                                the multiply form changed its register
  //                                                allocation: the CUDA-core D256 kernel spilled
  //                                                260 bytes instead of 64, ptxas)
  //   transform_mul()  raw * (sm_scale / cap)      prefill (compute bound: one FMUL)
  WEFT_VARIANT_D float transform(float raw) const {
    if (p.soft_cap > 0.f) return p.softcap_post * tanhf(raw * p.sm_scale / p.soft_cap);
    return raw * p.scale_log2;
  }
  WEFT_VARIANT_D float transform_mul(float raw) const {
    return p.softcap_pre != 0.f ? softcap(raw) : raw * p.scale_log2;
  }
  // Soft cap only, multiply form (kernels that keep raw scores and fold scale_log2 into the exp2
  // FFMA when the soft cap is off: folds_scale()).
  WEFT_VARIANT_D float softcap(float raw) const { return p.softcap_post * tanhf(raw * p.softcap_pre); }
  // Whether a kernel may keep raw scores and multiply by scale_log2 inside its exp2 (the logit
  // is raw * scale_log2: no soft cap, no bias). Uniform over a launch.
  WEFT_VARIANT_D bool folds_scale() const { return p.softcap_pre == 0.f; }

  WEFT_VARIANT_D float logit(float raw, const Row& /*row*/, int /*k_pos*/) const { return transform(raw); }
  // The same logit with the multiply-form soft cap (prefill).
  WEFT_VARIANT_D float logit_mul(float raw, const Row& /*row*/, int /*k_pos*/) const { return transform_mul(raw); }
  WEFT_VARIANT_D float logit(float raw, int q_pos, int k_pos, int qo_head) const {
    return logit(raw, row(q_pos, qo_head), k_pos);
  }

  // Custom-mask hook: bit (mask_row, k_pos) of request `request`'s packed mask (row-major
  // mask_row * kv_len + k_pos, little bit order); true = attend.
  WEFT_VARIANT_D bool custom_allows(int request, int mask_row, int k_pos, int kv_len) const {
    const int64_t k = static_cast<int64_t>(mask_row) * kv_len + k_pos;
    const uint8_t byte = __ldg(p.custom_mask + __ldg(p.mask_indptr + request) + (k >> 3));
    return (byte >> (k & 7)) & 1;
  }
#endif
};

#if WEFT_VARIANT_HAS_DEVICE
// How a kernel builds its variant V from its kernel parameters KP (decode: DecodeParams<T>,
// whose `var` member holds the VariantParams): V(kp.var). A variant compiled at run time
// (weft::jit, jit/jit_variant.cuh) specializes this to read its user parameters, which the JIT
// kernel's parameter struct carries right after KP.
template <class V>
struct VariantFactory {
  template <class KP>
  static WEFT_VARIANT_D V make(const KP& kp) { return V(kp.var); }
};
#endif

// ALiBi on top of the default variant: logit += slope[h] * (k_pos - q_pos), the slope in
// natural-log units per key of distance (reference/attention.h), applied after the soft cap.
// Requires p.alibi_slopes (device, one float per query head).
struct AlibiVariant : DefaultVariant {
  static constexpr bool kHasBias = true;
  WEFT_VARIANT_HD explicit AlibiVariant(const VariantParams& params) : DefaultVariant(params) {}

#if WEFT_VARIANT_HAS_DEVICE
  struct Row {
    float slope_log2;  // slope[h] * log2(e)
    int q_pos;
  };
  WEFT_VARIANT_D Row row(int q_pos, int qo_head) const {
    Row r;
    r.slope_log2 = __ldg(p.alibi_slopes + qo_head) * kLog2e;
    r.q_pos = q_pos;
    return r;
  }
  WEFT_VARIANT_D bool folds_scale() const { return false; }
  WEFT_VARIANT_D float bias(const Row& r, int k_pos) const { return r.slope_log2 * static_cast<float>(k_pos - r.q_pos); }
  WEFT_VARIANT_D float logit(float raw, const Row& r, int k_pos) const { return transform(raw) + bias(r, k_pos); }
  WEFT_VARIANT_D float logit_mul(float raw, const Row& r, int k_pos) const {
    return transform_mul(raw) + bias(r, k_pos);
  }
  WEFT_VARIANT_D float logit(float raw, int q_pos, int k_pos, int qo_head) const {
    return logit(raw, row(q_pos, qo_head), k_pos);
  }
#endif
};

}  // namespace weft::attn
