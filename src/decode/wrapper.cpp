// BatchDecodeWrapper: construction, workspace sizing, run (validated launch, graph safe);
// the plan() forms are in wrapper_plan.cpp, the shared state in wrapper_impl.h.
#include <cstring>

#include "decode/wrapper_access.h"
#include "decode/wrapper_impl.h"

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

// Stages and warps of a wrapper: the options' values (validated, with the other tuning knobs,
// before any CUDA call), or the tuned defaults.
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
  WEFT_CHECK_ARG(o.prefix_wide_min_rows >= 0, "options.prefix_wide_min_rows",
                 "must be >= 0 (0: the measured default), got " << o.prefix_wide_min_rows);
  WEFT_CHECK_ARG(o.prefix_wide_min_keys >= 0, "options.prefix_wide_min_keys",
                 "must be >= 0 (0: the measured default), got " << o.prefix_wide_min_keys);
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


std::size_t BatchDecodeWrapper::workspace_size(int32_t max_batch, int32_t num_qo_heads, int32_t num_kv_heads,
                                               int32_t head_dim) {
  return workspace_size(max_batch, num_qo_heads, num_kv_heads, head_dim, DecodeOptions{});
}

namespace {
// Default options with one kernel path (the path-only constructor).
DecodeOptions options_with_path(DecodePath path) {
  DecodeOptions o;
  o.path = path;
  return o;
}
// Bounds of the prefix-sharing work plans of a wrapper (DecodeOptions::max_pack_items).
plan::WorkPlanBounds share_bounds(int32_t max_batch, int32_t num_kv_heads, int32_t head_dim, int32_t grid,
                                  const DecodeOptions& o) {
  WEFT_CHECK_ARG(o.max_pack_items >= 0, "options.max_pack_items", "must be >= 0, got " << o.max_pack_items);
  plan::WorkPlanBounds b;
  b.max_batch = max_batch;
  b.max_items = o.max_pack_items > 0 ? o.max_pack_items : 4 * max_batch * num_kv_heads + 2 * grid;
  b.max_merges = max_batch * num_kv_heads;
  b.max_slots = b.max_items;
  b.num_ctas = grid;
  b.tile_rows = decode::pack_tile_rows(head_dim);
  // A merge (request, KV head) reads one source per item holding that request, and an item holds
  // at most tile_rows requests: sources <= items x tile_rows. (items was not a bound: a long root
  // cut into many chunks (PackPlanConfig::auto_chunk_min) gives each sharer's merge one source per
  // chunk; 16 requests on a 4096-key root, heads 32x8: 2048 sources from 368 items, which the
  // H100 run at 1568472 refused in DecodeSmall.SharePrefixesLongRootFewPacks.) 8 bytes each.
  b.max_sources = b.max_items * b.tile_rows;
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
// kAuto with share_prefixes: the balanced plan of steps whose rows share no pages runs in a second
// wrapper with this wrapper's kernel settings (Impl::twin).
DecodeOptions twin_options(const DecodeOptions& o) {
  DecodeOptions t;
  t.path = o.path;
  t.warps_per_cta = o.warps_per_cta;
  t.pipeline_stages = o.pipeline_stages;
  return t;
}
bool has_twin(const DecodeOptions& o) { return o.route == DecodeRoute::kAuto && o.share_prefixes; }
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
  // share_prefixes: the work plan's layout, or the balanced plan's (DecodeOptions::prefix_fallback).
  std::size_t bytes = balanced_bytes(max_batch, num_qo_heads, num_kv_heads, head_dim, grid);
  if (options.share_prefixes)
    bytes = std::max(bytes, plan::WorkPlanLayout(share_bounds(max_batch, num_kv_heads, head_dim, grid, options)).total_bytes());
  if (options.route == DecodeRoute::kBalanced) return bytes;
  const std::size_t with_wq =
      align256(bytes) + decode::WorkQueueDecode::workspace_size(max_batch, num_kv_heads, head_dim,
                                                                resolved_max_tasks(max_batch, num_kv_heads, options));
  if (!has_twin(options)) return with_wq;
  // kAuto with share_prefixes: the balanced twin's region after the work queue's.
  return align256(with_wq) + workspace_size(max_batch, num_qo_heads, num_kv_heads, head_dim, twin_options(options));
}

BatchDecodeWrapper::BatchDecodeWrapper(int32_t max_batch, int32_t num_qo_heads, int32_t num_kv_heads,
                                       int32_t head_dim, DecodePath path)
    : BatchDecodeWrapper(max_batch, num_qo_heads, num_kv_heads, head_dim, options_with_path(path)) {}

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
  impl_->balanced_tile_rows = impl_->tile_rows;
  impl_->head_fold = decode::decode_head_fold(num_kv_heads, impl_->grid);
  impl_->layout = plan::WorkspaceLayout(decode::plan_bounds(max_batch, num_qo_heads, num_kv_heads, head_dim,
                                                            impl_->grid, impl_->tile_rows, impl_->head_fold));
  impl_->copy_bytes = std::min(impl_->layout.total_bytes(),
                               std::max(impl_->layout.metadata_bytes(), heuristics::kMinPlanCopyBytes));
  std::size_t staging_bytes = impl_->copy_bytes;
  if (options.share_prefixes) {
    WEFT_CHECK_ARG(num_qo_heads / num_kv_heads <= decode::kPlanTileQ && path != DecodePath::kCudaCore,
                   "options.share_prefixes",
                   "needs the tensor-core path and a GQA group <= " << decode::kPlanTileQ);
    impl_->share = true;
    impl_->prefix_fallback = options.prefix_fallback;
    impl_->prefix_cost_model = options.prefix_cost_model;
    impl_->tile_rows = decode::pack_tile_rows(head_dim);
    impl_->wlayout = plan::WorkPlanLayout(share_bounds(max_batch, num_kv_heads, head_dim, impl_->grid, options));
    staging_bytes = std::max(staging_bytes, impl_->wlayout.metadata_bytes());
    decode::prepare_decode_work_plan(head_dim);
    impl_->wide_packs = options.prefix_wide_packs && head_dim == decode::kWidePackHeadDim;
    impl_->wide_min_rows =
        options.prefix_wide_min_rows > 0 ? options.prefix_wide_min_rows : heuristics::kPackWideMinRows;
    impl_->wide_min_keys =
        options.prefix_wide_min_keys > 0 ? options.prefix_wide_min_keys : heuristics::kPackWideMinKeys;
    impl_->wide_overlap = options.prefix_wide_overlap;
    if (impl_->wide_packs) decode::prepare_decode_wide_packs();
    impl_->wide_sm90_ok = impl_->wide_packs && options.prefix_wide_sm90 && decode::wide_sm90_device();
    if (impl_->wide_sm90_ok) decode::prepare_decode_wide_sm90();
    if (impl_->wide_sm90_ok && options.prefix_wide_sm90_wave) impl_->wide_wave_ctas = current_device().sms;
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
    im.wq_offset = align256(std::max(options.share_prefixes ? im.wlayout.total_bytes() : 0,
                                     balanced_bytes(max_batch, num_qo_heads, num_kv_heads, head_dim, im.grid)));
    if (has_twin(options)) {  // the balanced plan of unshared steps, its region after the work queue's
      im.twin_offset = align256(im.wq_offset + decode::WorkQueueDecode::workspace_size(max_batch, num_kv_heads,
                                                                                      head_dim, im.max_tasks));
      im.twin = std::make_unique<BatchDecodeWrapper>(max_batch, num_qo_heads, num_kv_heads, head_dim,
                                                     twin_options(options));
    }
  }
  const int32_t slots = heuristics::plan_staging_slots(staging_bytes);
  impl_->staging.allocate(staging_bytes, slots);  // zeroed: the copy's tail past the metadata stays zero
  impl_->staging_images.assign(std::size_t(slots), plan::WorkspaceLayout::Image{});
}

BatchDecodeWrapper::~BatchDecodeWrapper() = default;  // the staging ring waits for its copies

int32_t BatchDecodeWrapper::num_ctas() const { return impl_->grid; }


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
  impl_->run_paged(q, cache, table, out, lse, stream, /*programmatic=*/false);
}

void detail::DecodeWrapperAccess::run_after_trigger(BatchDecodeWrapper& w, const TensorView& q,
                                                    const PagedKVCache& cache, const PageTable& table,
                                                    const TensorView& out, const TensorView* lse,
                                                    cudaStream_t stream) {
  w.impl_->run_paged(q, cache, table, out, lse, stream, /*programmatic=*/true);
}

void BatchDecodeWrapper::Impl::run_paged(const TensorView& q, const PagedKVCache& cache, const PageTable& table,
                                         const TensorView& out, const TensorView* lse, cudaStream_t stream,
                                         bool programmatic) {
  Impl& im = *this;
  WEFT_CHECK_ARG(!im.wq_planned && !im.twin_planned, "table",
                 "the current plan was made from a block table by the "
                     << (im.wq_planned ? "work queue" : "router's balanced route") << ": run it with run(BlockTable)");
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
  if ((im.work_plan_active() ? im.planned_items : im.plan_items) == 0 && !bound) return;
  im.launch(q, cache, &table, nullptr, out, lse, stream, programmatic);
}

void BatchDecodeWrapper::run(const TensorView& q, const PagedKVCache& cache, const BlockTable& table,
                             const TensorView& out, const TensorView* lse, cudaStream_t stream) {
  Impl& im = *impl_;
  if (im.wq_planned) {  // the work queue's checks (views, cache, lengths against its plan) and launch
    im.wq->run(q, cache, table, out, lse, stream);
    return;
  }
  if (im.twin_planned) {  // kAuto with share_prefixes, a step without shared pages: the balanced twin
    im.twin->run(q, cache, table, out, lse, stream);
    return;
  }
  im.check_run_views(q, out, lse);
  validate_paged_kv(cache, table);
  decode::check_cache(im.planned_shape(), cache);
  im.check_run_lengths(table.batch_size, "table.seq_lens", [&](int32_t b) { return kv_len_of(table, b); });
  // As above: an empty plan whose block table has no storage launches nothing. (seq_lens'
  // device copy is never read by a kernel: lengths come from the plan.)
  const bool bound = table.block_ids.device != nullptr;
  if ((im.work_plan_active() ? im.planned_items : im.plan_items) == 0 && !bound) return;
  im.launch(q, cache, nullptr, &table, out, lse, stream);
}

void BatchDecodeWrapper::Impl::launch(const TensorView& q, const PagedKVCache& cache, const PageTable* table,
                                      const BlockTable* blocks, const TensorView& out, const TensorView* lse,
                                      cudaStream_t stream, bool programmatic) {
  const bool bound = q.data != nullptr && out.data != nullptr && (lse == nullptr || lse->data != nullptr) &&
                     cache.k_pages.data != nullptr && cache.v_pages.data != nullptr;
  if ((work_plan_active() ? planned_items : plan_items) == 0 && !bound) return;

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
  a.tile_rows = work_plan_active() ? tile_rows : balanced_tile_rows;
  if (work_plan_active()) {
    if (wide_launch) {
      if (wide_sm90) {
        decode::LaunchArgs aw = a;  // one wave of the sm90 tile: the plan's wide grid
        if (wide_grid > 0) aw.grid = wide_grid;
        decode::launch_decode_wide_sm90(aw, wlayout.pointers(workspace), stream);
      } else
        decode::launch_decode_wide_packs(a, wlayout.pointers(workspace), stream);
      // Overlapped (DecodeOptions::prefix_wide_overlap, a plan that split the CTAs between the
      // kinds: WorkPlan::wide_split): the decode kernel may start while the wide kernel runs (it
      // triggers at its start) on the CTAs the plan left it. A serial plan cut for one wave of the
      // sm90 tile (wide_grid > 0: at most one wide CTA per SM, every one resident at once) launches
      // the decode kernel the same way: its CTAs take the SMs the wave leaves free (132 - 128 on
      // an H100 at 8 KV heads) and each SM as its wide CTA exits, instead of waiting for the last
      // wide CTA and the launch after it. Same bits: the decode items write their own slots.
      a.programmatic = wide_split || (wide_overlap && wide_sm90 && wide_grid > 0);
    }
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
  a.programmatic = programmatic;
  decode::launch_decode(a, stream);
  // No merge kernel: split tiles are merged inside the decode kernel by the CTA that finishes
  // their last slot (merge_tile_if_last), so run() is one launch whatever the plan.
}

}  // namespace weft
