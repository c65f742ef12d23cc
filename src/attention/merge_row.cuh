// Device functions: merge of one query row's split-KV partial states (the math of merge.cuh),
// executed by one warp, and the in-kernel merge's slot counting. Shared by the merge kernel
// (merge.cu) and the kernels that merge in place (decode: decode_common.cuh merge_tile_if_last;
// the sm90 prefill: prefill/sm90/sm90_merge.cuh), so all give the same bits.
#pragma once
#include <cuda/atomic>

#include "common/rtc_compat.h"  // <cmath>, <cstdint> (CCCL under NVRTC)

#include "attention/plan/balance.h"
#include "common/types.cuh"

namespace weft::attn {

// Slots per batch of O loads in flight per lane (one float4 each): 16 keeps 64 registers of
// loads, so a typical split (<= 48 slots) costs <= 3 load latencies.
constexpr int kMergeSlotBatch = 16;

template <class T>
__device__ __forceinline__ void merge_store4(T* dst, float a, float b, float c, float d) {
  // 4 x 16-bit = 8 bytes; head_dim % 4 == 0 and 16-byte aligned rows keep this aligned.
  union { T h[4]; uint2 u; } pk;
  pk.h[0] = detail::from_float<T>(a);
  pk.h[1] = detail::from_float<T>(b);
  pk.h[2] = detail::from_float<T>(c);
  pk.h[3] = detail::from_float<T>(d);
  *reinterpret_cast<uint2*>(dst) = pk.u;
}

// Where a row's partial states are: slot k's base-2 LSE and its fp32 O row (head_dim floats).
// StridedSlots: n consecutive slots of one tile, row i: LSE at lse_i[k * tile_q], O at
// o_i + k * tile_q * head_dim (the balanced planner's merges). ListedSlots: sources (slot[k],
// row[k] + i) of a tile_q-row slot layout (the work plan's merges, whose sources are any slots).
struct StridedSlots {
  const float* lse_i;
  const float* o_i;
  int64_t lse_stride, o_stride;
  __device__ __forceinline__ float lse(int k) const { return __ldcg(lse_i + k * lse_stride); }
  __device__ __forceinline__ const float* o(int k) const { return o_i + k * o_stride; }
};
struct ListedSlots {
  const float* partial_lse;
  const float* partial_o;
  const int32_t* slot;
  const int32_t* row;
  int i, tile_q, head_dim;
  __device__ __forceinline__ int64_t at(int k) const { return int64_t(__ldg(slot + k)) * tile_q + __ldg(row + k) + i; }
  __device__ __forceinline__ float lse(int k) const { return __ldcg(partial_lse + at(k)); }
  __device__ __forceinline__ const float* o(int k) const { return partial_o + at(k) * head_dim; }
};

// v[j] = column c (float4) of slot base + k + j of the row, j < min(kMergeSlotBatch, cnt - k);
// zeros past. Loads go to L2 (.cg): the partials were written by other CTAs, possibly in this grid.
template <class Slots>
__device__ __forceinline__ void merge_load_batch(float4 (&v)[kMergeSlotBatch], const Slots& src, int base, int k,
                                                 int cnt, int c, bool active) {
#pragma unroll
  for (int j = 0; j < kMergeSlotBatch; ++j)
    v[j] = active && k + j < cnt ? __ldcg(reinterpret_cast<const float4*>(src.o(base + k + j)) + c)
                                 : make_float4(0.f, 0.f, 0.f, 0.f);
}

// One row's merge of n partial states given by `src` (StridedSlots / ListedSlots) into orow
// (head_dim elements of T) and, when lse_out is not null, the natural-log LSE. Every LSE -inf
// (all keys masked): O = 0, LSE = -inf.
template <class T, class Slots>
__device__ __forceinline__ void merge_row_warp_src(const Slots& src, int n, int head_dim, T* orow, float* lse_out,
                                                   int lane) {
  const int d4 = head_dim / 4;
  auto lse_at = [&](int k) { return src.lse(k); };
  // In flight together: this lane's first two LSEs (slots `lane` and `lane + 32`) and the first
  // batch of O slots of the first column block (their addresses do not depend on the LSEs).
  // Splits of up to 64 slots then need no LSE load after the first round.
  const float lse_lane = lane < n ? lse_at(lane) : -INFINITY;
  const float lse_lane2 = lane + 32 < n ? lse_at(lane + 32) : -INFINITY;
  float4 v[kMergeSlotBatch];
  merge_load_batch(v, src, 0, 0, min(32, n), lane, lane < d4);
  // Slot k's LSE lives on lane k % 32: max and sum are warp reductions (xor tree: a fixed
  // order, bitwise deterministic), so a merge of many slots costs ~one load latency, not n.
  float mx = fmaxf(lse_lane, lse_lane2);  // = the loop below from k = lane + 32 (max is exact)
  for (int k = lane + 64; k < n; k += 32) mx = fmaxf(mx, lse_at(k));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if (mx == -INFINITY) {
    for (int c = lane; c < d4; c += 32) merge_store4(orow + 4 * c, 0.f, 0.f, 0.f, 0.f);
    if (lse_out != nullptr && lane == 0) *lse_out = -INFINITY;
    return;
  }
  const float w_lane = lane < n ? exp2f(lse_lane - mx) : 0.f;  // weight of slot `lane`
  const float w_lane2 = lane + 32 < n ? exp2f(lse_lane2 - mx) : 0.f;  // weight of slot `lane + 32`
  float sum = w_lane;
  if (lane + 32 < n) sum += w_lane2;  // same terms in the same order as a loop from lane + 32
  for (int k = lane + 64; k < n; k += 32) sum += exp2f(lse_at(k) - mx);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  const float inv = 1.f / sum;
  // O: each lane owns 4 columns; slots are accumulated in KV order (sequential, fixed), their
  // weights broadcast from the lane that holds them; kMergeSlotBatch loads in flight.
  for (int cb = 0; cb < d4; cb += 32) {
    const int c = cb + lane;
    const bool active = c < d4;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int kb = 0; kb < n; kb += 32) {
      const float wl = kb == 0 ? w_lane : kb == 32 ? w_lane2 : kb + lane < n ? exp2f(lse_at(kb + lane) - mx) : 0.f;
      const int cnt = min(32, n - kb);
      for (int k = 0; k < cnt; k += kMergeSlotBatch) {
        if (cb != 0 || kb != 0 || k != 0)  // the first batch is already in flight
          merge_load_batch(v, src, kb, k, cnt, c, active);
#pragma unroll
        for (int j = 0; j < kMergeSlotBatch; ++j) {  // accumulated in slot order
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
    if (active) merge_store4(orow + 4 * c, acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
  }
  if (lse_out != nullptr && lane == 0) *lse_out = (mx + log2f(sum)) * 0.69314718055994531f;
}

// Row i of a split query tile whose n partial slots are consecutive: slot k's LSE (base 2) at
// lse_i[k * tile_q], its O row (fp32, head_dim) at o_i + k * tile_q * head_dim.
template <class T>
__device__ __forceinline__ void merge_row_warp(const float* lse_i, const float* o_i, int n, int tile_q,
                                               int head_dim, T* orow, float* lse_out, int lane) {
  const StridedSlots src{lse_i, o_i, tile_q, static_cast<int64_t>(tile_q) * head_dim};
  merge_row_warp_src<T>(src, n, head_dim, orow, lse_out, lane);
}

// A split tile's partial slots: merge entry `merge` of a balanced plan (item_merge of its items;
// < 0: none, n = 0), its first slot expanded for the launched CTA's sub-head (plan::fold_slot:
// one merge's slots stay consecutive), the slot count (merge_indptr) and the distance between
// slots in slots.
struct MergeRange {
  int s0 = 0, n = 0, step = 1;
};
__device__ __forceinline__ MergeRange load_merge_range(const plan::PlanPointers& p, int merge, int fold) {
  MergeRange r;
  if (merge >= 0) {
    const int s0 = p.merge_indptr[merge];
    r.n = p.merge_indptr[merge + 1] - s0;
    r.s0 = plan::fold_slot(s0, fold, p.slot_stride);
  }
  return r;
}

// In-kernel merge, the counting step (ONE thread of the CTA, after a CTA-wide barrier that
// follows every thread's partial stores of the slot): counts one finished slot of a tile with n
// slots in its counter (PlanPointers::merge_counter[plan::fold_expand(merge, fold)]); true for
// the caller that finished the LAST one, which then merges the tile (merge_row_warp, after a
// second barrier that passes the result on) -- whichever CTA that is, the bits are the merge
// kernel's. The counter is reset to 0 for the next run (every slot of this run is counted: no
// one else touches it until the next launch; plan() copies zero it too).
// Memory order (the pattern of CUTLASS's GenericBarrier): the barrier orders the CTA's partial
// stores before this acq_rel device-scope atomic (release: cumulative over what the barrier
// ordered); the last caller acquires the other CTAs' stores with the same atomic, and its second
// barrier orders them before its threads' reads of the partials (.cg loads, from L2).
__device__ __forceinline__ bool count_slot_is_last(uint32_t* counter, int n) {
  cuda::atomic_ref<uint32_t, cuda::thread_scope_device> c(*counter);
  const bool last = c.fetch_add(1u, cuda::memory_order_acq_rel) + 1u == uint32_t(n);
  if (last) c.store(0u, cuda::memory_order_relaxed);
  return last;
}

}  // namespace weft::attn
