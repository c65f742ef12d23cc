// Internal (nvcc only): addressing of the paged K/V pools, shared by append, decode and prefill.
//
// One code path serves both layouts. A pool is reduced to three runtime strides (elements):
//   NHD [num_pages, page_size, num_kv_heads, head_dim]: page = strides[0], slot = strides[1],
//                                                        head = strides[2]
//   HND [num_pages, num_kv_heads, page_size, head_dim]: page = strides[0], head = strides[1],
//                                                        slot = strides[2]
// head_dim is contiguous (stride 1, checked by validate_paged_kv), so element
// (page, slot, head, d) lives at  data + page*page_stride + slot*slot_stride + head*head_stride + d.
// Offsets are int64: a pool may exceed 2^31 elements. Token positions inside a request are
// int32 (validate_paged_kv bounds every kv_len by INT32_MAX).
//
// Typical use in a kernel (T = half, __nv_bfloat16, or uint16_t for a dtype-blind copy):
//   PagedKV<T> kv = make_paged_kv<T>(cache, table);        // host, passed as a kernel param
//   const T* k = kv.k_row(b, t, h);                         // device: K[b][t][h][0 .. head_dim)
#pragma once
#include "common/rtc_compat.h"
#if !WEFT_RTC
#include "weft/paged_kv.h"
#include "weft/tensor.h"
#endif

namespace weft::paged {

// One pool (K or V) seen through its three outer strides.
template <class T>
struct PagePool {
  T* data = nullptr;
  int64_t page_stride = 0;  // elements between page p and p+1
  int64_t slot_stride = 0;  // elements between token slot s and s+1 of one page
  int64_t head_stride = 0;  // elements between kv head h and h+1

  __host__ __device__ __forceinline__ int64_t offset(int64_t page, int64_t slot, int64_t head) const {
    return page * page_stride + slot * slot_stride + head * head_stride;
  }
  // First element of the head_dim row (page, slot, head); the row is contiguous.
  __host__ __device__ __forceinline__ T* row(int64_t page, int64_t slot, int64_t head) const {
    return data + offset(page, slot, head);
  }
  __host__ __device__ __forceinline__ T* at(int64_t page, int64_t slot, int64_t head, int64_t d) const {
    return row(page, slot, head) + d;
  }
};

#if !WEFT_RTC  // host only (NVRTC: common/rtc_compat.h)
// Host: the strides of a validated 4-D pool in `layout`. T must have the pool's element size.
template <class T>
inline PagePool<T> make_page_pool(const TensorView& pool, KVLayout layout) {
  const bool nhd = layout == KVLayout::kNHD;
  PagePool<T> p;
  p.data = static_cast<T*>(pool.data);
  p.page_stride = pool.strides[0];
  p.slot_stride = pool.strides[nhd ? 1 : 2];
  p.head_stride = pool.strides[nhd ? 2 : 1];
  return p;
}
#endif  // !WEFT_RTC

// Device view of a page table, one of two page-addressing kinds:
//   BSR (row_stride == 0): request b's page list starts at indices + indptr[b] (PageTable);
//   block table (row_stride > 0): it starts at indices + b * row_stride (BlockTable, read as is:
//     indices = block_ids, indptr and last_page_len null; lengths come from the plan).
// row_stride sits in the struct's tail padding after page_size (same size and layout as the
// BSR-only view: kernel parameter offsets after it do not move).
struct PageTableView {
  const int32_t* indptr = nullptr;         // [batch + 1] (BSR)
  const int32_t* indices = nullptr;        // [indptr[batch]] (BSR) or block_ids (block table)
  const int32_t* last_page_len = nullptr;  // [batch] (BSR)
  int32_t page_size = 1;
  int32_t row_stride = 0;                  // > 0: block table (validate_block_table bounds it by int32)

  // First entry of request b's page list (either kind).
  __device__ __forceinline__ const int32_t* pages(int32_t b) const {
    return row_stride > 0 ? indices + b * row_stride : indices + __ldg(indptr + b);
  }

  // Page holding token t (0-based position) of request b. t must be < kv_len(b).
  __device__ __forceinline__ int32_t page_of(int32_t b, int32_t t) const {
    return __ldg(indices + __ldg(indptr + b) + t / page_size);
  }
  __device__ __forceinline__ int32_t slot_of(int32_t t) const { return t % page_size; }
  // Both at once (one division): page id and slot of token t of request b.
  __device__ __forceinline__ void locate(int32_t b, int32_t t, int32_t& page, int32_t& slot) const {
    const uint32_t q = static_cast<uint32_t>(t) / static_cast<uint32_t>(page_size);
    slot = t - static_cast<int32_t>(q) * page_size;
    page = __ldg(indices + __ldg(indptr + b) + q);
  }
  __device__ __forceinline__ int32_t num_pages(int32_t b) const {
    return __ldg(indptr + b + 1) - __ldg(indptr + b);
  }
  __device__ __forceinline__ int32_t kv_len(int32_t b) const {
    const int32_t n = num_pages(b);
    return n == 0 ? 0 : (n - 1) * page_size + __ldg(last_page_len + b);
  }
};

static_assert(sizeof(PageTableView) == 32, "row_stride must stay in the tail padding");

// Both pools and the table: what a kernel needs to find any token's K/V row.
template <class T>
struct PagedKV {
  PagePool<T> k;
  PagePool<T> v;
  PageTableView table;

  __device__ __forceinline__ T* k_row(int32_t b, int32_t t, int32_t head) const {
    int32_t page, slot;
    table.locate(b, t, page, slot);
    return k.row(page, slot, head);
  }
  __device__ __forceinline__ T* v_row(int32_t b, int32_t t, int32_t head) const {
    int32_t page, slot;
    table.locate(b, t, page, slot);
    return v.row(page, slot, head);
  }
};

#if !WEFT_RTC  // host only (NVRTC: common/rtc_compat.h)
// Host: the pools and page size of a validated cache (the table fields are the caller's).
template <class T>
inline PagedKV<T> make_paged_pools(const PagedKVCache& cache) {
  PagedKV<T> kv;
  kv.k = make_page_pool<T>(cache.k_pages, cache.layout);
  kv.v = make_page_pool<T>(cache.v_pages, cache.layout);
  kv.table.page_size = static_cast<int32_t>(cache.page_size());
  return kv;
}
// Host: build the device view from a cache and table that passed validate_paged_kv.
template <class T>
inline PagedKV<T> make_paged_kv(const PagedKVCache& cache, const PageTable& table) {
  PagedKV<T> kv = make_paged_pools<T>(cache);
  kv.table.indptr = table.indptr.device;
  kv.table.indices = table.indices.device;
  kv.table.last_page_len = table.last_page_len.device;
  return kv;
}

// Host: the device view of a cache and a native block table that passed validate_block_table
// (a table of batch 0 or row_stride 0 keeps stride 1: the view must stay a block table).
template <class T>
inline PagedKV<T> make_paged_kv(const PagedKVCache& cache, const BlockTable& table) {
  PagedKV<T> kv = make_paged_pools<T>(cache);
  kv.table.indices = table.block_ids.device;
  kv.table.row_stride = table.row_stride > 0 ? static_cast<int32_t>(table.row_stride) : 1;
  return kv;
}
#endif  // !WEFT_RTC

}  // namespace weft::paged
