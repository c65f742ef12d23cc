#include "prefill/prefill_validate.h"

#include <climits>
#include <cmath>
#include <string>

#include "weft/validate.h"

namespace weft::prefill {

void check_bounds(const PrefillBounds& b) {
  WEFT_CHECK_ARG(b.max_batch >= 1, "bounds.max_batch", "must be >= 1, got " << b.max_batch);
  WEFT_CHECK_ARG(b.max_total_q >= 0 && b.max_total_q <= INT32_MAX, "bounds.max_total_q",
                 "must be in [0, 2^31), got " << b.max_total_q);
  WEFT_CHECK_ARG(b.num_kv_heads >= 1, "bounds.num_kv_heads", "must be >= 1, got " << b.num_kv_heads);
  WEFT_CHECK_ARG(b.num_qo_heads >= b.num_kv_heads && b.num_qo_heads % b.num_kv_heads == 0,
                 "bounds.num_qo_heads",
                 "must be a positive multiple of num_kv_heads " << b.num_kv_heads << ", got "
                                                                << b.num_qo_heads);
  check::head_dim_supported(b.head_dim, "bounds.head_dim");
}

void check_table_host(const PageTable& t, int64_t page_size) {
  WEFT_CHECK_ARG(t.batch_size >= 0, "table.batch_size", "must be >= 0, got " << t.batch_size);
  // An empty step (batch 0) may give its indptr as {0} or as no array at all (size 0, null).
  check::indptr_size(t.indptr.size, t.batch_size, "kv_indptr");
  WEFT_CHECK_ARG(t.indptr.size == 0 || t.indptr.host != nullptr, "kv_indptr",
                 "host mirror with batch_size + 1 = " << t.batch_size + 1 << " entries required");
  check::indptr(t.indptr.size > 0 ? t.indptr.host : nullptr, t.batch_size, "kv_indptr");
  WEFT_CHECK_ARG(t.batch_size == 0 || (t.last_page_len.host != nullptr &&
                                       t.last_page_len.size == t.batch_size),
                 "kv_last_page_len", "host mirror with batch_size = " << t.batch_size << " entries required");
  for (int32_t b = 0; b < t.batch_size; ++b) {
    const int64_t pages = int64_t(t.indptr.host[b + 1]) - t.indptr.host[b];
    const int32_t last = t.last_page_len.host[b];
    if (pages == 0) {
      WEFT_CHECK_ARG(last == 0, "kv_last_page_len", "request " << b << " has no pages: expected 0, got " << last);
      continue;
    }
    WEFT_CHECK_ARG(last >= 1 && last <= page_size, "kv_last_page_len",
                   "request " << b << ": expected [1, " << page_size << "], got " << last);
    WEFT_CHECK_ARG((pages - 1) * page_size + last <= INT32_MAX, "kv_indptr",
                   "request " << b << " longer than 2^31 - 1 tokens");
  }
}

void check_variant(const AttentionVariant& v) {
  WEFT_CHECK_ARG(std::isfinite(v.sm_scale) && v.sm_scale >= 0, "variant.sm_scale",
                 "must be finite and >= 0 (0: 1/sqrt(head_dim)), got " << v.sm_scale);
  WEFT_CHECK_ARG(v.window_left >= -1, "variant.window_left", "must be >= -1, got " << v.window_left);
  WEFT_CHECK_ARG(std::isfinite(v.logits_soft_cap) && v.logits_soft_cap >= 0, "variant.logits_soft_cap",
                 "must be finite and >= 0, got " << v.logits_soft_cap);
  WEFT_CHECK_ARG(v.mask == MaskMode::kNone || v.mask == MaskMode::kCausal || v.mask == MaskMode::kCustom,
                 "variant.mask", "unknown mask mode " << static_cast<int>(v.mask));
  // ALiBi slopes (null: off) are loaded as floats by the kernel: a misaligned pointer would fault
  // the launch (sticky error).
  check::aligned(v.alibi_slopes, "variant.alibi_slopes", sizeof(float));
}

void check_mask_indptr(const int32_t* m, const int32_t* qo, const std::vector<int32_t>& kv_len) {
  if (kv_len.empty() && m == nullptr) return;  // an empty step has no mask segments to locate
  WEFT_CHECK_ARG(m != nullptr, "mask_indptr", "required with MaskMode::kCustom");
  WEFT_CHECK_ARG(m[0] == 0, "mask_indptr", "must start at 0, got " << m[0]);
  for (std::size_t b = 0; b < kv_len.size(); ++b) {
    const int64_t bits = int64_t(qo[b + 1] - qo[b]) * kv_len[b];
    const int64_t need = (bits + 7) / 8;
    WEFT_CHECK_ARG(int64_t(m[b + 1]) - m[b] == need, "mask_indptr",
                   "request " << b << ": segment must be ceil(q_len * kv_len / 8) = " << need
                              << " bytes, got " << int64_t(m[b + 1]) - m[b]);
  }
}

}  // namespace weft::prefill
