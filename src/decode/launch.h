// Internal host interface between the wrapper (decode.cpp) and the kernels (kernels.cu).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "attention/plan/balance.h"
#include "attention/plan/work_plan.h"
#include "attention/variant.cuh"
#include "decode/decode_plan.h"
#include "prefill/sm90/sm90_launch.h"
#include "weft/decode.h"
#include "weft/paged_kv.h"
#include "weft/tensor.h"

namespace weft::decode {


struct LaunchArgs {
  plan::PlanPointers plan;
  const TensorView* q = nullptr;
  const TensorView* out = nullptr;
  const TensorView* lse = nullptr;     // may be null
  const PagedKVCache* cache = nullptr;
  const PageTable* table = nullptr;
  const BlockTable* blocks = nullptr;  // non-null: keys through this native block table, not `table`
  int32_t group_size = 1;
  attn::VariantParams var;  // attn::variant_params(variant, head_dim); alibi_slopes picks AlibiVariant
  DType dtype = DType::kBFloat16;     // q and out
  DType kv_dtype = DType::kBFloat16;  // the pools: dtype, or fp8 e4m3 / e5m2 (cache->k_scale / v_scale)
  int32_t head_dim = 0;
  DecodePath path = DecodePath::kTensorCore;
  int32_t grid = 0;
  int32_t stages = 3;  // per-warp pipeline stages (decode_stages)
  int32_t warps = 4;   // warps per CTA (decode_warps)
  int32_t tile_rows = kPlanTileQ;  // rows per item of the plan (decode_tile_rows)
  // The decode kernel is launched with programmatic stream serialization (common/pdl_launch.h): it
  // may be scheduled while the kernel just before it on the stream runs, once that kernel's CTAs
  // triggered their dependents at their start; its last CTA waits for that grid before exiting
  // (ptx::grid_dependency_wait), so the grid completes only after both, and work after it sees
  // both complete. Set by (1) work plans whose wide-pack kernel was launched just before,
  // overlapped (DecodeOptions::prefix_wide_overlap; the merge after it then reads both kernels'
  // partial states), and (2) the POD wrapper's SM partition, after its capped sm90 prefill
  // (pod_wrapper.cpp: decode CTAs are dispatched only once every prefill CTA holds its SM). Only
  // the balanced path honours it (launch_decode) and the work plan path (launch_decode_work_plan);
  // the run-time compiled kernels launch as before. Nothing the kernel reads may be written by the
  // kernel before it.
  bool programmatic = false;
};

// Launches the decode kernel of (dtype, head_dim, path) with args.grid persistent CTAs.
void launch_decode(const LaunchArgs& args, cudaStream_t stream);
// The generic item path: the tensor-core decode kernel over a work plan already copied into the
// workspace `work` points at (attention/plan/work_plan.h: packs of requests sharing a prefix),
// then the work plan's merge. 16-row items, no ALiBi (weft::Error otherwise). kernels_packed.cu.
// merge_blocks: the merge kernel's grid (0: args.grid); num_merges 0 skips the merge launch
// (-1: unknown, always launch).
void launch_decode_work_plan(const LaunchArgs& args, const plan::WorkPlanPointers& work, cudaStream_t stream,
                             int merge_blocks = 0, int num_merges = -1);
// Raises the generic item path's kernels' dynamic shared memory limit (outside graph capture).
void prepare_decode_work_plan(int32_t head_dim);
// Wide packs (kernels_wide.cu, wide_pack.cuh): the work plan's wide items (WorkPlan::
// num_wide_items, wide_cta_indptr) through the prefill FA2 mainloop, args.grid CTAs; run before
// launch_decode_work_plan, whose merge combines their partial states. Compiled for head_dim 128,
// fp16 / bf16 (wide_packs_compiled); 16-bit pools, no ALiBi / window / custom mask (weft::Error).
bool wide_packs_compiled(int32_t head_dim, DType dtype);
void launch_decode_wide_packs(const LaunchArgs& args, const plan::WorkPlanPointers& work, cudaStream_t stream);
// The same items on the Hopper prefill mainloop (kernels_wide_sm90.cu) where its Q boxes can load
// the plan's wide items' rows (plan::wide_rows_loadable): one box per request at GQA groups >=
// kWideSm90GatherGroup (a box of group heads x 128 bytes is then whole 1024-byte swizzle atoms),
// else one box of 128 / group consecutive tokens (the items' requests must be consecutive).
// wide_sm90_shape: an sm90 instance and a GQA group / page size it runs (pure); wide_sm90_device:
// the current device is sm_90 and the build holds the kernel's sm_90a code.
inline constexpr int32_t kWideSm90GatherGroup = prefill::sm90::kQGatherMinGroup;
bool wide_sm90_shape(int32_t group_size, int64_t page_size, DType dtype);
bool wide_sm90_device();
void prepare_decode_wide_sm90();
void launch_decode_wide_sm90(const LaunchArgs& args, const plan::WorkPlanPointers& work, cudaStream_t stream);
// Raises the wide-pack kernels' dynamic shared memory limit (outside graph capture).
void prepare_decode_wide_packs();
// Resident wide-pack CTAs per SM (also prepares them).
int wide_pack_ctas_per_sm();
// The kernel parameters of args (kernels.cu; shared by both launchers).
template <class T, class KV>
struct DecodeParams;
template <class T, class KV>
DecodeParams<T, KV> make_decode_params(const LaunchArgs& args);
// Whether a decode kernel for q dtype `q`, pool dtype `kv`, head_dim and path exists (instance table).
bool kv_dtype_compiled(DType q, DType kv, int32_t head_dim, DecodePath path);
// Per-warp pipeline stages for head_dim: the tuned default (see decode_stages in kernels.cu);
// DecodeOptions::pipeline_stages overrides it.
int decode_stages(int32_t head_dim);
// Resident CTAs per SM of the tensor-core kernel for head_dim with `stages` stages (sizes the
// fixed grid). Also raises the kernels' dynamic shared memory limit (outside any graph capture).
int ctas_per_sm(int32_t head_dim, int32_t stages, int32_t warps, int device);
// Warps per CTA: the tuned default, 4; DecodeOptions::warps_per_cta overrides it.
int decode_warps(int32_t head_dim);
bool path_compiled(DecodePath path);

}  // namespace weft::decode
