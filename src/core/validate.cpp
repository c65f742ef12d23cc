// Validation helpers (include/weft/validate.h). Which pointer of which entry point needs which
// alignment, and why (the widest access its kernels make), is tabulated in docs/design.md,
// "Validation: pointer alignment and empty steps". A kernel change that widens an access must
// update that table and the check that enforces it.
#include "weft/validate.h"

#include <utility>
#include <cstdint>

namespace weft::check {

void not_null(const void* p, const char* name) {
  WEFT_CHECK_ARG(p != nullptr, name, "must not be null");
}

void on_device(const TensorView& t, const char* name, Device device) {
  WEFT_CHECK_ARG(t.device == device, name,
                 "expected a " << (device == Device::kCUDA ? "CUDA" : "CPU") << " tensor, got "
                               << t.describe());
  WEFT_CHECK_ARG(t.data != nullptr || t.numel() == 0, name, "data pointer is null for non-empty " << t.describe());
}

void dtype_is(const TensorView& t, const char* name, DType expected) {
  WEFT_CHECK_ARG(t.dtype == expected, name,
                 "expected dtype " << dtype_name(expected) << ", got " << dtype_name(t.dtype));
}

void dtype_in(const TensorView& t, const char* name, std::initializer_list<DType> allowed) {
  for (DType d : allowed)
    if (t.dtype == d) return;
  std::ostringstream os;
  os << "expected dtype in {";
  bool first = true;
  for (DType d : allowed) {
    os << (first ? "" : ", ") << dtype_name(d);
    first = false;
  }
  os << "}, got " << dtype_name(t.dtype);
  throw Error(name, os.str());
}

void same_dtype(const TensorView& a, const char* a_name, const TensorView& b, const char* b_name) {
  WEFT_CHECK_ARG(a.dtype == b.dtype, b_name,
                 "dtype " << dtype_name(b.dtype) << " differs from " << a_name << "'s "
                          << dtype_name(a.dtype));
}

void ndim_is(const TensorView& t, const char* name, int expected) {
  WEFT_CHECK_ARG(t.ndim == expected, name,
                 "expected " << expected << " dimensions, got " << t.describe());
}

void shape_is(const TensorView& t, const char* name, std::initializer_list<int64_t> expected) {
  ndim_is(t, name, static_cast<int>(expected.size()));
  int d = 0;
  for (int64_t e : expected) {
    WEFT_CHECK_ARG(e < 0 || t.shape[d] == e, name,
                   "expected shape[" << d << "] == " << e << ", got " << t.describe());
    ++d;
  }
}

void same_shape(const TensorView& a, const char* a_name, const TensorView& b, const char* b_name) {
  bool same = a.ndim == b.ndim;
  for (int d = 0; same && d < a.ndim; ++d) same = a.shape[d] == b.shape[d];
  WEFT_CHECK_ARG(same, b_name,
                 "shape " << b.describe() << " differs from " << a_name << "'s " << a.describe());
}

void aligned(const void* p, const char* name, std::size_t bytes) {
  WEFT_CHECK_ARG(reinterpret_cast<std::uintptr_t>(p) % bytes == 0, name,
                 "pointer must be " << bytes << "-byte aligned, got " << p);
}

void inner_contiguous(const TensorView& t, const char* name, std::size_t alignment) {
  WEFT_CHECK_ARG(t.ndim >= 1 && t.strides[t.ndim - 1] == 1, name,
                 "innermost dimension must have stride 1 (got " << (t.ndim ? t.strides[t.ndim - 1] : 0)
                                                                << ")");
  aligned(t.data, name, alignment);
  const std::size_t es = t.element_size();
  for (int d = 0; d + 1 < t.ndim; ++d) {
    WEFT_CHECK_ARG((t.strides[d] * es) % alignment == 0 || t.shape[d] == 1, name,
                   "stride of dim " << d << " (" << t.strides[d] << " elements) must keep rows "
                                    << alignment << "-byte aligned");
  }
  WEFT_CHECK_ARG((t.shape[t.ndim - 1] * es) % alignment == 0, name,
                 "innermost extent " << t.shape[t.ndim - 1] << " must be a multiple of "
                                     << alignment << " bytes");
}

void contiguous(const TensorView& t, const char* name) {
  WEFT_CHECK_ARG(t.is_contiguous(), name, "must be contiguous, got strides of " << t.describe());
}

void head_dim_supported(int64_t head_dim, const char* name) {
  WEFT_CHECK_ARG(head_dim == 64 || head_dim == 128 || head_dim == 256, name,
                 "head_dim must be 64, 128 or 256, got " << head_dim);
}

void in_range(int64_t value, const char* name, int64_t lo, int64_t hi) {
  WEFT_CHECK_ARG(value >= lo && value <= hi, name,
                 "must be in [" << lo << ", " << hi << "], got " << value);
}

void indptr(const int32_t* p, int64_t batch, const char* name, int64_t max_last) {
  WEFT_CHECK_ARG(batch >= 0, name, "batch size must be >= 0, got " << batch);
  // A serving loop's step with no requests often has no array at all: nothing to read.
  if (batch == 0 && p == nullptr) return;
  not_null(p, name);
  WEFT_CHECK_ARG(p[0] == 0, name, "must start at 0, got " << name << "[0] = " << p[0]);
  for (int64_t i = 0; i < batch; ++i) {
    WEFT_CHECK_ARG(p[i + 1] >= p[i], name,
                   "must be non-decreasing, got " << name << "[" << i << "] = " << p[i] << " > "
                                                  << name << "[" << i + 1 << "] = " << p[i + 1]);
  }
  WEFT_CHECK_ARG(max_last < 0 || p[batch] <= max_last, name,
                 "last entry " << p[batch] << " exceeds the " << max_last << " available");
}

void indptr_size(int64_t size, int64_t batch, const char* name) {
  WEFT_CHECK_ARG(size == batch + 1 || (batch == 0 && size == 0), name,
                 "expected " << batch + 1 << " entries (batch + 1"
                             << (batch == 0 ? ", or none for an empty batch" : "") << "), got " << size);
}

void device_index_array(const void* p, int64_t size, const char* name) {
  WEFT_CHECK_ARG(size >= 0, name, "size must be >= 0, got " << size);
  WEFT_CHECK_ARG(size == 0 || p != nullptr, name, "device pointer is null (" << size << " entries expected)");
  // Kernels load entries as int32: a misaligned pointer faults the launch
  // (cudaErrorMisalignedAddress, sticky: the context is lost). Checked at size 0 too.
  WEFT_CHECK_ARG(reinterpret_cast<std::uintptr_t>(p) % alignof(int32_t) == 0, name,
                 "device pointer must be " << alignof(int32_t) << "-byte aligned (int32 entries), got " << p);
}

void indices_below(const int32_t* v, int64_t n, const char* name, int64_t bound) {
  if (n > 0) not_null(v, name);
  for (int64_t i = 0; i < n; ++i) {
    WEFT_CHECK_ARG(v[i] >= 0 && v[i] < bound, name,
                   "entry " << i << " = " << v[i] << " is outside [0, " << bound << ")");
  }
}

void workspace(const void* p, std::size_t bytes, std::size_t needed, const char* name) {
  WEFT_CHECK_ARG(bytes >= needed, name,
                 "workspace of " << bytes << " bytes is smaller than the " << needed << " needed");
  if (needed > 0) not_null(p, name);
  aligned(p, name, 256);
}

namespace {
// [first byte, one past the last byte) of t's elements; empty (or null) -> {0, 0}.
void byte_range(const TensorView& t, std::uintptr_t& lo, std::uintptr_t& hi) {
  if (t.numel() == 0 || t.data == nullptr) {
    lo = hi = 0;
    return;
  }
  int64_t last = 0;
  for (int d = 0; d < t.ndim; ++d) last += (t.shape[d] - 1) * t.strides[d];
  lo = reinterpret_cast<std::uintptr_t>(t.data);
  hi = lo + static_cast<std::uintptr_t>((last + 1) * static_cast<int64_t>(t.element_size()));
}
}  // namespace

bool overlaps(const TensorView& a, const TensorView& b) {
  std::uintptr_t alo, ahi, blo, bhi;
  byte_range(a, alo, ahi);
  byte_range(b, blo, bhi);
  return alo < bhi && blo < ahi;
}

void disjoint(const TensorView& a, const char* a_name, const TensorView& b, const char* b_name) {
  WEFT_CHECK_ARG(!overlaps(a, b), b_name, "must not overlap " << a_name);
}

void writable(const TensorView& t, const char* name) {
  if (t.numel() == 0) return;
  int dims[TensorView::kMaxDims];
  int n = 0;
  for (int d = 0; d < t.ndim; ++d) {
    WEFT_CHECK_ARG(t.strides[d] >= 0, name, "negative stride in dim " << d << " of " << t.describe());
    if (t.shape[d] > 1) dims[n++] = d;
  }
  for (int i = 1; i < n; ++i)  // insertion sort by stride (at most kMaxDims entries)
    for (int j = i; j > 0 && t.strides[dims[j]] < t.strides[dims[j - 1]]; --j) std::swap(dims[j], dims[j - 1]);
  int64_t span = 1;  // elements covered by the dims taken so far
  for (int i = 0; i < n; ++i) {
    const int d = dims[i];
    WEFT_CHECK_ARG(t.strides[d] >= span, name,
                   "strides make elements share an address (dim " << d << ", stride " << t.strides[d]
                                                                  << "): " << t.describe());
    span += (t.shape[d] - 1) * t.strides[d];
  }
}

}  // namespace weft::check
