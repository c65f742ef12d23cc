// Conventions shared by every attention entry point (decode, prefill, merge).
//
// Shapes
//   Ragged Q/O:  [total_tokens, num_qo_heads, head_dim], requests delimited by qo_indptr.
//   Decode Q/O:  [batch, num_qo_heads, head_dim] (one token per request).
//   LSE:         [tokens, num_qo_heads] float32.
// GQA: query head h reads KV head h / (num_qo_heads / num_kv_heads).
//
// Logits, in this order, for query i (absolute position p = kv_len - q_len + i, i.e. causal
// masks are aligned to the bottom-right: the query block is the last q_len positions of the
// kv_len sequence, the chunked-prefill convention) and key j:
//   s = sm_scale * <q_i, k_j>
//   if logits_soft_cap > 0: s = logits_soft_cap * tanh(s / logits_soft_cap)
//   if alibi_slopes:        s += alibi_slopes[h] * (j - p)      (h: the query head; j - p <= 0
//                           for every causally visible key, so a positive slope penalizes distance)
//   masked (s = -inf) when: causal and j > p; window_left >= 0 and j < p - window_left;
//                           custom mask bit (i, j) is 0.
// LSE is returned in NATURAL log (base e): lse_i = log(sum_j exp(s_ij)). A row with no
// unmasked key (kv_len 0, or everything masked) gives O = 0 and LSE = -inf, never NaN.
#pragma once
#include <cstdint>

#include "weft/export.h"

namespace weft WEFT_API {

namespace jit {
class Variant;  // weft/jit.h
}

enum class MaskMode : int32_t {
  kNone = 0,
  kCausal = 1,  // bottom-right aligned
  kCustom = 2,  // bit-packed per-request mask (prefill only)
};

struct AttentionVariant {
  double sm_scale = 0;          // 0: 1/sqrt(head_dim)
  MaskMode mask = MaskMode::kNone;
  int32_t window_left = -1;     // sliding window: keys j >= p - window_left; -1 disables
  float logits_soft_cap = 0.f;  // <= 0 disables
  bool return_lse = false;
  // ALiBi: DEVICE pointer to num_qo_heads floats (one slope per query head, natural-log units per
  // key of distance; e.g. 2^(-8 (h + 1) / num_qo_heads) for power-of-two head counts). nullptr
  // disables. Must be 4-byte aligned and stay valid (its contents may change) for every run of
  // the plan: kernels read it at run time (decode and the FA2 prefill kernel). Checked at plan():
  // weft::Error naming "variant.alibi_slopes".
  const float* alibi_slopes = nullptr;
  // A variant compiled at run time (weft/jit.h): its logit / mask hooks replace scale and soft cap
  // (causal, window and custom masks still apply). plan() compiles or loads the kernel it needs
  // and copies jit->source().params_size bytes from jit_params (host memory; may be null when
  // that size is 0). The Variant must outlive the plan. Not with alibi_slopes or prefix sharing;
  // prefill runs it on the FA2 kernel. weft::Error naming "variant.jit" / "variant.jit_params".
  const jit::Variant* jit = nullptr;
  const void* jit_params = nullptr;
};

}  // namespace weft
