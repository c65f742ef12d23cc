// Internal (host declarations of src/tp/tp_kernels.cu).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "weft/dtype.h"

namespace weft::tp {

// act[m, i] = silu(gu[m, i]) * gu[m, inter + i] for rows [0, rows), i < inter (gu row stride
// 2 * inter, act row stride inter); fp32 math, one rounding. inter % 8 == 0.
void launch_silu_mul(const void* gu, void* act, int64_t rows, int64_t inter, DType dtype, cudaStream_t stream);

// n values uniform in [lo, hi), rounded to dtype, from a counter-based hash of (seed, index):
// the same (seed, n) gives the same tensor on every rank and every run.
void launch_fill_uniform(void* dst, int64_t n, float lo, float hi, uint64_t seed, DType dtype, cudaStream_t stream);

}  // namespace weft::tp
