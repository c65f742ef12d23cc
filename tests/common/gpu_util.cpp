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

void DeviceBuffer::poison(cudaStream_t stream) {
  if (bytes()) check(cudaMemsetAsync(get(), 0xFF, bytes(), stream), "poison");
}
void DeviceBuffer::upload(const void* host, std::size_t bytes) {
  if (bytes) check(cudaMemcpy(get(), host, bytes, cudaMemcpyHostToDevice), "upload");
}
void DeviceBuffer::download(void* host, std::size_t bytes) const {
  if (bytes) check(cudaMemcpy(host, get(), bytes, cudaMemcpyDeviceToHost), "download");
}

}  // namespace weft::test
