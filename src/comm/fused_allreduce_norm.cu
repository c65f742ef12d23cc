// Fused all-reduce + residual add + RMSNorm over NCCL symmetric memory (TokenWeave §3.3,
// load/store policy "LSA": peers' buffers read and written through ncclGetLsaPointer).
//
// Grid: num_ctas CTAs (1..32) of 512 threads; CTA c uses LSA barrier index c and only ever
// exchanges data with CTA c of the other ranks (partition.h: rows are dealt to CTAs in slots of
// rows_per_cta rows). Per call, CTA c:
//   1. writes its call header (ctrl slot c) and copies its rows of x into the local symmetric
//      input (skipped when x already is that buffer);
//   2. barrier c (release our input/header, acquire the peers');
//   3. checks every peer's header against its own; on any difference skips 4 and 6;
//   4. for each of its rows (own slice in two-shot, all tokens in one-shot): loads the row from
//      every peer (16-byte vectors, fp32 sum in rank order 0..N-1), adds the residual, rounds to
//      the storage type, stores the residual, reduces the sum of squares over the row group,
//      scales by rsqrt(mean + eps) * weight (row kept in registers: one read of the reduced
//      row) and stores the normalized row: into every peer's symmetric output (two-shot) or
//      into `out` directly (one-shot);
//   5. barrier c (release our stores, acquire the peers'; also: nobody reads our input any more);
//   6. two-shot: copies its rows (of every owner) from the symmetric output to `out`;
//   7. bumps its call counter (the sequence number in the next header).
// Multimem/NVLS: a WEFT_ENABLE_MULTIMEM policy would replace the peer loop of step 4 by one
// multimem.ld_reduce per vector and the peer store loop by one multimem.st, on
// ncclGetLsaMultimemPointer addresses (needs a devcomm with lsaMultimem). Not implemented: the
// lent machines forbid multicast.
#include <nccl.h>
#include <nccl_device.h>

#include <cstring>

#include "comm/comm_impl.h"
#include "comm/partition.h"
#include "common/cuda_check.h"
#include "common/types.cuh"
#include "common/vec8.cuh"
#include "norm/row_layout.h"

namespace weft::comm_detail {
namespace {

// 512 threads = 16 warps: at 4 vectors per thread a CTA holds 2048 vectors = one 16384-wide
// row (or several narrower rows), and one CTA per SM keeps up to 128 KB of loads in flight.
constexpr int kCommBlock = 512;
constexpr int kCommVpt = 4;
// Vectors of the row a thread loads (from every peer) before consuming any, per world-size
// instantiation: 2 peers x 4, 4 peers x 2, 8 peers x 2 = 8..16 independent 16-byte peer loads
// in flight per thread. The largest batches that fit the 128-register budget of a 512-thread
// CTA without spills (ptxas -v; 4 peers x 4 spills).
template <int kMaxWorld>
constexpr int batch_vectors() { return kMaxWorld <= 2 ? 4 : 2; }
constexpr uint32_t kHeaderMagic = 0x74666577u;  // "weft"

struct alignas(32) CallHeader {
  uint32_t magic, seq, tokens, hidden, dtype, variant, ctas, pad;
};
static_assert(sizeof(CallHeader) == 32, "one 32-byte header per CTA index");

struct Params {
  ncclDevComm dev;
  ncclWindow_t win;
  size_t ctrl_off, in_off, out_off;
  const void* x;
  void* residual;
  int64_t residual_stride;
  const void* weight;
  void* out;
  int tokens, hidden, vecs, world, rank;
  int tpr, vpt, rows_per_cta;
  float eps;
  int one_shot, copy_in, copy_out;
  uint32_t dtype_code;
  uint32_t* state;
};

__device__ __forceinline__ uint4* lsa_ptr(const Params& p, size_t off, int peer) {
  return static_cast<uint4*>(ncclGetLsaPointer(p.win, off, peer));
}

// Copies rows [seg.begin, seg.begin + seg.count) that belong to CTA c: src/dst are row-packed
// ([tokens, hidden] with stride hidden). 4 independent 16-byte loads per thread in flight.
__device__ void copy_cta_rows(const uint4* __restrict__ src, uint4* __restrict__ dst, TokenRange seg,
                              int vecs, int rows_per_cta, int c, int num_ctas) {
  for (int64_t s = c; s * rows_per_cta < seg.count; s += num_ctas) {
    const int64_t r0 = seg.begin + s * rows_per_cta;
    const int64_t nrows = seg.count - s * rows_per_cta < rows_per_cta ? seg.count - s * rows_per_cta : rows_per_cta;
    const int64_t n = nrows * vecs;
    const uint4* a = src + r0 * vecs;
    uint4* b = dst + r0 * vecs;
    for (int64_t i0 = threadIdx.x; i0 < n; i0 += 4 * kCommBlock) {
      uint4 v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (i0 + j * kCommBlock < n) v[j] = __ldcg(a + i0 + j * kCommBlock);
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (i0 + j * kCommBlock < n) b[i0 + j * kCommBlock] = v[j];
    }
  }
}

// Step 4 for every row of `seg` that belongs to this CTA.
template <class T, int kMaxWorld>
__device__ void reduce_norm_rows(const Params& p, TokenRange seg, float* scratch) {
  constexpr int kBatch = batch_vectors<kMaxWorld>();
  static_assert(kCommVpt % kBatch == 0, "batches tile the row");
  const int c = blockIdx.x, num_ctas = gridDim.x;
  const int tpr = p.tpr, vecs = p.vecs, vpt = p.vpt, R = p.rows_per_cta;
  const int group = threadIdx.x / tpr, g = threadIdx.x & (tpr - 1);
  const uint4* w = static_cast<const uint4*>(p.weight);

  for (int64_t s = c; s * R < seg.count; s += num_ctas) {
    const int64_t k = s * R + group;
    const bool active = k < seg.count;
    const int64_t row = seg.begin + k;
    const int64_t base = row * vecs;  // vector index of the row in the packed buffers
    uint4 rv[kCommVpt];               // the rounded, updated residual (what is normalized)
    float ss = 0.f;
    if (active) {
      uint4* res = reinterpret_cast<uint4*>(static_cast<T*>(p.residual) + row * p.residual_stride);
#pragma unroll
      for (int kb = 0; kb < kCommVpt; kb += kBatch) {
        uint4 ld[kBatch][kMaxWorld];
        uint4 rs[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          const int idx = g + (kb + j) * tpr;
          if (kb + j < vpt && idx < vecs) {
#pragma unroll
            for (int q = 0; q < kMaxWorld; ++q)
              if (q < p.world) ld[j][q] = __ldcg(lsa_ptr(p, p.in_off, q) + base + idx);
            rs[j] = res[idx];
          }
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          const int idx = g + (kb + j) * tpr;
          if (kb + j < vpt && idx < vecs) {
            float acc[8], f[8];
            detail::unpack8<T>(ld[j][0], acc);
#pragma unroll
            for (int q = 1; q < kMaxWorld; ++q) {
              if (q < p.world) {
                detail::unpack8<T>(ld[j][q], f);
#pragma unroll
                for (int i = 0; i < 8; ++i) acc[i] += f[i];
              }
            }
            detail::unpack8<T>(rs[j], f);
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[i] += f[i];
            rv[kb + j] = detail::pack8<T>(acc);
            res[idx] = rv[kb + j];
            detail::unpack8<T>(rv[kb + j], f);
#pragma unroll
            for (int i = 0; i < 8; ++i) ss += f[i] * f[i];
          }
        }
      }
    }
    const float total = detail::group_sum(ss, tpr, scratch);
    if (!active) continue;
    const float inv = rsqrtf(total / static_cast<float>(p.hidden) + p.eps);
#pragma unroll
    for (int kk = 0; kk < kCommVpt; ++kk) {
      const int idx = g + kk * tpr;
      if (kk < vpt && idx < vecs) {
        float f[8], fw[8];
        detail::unpack8<T>(rv[kk], f);
        detail::unpack8<T>(__ldg(w + idx), fw);
#pragma unroll
        for (int i = 0; i < 8; ++i) f[i] = f[i] * inv * fw[i];
        const uint4 o = detail::pack8<T>(f);
        if (p.one_shot) {
          static_cast<uint4*>(p.out)[base + idx] = o;
        } else {
#pragma unroll
          for (int q = 0; q < kMaxWorld; ++q)
            if (q < p.world) __stcg(lsa_ptr(p, p.out_off, q) + base + idx, o);
        }
      }
    }
  }
}

template <class T, int kMaxWorld>
__global__ void __launch_bounds__(kCommBlock, 1) fused_allreduce_norm_kernel(const Params p) {
  __shared__ float scratch[kCommBlock / 32];
  __shared__ uint32_t s_bad;
  const int c = blockIdx.x, num_ctas = gridDim.x;
  const uint32_t seq = p.state[1 + c];
  const uint32_t expect[7] = {kHeaderMagic, seq, static_cast<uint32_t>(p.tokens), static_cast<uint32_t>(p.hidden),
                              p.dtype_code, static_cast<uint32_t>(p.one_shot), static_cast<uint32_t>(num_ctas)};
  if (threadIdx.x == 0) {
    s_bad = 0;
    CallHeader h{expect[0], expect[1], expect[2], expect[3], expect[4], expect[5], expect[6], 0};
    reinterpret_cast<CallHeader*>(static_cast<char*>(ncclGetLsaPointer(p.win, p.ctrl_off, p.rank)))[c] = h;
  }
  // 1. copy in: exactly the rows CTA c of every rank will read from us.
  if (p.copy_in) {
    const uint4* src = static_cast<const uint4*>(p.x);
    uint4* dst = lsa_ptr(p, p.in_off, p.rank);
    if (p.one_shot) {
      copy_cta_rows(src, dst, TokenRange{0, p.tokens}, p.vecs, p.rows_per_cta, c, num_ctas);
    } else {
      for (int q = 0; q < p.world; ++q)
        copy_cta_rows(src, dst, owned_range(p.tokens, p.world, q), p.vecs, p.rows_per_cta, c, num_ctas);
    }
  }
  // 2. barrier c.
  ncclLsaBarrierSession<ncclCoopCta> bar(ncclCoopCta(), p.dev, ncclTeamLsa(p.dev), p.dev.lsaBarrier,
                                         static_cast<uint32_t>(c));
  bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);
  // 3. rank agreement (volatile: never served from a stale L1 line of the previous call).
  if (threadIdx.x < static_cast<unsigned>(p.world)) {
    const volatile uint32_t* h = reinterpret_cast<const volatile uint32_t*>(
        static_cast<const char*>(ncclGetLsaPointer(p.win, p.ctrl_off, threadIdx.x)) + c * sizeof(CallHeader));
    uint32_t bits = 0;
    if (h[0] != expect[0]) bits |= kMismatchMagic;
    if (h[1] != expect[1]) bits |= kMismatchSequence;
    if (h[2] != expect[2]) bits |= kMismatchTokens;
    if (h[3] != expect[3]) bits |= kMismatchHidden;
    if (h[4] != expect[4]) bits |= kMismatchDtype;
    if (h[5] != expect[5]) bits |= kMismatchVariant;
    if (h[6] != expect[6]) bits |= kMismatchCtas;
    if (bits) atomicOr(&s_bad, bits);
  }
  __syncthreads();
  const uint32_t bad = s_bad;
  // 4. reduce + residual + norm (+ scatter of the normalized rows in two-shot).
  if (!bad) {
    const TokenRange seg = p.one_shot ? TokenRange{0, p.tokens} : owned_range(p.tokens, p.world, p.rank);
    reduce_norm_rows<T, kMaxWorld>(p, seg, scratch);
  }
  // 5. barrier c.
  bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);
  // 6. two-shot copy out: the rows CTA c of every owner stored into our symmetric output.
  if (!bad && !p.one_shot && p.copy_out) {
    const uint4* src = lsa_ptr(p, p.out_off, p.rank);
    for (int q = 0; q < p.world; ++q)
      copy_cta_rows(src, static_cast<uint4*>(p.out), owned_range(p.tokens, p.world, q), p.vecs, p.rows_per_cta, c,
                    num_ctas);
  }
  // 7.
  if (threadIdx.x == 0) {
    p.state[1 + c] = seq + 1;
    if (bad) atomicOr(&p.state[0], bad);
  }
}

template <class T>
void launch_typed(const Params& p, int num_ctas, cudaStream_t stream) {
  if (p.world <= 2)
    fused_allreduce_norm_kernel<T, 2><<<num_ctas, kCommBlock, 0, stream>>>(p);
  else if (p.world <= 4)
    fused_allreduce_norm_kernel<T, 4><<<num_ctas, kCommBlock, 0, stream>>>(p);
  else
    fused_allreduce_norm_kernel<T, 8><<<num_ctas, kCommBlock, 0, stream>>>(p);
}

}  // namespace

void launch_fused_lsa(Communicator::Impl& im, const FusedLaunch& l, cudaStream_t stream) {
  const norm_detail::RowLayout lay = norm_detail::make_row_layout(l.hidden, kCommBlock, kCommVpt, kCommVpt);
  WEFT_CHECK_ARG(lay.vecs_per_thread <= kCommVpt, "x", "hidden " << l.hidden << " too large for the fused kernel");
  WEFT_CHECK_ARG(im.world <= kCommMaxWorld, "comm", "world size " << im.world << " > " << kCommMaxWorld);
  char* sym = static_cast<char*>(im.sym);
  WEFT_CHECK_ARG(!(l.one_shot && l.out == sym + im.in_off), "out",
                 "one-shot cannot write its output into the symmetric input buffer (peers still read it)");
  Params p;
  std::memcpy(static_cast<void*>(&p.dev), im.devcomm, sizeof(ncclDevComm));
  p.win = im.win;
  p.ctrl_off = im.ctrl_off;
  p.in_off = im.in_off;
  p.out_off = im.out_off;
  p.x = l.x;
  p.residual = l.residual;
  p.residual_stride = l.residual_stride;
  p.weight = l.weight;
  p.out = l.out;
  p.tokens = static_cast<int>(l.tokens);
  p.hidden = static_cast<int>(l.hidden);
  p.vecs = lay.vecs;
  p.world = im.world;
  p.rank = im.rank;
  p.tpr = lay.threads_per_row;
  p.vpt = lay.vecs_per_thread;
  p.rows_per_cta = lay.rows_per_cta;
  p.eps = l.eps;
  p.one_shot = l.one_shot ? 1 : 0;
  p.copy_in = l.x != sym + im.in_off ? 1 : 0;
  p.copy_out = l.out != sym + im.out_off ? 1 : 0;
  p.dtype_code = static_cast<uint32_t>(l.dtype);
  p.state = im.state;
  WEFT_DISPATCH_HALF_TYPES(l.dtype, "x", [&] { launch_typed<scalar_t>(p, l.num_ctas, stream); });
  WEFT_CUDA_CHECK_LAUNCH();
}

}  // namespace weft::comm_detail
