// Internal, host-only: raw launcher of the row-wise RMSNorm kernels (after validation).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "weft/dtype.h"

namespace weft::norm_detail {

// 256 threads: 8 warps; with up to 8 vectors (128 B) per thread a 16384-wide row fits in one
// CTA, and two CTAs fit per SM at the kernel's register count (enough bytes in flight for HBM).
constexpr int kNormBlock = 256;
// Vectors per thread the layout aims for (4 x 16 B loads in flight per input per thread) and
// the most a thread holds (hidden 16384 = 2048 vectors over 256 threads).
constexpr int kNormTargetVpt = 4;
constexpr int kNormMaxVpt = 8;

struct NormArgs {
  const void* x = nullptr;  // [tokens, hidden] input
  int64_t x_stride = 0;     // elements between rows
  void* residual = nullptr; // fused only: [tokens, hidden], updated in place
  int64_t residual_stride = 0;
  const void* weight = nullptr;  // [hidden]
  void* out = nullptr;      // [tokens, hidden] (may equal x)
  int64_t out_stride = 0;
  int64_t tokens = 0;
  int64_t hidden = 0;
  float eps = 1e-6f;
  bool fused = false;       // residual += x; out = rmsnorm(rounded residual)
};

void launch_rmsnorm(const NormArgs& a, DType dtype, cudaStream_t stream);

}  // namespace weft::norm_detail
