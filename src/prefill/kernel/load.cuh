// Load role: global -> shared copies of the Q tile and of K/V tiles (paged or ragged), with
// cp.async (16-byte, L2-only .cg) into XOR-swizzled rows. Rows past the valid range are
// zero-filled by cp.async (src-size 0), so the math never reads garbage (0 * NaN would poison O).
#pragma once
#include <cstdint>

#include "common/ptx.cuh"
#include "prefill/kernel/params.h"
#include "prefill/kernel/traits.cuh"

namespace weft::prefill {

// Where the current work item's rows live (computed once per item).
struct ItemGeom {
  int32_t seg;          // plan request (segment)
  int32_t request;      // real request
  int32_t kv_head;
  int32_t row_begin, row_end;  // packed rows of the segment
  int32_t token_abs0;   // absolute query token of the segment's first row
  int32_t pos0;         // absolute KV position of the segment's first token
  int32_t token0;       // index of the segment's first token inside the real request
  int32_t kv_lo, kv_hi; // effective key range after causal / window trimming
  int32_t kv_base;      // ragged: first K/V row of the request
  int32_t page_base;    // paged: first entry of the request in page_indices
  int32_t real_kv_len;
  int32_t slot;         // partial slot (-1: final output)
};

// Q tile: CTA_Q packed rows (row r -> token r / group, head kv_head * group + r % group).
template <class Tr>
__device__ __forceinline__ void load_q_tile(typename Tr::Elem* sq, const PrefillParams& p,
                                            const ItemGeom& g, int tid) {
  using T = typename Tr::Elem;
  constexpr int kRowsPerPass = Tr::kThreads / Tr::kChunks;
  const int col = tid % Tr::kChunks;
  const T* q = static_cast<const T*>(p.q);
#pragma unroll
  for (int r = tid / Tr::kChunks; r < Tr::kCtaQ; r += kRowsPerPass) {
    const int row = g.row_begin + r;
    const T* src = q;
    int bytes = 0;
    if (row < g.row_end) {
      const int token = g.token_abs0 + row / p.group_size;
      const int head = g.kv_head * p.group_size + row % p.group_size;
      src = q + token * p.q_stride_token + head * p.q_stride_head + col * 8;
      bytes = 16;
    }
    ptx::cp_async_16(sq + swz<Tr::kHeadDim>(r, col), src, bytes);
  }
}

// K/V rows a thread copies: rows r0 + i * kRowsPerPass (i < kRowsPerThread) of every tile, one
// fixed 16-byte column. For paged K/V their page ids are fetched one pipeline step ahead of the
// copies (fetch_pages) so the page-table load latency hides behind the math instead of stalling
// every warp at the copy that needs the address.
template <class Tr>
struct KVRows {
  static constexpr int kRowsPerPass = Tr::kThreads / Tr::kChunks;
  static constexpr int kRowsPerThread = Tr::kCtaKV / kRowsPerPass;
  static_assert(Tr::kCtaKV % kRowsPerPass == 0, "KV tile rows must split evenly over threads");
  int32_t page[kRowsPerThread];  // paged: page id of the row's key (unused when ragged)
};

template <class Tr>
__device__ __forceinline__ void fetch_pages(KVRows<Tr>& rows, const PrefillParams& p,
                                            const ItemGeom& g, int tile_start, int tid) {
  if (!p.paged) return;
#pragma unroll
  for (int i = 0; i < KVRows<Tr>::kRowsPerThread; ++i) {
    const int j = tile_start + tid / Tr::kChunks + i * KVRows<Tr>::kRowsPerPass;
    const uint32_t pi = p.page_shift >= 0 ? static_cast<uint32_t>(j) >> p.page_shift
                                          : static_cast<uint32_t>(j) / static_cast<uint32_t>(p.page_size);
    rows.page[i] = j < g.kv_hi ? __ldg(p.page_indices + g.page_base + pi) : 0;
  }
}

// One K or V tile: keys [tile_start, tile_start + CTA_KV) of the item's request; keys >= kv_hi are
// zero-filled. Paged rows use the page ids of `rows` (fetched for the same tile_start).
template <class Tr>
__device__ __forceinline__ void copy_kv_tile(typename Tr::Elem* dst, const void* base,
                                             int64_t page_stride, int64_t slot_stride,
                                             int64_t head_stride, const PrefillParams& p,
                                             const ItemGeom& g, const KVRows<Tr>& rows,
                                             int tile_start, int tid) {
  using T = typename Tr::Elem;
  const int col = tid % Tr::kChunks;
  const T* b = static_cast<const T*>(base) + g.kv_head * head_stride + col * 8;
#pragma unroll
  for (int i = 0; i < KVRows<Tr>::kRowsPerThread; ++i) {
    const int r = tid / Tr::kChunks + i * KVRows<Tr>::kRowsPerPass;
    const int j = tile_start + r;
    const T* src = b;
    int bytes = 0;
    if (j < g.kv_hi) {
      if (p.paged) {
        const int slot = p.page_shift >= 0 ? (j & (p.page_size - 1)) : j % p.page_size;
        src = b + rows.page[i] * page_stride + slot * slot_stride;
      } else {
        src = b + static_cast<int64_t>(g.kv_base + j) * page_stride;
      }
      bytes = 16;
    }
    ptx::cp_async_16(dst + swz<Tr::kHeadDim>(r, col), src, bytes);
  }
}

template <class Tr>
__device__ __forceinline__ void load_k_tile(typename Tr::Elem* dst, const PrefillParams& p,
                                            const ItemGeom& g, const KVRows<Tr>& rows,
                                            int tile_start, int tid) {
  copy_kv_tile<Tr>(dst, p.k, p.k_page_stride, p.k_slot_stride, p.k_head_stride, p, g, rows,
                   tile_start, tid);
}
template <class Tr>
__device__ __forceinline__ void load_v_tile(typename Tr::Elem* dst, const PrefillParams& p,
                                            const ItemGeom& g, const KVRows<Tr>& rows,
                                            int tile_start, int tid) {
  copy_kv_tile<Tr>(dst, p.v, p.v_page_stride, p.v_slot_stride, p.v_head_stride, p, g, rows,
                   tile_start, tid);
}

}  // namespace weft::prefill
