// BatchDecodeWrapper's state (internal): what plan() leaves for run(). Shared by wrapper.cpp
// (construction, workspace sizing, run and launch) and wrapper_plan.cpp (every plan() form).
#pragma once
#include <algorithm>
#include <memory>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "attention/heuristics.h"
#include "attention/plan/balance.h"
#include "attention/plan/cascade_forest.h"
#include "attention/plan/pack_cost.h"
#include "attention/plan/pack_planner.h"
#include "attention/plan/prefix_forest.h"
#include "attention/plan/work_plan.h"
#include "attention/variant_host.h"
#include "common/cuda_check.h"
#include "decode/decode_plan.h"
#include "decode/direct_plan.h"
#include "decode/jit_launch.h"
#include "decode/launch.h"
#include "decode/router.h"
#include "decode/run_checks.h"
#include "attention/staging_ring.h"
#include "decode/work_queue_decode.h"
#include "paged/block_table.h"
#include "weft/decode.h"
#include "weft/fp8.h"
#include "weft/validate.h"


namespace weft {

struct BatchDecodeWrapper::Impl {
  int32_t max_batch = 0, num_qo_heads = 0, num_kv_heads = 0, head_dim = 0;
  DecodePath forced = DecodePath::kAuto;
  int32_t grid = 0;
  // KV heads per plan head class (decode::decode_head_fold): plans are made for num_kv_heads /
  // head_fold heads on grid / head_fold CTAs and expanded by the layout and the kernel.
  int32_t head_fold = 1;
  std::vector<int32_t> table_lens;  // plan(PageTable)'s KV lengths (kept between steps)
  int32_t stages = 3;             // per-warp pipeline stages (decode::decode_stages)
  int32_t warps = 4;              // warps per CTA (decode::decode_warps)
  int32_t tile_rows = 16;         // rows per item (decode::decode_tile_rows)
  plan::WorkspaceLayout layout;
  // Pinned staging slots (attention/staging_ring.h): plan() serializes into one, copies it into the
  // workspace and records its event; each of max(copy_bytes, the prefix-sharing layout's metadata)
  // bytes; heuristics::plan_staging_slots of them.
  plan::StagingRing staging;
  // What a balanced plan() copies: the metadata region, at least heuristics::kMinPlanCopyBytes (a
  // smaller copy costs the host 2-3 us where this one costs 1.3 us). The bytes past the metadata
  // (zeros, or with share_prefixes what a work-plan image left in the staging slot) land on the
  // balanced layout's partial-state scratch, which every run() writes before reading.
  std::size_t copy_bytes = 0;

  // The current plan.
  bool planned = false;
  plan::Plan plan;
  // Planning scratch kept between plan() calls (a warm plan() allocates nothing): the planner's
  // buffers, the shape, the next plan (swapped with `plan` once it is in a staging slot, so a
  // plan() that throws leaves the current plan intact), and what each staging slot holds (the next
  // serialize into it clears only the previous plan's excess instead of the whole region).
  plan::Planner planner;
  plan::BatchShape shape;
  plan::Plan next;
  // Unsplit balanced plans (most serving steps) skip planner, shape and next: the direct planner
  // writes their image into the staging slot (decode/direct_plan.h; the same bytes). `plan` then
  // holds only batch and kv_len (what run() checks); plan_items is the current balanced plan's
  // item count on either path.
  decode::DirectPlanner direct;
  int32_t plan_items = 0;
  std::vector<plan::WorkspaceLayout::Image> staging_images;  // one per staging slot
  // DecodeOptions::share_prefixes: plans are work plans with packs (attention/plan/work_plan.h)
  // in their own layout; plan() passes the table it plans from (plan_lengths cannot share).
  bool share = false;
  // DecodeOptions::prefix_fallback, and whether the current plan is that fallback (the balanced
  // plan in `plan`, launched as without share_prefixes, with balanced_tile_rows).
  bool prefix_fallback = true;
  bool prefix_cost_model = true;  // DecodeOptions::prefix_cost_model
  bool share_fallback = false;
  int32_t balanced_tile_rows = 16;
  bool work_plan_active() const { return share && !share_fallback; }
  // DecodeOptions::prefix_wide_packs, and whether the current work plan has wide items (run()
  // then launches the wide-pack kernel first: decode::launch_decode_wide_packs).
  bool wide_packs = true;
  int32_t wide_min_rows = 0;  // DecodeOptions::prefix_wide_min_rows resolved (heuristics::kPackWideMinRows)
  int32_t wide_min_keys = 0;  // DecodeOptions::prefix_wide_min_keys resolved (heuristics::kPackWideMinKeys)
  bool wide_overlap = true;   // DecodeOptions::prefix_wide_overlap
  bool wide_launch = false;
  bool wide_split = false;  // the plan split the CTAs between the kinds (WorkPlan::wide_split)
  // DecodeOptions::prefix_wide_sm90 on an sm_90 device with the kernel's code (decode::
  // wide_sm90_device), and whether the current plan runs its wide items there.
  bool wide_sm90_ok = false;
  bool wide_sm90 = false;
  // DecodeOptions::prefix_wide_sm90_wave: the SM count (one sm90 CTA per SM) when on, else 0;
  // and the current plan's wide launch grid (WorkPlan::wide_grid; 0: grid).
  int32_t wide_wave_ctas = 0;
  int32_t wide_grid = 0;
  plan::WorkPlanLayout wlayout;
  const PageTable* share_table = nullptr;
  // During plan(BlockTable): its seq_lens.host, whose entries paged::check_block_table_rows has
  // already found in [0, max_blocks x page_size]: plan_lengths skips its own sign pass over them.
  const int32_t* lens_checked = nullptr;
  plan::PackPlanner packer;            // keeps the last plan for lazy updates
  const std::vector<CascadeLevel>* cascade = nullptr;  // plan_cascade()'s levels, during the call
  void* share_image_ws = nullptr;      // workspace whose metadata holds packer's plan (else null)
  uint64_t share_image_version = 0;    // packer.version() of the plan whose image was copied last
  int32_t planned_items = 0;
  int32_t page_size = 0;
  DType dtype = DType::kBFloat16;
  KVLayout kv_layout = KVLayout::kNHD;
  AttentionVariant variant;
  void* workspace = nullptr;
  DecodePath path = DecodePath::kTensorCore;
  // The path a run on pools of kv_dtype takes: the planned one, except under kAuto on fp8 pools
  // (heuristics::decode_fp8_prefers_tensor_cores; the plan does not depend on the path).
  DecodePath path_for(DType kv_dtype) const {
    if (forced != DecodePath::kAuto || !is_fp8(kv_dtype)) return path;
    return heuristics::decode_fp8_prefers_tensor_cores(num_qo_heads / num_kv_heads, head_dim) ? DecodePath::kTensorCore
                                                                                               : DecodePath::kCudaCore;
  }
  // A run-time compiled variant's kernel and parameters (variant.jit; weft/jit.h).
  jit_detail::PlanState jit;
  std::size_t jit_smem = 0;
  // plan(BlockTable) with share_prefixes: the prefix forest reads the rows in place through
  // row offsets b * row_stride (no copy of the page ids).
  std::vector<int32_t> row_offsets;
  PageTable rows_view;
  void set_rows_view(const BlockTable& table);  // row_offsets and rows_view of the table
  // During plan(BlockTable) under kAuto: packer.prepare() read the rows view for the router's
  // sharing feature; plan_lengths's packer.plan() does not read the ids again.
  bool share_prepared = false;
  int64_t last_shared_keys = 0;  // the feature of the previous kAuto plan (> 0: prepare builds the forest)

  // DecodeOptions::route other than kBalanced: the work queue (its workspace after the balanced
  // plan's, at wq_offset), the router table of kAuto, and whether the current plan is the work
  // queue's (run() then launches its 1-D grid).
  DecodeRoute route = DecodeRoute::kBalanced;
  int32_t wq_chunk = 0;
  int32_t max_tasks = 0;
  std::size_t wq_offset = 0;
  std::unique_ptr<decode::WorkQueueDecode> wq;
  decode::RouterModel router;
  decode::RouteMemo route_memo;  // kAuto: the last votes (choose_route: the same picks as without it)
  bool wq_planned = false;
  // kAuto with share_prefixes: a step whose rows share no leading pages runs the balanced plan
  // (which the prefix-sharing plan replaces as the persistent candidate only where it can save
  // reads) of `twin`, a kBalanced wrapper with the same kernel settings, in its own workspace
  // region at twin_offset (after the work queue's); twin_planned: the current plan is the twin's.
  std::unique_ptr<BatchDecodeWrapper> twin;
  std::size_t twin_offset = 0;
  bool twin_planned = false;
  void plan_twin(DecodePlanInfo& info, const BlockTable& table, int32_t num_qo_heads, int32_t num_kv_heads,
                 int32_t head_dim, int32_t page_size, DType dtype, KVLayout layout, const AttentionVariant& variant,
                 void* workspace, std::size_t workspace_bytes, cudaStream_t stream);
  void plan_work_queue(DecodePlanInfo& info, const BlockTable& table, int32_t chunk, int32_t num_qo_heads,
                       int32_t num_kv_heads, int32_t head_dim, int32_t page_size, DType dtype, KVLayout layout,
                       const AttentionVariant& variant, void* workspace, std::size_t workspace_bytes,
                       cudaStream_t stream);

  // run(): the checks of q / out / lse and of the cache against the plan, and the launch.
  void check_run_views(const TensorView& q, const TensorView& out, const TensorView* lse) const;
  // fp8 pools (run(PageTable) only): a kernel for them, and no feature they do not support yet.
  void check_run_fp8(const PagedKVCache& cache) const;
  decode::PlannedShape planned_shape() const;
  // The table's batch and every row's length (len(b)) equal the plan's (`name` on a mismatch).
  template <class Len>
  void check_run_lengths(int32_t table_batch, const char* name, Len len) const {
    WEFT_CHECK_ARG(table_batch == plan.batch, "table.batch_size", "planned " << plan.batch << ", got " << table_batch);
    for (int32_t b = 0; b < table_batch; ++b)
      WEFT_CHECK_ARG(len(b) == plan.kv_len[b], name,
                     "kv_len of request " << b << " is " << len(b) << " but the plan has " << plan.kv_len[b]
                                          << " (call plan() again)");
  }
  // run(PageTable): its checks, then launch (programmatic: decode::LaunchArgs::programmatic).
  void run_paged(const TensorView& q, const PagedKVCache& cache, const PageTable& table, const TensorView& out,
                 const TensorView* lse, cudaStream_t stream, bool programmatic);
  // programmatic: the balanced kernel's launch only (a work plan sets its own; run-time compiled
  // kernels launch as before).
  void launch(const TensorView& q, const PagedKVCache& cache, const PageTable* table, const BlockTable* blocks,
              const TensorView& out, const TensorView* lse, cudaStream_t stream, bool programmatic = false);
};

}  // namespace weft
