// Fused all-reduce + residual add + RMSNorm over NCCL symmetric memory (TokenWeave §3.3
// without multicast; load/store policy "LSA": peers' buffers written through ncclGetLsaPointer).
//
// Push schedule: every byte that crosses NVLink is a store (fire and forget); all loads are
// local. (The first version pulled peers' rows with remote loads: each CTA then sustained only
// ~9 GB/s, bounded by loads in flight over the NVLink round trip; docs/perf-notes-comm.md.)
// Grid: num_ctas CTAs (1..32) of 512 threads; CTA c uses LSA barrier index c and only ever
// exchanges data with CTA c of the other ranks: inside every segment of rows (a rank's owned
// slice in two-shot, a chunk of all rows in one-shot) CTA c handles the contiguous rows
// [c * R, (c + 1) * R), R = ceil(slot_rows / num_ctas), the same R on every rank.
// Staging (symmetric, per rank): world slots of slot_rows rows; slot q holds rank q's x rows of
// this rank's segment. Per call (one-shot: per chunk of rows that fits the staging), CTA c:
//   1. (first chunk) writes its call header (ctrl slot c);
//   A. pushes its rows of x into slot `rank` of the staging of every peer that owns them
//      (two-shot: the owner; one-shot: every peer), peers in rotated order (rank+1, rank+2, ..)
//      so the ranks do not all hit one destination at once;
//   2. barrier c (release our pushes, acquire the peers');
//   3. (first chunk) checks every peer's header against its own; on any difference skips B/C;
//   B. for each of its rows of its own segment: pass 1 sums the world contributions in rank
//      order 0..N-1 in fp32 (own from x, the others from local staging), adds the residual,
//      rounds, stores the residual and accumulates the sum of squares of the rounded values
//      (group of threads per row); pass 2 re-reads the rounded row (L2-hot), scales by
//      rsqrt(mean + eps) * weight and stores the normalized row: into `out` (one-shot) or into
//      `out` and every peer's symmetric output (two-shot);
//   4. barrier c (release our stores; also: nobody reads our staging / output any more);
//   C. two-shot: copies the rows of the other owners from the symmetric output to `out`
//      (skipped when out is the symmetric output);
//   5. bumps its call counter (the sequence number in the next header).
// Reuse safety without further barriers: a peer pushes call k+1's rows only after passing
// barrier 4 of call k, which we reach only after our last staging read of call k; it stores
// into our symmetric output only after barrier 2 of call k+1, after our copy-out of call k.
// Multimem/NVLS would replace A/B's peer stores by multimem.st / ld_reduce; not implemented
// (the lent machines forbid multicast).
#include <nccl.h>
#include <nccl_device.h>

#include <algorithm>
#include <cstring>

#include "comm/comm_impl.h"
#include "comm/fused_common.cuh"
#include "comm/partition.h"
#include "common/cuda_check.h"
#include "common/types.cuh"
#include "common/vec8.cuh"
#include "weft/norm.h"

namespace weft::comm_detail {
namespace {

// 256 threads: up to 255 registers per thread, room for the deep batches below without spills
// (at 512 threads the 128-register cap spilled 100-800 bytes per thread; ptxas -v: 170-212
// registers, 0 spills at 256).
constexpr int kCommBlock = 256;
constexpr int kCommWarps = kCommBlock / 32;
// Copy phases (A, C): 16-byte vectors per thread loaded before any is stored: 256 x 16 x 16 B =
// 64 KB in flight per CTA (HBM/L2 latency ~1 us under load -> ~60 GB/s per CTA).
constexpr int kCopyUnroll = 16;
// Pass 1: vectors of a row a thread loads from every source (world contributions + residual)
// before consuming any: world 2: 8 x (2 + 1) = 24 loads; world <= 4: 4 x (4 + 1) = 20 (80 KB in
// flight per CTA); world 8: 2 x 9.
template <int kMaxWorld>
constexpr int reduce_batch() { return kMaxWorld <= 2 ? 8 : kMaxWorld <= 4 ? 4 : 2; }
// Pass 2: rounded-row + weight vectors loaded per batch before the stores.
constexpr int kNormBatch = 4;
__device__ __forceinline__ uint4* lsa_ptr(const Params& p, size_t off, int peer) {
  return static_cast<uint4*>(lsa_raw(p, off, peer));
}

// Copies n 16-byte vectors (CTA-wide), kCopyUnroll independent loads per thread in flight.
__device__ __forceinline__ void copy_vecs(const uint4* __restrict__ src, uint4* __restrict__ dst, int64_t n) {
  for (int64_t i0 = threadIdx.x; i0 < n; i0 += kCopyUnroll * kCommBlock) {
    uint4 v[kCopyUnroll];
#pragma unroll
    for (int j = 0; j < kCopyUnroll; ++j)
      if (i0 + j * kCommBlock < n) v[j] = __ldcg(src + i0 + j * kCommBlock);
#pragma unroll
    for (int j = 0; j < kCopyUnroll; ++j)
      if (i0 + j * kCommBlock < n) __stcg(dst + i0 + j * kCommBlock, v[j]);
  }
}

// Phase A: this CTA's rows of every peer's segment -> slot `rank` of that peer's staging.
__device__ void push_rows(const Params& p, int ch) {
  const int c = blockIdx.x;
  for (int j = 1; j < p.world; ++j) {
    const int o = (p.rank + j) % p.world;
    const TokenRange seg = segment_of(p, o, ch);
    const int64_t k0 = c * p.rows_per_cta;
    const int64_t cnt = seg.count - k0 < p.rows_per_cta ? seg.count - k0 : p.rows_per_cta;
    if (cnt <= 0) continue;
    const uint4* src = static_cast<const uint4*>(p.x) + (seg.begin + k0) * p.vecs;
    uint4* dst = lsa_ptr(p, p.stage_off, o) + (p.rank * p.slot_rows + k0) * p.vecs;
    copy_vecs(src, dst, cnt * p.vecs);
  }
}

// Canonical sum of squares (bit-identical for every CTA count / pass layout): a row is cut into
// kSegs segments of seg_len vectors (a multiple of 32). Within a segment, lane l sums the squares
// of vectors l, l + 32, ... in order, then the warp's xor tree (warp_sum) gives the segment sum;
// the row sum is the left fold 0 + s_0 + s_1 + ... in segment order. A group of G warps per row
// gives warp w segments [w * kSegs / G, (w + 1) * kSegs / G); G > 1 folds through shared memory.
constexpr int kSegs = kCommWarps;
static_assert(kSegs == kCanonSegs, "one warp per canonical segment");

// Phase B for this CTA's rows of its own segment.
template <class T, int kMaxWorld>
__device__ void reduce_norm_rows(const Params& p, int ch, float (*seg_sums)[kSegs]) {
  constexpr int kB = reduce_batch<kMaxWorld>();
  const TokenRange seg = segment_of(p, p.rank, ch);
  const int64_t k0 = blockIdx.x * p.rows_per_cta;
  const int64_t cnt = seg.count - k0 < p.rows_per_cta ? seg.count - k0 : p.rows_per_cta;
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
          if (p.one_shot) {
            out[obase + idx] = o;
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

template <class T, int kMaxWorld>
__global__ void __launch_bounds__(kCommBlock, 1) fused_allreduce_norm_kernel(const Params p) {
  __shared__ float seg_sums[kCommWarps][kSegs];
  __shared__ uint32_t s_bad;
  const int c = blockIdx.x, num_ctas = gridDim.x;
  // 1. header (the expected values are recomputed at the check: fewer live registers).
  if (threadIdx.x == 0) {
    s_bad = 0;
    write_header(p, c, num_ctas);
  }
  ncclLsaBarrierSession<ncclCoopCta> bar(ncclCoopCta(), p.dev, ncclTeamLsa(p.dev), p.dev.lsaBarrier,
                                         static_cast<uint32_t>(c));
  uint32_t bad = 0;
  for (int ch = 0; ch < p.num_chunks; ++ch) {
    // A. push our rows to their reducers.
    push_rows(p, ch);
    // 2. barrier c.
    bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);
    // 3. rank agreement (volatile: never served from a stale L1 line of the previous call).
    if (ch == 0) {
      check_header(p, c, num_ctas, &s_bad);
      __syncthreads();
      bad = s_bad;
    }
    // B. reduce + residual + norm (+ all-gather stores in two-shot).
    if (!bad) reduce_norm_rows<T, kMaxWorld>(p, ch, seg_sums);
    // 4. barrier c.
    bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);
    if (bad) break;  // every rank sees a mismatch (any differing pair differs from every rank)
  }
  // C. two-shot copy out: the other owners' rows that CTA c of each owner stored into our
  // symmetric output.
  if (!bad && !p.one_shot && !p.out_is_sym) {
    const uint4* src = lsa_ptr(p, p.out_off, p.rank);
    for (int j = 1; j < p.world; ++j) {
      const int o = (p.rank + j) % p.world;
      const TokenRange seg = owned_range(p.tokens, p.world, o);
      const int64_t k0 = c * p.rows_per_cta;
      const int64_t cnt = seg.count - k0 < p.rows_per_cta ? seg.count - k0 : p.rows_per_cta;
      if (cnt <= 0) continue;
      const int64_t off = (seg.begin + k0) * p.vecs;
      copy_vecs(src + off, static_cast<uint4*>(p.out) + off, cnt * p.vecs);
    }
  }
  // 5.
  if (threadIdx.x == 0) {
    p.state[1 + c] += 1;
    if (bad) atomicOr(&p.state[0], bad);
  }
}

// Rows handled at once per CTA: one group of tpr threads per row; tpr = 32 (a warp per row, no
// CTA barrier in the row reduction) once a CTA has >= 16 rows, more warps per row for fewer rows
// (more loads in flight per row), never more threads than vectors in a row.
void pass_layout(int64_t rows_per_cta, int vecs, int* tpr, int* rows_at_once) {
  int rpa = 1;
  while (rpa < kCommWarps && 2 * rpa <= rows_per_cta) rpa *= 2;
  int t = kCommBlock / rpa;
  while (t > 32 && t > vecs) {
    t /= 2;
    rpa *= 2;
  }
  *tpr = t;
  *rows_at_once = rpa;
}

}  // namespace

void launch_push(const Params& p, DType dtype, int num_ctas, cudaStream_t stream) {
  WEFT_DISPATCH_HALF_TYPES(dtype, "x", [&] {
    using T = scalar_t;
    if (p.world <= 2)
      fused_allreduce_norm_kernel<T, 2><<<num_ctas, kCommBlock, 0, stream>>>(p);
    else if (p.world <= 4)
      fused_allreduce_norm_kernel<T, 4><<<num_ctas, kCommBlock, 0, stream>>>(p);
    else
      fused_allreduce_norm_kernel<T, 8><<<num_ctas, kCommBlock, 0, stream>>>(p);
  });
}

void launch_fused_lsa(Communicator::Impl& im, const FusedLaunch& l, cudaStream_t stream) {
  WEFT_CHECK_ARG(im.world <= kCommMaxWorld, "comm", "world size " << im.world << " > " << kCommMaxWorld);
  WEFT_CHECK_ARG(l.hidden % 8 == 0 && l.hidden <= kNormMaxHidden, "x", "hidden " << l.hidden << " not supported");
  char* sym = static_cast<char*>(im.sym);
  WEFT_CHECK_ARG(!(l.one_shot && l.out == sym + im.in_off), "out",
                 "one-shot cannot write its output into the symmetric input buffer");
  const int64_t row_bytes = l.hidden * static_cast<int64_t>(dtype_size(l.dtype));
  const int64_t stage_rows = static_cast<int64_t>(im.stage_bytes) / row_bytes;  // rows the staging holds
  Params p;
  std::memcpy(static_cast<void*>(&p.dev), im.devcomm, sizeof(ncclDevComm));
  p.win = im.win;
  p.ctrl_off = im.ctrl_off;
  p.out_off = im.out_off;
  p.stage_off = im.stage_off;
  p.x = l.x;
  p.residual = l.residual;
  p.residual_stride = l.residual_stride;
  p.weight = l.weight;
  p.out = l.out;
  p.tokens = static_cast<int>(l.tokens);
  p.hidden = static_cast<int>(l.hidden);
  p.vecs = static_cast<int>(l.hidden / 8);
  p.world = im.world;
  p.rank = im.rank;
  p.one_shot = l.one_shot ? 1 : 0;
  if (l.one_shot) {
    // Every rank stages all its rows at every peer: world slots of chunk_rows rows.
    p.chunk_rows = std::min<int64_t>(l.tokens, stage_rows / im.world);
    WEFT_CHECK_ARG(p.chunk_rows >= 1, "x", "row of " << row_bytes << " bytes does not fit the staging area");
    p.num_chunks = static_cast<int>((l.tokens + p.chunk_rows - 1) / p.chunk_rows);
    p.slot_rows = p.chunk_rows;
  } else {
    p.chunk_rows = l.tokens;
    p.num_chunks = 1;
    p.slot_rows = (l.tokens + im.world - 1) / im.world;
    WEFT_CHECK_ARG(p.slot_rows * im.world <= stage_rows, "x", "two-shot slices do not fit the staging area");
  }
  p.rows_per_cta = (p.slot_rows + l.num_ctas - 1) / l.num_ctas;
  pass_layout(p.rows_per_cta, p.vecs, &p.tpr, &p.rows_at_once);
  p.seg_len = 32 * ((p.vecs + 32 * kSegs - 1) / (32 * kSegs));
  p.eps = l.eps;
  p.out_is_sym = l.out == sym + im.out_off ? 1 : 0;
  p.dtype_code = static_cast<uint32_t>(l.dtype);
  p.state = im.state;
  // Kernel policy (CommKernel): bulk unless the push kernel was asked for or bulk's shared-memory
  // pipeline cannot hold a row job; both implement the same protocol (fused_common.cuh).
  p.bulk_stages = 0;
  if (im.kernel == CommKernel::kBulk && bulk_fits(im.world, row_bytes, &p.bulk_stages))
    launch_bulk(p, l.dtype, l.num_ctas, stream);
  else
    launch_push(p, l.dtype, l.num_ctas, stream);
  WEFT_CUDA_CHECK_LAUNCH();
}

}  // namespace weft::comm_detail
