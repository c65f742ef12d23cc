// Internal (device + launch glue): what the fused all-reduce + norm kernels share (push:
// register-staged 16-byte stores, fused_allreduce_norm.cu; copy engine, fused_allreduce_ce.cu;
// world 1, fused_single.cu): same staging layout, same CTA -> rows mapping, same LSA barrier per
// CTA index, same call header, same fp32 summation order and canonical sum of squares. Their
// outputs are bit-identical and calls of either kernel may follow each other on one communicator.
#pragma once
#include <nccl.h>
#include <nccl_device.h>

#include <cstdint>

#include "comm/comm_impl.h"
#include "comm/partition.h"
#include "common/vec8.cuh"

namespace weft::comm_detail {

constexpr uint32_t kHeaderMagic = 0x74666577u;  // "weft"

struct alignas(32) CallHeader {
  uint32_t magic, seq, tokens, hidden, dtype, variant, ctas, pad;
};
static_assert(sizeof(CallHeader) == 32, "one 32-byte header per CTA index");

// Canonical sum of squares: a row is cut into kCanonSegs segments of seg_len vectors (a multiple
// of 32). Within a segment, lane l sums the squares of vectors l, l + 32, ... in order
// (sq = 0 + f0^2 + ... + f7^2 per vector, cur += sq), then warp_sum's xor tree gives the segment
// sum; the row sum is the left fold 0 + s_0 + s_1 + ... in segment order. Every layout of either
// kernel computes exactly these operations, so the bits never depend on CTA count or kernel.
constexpr int kCanonSegs = 8;

struct Params {
  ncclDevComm dev;
  ncclWindow_t win;
  size_t ctrl_off, out_off, stage_off;
  const void* x;
  void* residual;
  int64_t residual_stride;
  const void* weight;
  void* out;
  int tokens, hidden, vecs, world, rank;
  int tpr, rows_at_once;  // push kernel's pass layout: a group of tpr threads per row
  int seg_len;            // vectors per canonical sum-of-squares segment (multiple of 32)
  int num_chunks;         // one-shot: chunks of chunk_rows rows; two-shot: 1
  int64_t chunk_rows;
  int64_t slot_rows;      // rows per source slot of the staging area
  int64_t rows_per_cta;   // R
  float eps;
  int one_shot, out_is_sym;
  int peer_stores;        // two-shot push: 1 (normalized rows stored to every peer); copy engine: 0
  // Copy-engine kernel: this launch reduces rows [ce_k_lo, ce_k_hi) of the own slice, chunk
  // ce_chunk of num_chunks of the call (fused_allreduce_ce.cu).
  int ce_chunk;
  int64_t ce_k_lo, ce_k_hi;
  uint32_t dtype_code;
  uint32_t* state;
};

#if defined(__CUDACC__)
// Adds the residual row chunk to acc (the fp32 sum of the world's contributions), rounds to T,
// stores the updated residual to dst, and returns the sum of squares of the ROUNDED values (the
// norm uses the residual as stored). One definition for both kernels keeps their bits equal.
template <class T>
__device__ __forceinline__ float add_residual_round_store(float (&acc)[8], const uint4& residual, uint4& dst) {
  float f[8];
  detail::unpack8<T>(residual, f);
#pragma unroll
  for (int i = 0; i < 8; ++i) acc[i] += f[i];
  const uint4 rounded = detail::pack8<T>(acc);
  dst = rounded;
  detail::unpack8<T>(rounded, f);
  float sq = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) sq += f[i] * f[i];
  return sq;
}

__device__ __forceinline__ void* lsa_raw(const Params& p, size_t off, int peer) {
  return ncclGetLsaPointer(p.win, off, peer);
}

// Rows of rank o's segment in chunk ch.
__device__ __forceinline__ TokenRange segment_of(const Params& p, int o, int ch) {
  if (!p.one_shot) return owned_range(p.tokens, p.world, o);
  const int64_t b = static_cast<int64_t>(ch) * p.chunk_rows;
  const int64_t left = p.tokens - b;
  return TokenRange{b, left < p.chunk_rows ? left : p.chunk_rows};
}

// Rows [k0, k0 + cnt) of a segment of `count` rows that CTA c handles (cnt may be <= 0).
__device__ __forceinline__ int64_t cta_rows(const Params& p, int64_t count, int c, int64_t* k0) {
  *k0 = c * p.rows_per_cta;
  const int64_t cnt = count - *k0;
  return cnt < p.rows_per_cta ? cnt : p.rows_per_cta;
}

// Step 1 (thread 0): publish this CTA's call header (ctrl slot c).
__device__ __forceinline__ void write_header(const Params& p, int c, int num_ctas) {
  CallHeader h{kHeaderMagic, p.state[1 + c], static_cast<uint32_t>(p.tokens), static_cast<uint32_t>(p.hidden),
               p.dtype_code, static_cast<uint32_t>(p.one_shot), static_cast<uint32_t>(num_ctas), 0};
  reinterpret_cast<CallHeader*>(static_cast<char*>(lsa_raw(p, p.ctrl_off, p.rank)))[c] = h;
}

// Step 3 (threads < world, after the first barrier): compare peer threadIdx.x's header with
// ours; OR the mismatch bits into *s_bad. Volatile: never served from a stale L1 line.
__device__ __forceinline__ void check_header(const Params& p, int c, int num_ctas, uint32_t* s_bad) {
  if (threadIdx.x >= static_cast<unsigned>(p.world)) return;
  const volatile uint32_t* h = reinterpret_cast<const volatile uint32_t*>(
      static_cast<const char*>(lsa_raw(p, p.ctrl_off, threadIdx.x)) + c * sizeof(CallHeader));
  const uint32_t expect[7] = {kHeaderMagic, p.state[1 + c], static_cast<uint32_t>(p.tokens),
                              static_cast<uint32_t>(p.hidden), p.dtype_code,
                              static_cast<uint32_t>(p.one_shot), static_cast<uint32_t>(num_ctas)};
  uint32_t bits = 0;
  if (h[0] != expect[0]) bits |= kMismatchMagic;
  if (h[1] != expect[1]) bits |= kMismatchSequence;
  if (h[2] != expect[2]) bits |= kMismatchTokens;
  if (h[3] != expect[3]) bits |= kMismatchHidden;
  if (h[4] != expect[4]) bits |= kMismatchDtype;
  if (h[5] != expect[5]) bits |= kMismatchVariant;
  if (h[6] != expect[6]) bits |= kMismatchCtas;
  if (bits) atomicOr(s_bad, bits);
}
#endif

// The fields every launcher takes from the call (x, residual, weight, out, sizes, canonical
// segment length, eps, dtype code); fused_allreduce_norm.cu.
void params_from_call(const FusedLaunch& l, Params* p);
// Launchers (Params fully filled by launch_fused_lsa).
void launch_push(const Params& p, DType dtype, int num_ctas, cudaStream_t stream);
// Copy-engine kernel (fused_allreduce_ce.cu): two-shot only; p as for the others (p.out = the
// caller's out); chunks per call from ce_chunk_count (selector.h).
void launch_copy_engine(Communicator::Impl& im, Params p, DType dtype, int num_ctas, cudaStream_t stream);

}  // namespace weft::comm_detail
