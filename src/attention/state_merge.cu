// The public merge of attention states (weft/merge.h): a group of threads per (token, head) row,
// 16-byte vectors of v, fp32 weights and sums, states accumulated in index order.
#include <cuda_runtime.h>

#include "attention/state_merge.h"
#include "common/cuda_check.h"
#include "common/types.cuh"
#include "common/vec8.cuh"

namespace weft::attn {
namespace {

// 4 warps: enough rows per CTA (4..64) for the short rows of small head_dims, and small CTAs keep
// the grid's tail short for the few-token merges of decode steps.
constexpr int kBlock = 128;
// States whose 16-byte vector a thread loads before it accumulates them: 8 x 16 B in flight per
// thread covers an HBM latency for the usual 2..17 states without spilling (8 uint4 = 32 regs).
constexpr int kBatch = 8;

// 16 bytes of T <-> floats (8 for f16 / bf16, 4 for f32).
template <class T>
__device__ __forceinline__ void widen16(const uint4& u, float* f) {
  detail::unpack8<T>(u, f);
}
template <>
__device__ __forceinline__ void widen16<float>(const uint4& u, float* f) {
  f[0] = __uint_as_float(u.x);
  f[1] = __uint_as_float(u.y);
  f[2] = __uint_as_float(u.z);
  f[3] = __uint_as_float(u.w);
}
template <class T>
__device__ __forceinline__ uint4 narrow16(const float* f) {
  return detail::pack8<T>(f);
}
template <>
__device__ __forceinline__ uint4 narrow16<float>(const float* f) {
  return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]), __float_as_uint(f[3]));
}

template <class T>
__global__ void __launch_bounds__(kBlock) state_merge_kernel(const StateMergeArgs a, int vecs, int tpr) {
  constexpr int E = detail::kElemsPer16B<T>;
  const int g = threadIdx.x & (tpr - 1);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kBlock / tpr) + threadIdx.x / tpr;
  const int64_t t = row / a.heads, h = row - t * a.heads;
  const bool active = row < a.seq * a.heads && (a.mask == nullptr || a.mask[t] != 0);
  const int n = a.num_states;
  const StateSource& s0 = a.src[0];
  const StateSource& s1 = a.src[1];
  // This row of state 0 and of state 1 (states k >= 1 follow state 1 by (k - 1) state strides).
  const float* l0 = s0.s + t * s0.s_seq + h * s0.s_head;
  const float* l1 = n > 1 ? s1.s + t * s1.s_seq + h * s1.s_head : nullptr;
  const uint4* v0 = reinterpret_cast<const uint4*>(static_cast<const T*>(s0.v) + t * s0.v_seq + h * s0.v_head);
  const T* v1 = n > 1 ? static_cast<const T*>(s1.v) + t * s1.v_seq + h * s1.v_head : nullptr;
  auto lse = [&](int k) { return k == 0 ? *l0 : l1[(k - 1) * a.s_state]; };
  auto vec = [&](int k) { return k == 0 ? v0 : reinterpret_cast<const uint4*>(v1 + (k - 1) * a.v_state); };

  // Natural log throughout: m = max_k s_k, w_k = exp(s_k - m) (-inf -> 0), sum in state order.
  float m = -INFINITY, sum = 0.f;
  if (active) {
    for (int k = 0; k < n; ++k) m = fmaxf(m, lse(k));
    if (m != -INFINITY)
      for (int k = 0; k < n; ++k) sum += expf(lse(k) - m);
  }
  if (active) {
    uint4* orow = reinterpret_cast<uint4*>(static_cast<T*>(a.v_out) + t * a.vo_seq + h * a.vo_head);
    const float inv = m == -INFINITY ? 0.f : 1.f / sum;
    for (int j = g; j < vecs; j += tpr) {
      float acc[E];
#pragma unroll
      for (int e = 0; e < E; ++e) acc[e] = 0.f;
      for (int kb = 0; m != -INFINITY && kb < n; kb += kBatch) {
        uint4 buf[kBatch];
#pragma unroll
        for (int i = 0; i < kBatch; ++i)
          if (kb + i < n) buf[i] = vec(kb + i)[j];
#pragma unroll
        for (int i = 0; i < kBatch; ++i) {
          if (kb + i < n) {
            const float w = expf(lse(kb + i) - m);
            float f[E];
            widen16<T>(buf[i], f);
            // A state at -inf is skipped, not multiplied by 0: its v may hold NaN / garbage.
#pragma unroll
            for (int e = 0; e < E; ++e) acc[e] += w > 0.f ? w * f[e] : 0.f;
          }
        }
      }
#pragma unroll
      for (int e = 0; e < E; ++e) acc[e] *= inv;
      orow[j] = narrow16<T>(acc);  // in place: the same thread read this vector above
    }
  }
  // In place, s_out is state 0's LSE, which every thread of the row group read above: write it
  // after the whole group has. Groups never straddle warps; every thread of the CTA gets here.
  __syncwarp();
  if (active && g == 0 && a.s_out != nullptr)
    a.s_out[t * a.so_seq + h * a.so_head] = m == -INFINITY ? -INFINITY : m + logf(sum);
}

}  // namespace

int state_merge_threads_per_row(int64_t head_dim, DType dtype) {
  const int64_t vecs = head_dim * static_cast<int64_t>(dtype_size(dtype)) / 16;
  int tpr = 1;
  while (tpr < vecs && tpr < 32) tpr *= 2;
  return tpr;
}

void launch_state_merge(const StateMergeArgs& a, DType dtype, cudaStream_t stream) {
  const int64_t rows = a.seq * a.heads;
  if (rows == 0) return;
  const int vecs = static_cast<int>(a.head_dim * static_cast<int64_t>(dtype_size(dtype)) / 16);
  const int tpr = state_merge_threads_per_row(a.head_dim, dtype);
  const int64_t rows_per_cta = kBlock / tpr;
  const int64_t blocks = (rows + rows_per_cta - 1) / rows_per_cta;
  WEFT_CHECK_ARG(blocks <= 0x7fffffff, "v", "too many rows: " << rows);
  const unsigned grid = static_cast<unsigned>(blocks);
  switch (dtype) {
    case DType::kFloat16: state_merge_kernel<half><<<grid, kBlock, 0, stream>>>(a, vecs, tpr); break;
    case DType::kBFloat16: state_merge_kernel<__nv_bfloat16><<<grid, kBlock, 0, stream>>>(a, vecs, tpr); break;
    case DType::kFloat32: state_merge_kernel<float><<<grid, kBlock, 0, stream>>>(a, vecs, tpr); break;
    default: throw Error("v", std::string("unsupported dtype ") + dtype_name(dtype));
  }
  WEFT_CUDA_CHECK_LAUNCH();
}

}  // namespace weft::attn
