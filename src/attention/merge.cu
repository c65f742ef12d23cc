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

// One merge entry's metadata (plan data, written by plan() before the producer kernel ran).
struct MergeEntry {
  int token0, kv_head, r0, r1, s0, s1;
};
__device__ __forceinline__ MergeEntry load_entry(const plan::PlanPointers& p, int m) {
  MergeEntry e;
  e.token0 = p.qo_indptr[p.merge_request[m]];
  e.kv_head = p.merge_kv_head[m];
  e.r0 = p.merge_row_begin[m];
  e.r1 = p.merge_row_end[m];
  e.s0 = p.merge_indptr[m];
  e.s1 = p.merge_indptr[m + 1];
  return e;
}

// Slots per batch of O loads in flight per lane (one float4 each): 16 keeps 64 registers of
// loads, so a typical split (<= 48 slots) costs <= 3 load latencies instead of one per 8 slots.
constexpr int kSlotBatch = 16;

// v[j] = column c (float4) of slot k + j of the row, j < min(kSlotBatch, cnt - k); zeros past.
__device__ __forceinline__ void load_slot_batch(float4 (&v)[kSlotBatch], const float* o_row0, int64_t slot_stride,
                                                int k, int cnt, int c, bool active) {
#pragma unroll
  for (int j = 0; j < kSlotBatch; ++j)
    v[j] = active && k + j < cnt ? reinterpret_cast<const float4*>(o_row0 + (k + j) * slot_stride)[c]
                                 : make_float4(0.f, 0.f, 0.f, 0.f);
}

template <class T>
__global__ void __launch_bounds__(kWarps * 32) plan_merge_kernel(plan::PlanPointers p, MergeOutput out) {
  // The plan metadata of this CTA's first entry is read BEFORE waiting for the producer: the merge
  // grid starts while the attention kernel runs (programmatic launch), so these dependent loads
  // (header -> entry -> qo_indptr) are off the critical path; after the wait only the partials
  // are read. (Measured with ncu on H200 at f96c783: the old merge, metadata after the wait and 8
  // slots per batch, took ~11.5 us for llama3 b1/kv32K, 8 entries x 4 rows x 33 slots.)
  const int num_merges = p.header->num_merges;
  const int tile_q = p.header->tile_q;
  MergeEntry first{};
  if (static_cast<int>(blockIdx.x) < num_merges) first = load_entry(p, blockIdx.x);
  // Wait for the attention grid to complete (and its partial writes to be visible) before
  // reading partials. A no-op when the launch had no programmatic dependency.
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int d4 = out.head_dim / 4;
  const int64_t slot_stride = static_cast<int64_t>(tile_q) * out.head_dim;  // floats between slots of a row
  for (int m = blockIdx.x; m < num_merges; m += gridDim.x) {
    const MergeEntry e = m == static_cast<int>(blockIdx.x) ? first : load_entry(p, m);
    for (int r = e.r0 + warp; r < e.r1; r += kWarps) {
      const int i = r - e.r0;
      const int n = e.s1 - e.s0;
      const float* lse_i = p.partial_lse + static_cast<int64_t>(e.s0) * tile_q + i;  // slot k: lse_i[k * tile_q]
      const float* o_i = p.partial_o + (static_cast<int64_t>(e.s0) * tile_q + i) * out.head_dim;
      // In flight together: this lane's first LSE (slot `lane`) and the first batch of O slots
      // of the first column block (their addresses do not depend on the LSEs).
      const float lse_lane = lane < n ? lse_i[static_cast<int64_t>(lane) * tile_q] : -INFINITY;
      float4 v[kSlotBatch];
      load_slot_batch(v, o_i, slot_stride, 0, min(32, n), lane, lane < d4);
      // Slot k's LSE lives on lane k % 32: max and sum are warp reductions (xor tree: a fixed
      // order, bitwise deterministic), so a merge of many slots costs ~one load latency, not n.
      float mx = lse_lane;
      for (int k = lane + 32; k < n; k += 32) mx = fmaxf(mx, lse_i[static_cast<int64_t>(k) * tile_q]);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const int token = e.token0 + r / out.group_size;
      const int head = e.kv_head * out.group_size + r % out.group_size;
      T* orow = static_cast<T*>(out.o) + token * out.o_stride_token + head * out.o_stride_head;
      if (mx == -INFINITY) {
        for (int c = lane; c < d4; c += 32) store4(orow + 4 * c, 0.f, 0.f, 0.f, 0.f);
        if (out.lse != nullptr && lane == 0) out.lse[token * out.lse_stride_token + head] = -INFINITY;
        continue;
      }
      const float w_lane = lane < n ? exp2f(lse_lane - mx) : 0.f;  // weight of slot `lane`
      float sum = w_lane;
      for (int k = lane + 32; k < n; k += 32) sum += exp2f(lse_i[static_cast<int64_t>(k) * tile_q] - mx);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      const float inv = 1.f / sum;
      // O: each lane owns 4 columns; slots are accumulated in KV order (sequential, fixed),
      // their weights broadcast from the lane that holds them; kSlotBatch loads in flight.
      for (int cb = 0; cb < d4; cb += 32) {
        const int c = cb + lane;
        const bool active = c < d4;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int kb = 0; kb < n; kb += 32) {
          const float wl = kb == 0 ? w_lane
                           : kb + lane < n ? exp2f(lse_i[static_cast<int64_t>(kb + lane) * tile_q] - mx)
                                           : 0.f;
          const int cnt = min(32, n - kb);
          for (int k = 0; k < cnt; k += kSlotBatch) {
            if (cb != 0 || kb != 0 || k != 0)  // the first batch is already in flight
              load_slot_batch(v, o_i + static_cast<int64_t>(kb) * slot_stride, slot_stride, k, cnt, c, active);
#pragma unroll
            for (int j = 0; j < kSlotBatch; ++j) {  // accumulated in slot order
              const float w = __shfl_sync(0xffffffffu, wl, (k + j) & 31);
              if (k + j < cnt) {
                acc.x += w * v[j].x;
                acc.y += w * v[j].y;
                acc.z += w * v[j].z;
                acc.w += w * v[j].w;
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
