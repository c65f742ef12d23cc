// Internal: element-type plumbing shared by all kernels (device side).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include "common/rtc_compat.h"
#if !WEFT_RTC
#include "weft/dtype.h"
#include "weft/error.h"
#endif

namespace weft::detail {

#if !WEFT_RTC  // host only (NVRTC: common/rtc_compat.h)
template <class T> struct TypeOf;  // DType of a device element type
template <> struct TypeOf<half> { static constexpr DType value = DType::kFloat16; };
template <> struct TypeOf<__nv_bfloat16> { static constexpr DType value = DType::kBFloat16; };
template <> struct TypeOf<float> { static constexpr DType value = DType::kFloat32; };
template <> struct TypeOf<__nv_fp8_e4m3> { static constexpr DType value = DType::kFloat8E4M3; };
template <> struct TypeOf<__nv_fp8_e5m2> { static constexpr DType value = DType::kFloat8E5M2; };
#endif  // !WEFT_RTC

__device__ __forceinline__ float to_float(half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(float x) { return x; }

template <class T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ half from_float<half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }

// 16 bytes: the access width every kernel uses for global memory (one LDG.128 / STG.128).
struct alignas(16) Vec16 {
  uint4 raw;
};
template <class T> constexpr int kElemsPer16B = 16 / sizeof(T);

}  // namespace weft::detail

// Dispatch a runtime f16/bf16 DType to a type alias `scalar_t` inside the lambda-like body.
#define WEFT_DISPATCH_HALF_TYPES(dtype, arg_name, ...)                                   \
  [&] {                                                                                  \
    switch (dtype) {                                                                     \
      case ::weft::DType::kFloat16: { using scalar_t = half; return __VA_ARGS__(); }      \
      case ::weft::DType::kBFloat16: { using scalar_t = __nv_bfloat16; return __VA_ARGS__(); } \
      default:                                                                           \
        throw ::weft::Error(arg_name, std::string("unsupported dtype ") + ::weft::dtype_name(dtype)); \
    }                                                                                    \
  }()
