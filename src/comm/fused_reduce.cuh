// Internal (device + launch glue): phase B of the register-staged kernels (push and copy
// engine): the owner's reduction of the world contributions in rank order, the residual add and
// the RMSNorm, with the canonical sum of squares of fused_common.cuh. Shared so that the two
// kernels cannot drift apart (their bits are compared in the tests).
#pragma once
#include <nccl.h>
#include <nccl_device.h>

#include "comm/fused_common.cuh"
#include "comm/partition.h"
#include "common/types.cuh"
#include "common/vec8.cuh"

namespace weft::comm_detail {

// 256 threads: up to 255 registers per thread, room for the deep batches below without spills
// (at 512 threads the 128-register cap spilled 100-800 bytes per thread; ptxas -v: 170-212
// registers, 0 spills at 256).
constexpr int kCommBlock = 256;
constexpr int kCommWarps = kCommBlock / 32;
// Pass 1: vectors of a row a thread loads from every source (world contributions + residual)
// before consuming any: world 2: 8 x (2 + 1) = 24 loads; world <= 4: 4 x (4 + 1) = 20 (80 KB in
// flight per CTA); world 8: 2 x 9.
template <int kMaxWorld>
constexpr int reduce_batch() { return kMaxWorld <= 2 ? 8 : kMaxWorld <= 4 ? 4 : 2; }
// 512 threads (16 warps): the block of the reduce-only launches (copy-engine kernel, world 1).
// At 512 the pass-1 batch per thread is half the push kernel's (the 128-register cap; ptxas:
// 126-128 registers, 0 spills at world 2..8). Measured on 4xH200 (fed62b6,
// docs/perf-notes-comm.md): the reduce alone is 1.2-1.35x faster at 512 than at 256 from 1K
// tokens on. 768 and 1024 threads spilled 100-480 bytes per thread at the 80 / 64-register caps.
constexpr int kReduceBlock = 512;
template <int kMaxWorld, int kBlock>
constexpr int reduce_batch_for_block() { return reduce_batch<kMaxWorld>() * kCommBlock / kBlock; }
// Pass 2: rounded-row + weight vectors loaded per batch before the stores.
constexpr int kNormBatch = 4;
__device__ __forceinline__ uint4* lsa_ptr(const Params& p, size_t off, int peer) {
  return static_cast<uint4*>(lsa_raw(p, off, peer));
}

// Canonical sum of squares (bit-identical for every CTA count / pass layout): a row is cut into
// kSegs segments of seg_len vectors (a multiple of 32). Within a segment, lane l sums the squares
// of vectors l, l + 32, ... in order, then the warp's xor tree (warp_sum) gives the segment sum;
// the row sum is the left fold 0 + s_0 + s_1 + ... in segment order. A group of G warps per row
// gives warp w segments [w * kSegs / G, (w + 1) * kSegs / G); G > 1 folds through shared memory.
constexpr int kSegs = kCanonSegs;
static_assert(kSegs == kCommWarps, "the push kernel's 8 warps: one warp per canonical segment");

// Phase B for this CTA's rows of its own segment `seg` (rows begin.. of the tokens; row k of the
// segment sits at row k of every staging slot). The rows reduced by this launch are
// [k_lo, k_hi) of the segment; CTA c takes [k_lo + c * R, k_lo + (c + 1) * R) of them
// (R = p.rows_per_cta). Normalized rows go to `p.out` (one-shot, or p.peer_stores == 0: the
// copy-engine kernel, whose p.out is the local symmetric output) or to `p.out` and every peer's
// symmetric output (two-shot push).
template <class T, int kMaxWorld, int kB = reduce_batch<kMaxWorld>()>
__device__ void reduce_norm_rows(const Params& p, TokenRange seg, int64_t k_lo, int64_t k_hi,
                                 float (*seg_sums)[kSegs]) {
  const int64_t k0 = k_lo + blockIdx.x * p.rows_per_cta;
  const int64_t cnt = k_hi - k0 < p.rows_per_cta ? k_hi - k0 : p.rows_per_cta;
  if (cnt <= 0) return;  // uniform over the CTA
  const int tpr = p.tpr, vecs = p.vecs, rank = p.rank, world = p.world, seg_len = p.seg_len;
  const int group = threadIdx.x / tpr, g = threadIdx.x % tpr;
  const int G = tpr / 32, wg = g / 32, lane = g % 32;
  const int j0 = wg * (kSegs / G), j1 = j0 + kSegs / G;
  const int v_begin = j0 * seg_len, v_end = min(j1 * seg_len, vecs);  // this warp's vectors
  const uint4* w = static_cast<const uint4*>(p.weight);
  // World 1 (fused_single.cu) has no window: the only contribution is x itself.
  const uint4* stage = kMaxWorld > 1 ? lsa_ptr(p, p.stage_off, rank) : nullptr;
  const int64_t slot_vecs = p.slot_rows * vecs;
  uint4* const out = static_cast<uint4*>(p.out);

  for (int64_t r0 = 0; r0 < cnt; r0 += p.rows_at_once) {
    const int64_t k = k0 + r0 + group;  // row inside the segment
    const bool active = r0 + group < cnt;
    const int64_t row = seg.begin + k;
    uint4* const res = reinterpret_cast<uint4*>(static_cast<T*>(p.residual) + row * p.residual_stride);
    if (G > 1 && lane == 0)
      for (int j = j0; j < j1; ++j) seg_sums[group][j] = 0.f;
    float total = 0.f, cur = 0.f;
    int cur_seg = j0;
    if (active) {
      const uint4* xs = static_cast<const uint4*>(p.x) + row * vecs;
      const uint4* st = stage + k * vecs;
      for (int base = v_begin; base < v_end; base += kB * 32) {  // warp-uniform
        uint4 ld[kB][kMaxWorld];
        uint4 rs[kB];
#pragma unroll
        for (int b = 0; b < kB; ++b) {
          const int idx = base + b * 32 + lane;
          if (idx < v_end) {
#pragma unroll
            for (int q = 0; q < kMaxWorld; ++q)
              if (q < world) ld[b][q] = __ldcg((q == rank ? xs : st + q * slot_vecs) + idx);
            rs[b] = __ldcg(res + idx);
          }
        }
#pragma unroll
        for (int b = 0; b < kB; ++b) {
          if (base + b * 32 >= v_end) break;  // warp-uniform
          const int sj = (base + b * 32) / seg_len;
          if (sj != cur_seg) {  // warp-uniform: segments are whole multiples of 32 vectors
            const float sv = detail::warp_sum(cur);
            if (G == 1) total += sv;
            else if (lane == 0) seg_sums[group][cur_seg] = sv;
            cur = 0.f;
            cur_seg = sj;
          }
          const int idx = base + b * 32 + lane;
          if (idx < v_end) {
            float acc[8], f[8];
            detail::unpack8<T>(ld[b][0], acc);
#pragma unroll
            for (int q = 1; q < kMaxWorld; ++q) {
              if (q < world) {
                detail::unpack8<T>(ld[b][q], f);
#pragma unroll
                for (int i = 0; i < 8; ++i) acc[i] += f[i];
              }
            }
            cur += add_residual_round_store<T>(acc, rs[b], res[idx]);
          }
        }
      }
      const float sv = detail::warp_sum(cur);
      if (G == 1) total += sv;
      else if (lane == 0) seg_sums[group][cur_seg] = sv;
    }
    if (G > 1) {  // uniform
      __syncthreads();
      total = 0.f;
#pragma unroll
      for (int j = 0; j < kSegs; ++j) total += seg_sums[group][j];
      __syncthreads();  // seg_sums is rewritten by the next row
    }
    if (!active) continue;
    const float inv = rsqrtf(total / static_cast<float>(p.hidden) + p.eps);
    const int64_t obase = row * vecs;
    for (int base = v_begin; base < v_end; base += kNormBatch * 32) {
      uint4 rv[kNormBatch], wv[kNormBatch];
#pragma unroll
      for (int b = 0; b < kNormBatch; ++b) {
        const int idx = base + b * 32 + lane;
        if (idx < v_end) {
          rv[b] = res[idx];  // written above by this thread
          wv[b] = __ldg(w + idx);
        }
      }
#pragma unroll
      for (int b = 0; b < kNormBatch; ++b) {
        const int idx = base + b * 32 + lane;
        if (idx < v_end) {
          float f[8], fw[8];
          detail::unpack8<T>(rv[b], f);
          detail::unpack8<T>(wv[b], fw);
#pragma unroll
          for (int i = 0; i < 8; ++i) f[i] = f[i] * inv * fw[i];
          const uint4 o = detail::pack8<T>(f);
          if (p.one_shot || !p.peer_stores) {
            __stcg(out + obase + idx, o);
          } else {
#pragma unroll
            for (int q = 0; q < kMaxWorld; ++q)
              if (q < world) __stcg((q == rank ? out : lsa_ptr(p, p.out_off, q)) + obase + idx, o);
          }
        }
      }
    }
  }
}

// Rows handled at once per CTA: one group of tpr threads per row; tpr = 32 (a warp per row, no
// CTA barrier in the row reduction) once a CTA has >= block / 32 rows, more warps per row for fewer rows
// (more loads in flight per row), never more threads than vectors in a row.
// A row group never spans more than kSegs warps (warp = canonical segment or a run of them), so
// a CTA of more than kSegs warps always has at least block / (32 kSegs) rows at once.
inline void pass_layout(int64_t rows_per_cta, int vecs, int* tpr, int* rows_at_once, int block = kCommBlock) {
  const int min_rpa = block > 32 * kSegs ? block / (32 * kSegs) : 1;
  int rpa = min_rpa;
  while (rpa < block / 32 && 2 * rpa <= rows_per_cta) rpa *= 2;
  int t = block / rpa;
  while (t > 32 && t > vecs) {
    t /= 2;
    rpa *= 2;
  }
  *tpr = t;
  *rows_at_once = rpa;
}

}  // namespace weft::comm_detail
