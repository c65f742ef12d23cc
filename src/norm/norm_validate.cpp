#include "norm/norm_validate.h"

#include <cmath>

#include "weft/norm.h"
#include "weft/validate.h"

namespace weft::norm_detail {

void check_hidden(int64_t hidden, const char* name) {
  WEFT_CHECK_ARG(hidden >= 8 && hidden <= kNormMaxHidden && hidden % 8 == 0, name,
                 "hidden size must be a multiple of 8 in [8, " << kNormMaxHidden << "], got "
                                                               << hidden);
}

void check_eps(double eps, const char* name) {
  WEFT_CHECK_ARG(std::isfinite(eps) && eps > 0.0, name, "must be finite and > 0, got " << eps);
}

void check_rows(const TensorView& t, const char* name) {
  check::ndim_is(t, name, 2);
  check::dtype_in(t, name, {DType::kFloat16, DType::kBFloat16});
  check::on_device(t, name);
  check_hidden(t.shape[1], name);
  if (t.shape[0] > 0) check::inner_contiguous(t, name, 16);
  WEFT_CHECK_ARG(t.shape[0] <= 1 || t.strides[0] >= t.shape[1], name,
                 "row stride " << t.strides[0] << " is smaller than the row (" << t.shape[1]
                               << "): rows would overlap");
}

void check_weight(const TensorView& w, const char* name, const TensorView& like, const char* like_name) {
  check::ndim_is(w, name, 1);
  check::same_dtype(like, like_name, w, name);
  check::on_device(w, name);
  WEFT_CHECK_ARG(w.shape[0] == like.shape[1], name,
                 "expected [" << like.shape[1] << "] (hidden of " << like_name << "), got "
                              << w.describe());
  check::contiguous(w, name);
  check::aligned(w.data, name, 16);
}

void check_disjoint(const TensorView& a, const char* a_name, const TensorView& b, const char* b_name) {
  check::disjoint(a, a_name, b, b_name);
}

}  // namespace weft::norm_detail
