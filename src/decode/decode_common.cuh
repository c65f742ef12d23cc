// Internal: roles shared by the decode kernels (both paths).
//   load:     Q tile and paged K/V tiles -> swizzled shared memory with 16-byte cp.async
//   epilogue: cross-warp combine of online-softmax states, final or partial store
#pragma once
#include <cstdint>

#include "common/ptx.cuh"
#include "common/types.cuh"
#include "decode/decode_params.cuh"
#include "decode/decode_plan.h"

namespace weft::decode {

constexpr int kTileQ = 16;     // query rows per item: the group's heads, padded to the mma M
constexpr int kTileKV = 64;    // keys per pipeline stage: 4 warps x 16 keys (one mma K step)
constexpr int kWarps = 4;
static_assert(kTileQ == kPlanTileQ && kTileKV == kPlanKVTile, "planner and kernel tiles must agree");
constexpr int kThreads = kWarps * 32;

// Stages per head_dim: each stage is K+V = 2 * 64 * D * 2 bytes (16/32/64 KB). Enough bytes in
// flight per SM to cover HBM latency: D64 4 stages (64 KB, 3 CTAs/SM), D128 3 stages (96 KB,
// 2 CTAs/SM), D256 3 stages (192 KB, 1 CTA/SM) => 128-192 KB requested per SM.
template <int D> struct StageCount { static constexpr int value = D == 64 ? 4 : 3; };

template <class T, int D>
struct SmemLayout {
  static constexpr int kStages = StageCount<D>::value;
  static constexpr int kTileElems = kTileKV * D;                        // one K (or V) tile
  static constexpr size_t kStageBytes = 2 * kTileElems * sizeof(T);
  static constexpr size_t kQBytes = kTileQ * D * sizeof(T);
  static constexpr size_t kPipeBytes = kStages * kStageBytes;
  // Epilogue reuses the pipeline buffers: fp32 O [warps][16][D] + m, l [warps][16].
  static constexpr size_t kReduceBytes = (size_t(kWarps) * kTileQ * D + 2 * kWarps * kTileQ) * 4;
  static_assert(kReduceBytes <= kPipeBytes, "reduction buffer must fit in the pipeline buffers");
  static constexpr size_t kBytes = kPipeBytes + kQBytes;
};

// Row-major [rows][D] tile of 16-bit elements with its 16-byte chunks XOR-swizzled by row % 8,
// so the 8 row addresses of one ldmatrix (same logical chunk) hit 8 distinct bank groups.
template <int D>
__device__ __forceinline__ int swz(int row, int chunk) {
  return row * D + ((chunk ^ (row & 7)) << 3);
}

struct Item {
  int req, kv_head, row_begin, nrows, kv_begin, kv_end, slot;
};

__device__ __forceinline__ Item load_item(const plan::PlanPointers& p, int i) {
  Item it;
  it.req = p.item_request[i];
  it.kv_head = p.item_kv_head[i];
  it.row_begin = p.item_row_begin[i];
  it.nrows = p.item_row_end[i] - it.row_begin;
  it.kv_begin = p.item_kv_begin[i];
  it.kv_end = p.item_kv_end[i];
  it.slot = p.item_partial_slot[i];
  return it;
}

// Q rows of the item -> sQ (rows >= nrows zero-filled). Row r: token r / g, head kv_head*g + r % g.
template <class T, int D>
__device__ __forceinline__ void load_q(const DecodeParams<T>& p, const Item& it, T* sQ) {
  constexpr int kChunks = D / 8;
  const int token0 = p.plan.qo_indptr[it.req];
  for (int idx = threadIdx.x; idx < kTileQ * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = idx % kChunks;
    const int ra = it.row_begin + r;
    const bool valid = r < it.nrows;
    const T* src = p.q;
    if (valid) {
      const int64_t token = token0 + ra / p.group_size;
      const int64_t head = int64_t(it.kv_head) * p.group_size + ra % p.group_size;
      src = p.q + token * p.q_stride_token + head * p.q_stride_head + c * 8;
    }
    ptx::cp_async_16(sQ + swz<D>(r, c), src, valid ? 16 : 0);
  }
}

// Keys [k0, k0 + 64) of the item into sK/sV; keys >= kv_end are zero-filled (masked later).
template <class T, int D>
__device__ __forceinline__ void load_kv_tile(const DecodeParams<T>& p, const Item& it, int k0,
                                             T* sK, T* sV) {
  constexpr int kChunks = D / 8;              // 16-byte chunks per row
  constexpr int kRowsPerPass = kThreads / kChunks;
  const int c = threadIdx.x % kChunks;
  const int r0 = threadIdx.x / kChunks;
#pragma unroll
  for (int pass = 0; pass < kTileKV / kRowsPerPass; ++pass) {
    const int r = r0 + pass * kRowsPerPass;
    const int j = k0 + r;
    const T* ks = p.kv.k.data;
    const T* vs = p.kv.v.data;
    const bool valid = j < it.kv_end;
    if (valid) {
      int32_t page, slot;
      p.kv.table.locate(it.req, j, page, slot);
      ks = p.kv.k.row(page, slot, it.kv_head) + c * 8;
      vs = p.kv.v.row(page, slot, it.kv_head) + c * 8;
    }
    ptx::cp_async_16(sK + swz<D>(r, c), ks, valid ? 16 : 0);
    ptx::cp_async_16(sV + swz<D>(r, c), vs, valid ? 16 : 0);
  }
}

// Combine the kWarps per-warp states (unnormalised O, running max m in log2 units, sum l) in
// warp order (deterministic) and store rows < nrows: final output (+ natural-log LSE) when
// it.slot < 0, else the fp32 partial state (O normalised, base-2 LSE) of slot it.slot.
template <class T, int D>
__device__ __forceinline__ void combine_and_store(const DecodeParams<T>& p, const Item& it,
                                                  const float* red_o, const float* red_m,
                                                  const float* red_l) {
  constexpr int kGroups = D / 8;  // 8 outputs per thread step: one 16-byte store of T
  const int token0 = p.plan.qo_indptr[it.req];
  for (int idx = threadIdx.x; idx < it.nrows * kGroups; idx += kThreads) {
    const int r = idx / kGroups, c8 = idx % kGroups;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, red_m[w * kTileQ + r]);
    float o[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) o[e] = 0.f;
    float lse2 = -INFINITY;
    if (mx != -INFINITY) {
      float sum = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float sc = ptx::exp2_approx(red_m[w * kTileQ + r] - mx);
        sum += red_l[w * kTileQ + r] * sc;
        const float4* src = reinterpret_cast<const float4*>(red_o + (w * kTileQ + r) * D + c8 * 8);
        const float4 a = src[0], b = src[1];
        o[0] += a.x * sc; o[1] += a.y * sc; o[2] += a.z * sc; o[3] += a.w * sc;
        o[4] += b.x * sc; o[5] += b.y * sc; o[6] += b.z * sc; o[7] += b.w * sc;
      }
      const float inv = 1.f / sum;
#pragma unroll
      for (int e = 0; e < 8; ++e) o[e] *= inv;
      lse2 = mx + log2f(sum);
    }
    const int ra = it.row_begin + r;
    if (it.slot < 0) {
      const int64_t token = token0 + ra / p.group_size;
      const int64_t head = int64_t(it.kv_head) * p.group_size + ra % p.group_size;
      union { T h[8]; uint4 u; } pk;
#pragma unroll
      for (int e = 0; e < 8; ++e) pk.h[e] = detail::from_float<T>(o[e]);
      *reinterpret_cast<uint4*>(p.o + token * p.o_stride_token + head * p.o_stride_head + c8 * 8) = pk.u;
      if (p.lse != nullptr && c8 == 0)
        p.lse[token * p.lse_stride_token + head] = lse2 * 0.69314718055994531f;  // log2 -> ln
    } else {
      float* dst = p.plan.partial_o + (int64_t(it.slot) * kTileQ + r) * D + c8 * 8;
      reinterpret_cast<float4*>(dst)[0] = make_float4(o[0], o[1], o[2], o[3]);
      reinterpret_cast<float4*>(dst)[1] = make_float4(o[4], o[5], o[6], o[7]);
      if (c8 == 0) p.plan.partial_lse[it.slot * kTileQ + r] = lse2;
    }
  }
}

// Logit of raw dot product qk, in log2 units; -inf outside [.., kv_end).
template <class T>
__device__ __forceinline__ float logit_log2(const DecodeParams<T>& p, float qk) {
  if (p.soft_cap > 0.f) return p.cap_log2 * tanhf(qk * p.sm_scale / p.soft_cap);
  return qk * p.scale_log2;
}

}  // namespace weft::decode
