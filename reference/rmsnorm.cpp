// float64 RMSNorm references (plain, fused residual add, all-reduce + residual add).
#include "reference/rmsnorm.h"

#include <cmath>
#include <stdexcept>

namespace weft::ref {

std::vector<double> rmsnorm_d(const double* x, const float* weight, int64_t tokens, int64_t hidden, double eps) {
  if (tokens < 0 || hidden <= 0) throw std::invalid_argument("weft::ref::rmsnorm: bad shape");
  std::vector<double> out(tokens * hidden);
  for (int64_t t = 0; t < tokens; ++t) {
    const double* xr = x + t * hidden;
    double ss = 0;
    for (int64_t c = 0; c < hidden; ++c) ss += xr[c] * xr[c];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(hidden) + eps);
    for (int64_t c = 0; c < hidden; ++c) out[t * hidden + c] = xr[c] * inv * static_cast<double>(weight[c]);
  }
  return out;
}

std::vector<double> rmsnorm(const float* x, const float* weight, int64_t tokens, int64_t hidden, double eps) {
  const std::vector<double> xd(x, x + tokens * hidden);
  return rmsnorm_d(xd.data(), weight, tokens, hidden, eps);
}

FusedNormResult fused_add_rmsnorm(const float* x, const float* residual, const float* weight, int64_t tokens,
                                  int64_t hidden, double eps, Rounding round_residual_to) {
  FusedNormResult r;
  r.residual.resize(tokens * hidden);
  for (int64_t n = 0; n < tokens * hidden; ++n) {
    if (round_residual_to == Rounding::kNone) {
      r.residual[n] = static_cast<double>(residual[n]) + static_cast<double>(x[n]);
    } else {
      const float sum = residual[n] + x[n];  // fp32 add, as the kernel does
      r.residual[n] = round_value(round_residual_to, sum);
    }
  }
  r.out = rmsnorm_d(r.residual.data(), weight, tokens, hidden, eps);
  return r;
}

std::vector<double> allreduce_sum(const std::vector<const float*>& per_rank, int64_t n) {
  std::vector<double> s(n, 0.0);
  for (const float* x : per_rank) {
    for (int64_t i = 0; i < n; ++i) s[i] += static_cast<double>(x[i]);
  }
  return s;
}

FusedNormResult allreduce_add_rmsnorm(const std::vector<const float*>& per_rank_x, const float* residual,
                                      const float* weight, int64_t tokens, int64_t hidden, double eps,
                                      Rounding round_residual_to) {
  if (per_rank_x.empty()) throw std::invalid_argument("weft::ref::allreduce_add_rmsnorm: no ranks");
  const int64_t n = tokens * hidden;
  FusedNormResult r;
  if (round_residual_to == Rounding::kNone) {
    r.residual = allreduce_sum(per_rank_x, n);
    for (int64_t i = 0; i < n; ++i) r.residual[i] += static_cast<double>(residual[i]);
  } else {
    r.residual.resize(n);
    for (int64_t i = 0; i < n; ++i) {
      float acc = 0.f;  // fp32, rank order 0..R-1
      for (const float* x : per_rank_x) acc += x[i];
      acc += residual[i];
      r.residual[i] = round_value(round_residual_to, acc);
    }
  }
  r.out = rmsnorm_d(r.residual.data(), weight, tokens, hidden, eps);
  return r;
}

}  // namespace weft::ref
