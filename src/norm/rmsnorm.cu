// RMSNorm and fused residual-add + RMSNorm: one row per group of threads, the row held in
// registers between the sum-of-squares and the scaling (one read of every input element).
#include <cuda_runtime.h>

#include "common/cuda_check.h"
#include "common/types.cuh"
#include "common/vec8.cuh"
#include "norm/norm_launch.h"
#include "norm/norm_validate.h"
#include "norm/row_layout.h"
#include "weft/norm.h"
#include "weft/validate.h"

namespace weft::norm_detail {
namespace {

struct KernelParams {
  NormArgs a;
  int vecs, tpr, vpt;
};

// Instantiated per dtype and per register budget kMaxVpt (4: hidden <= 8192, ~half the
// registers of 8, twice the resident CTAs per SM; 8: up to 16384); `fused` and the layout are
// runtime values.
template <class T, int kMaxVpt>
__global__ void __launch_bounds__(kNormBlock) rmsnorm_kernel(const KernelParams p) {
  __shared__ float scratch[kNormBlock / 32];
  const int tpr = p.tpr;
  const int g = threadIdx.x & (tpr - 1);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kNormBlock / tpr) + threadIdx.x / tpr;
  const bool active = row < p.a.tokens;

  uint4 v[kMaxVpt];   // the row (input, then the rounded residual)
  float ss = 0.f;
  if (active) {
    const uint4* xr = reinterpret_cast<const uint4*>(static_cast<const T*>(p.a.x) + row * p.a.x_stride);
#pragma unroll
    for (int k = 0; k < kMaxVpt; ++k) {
      const int idx = g + k * tpr;
      if (k < p.vpt && idx < p.vecs) v[k] = xr[idx];
    }
    if (p.a.fused) {
      uint4* rr = reinterpret_cast<uint4*>(static_cast<T*>(p.a.residual) + row * p.a.residual_stride);
      uint4 r[kMaxVpt];
#pragma unroll
      for (int k = 0; k < kMaxVpt; ++k) {
        const int idx = g + k * tpr;
        if (k < p.vpt && idx < p.vecs) r[k] = rr[idx];
      }
#pragma unroll
      for (int k = 0; k < kMaxVpt; ++k) {
        const int idx = g + k * tpr;
        if (k < p.vpt && idx < p.vecs) {
          float fx[8], fr[8];
          detail::unpack8<T>(v[k], fx);
          detail::unpack8<T>(r[k], fr);
#pragma unroll
          for (int i = 0; i < 8; ++i) fr[i] = fr[i] + fx[i];
          v[k] = detail::pack8<T>(fr);  // rounded residual: stored, and what is normalized
          rr[idx] = v[k];
        }
      }
    }
#pragma unroll
    for (int k = 0; k < kMaxVpt; ++k) {
      const int idx = g + k * tpr;
      if (k < p.vpt && idx < p.vecs) {
        float f[8];
        detail::unpack8<T>(v[k], f);
#pragma unroll
        for (int i = 0; i < 8; ++i) ss += f[i] * f[i];
      }
    }
  }
  const float total = detail::group_sum(ss, tpr, scratch);
  if (!active) return;
  const float inv = rsqrtf(total / static_cast<float>(p.a.hidden) + p.a.eps);
  const uint4* w = static_cast<const uint4*>(p.a.weight);
  uint4* orow = reinterpret_cast<uint4*>(static_cast<T*>(p.a.out) + row * p.a.out_stride);
#pragma unroll
  for (int k = 0; k < kMaxVpt; ++k) {
    const int idx = g + k * tpr;
    if (k < p.vpt && idx < p.vecs) {
      float f[8], fw[8];
      detail::unpack8<T>(v[k], f);
      detail::unpack8<T>(__ldg(w + idx), fw);
#pragma unroll
      for (int i = 0; i < 8; ++i) f[i] = f[i] * inv * fw[i];
      orow[idx] = detail::pack8<T>(f);
    }
  }
}

}  // namespace

void launch_rmsnorm(const NormArgs& a, DType dtype, cudaStream_t stream) {
  if (a.tokens == 0) return;
  const RowLayout l = make_row_layout(a.hidden, kNormBlock, kNormTargetVpt, kNormMaxVpt);
  WEFT_CHECK_ARG(l.vecs_per_thread <= kNormMaxVpt, "hidden", "too large for one CTA: " << a.hidden);
  KernelParams p{a, l.vecs, l.threads_per_row, l.vecs_per_thread};
  const int64_t blocks = (a.tokens + l.rows_per_cta - 1) / l.rows_per_cta;
  WEFT_CHECK_ARG(blocks <= 0x7fffffff, "tokens", "too many rows: " << a.tokens);
  WEFT_DISPATCH_HALF_TYPES(dtype, "x", [&] {
    if (l.vecs_per_thread <= 4)
      rmsnorm_kernel<scalar_t, 4><<<static_cast<unsigned>(blocks), kNormBlock, 0, stream>>>(p);
    else
      rmsnorm_kernel<scalar_t, kNormMaxVpt><<<static_cast<unsigned>(blocks), kNormBlock, 0, stream>>>(p);
  });
  WEFT_CUDA_CHECK_LAUNCH();
}

}  // namespace weft::norm_detail

namespace weft {

void rmsnorm(const TensorView& x, const TensorView& weight, const TensorView& out, double eps,
             cudaStream_t stream) {
  using namespace norm_detail;
  check_rows(x, "x");
  check_rows(out, "out");
  check::same_dtype(x, "x", out, "out");
  WEFT_CHECK_ARG(out.shape[0] == x.shape[0] && out.shape[1] == x.shape[1], "out",
                 "expected the shape of x " << x.describe() << ", got " << out.describe());
  check_weight(weight, "weight", x, "x");
  check_eps(eps, "eps");
  const bool in_place = out.data == x.data && out.strides[0] == x.strides[0];
  if (!in_place) check_disjoint(x, "x", out, "out");
  check_disjoint(out, "out", weight, "weight");
  NormArgs a;
  a.x = x.data;
  a.x_stride = x.strides[0];
  a.weight = weight.data;
  a.out = out.data;
  a.out_stride = out.strides[0];
  a.tokens = x.shape[0];
  a.hidden = x.shape[1];
  a.eps = static_cast<float>(eps);
  launch_rmsnorm(a, x.dtype, stream);
}

void fused_add_rmsnorm(const TensorView& x, const TensorView& residual, const TensorView& weight,
                       double eps, cudaStream_t stream) {
  using namespace norm_detail;
  check_rows(x, "x");
  check_rows(residual, "residual");
  check::same_dtype(x, "x", residual, "residual");
  WEFT_CHECK_ARG(residual.shape[0] == x.shape[0] && residual.shape[1] == x.shape[1], "residual",
                 "expected the shape of x " << x.describe() << ", got " << residual.describe());
  check_weight(weight, "weight", x, "x");
  check_eps(eps, "eps");
  check_disjoint(x, "x", residual, "residual");
  check_disjoint(x, "x", weight, "weight");
  check_disjoint(residual, "residual", weight, "weight");
  NormArgs a;
  a.x = x.data;
  a.x_stride = x.strides[0];
  a.residual = residual.data;
  a.residual_stride = residual.strides[0];
  a.weight = weight.data;
  a.out = x.data;
  a.out_stride = x.strides[0];
  a.tokens = x.shape[0];
  a.hidden = x.shape[1];
  a.eps = static_cast<float>(eps);
  a.fused = true;
  launch_rmsnorm(a, x.dtype, stream);
}

}  // namespace weft
