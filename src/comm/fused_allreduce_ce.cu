// Fused all-reduce + residual add + RMSNorm, copy-engine kernel (CommKernel::kCopyEngine,
// two-shot only): the copy engines carry every NVLink byte, the num_ctas CTAs only reduce.
//
// Why: one SM moves ~50 GB/s of copies however it issues them (weft-nvlink-probe,
// docs/perf-notes-comm.md), so the push kernel, whose <= 8 CTAs also carry the
// reduce-scatter and all-gather traffic (~2.5 S per rank at world 4, S = tokens x hidden x 2 B),
// cannot beat NCCL. The copy engines move ~390 GB/s over NVLink with no SM at all; what is left
// for the SMs is the owner's local reduction: (world + 1) / world S of loads and 2 / world S of
// stores per rank.
//
// Per call, on the caller's stream s and two internal streams (push, pull), the owned slice of
// every rank (owned_range) cut into K chunks of consecutive rows (chunk j of a slice of n rows:
// rows [n * j / K, n * (j + 1) / K), the same cut on every rank):
//   push stream:  for each chunk j: copy x's rows of chunk j of every peer's slice into slot
//                 `rank` of that peer's staging (peers in rotated order rank+1, rank+2, ..);
//                 record pushed[j].
//   stream s:     for each chunk j: wait pushed[j]; launch the reduce kernel for chunk j:
//                 barrier c (every rank's pushes of chunk j are complete: each rank's kernel for
//                 chunk j starts after its own pushed[j]), reduce + residual + norm of the own
//                 rows of chunk j (fused_reduce.cuh, normalized rows into the LOCAL symmetric
//                 output only), barrier c (every owner's rows of chunk j are in its symmetric
//                 output); record reduced[j].
//   pull stream:  for each chunk j: wait reduced[j]; copy every owner's normalized rows of chunk
//                 j from its symmetric output into `out` (the own rows by a local copy, skipped
//                 when out is the symmetric output).
//   s waits for the pull stream at the end (fork / join by events: capturable in a CUDA graph).
// So the pushes of chunk j + 1 and the pulls of chunk j - 1 run while chunk j is reduced.
// Reuse safety across calls: a rank's pushes of call k+1 start after its kernels of call k, each
// of which passed a barrier that every owner reaches only after its last staging read of that
// chunk; an owner overwrites its symmetric output in call k+1 only after the first barrier of
// the chunk, which every peer reaches after its call-k pulls (s waited for them).
// Rank agreement: chunk 0's launch writes and checks the call headers exactly like the other
// kernels and stores the mismatch bits for the later chunks of the call, which then skip their
// barriers and work on every rank (every rank sees a mismatch), so ranks that disagree on the
// token count (and hence on K) do not hang. Unlike the other kernels, the pulls still run on a
// mismatch: `out` then holds stale rows (residual untouched; check_remote_errors reports it).
#include <nccl.h>
#include <nccl_device.h>

#include <algorithm>

#include "comm/comm_impl.h"
#include "comm/fused_common.cuh"
#include "comm/fused_reduce.cuh"
#include "comm/partition.h"
#include "comm/selector.h"
#include "common/cuda_check.h"
#include "common/types.cuh"

namespace weft::comm_detail {
namespace {

// kBlock threads: kReduceBlock (512, fused_reduce.cuh says why), the only one launched.
constexpr int kCeBlock = kReduceBlock;
template <class T, int kMaxWorld, int kBlock>
__global__ void __launch_bounds__(kBlock, 1) ce_reduce_kernel(const Params p) {
  constexpr int kB = reduce_batch_for_block<kMaxWorld, kBlock>();
  static_assert(kB >= 1, "a CTA this large has no pass-1 batch left");
  __shared__ float seg_sums[kBlock / 32][kSegs];
  __shared__ uint32_t s_bad;
  const int c = blockIdx.x, num_ctas = gridDim.x;
  const bool first = p.ce_chunk == 0, last = p.ce_chunk == p.num_chunks - 1;
  uint32_t* const call_bad = p.state + 1 + kCommMaxCtas + c;
  if (threadIdx.x == 0) {
    s_bad = 0;
    if (first) write_header(p, c, num_ctas);
  }
  // Later chunks: the bits chunk 0 of this call found (stream-ordered before this launch).
  uint32_t bad = first ? 0u : *reinterpret_cast<volatile uint32_t*>(call_bad);
  ncclLsaBarrierSession<ncclCoopCta> bar(ncclCoopCta(), p.dev, ncclTeamLsa(p.dev), p.dev.lsaBarrier,
                                         static_cast<uint32_t>(c));
  if (!bad) bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);
  if (first) {
    check_header(p, c, num_ctas, &s_bad);
    __syncthreads();
    bad = s_bad;
  }
  if (!bad)
    reduce_norm_rows<T, kMaxWorld, kB>(p, owned_range(p.tokens, p.world, p.rank), p.ce_k_lo, p.ce_k_hi, seg_sums);
  // Chunk 0 always closes with the barrier (the mismatch is only known after the first one).
  if (!bad || first) bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);
  if (threadIdx.x == 0) {
    if (first) *call_bad = bad;
    if (last) {
      p.state[1 + c] += 1;
      if (bad) atomicOr(&p.state[0], bad);
    }
  }
}

void launch_reduce(const Params& p, DType dtype, int num_ctas, cudaStream_t stream) {
  WEFT_DISPATCH_HALF_TYPES(dtype, "x", [&] {
    using T = scalar_t;
    if (p.world <= 2)
      ce_reduce_kernel<T, 2, kCeBlock><<<num_ctas, kCeBlock, 0, stream>>>(p);
    else if (p.world <= 4)
      ce_reduce_kernel<T, 4, kCeBlock><<<num_ctas, kCeBlock, 0, stream>>>(p);
    else
      ce_reduce_kernel<T, 8, kCeBlock><<<num_ctas, kCeBlock, 0, stream>>>(p);
  });
  WEFT_CUDA_CHECK_LAUNCH();
}

// Rows [lo, hi) of chunk j of a slice of n rows.
struct RowSpan {
  int64_t lo, hi;
};
RowSpan chunk_rows(int64_t n, int j, int k) { return {n * j / k, n * (j + 1) / k}; }

}  // namespace

void launch_copy_engine(Communicator::Impl& im, Params p, DType dtype, int num_ctas, cudaStream_t stream) {
  const int world = im.world, rank = im.rank;
  const int64_t row_bytes = static_cast<int64_t>(p.hidden) * static_cast<int64_t>(dtype_size(dtype));
  const int K = ce_chunk_count(static_cast<int64_t>(p.tokens) * row_bytes, world, im.ce_chunks);
  const char* const x = static_cast<const char*>(p.x);
  char* const out = static_cast<char*>(p.out);
  const bool out_is_sym = p.out_is_sym != 0;
  p.out = im.peer_base[rank] + im.out_off;  // the kernel writes the local symmetric output only
  p.peer_stores = 0;
  p.num_chunks = K;
  const TokenRange mine = owned_range(p.tokens, world, rank);

  WEFT_CUDA_CHECK(cudaEventRecord(im.ce_start, stream));
  WEFT_CUDA_CHECK(cudaStreamWaitEvent(im.ce_push, im.ce_start, 0));
  WEFT_CUDA_CHECK(cudaStreamWaitEvent(im.ce_pull, im.ce_start, 0));
  for (int j = 0; j < K; ++j) {
    for (int i = 1; i < world; ++i) {
      const int o = (rank + i) % world;
      const TokenRange so = owned_range(p.tokens, world, o);
      const RowSpan r = chunk_rows(so.count, j, K);
      if (r.hi <= r.lo) continue;
      char* dst = im.peer_base[o] + im.stage_off + (rank * p.slot_rows + r.lo) * row_bytes;
      WEFT_CUDA_CHECK(cudaMemcpyAsync(dst, x + (so.begin + r.lo) * row_bytes, (r.hi - r.lo) * row_bytes,
                                      cudaMemcpyDeviceToDevice, im.ce_push));
    }
    WEFT_CUDA_CHECK(cudaEventRecord(im.ce_pushed[j], im.ce_push));
    WEFT_CUDA_CHECK(cudaStreamWaitEvent(stream, im.ce_pushed[j], 0));

    const RowSpan own = chunk_rows(mine.count, j, K);
    p.ce_chunk = j;
    p.ce_k_lo = own.lo;
    p.ce_k_hi = own.hi;
    p.rows_per_cta = std::max<int64_t>(1, (own.hi - own.lo + num_ctas - 1) / num_ctas);
    pass_layout(p.rows_per_cta, p.vecs, &p.tpr, &p.rows_at_once, kCeBlock);
    launch_reduce(p, dtype, num_ctas, stream);
    WEFT_CUDA_CHECK(cudaEventRecord(im.ce_reduced[j], stream));
    WEFT_CUDA_CHECK(cudaStreamWaitEvent(im.ce_pull, im.ce_reduced[j], 0));

    for (int i = 0; i < world; ++i) {
      const int o = (rank + i) % world;
      if (o == rank && out_is_sym) continue;  // already in place
      const TokenRange so = owned_range(p.tokens, world, o);
      const RowSpan r = chunk_rows(so.count, j, K);
      if (r.hi <= r.lo) continue;
      const int64_t off = (so.begin + r.lo) * row_bytes;
      WEFT_CUDA_CHECK(cudaMemcpyAsync(out + off, im.peer_base[o] + im.out_off + off, (r.hi - r.lo) * row_bytes,
                                      cudaMemcpyDeviceToDevice, im.ce_pull));
    }
  }
  WEFT_CUDA_CHECK(cudaEventRecord(im.ce_pulled, im.ce_pull));
  WEFT_CUDA_CHECK(cudaStreamWaitEvent(stream, im.ce_pulled, 0));
}

}  // namespace weft::comm_detail
