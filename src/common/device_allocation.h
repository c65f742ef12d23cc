// Internal (host): RAII owner of one cudaMalloc allocation. Shared by the benchmark's and the
// tests' buffers so the allocate/free/move logic lives in one place.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <utility>

#include "weft/error.h"

namespace weft::detail {

class DeviceAllocation {
 public:
  DeviceAllocation() = default;
  explicit DeviceAllocation(std::size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    const cudaError_t e = cudaMalloc(&ptr_, bytes);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // an allocation failure is not sticky: clear it
      ptr_ = nullptr;
      throw Error("CUDA", "cudaMalloc(" + std::to_string(bytes) + " bytes) failed: " +
                              cudaGetErrorString(e));
    }
  }
  ~DeviceAllocation() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceAllocation(DeviceAllocation&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceAllocation& operator=(DeviceAllocation&& o) noexcept {
    if (this != &o) {
      if (ptr_) cudaFree(ptr_);
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  DeviceAllocation(const DeviceAllocation&) = delete;
  DeviceAllocation& operator=(const DeviceAllocation&) = delete;

  void* get() const { return ptr_; }
  template <class T> T* as() const { return static_cast<T*>(ptr_); }
  std::size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace weft::detail
