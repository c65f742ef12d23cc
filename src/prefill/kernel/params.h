// Kernel parameters of the batch prefill kernel (plain struct: built on the host, passed by
// value). Host-includable: no CUDA device code.
#pragma once
#include "common/rtc_compat.h"

#include "attention/plan/balance.h"
#include "prefill/prefill_config.h"

namespace weft::prefill {

// Whether a configuration's kernel has the ALiBi step compiled in (kernel/mask.cuh
// apply_bias_logits, a runtime-uniform branch per tile; PrefillTraits::kBias): every tile with 16
// rows per warp. The d128 x 128-row tile (32 rows per warp) sits at 255 registers: the branch
// alone made it spill 68 bytes (ptxas), so it is compiled without it and an ALiBi plan takes the
// 64-row tile instead (prefill_wrapper.cpp). The other tiles keep 0 spills with it.
constexpr bool bias_supported(int32_t head_dim, int32_t cta_q) { return rows_per_warp_of(head_dim, cta_q) == 16; }

struct PrefillParams {
  // Q / O: [total_q, num_qo_heads, head_dim], head_dim contiguous. Strides in elements.
  const void* q = nullptr;
  int64_t q_stride_token = 0, q_stride_head = 0;
  void* o = nullptr;
  int64_t o_stride_token = 0, o_stride_head = 0;
  float* lse = nullptr;  // optional [total_q, num_qo_heads] natural log
  int64_t lse_stride_token = 0;

  // K / V. Paged: pools seen through (page, slot, head) strides (paged/paged_access.cuh
  // convention). Ragged: token stride in `k_page_stride` (slot stride unused), rows of request b
  // start at kv_indptr[b].
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t k_page_stride = 0, k_slot_stride = 0, k_head_stride = 0;
  int64_t v_page_stride = 0, v_slot_stride = 0, v_head_stride = 0;
  int32_t paged = 0;
  int32_t page_size = 1;
  int32_t page_shift = -1;                // log2(page_size) when a power of two, else -1
  const int32_t* page_indptr = nullptr;   // paged: [batch + 1]
  const int32_t* page_indices = nullptr;  // paged: [nnz pages]
  const int32_t* kv_indptr = nullptr;     // ragged: [batch + 1] (device)
  int64_t k_rows = 0, v_rows = 0;         // extent of dim 0 of K / V (rows or pages): sm90 tensor maps

  // Plan (device pointers into the workspace). Plan "requests" are segments of real requests
  // (see prefill_plan.h): segment s belongs to real request seg_request[s], its first token is
  // query token seg_token0[s] of that request and sits at absolute position seg_pos0[s].
  plan::PlanPointers plan{};
  const int32_t* seg_request = nullptr;
  const int32_t* seg_token0 = nullptr;
  const int32_t* seg_pos0 = nullptr;
  const int32_t* real_kv_len = nullptr;  // [batch] kv length of each real request

  // Variant.
  int32_t group_size = 1;       // query heads per KV head
  int32_t causal = 0;
  int32_t window_left = -1;     // < 0: off
  float scale_log2 = 0;         // sm_scale * log2(e) (no soft-cap)
  float softcap_pre = 0;        // soft-cap: sm_scale / cap (0: soft-cap off)
  float softcap_post = 0;       // soft-cap: cap * log2(e)
  const uint8_t* custom_mask = nullptr;  // non-null: custom mask on (reference/attention.h format)
  const int32_t* mask_indptr = nullptr;  // [batch + 1] byte offsets of each request's segment
  const float* alibi_slopes = nullptr;   // non-null: ALiBi ([num_qo_heads], natural-log units;
                                         // FA2 tiles of bias_supported and every sm90 instance)
  // These fields are the variant's runtime parameters (attention/variant.cuh VariantParams;
  // kernel/mask.cuh variant_of() assembles them).

  // fp8 K/V pools (PrefillTraits::kFp8; weft::KVScale): x = k_scale[h * k_scale_stride] * x8 for KV
  // head h (stride 0: one scale per pool, 1: per head); likewise V. Null for 16-bit pools.
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  int32_t k_scale_stride = 0, v_scale_stride = 0;

  // KV heads folded into one plan head class (plan::Plan::head_fold; 1: none): launched CTA c
  // runs plan CTA c % P's items (P = gridDim.x / head_fold) for sub-head j = c / P: KV head
  // item_kv_head * head_fold + j, partial slot j * max_slots + s (mask.cuh cta_items, item_geometry).
  // Last, so the fields above keep their offsets.
  int32_t head_fold = 1;
};

}  // namespace weft::prefill
