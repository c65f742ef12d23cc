// Launcher and occupancy of the fused kernel for one head dim (included once by pod_d64.cu and
// pod_d128.cu, so the two head dims compile in parallel).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/cuda_check.h"
#include "decode/launch.h"
#include "pod/pod_kernel.cuh"

namespace weft::pod {

template <class T, int D>
void launch_typed(const prefill::PrefillParams& pre, const decode::LaunchArgs& dec, const Workspace& ws,
                  int32_t grid, cudaStream_t stream) {
  PodParams<T> p;
  p.pre = pre;
  p.dec = decode::make_decode_params<T, T>(dec);
  p.bind = ws.bind;
  p.counters = ws.counters;
  pod_kernel<T, D><<<grid, kThreads, PodTraits<T, D>::kSmem, stream>>>(p);
  WEFT_CUDA_CHECK_LAUNCH();
}

template <class T, int D>
int32_t occupancy_typed() {
  auto kernel = pod_kernel<T, D>;
  const int smem = static_cast<int>(PodTraits<T, D>::kSmem);
  WEFT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int n = 0;
  WEFT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, smem));
  return n;
}

}  // namespace weft::pod

#define WEFT_POD_INSTANCE(D)                                                                                 \
  namespace weft::pod {                                                                                    \
  void launch_d##D(const prefill::PrefillParams& pre, const decode::LaunchArgs& dec, const Workspace& ws,  \
                   int32_t grid, cudaStream_t stream) {                                                    \
    if (dec.dtype == DType::kBFloat16)                                                                     \
      launch_typed<__nv_bfloat16, D>(pre, dec, ws, grid, stream);                                          \
    else                                                                                                   \
      launch_typed<half, D>(pre, dec, ws, grid, stream);                                                   \
  }                                                                                                        \
  int32_t occupancy_d##D(DType dtype) {                                                                    \
    return dtype == DType::kBFloat16 ? occupancy_typed<__nv_bfloat16, D>() : occupancy_typed<half, D>(); \
  }                                                                                                        \
  }
