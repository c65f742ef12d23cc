// append_paged_kv: copy the new K/V rows of a ragged batch into their pages.
//
// It is a pure copy, so one dtype-blind kernel (16-bit elements moved as raw bits) serves f16
// and bf16, and runtime strides (paged_access.cuh) serve NHD and HND: a single instantiation.
//
// Work decomposition. The copy is cut into 16-byte chunks (one LDG.128 / STG.128 each),
// numbered token-major:  chunk = ((token * 2 + is_v) * num_kv_heads + head) * row_chunks + c,
// row_chunks = head_dim * 2 / 16 (8, 16, 32). Consecutive threads take consecutive chunks, so
// every warp reads and writes whole 128..512-byte head rows (full sectors in both layouts).
// A block owns kThreads * kChunksPerThread consecutive chunks; each thread first issues all
// of its loads (they depend only on the chunk number), then resolves the destination through
// the page table (batch_indices/positions -> indptr -> indices, L1-broadcast within a token) and
// stores. The loads are in flight while the dependent page-table lookups run. The kernel
// trusts its inputs: append_paged_kv validates everything on the host first.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "common/cuda_check.h"
#include "paged/append_validate.h"
#include "paged/paged_access.cuh"
#include "weft/paged_kv.h"

namespace weft::paged {
namespace {

// 8 warps: enough warps per block to hide issue latency, small enough that several blocks fit
// per SM (occupancy comes from blocks, not from one big block).
constexpr int kThreads = 256;
// 16-byte chunks each thread loads before it stores: 8 x 16 B x 256 threads = 32 KiB in flight
// per block. At 58 registers and no shared memory (ptxas, sm_90a) 4 blocks fit per SM: 128 KiB
// in flight per SM, well over the ~20-25 KiB/SM that Little's law asks for at H100/H200 HBM
// bandwidth (~3.3-4.8 TB/s x ~700 ns / 132 SMs).
constexpr int kChunksPerThread = 8;
constexpr int kChunksPerBlock = kThreads * kChunksPerThread;

struct AppendParams {
  const uint16_t* new_k;
  const uint16_t* new_v;
  int64_t k_token_stride, k_head_stride;  // elements
  int64_t v_token_stride, v_head_stride;
  const int32_t* batch_indices;  // [nnz]
  const int32_t* positions;      // [nnz]
  PagedKV<uint16_t> kv;
  int64_t nnz;
  int32_t row_chunks_log2;  // log2(head_dim / 8): head_dim is 64, 128 or 256
  int32_t head_chunks;      // num_heads << row_chunks_log2: chunks of one token's K (or V)
  int32_t token_chunks;     // 2 * head_chunks: K and V rows of one token
  int32_t step_tokens;      // kThreads / token_chunks: a thread's next chunk is kThreads later,
  int32_t step_rem;         // kThreads % token_chunks   i.e. this many tokens and chunks on
};

// Chunk number split as (token, rem in [0, token_chunks)), advanced by kThreads without a
// division (the step is precomputed on the host).
struct ChunkCursor {
  int64_t token;
  int32_t rem;
  __device__ __forceinline__ ChunkCursor(const AppendParams& p) {
    const int64_t first = static_cast<int64_t>(blockIdx.x) * kChunksPerBlock + threadIdx.x;
    token = first / p.token_chunks;
    rem = static_cast<int32_t>(first - token * p.token_chunks);
  }
  __device__ __forceinline__ void advance(const AppendParams& p) {
    rem += p.step_rem;
    const bool wrap = rem >= p.token_chunks;
    rem -= wrap ? p.token_chunks : 0;
    token += p.step_tokens + (wrap ? 1 : 0);
  }
};

// Which row of which tensor a chunk belongs to, and its element column in that row.
struct ChunkRow {
  bool is_v;
  int32_t head;
  int32_t col;
  __device__ __forceinline__ ChunkRow(const AppendParams& p, int32_t rem) {
    is_v = rem >= p.head_chunks;
    const int32_t r = is_v ? rem - p.head_chunks : rem;
    head = r >> p.row_chunks_log2;
    col = (r & ((1 << p.row_chunks_log2) - 1)) * 8;  // 8 16-bit elements per chunk
  }
};

__device__ __forceinline__ uint4 load_stream(const uint16_t* p) {
  // Read-once data: evict-first so it does not push the pool rows out of L2.
  return __ldcs(reinterpret_cast<const uint4*>(p));
}

__global__ void __launch_bounds__(kThreads) append_paged_kv_kernel(const __grid_constant__ AppendParams p) {
  // Past-the-end chunks (last block only) are clamped to the last token and their store is
  // predicated off: no branches, so all loads and page-table lookups can be issued together.
  uint4 data[kChunksPerThread];
  ChunkCursor c(p);
#pragma unroll
  for (int u = 0; u < kChunksPerThread; ++u, c.advance(p)) {
    const int64_t token = c.token < p.nnz ? c.token : p.nnz - 1;
    const ChunkRow row(p, c.rem);
    // Selects, not branches: K and V chunks of a warp differ only in base and strides.
    const uint16_t* base = row.is_v ? p.new_v : p.new_k;
    const int64_t token_stride = row.is_v ? p.v_token_stride : p.k_token_stride;
    const int64_t head_stride = row.is_v ? p.v_head_stride : p.k_head_stride;
    data[u] = load_stream(base + token * token_stride + row.head * head_stride + row.col);
  }
  ChunkCursor d(p);
#pragma unroll
  for (int u = 0; u < kChunksPerThread; ++u, d.advance(p)) {
    const bool valid = d.token < p.nnz;
    const int64_t token = valid ? d.token : p.nnz - 1;
    const ChunkRow row(p, d.rem);
    const int32_t b = __ldg(p.batch_indices + token);
    const int32_t pos = __ldg(p.positions + token);
    int32_t page, slot;
    p.kv.table.locate(b, pos, page, slot);
    PagePool<uint16_t> pool;
    pool.data = row.is_v ? p.kv.v.data : p.kv.k.data;
    pool.page_stride = row.is_v ? p.kv.v.page_stride : p.kv.k.page_stride;
    pool.slot_stride = row.is_v ? p.kv.v.slot_stride : p.kv.k.slot_stride;
    pool.head_stride = row.is_v ? p.kv.v.head_stride : p.kv.k.head_stride;
    if (valid) *reinterpret_cast<uint4*>(pool.row(page, slot, row.head) + row.col) = data[u];
  }
}

int32_t log2_exact(int64_t x) {
  int32_t l = 0;
  while ((int64_t{1} << l) < x) ++l;
  return l;
}

}  // namespace
}  // namespace weft::paged

namespace weft {

void append_paged_kv(const TensorView& new_k, const TensorView& new_v, const IndexArray& batch_indices,
                     const IndexArray& positions, const PagedKVCache& cache, const PageTable& table,
                     cudaStream_t stream) {
  using namespace weft::paged;
  const int64_t nnz = validate_append(new_k, new_v, batch_indices, positions, cache, table);
  if (nnz == 0) return;

  AppendParams p{};
  p.new_k = static_cast<const uint16_t*>(new_k.data);
  p.new_v = static_cast<const uint16_t*>(new_v.data);
  p.k_token_stride = new_k.strides[0];
  p.k_head_stride = new_k.strides[1];
  p.v_token_stride = new_v.strides[0];
  p.v_head_stride = new_v.strides[1];
  p.batch_indices = batch_indices.device;
  p.positions = positions.device;
  p.kv = make_paged_kv<uint16_t>(cache, table);
  p.nnz = nnz;
  p.row_chunks_log2 = log2_exact(cache.head_dim() / 8);
  // <= 2^16 heads (validate_paged_kv) x 32 chunks x 2: int32 is ample.
  p.head_chunks = static_cast<int32_t>(cache.num_kv_heads()) << p.row_chunks_log2;
  p.token_chunks = 2 * p.head_chunks;
  p.step_tokens = kThreads / p.token_chunks;
  p.step_rem = kThreads % p.token_chunks;

  const int64_t blocks = (nnz * p.token_chunks + kChunksPerBlock - 1) / kChunksPerBlock;
  WEFT_CHECK_ARG(blocks <= INT32_MAX, "new_k", "append of " << nnz << " tokens is too large for one launch");
  append_paged_kv_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
  WEFT_CUDA_CHECK_LAUNCH();
}

}  // namespace weft
