// Element-wise kernels of the TP layer runner: the MLP's SiLU-mul and the random initializer.
#include "common/cuda_check.h"
#include "common/types.cuh"
#include "common/vec8.cuh"
#include "tp/tp_kernels.h"

namespace weft::tp {
namespace {

constexpr int kBlock = 256;

template <class T>
__global__ void silu_mul_kernel(const uint4* __restrict__ gu, uint4* __restrict__ act, int64_t rows, int64_t vecs) {
  const int64_t n = rows * vecs;
  for (int64_t i = blockIdx.x * int64_t{kBlock} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kBlock) {
    const int64_t r = i / vecs, v = i - r * vecs;
    float g[8], u[8];
    detail::unpack8<T>(__ldg(gu + r * 2 * vecs + v), g);
    detail::unpack8<T>(__ldg(gu + r * 2 * vecs + vecs + v), u);
#pragma unroll
    for (int j = 0; j < 8; ++j) g[j] = g[j] / (1.f + __expf(-g[j])) * u[j];
    act[i] = detail::pack8<T>(g);
  }
}

__device__ __forceinline__ uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <class T>
__global__ void fill_kernel(T* dst, int64_t n, float lo, float hi, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{kBlock} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kBlock) {
    const uint64_t h = mix64(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(i));
    const float u = static_cast<float>(h >> 40) * (1.f / 16777216.f);  // 24 bits in [0, 1)
    dst[i] = detail::from_float<T>(lo + (hi - lo) * u);
  }
}

int grid_for(int64_t n) {
  // Grid-stride loops: at most 132 SMs x 8 CTAs of 256 threads in flight (enough to saturate HBM).
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  return static_cast<int>(blocks < 1056 ? (blocks < 1 ? 1 : blocks) : 1056);
}

}  // namespace

void launch_silu_mul(const void* gu, void* act, int64_t rows, int64_t inter, DType dtype, cudaStream_t stream) {
  if (rows == 0) return;
  const int64_t vecs = inter / 8;
  WEFT_DISPATCH_HALF_TYPES(dtype, "dtype", [&] {
    silu_mul_kernel<scalar_t><<<grid_for(rows * vecs), kBlock, 0, stream>>>(static_cast<const uint4*>(gu),
                                                                            static_cast<uint4*>(act), rows, vecs);
  });
  WEFT_CUDA_CHECK_LAUNCH();
}

void launch_fill_uniform(void* dst, int64_t n, float lo, float hi, uint64_t seed, DType dtype, cudaStream_t stream) {
  if (n == 0) return;
  WEFT_DISPATCH_HALF_TYPES(dtype, "dtype", [&] {
    fill_kernel<scalar_t><<<grid_for(n), kBlock, 0, stream>>>(static_cast<scalar_t*>(dst), n, lo, hi, seed);
  });
  WEFT_CUDA_CHECK_LAUNCH();
}

}  // namespace weft::tp
