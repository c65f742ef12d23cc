#include "weft/tensor.h"

#include <sstream>

#include "weft/error.h"

namespace weft {
namespace {
void fill_shape(TensorView& t, std::initializer_list<int64_t> shape) {
  WEFT_CHECK_ARG(shape.size() <= static_cast<std::size_t>(TensorView::kMaxDims), "shape",
                 "at most " << TensorView::kMaxDims << " dimensions, got " << shape.size());
  t.ndim = static_cast<int32_t>(shape.size());
  int i = 0;
  for (int64_t s : shape) {
    WEFT_CHECK_ARG(s >= 0, "shape", "extent of dim " << i << " must be >= 0, got " << s);
    t.shape[i++] = s;
  }
}
}  // namespace

TensorView::TensorView(void* data_, DType dtype_, std::initializer_list<int64_t> shape_,
                       Device device_, int32_t device_id_)
    : data(data_), dtype(dtype_), device(device_), device_id(device_id_) {
  fill_shape(*this, shape_);
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    strides[d] = s;
    s *= shape[d];
  }
}

TensorView::TensorView(void* data_, DType dtype_, std::initializer_list<int64_t> shape_,
                       std::initializer_list<int64_t> strides_, Device device_, int32_t device_id_)
    : data(data_), dtype(dtype_), device(device_), device_id(device_id_) {
  fill_shape(*this, shape_);
  WEFT_CHECK_ARG(strides_.size() == shape_.size(), "strides",
                 "expected " << shape_.size() << " strides, got " << strides_.size());
  int i = 0;
  for (int64_t s : strides_) strides[i++] = s;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] != 1 && strides[d] != s) return false;
    s *= shape[d];
  }
  return true;
}

std::string TensorView::describe() const {
  std::ostringstream os;
  os << "[";
  for (int d = 0; d < ndim; ++d) os << (d ? ", " : "") << shape[d];
  os << "] " << dtype_name(dtype) << (device == Device::kCUDA ? " cuda:" : " cpu:") << device_id;
  return os.str();
}

}  // namespace weft
