// Plan-ordered merge of fp32 partial attention states (see merge.cuh for the math).
#include "attention/merge.cuh"

#include <cmath>

#include "common/cuda_check.h"
#include "common/types.cuh"

namespace weft::attn {
namespace {

constexpr int kWarps = 4;  // one warp per output row; 4 rows in flight per CTA

template <class T>
__device__ __forceinline__ void store4(T* dst, float a, float b, float c, float d) {
  // 4 x 16-bit = 8 bytes; head_dim % 4 == 0 and 16-byte aligned rows keep this aligned.
  union { T h[4]; uint2 u; } pk;
  pk.h[0] = detail::from_float<T>(a);
  pk.h[1] = detail::from_float<T>(b);
  pk.h[2] = detail::from_float<T>(c);
  pk.h[3] = detail::from_float<T>(d);
  *reinterpret_cast<uint2*>(dst) = pk.u;
}

template <class T>
__global__ void __launch_bounds__(kWarps * 32) plan_merge_kernel(plan::PlanPointers p, MergeOutput out) {
  const int num_merges = p.header->num_merges;
  const int tile_q = p.header->tile_q;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int d4 = out.head_dim / 4;
  for (int m = blockIdx.x; m < num_merges; m += gridDim.x) {
    const int b = p.merge_request[m], h = p.merge_kv_head[m];
    const int r0 = p.merge_row_begin[m], r1 = p.merge_row_end[m];
    const int s0 = p.merge_indptr[m], s1 = p.merge_indptr[m + 1];
    for (int r = r0 + warp; r < r1; r += kWarps) {
      const int i = r - r0;
      float mx = -INFINITY;
      for (int s = s0; s < s1; ++s) mx = fmaxf(mx, p.partial_lse[s * tile_q + i]);
      const int token = p.qo_indptr[b] + r / out.group_size;
      const int head = h * out.group_size + r % out.group_size;
      T* orow = static_cast<T*>(out.o) + token * out.o_stride_token + head * out.o_stride_head;
      if (mx == -INFINITY) {
        for (int c = lane; c < d4; c += 32) store4(orow + 4 * c, 0.f, 0.f, 0.f, 0.f);
        if (out.lse != nullptr && lane == 0) out.lse[token * out.lse_stride_token + head] = -INFINITY;
        continue;
      }
      float sum = 0.f;
      for (int s = s0; s < s1; ++s) sum += exp2f(p.partial_lse[s * tile_q + i] - mx);
      const float inv = 1.f / sum;
      for (int c = lane; c < d4; c += 32) {
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int s = s0; s < s1; ++s) {
          const float w = exp2f(p.partial_lse[s * tile_q + i] - mx);
          const float4 v = reinterpret_cast<const float4*>(
              p.partial_o + (static_cast<int64_t>(s) * tile_q + i) * out.head_dim)[c];
          acc.x += w * v.x;
          acc.y += w * v.y;
          acc.z += w * v.z;
          acc.w += w * v.w;
        }
        store4(orow + 4 * c, acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
      }
      if (out.lse != nullptr && lane == 0)
        out.lse[token * out.lse_stride_token + head] = (mx + log2f(sum)) * 0.69314718055994531f;
    }
  }
}

}  // namespace

void launch_plan_merge(const plan::PlanPointers& plan, const MergeOutput& out, int num_blocks,
                       cudaStream_t stream) {
  WEFT_CHECK_ARG(out.head_dim % 4 == 0 && out.head_dim > 0, "head_dim",
                 "must be a positive multiple of 4, got " << out.head_dim);
  WEFT_CHECK_ARG(num_blocks >= 1, "num_blocks", "must be >= 1, got " << num_blocks);
  WEFT_DISPATCH_HALF_TYPES(out.dtype, "out", [&] {
    plan_merge_kernel<scalar_t><<<num_blocks, kWarps * 32, 0, stream>>>(plan, out);
  });
  WEFT_CUDA_CHECK_LAUNCH();
}

}  // namespace weft::attn
