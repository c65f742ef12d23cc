// Internal: CUDA error checks that throw weft::Error("CUDA", ...).
#pragma once
#include <cuda_runtime_api.h>

#include "weft/error.h"

#define WEFT_CUDA_CHECK(expr)                                                            \
  do {                                                                                   \
    cudaError_t weft_err_ = (expr);                                                      \
    if (weft_err_ != cudaSuccess)                                                        \
      throw ::weft::Error("CUDA", std::string(#expr) + " failed: " +                     \
                                      cudaGetErrorString(weft_err_) + " at " __FILE__ ":" + \
                                      std::to_string(__LINE__));                         \
  } while (0)

// After a launch: catches configuration errors immediately (asynchronous faults surface later).
#define WEFT_CUDA_CHECK_LAUNCH() WEFT_CUDA_CHECK(cudaPeekAtLastError())
