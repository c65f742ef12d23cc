// TensorView: a non-owning view of a strided tensor (pointer, dtype, shape, strides, device).
// Strides are in elements, not bytes. Host-only header.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "weft/dtype.h"
#include "weft/export.h"

namespace weft WEFT_API {

enum class Device : int32_t { kCPU = 0, kCUDA = 1 };

struct TensorView {
  static constexpr int kMaxDims = 6;

  void* data = nullptr;
  DType dtype = DType::kFloat32;
  int32_t ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> strides{};  // in elements
  Device device = Device::kCUDA;
  int32_t device_id = 0;

  TensorView() = default;
  // Row-major contiguous view.
  TensorView(void* data, DType dtype, std::initializer_list<int64_t> shape,
             Device device = Device::kCUDA, int32_t device_id = 0);
  // Explicit strides (elements).
  TensorView(void* data, DType dtype, std::initializer_list<int64_t> shape,
             std::initializer_list<int64_t> strides, Device device = Device::kCUDA,
             int32_t device_id = 0);

  int64_t size(int dim) const { return shape[dim < 0 ? dim + ndim : dim]; }
  int64_t stride(int dim) const { return strides[dim < 0 ? dim + ndim : dim]; }
  int64_t numel() const;
  std::size_t element_size() const { return dtype_size(dtype); }
  bool is_contiguous() const;
  bool defined() const { return data != nullptr || numel() == 0; }
  template <class T>
  T* ptr() const { return static_cast<T*>(data); }
  // "[4, 32, 128] bf16 cuda:0"
  std::string describe() const;
};

}  // namespace weft
