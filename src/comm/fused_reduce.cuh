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
// (at 512 threads the 128-register cap spilled 100-800 bytes per thread; ptxas -v at 256:
// 188-254 registers, 0 spills, for the copy-engine and push kernels).
constexpr int kCommBlock = 256;
constexpr int kCommWarps = kCommBlock / 32;
// Pass 1: vectors of a row a thread loads from every source (world contributions + residual)
// before consuming any: world 2: 8 x (2 + 1) = 24 loads; world <= 4: 4 x (4 + 1) = 20 (80 KB in
// flight per CTA); world 8: 2 x 9.
template <int kMaxWorld>
constexpr int reduce_batch() { return kMaxWorld <= 2 ? 8 : kMaxWorld <= 4 ? 4 : 2; }
__device__ __forceinline__ uint4* lsa_ptr(const Params& p, size_t off, int peer) {
  return static_cast<uint4*>(lsa_raw(p, off, peer));
}


// Canonical sum of squares (bit-identical for every CTA count / pass layout): a row is cut into
// kSegs segments of seg_len vectors (a multiple of 32). Within a segment, lane l sums the squares
// of vectors l, l + 32, ... in order, then the warp's xor tree (warp_sum) gives the segment sum;
// the row sum is the left fold 0 + s_0 + s_1 + ... in segment order. A group of G warps per row
// gives warp w segments [w * kSegs / G, (w + 1) * kSegs / G); G > 1 folds through shared memory.
constexpr int kSegs = kCommWarps;
static_assert(kSegs == kCanonSegs, "one warp per canonical segment");

// Pass 2 keeps the rounded row in registers: a thread holds at most kKeepVecs 16-byte vectors of
// it (32 registers), so pass_layout gives a row enough warps (hidden 8192: 4 warps, 16384: 8).
// Re-reading the row from L2 instead (the previous layout, a warp per row) cost one more
// SM <-> L2 round trip per 4 vectors and one more row of SM load traffic per row; the SM's load
// throughput (~70 GB/s, weft-nvlink-probe) is what phase B runs into.
constexpr int kKeepVecs = 8;

// Vectors per canonical segment (a multiple of 32): kSegs segments cover the row.
inline int canon_seg_len(int vecs) { return 32 * ((vecs + 32 * kSegs - 1) / (32 * kSegs)); }

// Warps per row so that a lane keeps <= kKeepVecs vectors: a power of two (it divides kSegs).
inline int keep_warps_per_row(int vecs) {
  const int per_lane_one_warp = kSegs * canon_seg_len(vecs) / 32;
  int g = 1;
  while (g < kSegs && per_lane_one_warp > g * kKeepVecs) g *= 2;
  return g;
}

// Named barrier of the tpr threads of row group `group` (ids 1..kCommWarps; id 0 is
// __syncthreads, which the LSA barrier session uses).
__device__ __forceinline__ void group_sync(int group, int tpr) {
  asm volatile("bar.sync %0, %1;" ::"r"(1 + group), "r"(tpr) : "memory");
}

// Phase B for this CTA's rows of its own segment `seg` (rows begin.. of the tokens; row k of the
// segment sits at row k of every staging slot). The rows reduced by this launch are
// [k_lo, k_hi) of the segment; CTA c takes [k_lo + c * R, k_lo + (c + 1) * R) of them
// (R = p.rows_per_cta). Normalized rows go to `p.out` (one-shot, or p.peer_stores == 0: the
// copy-engine kernel, whose p.out is the local symmetric output) or to `p.out` and every peer's
// symmetric output (two-shot push).
// Per row, a group of tpr threads (G = tpr / 32 warps; warp wg of the group owns canonical
// segments [wg * kSegs / G, (wg + 1) * kSegs / G), i.e. the vectors [v_begin, v_end), and lane l
// of it the vectors v_begin + 32 i + l, i < kKeepVecs):
//   pass 1: loads the world contributions and the residual (batches of kB vectors), sums in
//           rank order, adds the residual, rounds, stores the residual, keeps the rounded vectors
//           and sums their squares in canonical order;
//   pass 2: scales the kept vectors by rsqrt(mean + eps) * weight and stores them.
template <class T, int kMaxWorld, int kB = reduce_batch<kMaxWorld>()>
__device__ void reduce_norm_rows(const Params& p, TokenRange seg, int64_t k_lo, int64_t k_hi,
                                 float (*seg_sums)[kSegs]) {
  static_assert(kKeepVecs % kB == 0, "pass 1 batches tile the kept vectors");
  const int64_t k0 = k_lo + blockIdx.x * p.rows_per_cta;
  const int64_t cnt = k_hi - k0 < p.rows_per_cta ? k_hi - k0 : p.rows_per_cta;
  if (cnt <= 0) return;  // uniform over the CTA
  const int tpr = p.tpr, vecs = p.vecs, rank = p.rank, world = p.world, seg_len = p.seg_len;
  const int group = threadIdx.x / tpr, g = threadIdx.x % tpr;
  const int G = tpr / 32, wg = g / 32, lane = g % 32;
  const int j0 = wg * (kSegs / G), j1 = j0 + kSegs / G;
  const int v_begin = j0 * seg_len, v_end = min(j1 * seg_len, vecs);  // this warp's vectors
  const uint4* w = static_cast<const uint4*>(p.weight);
  const uint4* stage = lsa_ptr(p, p.stage_off, rank);
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
    uint4 keep[kKeepVecs];
    if (active) {
      const uint4* xs = static_cast<const uint4*>(p.x) + row * vecs;
      const uint4* st = stage + k * vecs;
#pragma unroll
      for (int it = 0; it < kKeepVecs / kB; ++it) {
        const int base = v_begin + it * kB * 32;  // warp-uniform
        if (base >= v_end) break;
        // One base pointer per source; the batch's vectors are at constant offsets b * 32.
        const uint4* src[kMaxWorld];
#pragma unroll
        for (int q = 0; q < kMaxWorld; ++q) src[q] = (q == rank ? xs : st + q * slot_vecs) + base + lane;
        const uint4* const rsrc = res + base + lane;
        uint4 ld[kB][kMaxWorld];
        uint4 rs[kB];
#pragma unroll
        for (int b = 0; b < kB; ++b) {
          if (base + b * 32 + lane < v_end) {
#pragma unroll
            for (int q = 0; q < kMaxWorld; ++q)
              if (q < world) ld[b][q] = __ldcg(src[q] + b * 32);
            rs[b] = __ldcg(rsrc + b * 32);
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
            cur += add_residual_round_store<T>(acc, rs[b], keep[it * kB + b]);
            __stcg(res + idx, keep[it * kB + b]);
          }
        }
      }
      const float sv = detail::warp_sum(cur);
      if (G == 1) total += sv;
      else if (lane == 0) seg_sums[group][cur_seg] = sv;
    }
    if (G > 1) {  // uniform over the group (every thread of a group shares `active`)
      group_sync(group, tpr);
      total = 0.f;
#pragma unroll
      for (int j = 0; j < kSegs; ++j) total += seg_sums[group][j];
      group_sync(group, tpr);  // seg_sums[group] is rewritten by the group's next row
    }
    if (!active) continue;
    const float inv = rsqrtf(total / static_cast<float>(p.hidden) + p.eps);
    const int64_t obase = row * vecs;
#pragma unroll
    for (int i = 0; i < kKeepVecs; ++i) {
      const int idx = v_begin + i * 32 + lane;
      if (idx < v_end) {
        float f[8], fw[8];
        detail::unpack8<T>(keep[i], f);
        detail::unpack8<T>(__ldg(w + idx), fw);
#pragma unroll
        for (int e = 0; e < 8; ++e) f[e] = f[e] * inv * fw[e];
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

// Rows handled at once per CTA: one group of tpr threads per row. At least keep_warps_per_row
// warps per row (pass 2's registers); beyond that as many rows at once as the CTA has (up to one
// per warp: no barrier in the row reduction when a warp owns a row), more warps per row for fewer
// rows (more loads in flight per row), never more threads than vectors in a row.
inline void pass_layout(int64_t rows_per_cta, int vecs, int* tpr, int* rows_at_once) {
  int rpa = 1;
  while (rpa < kCommWarps && 2 * rpa <= rows_per_cta) rpa *= 2;
  int t = kCommBlock / rpa;
  while (t > 32 && t > vecs) {
    t /= 2;
    rpa *= 2;
  }
  const int t_min = 32 * keep_warps_per_row(vecs);
  if (t < t_min) {
    t = t_min;
    rpa = kCommBlock / t;
  }
  *tpr = t;
  *rows_at_once = rpa;
}


}  // namespace weft::comm_detail
