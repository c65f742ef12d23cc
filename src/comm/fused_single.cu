// World size 1: the fused all-reduce + residual add + RMSNorm degenerates to the owner's
// reduction of one contribution, i.e. residual' = round(residual + x), out = rmsnorm(residual')
// * weight. It runs through the SAME device code as the multi-rank kernels' phase B
// (reduce_norm_rows in fused_reduce.cuh, the copy-engine kernel's 512-thread block) on
// `num_ctas` CTAs, without barriers, headers or a symmetric window. So a TP layer runner at
// world 1 computes the same bits in the same order as rank r of a larger world computes for its
// owned rows (up to the rank-order sum, which has one term here), and its comm kernel occupies
// num_ctas SMs like the real one does (what the single-GPU overlap measurements need).
// In place (out == x) is safe: every thread reads its vectors of a row of x in pass 1 and writes
// the same vectors of `out` in pass 2.
#include <cstring>

#include "comm/comm_impl.h"
#include "comm/fused_common.cuh"
#include "comm/fused_reduce.cuh"
#include "common/cuda_check.h"
#include "common/types.cuh"
#include "weft/norm.h"

namespace weft::comm_detail {
namespace {

template <class T, int kBlock>
__global__ void __launch_bounds__(kBlock, 1) single_rank_kernel(const Params p) {
  constexpr int kB = reduce_batch_for_block<1, kBlock>();
  __shared__ float seg_sums[kBlock / 32][kSegs];
  reduce_norm_rows<T, 1, kB>(p, TokenRange{0, p.tokens}, 0, p.tokens, seg_sums);
}

}  // namespace

void launch_fused_single(const FusedLaunch& l, cudaStream_t stream) {
  WEFT_CHECK_ARG(l.hidden % 8 == 0 && l.hidden <= kNormMaxHidden, "x", "hidden " << l.hidden << " not supported");
  Params p;
  std::memset(static_cast<void*>(&p), 0, sizeof(p));  // no window, no device communicator
  params_from_call(l, &p);
  p.world = 1;
  p.rank = 0;
  p.one_shot = 1;  // normalized rows go to `out` only
  p.num_chunks = 1;
  p.chunk_rows = l.tokens;
  p.slot_rows = l.tokens;
  // Same CTA -> rows mapping and pass layout as the copy-engine reduce of one chunk.
  p.rows_per_cta = (l.tokens + l.num_ctas - 1) / l.num_ctas;
  pass_layout(p.rows_per_cta, p.vecs, &p.tpr, &p.rows_at_once, kReduceBlock);
  WEFT_DISPATCH_HALF_TYPES(l.dtype, "x", [&] {
    single_rank_kernel<scalar_t, kReduceBlock><<<l.num_ctas, kReduceBlock, 0, stream>>>(p);
  });
  WEFT_CUDA_CHECK_LAUNCH();
}

}  // namespace weft::comm_detail
