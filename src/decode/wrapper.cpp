// BatchDecodeWrapper: plan (host, balanced split-KV) and run (validated launch, graph safe).
#include <algorithm>
#include <memory>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "attention/heuristics.h"
#include "attention/plan/balance.h"
#include "attention/plan/cascade_forest.h"
#include "attention/plan/pack_planner.h"
#include "attention/plan/prefix_forest.h"
#include "attention/plan/work_plan.h"
#include "attention/variant_host.h"
#include "common/cuda_check.h"
#include "decode/decode_plan.h"
#include "decode/jit_launch.h"
#include "decode/launch.h"
#include "decode/router.h"
#include "decode/run_checks.h"
#include "decode/work_queue_decode.h"
#include "paged/block_table.h"
#include "weft/decode.h"
#include "weft/fp8.h"
#include "weft/validate.h"

namespace weft {

namespace {

// The kernel path under kAuto, the default stages and warps and the grid size are heuristics
// with measured reasons: src/attention/heuristics.cpp.

struct DeviceInfo {
  int device = 0;
  int sms = 0;
};
DeviceInfo current_device() {
  DeviceInfo d;
  WEFT_CUDA_CHECK(cudaGetDevice(&d.device));
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, d.device));
  return d;
}

int32_t grid_for(int32_t head_dim, int32_t stages, int32_t warps) {
  check::head_dim_supported(head_dim, "head_dim");
  const DeviceInfo d = current_device();
  return heuristics::persistent_grid(d.sms, decode::ctas_per_sm(head_dim, stages, warps, d.device));
}

// Stages and warps of a wrapper: the options' values (validated), or the tuned defaults.
struct Tuning {
  int32_t stages = 0, warps = 0;
};
Tuning resolve_tuning(int32_t head_dim, const DecodeOptions& o) {
  WEFT_CHECK_ARG(o.warps_per_cta == 0 || (o.warps_per_cta >= 2 && o.warps_per_cta <= kDecodeMaxWarpsPerCta),
                 "options.warps_per_cta",
                 "must be 0 (default) or in [2, " << kDecodeMaxWarpsPerCta << "], got " << o.warps_per_cta);
  WEFT_CHECK_ARG(
      o.pipeline_stages == 0 || (o.pipeline_stages >= 2 && o.pipeline_stages <= kDecodeMaxPipelineStages),
      "options.pipeline_stages",
      "must be 0 (default) or in [2, " << kDecodeMaxPipelineStages << "], got " << o.pipeline_stages);
  Tuning t;
  t.stages = o.pipeline_stages != 0 ? o.pipeline_stages : decode::decode_stages(head_dim);
  t.warps = o.warps_per_cta != 0 ? o.warps_per_cta : decode::decode_warps(head_dim);
  return t;
}

}  // namespace

const char* decode_path_name(DecodePath p) {
  switch (p) {
    case DecodePath::kAuto: return "auto";
    case DecodePath::kCudaCore: return "cuda_core";
    case DecodePath::kTensorCore: return "tensor_core";
  }
  return "?";
}

bool decode_path_available(DecodePath p) {
  return p == DecodePath::kAuto || decode::path_compiled(p);
}

DecodePath choose_decode_path(int32_t group_size, int32_t head_dim, DType dtype) {
  (void)dtype;  // measured with bf16; fp16 runs the same instructions
  return heuristics::decode_prefers_cuda_cores(group_size, head_dim) ? DecodePath::kCudaCore
                                                                     : DecodePath::kTensorCore;
}

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
  void* staging = nullptr;        // pinned, layout.metadata_bytes()
  cudaEvent_t staging_done = nullptr;
  bool staging_pending = false;

  // The current plan.
  bool planned = false;
  plan::Plan plan;
  // Planning scratch kept between plan() calls (a warm plan() allocates nothing): the planner's
  // buffers, the shape, the next plan (swapped with `plan` once it is in the staging buffer, so a
  // plan() that throws leaves the current plan intact), and what the staging buffer holds (the next
  // serialize clears only the previous plan's excess instead of the whole region).
  plan::Planner planner;
  plan::BatchShape shape;
  plan::Plan next;
  plan::WorkspaceLayout::Image staging_image;
  // DecodeOptions::share_prefixes: plans are work plans with packs (attention/plan/work_plan.h)
  // in their own layout; plan() passes the table it plans from (plan_lengths cannot share).
  bool share = false;
  plan::WorkPlanLayout wlayout;
  const PageTable* share_table = nullptr;
  plan::PackPlanner packer;            // keeps the last plan for lazy updates
  const std::vector<CascadeLevel>* cascade = nullptr;  // plan_cascade()'s levels, during the call
  void* share_image_ws = nullptr;      // workspace whose metadata holds packer's plan (else null)
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

  // DecodeOptions::route other than kBalanced: the work queue (its workspace after the balanced
  // plan's, at wq_offset), the router table of kAuto, and whether the current plan is the work
  // queue's (run() then launches its 1-D grid).
  DecodeRoute route = DecodeRoute::kBalanced;
  int32_t wq_chunk = 0;
  int32_t max_tasks = 0;
  std::size_t wq_offset = 0;
  std::unique_ptr<decode::WorkQueueDecode> wq;
  decode::RouterModel router;
  bool wq_planned = false;
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
  void launch(const TensorView& q, const PagedKVCache& cache, const PageTable* table, const BlockTable* blocks,
              const TensorView& out, const TensorView* lse, cudaStream_t stream);
};

std::size_t BatchDecodeWrapper::workspace_size(int32_t max_batch, int32_t num_qo_heads, int32_t num_kv_heads,
                                               int32_t head_dim) {
  return workspace_size(max_batch, num_qo_heads, num_kv_heads, head_dim, DecodeOptions{});
}

namespace {
// Bounds of the prefix-sharing work plans of a wrapper (DecodeOptions::max_pack_items).
plan::WorkPlanBounds share_bounds(int32_t max_batch, int32_t num_kv_heads, int32_t head_dim, int32_t grid,
                                  const DecodeOptions& o) {
  WEFT_CHECK_ARG(o.max_pack_items >= 0, "options.max_pack_items", "must be >= 0, got " << o.max_pack_items);
  plan::WorkPlanBounds b;
  b.max_batch = max_batch;
  b.max_items = o.max_pack_items > 0 ? o.max_pack_items : 4 * max_batch * num_kv_heads + 2 * grid;
  b.max_merges = max_batch * num_kv_heads;
  b.max_sources = b.max_items;
  b.max_slots = b.max_items;
  b.num_ctas = grid;
  b.tile_rows = decode::pack_tile_rows(head_dim);
  b.head_dim = head_dim;
  return b;
}
// Bytes of the balanced plans' workspace. Either item height may be planned (a forced CUDA-core
// path keeps 16 rows): size for both.
std::size_t balanced_bytes(int32_t max_batch, int32_t num_qo_heads, int32_t num_kv_heads, int32_t head_dim,
                           int32_t grid) {
  std::size_t bytes = 0;
  for (bool cuda_core : {false, true}) {
    const int32_t rows = decode::decode_tile_rows(num_qo_heads / std::max(1, num_kv_heads), head_dim, cuda_core);
    const plan::PlanBounds b = decode::plan_bounds(max_batch, num_qo_heads, num_kv_heads, head_dim, grid, rows,
                                                   decode::decode_head_fold(num_kv_heads, grid));
    bytes = std::max(bytes, plan::WorkspaceLayout(b).total_bytes());
  }
  return bytes;
}
std::size_t align256(std::size_t x) { return (x + 255) / 256 * 256; }
// DecodeOptions::max_tasks (0: 8 tasks per (request, KV head) plus 1024, enough for 8 splits of
// every row or a few rows of 100K+ keys at 2048-key splits).
int32_t resolved_max_tasks(int32_t max_batch, int32_t num_kv_heads, const DecodeOptions& o) {
  WEFT_CHECK_ARG(o.max_tasks >= 0, "options.max_tasks", "must be >= 0, got " << o.max_tasks);
  return o.max_tasks > 0 ? o.max_tasks : 8 * std::max(1, max_batch) * std::max(1, num_kv_heads) + 1024;
}
}  // namespace

const char* decode_route_name(DecodeRoute r) {
  switch (r) {
    case DecodeRoute::kBalanced: return "balanced";
    case DecodeRoute::kWorkQueue: return "work_queue";
    case DecodeRoute::kNoSplit: return "no_split";
    case DecodeRoute::kAuto: return "auto";
  }
  return "?";
}

std::size_t BatchDecodeWrapper::workspace_size(int32_t max_batch, int32_t num_qo_heads, int32_t num_kv_heads,
                                               int32_t head_dim, const DecodeOptions& options) {
  check::head_dim_supported(head_dim, "head_dim");
  const Tuning t = resolve_tuning(head_dim, options);
  const int32_t grid = grid_for(head_dim, t.stages, t.warps);
  const std::size_t bytes =
      options.share_prefixes
          ? plan::WorkPlanLayout(share_bounds(max_batch, num_kv_heads, head_dim, grid, options)).total_bytes()
          : balanced_bytes(max_batch, num_qo_heads, num_kv_heads, head_dim, grid);
  if (options.route == DecodeRoute::kBalanced) return bytes;
  return align256(bytes) + decode::WorkQueueDecode::workspace_size(
                               max_batch, num_kv_heads, head_dim, resolved_max_tasks(max_batch, num_kv_heads, options));
}

BatchDecodeWrapper::BatchDecodeWrapper(int32_t max_batch, int32_t num_qo_heads, int32_t num_kv_heads,
                                       int32_t head_dim, DecodePath path)
    : BatchDecodeWrapper(max_batch, num_qo_heads, num_kv_heads, head_dim, DecodeOptions{path}) {}

BatchDecodeWrapper::BatchDecodeWrapper(int32_t max_batch, int32_t num_qo_heads, int32_t num_kv_heads,
                                       int32_t head_dim, const DecodeOptions& options)
    : impl_(new Impl()) {
  const DecodePath path = options.path;
  impl_->max_batch = max_batch;
  impl_->num_qo_heads = num_qo_heads;
  impl_->num_kv_heads = num_kv_heads;
  impl_->head_dim = head_dim;
  impl_->forced = path;
  WEFT_CHECK_ARG(decode_path_available(path), "path",
                 "decode path " << decode_path_name(path) << " is not compiled in this build");
  check::head_dim_supported(head_dim, "head_dim");
  const Tuning t = resolve_tuning(head_dim, options);
  impl_->stages = t.stages;
  impl_->warps = t.warps;
  impl_->grid = grid_for(head_dim, impl_->stages, impl_->warps);
  impl_->tile_rows = decode::decode_tile_rows(num_qo_heads / std::max(1, num_kv_heads), head_dim,
                                              path == DecodePath::kCudaCore);
  impl_->head_fold = decode::decode_head_fold(num_kv_heads, impl_->grid);
  impl_->layout = plan::WorkspaceLayout(decode::plan_bounds(max_batch, num_qo_heads, num_kv_heads, head_dim,
                                                            impl_->grid, impl_->tile_rows, impl_->head_fold));
  std::size_t staging_bytes = impl_->layout.metadata_bytes();
  if (options.share_prefixes) {
    WEFT_CHECK_ARG(num_qo_heads / num_kv_heads <= decode::kPlanTileQ && path != DecodePath::kCudaCore,
                   "options.share_prefixes",
                   "needs the tensor-core path and a GQA group <= " << decode::kPlanTileQ);
    impl_->share = true;
    impl_->tile_rows = decode::pack_tile_rows(head_dim);
    impl_->wlayout = plan::WorkPlanLayout(share_bounds(max_batch, num_kv_heads, head_dim, impl_->grid, options));
    staging_bytes = impl_->wlayout.metadata_bytes();
    decode::prepare_decode_work_plan(head_dim);
  }
  if (options.route != DecodeRoute::kBalanced) {
    Impl& im = *impl_;
    const int32_t r = static_cast<int32_t>(options.route);
    WEFT_CHECK_ARG(r >= 0 && r <= static_cast<int32_t>(DecodeRoute::kAuto), "options.route", "unknown route " << r);
    WEFT_CHECK_ARG(!options.share_prefixes || options.route == DecodeRoute::kAuto, "options.route",
                   decode_route_name(options.route) << " does not combine with share_prefixes (kAuto does)");
    WEFT_CHECK_ARG(path != DecodePath::kCudaCore, "options.route",
                   decode_route_name(options.route) << " runs the tensor-core path: do not force kCudaCore");
    WEFT_CHECK_ARG(options.work_queue_chunk >= 0 && options.work_queue_chunk % decode::kPlanKVTile == 0,
                   "options.work_queue_chunk",
                   "must be 0 or a positive multiple of " << decode::kPlanKVTile << ", got " << options.work_queue_chunk);
    im.route = options.route;
    im.wq_chunk = options.work_queue_chunk > 0 ? options.work_queue_chunk : 2048;
    im.max_tasks = resolved_max_tasks(max_batch, num_kv_heads, options);
    if (options.route == DecodeRoute::kAuto) {
      try {
        im.router = decode::RouterModel::from_json(options.router_table);
      } catch (const Error& e) {
        throw Error("options.router_table", e.what());
      }
      WEFT_CHECK_ARG(im.router.num_kv_heads == num_kv_heads && im.router.group_size * num_kv_heads == num_qo_heads &&
                         im.router.head_dim == head_dim,
                     "options.router_table",
                     "calibrated for " << im.router.num_kv_heads << " KV heads, group " << im.router.group_size
                                       << ", head_dim " << im.router.head_dim << "; this wrapper has " << num_kv_heads
                                       << ", " << num_qo_heads / num_kv_heads << ", " << head_dim);
      for (const decode::RouteOption& o : im.router.options)
        WEFT_CHECK_ARG(o.route != decode::Route::kWorkQueue || (o.chunk > 0 && o.chunk % decode::kPlanKVTile == 0),
                       "options.router_table", "option " << o.name << ": chunk must be a positive multiple of 16");
    }
    im.wq = std::make_unique<decode::WorkQueueDecode>(max_batch, num_qo_heads, num_kv_heads, head_dim, im.max_tasks);
    // The work queue's region follows the balanced (or prefix-sharing) plan's (workspace_size).
    im.wq_offset = align256(options.share_prefixes
                                ? im.wlayout.total_bytes()
                                : balanced_bytes(max_batch, num_qo_heads, num_kv_heads, head_dim, im.grid));
  }
  WEFT_CUDA_CHECK(cudaHostAlloc(&impl_->staging, staging_bytes, cudaHostAllocDefault));
  WEFT_CUDA_CHECK(cudaEventCreateWithFlags(&impl_->staging_done, cudaEventDisableTiming));
}

BatchDecodeWrapper::~BatchDecodeWrapper() {
  if (!impl_) return;
  if (impl_->staging_done) {
    cudaEventSynchronize(impl_->staging_done);
    cudaEventDestroy(impl_->staging_done);
  }
  if (impl_->staging) cudaFreeHost(impl_->staging);
}

int32_t BatchDecodeWrapper::num_ctas() const { return impl_->grid; }

void BatchDecodeWrapper::plan(const PageTable& table, int32_t num_qo_heads, int32_t num_kv_heads,
                              int32_t head_dim, int32_t page_size, DType dtype, KVLayout layout,
                              const AttentionVariant& variant, void* workspace, std::size_t workspace_bytes,
                              cudaStream_t stream) {
  WEFT_CHECK_ARG(table.batch_size >= 0, "table.batch_size", "must be >= 0, got " << table.batch_size);
  WEFT_CHECK_ARG(page_size >= 1, "page_size", "must be >= 1, got " << page_size);
  // An empty step (batch 0, a serving loop with no decodes) has size-0 arrays that may be null;
  // its indptr may also be {0}. Host mirrors are required only where there are entries to read.
  check::indptr_size(table.indptr.size, table.batch_size, "table.indptr");
  if (table.indptr.size > 0) check::not_null(table.indptr.host, "table.indptr.host");
  if (table.batch_size > 0) check::not_null(table.last_page_len.host, "table.last_page_len.host");
  WEFT_CHECK_ARG(table.last_page_len.size == table.batch_size, "table.last_page_len",
                 "expected " << table.batch_size << " entries, got " << table.last_page_len.size);
  check::indptr(table.indptr.size > 0 ? table.indptr.host : nullptr, table.batch_size, "table.indptr");
  std::vector<int32_t>& lens = impl_->table_lens;  // reused: no allocation per step when warm
  lens.resize(table.batch_size);
  for (int32_t b = 0; b < table.batch_size; ++b) {
    const int32_t pages = table.indptr.host[b + 1] - table.indptr.host[b];
    const int32_t last = table.last_page_len.host[b];
    WEFT_CHECK_ARG(pages == 0 ? last == 0 : (last >= 1 && last <= page_size),
                   "table.last_page_len", "entry " << b << " is " << last << " for a request with " << pages
                                                   << " pages (page_size " << page_size << ")");
    const int64_t len = kv_len_of(table, page_size, b);
    WEFT_CHECK_ARG(len <= INT32_MAX, "table.indptr", "request " << b << " too long: " << len);
    lens[b] = static_cast<int32_t>(len);
  }
  impl_->share_table = &table;
  struct Clear {
    const PageTable*& t;
    ~Clear() { t = nullptr; }
  } clear{impl_->share_table};
  plan_lengths(lens.data(), table.batch_size, num_qo_heads, num_kv_heads, head_dim, page_size, dtype, layout,
               variant, workspace, workspace_bytes, stream);
}

void BatchDecodeWrapper::plan(const BlockTable& table, int32_t num_qo_heads, int32_t num_kv_heads,
                              int32_t head_dim, int32_t page_size, DType dtype, KVLayout layout,
                              const AttentionVariant& variant, void* workspace, std::size_t workspace_bytes,
                              cudaStream_t stream) {
  // Lengths, rows and stride (ids are range-checked by run(), which knows the cache).
  paged::check_block_table_rows(table, page_size, -1);
  Impl& im = *impl_;
  if (im.route != DecodeRoute::kBalanced) {
    int32_t chunk = -1;  // -1: the balanced plan
    if (im.route == DecodeRoute::kWorkQueue) {
      chunk = im.wq_chunk;
    } else if (im.route == DecodeRoute::kNoSplit) {
      chunk = 0;
    } else {  // kAuto: the table's cheapest option this wrapper can run
      // With share_prefixes the persistent candidate is the prefix-sharing plan (its shared keys
      // estimated from the rows' leading page ids), else the balanced plan.
      decode::RouteFilter filter;
      filter.balanced = !im.share;
      filter.prefix_share = im.share;
      filter.max_tasks = im.max_tasks;
      const int64_t shared =
          im.share ? decode::shared_prefix_keys(table.block_ids.host, table.row_stride, table.seq_lens.host,
                                                table.batch_size, page_size)
                   : 0;
      const decode::StepSummary step{table.seq_lens.host, table.batch_size, shared};
      const int32_t pick = decode::choose_route(im.router, step, filter);
      const decode::Route r = pick >= 0 ? im.router.options[pick].route : decode::Route::kBalanced;
      if (r == decode::Route::kWorkQueue || r == decode::Route::kNoSplit)
        chunk = r == decode::Route::kNoSplit ? 0 : im.router.options[pick].chunk;
    }
    if (chunk >= 0) {
      im.plan_work_queue(info_, table, chunk, num_qo_heads, num_kv_heads, head_dim, page_size, dtype, layout, variant,
                         workspace, workspace_bytes, stream);
      return;
    }
  }
  if (!im.share) {
    plan_lengths(table.seq_lens.host, table.batch_size, num_qo_heads, num_kv_heads, head_dim, page_size, dtype,
                 layout, variant, workspace, workspace_bytes, stream);
    return;
  }
  // Prefix sharing: the forest and the pack plan see row b's ids at offset b * row_stride.
  const int32_t batch = table.batch_size;
  im.row_offsets.resize(size_t(batch) + 1);
  for (int32_t b = 0; b <= batch; ++b)
    im.row_offsets[b] = b < batch ? static_cast<int32_t>(b * table.row_stride)
                                  : static_cast<int32_t>(batch == 0 ? 0 : (batch - 1) * table.row_stride + table.max_blocks);
  im.rows_view.batch_size = batch;
  im.rows_view.indptr = {nullptr, im.row_offsets.data(), int64_t(batch) + 1};
  im.rows_view.indices = {table.block_ids.device, table.block_ids.host, table.block_ids.size};
  im.share_table = &im.rows_view;
  struct Clear {
    const PageTable*& t;
    ~Clear() { t = nullptr; }
  } clear{im.share_table};
  plan_lengths(table.seq_lens.host, batch, num_qo_heads, num_kv_heads, head_dim, page_size, dtype, layout, variant,
               workspace, workspace_bytes, stream);
}

void BatchDecodeWrapper::plan_cascade(const PageTable& table, const std::vector<CascadeLevel>& levels,
                                      int32_t num_qo_heads, int32_t num_kv_heads, int32_t head_dim, int32_t page_size,
                                      DType dtype, KVLayout layout, const AttentionVariant& variant, void* workspace,
                                      std::size_t workspace_bytes, cudaStream_t stream) {
  WEFT_CHECK_ARG(impl_->share, "options.share_prefixes",
                 "plan_cascade needs a wrapper built with DecodeOptions::share_prefixes");
  impl_->cascade = &levels;
  struct Clear {
    const std::vector<CascadeLevel>*& l;
    ~Clear() { l = nullptr; }
  } clear{impl_->cascade};
  plan(table, num_qo_heads, num_kv_heads, head_dim, page_size, dtype, layout, variant, workspace, workspace_bytes,
       stream);
}

void BatchDecodeWrapper::plan_lengths(const int32_t* kv_lens, int32_t batch, int32_t num_qo_heads,
                                      int32_t num_kv_heads, int32_t head_dim, int32_t page_size, DType dtype,
                                      KVLayout layout, const AttentionVariant& variant, void* workspace,
                                      std::size_t workspace_bytes, cudaStream_t stream) {
  Impl& im = *impl_;
  WEFT_CHECK_ARG(im.route == DecodeRoute::kBalanced || im.route == DecodeRoute::kAuto, "options.route",
                 decode_route_name(im.route) << " plans from a block table: call plan(BlockTable)");
  WEFT_CHECK_ARG(batch >= 0 && batch <= im.max_batch, "batch",
                 "must be in [0, max_batch = " << im.max_batch << "], got " << batch);
  WEFT_CHECK_ARG(num_qo_heads == im.num_qo_heads, "num_qo_heads",
                 "wrapper was built for " << im.num_qo_heads << ", got " << num_qo_heads);
  WEFT_CHECK_ARG(num_kv_heads == im.num_kv_heads, "num_kv_heads",
                 "wrapper was built for " << im.num_kv_heads << ", got " << num_kv_heads);
  WEFT_CHECK_ARG(head_dim == im.head_dim, "head_dim", "wrapper was built for " << im.head_dim << ", got " << head_dim);
  WEFT_CHECK_ARG(page_size >= 1, "page_size", "must be >= 1, got " << page_size);
  WEFT_CHECK_ARG(dtype == DType::kFloat16 || dtype == DType::kBFloat16, "dtype",
                 "expected f16 or bf16, got " << dtype_name(dtype));
  WEFT_CHECK_ARG(layout == KVLayout::kNHD || layout == KVLayout::kHND, "layout", "unknown KV layout");
  WEFT_CHECK_ARG(variant.mask != MaskMode::kCustom, "variant.mask", "custom masks are not supported by decode");
  WEFT_CHECK_ARG(variant.sm_scale >= 0 && std::isfinite(variant.sm_scale), "variant.sm_scale",
                 "must be finite and >= 0, got " << variant.sm_scale);
  WEFT_CHECK_ARG(std::isfinite(variant.logits_soft_cap), "variant.logits_soft_cap", "must be finite");
  WEFT_CHECK_ARG(variant.window_left >= -1, "variant.window_left", "must be >= -1, got " << variant.window_left);
  // ALiBi slopes (null: off) are loaded as floats by the kernels: a misaligned pointer would fault
  // the launch (sticky error).
  check::aligned(variant.alibi_slopes, "variant.alibi_slopes", sizeof(float));
  check::workspace(workspace, workspace_bytes, im.share ? im.wlayout.total_bytes() : im.layout.total_bytes(),
                   "workspace");
  WEFT_CHECK_ARG(batch == 0 || kv_lens != nullptr, "kv_lens", "must not be null");
  jit_detail::check_jit_variant(variant);
  WEFT_CHECK_ARG(variant.jit == nullptr || !im.share, "variant.jit",
                 "prefix sharing (DecodeOptions::share_prefixes) does not run run-time compiled variants yet");
  if (im.share) {
    WEFT_CHECK_ARG(im.share_table != nullptr, "plan_lengths",
                   "prefix sharing (DecodeOptions::share_prefixes) plans from the page table: call plan()");
    WEFT_CHECK_ARG(variant.alibi_slopes == nullptr && variant.window_left < 0, "variant",
                   "prefix sharing supports neither ALiBi nor a sliding window yet");
  }

  for (int32_t b = 0; b < batch; ++b)
    WEFT_CHECK_ARG(kv_lens[b] >= 0, "kv_lens", "entry " << b << " is negative: " << kv_lens[b]);
  // Reuse the staging buffer only once its previous copy has left it: a host wait on the GPU
  // only when that copy is still queued (plan() called again before the stream reached it).
  auto staging_free = [&] {
    if (im.staging_pending) WEFT_CUDA_CHECK(cudaEventSynchronize(im.staging_done));
  };
  std::size_t copy_bytes = 0, copy_offset = 0;
  DecodePath path = DecodePath::kTensorCore;
  if (im.share) {
    // The prefix forest of the table, packs over its shared pages, the work plan copied into the
    // workspace; or, when only the private suffixes grew (PackPlanner's structural key), the
    // previous plan with new key ranges and page bases, of which only those arrays are copied.
    const PageTable& t = *im.share_table;
    int64_t keys = 0;
    for (int32_t b = 0; b < batch; ++b) keys += kv_lens[b];
    plan::PackPlanConfig pc;
    pc.num_ctas = im.grid;
    pc.num_kv_heads = num_kv_heads;
    pc.group_size = num_qo_heads / num_kv_heads;
    pc.tile_rows = im.tile_rows;  // decode::pack_tile_rows
    pc.page_size = page_size;
    pc.kv_granularity = decode::kPlanKVTile;
    pc.max_chunk = plan::pack_max_chunk(keys, num_kv_heads, im.grid, decode::kMinChunk, decode::kPlanKVTile);
    plan::set_pack_traffic(pc, head_dim, 2);  // the profit model: 16-bit KV (fp8 pools are refused with sharing)
    bool lazy = false;
    if (im.cascade != nullptr) {  // plan_cascade: the stated levels' forest, planned fully
      std::vector<plan::CascadeLevelSpec> specs;
      for (const CascadeLevel& lv : *im.cascade) {
        const int32_t groups = static_cast<int32_t>(lv.num_pages.size());
        WEFT_CHECK_ARG(lv.req_indptr.size() == lv.num_pages.size() + 1, "levels",
                       "req_indptr needs num_pages.size() + 1 = " << groups + 1 << " entries, got "
                                                                  << lv.req_indptr.size());
        specs.push_back({lv.req_indptr.data(), lv.num_pages.data(), groups});
      }
      const plan::PrefixForest forest = plan::make_cascade_forest(
          specs.data(), static_cast<int32_t>(specs.size()), t.indptr.host, t.indices.host, kv_lens, batch, page_size);
      im.packer.plan_forest(forest, t.indptr.host, kv_lens, pc);
    } else {
      lazy = im.packer.plan(t.indptr.host, t.indices.host, kv_lens, batch, pc) == plan::PackPlanner::Update::kLazy &&
             im.share_image_ws == workspace;
    }
    const plan::WorkPlan& wp = im.packer.current();
    staging_free();
    im.share_image_ws = nullptr;  // until the copy below is queued
    if (lazy) {
      im.wlayout.serialize_item_kv(wp, im.staging);
      copy_offset = im.wlayout.item_kv_offset();
      copy_bytes = im.wlayout.item_kv_bytes();
    } else {
      im.wlayout.serialize(wp, im.staging);  // throws (naming "plan") when it exceeds max_pack_items
      copy_bytes = im.wlayout.metadata_bytes();
    }
    info_.lazy_update = lazy;
    im.plan.batch = batch;  // what run() validates against
    im.plan.kv_len.assign(kv_lens, kv_lens + batch);
    im.planned_items = wp.num_items();
    int32_t packs = 0;
    for (int32_t n : wp.item_num_reqs) packs += n >= 2;
    info_.num_items = wp.num_items();
    info_.num_merges = wp.num_merges();
    info_.num_packs = packs;
    info_.max_chunk = pc.max_chunk;
    info_.tile_rows = im.tile_rows;
    info_.split = wp.num_merges() > 0;
  } else {
    decode::batch_shape(kv_lens, batch, variant.window_left, im.shape);
    const plan::BatchShape& shape = im.shape;
    const int32_t rows =
        decode::plan_tile_rows(shape, num_kv_heads, num_qo_heads / num_kv_heads, im.grid, im.tile_rows);
    const plan::BalanceConfig cfg = decode::balance_config(im.grid, num_qo_heads, num_kv_heads, rows, im.head_fold);
    decode::plan_decode(shape, cfg, im.planner, im.next);
    staging_free();
    im.layout.serialize(im.next, im.staging, &im.staging_image);
    // The whole metadata region: its arrays sit at fixed offsets with max_items strides, so the
    // bytes a smaller plan uses are not contiguous (and the region also clears the previous plan's).
    copy_bytes = im.layout.metadata_bytes();
    std::swap(im.plan, im.next);
    path = im.forced == DecodePath::kAuto ? choose_decode_path(cfg.group_size, head_dim, dtype) : im.forced;
    // Counted per KV head as before head folding: the launch runs head_fold items per plan item.
    info_.num_items = im.plan.num_items() * im.head_fold;
    info_.num_merges = im.plan.num_merges() * im.head_fold;
    info_.max_chunk = im.plan.max_chunk;
    info_.tile_rows = im.plan.tile_q;
    info_.split = im.plan.split;
  }
  // A run-time compiled variant: its kernel (compiled, read from the cache or already loaded).
  jit_detail::PlanState jit;
  std::size_t jit_smem = 0;
  if (variant.jit != nullptr) {
    const jit_detail::KernelSpec spec =
        decode::jit_kernel_spec(path, im.tile_rows, num_qo_heads / num_kv_heads, head_dim, dtype);
    jit_smem = decode::jit_smem_bytes(spec, im.stages, im.warps);
    jit.kernel = variant.jit->impl().get_kernel(spec, jit_smem);
    jit.params.init(jit.kernel->layout, variant.jit_params, variant.jit->source().params_size);
  }
  WEFT_CUDA_CHECK(cudaMemcpyAsync(static_cast<unsigned char*>(workspace) + copy_offset,
                                  static_cast<const unsigned char*>(im.staging) + copy_offset, copy_bytes,
                                  cudaMemcpyHostToDevice, stream));
  WEFT_CUDA_CHECK(cudaEventRecord(im.staging_done, stream));
  im.staging_pending = true;
  if (im.share) im.share_image_ws = workspace;

  im.page_size = page_size;
  im.dtype = dtype;
  im.kv_layout = layout;
  im.variant = variant;
  im.workspace = workspace;
  im.path = path;
  im.jit = std::move(jit);
  im.jit_smem = jit_smem;
  im.planned = true;
  im.wq_planned = false;
  info_.batch = batch;
  info_.num_ctas = im.grid;
  info_.path = im.path;
  info_.route = static_cast<int32_t>(DecodeRoute::kBalanced);
  info_.route_chunk = 0;
}

void BatchDecodeWrapper::Impl::plan_work_queue(DecodePlanInfo& info, const BlockTable& table, int32_t chunk,
                                               int32_t hq, int32_t hkv, int32_t d, int32_t page_size, DType dtype,
                                               KVLayout kv, const AttentionVariant& var, void* ws,
                                               std::size_t ws_bytes, cudaStream_t stream) {
  WEFT_CHECK_ARG(hq == num_qo_heads, "num_qo_heads", "wrapper was built for " << num_qo_heads << ", got " << hq);
  WEFT_CHECK_ARG(hkv == num_kv_heads, "num_kv_heads", "wrapper was built for " << num_kv_heads << ", got " << hkv);
  WEFT_CHECK_ARG(d == head_dim, "head_dim", "wrapper was built for " << head_dim << ", got " << d);
  WEFT_CHECK_ARG(var.jit == nullptr, "variant.jit", "the work queue does not run run-time compiled variants yet");
  WEFT_CHECK_ARG(ws_bytes >= wq_offset, "workspace",
                 "needs BatchDecodeWrapper::workspace_size(..., options) bytes, got " << ws_bytes);
  check::not_null(ws, "workspace");
  // The work queue's own checks (lengths, variant, workspace, max_tasks) come before any copy.
  wq->plan(table, chunk, page_size, dtype, kv, var, static_cast<unsigned char*>(ws) + wq_offset, ws_bytes - wq_offset,
           stream);
  const plan::WorkPlan& wp = wq->work_plan();
  wq_planned = true;
  planned = true;
  info.batch = table.batch_size;
  info.num_ctas = wp.num_items();  // 1-D grid: one CTA per task
  info.num_items = wp.num_items();
  info.num_merges = wp.num_merges();
  info.max_chunk = chunk;
  info.tile_rows = decode::kPlanTileQ;
  info.num_packs = 0;
  info.lazy_update = false;
  info.split = wp.num_merges() > 0;
  info.path = DecodePath::kTensorCore;
  info.route = static_cast<int32_t>(chunk > 0 ? DecodeRoute::kWorkQueue : DecodeRoute::kNoSplit);
  info.route_chunk = chunk;
}

decode::PlannedShape BatchDecodeWrapper::Impl::planned_shape() const {
  decode::PlannedShape s;
  s.batch = plan.batch;
  s.num_qo_heads = num_qo_heads;
  s.num_kv_heads = num_kv_heads;
  s.head_dim = head_dim;
  s.page_size = page_size;
  s.dtype = dtype;
  s.layout = kv_layout;
  s.lse_required = variant.return_lse;
  return s;
}

void BatchDecodeWrapper::Impl::check_run_views(const TensorView& q, const TensorView& out,
                                               const TensorView* lse) const {
  WEFT_CHECK_ARG(planned, "plan", "run() called before plan()");
  decode::check_views(planned_shape(), q, out, lse);
  WEFT_CHECK_ARG(lse != nullptr || jit.kernel == nullptr || jit.kernel->softmax, "lse",
                 "the planned run-time compiled variant has kSoftmax = false: its output needs the LSE");
}

void BatchDecodeWrapper::Impl::check_run_fp8(const PagedKVCache& cache) const {
  // (validate_paged_kv ran: the scales are present for fp8 pools and absent otherwise;
  // decode::check_cache with fp8_ok checked the rest of the cache against the plan.)
  const DType kv_dtype = cache.k_pages.dtype;
  if (!is_fp8(kv_dtype)) return;
  // fp8 pools: Q and O keep the planned f16/bf16; the kernels of (q dtype, pool dtype,
  // head_dim, path) must be in the instance table (src/instances.txt).
  WEFT_CHECK_ARG(decode::kv_dtype_compiled(dtype, kv_dtype, head_dim, path_for(kv_dtype)), "cache.k_pages",
                 "no decode kernel for " << dtype_name(kv_dtype) << " pools with " << dtype_name(dtype)
                                         << " q, head_dim " << head_dim << " and path "
                                         << decode_path_name(path_for(kv_dtype))
                                         << " in this build");
  WEFT_CHECK_ARG(variant.alibi_slopes == nullptr, "variant.alibi_slopes",
                 "ALiBi is not supported with an fp8 KV cache yet");
  WEFT_CHECK_ARG(jit.kernel == nullptr, "variant.jit", "run-time compiled variants do not read fp8 KV caches yet");
  WEFT_CHECK_ARG(!share, "options.share_prefixes", "prefix sharing is not supported with an fp8 KV cache yet");
}

void BatchDecodeWrapper::run(const TensorView& q, const PagedKVCache& cache, const PageTable& table,
                             const TensorView& out, const TensorView* lse, cudaStream_t stream) {
  Impl& im = *impl_;
  WEFT_CHECK_ARG(!im.wq_planned, "table",
                 "the current plan is a work-queue plan over a block table: run it with run(BlockTable)");
  im.check_run_views(q, out, lse);
  validate_paged_kv(cache, table);
  decode::check_cache(im.planned_shape(), cache, /*fp8_ok=*/true);
  im.check_run_fp8(cache);
  im.check_run_lengths(table.batch_size, "table", [&](int32_t b) { return kv_len_of(table, im.page_size, b); });
  // A plan without items (batch 0) makes every CTA exit after reading its (empty) range from the
  // workspace: the kernel dereferences none of the pointers below, so it is launched whenever
  // they are all given. That keeps the CUDA-graph contract: a graph captured here replays
  // correctly after a plan() of any batch with the same buffers, and a graph captured at a
  // larger batch replays this plan as a no-op. With a null pointer (an empty step whose views
  // have no storage) nothing is launched: a graph captured around such a call must not later
  // dereference null after a re-plan; it replays nothing instead. (last_page_len's device copy is
  // never read by a kernel: lengths come from the plan.)
  const bool bound = table.indptr.device != nullptr && table.indices.device != nullptr;
  if ((im.share ? im.planned_items : im.plan.num_items()) == 0 && !bound) return;
  im.launch(q, cache, &table, nullptr, out, lse, stream);
}

void BatchDecodeWrapper::run(const TensorView& q, const PagedKVCache& cache, const BlockTable& table,
                             const TensorView& out, const TensorView* lse, cudaStream_t stream) {
  Impl& im = *impl_;
  if (im.wq_planned) {  // the work queue's checks (views, cache, lengths against its plan) and launch
    im.wq->run(q, cache, table, out, lse, stream);
    return;
  }
  im.check_run_views(q, out, lse);
  validate_paged_kv(cache, table);
  decode::check_cache(im.planned_shape(), cache);
  im.check_run_lengths(table.batch_size, "table.seq_lens", [&](int32_t b) { return kv_len_of(table, b); });
  // As above: an empty plan whose block table has no storage launches nothing. (seq_lens'
  // device copy is never read by a kernel: lengths come from the plan.)
  const bool bound = table.block_ids.device != nullptr;
  if ((im.share ? im.planned_items : im.plan.num_items()) == 0 && !bound) return;
  im.launch(q, cache, nullptr, &table, out, lse, stream);
}

void BatchDecodeWrapper::Impl::launch(const TensorView& q, const PagedKVCache& cache, const PageTable* table,
                                      const BlockTable* blocks, const TensorView& out, const TensorView* lse,
                                      cudaStream_t stream) {
  const bool bound = q.data != nullptr && out.data != nullptr && (lse == nullptr || lse->data != nullptr) &&
                     cache.k_pages.data != nullptr && cache.v_pages.data != nullptr;
  if ((share ? planned_items : plan.num_items()) == 0 && !bound) return;

  const plan::PlanPointers ptrs = layout.pointers(workspace);
  decode::LaunchArgs a;
  a.plan = ptrs;
  a.q = &q;
  a.out = &out;
  a.lse = lse;
  a.cache = &cache;
  a.table = table;
  a.blocks = blocks;
  a.group_size = num_qo_heads / num_kv_heads;
  a.var = attn::variant_params(variant, head_dim);
  a.dtype = dtype;
  a.kv_dtype = cache.k_pages.dtype;
  a.head_dim = head_dim;
  a.path = path_for(cache.k_pages.dtype);
  a.grid = grid;
  a.stages = stages;
  a.warps = warps;
  a.tile_rows = tile_rows;
  if (share) {
    decode::launch_decode_work_plan(a, wlayout.pointers(workspace), stream);
    return;
  }
  if (jit.kernel != nullptr) {
    decode::launch_decode_jit(a, *jit.kernel, jit.params, jit_smem, stream);
    if (!jit.kernel->softmax)  // O *= exp(LSE): the variant's unnormalized output
      jit_detail::launch_scale_by_lse(*jit.kernel, out.data, out.strides[0], out.strides[1],
                                      static_cast<const float*>(lse->data), lse->strides[0],
                                      static_cast<int32_t>(plan.batch), num_qo_heads, head_dim, stream);
    return;
  }
  decode::launch_decode(a, stream);
  // No merge kernel: split tiles are merged inside the decode kernel by the CTA that finishes
  // their last slot (merge_tile_if_last), so run() is one launch whatever the plan.
}

}  // namespace weft
