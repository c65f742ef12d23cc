// Internal: the decode kernel's in-kernel merge of split tiles (the merge role; replaces a
// separate merge kernel for decode). A CTA that stored a split item's partial state counts the
// slot; the CTA that stores a tile's LAST slot merges the tile's rows:
//   staged (default): every slot's O rows are copied into the CTA's free shared memory with
//     cp.async, all at once when they fit (one load latency, where per-warp register loads of
//     16 slots per round took three rounds for a 33-slot tile: 3.2 us of the batch-1 tail, see
//     perf-notes-decode.md "a per-CTA timeline"); rounds of as many slots as fit otherwise.
//   per warp (fallback when not even one slot fits, or DecodeParams::merge_staged == 0):
//     attn::merge_row_warp, the prefill merge kernel's code.
// Both use attn::merge_weights and accumulate the slots in KV order with the same expressions,
// so the bits are the same whichever path and whichever CTA merges.
#pragma once
#include <cuda/atomic>

#include "attention/merge_row.cuh"
#include "decode/decode_common.cuh"
#include "decode/trace.cuh"

namespace weft::decode {

// Shared memory of the staged merge of a tile with `nrows` rows and `n` slots, in this order:
//   weights  [nrows][n] fp32 (softmax weight of slot k for row r), padded to 16 bytes
//   inv      [kTileQ] fp32: 1 / sum of the row's weights (0 for a fully masked row)
//   acc      [nrows][D] fp32: running sums between rounds (unused with one round)
//   O        [G][nrows][D] fp32: the slots of one round, G = slots_per_round
template <int D>
struct MergeStage {
  static constexpr int kD4 = D / 4;  // float4 columns of a row
  int nrows, n;
  __device__ __forceinline__ size_t weights_bytes() const { return (size_t(nrows) * n * 4 + 15) / 16 * 16; }
  __device__ __forceinline__ size_t row_block_bytes() const { return size_t(nrows) * D * 4; }
  __device__ __forceinline__ size_t fixed_bytes() const {
    return weights_bytes() + kTileQ * 4 + row_block_bytes();
  }
  // Slots per round in `bytes` of shared memory (0: not even one fits).
  __device__ __forceinline__ int slots_per_round(size_t bytes) const {
    if (bytes < fixed_bytes()) return 0;
    return int(min(size_t(n), (bytes - fixed_bytes()) / row_block_bytes()));
  }
};

// Slots of one round arrive in up to kMergeParts commit groups, so the accumulation of the
// first part overlaps the transfer of the later ones.
constexpr int kMergeParts = 4;

// Merge of one tile staged through shared memory `buf` (16-byte aligned, G slots per round).
// Whole CTA; waits with wait_group 0, so any older cp.async group of this thread (the next
// item's prologue) lands here too. Ends with a CTA barrier.
// Order of a round: each warp's first row's LSEs are requested first, then every slot's O rows
// (copies, in kMergeParts groups), so the weights are computed while the O bytes stream in.
template <class T, int D>
__device__ __forceinline__ void merge_tile_staged(const DecodeParams<T>& p, const Item& it, MergeRange mr,
                                                  unsigned char* buf, const MergeStage<D>& ms, int G) {
  constexpr int kD4 = MergeStage<D>::kD4;
  const int nrows = it.nrows, n = mr.n;
  const int items = nrows * kD4;  // float4 columns of the tile's rows: one accumulator each
  float* sW = reinterpret_cast<float*>(buf);
  float* sInv = reinterpret_cast<float*>(buf + ms.weights_bytes());
  float4* sAcc = reinterpret_cast<float4*>(buf + ms.weights_bytes() + kTileQ * 4);
  float4* sO = sAcc + items;
  // Slot k, row r: LSE at lse0[k * kTileQ + r], O at o0 + (k * kTileQ + r) * D (plan layout).
  const float* lse0 = p.plan.partial_lse + int64_t(mr.s0) * kTileQ;
  const float* o0 = p.plan.partial_o + int64_t(mr.s0) * kTileQ * D;
  const int W = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Slots [g0, g0 + g) -> sO[k - g0][r][c] in kMergeParts commit groups of `part` slots (empty
  // groups past g). .cg: other CTAs wrote the partials in this grid (L2).
  auto issue = [&](int g0, int g, int part) {
    for (int q = 0; q < kMergeParts; ++q) {
      for (int k = q * part; k < min(g, (q + 1) * part); ++k)
        for (int rc = threadIdx.x; rc < items; rc += blockDim.x) {
          const int r = rc / kD4, c = rc % kD4;
          ptx::cp_async_16(sO + k * items + rc, o0 + (int64_t(g0 + k) * kTileQ + r) * D + 4 * c);
        }
      ptx::cp_async_commit();
    }
  };
  auto lse_of = [&](int r, int k) { return __ldcg(lse0 + int64_t(k) * kTileQ + r); };
  // This warp's first row's two LSEs (slots lane, lane + 32), requested before the copies.
  float lse_first = -INFINITY, lse_first2 = -INFINITY;
  if (warp < nrows) {
    if (lane < n) lse_first = lse_of(warp, lane);
    if (lane + 32 < n) lse_first2 = lse_of(warp, lane + 32);
  }
  int part = (min(G, n) + kMergeParts - 1) / kMergeParts;
  issue(0, min(G, n), part);

  // Weights, one warp per row (merge_row_warp's math): every slot's weight -> sW.
  for (int r = warp; r < nrows; r += W) {
    auto lse_at = [&](int k) { return lse_of(r, k); };
    const float lse_lane = r == warp ? lse_first : lane < n ? lse_at(lane) : -INFINITY;
    const float lse_lane2 = r == warp ? lse_first2 : lane + 32 < n ? lse_at(lane + 32) : -INFINITY;
    const attn::MergeWeights mw = attn::merge_weights(lse_lane, lse_lane2, lse_at, n, lane);
    const bool masked = mw.mx == -INFINITY;  // O = 0 (all weights and inv 0), LSE = -inf
    for (int k = lane; k < n; k += 32)
      sW[r * n + k] = masked ? 0.f : k < 32 ? mw.w_lane : k < 64 ? mw.w_lane2 : exp2f(lse_at(k) - mw.mx);
    if (lane == 0) {
      sInv[r] = masked ? 0.f : 1.f / mw.sum;
      if (p.lse != nullptr) {
        const RowPos rp = row_pos(p, it, it.row_begin + r);
        p.lse[rp.token * p.lse_stride_token + rp.head] = masked ? -INFINITY : (mw.mx + log2f(mw.sum)) * 0.69314718055994531f;
      }
    }
  }

  for (int g0 = 0; g0 < n; g0 += G) {
    const int g = min(G, n - g0);
    if (g0 > 0) {
      __syncthreads();  // every thread is done reading the previous round's slots
      part = (g + kMergeParts - 1) / kMergeParts;
      issue(g0, g, part);
    }
    const bool last_round = g0 + g == n;
    for (int q = 0; q < kMergeParts; ++q) {
      cp_async_wait_dyn(kMergeParts - 1 - q);  // this thread's part q has landed ...
      __syncthreads();                          // ... every thread's (and the weights)
      const int k_end = min(g, (q + 1) * part);
      for (int idx = threadIdx.x; idx < items; idx += blockDim.x) {
        float4 acc = g0 == 0 && q == 0 ? make_float4(0.f, 0.f, 0.f, 0.f) : sAcc[idx];
        const float* w_row = sW + (idx / kD4) * n + g0;
#pragma unroll 8
        for (int k = q * part; k < k_end; ++k) {  // slots in KV order, merge_row_warp's expressions
          const float w = w_row[k];
          const float4 v = sO[k * items + idx];
          acc.x += w * v.x;
          acc.y += w * v.y;
          acc.z += w * v.z;
          acc.w += w * v.w;
        }
        if (!last_round || q + 1 < kMergeParts) {
          sAcc[idx] = acc;
        } else {
          const int r = idx / kD4, c = idx % kD4;
          const float inv = sInv[r];
          const RowPos rp = row_pos(p, it, it.row_begin + r);
          attn::merge_store4(p.o + rp.token * p.o_stride_token + rp.head * p.o_stride_head + 4 * c, acc.x * inv,
                             acc.y * inv, acc.z * inv, acc.w * inv);
        }
      }
    }
  }
  __syncthreads();  // the caller's next item reuses this shared memory
}

// Called by the whole CTA after it stored the partial state of a split item (it.slot >= 0): the
// CTA counts the finished slot in the tile's merge counter; the CTA that finishes the LAST slot
// merges the tile's rows (slots in KV order, whichever CTA merges) and resets the counter to 0
// for the next run.
// Memory order (the pattern of CUTLASS's GenericBarrier): the barrier orders every thread's
// partial stores before thread 0's acq_rel atomic at device scope (release: cumulative over
// what the barrier ordered); the last CTA's thread 0 acquires the other CTAs' stores with the
// same atomic and its barrier passes them on to the threads that read the partials.
// s_flag: the layout's 16-byte flag area (shared memory): s_flag[0] = 1 when this CTA merges
// the tile (every thread already holds the tile's slot range, mr).
// free_smem / free_bytes: shared memory no one needs until the next item's start barrier (the
// whole layout below the flag after a CTA's last item, else stage S-1, the epilogue's buffer).
template <class T, int D>
__device__ __forceinline__ void merge_tile_if_last(const DecodeParams<T>& p, const Item& it, MergeRange mr,
                                                   int* s_flag, unsigned char* free_smem, size_t free_bytes) {
  __syncthreads();
  if (threadIdx.x == 0) {
    cuda::atomic_ref<uint32_t, cuda::thread_scope_device> counter(p.plan.merge_counter[it.merge]);
    const bool last = counter.fetch_add(1u, cuda::memory_order_acq_rel) + 1u == uint32_t(mr.n);
    // Every slot of this run is counted: no one else touches the counter until the next launch.
    if (last) counter.store(0u, cuda::memory_order_relaxed);
    s_flag[0] = last ? 1 : 0;
  }
  __syncthreads();
  WEFT_DECODE_TRACE_POINT(kTraceMergeDecided);  // of the CTA's last split item
  if (s_flag[0] == 0) return;
  WEFT_DECODE_TRACE_MERGED();
  const MergeStage<D> ms{it.nrows, mr.n};
  const int G = p.merge_staged ? ms.slots_per_round(free_bytes) : 0;
  if (G > 0) return merge_tile_staged<T, D>(p, it, mr, free_smem, ms, G);
  const int W = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = warp; i < it.nrows; i += W) {
    const RowPos rp = row_pos(p, it, it.row_begin + i);
    attn::merge_row_warp<T>(p.plan.partial_lse + int64_t(mr.s0) * kTileQ + i,
                            p.plan.partial_o + (int64_t(mr.s0) * kTileQ + i) * D, mr.n, kTileQ, D,
                            p.o + rp.token * p.o_stride_token + rp.head * p.o_stride_head,
                            p.lse != nullptr ? p.lse + rp.token * p.lse_stride_token + rp.head : nullptr, lane);
  }
}

}  // namespace weft::decode
