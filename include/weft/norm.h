// RMSNorm and fused residual-add + RMSNorm (single GPU). Host-only header.
//
//   rmsnorm:            out[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * weight
//   fused_add_rmsnorm:  residual[t, :] = round(residual[t, :] + x[t, :])      (in place)
//                       x[t, :]        = rmsnorm(residual[t, :]) * weight      (in place, as vLLM)
//
// Numerics: inputs are read once (each row is kept in registers), every sum is fp32, outputs are
// rounded once to the storage dtype. In the fused form the updated residual is rounded to the
// storage dtype FIRST and the norm is computed from that rounded value (what the caller will see
// in `residual`, and what vLLM / TokenWeave do); ref::fused_add_rmsnorm(..., round_residual_to)
// emulates it. The sum of squares is reduced in a fixed order: same inputs -> same bits.
//
// Shapes: x, out, residual [tokens, hidden] (inner stride 1, rows 16-byte aligned, any row
// stride); weight [hidden] contiguous. dtype f16 or bf16, all equal. hidden in [8, 16384], a
// multiple of 8 (16-byte vectors). tokens may be 0 (nothing is launched). eps finite and > 0.
// rmsnorm may run in place (out == x); any other overlap between tensors is rejected.
// Every check runs before a launch and throws weft::Error naming the argument.
#pragma once
#include <cuda_runtime_api.h>

#include "weft/export.h"
#include "weft/tensor.h"

namespace weft WEFT_API {

// Largest hidden size the norm kernels accept (a row must fit in one CTA's registers).
constexpr int64_t kNormMaxHidden = 16384;

void rmsnorm(const TensorView& x, const TensorView& weight, const TensorView& out, double eps,
             cudaStream_t stream);

void fused_add_rmsnorm(const TensorView& x, const TensorView& residual, const TensorView& weight,
                       double eps, cudaStream_t stream);

}  // namespace weft
