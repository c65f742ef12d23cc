#include "common/gpu_util.h"

#include <stdexcept>

namespace weft::test {

std::string gpu_unavailable_reason() {
  static const std::string reason = [] {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      std::string r = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
      cudaGetLastError();
      return r;
    }
    if (n == 0) return std::string("no CUDA devices found");
    return std::string();
  }();
  return reason;
}

static void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes) check(cudaMalloc(&ptr_, bytes), "cudaMalloc");
}
DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
  o.ptr_ = nullptr;
  o.bytes_ = 0;
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}
void DeviceBuffer::poison(cudaStream_t stream) {
  if (bytes_) check(cudaMemsetAsync(ptr_, 0xFF, bytes_, stream), "poison");
}
void DeviceBuffer::upload(const void* host, std::size_t bytes) {
  if (bytes) check(cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice), "upload");
}
void DeviceBuffer::download(void* host, std::size_t bytes) const {
  if (bytes) check(cudaMemcpy(host, ptr_, bytes, cudaMemcpyDeviceToHost), "download");
}

}  // namespace weft::test
