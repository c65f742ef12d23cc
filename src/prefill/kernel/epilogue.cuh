// Epilogue role: finish the softmax of an item and write it.
//   1. quad-reduce the row sums;
//   2. kWarpsKV > 1: the warps that split one row block's keys merge their (m, d, O) through
//      shared memory (fixed order: warp 0, 1, ... -> deterministic); warp kv 0 continues;
//   3. final item: O / d in the output dtype, LSE = (m + log2 d) * ln 2 (natural log);
//      split item: fp32 O / d and BASE-2 LSE into the plan's partial slot (merged by
//      attention/merge.cu). Empty rows: O = 0, LSE = -inf.
#pragma once
#include "common/rtc_compat.h"  // <cmath>, <cstdint> (CCCL under NVRTC)

#include "common/ptx.cuh"
#include "prefill/kernel/load.cuh"
#include "prefill/kernel/mainloop.cuh"
#include "prefill/kernel/params.h"

namespace weft::prefill {

template <class Tr>
__device__ __forceinline__ void reduce_row_sums(SoftmaxState<Tr>& st) {
#pragma unroll
  for (int mb = 0; mb < Tr::kMB; ++mb)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      st.d[mb][h] += __shfl_xor_sync(0xffffffffu, st.d[mb][h], 1);
      st.d[mb][h] += __shfl_xor_sync(0xffffffffu, st.d[mb][h], 2);
    }
}

// Cross-warp merge for kWarpsKV > 1. `scratch` is the (drained) K/V stage area as floats,
// laid out [warp][value][lane] so each warp-wide store/load touches 32 consecutive words.
// Caller: all cp.async groups waited and a __syncthreads() before; one after (scratch reuse).
template <class Tr>
__device__ __forceinline__ void merge_kv_warps(SoftmaxState<Tr>& st, float* scratch, int warp_q,
                                               int warp_kv, int lane) {
  constexpr int kVals = Tr::kFragO * 4 + 4;
  float* mine = scratch + (warp_q * Tr::kWarpsKV + warp_kv) * kVals * 32;
  if (warp_kv != 0) {
#pragma unroll
    for (int n = 0; n < Tr::kFragO; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) mine[(n * 4 + e) * 32 + lane] = st.o[0][n][e];
    mine[(Tr::kFragO * 4 + 0) * 32 + lane] = st.m[0][0];
    mine[(Tr::kFragO * 4 + 1) * 32 + lane] = st.m[0][1];
    mine[(Tr::kFragO * 4 + 2) * 32 + lane] = st.d[0][0];
    mine[(Tr::kFragO * 4 + 3) * 32 + lane] = st.d[0][1];
  }
  __syncthreads();
  if (warp_kv != 0) return;
#pragma unroll
  for (int w = 1; w < Tr::kWarpsKV; ++w) {
    const float* other = scratch + (warp_q * Tr::kWarpsKV + w) * kVals * 32;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float mo = other[(Tr::kFragO * 4 + h) * 32 + lane];
      const float dd = other[(Tr::kFragO * 4 + 2 + h) * 32 + lane];
      const float mx = fmaxf(st.m[0][h], mo);
      const float base = mx == -INFINITY ? 0.f : mx;
      const float sa = ptx::exp2_approx(st.m[0][h] - base);
      const float sb = ptx::exp2_approx(mo - base);
      st.m[0][h] = mx;
      st.d[0][h] = st.d[0][h] * sa + dd * sb;
#pragma unroll
      for (int n = 0; n < Tr::kFragO; ++n) {
        st.o[0][n][2 * h] = st.o[0][n][2 * h] * sa + other[(n * 4 + 2 * h) * 32 + lane] * sb;
        st.o[0][n][2 * h + 1] = st.o[0][n][2 * h + 1] * sa + other[(n * 4 + 2 * h + 1) * 32 + lane] * sb;
      }
    }
  }
}

// Writes the thread's 2 * kMB rows. warp_row0: first tile row of the warp. vq: fp8 V pools' scale
// of the item's KV head (O = vq * sum p v8 / sum p, partials included), 1 otherwise.
template <class Tr>
__device__ __forceinline__ void write_item(const SoftmaxState<Tr>& st, const PrefillParams& p,
                                           const ItemGeom& g, int warp_row0, int lane, float vq = 1.f) {
  using T = typename Tr::Elem;
  const int t = lane & 3;
#pragma unroll
  for (int mb = 0; mb < Tr::kMB; ++mb) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = warp_row0 + mb * 16 + (lane >> 2) + 8 * h;  // row inside the item
      const int row = g.row_begin + r;
      if (row >= g.row_end) continue;
      const float dsum = st.d[mb][h];
      const bool empty = !(dsum > 0.f);
      const float inv = empty ? 0.f : vq / dsum;
      const float lse2 = empty ? -INFINITY : st.m[mb][h] + log2f(dsum);
      if (g.slot >= 0) {
        const int tile_q = p.plan.header->tile_q;
        float* dst = p.plan.partial_o + (static_cast<int64_t>(g.slot) * tile_q + r) * Tr::kHeadDim;
#pragma unroll
        for (int n = 0; n < Tr::kFragO; ++n)
          *reinterpret_cast<float2*>(dst + n * 8 + 2 * t) =
              make_float2(st.o[mb][n][2 * h] * inv, st.o[mb][n][2 * h + 1] * inv);
        if (t == 0) p.plan.partial_lse[static_cast<int64_t>(g.slot) * tile_q + r] = lse2;
      } else {
        const int token = g.token_abs0 + row / p.group_size;
        const int head = g.kv_head * p.group_size + row % p.group_size;
        T* dst = static_cast<T*>(p.o) + token * p.o_stride_token + head * p.o_stride_head;
#pragma unroll
        for (int n = 0; n < Tr::kFragO; ++n)
          *reinterpret_cast<uint32_t*>(dst + n * 8 + 2 * t) =
              ptx::pack2<T>(st.o[mb][n][2 * h] * inv, st.o[mb][n][2 * h + 1] * inv);
        if (p.lse != nullptr && t == 0)
          p.lse[token * p.lse_stride_token + head] = empty ? -INFINITY : lse2 * 0.69314718055994531f;
      }
    }
  }
}

}  // namespace weft::prefill
