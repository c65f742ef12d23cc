// BatchDecodeWrapper::plan*: the page-table, block-table and cascade forms, the lengths-only
// core (balanced split-KV with head folding, or prefix-sharing work plans) and the work-queue
// route. Host only: validation, planning, one copy of the plan into the workspace.
#include "common/plan_phases.h"
#include "decode/wrapper_impl.h"

namespace weft {

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
  WEFT_PLAN_PHASE(kPhRows);
  Impl& im = *impl_;
  im.lens_checked = table.seq_lens.host;
  struct ClearChecked {
    const int32_t*& p;
    bool& prepared;
    ~ClearChecked() {
      p = nullptr;
      prepared = false;
    }
  } clear_checked{im.lens_checked, im.share_prepared};
  if (im.route != DecodeRoute::kBalanced) {
    int32_t chunk = -1;  // -1: the balanced plan
    if (im.route == DecodeRoute::kWorkQueue) {
      chunk = im.wq_chunk;
    } else if (im.route == DecodeRoute::kNoSplit) {
      chunk = 0;
    } else {  // kAuto: the table's cheapest option this wrapper can run
      // With share_prefixes the persistent candidate is the prefix-sharing plan where rows share
      // leading pages (its shared keys estimated from the rows' leading page ids) and the balanced
      // plan (the twin) where none do; without, the balanced plan.
      // The shared keys (decode::shared_prefix_keys' value) come from the pack planner's
      // prepare() over the rows view where it can: one walk over the ids serves the feature and,
      // where the pick is prefix_share, the pack plan below (its structural key, or its forest
      // where the previous step shared: an unshared table's forest costs more than the hash pass).
      int64_t shared = 0;
      if (im.share) {
        // (Row offsets past int32, which the rows view cannot hold: the hash pass alone.)
        const bool view_fits =
            table.batch_size == 0 || (int64_t(table.batch_size) - 1) * table.row_stride + table.max_blocks <= INT32_MAX;
        shared = -1;
        if (view_fits) {
          im.set_rows_view(table);
          shared = im.packer.prepare(im.row_offsets.data(), table.block_ids.host, table.seq_lens.host,
                                     table.batch_size, page_size, im.last_shared_keys > 0);
        }
        im.share_prepared = shared >= 0;
        if (shared < 0)
          shared = decode::shared_prefix_keys(table.block_ids.host, table.row_stride, table.seq_lens.host,
                                              table.batch_size, page_size);
        im.last_shared_keys = shared;
      }
      WEFT_PLAN_PHASE(kPhSharedKeys);
      decode::RouteFilter filter;
      filter.balanced = !im.share || shared <= 0;
      filter.prefix_share = im.share;
      filter.work_queue = decode::work_queue_runs_variant(variant);
      filter.max_tasks = im.max_tasks;
      const decode::StepSummary step{table.seq_lens.host, table.batch_size, shared};
      const int32_t pick = decode::choose_route(im.router, step, filter, &im.route_memo);
      WEFT_PLAN_PHASE(kPhRoute);
      const decode::Route r = pick >= 0                 ? im.router.options[pick].route
                              : im.share && shared > 0 ? decode::Route::kPrefixShare
                                                       : decode::Route::kBalanced;
      if (r == decode::Route::kWorkQueue || r == decode::Route::kNoSplit)
        chunk = r == decode::Route::kNoSplit ? 0 : im.router.options[pick].chunk;
      if (r == decode::Route::kBalanced && im.twin) {
        im.plan_twin(info_, table, num_qo_heads, num_kv_heads, head_dim, page_size, dtype, layout, variant, workspace,
                     workspace_bytes, stream);
        return;
      }
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
  // Prefix sharing: the forest and the pack plan see row b's ids at offset b * row_stride (the
  // view kAuto's decision already set).
  const int32_t batch = table.batch_size;
  if (!im.share_prepared) im.set_rows_view(table);
  im.share_table = &im.rows_view;
  struct Clear {
    const PageTable*& t;
    ~Clear() { t = nullptr; }
  } clear{im.share_table};
  WEFT_PLAN_PHASE(kPhRowsView);
  plan_lengths(table.seq_lens.host, batch, num_qo_heads, num_kv_heads, head_dim, page_size, dtype, layout, variant,
               workspace, workspace_bytes, stream);
}

void BatchDecodeWrapper::Impl::set_rows_view(const BlockTable& table) {
  const int32_t batch = table.batch_size;
  row_offsets.resize(size_t(batch) + 1);
  for (int32_t b = 0; b <= batch; ++b)
    row_offsets[b] = b < batch ? static_cast<int32_t>(b * table.row_stride)
                               : static_cast<int32_t>(batch == 0 ? 0 : (batch - 1) * table.row_stride + table.max_blocks);
  rows_view.batch_size = batch;
  rows_view.indptr = {nullptr, row_offsets.data(), int64_t(batch) + 1};
  rows_view.indices = {table.block_ids.device, table.block_ids.host, table.block_ids.size};
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
  check::workspace(workspace, workspace_bytes,
                   im.share ? std::max(im.wlayout.total_bytes(), im.layout.total_bytes()) : im.layout.total_bytes(),
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

  if (kv_lens != im.lens_checked)  // (plan(BlockTable) checked them with the rows)
    for (int32_t b = 0; b < batch; ++b)
      WEFT_CHECK_ARG(kv_lens[b] >= 0, "kv_lens", "entry " << b << " is negative: " << kv_lens[b]);
  WEFT_PLAN_PHASE(kPhChecks);
  // A staging slot whose previous copy has left it (StagingRing::acquire: the previous plan's slot
  // once its copy has landed, else another slot; a host wait on the GPU only when every slot's
  // copy is still queued).
  int32_t slot = -1;
  unsigned char* staging = nullptr;
  auto staging_free = [&](bool rotate) {
    slot = im.staging.acquire(rotate);
    staging = im.staging.slot(slot);
    WEFT_PLAN_PHASE(kPhAcquire);
  };
  std::size_t copy_bytes = 0, copy_offset = 0;
  DecodePath path = DecodePath::kTensorCore;
  bool balanced = !im.share, lazy = false;
  int32_t pack_chunk = 0;
  info_.prefix_fallback = false;
  if (im.share) {
    // The prefix forest of the table, packs over its shared pages, the work plan copied into the
    // workspace; or, when only the private suffixes grew (PackPlanner's structural key), the
    // previous plan with new key ranges and page bases, of which only those arrays are copied.
    const PageTable& t = *im.share_table;
    plan::PackPlanConfig pc;
    pc.num_ctas = im.grid;
    pc.num_kv_heads = num_kv_heads;
    pc.group_size = num_qo_heads / num_kv_heads;
    pc.tile_rows = im.tile_rows;  // decode::pack_tile_rows
    pc.page_size = page_size;
    pc.kv_granularity = decode::kPlanKVTile;
    // Chunks from the work after packing (each shared node's keys once per pack, plus the private
    // suffixes), keys per CTA as the balanced plan cuts, at least kMinChunk
    // (PackPlanConfig::auto_chunk_min): a long root shared by few packs is split over the grid.
    pc.auto_chunk_min = decode::kMinChunk;
    pc.head_fold = im.head_fold;  // plan one head class, replicated (PackPlanConfig::head_fold)
    plan::set_pack_traffic(pc, head_dim, 2);  // the profit model: 16-bit KV (fp8 pools are refused with sharing)
    // Wide packs (DecodeOptions::prefix_wide_packs): nodes of >= prefix_wide_min_rows rows
    // (heuristics::kPackWideMinRows) in 128-row items of the wide-pack kernel (the tile selector
    // plan::pack_item_requests).
    if (im.wide_packs && decode::wide_packs_compiled(head_dim, dtype)) {
      pc.wide_rows = decode::kWidePackRows;
      pc.wide_min_rows = im.wide_min_rows;
      pc.wide_min_keys = im.wide_min_keys;
      // Overlapped launch: the grid split between the two kinds where estimated faster
      // (PackPlanConfig::wide_overlap; WorkPlan::wide_split says whether it was).
      pc.wide_overlap = im.wide_overlap ? 1 : 0;
      pc.wide_key_cost = heuristics::kPackWideKeyCost;
      pc.wide_split_margin = heuristics::kPackWideSplitMargin;
      // Wide items cut from their own work (PackPlanConfig::max_slots): finer only while the
      // plan's partial slots fit the workspace's.
      pc.max_slots = im.wlayout.bounds().max_slots;
      // One wave of the sm90 tile where it would run these wide items (serial plans): cut and
      // dealt for the SM count (DecodeOptions::prefix_wide_sm90_wave); undone below when the
      // plan's rows cannot be loaded there.
      if (im.wide_wave_ctas > 0 && decode::wide_sm90_shape(pc.group_size, page_size, dtype)) {
        pc.wide_wave_ctas = im.wide_wave_ctas;
        pc.wide_item_keys = heuristics::kPackWideSm90ItemKeys;
      }
    }
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
      lazy = im.packer.plan(t.indptr.host, t.indices.host, kv_lens, batch, pc, im.share_prepared) ==
                 plan::PackPlanner::Update::kLazy &&
             im.share_image_ws == workspace;
    }
    // A full re-plan with the options changed below (the same forest for a cascade).
    const auto plan_again = [&] {
      if (im.cascade != nullptr) {
        im.packer.plan_forest(plan::PrefixForest(im.packer.forest()), t.indptr.host, kv_lens, pc);
      } else {
        im.packer.reset();
        im.packer.plan(t.indptr.host, t.indices.host, kv_lens, batch, pc);
      }
    };
    // A plan cut for the sm90 tile's wave whose wide rows that tile cannot load (they then run on
    // the FA2 tile): planned again over the decode grid.
    if (pc.wide_wave_ctas > 0 && im.packer.current().wide_grid > 0 &&
        !plan::wide_rows_loadable(im.packer.current(), pc.group_size, std::max(1, pc.head_fold),
                                  /*consecutive=*/pc.group_size < decode::kWideSm90GatherGroup)) {
      pc.wide_wave_ctas = 0;
      pc.wide_item_keys = 0;
      lazy = false;
      plan_again();
    }
    if (pc.wide_rows > 0 && im.packer.current().num_slots() > im.wlayout.bounds().max_slots) {
      // A wide item fills rows / 32 partial slots: a plan past the workspace's slots is planned
      // again without wide packs (the bounds were sized for 32-row packs).
      pc.wide_rows = 0;
      lazy = false;
      plan_again();
    }
    const plan::WorkPlan& wp = im.packer.current();
    pack_chunk = im.packer.max_chunk();
    WEFT_PLAN_PHASE(kPhPack);
    int32_t packs = 0;
    plan::for_folded_items(wp, std::max(1, pc.head_fold), [&](int32_t i) { packs += wp.item_num_reqs[i] >= 2; });
    packs *= pc.head_fold;  // the folded plan's copies (PackPlanConfig::head_fold)
    // No pack (DecodeOptions::prefix_fallback), or packs the cost model does not predict faster
    // than the standard decode plan (DecodeOptions::prefix_cost_model; heuristics::
    // prefix_share_pays, O(items / head_fold + forest nodes)): the standard decode plan and kernel
    // below. A lazy update keeps the previous full plan's choice (it was to share: a fallback
    // leaves no work-plan image to update), as it keeps its items and chunks.
    bool cost_fallback = false;
    if (im.prefix_fallback && im.prefix_cost_model && packs > 0 && !lazy) {
      const DecodePath fb_path =
          im.forced == DecodePath::kAuto ? choose_decode_path(pc.group_size, head_dim, dtype) : im.forced;
      const heuristics::PrefixShareCostInputs in =
          plan::share_cost_inputs(im.packer.forest(), wp, kv_lens, batch, page_size, std::max(1, pc.head_fold),
                                  pc.kv_bytes_per_key, fb_path == DecodePath::kCudaCore);
      info_.predicted_share_us = static_cast<float>(heuristics::predict_share_us(in));
      info_.predicted_decode_us = static_cast<float>(heuristics::predict_decode_us(in));
      cost_fallback = !heuristics::prefix_share_pays(in);
    } else if (!lazy) {
      info_.predicted_share_us = info_.predicted_decode_us = 0.f;
    }
    balanced = im.prefix_fallback && (packs == 0 || cost_fallback);
    WEFT_PLAN_PHASE(kPhShareCost);
    info_.num_packs = packs;
    info_.num_wide_items = balanced ? 0 : wp.num_wide_items;
    im.wide_launch = !balanced && wp.num_wide_items > 0;
    im.wide_split = im.wide_launch && wp.wide_split != 0;  // run(): the decode kernel beside the wide one
    info_.wide_split = im.wide_split;
    // The wide items on the Hopper mainloop where its Q boxes can load their rows (whole groups;
    // at GQA groups < 8 consecutive requests: decode::launch_decode_wide_sm90), in plans that run
    // the two kinds one after the other: an sm90 CTA takes a whole SM (registers, 224 KB), so it
    // cannot sit beside decode CTAs as a split plan's FA2 wide CTA does (heuristics::
    // kPackWideSm90SplitPlans). A lazy update keeps the plan's rows and split, so its choice.
    if (!lazy)
      im.wide_sm90 = im.wide_launch && im.wide_sm90_ok && (!im.wide_split || heuristics::kPackWideSm90SplitPlans) &&
                     decode::wide_sm90_shape(pc.group_size, page_size, dtype) &&
                     plan::wide_rows_loadable(wp, pc.group_size, std::max(1, pc.head_fold),
                                              /*consecutive=*/pc.group_size < decode::kWideSm90GatherGroup);
    info_.wide_sm90 = im.wide_launch && im.wide_sm90;
    im.wide_grid = info_.wide_sm90 ? wp.wide_grid : 0;
    info_.wide_grid = im.wide_grid;
    info_.prefix_fallback = balanced;
    info_.lazy_update = false;
    if (balanced) im.share_image_ws = nullptr;  // the balanced image replaces the work plan's
  }
  if (!balanced) {
    const plan::WorkPlan& wp = im.packer.current();
    staging_free(false);
    im.share_image_ws = nullptr;  // until the copy below is queued
    im.staging_images[std::size_t(slot)].valid = false;  // the slot no longer holds a balanced image
    if (lazy && im.share_image_version + 1 == im.packer.version()) {
      // The workspace holds the previous version's image (the last copy, into this workspace):
      // only the key arrays this update moved (PackPlanner::serialize_moved; usually the ends).
      const auto span = im.packer.serialize_moved(im.wlayout, staging);
      copy_offset = span.first;
      copy_bytes = span.second;
    } else {
      // A full plan, or a lazy update whose previous version never reached this workspace (a
      // plan() that threw after the packer planned, e.g. in staging.acquire): the workspace may
      // hold an older structure, so the whole image is written.
      im.wlayout.serialize(wp, staging);  // throws (naming "plan") when it exceeds max_pack_items
      copy_bytes = im.wlayout.metadata_bytes();
    }
    WEFT_PLAN_PHASE(kPhSerialize);
    info_.lazy_update = lazy;
    im.plan.batch = batch;  // what run() validates against
    im.plan.kv_len.assign(kv_lens, kv_lens + batch);
    im.planned_items = wp.num_items();
    info_.num_items = wp.num_items();
    info_.num_merges = wp.num_merges();
    info_.max_chunk = pack_chunk;
    info_.tile_rows = im.tile_rows;
    info_.split = wp.num_merges() > 0;
    WEFT_PLAN_PHASE(kPhBook);
  } else {
    // Without a window, an unsplit plan (every request within the chunk bound) comes from the
    // direct planner (decode/direct_plan.h: the same image, written without the Plan); any other
    // from plan_decode + serialize.
    const int32_t group = num_qo_heads / num_kv_heads;
    bool direct = false;
    plan::BalanceConfig cfg;
    if (variant.window_left < 0) {
      const int32_t rows =
          decode::plan_tile_rows_of(kv_lens, nullptr, batch, num_kv_heads, group, im.grid, im.balanced_tile_rows);
      cfg = decode::balance_config(im.grid, num_qo_heads, num_kv_heads, rows, im.head_fold);
      WEFT_PLAN_PHASE(kPhShape);
      direct = im.direct.plan(kv_lens, batch, cfg);
      WEFT_PLAN_PHASE(kPhBuild);
    }
    if (direct) {
      staging_free(im.direct.image_bytes() <= heuristics::kRotateStagingMaxBytes);
      im.direct.write(im.layout, staging, &im.staging_images[std::size_t(slot)]);
      WEFT_PLAN_PHASE(kPhSerialize);
      im.plan.batch = batch;  // what run() checks (the rest of `plan` is not used: plan_items)
      im.plan.kv_len.assign(kv_lens, kv_lens + batch);
      im.plan_items = im.direct.num_items();
      info_.num_items = im.direct.num_items() * im.head_fold;
      info_.num_merges = 0;
      info_.max_chunk = im.direct.max_chunk();
      info_.tile_rows = cfg.tile_q;
      info_.split = false;
    } else {
      decode::batch_shape(kv_lens, batch, variant.window_left, im.shape);
      const plan::BatchShape& shape = im.shape;
      const int32_t rows = decode::plan_tile_rows(shape, num_kv_heads, group, im.grid, im.balanced_tile_rows);
      cfg = decode::balance_config(im.grid, num_qo_heads, num_kv_heads, rows, im.head_fold);
      WEFT_PLAN_PHASE(kPhShape);
      decode::plan_decode(shape, cfg, im.planner, im.next);
      // What serialize writes (the CTA records up to the last busy one: plan::launch_records_used).
      const std::size_t image_bytes =
          plan::launch_plan_array_bytes(im.next.num_items(), cfg.num_ctas, plan::launch_records_used(im.next).records,
                                        im.next.num_merges(), batch);
      WEFT_PLAN_PHASE(kPhRecords);
      staging_free(image_bytes <= heuristics::kRotateStagingMaxBytes);
      im.layout.serialize(im.next, staging, &im.staging_images[std::size_t(slot)]);
      WEFT_PLAN_PHASE(kPhSerialize);
      im.plan.swap(im.next);
      im.plan_items = im.plan.num_items();
      // Counted per KV head as before head folding: the launch runs head_fold items per plan item.
      info_.num_items = im.plan.num_items() * im.head_fold;
      info_.num_merges = im.plan.num_merges() * im.head_fold;
      info_.max_chunk = im.plan.max_chunk;
      info_.tile_rows = im.plan.tile_q;
      info_.split = im.plan.split;
    }
    // The whole metadata region: its arrays sit at fixed offsets with max_items strides, so the
    // bytes a smaller plan uses are not contiguous (and the region also clears the previous plan's);
    // at least kMinPlanCopyBytes (im.copy_bytes: a smaller copy costs the host more).
    copy_bytes = im.copy_bytes;
    path = im.forced == DecodePath::kAuto ? choose_decode_path(cfg.group_size, head_dim, dtype) : im.forced;
    WEFT_PLAN_PHASE(kPhBook);
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
                                  staging + copy_offset, copy_bytes, cudaMemcpyHostToDevice, stream));
  WEFT_PLAN_PHASE(kPhCopy);
  im.staging.enqueued(slot, stream);
  WEFT_PLAN_PHASE(kPhRecord);
  // A fallback's balanced image replaced the work plan's: no lazy update onto it (the share
  // path's lazy flag needs share_image_ws == workspace).
  if (im.share) im.share_image_ws = balanced ? nullptr : workspace;
  if (im.share && !balanced) im.share_image_version = im.packer.version();

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
  im.twin_planned = false;
  im.share_fallback = im.share && balanced;  // which kernel run() launches (set once the copy is queued)
  info_.batch = batch;
  info_.num_ctas = im.grid;
  info_.path = im.path;
  info_.route = static_cast<int32_t>(DecodeRoute::kBalanced);
  info_.route_chunk = 0;
  info_.prefix_sharing = im.work_plan_active();  // not when it fell back (prefix_fallback)
  if (!im.work_plan_active()) info_.num_wide_items = 0, info_.wide_split = false, info_.wide_sm90 = false;
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
  // (The rows were checked by plan(BlockTable), the caller: rows_checked.)
  wq->plan(table, chunk, page_size, dtype, kv, var, static_cast<unsigned char*>(ws) + wq_offset, ws_bytes - wq_offset,
           stream, /*rows_checked=*/true);
  const plan::WorkPlan& wp = wq->work_plan();
  wq_planned = true;
  twin_planned = false;
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
  info.prefix_sharing = false;
}

void BatchDecodeWrapper::Impl::plan_twin(DecodePlanInfo& info, const BlockTable& table, int32_t hq, int32_t hkv,
                                         int32_t d, int32_t page_size, DType dtype, KVLayout kv,
                                         const AttentionVariant& var, void* ws, std::size_t ws_bytes,
                                         cudaStream_t stream) {
  WEFT_CHECK_ARG(ws_bytes >= twin_offset, "workspace",
                 "needs BatchDecodeWrapper::workspace_size(..., options) bytes, got " << ws_bytes);
  check::not_null(ws, "workspace");
  // The twin's own checks (shapes, lengths, variant, its workspace region) come before any copy; a
  // throw leaves this wrapper's current plan as it was. The rows were checked by plan(BlockTable)
  // (the caller): the twin plans from the lengths directly (what its plan(BlockTable) does after
  // the same check, a kBalanced wrapper without share_prefixes), not checking them twice.
  twin->impl_->lens_checked = table.seq_lens.host;
  struct ClearChecked {
    const int32_t*& p;
    ~ClearChecked() { p = nullptr; }
  } clear_checked{twin->impl_->lens_checked};
  twin->plan_lengths(table.seq_lens.host, table.batch_size, hq, hkv, d, page_size, dtype, kv, var,
                     static_cast<unsigned char*>(ws) + twin_offset, ws_bytes - twin_offset, stream);
  twin_planned = true;
  wq_planned = false;
  planned = true;
  info = twin->plan_info();
}

}  // namespace weft
