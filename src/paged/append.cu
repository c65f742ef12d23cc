// append_paged_kv: copy the new K/V rows of a ragged batch into their pages.
//
// For 16-bit pools it is a pure copy, so one dtype-blind kernel (16-bit elements moved as raw
// bits) serves f16 and bf16, and runtime strides (paged_access.cuh) serve NHD and HND: a single
// instantiation. fp8 pools (weft/fp8.h) get the same kernel with a quantizing store: each 16-byte
// chunk of 8 f16/bf16 inputs becomes 8 bytes, x / scale (IEEE division, so the host definition
// fp8_from_float(x / scale) gives the same bits) rounded to nearest even and saturated to the
// format's largest finite value (cvt.rn.satfinite: finite input never stores NaN or inf).
// Four more instantiations: {f16, bf16} input x {e4m3, e5m2} pool.
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

#include <cuda_fp8.h>

#include <type_traits>

#include "common/cuda_check.h"
#include "common/vec8.cuh"
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

// Dst: the pool element (uint16_t: raw 16-bit copy; __nv_fp8_e4m3 / __nv_fp8_e5m2: quantized).
template <class Dst>
struct AppendParams {
  const uint16_t* new_k;
  const uint16_t* new_v;
  int64_t k_token_stride, k_head_stride;  // elements
  int64_t v_token_stride, v_head_stride;
  const int32_t* batch_indices;  // [nnz]
  const int32_t* positions;      // [nnz]
  PagedKV<Dst> kv;
  const float* k_scale;         // fp8 pools: dequantization scales (weft::KVScale), else null
  const float* v_scale;
  int32_t k_scale_stride;       // per KV head: 1 (one scale per head) or 0 (one per tensor)
  int32_t v_scale_stride;
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
  template <class P>
  __device__ __forceinline__ ChunkCursor(const P& p) {
    const int64_t first = static_cast<int64_t>(blockIdx.x) * kChunksPerBlock + threadIdx.x;
    token = first / p.token_chunks;
    rem = static_cast<int32_t>(first - token * p.token_chunks);
  }
  template <class P>
  __device__ __forceinline__ void advance(const P& p) {
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
  template <class P>
  __device__ __forceinline__ ChunkRow(const P& p, int32_t rem) {
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

// fp8 interpretation of a pool element type.
template <class Dst>
constexpr __nv_fp8_interpretation_t fp8_kind() {
  return std::is_same_v<Dst, __nv_fp8_e5m2> ? __NV_E5M2 : __NV_E4M3;
}

// 8 f16/bf16 values -> 8 fp8 bytes: x / scale, round to nearest even, saturating.
template <class Src, class Dst>
__device__ __forceinline__ uint2 quantize8(const uint4& v, float scale) {
  float f[8];
  detail::unpack8<Src>(v, f);
  uint32_t w[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const __nv_fp8x2_storage_t lo = __nv_cvt_float2_to_fp8x2(
        make_float2(__fdiv_rn(f[4 * i], scale), __fdiv_rn(f[4 * i + 1], scale)), __NV_SATFINITE, fp8_kind<Dst>());
    const __nv_fp8x2_storage_t hi = __nv_cvt_float2_to_fp8x2(
        make_float2(__fdiv_rn(f[4 * i + 2], scale), __fdiv_rn(f[4 * i + 3], scale)), __NV_SATFINITE, fp8_kind<Dst>());
    w[i] = uint32_t(lo) | (uint32_t(hi) << 16);  // element 0 in the lowest byte
  }
  return make_uint2(w[0], w[1]);
}

// Src: uint16_t for the raw copy, half / __nv_bfloat16 when Dst is an fp8 type (quantized).
template <class Src, class Dst>
__global__ void __launch_bounds__(kThreads) append_paged_kv_kernel(const __grid_constant__ AppendParams<Dst> p) {
  constexpr bool kQuantize = sizeof(Dst) == 1;
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
    PagePool<Dst> pool;
    pool.data = row.is_v ? p.kv.v.data : p.kv.k.data;
    pool.page_stride = row.is_v ? p.kv.v.page_stride : p.kv.k.page_stride;
    pool.slot_stride = row.is_v ? p.kv.v.slot_stride : p.kv.k.slot_stride;
    pool.head_stride = row.is_v ? p.kv.v.head_stride : p.kv.k.head_stride;
    if constexpr (kQuantize) {
      const float scale = row.is_v ? __ldg(p.v_scale + row.head * p.v_scale_stride)
                                   : __ldg(p.k_scale + row.head * p.k_scale_stride);
      const uint2 q = quantize8<Src, Dst>(data[u], scale);
      if (valid) *reinterpret_cast<uint2*>(pool.row(page, slot, row.head) + row.col) = q;
    } else {
      if (valid) *reinterpret_cast<uint4*>(pool.row(page, slot, row.head) + row.col) = data[u];
    }
  }
}

int32_t log2_exact(int64_t x) {
  int32_t l = 0;
  while ((int64_t{1} << l) < x) ++l;
  return l;
}

}  // namespace
}  // namespace weft::paged

namespace weft::paged {
namespace {

template <class Src, class Dst>
void launch_append(const TensorView& new_k, const TensorView& new_v, const IndexArray& batch_indices,
                   const IndexArray& positions, const PagedKVCache& cache, const PageTable& table, int64_t nnz,
                   cudaStream_t stream) {
  AppendParams<Dst> p{};
  p.new_k = static_cast<const uint16_t*>(new_k.data);
  p.new_v = static_cast<const uint16_t*>(new_v.data);
  p.k_token_stride = new_k.strides[0];
  p.k_head_stride = new_k.strides[1];
  p.v_token_stride = new_v.strides[0];
  p.v_head_stride = new_v.strides[1];
  p.batch_indices = batch_indices.device;
  p.positions = positions.device;
  p.kv = make_paged_kv<Dst>(cache, table);
  p.k_scale = cache.k_scale.device;
  p.v_scale = cache.v_scale.device;
  p.k_scale_stride = cache.k_scale.size > 1 ? 1 : 0;  // validated: size 1 or num_kv_heads
  p.v_scale_stride = cache.v_scale.size > 1 ? 1 : 0;
  p.nnz = nnz;
  p.row_chunks_log2 = log2_exact(cache.head_dim() / 8);
  // <= 2^16 heads (validate_paged_kv) x 32 chunks x 2: int32 is ample.
  p.head_chunks = static_cast<int32_t>(cache.num_kv_heads()) << p.row_chunks_log2;
  p.token_chunks = 2 * p.head_chunks;
  p.step_tokens = kThreads / p.token_chunks;
  p.step_rem = kThreads % p.token_chunks;

  const int64_t blocks = (nnz * p.token_chunks + kChunksPerBlock - 1) / kChunksPerBlock;
  WEFT_CHECK_ARG(blocks <= INT32_MAX, "new_k", "append of " << nnz << " tokens is too large for one launch");
  append_paged_kv_kernel<Src, Dst><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
  WEFT_CUDA_CHECK_LAUNCH();
}

template <class Src>
void launch_quantized(DType pool, const TensorView& new_k, const TensorView& new_v, const IndexArray& bi,
                      const IndexArray& pos, const PagedKVCache& cache, const PageTable& table, int64_t nnz,
                      cudaStream_t stream) {
  if (pool == DType::kFloat8E4M3)
    launch_append<Src, __nv_fp8_e4m3>(new_k, new_v, bi, pos, cache, table, nnz, stream);
  else
    launch_append<Src, __nv_fp8_e5m2>(new_k, new_v, bi, pos, cache, table, nnz, stream);
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
  const DType pool = cache.k_pages.dtype;
  if (pool == DType::kFloat8E4M3 || pool == DType::kFloat8E5M2) {
    if (new_k.dtype == DType::kFloat16)
      launch_quantized<half>(pool, new_k, new_v, batch_indices, positions, cache, table, nnz, stream);
    else
      launch_quantized<__nv_bfloat16>(pool, new_k, new_v, batch_indices, positions, cache, table, nnz, stream);
    return;
  }
  launch_append<uint16_t, uint16_t>(new_k, new_v, batch_indices, positions, cache, table, nnz, stream);
}

}  // namespace weft
