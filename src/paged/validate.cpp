// Validation of paged K/V pools and their BSR page table (host only: reads host mirrors,
// never dereferences a device pointer, so it runs before any launch and needs no sync).
#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdint>

#include "weft/fp8.h"
#include "weft/paged_kv.h"
#include "weft/validate.h"

namespace weft {

const char* kv_layout_name(KVLayout layout) {
  switch (layout) {
    case KVLayout::kNHD: return "NHD";
    case KVLayout::kHND: return "HND";
  }
  return "unknown";
}

int64_t kv_len_of(const PageTable& table, int64_t page_size, int32_t b) {
  const int64_t pages = static_cast<int64_t>(table.indptr.host[b + 1]) - table.indptr.host[b];
  return pages == 0 ? 0 : (pages - 1) * page_size + table.last_page_len.host[b];
}

namespace {

// A pool is written by append: no two (page, slot, head, d) may share an address. Sufficient
// test: sorted by stride, each dim's stride covers the full extent of the next smaller one.
void check_pool_strides(const TensorView& t, const char* name) {
  std::array<int, 4> order{0, 1, 2, 3};
  for (int d = 0; d < 4; ++d)
    WEFT_CHECK_ARG(t.strides[d] >= 0, name, "strides must be >= 0, got strides[" << d << "] = " << t.strides[d]);
  if (t.numel() == 0) return;  // nothing to alias
  std::sort(order.begin(), order.end(), [&](int a, int b) { return t.strides[a] < t.strides[b]; });
  int64_t covered = 1;  // elements spanned by the dims seen so far
  for (int i = 0; i < 4; ++i) {
    const int d = order[i];
    if (t.shape[d] <= 1) continue;
    WEFT_CHECK_ARG(t.strides[d] >= covered, name,
                   "strides make elements overlap (dim " << d << " stride " << t.strides[d]
                                                         << " < " << covered << ") in " << t.describe());
    covered = t.strides[d] * t.shape[d];
  }
}

void check_pool(const TensorView& t, const char* name) {
  check::on_device(t, name);
  check::ndim_is(t, name, 4);
  check::dtype_in(t, name, {DType::kFloat16, DType::kBFloat16, DType::kFloat8E4M3, DType::kFloat8E5M2});
  check::inner_contiguous(t, name, 16);
  check_pool_strides(t, name);
}

// Host mirror present when there are entries; the device copy as check::device_index_array
// (present when there are entries, int32-aligned whenever given: an empty array may have
// neither pointer). `need_device` false: kernels never read this array (see the caller).
void check_index_array(const IndexArray& a, int64_t expected_size, const char* name, bool need_device = true) {
  WEFT_CHECK_ARG(a.size == expected_size, name,
                 "expected " << expected_size << " entries, got size " << a.size);
  WEFT_CHECK_ARG(a.size == 0 || a.host != nullptr, name, "host mirror is null (" << a.size << " entries expected)");
  check::device_index_array(a.device, need_device ? a.size : 0, name);
}

// Scales of an fp8 pool (required, size 1 or num_kv_heads, float-aligned device array; host
// mirror entries finite and > 0 when given); a 16-bit pool takes none.
void check_scale(const KVScale& s, const char* name, const TensorView& pool, int64_t num_kv_heads) {
  if (!is_fp8(pool.dtype)) {
    WEFT_CHECK_ARG(s.size == 0 && s.device == nullptr && s.host == nullptr, name,
                   "scales are for fp8 pools only; the pools are " << dtype_name(pool.dtype));
    return;
  }
  WEFT_CHECK_ARG(s.size == 1 || s.size == num_kv_heads, name,
                 "an " << dtype_name(pool.dtype) << " pool needs 1 (per tensor) or num_kv_heads = " << num_kv_heads
                       << " (per head) scales, got size " << s.size);
  WEFT_CHECK_ARG(s.device != nullptr, name, "device array is null (" << dtype_name(pool.dtype) << " pools need scales)");
  check::aligned(s.device, name, sizeof(float));
  if (s.host != nullptr)
    for (int64_t h = 0; h < s.size; ++h)
      WEFT_CHECK_ARG(std::isfinite(s.host[h]) && s.host[h] > 0.f, name,
                     "entry " << h << " is " << s.host[h] << "; scales must be finite and > 0");
}

// Pools only (both page-table kinds share these checks).
void check_pools(const PagedKVCache& cache) {
  WEFT_CHECK_ARG(cache.layout == KVLayout::kNHD || cache.layout == KVLayout::kHND, "layout",
                 "must be NHD or HND, got " << static_cast<int>(cache.layout));
  check_pool(cache.k_pages, "k_pages");
  check_pool(cache.v_pages, "v_pages");
  check::same_dtype(cache.k_pages, "k_pages", cache.v_pages, "v_pages");
  check::same_shape(cache.k_pages, "k_pages", cache.v_pages, "v_pages");
  WEFT_CHECK_ARG(cache.k_pages.device_id == cache.v_pages.device_id, "v_pages",
                 "on device " << cache.v_pages.device_id << ", k_pages on " << cache.k_pages.device_id);
  check::head_dim_supported(cache.head_dim(), "head_dim");
  check_scale(cache.k_scale, "k_scale", cache.k_pages, cache.num_kv_heads());
  check_scale(cache.v_scale, "v_scale", cache.v_pages, cache.num_kv_heads());
  const int64_t page_size = cache.page_size();
  check::in_range(page_size, "page_size", 1, INT32_MAX);
  // Bounded so per-token work sizes (2 * heads * head_dim) stay far inside int32.
  check::in_range(cache.num_kv_heads(), "num_kv_heads", 1, 1 << 16);
}

}  // namespace

void validate_paged_kv(const PagedKVCache& cache, const BlockTable& table) {
  check_pools(cache);
  validate_block_table(table, cache.page_size(), cache.num_pages());
}

void validate_paged_kv(const PagedKVCache& cache, const PageTable& table) {
  check_pools(cache);
  const int64_t page_size = cache.page_size();
  const int64_t num_pages = cache.num_pages();

  const int64_t batch = table.batch_size;
  WEFT_CHECK_ARG(batch >= 0, "batch_size", "must be >= 0, got " << batch);
  // An empty step (batch 0) may give its indptr as {0} or as no array at all, and {0} needs no
  // device copy: no kernel reads the page table of a batch without requests.
  check::indptr_size(table.indptr.size, batch, "kv_indptr");
  check_index_array(table.indptr, table.indptr.size, "kv_indptr", /*need_device=*/batch > 0);
  check::indptr(table.indptr.size ? table.indptr.host : nullptr, batch, "kv_indptr");
  const int64_t nnz = table.indptr.size ? table.indptr.host[batch] : 0;
  check_index_array(table.indices, nnz, "kv_indices");
  check::indices_below(table.indices.host, nnz, "kv_indices", num_pages);
  check_index_array(table.last_page_len, batch, "kv_last_page_len");

  const int32_t* indptr = table.indptr.host;
  const int32_t* last = table.last_page_len.host;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t pages = static_cast<int64_t>(indptr[b + 1]) - indptr[b];
    if (pages == 0) {
      WEFT_CHECK_ARG(last[b] == 0, "kv_last_page_len",
                     "request " << b << " has no pages, so its last page length must be 0, got " << last[b]);
      continue;
    }
    WEFT_CHECK_ARG(last[b] >= 1 && last[b] <= page_size, "kv_last_page_len",
                   "request " << b << " has " << pages << " pages: entry must be in [1, " << page_size
                              << "], got " << last[b]);
    const int64_t len = (pages - 1) * page_size + last[b];
    WEFT_CHECK_ARG(len <= INT32_MAX, "kv_indptr",
                   "request " << b << " is " << len << " tokens long; at most " << INT32_MAX << " supported");
  }
}

}  // namespace weft
