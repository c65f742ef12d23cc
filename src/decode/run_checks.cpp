// Decode run-time checks (run_checks.h).
#include "decode/run_checks.h"

#include "weft/fp8.h"
#include "weft/validate.h"

namespace weft::decode {

void check_views(const PlannedShape& s, const TensorView& q, const TensorView& out, const TensorView* lse) {
  check::on_device(q, "q");
  check::shape_is(q, "q", {s.batch, s.num_qo_heads, s.head_dim});
  check::dtype_is(q, "q", s.dtype);
  check::inner_contiguous(q, "q");
  check::on_device(out, "out");
  check::shape_is(out, "out", {s.batch, s.num_qo_heads, s.head_dim});
  check::dtype_is(out, "out", s.dtype);
  check::inner_contiguous(out, "out");
  WEFT_CHECK_ARG(lse != nullptr || !s.lse_required, "lse", "the planned variant has return_lse");
  if (lse != nullptr) {
    check::on_device(*lse, "lse");
    check::shape_is(*lse, "lse", {s.batch, s.num_qo_heads});
    check::dtype_is(*lse, "lse", DType::kFloat32);
    WEFT_CHECK_ARG(lse->strides[1] == 1, "lse", "inner stride must be 1, got " << lse->strides[1]);
    // The kernel stores each LSE as one float: a pointer that is not 4-byte aligned faults the
    // launch (cudaErrorMisalignedAddress, sticky: the caller's context would be lost). The token
    // stride counts floats, so every later row stays aligned.
    check::aligned(lse->data, "lse", sizeof(float));
  }
}

void check_cache(const PlannedShape& s, const PagedKVCache& cache, bool fp8_ok) {
  if (!fp8_ok || !is_fp8(cache.k_pages.dtype)) check::dtype_is(cache.k_pages, "cache.k_pages", s.dtype);
  WEFT_CHECK_ARG(cache.layout == s.layout, "cache.layout",
                 "planned " << kv_layout_name(s.layout) << ", got " << kv_layout_name(cache.layout));
  WEFT_CHECK_ARG(cache.page_size() == s.page_size, "cache.page_size",
                 "planned " << s.page_size << ", got " << cache.page_size());
  WEFT_CHECK_ARG(cache.num_kv_heads() == s.num_kv_heads, "cache.num_kv_heads",
                 "planned " << s.num_kv_heads << ", got " << cache.num_kv_heads());
  WEFT_CHECK_ARG(cache.head_dim() == s.head_dim, "cache.head_dim",
                 "planned " << s.head_dim << ", got " << cache.head_dim());
}

}  // namespace weft::decode
