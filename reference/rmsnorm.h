// float64 reference for RMSNorm and its fused forms (residual add, all-reduce + residual add).
//
//   rmsnorm(x)[t, c] = x[t, c] / sqrt(mean_c(x[t, :]^2) + eps) * weight[c]
//
// Fused kernels (vLLM fused_add_rms_norm, TokenWeave / FlashInfer all-reduce fusion) first form
// the new residual r' = residual + x in fp32, STORE it in the storage dtype, and normalize the
// stored (rounded) value. `round_residual_to` emulates that: Rounding::kFloat16 / kBFloat16 round
// r' (computed as a float32 sum, exactly as the GPU does) to that type before normalizing, and the
// returned residual is the rounded one. Rounding::kNone keeps r' in double.
// Shapes: x, residual, out: [tokens, hidden] row-major; weight: [hidden]. Inputs are floats the
// test has already rounded to the storage dtype.
#pragma once
#include <cstdint>
#include <vector>

#include "reference/round.h"

namespace weft::ref {

std::vector<double> rmsnorm(const float* x, const float* weight, int64_t tokens, int64_t hidden, double eps);
// Same on double input (e.g. an already summed residual).
std::vector<double> rmsnorm_d(const double* x, const float* weight, int64_t tokens, int64_t hidden, double eps);

struct FusedNormResult {
  std::vector<double> residual;  // r' = residual + x (rounded per round_residual_to)
  std::vector<double> out;       // rmsnorm(r') * weight
};

FusedNormResult fused_add_rmsnorm(const float* x, const float* residual, const float* weight, int64_t tokens,
                                  int64_t hidden, double eps, Rounding round_residual_to = Rounding::kNone);

// Element-wise sum over ranks in rank order 0..R-1, in double: [n].
std::vector<double> allreduce_sum(const std::vector<const float*>& per_rank, int64_t n);

// r' = (sum over ranks of x_r) + residual, then rmsnorm(r') * weight. With round_residual_to
// f16/bf16, the all-reduced sum is accumulated in float32 in rank order (as a one-shot kernel
// does), residual added in float32, then rounded to the type.
FusedNormResult allreduce_add_rmsnorm(const std::vector<const float*>& per_rank_x, const float* residual,
                                      const float* weight, int64_t tokens, int64_t hidden, double eps,
                                      Rounding round_residual_to = Rounding::kNone);

}  // namespace weft::ref
