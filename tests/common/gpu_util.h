// Shared test helpers (device side): skip without a GPU, RAII device buffers, NaN poisoning.
#pragma once
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "common/device_allocation.h"

#include <cstring>
#include <string>
#include <vector>

namespace weft::test {

// Empty string when a CUDA device is usable, else the reason it is not.
std::string gpu_unavailable_reason();

// First statement of every GPU test.
#define WEFT_REQUIRE_GPU()                                                  \
  do {                                                                      \
    const std::string weft_reason_ = ::weft::test::gpu_unavailable_reason(); \
    if (!weft_reason_.empty()) GTEST_SKIP() << "no usable CUDA device: " << weft_reason_; \
  } while (0)

#define WEFT_TEST_CUDA(expr)                                                                \
  do {                                                                                      \
    cudaError_t e_ = (expr);                                                                \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_);                  \
  } while (0)

// Owning device allocation of `bytes`; poison() fills with 0xFF bytes, which is NaN in f16,
// bf16 and f32, so any element a kernel fails to write shows up as NaN in the comparison.
class DeviceBuffer : public weft::detail::DeviceAllocation {
 public:
  using DeviceAllocation::DeviceAllocation;
  void poison(cudaStream_t stream = nullptr);
  void upload(const void* host, std::size_t bytes);
  void download(void* host, std::size_t bytes) const;
  template <class T> static DeviceBuffer from(const std::vector<T>& v) {
    DeviceBuffer b(v.size() * sizeof(T));
    b.upload(v.data(), v.size() * sizeof(T));
    return b;
  }
  template <class T> std::vector<T> to_vector(std::size_t n) const {
    std::vector<T> v(n);
    download(v.data(), n * sizeof(T));
    return v;
  }
};

}  // namespace weft::test
