// The standard-library subset device headers use, for both compilers: nvcc / g++ get <cmath>,
// <cstddef> and <cstdint>; NVRTC (weft::jit compiles kernels from these headers at run time)
// has no C/C++ standard library (and is run with -default-device, so unannotated constexpr
// helpers are device functions), so it gets CCCL's <cuda/std/...> equivalents (fixed-width
// integers and size_t in the global namespace, as <cstdint> gives them) and INFINITY.
// WEFT_RTC is 1 under NVRTC: headers guard their host-only parts (std::vector, std::string,
// launchers, weft::Error) with `#if !WEFT_RTC`, so what nvcc compiles is unchanged.
#pragma once
#if defined(__CUDACC_RTC__)
#define WEFT_RTC 1
#include <cuda/std/cstddef>
#include <cuda/std/cstdint>
#include <cuda/std/limits>
namespace std {
using ::size_t;  // constexpr helpers shared with the host spell it std::size_t
}
#ifndef INFINITY
#define INFINITY (::cuda::std::numeric_limits<float>::infinity())
#endif
#else
#define WEFT_RTC 0
#include <cmath>
#include <cstddef>
#include <cstdint>
#endif
