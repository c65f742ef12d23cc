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
  const int num_merges = p.header->num_merges;  // plan metadata: written before the producer ran
  // Launched with programmatic stream serialization after the attention kernel: wait for that
  // grid to complete (and its partial writes to be visible) before reading partials. A no-op
  // when the launch had no programmatic dependency.
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  const int tile_q = p.header->tile_q;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int d4 = out.head_dim / 4;
  for (int m = blockIdx.x; m < num_merges; m += gridDim.x) {
    const int b = p.merge_request[m], h = p.merge_kv_head[m];
    const int r0 = p.merge_row_begin[m], r1 = p.merge_row_end[m];
    const int s0 = p.merge_indptr[m], s1 = p.merge_indptr[m + 1];
    for (int r = r0 + warp; r < r1; r += kWarps) {
      const int i = r - r0;
      const int n = s1 - s0;
      const float* lse_i = p.partial_lse + static_cast<int64_t>(s0) * tile_q + i;  // slot k: lse_i[k * tile_q]
      // Slot k's LSE lives on lane k % 32: max and sum are warp reductions (xor tree: a fixed
      // order, bitwise deterministic), so a merge of many slots costs ~one load latency, not n.
      float mx = -INFINITY;
      for (int k = lane; k < n; k += 32) mx = fmaxf(mx, lse_i[static_cast<int64_t>(k) * tile_q]);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const int token = p.qo_indptr[b] + r / out.group_size;
      const int head = h * out.group_size + r % out.group_size;
      T* orow = static_cast<T*>(out.o) + token * out.o_stride_token + head * out.o_stride_head;
      if (mx == -INFINITY) {
        for (int c = lane; c < d4; c += 32) store4(orow + 4 * c, 0.f, 0.f, 0.f, 0.f);
        if (out.lse != nullptr && lane == 0) out.lse[token * out.lse_stride_token + head] = -INFINITY;
        continue;
      }
      float sum = 0.f;
      for (int k = lane; k < n; k += 32) sum += exp2f(lse_i[static_cast<int64_t>(k) * tile_q] - mx);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      const float inv = 1.f / sum;
      // O: each lane owns 4 columns; slots are accumulated in KV order (sequential, fixed),
      // their weights broadcast from the lane that holds them; loads of 8 slots in flight.
      for (int cb = 0; cb < d4; cb += 32) {
        const int c = cb + lane;
        const bool active = c < d4;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int kb = 0; kb < n; kb += 32) {
          const float wl = kb + lane < n ? exp2f(lse_i[static_cast<int64_t>(kb + lane) * tile_q] - mx) : 0.f;
          const int cnt = min(32, n - kb);
          for (int k = 0; k < cnt; k += 8) {
            float w[8];
            float4 v[8];
#pragma unroll
            for (int j = 0; j < 8; ++j) {  // 8 independent loads in flight
              w[j] = __shfl_sync(0xffffffffu, wl, k + j);
              v[j] = active && k + j < cnt
                         ? reinterpret_cast<const float4*>(
                               p.partial_o + (static_cast<int64_t>(s0 + kb + k + j) * tile_q + i) * out.head_dim)[c]
                         : make_float4(0.f, 0.f, 0.f, 0.f);
            }
#pragma unroll
            for (int j = 0; j < 8; ++j) {  // then accumulated in slot order
              if (k + j < cnt) {
                acc.x += w[j] * v[j].x;
                acc.y += w[j] * v[j].y;
                acc.z += w[j] * v[j].z;
                acc.w += w[j] * v[j].w;
              }
            }
          }
        }
        if (active) store4(orow + 4 * c, acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
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
  // Programmatic dependent launch: the merge grid may be scheduled while the attention kernel
  // before it is still running (that kernel triggers early with griddepcontrol.launch_dependents)
  // and waits on the device (griddepcontrol.wait), which hides the launch gap between the two.
  // Captured into CUDA graphs as a programmatic edge.
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(num_blocks);
  cfg.blockDim = dim3(kWarps * 32);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  WEFT_DISPATCH_HALF_TYPES(out.dtype, "out", [&] {
    WEFT_CUDA_CHECK(cudaLaunchKernelEx(&cfg, plan_merge_kernel<scalar_t>, plan, out));
  });
  WEFT_CUDA_CHECK_LAUNCH();
}

}  // namespace weft::attn
