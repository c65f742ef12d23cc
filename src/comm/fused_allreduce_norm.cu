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
#include "comm/fused_reduce.cuh"
#include "comm/partition.h"
#include "common/cuda_check.h"
#include "common/types.cuh"
#include "common/vec8.cuh"
#include "weft/norm.h"

namespace weft::comm_detail {
namespace {

// Copy phases (A, C): 16-byte vectors per thread loaded before any is stored: 256 x 16 x 16 B =
// 64 KB in flight per CTA (HBM/L2 latency ~1 us under load -> ~60 GB/s per CTA).
constexpr int kCopyUnroll = 16;

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
    if (!bad) {
      const TokenRange seg = segment_of(p, p.rank, ch);
      reduce_norm_rows<T, kMaxWorld>(p, seg, 0, seg.count, seg_sums);
    }
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

void params_from_call(const FusedLaunch& l, Params* p) {
  p->x = l.x;
  p->residual = l.residual;
  p->residual_stride = l.residual_stride;
  p->weight = l.weight;
  p->out = l.out;
  p->tokens = static_cast<int>(l.tokens);
  p->hidden = static_cast<int>(l.hidden);
  p->vecs = static_cast<int>(l.hidden / 8);
  p->seg_len = 32 * ((p->vecs + 32 * kSegs - 1) / (32 * kSegs));
  p->eps = l.eps;
  p->dtype_code = static_cast<uint32_t>(l.dtype);
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
  params_from_call(l, &p);
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
  p.out_is_sym = l.out == sym + im.out_off ? 1 : 0;
  p.state = im.state;
  p.peer_stores = 1;
  p.ce_chunk = 0;
  p.ce_k_lo = p.ce_k_hi = 0;
  // Kernel policy (CommKernel): the copy-engine kernel for two-shot calls when asked for, else
  // push. Both implement the same arithmetic (fused_common.cuh).
  if (l.kernel == CommKernel::kCopyEngine && !l.one_shot) {
    launch_copy_engine(im, p, l.dtype, l.num_ctas, stream);
    return;
  }
  launch_push(p, l.dtype, l.num_ctas, stream);
  WEFT_CUDA_CHECK_LAUNCH();
}

}  // namespace weft::comm_detail
