// Load role: global -> shared copies of the Q tile and of K/V tiles (paged or ragged), with
// cp.async (16-byte, L2-only .cg) into XOR-swizzled rows. Rows past the valid range are
// zero-filled by cp.async (src-size 0), so the math never reads garbage (0 * NaN would poison O).
#pragma once
#include "common/rtc_compat.h"

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
  int32_t kv_base;      // ragged: first K/V row of the request; paged: first entry of the
                        // request in page_indices
  int32_t real_kv_len;
  int32_t slot;         // partial slot (-1: final output)
};

// Q tile: CTA_Q packed rows (row r -> token r / group, head kv_head * group + r % group). A
// thread copies rows r_first + i * kRowsPerPass; (token, head) advance incrementally (one
// division per item instead of one per row).
template <class Tr>
__device__ __forceinline__ void load_q_tile(typename Tr::Elem* sq, const PrefillParams& p,
                                            const ItemGeom& g, int tid) {
  using T = typename Tr::Elem;
  constexpr int kRowsPerPass = Tr::kThreads / Tr::kChunks;
  static_assert(Tr::kCtaQ % kRowsPerPass == 0, "Q tile rows must split evenly over threads");
  const int col = tid % Tr::kChunks;
  const int r_first = tid / Tr::kChunks;
  const int gs = p.group_size;
  const int row0 = g.row_begin + r_first;
  int tok = row0 / gs;
  int hd = row0 - tok * gs;
  const int dt = kRowsPerPass / gs;
  const int dh = kRowsPerPass - dt * gs;
  const T* q = static_cast<const T*>(p.q) + col * 8;
#pragma unroll
  for (int i = 0; i < Tr::kCtaQ / kRowsPerPass; ++i) {
    const int r = r_first + i * kRowsPerPass;
    const bool valid = row0 + i * kRowsPerPass < g.row_end;
    const T* src = q;
    if (valid)
      src = q + static_cast<int64_t>(g.token_abs0 + tok) * p.q_stride_token +
            static_cast<int64_t>(g.kv_head * gs + hd) * p.q_stride_head;
    ptx::cp_async_16(sq + swz<Tr::kHeadDim>(r, col), src, valid ? 16 : 0);
    tok += dt;
    hd += dh;
    if (hd >= gs) {
      hd -= gs;
      ++tok;
    }
  }
}

// K/V rows a thread copies: kRowsPerThread CONSECUTIVE rows r0 .. r0 + kRowsPerThread - 1 of
// every tile (r0 = (tid / kChunks) * kRowsPerThread), one fixed 16-byte column. (A warp still
// writes whole 256-byte rows per instruction: coalesced reads, conflict-free swizzled writes.)
// Consecutive rows let one page id serve all of a thread's rows when the page size is a multiple
// of kRowsPerThread and the item's first key is aligned to it (the common case: page 16, aligned
// chunks): that id is fetched one pipeline step ahead of the copy (fetch_page) so the page-table
// load latency hides behind the math, at the cost of ONE register per pipelined tile. Any other
// page size (1, 5, ...) or alignment looks every row's page up at copy time (slow path).
// (fp8 pools: rows of kKVChunks = 8 chunks, so twice the rows per pass and half per thread.)
template <class Tr>
struct KVRows {
  static constexpr int kRowsPerPass = Tr::kThreads / Tr::kKVChunks;
  static constexpr int kRowsPerThread = Tr::kCtaKV / kRowsPerPass;
  static_assert(Tr::kCtaKV % kRowsPerPass == 0, "KV tile rows must split evenly over threads");
  static_assert((kRowsPerThread & (kRowsPerThread - 1)) == 0, "rows per thread: a power of two");
  static constexpr int kLog2Rows = kRowsPerThread >= 16 ? 4 : kRowsPerThread >= 8 ? 3
                                   : kRowsPerThread >= 4 ? 2 : kRowsPerThread >= 2 ? 1 : 0;
  static_assert((1 << kLog2Rows) == kRowsPerThread, "rows per thread <= 16");
};

// True when one page id serves all of a thread's rows of every tile of the item.
template <class Tr>
__device__ __forceinline__ bool one_page_per_thread(const PrefillParams& p, const ItemGeom& g) {
  return p.page_shift >= KVRows<Tr>::kLog2Rows && (g.kv_lo & (KVRows<Tr>::kRowsPerThread - 1)) == 0;
}

// Page id of the thread's first row of the tile at tile_start (paged fast path; 0 otherwise).
template <class Tr>
__device__ __forceinline__ int32_t fetch_page(const PrefillParams& p, const ItemGeom& g,
                                              int tile_start, int tid) {
  if (!p.paged || !one_page_per_thread<Tr>(p, g)) return 0;
  const int j = tile_start + (tid / Tr::kKVChunks) * KVRows<Tr>::kRowsPerThread;
  return j < g.kv_hi ? __ldg(p.page_indices + g.kv_base + (static_cast<uint32_t>(j) >> p.page_shift)) : 0;
}

// 16-byte cp.async to a 32-bit shared-window address (ptx::cp_async_16 takes a generic pointer
// and converts it on every call; here the tile address is formed once per tile in 32 bits).
__device__ __forceinline__ void cp_async_16_s(uint32_t smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem),
               "r"(src_bytes));
}

// One K or V tile: keys [tile_start, tile_start + CTA_KV) of the item's request; keys >= kv_hi are
// zero-filled. `page`: fetch_page() of the same tile_start.
// Hot path (ragged, or paged with one page per thread): one base pointer and one row stride per
// thread, then kRowsPerThread predicated copies with no branches and no 64-bit multiplies (the
// per-row branchy version cost ~25 instructions per row right after each barrier, when all
// warps copy at once and the tensor pipe idles). Other page sizes: per-row page look-ups.
// dst: the landing tile; 16-bit pools: [CTA_KV][D] swizzled (swz()); fp8 pools: [CTA_KV][D] bytes,
// unswizzled (a warp's copies and widen_kv_tile's reads cover whole 128-byte rows: conflict-free).
template <class Tr>
__device__ __forceinline__ void copy_kv_tile(void* dst, const void* base,
                                             int64_t page_stride, int64_t slot_stride,
                                             int64_t head_stride, const PrefillParams& p,
                                             const ItemGeom& g, int32_t page, int tile_start,
                                             int tid) {
  using KV = typename Tr::KVElem;
  constexpr int kRows = KVRows<Tr>::kRowsPerThread;
  constexpr int kRowBytes = Tr::kHeadDim * static_cast<int>(sizeof(KV));
  constexpr int kSwz = Tr::kFp8 ? 0 : 7;  // chunk XOR mask (row bits)
  const int col = tid % Tr::kKVChunks;
  const int r0 = (tid / Tr::kKVChunks) * kRows;
  const int j0 = tile_start + r0;
  const int n_valid = min(max(g.kv_hi - j0, 0), kRows);  // rows i < n_valid hold keys
  const KV* head = static_cast<const KV*>(base) + g.kv_head * head_stride + col * (16 / static_cast<int>(sizeof(KV)));
  const uint32_t d0 = ptx::smem_addr(dst) + r0 * kRowBytes;
  if (p.paged && !one_page_per_thread<Tr>(p, g)) {
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int j = j0 + i;
      const KV* src = head;
      if (i < n_valid) {
        const uint32_t pi = p.page_shift >= 0 ? static_cast<uint32_t>(j) >> p.page_shift
                                              : static_cast<uint32_t>(j) / static_cast<uint32_t>(p.page_size);
        const int slot = p.page_shift >= 0 ? (j & (p.page_size - 1)) : j % p.page_size;
        src = head + __ldg(p.page_indices + g.kv_base + pi) * page_stride + slot * slot_stride;
      }
      cp_async_16_s(d0 + i * kRowBytes + ((col ^ ((r0 + i) & kSwz)) << 4), src, i < n_valid ? 16 : 0);
    }
    return;
  }
  const KV* src;
  int64_t stride;
  if (p.paged) {
    src = head + page * page_stride + (j0 & (p.page_size - 1)) * slot_stride;
    stride = slot_stride;
  } else {
    src = head + static_cast<int64_t>(g.kv_base + j0) * page_stride;
    stride = page_stride;
  }
  // Rows past kv_hi re-point at the last valid row (or the head base when none is valid): a
  // zero-byte copy reads nothing, but the address stays inside the tensor.
  const KV* cur = n_valid > 0 ? src : head;
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    // swz(): chunk bits 0..2 XOR row bits 0..2 (row = r0 + i); fp8 landing tiles: unswizzled
    const int chunk = col ^ ((r0 + i) & kSwz);
    cp_async_16_s(d0 + i * kRowBytes + (chunk << 4), cur, i < n_valid ? 16 : 0);
    if (i + 1 < n_valid) cur += stride;
  }
}

template <class Tr>
__device__ __forceinline__ void load_k_tile(void* dst, const PrefillParams& p,
                                            const ItemGeom& g, int32_t page, int tile_start,
                                            int tid) {
  copy_kv_tile<Tr>(dst, p.k, p.k_page_stride, p.k_slot_stride, p.k_head_stride, p, g, page,
                   tile_start, tid);
}
template <class Tr>
__device__ __forceinline__ void load_v_tile(void* dst, const PrefillParams& p,
                                            const ItemGeom& g, int32_t page, int tile_start,
                                            int tid) {
  copy_kv_tile<Tr>(dst, p.v, p.v_page_stride, p.v_slot_stride, p.v_head_stride, p, g, page,
                   tile_start, tid);
}

}  // namespace weft::prefill
