// Plan-ordered merge of fp32 partial attention states (see merge.cuh for the math).
#include "attention/merge.cuh"

#include "attention/merge_row.cuh"
#include "common/cuda_check.h"
#include "common/pdl_launch.h"
#include "common/ptx.cuh"
#include "common/types.cuh"

namespace weft::attn {
namespace {

constexpr int kWarps = 4;  // one warp per output row; 4 rows in flight per CTA

// One merge entry's metadata (plan data, written by plan() before the producer kernel ran).
// Head-folded plans (plan::Plan::head_fold = y): entry e is plan merge e / y for sub-head e % y;
// its KV head and first slot are expanded (plan::fold_expand, plan::fold_slot: its n slots stay
// consecutive).
struct MergeEntry {
  int token0, kv_head, r0, r1, s0, n, step;
};
__device__ __forceinline__ MergeEntry load_entry(const plan::PlanPointers& p, int e, int y) {
  const int m = e / y, fold = plan::fold_word(e % y, y);
  MergeEntry x;
  x.token0 = p.qo_indptr[p.merge_request[m]];
  x.kv_head = plan::fold_expand(p.merge_kv_head[m], fold);
  x.r0 = p.merge_row_begin[m];
  x.r1 = p.merge_row_end[m];
  const int s0 = p.merge_indptr[m];
  x.n = p.merge_indptr[m + 1] - s0;
  x.s0 = plan::fold_slot(s0, fold, p.slot_stride);
  x.step = 1;
  return x;
}

template <class T>
__global__ void __launch_bounds__(kWarps * 32) plan_merge_kernel(plan::PlanPointers p, MergeOutput out) {
  // The plan metadata of this CTA's first entry is read BEFORE waiting for the producer: the merge
  // grid starts while the attention kernel runs (programmatic launch), so these dependent loads
  // (header -> entry -> qo_indptr) are off the critical path; after the wait only the partials
  // are read. (Measured with ncu on H200 at f96c783: the old merge, metadata after the wait and 8
  // slots per batch, took ~11.5 us for llama3 b1/kv32K, 8 entries x 4 rows x 33 slots.)
  const int fold = p.header->head_fold;
  const int num_merges = p.header->num_merges * fold;  // entries: plan merges x sub-heads
  const int tile_q = p.header->tile_q;
  MergeEntry first{};
  if (static_cast<int>(blockIdx.x) < num_merges) first = load_entry(p, blockIdx.x, fold);
  // Wait for the attention grid to complete (and its partial writes to be visible) before
  // reading partials. A no-op when the launch had no programmatic dependency.
  ptx::grid_dependency_wait();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int m = blockIdx.x; m < num_merges; m += gridDim.x) {
    const MergeEntry e = m == static_cast<int>(blockIdx.x) ? first : load_entry(p, m, fold);
    for (int r = e.r0 + warp; r < e.r1; r += kWarps) {
      const int i = r - e.r0;
      const int token = e.token0 + r / out.group_size;
      const int head = e.kv_head * out.group_size + r % out.group_size;
      merge_row_warp<T>(p.partial_lse + static_cast<int64_t>(e.s0) * tile_q + i,
                        p.partial_o + (static_cast<int64_t>(e.s0) * tile_q + i) * out.head_dim, e.n, tile_q * e.step,
                        out.head_dim, static_cast<T*>(out.o) + token * out.o_stride_token + head * out.o_stride_head,
                        out.lse != nullptr ? out.lse + token * out.lse_stride_token + head : nullptr, lane);
    }
  }
}

template <class T>
__global__ void __launch_bounds__(kWarps * 32) work_plan_merge_kernel(plan::WorkPlanPointers p, MergeOutput out) {
  // Launched programmatically after the decode kernel (launch_work_plan_merge): the header (plan
  // data, copied by plan() before the attention kernels) is read before waiting for that grid's
  // completion and memory; every partial after it.
  const int num_merges = p.header->num_merges;
  const int tile_q = p.header->tile_rows;
  ptx::grid_dependency_wait();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int m = blockIdx.x; m < num_merges; m += gridDim.x) {
    const int token = p.merge_request[m], kv_head = p.merge_kv_head[m];
    const int r0 = p.merge_row_begin[m], r1 = p.merge_row_end[m];
    const int s0 = p.merge_src_indptr[m], s1 = p.merge_src_indptr[m + 1];
    for (int r = r0 + warp; r < r1; r += kWarps) {
      const int head = kv_head * out.group_size + r % out.group_size;
      const ListedSlots src{p.partial_lse, p.partial_o, p.src_slot + s0, p.src_row + s0, r - r0, tile_q, out.head_dim};
      merge_row_warp_src<T>(src, s1 - s0, out.head_dim,
                            static_cast<T*>(out.o) + token * out.o_stride_token + head * out.o_stride_head,
                            out.lse != nullptr ? out.lse + token * out.lse_stride_token + head : nullptr, lane);
    }
  }
}

}  // namespace

void launch_work_plan_merge(const plan::WorkPlanPointers& plan, const MergeOutput& out, int num_blocks,
                            cudaStream_t stream) {
  WEFT_CHECK_ARG(out.head_dim % 4 == 0 && out.head_dim > 0, "head_dim",
                 "must be a positive multiple of 4, got " << out.head_dim);
  WEFT_CHECK_ARG(num_blocks >= 1, "num_blocks", "must be >= 1, got " << num_blocks);
  // Programmatic dependent launch (as launch_plan_merge): the grid is scheduled when the decode
  // kernel's CTAs have exited (it triggers no earlier) instead of after the stream's full
  // completion of it, and waits on the device (griddepcontrol.wait) for its memory. The decode
  // kernel of a plan with wide items completes only after the wide grid (its last CTA waits for
  // it: decode/kernels_packed.cu), so the partials of both kernels are visible after the wait.
  WEFT_DISPATCH_HALF_TYPES(out.dtype, "out", [&] {
    launch_programmatic(work_plan_merge_kernel<scalar_t>, dim3(num_blocks), dim3(kWarps * 32), 0, stream, plan, out);
  });
  WEFT_CUDA_CHECK_LAUNCH();
}

void launch_plan_merge(const plan::PlanPointers& plan, const MergeOutput& out, int num_blocks,
                       cudaStream_t stream) {
  WEFT_CHECK_ARG(out.head_dim % 4 == 0 && out.head_dim > 0, "head_dim",
                 "must be a positive multiple of 4, got " << out.head_dim);
  WEFT_CHECK_ARG(num_blocks >= 1, "num_blocks", "must be >= 1, got " << num_blocks);
  // Programmatic dependent launch: the merge grid may be scheduled while the attention kernel
  // before it is still running (the FA2 / POD kernels trigger when their CTAs exit; the sm90
  // prefill kernel merges in place and is not followed by this grid) and waits on the device
  // (griddepcontrol.wait), which hides the launch gap between the two.
  // Captured into CUDA graphs as a programmatic edge.
  WEFT_DISPATCH_HALF_TYPES(out.dtype, "out", [&] {
    launch_programmatic(plan_merge_kernel<scalar_t>, dim3(num_blocks), dim3(kWarps * 32), 0, stream, plan, out);
  });
  WEFT_CUDA_CHECK_LAUNCH();
}

}  // namespace weft::attn
