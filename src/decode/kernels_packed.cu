// Decode over a work plan (attention/plan/work_plan.h): the generic item path of the decode
// kernel (decode_items with kPacked) plus the work plan's merge. Its own translation unit so the
// extra instantiations compile in parallel with kernels.cu.
#include "attention/merge.cuh"
#include "common/cuda_check.h"
#include "common/pdl_launch.h"
#include "common/ptx.cuh"
#include "decode/decode_tc.cuh"
#include "decode/launch.h"

namespace weft::decode {

namespace {

// The generic item path's kernels, by head dim (pack_tile_rows, decode_plan.h):
//  - head_dim <= 128: the MULTI-TILE kernel, one persistent launch over items of two tile
//    shapes: items of 17..32 rows (packs of several requests' groups) run the four-n8-tile
//    mainloop (m = 32), items of <= 16 rows the two-tile one (m = 16), chosen per item (the
//    round-up rule); Q buffers and partial slots are 32 rows. Both mainloops are in one kernel,
//    so its registers are the larger one's (the 32-row mainloop's, at the 255 cap as in the
//    wide balanced kernel) and the grid is the wrapper's (its residency query includes the wide
//    kernels' shared memory).
//  - head_dim 256: 16-row items only (two n8 tiles): four tiles of O^T at D = 256 would need
//    256 accumulator registers per lane (the register bound of PAT §5.2 (1)).
// The kernel follows the plan's tile rows (LaunchArgs::tile_rows, the partial slots' stride): 32
// runs the multi-tile kernel, 16 the 16-row one.
// Overlapped beside the wide-pack kernel (LaunchArgs::programmatic: programmatic stream
// serialization, disjoint CTAs of one plan), the grid's last CTA waits for the wide grid before it
// exits (griddepcontrol.wait: its completion and memory), so this grid completes only after the
// wide one and the merge after it reads both kernels' partial states. The last CTA: dispatched
// last, it holds its slot only after every other CTA of both grids is resident (and in an
// overlapped plan it has no items: the wide kernel's share of the CTAs is the last of each copy).
// A no-op without a programmatic dependency.
template <class T, int D>
__global__ void __launch_bounds__(kMaxThreads, 1) decode_multitile_kernel(const DecodeParams<T> p) {
  using V = attn::DefaultVariant;
  decode_items<T, D, kPlanTileQWide, TcMainloop<T, D, 4, V>, true, DecodeParams<T>, TcMainloop<T, D, 2, V>>(p);
  if (blockIdx.x == gridDim.x - 1) ptx::grid_dependency_wait();
}
// 16-row items with 16-row partial slots: head_dim 256, and every plan of 16-row tiles (the
// work queue's tasks, work_queue_decode.cpp).
template <class T, int D>
constexpr auto packed16_kernel = decode_tc_kernel<T, D, 2, attn::DefaultVariant, true>;

template <class T, int D>
void launch_packed(const DecodeParams<T>& p, int tile_rows, int grid, bool programmatic, cudaStream_t stream) {
  if constexpr (D <= 128) {
    if (tile_rows == kPlanTileQWide) {
      const size_t smem = SmemLayout<T, D, kPlanTileQWide>::bytes(p.stages, p.warps);
      if (programmatic) {  // beside the wide-pack kernel (LaunchArgs::programmatic; a graph's programmatic edge)
        launch_programmatic(decode_multitile_kernel<T, D>, dim3(grid), dim3(p.warps * 32), smem, stream, p);
      } else {
        decode_multitile_kernel<T, D><<<grid, p.warps * 32, smem, stream>>>(p);
      }
      WEFT_CUDA_CHECK_LAUNCH();
      return;
    }
  }
  packed16_kernel<T, D><<<grid, p.warps * 32, SmemLayout<T, D>::bytes(p.stages, p.warps), stream>>>(p);
  WEFT_CUDA_CHECK_LAUNCH();
}

template <int D>
void prepare(int optin) {
  for (const void* k : {reinterpret_cast<const void*>(packed16_kernel<half, D>),
                        reinterpret_cast<const void*>(packed16_kernel<__nv_bfloat16, D>)})
    WEFT_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
  if constexpr (D <= 128)
    for (const void* k : {reinterpret_cast<const void*>(decode_multitile_kernel<half, D>),
                          reinterpret_cast<const void*>(decode_multitile_kernel<__nv_bfloat16, D>)})
      WEFT_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
}

template <class T>
void dispatch_packed(const LaunchArgs& a, const plan::WorkPlanPointers& work, cudaStream_t stream) {
  DecodeParams<T> p = make_decode_params<T, T>(a);
  p.work = work;
  switch (a.head_dim) {
    case 64: return launch_packed<T, 64>(p, a.tile_rows, a.grid, a.programmatic, stream);
    case 128: return launch_packed<T, 128>(p, a.tile_rows, a.grid, a.programmatic, stream);
    case 256: return launch_packed<T, 256>(p, a.tile_rows, a.grid, a.programmatic, stream);
    default: throw Error("head_dim", "expected 64, 128 or 256, got " + std::to_string(a.head_dim));
  }
}

}  // namespace

void prepare_decode_work_plan(int32_t head_dim) {
  int optin = 0, device = 0;
  WEFT_CUDA_CHECK(cudaGetDevice(&device));
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  switch (head_dim) {
    case 64: return prepare<64>(optin);
    case 128: return prepare<128>(optin);
    case 256: return prepare<256>(optin);
    default: throw Error("head_dim", "expected 64, 128 or 256, got " + std::to_string(head_dim));
  }
}

void launch_decode_work_plan(const LaunchArgs& a, const plan::WorkPlanPointers& work, cudaStream_t stream,
                             int merge_blocks, int num_merges) {
  WEFT_CHECK_ARG(a.var.alibi_slopes == nullptr, "variant.alibi_slopes",
                 "ALiBi is not supported on the generic (work plan) item path yet");
  WEFT_CHECK_ARG((a.tile_rows == kPlanTileQ || a.tile_rows == pack_tile_rows(a.head_dim)) && a.group_size <= kPlanTileQ,
                 "tile_rows",
                 "the generic item path runs items of 16 or pack_tile_rows(head_dim) = " << pack_tile_rows(a.head_dim)
                                                                                         << " rows (GQA group <= 16), got "
                                                                                         << a.tile_rows);
  WEFT_DISPATCH_HALF_TYPES(a.dtype, "q", [&] { dispatch_packed<scalar_t>(a, work, stream); });
  attn::MergeOutput mo;
  mo.o = a.out->data;
  mo.dtype = a.dtype;
  mo.o_stride_token = a.out->strides[0];
  mo.o_stride_head = a.out->strides[1];
  mo.lse = a.lse != nullptr ? static_cast<float*>(a.lse->data) : nullptr;
  mo.lse_stride_token = a.lse != nullptr ? a.lse->strides[0] : 0;
  mo.head_dim = a.head_dim;
  mo.group_size = a.group_size;
  if (num_merges == 0) return;
  attn::launch_work_plan_merge(work, mo, merge_blocks > 0 ? merge_blocks : a.grid, stream);
}

}  // namespace weft::decode
