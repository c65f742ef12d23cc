// Paged KV cache: page pools plus a block-sparse-row (BSR) page table.
//
// Pools: k_pages / v_pages, 4-D, same dtype (f16, bf16, or fp8 e4m3 / e5m2) and shape, either
//   NHD: [num_pages, page_size, num_kv_heads, head_dim]
//   HND: [num_pages, num_kv_heads, page_size, head_dim]
// The innermost (head_dim) stride must be 1 and rows 16-byte aligned; other strides are free
// (so a K/V pool interleaved in one allocation works).
// fp8 pools (weft/fp8.h) store x8 = fp8(x / scale) and need their dequantization scales:
// k_scale and v_scale, each one float per KV head (size num_kv_heads) or one for the whole pool
// (size 1), positive and finite. 16-bit pools take no scales. Who reads fp8 pools today:
// append_paged_kv (quantizes f16/bf16 input) and BatchDecodeWrapper::run (Q and O stay f16/bf16);
// prefill rejects them (weft::Error naming "k_pages").
//
// Page table of a batch of `batch_size` requests (int32):
//   kv_indptr[batch+1]      request b owns pages kv_indices[kv_indptr[b] .. kv_indptr[b+1])
//   kv_indices[nnz]         page ids, each < num_pages
//   kv_last_page_len[batch] tokens used in the request's last page: in [1, page_size] when
//                           the request has pages, 0 when it has none (kv_len 0)
// kv_len(b) = (pages(b) - 1) * page_size + kv_last_page_len[b]   (0 when pages(b) == 0).
// Token t of request b lives in page kv_indices[kv_indptr[b] + t / page_size], slot t % page_size.
//
// Every index array is given twice: a device pointer (read by kernels) and a host mirror (read
// by validation and planners, so no entry point needs a device->host sync). The caller keeps
// the two equal.
#pragma once
#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include "weft/export.h"
#include "weft/tensor.h"

namespace weft WEFT_API {

enum class KVLayout : int32_t { kNHD = 0, kHND = 1 };
const char* kv_layout_name(KVLayout layout);

// An int32 array with a device copy and a host mirror of the same `size` entries.
struct IndexArray {
  const int32_t* device = nullptr;
  const int32_t* host = nullptr;
  int64_t size = 0;
};

struct PageTable {
  int32_t batch_size = 0;
  IndexArray indptr;         // batch_size + 1
  IndexArray indices;        // indptr.host[batch_size]
  IndexArray last_page_len;  // batch_size
};

// Dequantization scales of one fp8 pool: x = scale[h] * x8 for KV head h (scale[0] for all
// heads when size == 1). The device array is what kernels read (it may change between CUDA-graph
// replays, like any buffer's contents); the host mirror is optional: when given, validation
// checks every entry is finite and > 0.
struct KVScale {
  const float* device = nullptr;  // [size] floats, 4-byte aligned
  const float* host = nullptr;    // optional mirror of the same `size` entries
  int64_t size = 0;               // num_kv_heads (per head) or 1 (per tensor); 0: no scales
};

struct PagedKVCache {
  TensorView k_pages;
  TensorView v_pages;
  KVLayout layout = KVLayout::kNHD;
  KVScale k_scale;  // fp8 pools only (required there; must be empty for f16 / bf16 pools)
  KVScale v_scale;

  int64_t num_pages() const { return k_pages.size(0); }
  int64_t page_size() const { return k_pages.size(layout == KVLayout::kNHD ? 1 : 2); }
  int64_t num_kv_heads() const { return k_pages.size(layout == KVLayout::kNHD ? 2 : 1); }
  int64_t head_dim() const { return k_pages.size(3); }
};

// Sequence length of request b from the host mirror (no validation).
int64_t kv_len_of(const PageTable& table, int64_t page_size, int32_t b);

// Checks pools (ndim 4, dtypes f16/bf16/fp8 and equal, same shape, inner stride 1, 16-byte aligned
// rows, supported head_dim, page_size >= 1), the scales (present, sized 1 or num_kv_heads and
// positive when the pools are fp8; absent otherwise) and the table (indptr monotonic starting at 0,
// indices < num_pages, last_page_len in range, device pointers present). Throws weft::Error.
void validate_paged_kv(const PagedKVCache& cache, const PageTable& table);

// Host-side BSR arrays built from vLLM-style block tables.
struct PageTableHost {
  std::vector<int32_t> indptr;
  std::vector<int32_t> indices;
  std::vector<int32_t> last_page_len;
  int32_t batch_size() const { return static_cast<int32_t>(last_page_len.size()); }
};

// block_tables: [batch, max_blocks_per_seq] row-major (host), seq_lens: [batch] (host).
// Request b uses the first ceil(seq_lens[b] / page_size) entries of its row. Throws weft::Error
// when a row is too short for its length, a block id is out of [0, num_pages), or a length < 0.
PageTableHost page_table_from_block_tables(const int32_t* block_tables, int64_t batch,
                                           int64_t max_blocks_per_seq, const int32_t* seq_lens,
                                           int64_t page_size, int64_t num_pages);

// Native vLLM-style block table, read by the kernels as is (no conversion to the BSR table
// above, on the host or the device): row b of block_ids starts at entry b * row_stride and its
// first ceil(seq_lens[b] / page_size) entries are the page ids of tokens 0, page_size, ...;
// entries past that prefix are never read (padding may hold anything).
//   block_ids  [batch_size, row_stride] int32 (device + host mirror), at least
//              (batch_size - 1) * row_stride + max_blocks entries
//   seq_lens   [batch_size] int32 (device + host mirror), each >= 0 (0: an empty request,
//              O = 0 and LSE = -inf)
//   max_blocks entries of a row that may be used (<= row_stride)
// Token t of request b lives in page block_ids[b * row_stride + t / page_size], slot t % page_size.
struct BlockTable {
  int32_t batch_size = 0;
  int32_t max_blocks = 0;
  int64_t row_stride = 0;
  IndexArray block_ids;
  IndexArray seq_lens;
};

// Checks a block table against a validated cache's page count and page size: batch_size >= 0,
// 0 <= max_blocks <= row_stride ("table.row_stride" when the stride is too small), the
// block_ids array large enough ("table.block_ids"), every length >= 0 and within its row
// ("table.seq_lens": a row shorter than its length needs), every used id in [0, num_pages)
// ("table.block_ids", naming the entry), device pointers present and 4-byte aligned, and
// (batch_size - 1) * row_stride + max_blocks < 2^31 (kernels index rows with int32).
// Throws weft::Error naming the argument.
void validate_block_table(const BlockTable& table, int64_t page_size, int64_t num_pages);
// The pool checks of validate_paged_kv(cache, PageTable), then validate_block_table.
void validate_paged_kv(const PagedKVCache& cache, const BlockTable& table);
// Sequence length of request b (host mirror, no validation).
inline int64_t kv_len_of(const BlockTable& table, int32_t b) { return table.seq_lens.host[b]; }

// Write the new K/V tokens of a ragged batch into their pages.
//   new_k, new_v: [nnz_tokens, num_kv_heads, head_dim], same dtype as the pools (f16 or bf16
//                 for fp8 pools: quantized with the cache's scales, x8 = fp8(x / scale),
//                 round to nearest even, saturating: see weft/fp8.h), inner stride 1,
//                 16-byte aligned rows.
//   batch_indices[nnz_tokens]: request of each token; positions[nnz_tokens]: its position in
//                 that request's sequence. `table` must already describe the sequences after
//                 the append, so every position < kv_len(batch_indices[i]).
// One kernel serves NHD and HND. Validates everything first; a rejected call writes nothing.
void append_paged_kv(const TensorView& new_k, const TensorView& new_v, const IndexArray& batch_indices,
                     const IndexArray& positions, const PagedKVCache& cache, const PageTable& table,
                     cudaStream_t stream);

}  // namespace weft
