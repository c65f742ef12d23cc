// Internal (device): 16-byte vectors of eight f16/bf16 values <-> eight floats, and group
// reductions used by row-wise kernels (norms, fused all-reduce + norm).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace weft::detail {

template <class T> struct Pair2;
template <> struct Pair2<half> {
  using type = __half2;
  static __device__ __forceinline__ float2 to_f2(type v) { return __half22float2(v); }
  static __device__ __forceinline__ type from_f2(float a, float b) { return __floats2half2_rn(a, b); }
};
template <> struct Pair2<__nv_bfloat16> {
  using type = __nv_bfloat162;
  static __device__ __forceinline__ float2 to_f2(type v) { return __bfloat1622float2(v); }
  static __device__ __forceinline__ type from_f2(float a, float b) { return __floats2bfloat162_rn(a, b); }
};

// uint4 (8 x T) -> f[8]
template <class T>
__device__ __forceinline__ void unpack8(const uint4& v, float* f) {
  using P = Pair2<T>;
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    typename P::type h;
    static_assert(sizeof(h) == 4, "pair of 16-bit values");
    __builtin_memcpy(&h, &w[i], 4);
    const float2 p = P::to_f2(h);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

// f[8] -> uint4 (8 x T), round to nearest even.
template <class T>
__device__ __forceinline__ uint4 pack8(const float* f) {
  using P = Pair2<T>;
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const typename P::type h = P::from_f2(f[2 * i], f[2 * i + 1]);
    __builtin_memcpy(&w[i], &h, 4);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum of `v` over each group of `threads_per_row` consecutive threads (a power of two >= 32
// dividing blockDim.x). Every thread of the block must call it (it contains __syncthreads).
// `scratch` holds blockDim.x / 32 floats. Fixed reduction order: deterministic.
__device__ __forceinline__ float group_sum(float v, int threads_per_row, float* scratch) {
  v = warp_sum(v);
  const int warp = threadIdx.x >> 5;
  if ((threadIdx.x & 31) == 0) scratch[warp] = v;
  __syncthreads();
  const int wpr = threads_per_row >> 5;
  const int first = (warp / wpr) * wpr;
  float s = 0.f;
  for (int w = 0; w < wpr; ++w) s += scratch[first + w];
  __syncthreads();  // scratch may be reused right after
  return s;
}

}  // namespace weft::detail
