#include "comm/comm_validate.h"

#include "norm/norm_validate.h"
#include "weft/error.h"
#include "weft/validate.h"

namespace weft::comm_detail {

namespace {
void check_row_contiguous(const TensorView& t, const char* name) {
  WEFT_CHECK_ARG(t.shape[0] <= 1 || t.strides[0] == t.shape[1], name,
                 "rows must be contiguous (row stride == hidden " << t.shape[1] << "), got stride "
                                                                  << t.strides[0]);
}
void check_device_id(const TensorView& t, const char* name, int device_id) {
  WEFT_CHECK_ARG(t.device_id == device_id, name,
                 "lives on cuda:" << t.device_id << " but the communicator uses cuda:" << device_id);
}
}  // namespace

FusedCall check_fused_args(const TensorView& x, const TensorView& residual, const TensorView& weight,
                           double eps, const TensorView& out, int num_ctas, AllReduceVariant variant,
                           std::size_t capacity_bytes, int device_id) {
  using namespace norm_detail;
  check_rows(x, "x");
  check_row_contiguous(x, "x");
  check_device_id(x, "x", device_id);
  check_rows(residual, "residual");
  check::same_dtype(x, "x", residual, "residual");
  WEFT_CHECK_ARG(residual.shape[0] == x.shape[0] && residual.shape[1] == x.shape[1], "residual",
                 "expected the shape of x " << x.describe() << ", got " << residual.describe());
  check_device_id(residual, "residual", device_id);
  check_weight(weight, "weight", x, "x");
  check_device_id(weight, "weight", device_id);
  check_eps(eps, "eps");
  WEFT_CHECK_ARG(num_ctas >= 1 && num_ctas <= kCommMaxCtas, "num_ctas",
                 "must be in [1, " << kCommMaxCtas << "], got " << num_ctas);
  WEFT_CHECK_ARG(variant == AllReduceVariant::kAuto || variant == AllReduceVariant::kOneShot ||
                     variant == AllReduceVariant::kTwoShot,
                 "variant", "unknown value " << static_cast<int>(variant));

  FusedCall c;
  c.tokens = x.shape[0];
  c.hidden = x.shape[1];
  c.dtype = x.dtype;
  c.bytes = static_cast<std::size_t>(c.tokens) * static_cast<std::size_t>(c.hidden) * x.element_size();
  WEFT_CHECK_ARG(c.bytes <= capacity_bytes, "x",
                 x.describe() << " needs " << c.bytes << " bytes, more than the communicator's capacity of "
                              << capacity_bytes << " (CommOptions max_tokens * max_hidden * dtype size)");
  c.out = x.data;
  if (out.ndim != 0 || out.data != nullptr) {
    check_rows(out, "out");
    check_row_contiguous(out, "out");
    check_device_id(out, "out", device_id);
    check::same_dtype(x, "x", out, "out");
    WEFT_CHECK_ARG(out.shape[0] == x.shape[0] && out.shape[1] == x.shape[1], "out",
                   "expected the shape of x " << x.describe() << ", got " << out.describe());
    if (out.data != x.data) check_disjoint(x, "x", out, "out");
    check_disjoint(residual, "residual", out, "out");
    check_disjoint(weight, "weight", out, "out");
    c.out = out.data;
  }
  check_disjoint(x, "x", residual, "residual");
  check_disjoint(residual, "residual", weight, "weight");
  check_disjoint(x, "x", weight, "weight");
  return c;
}

}  // namespace weft::comm_detail
