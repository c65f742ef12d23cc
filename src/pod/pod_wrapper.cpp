// BatchPODAttention: validation, the POD planner's decision (pod_plan.h), the fused plans (the
// prefill and decode planners of the attention core, each dealt to its share of the fused grid)
// and the launches: the fused kernel (pod_kernel.cuh), or the standard prefill and decode
// wrappers back to back (serial fallback).
//
// Workspace (fixed offsets from the bounds; a captured graph's pointers never move):
//   [0]          attn::sched::BindPlan of the current plan (32 bytes)
//   [256]        attn::sched::Counters (zero between launches: the kernel's last CTA resets them)
//   [off_pre]    fused prefill plan: prefill::PrefillWorkspaceLayout of pod::prefill_plan_ctas
//                lists (the scheduler hands out item v as prefill virtual CTA v, in plan order;
//                with prefill_split the lists' partial slots and merges hold the split tiles)
//   [off_dec]    fused decode plan: plan::WorkspaceLayout of pod::decode_lists(grid) item lists
//                (16-row items)
//   [off_spre]   serial prefill wrapper's workspace (BatchPrefillWrapper::workspace_size over the
//                full grid and every SM-partition grid, pod::partition_candidates)
//   [off_sdec]   serial decode wrapper's workspace (BatchDecodeWrapper::workspace_size), shared
//                with the partition's decode wrapper when PodOptions gives it its own CTA shape
//                (one of the two is planned at a time; the larger of their sizes)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "attention/heuristics.h"
#include "attention/plan/balance.h"
#include "attention/variant_host.h"
#include "common/cuda_check.h"
#include "decode/decode_plan.h"
#include "decode/launch.h"
#include "decode/wrapper_access.h"
#include "pod/pod_launch.h"
#include "pod/pod_plan.h"
#include "prefill/kernel/params.h"
#include "prefill/prefill_params.h"
#include "prefill/prefill_plan.h"
#include "prefill/prefill_validate.h"
#include "prefill/sm90/sm90_launch.h"
#include "weft/decode.h"
#include "weft/pod.h"
#include "weft/prefill.h"
#include "weft/validate.h"

namespace weft {

namespace pod {
// pod_d64.cu / pod_d128.cu
void launch_d64(const prefill::PrefillParams&, const decode::LaunchArgs&, const Workspace&, int32_t, cudaStream_t);
void launch_d128(const prefill::PrefillParams&, const decode::LaunchArgs&, const Workspace&, int32_t, cudaStream_t);
int32_t occupancy_d64(DType);
int32_t occupancy_d128(DType);

void launch(const prefill::PrefillParams& pre, const decode::LaunchArgs& dec, const Workspace& ws, int32_t grid,
            cudaStream_t stream) {
  if (dec.head_dim == 128) return launch_d128(pre, dec, ws, grid, stream);
  return launch_d64(pre, dec, ws, grid, stream);
}
int32_t occupancy(int32_t head_dim, DType dtype) {
  return head_dim == 128 ? occupancy_d128(dtype) : occupancy_d64(dtype);
}
}  // namespace pod

namespace {

constexpr std::size_t kAlign = 256;
std::size_t align_up(std::size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }
constexpr std::size_t kOffCounters = 256;

struct Geometry {
  int device = 0, sms = 0, ctas_per_sm = 0, grid = 0;
};

void check_bounds(const PodBounds& b) {
  WEFT_CHECK_ARG(b.max_prefill_batch >= 1, "bounds.max_prefill_batch", "must be >= 1, got " << b.max_prefill_batch);
  WEFT_CHECK_ARG(b.max_prefill_tokens >= 1 && b.max_prefill_tokens <= INT32_MAX, "bounds.max_prefill_tokens",
                 "must be in [1, 2^31), got " << b.max_prefill_tokens);
  WEFT_CHECK_ARG(b.max_decode_batch >= 1, "bounds.max_decode_batch", "must be >= 1, got " << b.max_decode_batch);
  WEFT_CHECK_ARG(b.num_kv_heads >= 1 && b.num_qo_heads >= b.num_kv_heads && b.num_qo_heads % b.num_kv_heads == 0,
                 "bounds.num_kv_heads",
                 "num_qo_heads " << b.num_qo_heads << " must be a positive multiple of num_kv_heads " << b.num_kv_heads);
  WEFT_CHECK_ARG(b.head_dim == 64 || b.head_dim == 128, "bounds.head_dim", "expected 64 or 128, got " << b.head_dim);
  WEFT_CHECK_ARG(b.kv_layout == KVLayout::kNHD || b.kv_layout == KVLayout::kHND, "bounds.kv_layout",
                 "unknown KV layout " << static_cast<int>(b.kv_layout));
}

Geometry geometry(int32_t head_dim) {
  Geometry g;
  WEFT_CUDA_CHECK(cudaGetDevice(&g.device));
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&g.sms, cudaDevAttrMultiProcessorCount, g.device));
  WEFT_CHECK_ARG(g.sms <= attn::sched::kMaxSms, "device",
                 g.sms << " SMs exceed the scheduler's per-SM tickets (" << attn::sched::kMaxSms << ")");
  g.ctas_per_sm = std::max(1, std::min(pod::occupancy(head_dim, DType::kBFloat16),
                                       pod::occupancy(head_dim, DType::kFloat16)));
  g.grid = g.sms * g.ctas_per_sm;
  return g;
}

PrefillBounds serial_prefill_bounds(const PodBounds& b) {
  PrefillBounds p;
  p.max_batch = b.max_prefill_batch;
  p.max_total_q = b.max_prefill_tokens;
  p.num_qo_heads = b.num_qo_heads;
  p.num_kv_heads = b.num_kv_heads;
  p.head_dim = b.head_dim;
  return p;
}

struct Layout {
  prefill::PrefillWorkspaceLayout pre;
  plan::WorkspaceLayout dec;
  std::size_t off_pre = 0, off_dec = 0, off_spre = 0, off_sdec = 0, spre_bytes = 0, sdec_bytes = 0, total = 0;
};

// The partition's own decode wrapper: PodOptions' CTA shape when it gives one (every partition
// plan runs it), else the bands' deeper shape (heuristics::kPodDeepDecodeWarps x _Stages; the
// plans whose pod::Decision::deep_decode says so). 0 fields: the decode defaults.
bool partition_decode_own_shape(const PodOptions& o) {
  return o.partition_decode_warps != 0 || o.partition_decode_stages != 0;
}
DecodeOptions partition_decode_options(const PodOptions& o) {
  DecodeOptions d;
  const bool own = partition_decode_own_shape(o);
  d.warps_per_cta = own ? o.partition_decode_warps : heuristics::kPodDeepDecodeWarps;
  d.pipeline_stages = own ? o.partition_decode_stages : heuristics::kPodDeepDecodeStages;
  return d;
}
void check_partition_decode(const PodOptions& o) {
  WEFT_CHECK_ARG(o.partition_decode_warps == 0 ||
                     (o.partition_decode_warps >= 2 && o.partition_decode_warps <= kDecodeMaxWarpsPerCta),
                 "options.partition_decode_warps",
                 "must be 0 (default) or in [2, " << kDecodeMaxWarpsPerCta << "], got " << o.partition_decode_warps);
  WEFT_CHECK_ARG(o.partition_decode_stages == 0 ||
                     (o.partition_decode_stages >= 2 && o.partition_decode_stages <= kDecodeMaxPipelineStages),
                 "options.partition_decode_stages",
                 "must be 0 (default) or in [2, " << kDecodeMaxPipelineStages << "], got "
                                                   << o.partition_decode_stages);
}

// Runs f (which sizes or builds the partition's decode wrapper); the decode wrapper's rejection of a
// CTA shape whose shared memory the device cannot hold (argument "stages") is rethrown naming the
// POD option.
template <class F>
auto naming_partition_decode(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    if (e.argument() != "stages") throw;
    throw Error("options.partition_decode_stages", e.what());
  }
}

Layout make_layout(const PodBounds& b, const Geometry& g, bool prefill_split,
                   const DecodeOptions& part_decode = {}) {
  Layout l;
  const int32_t group = b.num_qo_heads / b.num_kv_heads;
  const prefill::TileConfig t = pod::prefill_tile(b.head_dim);
  l.pre = prefill::make_layout(b.max_prefill_batch, b.max_prefill_tokens, b.num_kv_heads, group, t.cta_q,
                               b.head_dim, pod::prefill_plan_ctas(g.grid, prefill_split));
  l.dec = plan::WorkspaceLayout(decode::plan_bounds(b.max_decode_batch, b.num_qo_heads, b.num_kv_heads, b.head_dim,
                                                    pod::decode_lists(g.grid), decode::kPlanTileQ));
  l.spre_bytes = BatchPrefillWrapper::workspace_size(serial_prefill_bounds(b));
  for (int32_t k : pod::partition_candidates(g.sms))
    l.spre_bytes = std::max(l.spre_bytes, BatchPrefillWrapper::workspace_size(serial_prefill_bounds(b), g.sms - k));
  l.sdec_bytes = std::max(
      BatchDecodeWrapper::workspace_size(b.max_decode_batch, b.num_qo_heads, b.num_kv_heads, b.head_dim),
      BatchDecodeWrapper::workspace_size(b.max_decode_batch, b.num_qo_heads, b.num_kv_heads, b.head_dim, part_decode));
  l.off_pre = align_up(kOffCounters + sizeof(attn::sched::Counters));
  l.off_dec = align_up(l.off_pre + l.pre.total_bytes);
  l.off_spre = align_up(l.off_dec + l.dec.total_bytes());
  l.off_sdec = align_up(l.off_spre + l.spre_bytes);
  l.total = align_up(l.off_sdec + l.sdec_bytes);
  return l;
}

std::vector<int32_t> kv_lens(const PageTable& t, int64_t page_size) {
  std::vector<int32_t> v(t.batch_size);
  for (int32_t b = 0; b < t.batch_size; ++b) v[b] = static_cast<int32_t>(kv_len_of(t, page_size, b));
  return v;
}

}  // namespace

struct BatchPODAttention::Impl {
  ~Impl() {
    // Destructors do not throw: a failed destroy leaves the handle to the context's teardown.
    if (join != nullptr) cudaEventDestroy(join);
    if (fork != nullptr) cudaEventDestroy(fork);
    if (side != nullptr) cudaStreamDestroy(side);
  }
  PodBounds bounds;
  PodOptions options;
  Geometry geo;
  Layout layout;
  BatchPrefillWrapper serial_prefill;
  std::unique_ptr<BatchDecodeWrapper> serial_decode;
  // The partition's own decode (partition_decode_options); null where no plan can use it.
  std::unique_ptr<BatchDecodeWrapper> part_decode;
  bool part_own_decode = false;  // the current plan's partition runs part_decode
  // The decode wrapper of a plan: part_decode for a partition whose options give a shape or
  // whose planner chose the deeper one, else the default-shape wrapper.
  bool uses_part_decode(bool partition, bool deep) const {
    return partition && part_decode && (partition_decode_own_shape(options) || deep);
  }
  BatchDecodeWrapper& decode_of(bool partition, bool deep) {
    return uses_part_decode(partition, deep) ? *part_decode : *serial_decode;
  }
  // Planning scratch (reused between plans).
  prefill::PrefillPlanner pplanner;
  prefill::PlanRequest preq;
  prefill::SegmentedPlan sp;
  plan::Planner dplanner;
  plan::BatchShape dshape;
  plan::Plan dplan;
  std::vector<unsigned char> meta_pre, extra_pre, meta_dec, head;
  // SM partition: the decode kernel's stream and the fork/join events (created at construction).
  cudaStream_t side = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
  // The current plan.
  bool planned = false, fused = false, partition = false;
  DType dtype = DType::kBFloat16;
  int32_t page_size = 0, pre_batch = 0, dec_batch = 0;
  int64_t total_q = 0;
  std::vector<int32_t> pre_kv, dec_kv;
  AttentionVariant variant;
  void* ws = nullptr;
};

std::size_t BatchPODAttention::workspace_size(const PodBounds& bounds) { return workspace_size(bounds, PodOptions{}); }

std::size_t BatchPODAttention::workspace_size(const PodBounds& bounds, const PodOptions& options) {
  check_bounds(bounds);
  check_partition_decode(options);
  // The larger of the two layouts (split plans need partial slots), whatever prefill_split says.
  return naming_partition_decode(
      [&] { return make_layout(bounds, geometry(bounds.head_dim), true, partition_decode_options(options)).total; });
}

BatchPODAttention::BatchPODAttention(const PodBounds& bounds, const PodOptions& options) : impl_(new Impl()) {
  check_bounds(bounds);
  WEFT_CHECK_ARG(options.mode == PodMode::kAuto || options.mode == PodMode::kFused || options.mode == PodMode::kSerial ||
                     options.mode == PodMode::kPartition,
                 "options.mode", "unknown mode " << static_cast<int>(options.mode));
  WEFT_CHECK_ARG(options.binding == PodBinding::kProportional || options.binding == PodBinding::kFiftyFifty ||
                     options.binding == PodBinding::kStatic,
                 "options.binding", "unknown binding " << static_cast<int>(options.binding));
  Impl& im = *impl_;
  im.bounds = bounds;
  im.options = options;
  im.geo = geometry(bounds.head_dim);
  check_partition_decode(options);
  im.layout = naming_partition_decode(
      [&] { return make_layout(bounds, im.geo, options.prefill_split, partition_decode_options(options)); });
  im.serial_decode = std::make_unique<BatchDecodeWrapper>(bounds.max_decode_batch, bounds.num_qo_heads,
                                                          bounds.num_kv_heads, bounds.head_dim);
  // The deeper shape is chosen only with the bands' k (pod::Decision::deep_decode).
  const bool bands_k = options.partition_free_sms == 0 &&
                       (options.mode == PodMode::kAuto || options.mode == PodMode::kPartition);
  if (partition_decode_own_shape(options) || bands_k)
    im.part_decode = std::make_unique<BatchDecodeWrapper>(bounds.max_decode_batch, bounds.num_qo_heads,
                                                          bounds.num_kv_heads, bounds.head_dim,
                                                          partition_decode_options(options));
  WEFT_CHECK_ARG(options.partition_free_sms == 0 || pod::is_partition_candidate(options.partition_free_sms, im.geo.sms),
                 "options.partition_free_sms",
                 options.partition_free_sms << " is not a partition candidate (multiples of "
                                            << heuristics::pod_cost().partition_step << " up to "
                                            << pod::max_partition_candidate(im.geo.sms) << " on " << im.geo.sms
                                            << " SMs)");
  // Non-blocking (no implicit order with the legacy stream: the events order it); the default
  // priority, as a caller's stream has.
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&im.side, cudaStreamNonBlocking));
  WEFT_CUDA_CHECK(cudaEventCreateWithFlags(&im.fork, cudaEventDisableTiming));
  WEFT_CUDA_CHECK(cudaEventCreateWithFlags(&im.join, cudaEventDisableTiming));
}

BatchPODAttention::~BatchPODAttention() = default;

void BatchPODAttention::plan(const int32_t* qo_indptr, const PageTable& ptable, const PageTable& dtable,
                             int32_t page_size, DType dtype, const AttentionVariant& variant, void* workspace,
                             std::size_t workspace_bytes, cudaStream_t stream) {
  Impl& im = *impl_;
  const PodBounds& b = im.bounds;
  // ---- validation (nothing written before all of it passed) ----
  WEFT_CHECK_ARG(page_size >= 1, "page_size", "must be >= 1, got " << page_size);
  WEFT_CHECK_ARG(dtype == DType::kFloat16 || dtype == DType::kBFloat16, "dtype",
                 "expected f16 or bf16, got " << dtype_name(dtype));
  prefill::check_table_host(ptable, page_size);
  prefill::check_table_host(dtable, page_size);
  WEFT_CHECK_ARG(ptable.batch_size <= b.max_prefill_batch, "prefill_table.batch_size",
                 ptable.batch_size << " exceeds bounds.max_prefill_batch " << b.max_prefill_batch);
  WEFT_CHECK_ARG(dtable.batch_size <= b.max_decode_batch, "decode_table.batch_size",
                 dtable.batch_size << " exceeds bounds.max_decode_batch " << b.max_decode_batch);
  check::indptr(qo_indptr, ptable.batch_size, "prefill_qo_indptr", b.max_prefill_tokens);
  prefill::check_variant(variant);
  WEFT_CHECK_ARG(variant.mask != MaskMode::kCustom, "variant.mask", "custom masks are not supported by POD");
  WEFT_CHECK_ARG(variant.alibi_slopes == nullptr, "variant.alibi_slopes", "ALiBi is not supported by POD");
  // The fused kernel computes the built-in variant only: a run-time compiled one would be ignored
  // on the steps kAuto fuses (plain results, not the variant's).
  WEFT_CHECK_ARG(variant.jit == nullptr, "variant.jit", "run-time compiled variants are not supported by POD");
  check::workspace(workspace, workspace_bytes, im.layout.total, "workspace");
  const std::vector<int32_t> pre_kv = kv_lens(ptable, page_size);
  const std::vector<int32_t> dec_kv = kv_lens(dtable, page_size);
  for (int32_t r = 0; r < ptable.batch_size; ++r)
    WEFT_CHECK_ARG(qo_indptr[r + 1] - qo_indptr[r] <= pre_kv[r], "prefill_qo_indptr",
                   "request " << r << " has " << qo_indptr[r + 1] - qo_indptr[r] << " query tokens but kv_len "
                              << pre_kv[r] << " (a chunk is the last q_len positions of its sequence)");
  const int32_t group = b.num_qo_heads / b.num_kv_heads;
  const int64_t total_q = ptable.batch_size > 0 ? qo_indptr[ptable.batch_size] : 0;

  // ---- fused prefill plan: one list, longest first ----
  const prefill::TileConfig tile = pod::prefill_tile(b.head_dim);
  prefill::PlanRequest& req = im.preq;
  req.qo_len.resize(ptable.batch_size);
  for (int32_t r = 0; r < ptable.batch_size; ++r) req.qo_len[r] = qo_indptr[r + 1] - qo_indptr[r];
  req.kv_len = pre_kv;
  req.num_kv_heads = b.num_kv_heads;
  req.group_size = group;
  req.causal = variant.mask == MaskMode::kCausal;
  req.window_left = variant.window_left;
  req.cta_q = tile.cta_q;
  req.cta_kv = tile.cta_kv;
  // Limited splits (pod::prefill_plan_ctas): the balanced planner over the grid's slots splits
  // long query tiles' keys (chunks >= the prefill wrapper's min_chunk) so the items fill at most
  // ~two waves of the prefill share; without split, one list of whole tiles, longest first. The
  // scheduler's dynamic claims balance the items over the slots either way.
  const bool split = im.options.prefill_split;
  req.num_ctas = pod::prefill_plan_ctas(im.geo.grid, split);
  req.allow_split = split;
  req.min_chunk = split ? PrefillPlanOptions{}.min_chunk : 0;
  im.pplanner.make_plan(req, im.sp);
  const int32_t tiles = im.sp.plan.num_items();

  pod::PlanInput in;
  in.pre_qo_len = req.qo_len;
  in.pre_kv_len = pre_kv;
  in.dec_kv_len = dec_kv;
  in.num_qo_heads = b.num_qo_heads;
  in.num_kv_heads = b.num_kv_heads;
  in.head_dim = b.head_dim;
  in.causal = req.causal;
  in.num_sms = im.geo.sms;
  in.ctas_per_sm = im.geo.ctas_per_sm;
  double avg_rows = 0;
  int32_t active = 0;
  for (int32_t q : req.qo_len) active += q > 0;
  if (active > 0) avg_rows = double(total_q) * group / active;
  in.sm90_prefill = avg_rows > 64 && prefill::sm90::eligible(im.geo.device, b.head_dim, dtype, group, true, page_size, dtype);
  in.fused_supported = pod::supported(b.head_dim, group);
  in.prefill_items = tiles;
  in.partition_free_sms = im.options.partition_free_sms;
  in.tensor_core_decode = !heuristics::decode_prefers_cuda_cores(group, b.head_dim);  // the decode wrapper's kAuto path
  in.mode = static_cast<pod::Mode>(im.options.mode);
  in.binding = static_cast<pod::Binding>(im.options.binding);
  const pod::Decision d = pod::decide(in);

  char* ws = static_cast<char*>(workspace);
  if (d.fused) {
    const prefill::PrefillWorkspaceLayout& pl = im.layout.pre;
    im.meta_pre.assign(pl.plan.metadata_bytes(), 0);
    pl.plan.serialize(im.sp.plan, im.meta_pre.data());
    prefill::segment_image(pl, im.sp, pre_kv, im.extra_pre);
    const std::size_t base = pl.off_seg_request;
    // Decode: the balanced decode plan dealt to its n_decode item lists.
    decode::batch_shape(dec_kv.data(), dtable.batch_size, variant.window_left, im.dshape);
    const plan::BalanceConfig cfg =
        decode::balance_config(d.n_decode, b.num_qo_heads, b.num_kv_heads, decode::kPlanTileQ);
    decode::plan_decode(im.dshape, cfg, im.dplanner, im.dplan);
    im.meta_dec.assign(im.layout.dec.metadata_bytes(), 0);
    im.layout.dec.serialize(im.dplan, im.meta_dec.data());
    // Binding plan + zero counters.
    im.head.assign(kOffCounters + sizeof(attn::sched::Counters), 0);
    attn::sched::BindPlan bp{};
    bp.n[0] = d.n_prefill;
    bp.n[1] = d.n_decode;
    bp.ratio[0] = d.ratio_prefill;
    bp.ratio[1] = d.ratio_decode;
    bp.policy = static_cast<int32_t>(im.options.binding == PodBinding::kStatic ? attn::sched::BindPolicy::kStatic
                                                                               : attn::sched::BindPolicy::kSmAware);
    bp.num_sms = im.geo.sms;
    bp.first0 = d.first0;
    std::memcpy(im.head.data(), &bp, sizeof(bp));
    // Pageable sources: each copy has consumed its source when cudaMemcpyAsync returns.
    WEFT_CUDA_CHECK(cudaMemcpyAsync(ws, im.head.data(), im.head.size(), cudaMemcpyHostToDevice, stream));
    WEFT_CUDA_CHECK(cudaMemcpyAsync(ws + im.layout.off_pre, im.meta_pre.data(), im.meta_pre.size(),
                                    cudaMemcpyHostToDevice, stream));
    WEFT_CUDA_CHECK(cudaMemcpyAsync(ws + im.layout.off_pre + base, im.extra_pre.data(), im.extra_pre.size(),
                                    cudaMemcpyHostToDevice, stream));
    WEFT_CUDA_CHECK(cudaMemcpyAsync(ws + im.layout.off_dec, im.meta_dec.data(), im.meta_dec.size(),
                                    cudaMemcpyHostToDevice, stream));
    info_.prefill_items = im.sp.plan.num_items();
    info_.prefill_merges = im.sp.plan.num_merges();
    info_.decode_items = im.dplan.num_items();
  } else {
    // Serial: the prefill wrapper's own choices. Partition: its grid capped at SMs - k, and the
    // 128-row tile (the sm90 kernel's; one kernel whatever the mix, for graphs).
    PrefillPlanOptions popt;
    if (d.partition) {
      popt.max_ctas = d.prefill_grid;
      popt.cta_q = 128;
    }
    im.serial_prefill.plan_paged(qo_indptr, ptable, page_size, b.num_qo_heads, b.num_kv_heads, b.head_dim, dtype,
                                 variant, ws + im.layout.off_spre, im.layout.spre_bytes,
                                 serial_prefill_bounds(b), stream, nullptr, popt);
    im.decode_of(d.partition, d.deep_decode)
        .plan(dtable, b.num_qo_heads, b.num_kv_heads, b.head_dim, page_size, dtype, b.kv_layout, variant,
              ws + im.layout.off_sdec, im.layout.sdec_bytes, stream);
    info_.prefill_items = im.serial_prefill.plan_info().num_items;
    info_.prefill_merges = im.serial_prefill.plan_info().num_merges;
    info_.decode_items = im.decode_of(d.partition, d.deep_decode).plan_info().num_items;
  }
  im.planned = true;
  im.fused = d.fused;
  im.partition = d.partition;
  im.part_own_decode = im.uses_part_decode(d.partition, d.deep_decode);
  im.dtype = dtype;
  im.page_size = page_size;
  im.pre_batch = ptable.batch_size;
  im.dec_batch = dtable.batch_size;
  im.total_q = total_q;
  im.pre_kv = pre_kv;
  im.dec_kv = dec_kv;
  im.variant = variant;
  im.ws = workspace;
  info_.fused = d.fused;
  info_.grid = im.geo.grid;
  info_.ctas_per_sm = im.geo.ctas_per_sm;
  info_.prefill_ctas = d.n_prefill;
  info_.decode_ctas = d.n_decode;
  info_.ratio_prefill = d.ratio_prefill;
  info_.ratio_decode = d.ratio_decode;
  info_.predicted_serial_us = d.t_serial_us;
  info_.predicted_fused_us = d.t_fused_us;
  info_.partition = d.partition;
  info_.free_sms = d.partition ? d.free_sms : 0;
  info_.prefill_grid = d.partition ? im.serial_prefill.plan_info().num_ctas : 0;
  info_.predicted_partition_us = d.t_partition_us;
  const DecodeOptions pd = im.part_own_decode ? partition_decode_options(im.options) : DecodeOptions{};
  const int32_t warps = pd.warps_per_cta != 0 ? pd.warps_per_cta : heuristics::decode_default_warps(b.head_dim);
  const int32_t stages = pd.pipeline_stages != 0 ? pd.pipeline_stages : heuristics::decode_default_stages(b.head_dim);
  info_.decode_warps = d.partition ? warps : 0;
  info_.decode_stages = d.partition ? stages : 0;
}

namespace {

void check_io(const TensorView& t, const char* name, int64_t rows, int64_t heads, int64_t dim, DType dtype) {
  check::on_device(t, name);
  check::dtype_is(t, name, dtype);
  check::shape_is(t, name, {rows, heads, dim});
  check::inner_contiguous(t, name, 16);
}

void check_lse(const TensorView* lse, const char* name, int64_t rows, int64_t heads, bool required) {
  WEFT_CHECK_ARG(lse != nullptr || !required, name, "the planned variant has return_lse");
  if (lse == nullptr) return;
  check::on_device(*lse, name);
  check::dtype_is(*lse, name, DType::kFloat32);
  check::shape_is(*lse, name, {rows, heads});
  WEFT_CHECK_ARG(lse->strides[1] == 1, name, "head stride must be 1, got " << lse->strides[1]);
  check::aligned(lse->data, name, sizeof(float));
}

void check_table_matches(const PageTable& t, const char* name, int32_t batch, int64_t page_size,
                         const std::vector<int32_t>& kv) {
  WEFT_CHECK_ARG(t.batch_size == batch, name, "batch_size " << t.batch_size << " differs from the planned " << batch);
  for (int32_t r = 0; r < batch; ++r)
    WEFT_CHECK_ARG(kv_len_of(t, page_size, r) == kv[r], name,
                   "request " << r << " has kv_len " << kv_len_of(t, page_size, r) << ", planned " << kv[r]
                              << " (re-plan after appending)");
}

}  // namespace

void BatchPODAttention::run(const TensorView& pq, const TensorView& dq, const PagedKVCache& cache,
                            const PageTable& ptable, const PageTable& dtable, const TensorView& pout,
                            const TensorView& dout, const TensorView* plse, const TensorView* dlse,
                            cudaStream_t stream) {
  Impl& im = *impl_;
  WEFT_CHECK_ARG(im.planned, "plan", "run() called before plan()");
  const PodBounds& b = im.bounds;
  const int64_t hq = b.num_qo_heads, d = b.head_dim;
  check_io(pq, "prefill_q", im.total_q, hq, d, im.dtype);
  check_io(pout, "prefill_out", im.total_q, hq, d, im.dtype);
  check_io(dq, "decode_q", im.dec_batch, hq, d, im.dtype);
  check_io(dout, "decode_out", im.dec_batch, hq, d, im.dtype);
  check_lse(plse, "prefill_lse", im.total_q, hq, im.variant.return_lse);
  check_lse(dlse, "decode_lse", im.dec_batch, hq, im.variant.return_lse);
  WEFT_CHECK_ARG(cache.layout == b.kv_layout, "cache.layout",
                 "bounds.kv_layout is " << kv_layout_name(b.kv_layout) << ", cache has " << kv_layout_name(cache.layout));
  validate_paged_kv(cache, ptable);
  validate_paged_kv(cache, dtable);
  check::dtype_is(cache.k_pages, "cache.k_pages", im.dtype);
  WEFT_CHECK_ARG(cache.page_size() == im.page_size, "cache.page_size",
                 "planned " << im.page_size << ", cache has " << cache.page_size());
  WEFT_CHECK_ARG(cache.num_kv_heads() == b.num_kv_heads, "cache.num_kv_heads",
                 "planned " << b.num_kv_heads << ", cache has " << cache.num_kv_heads());
  WEFT_CHECK_ARG(cache.head_dim() == d, "cache.head_dim", "planned " << d << ", cache has " << cache.head_dim());
  check_table_matches(ptable, "prefill_table", im.pre_batch, im.page_size, im.pre_kv);
  check_table_matches(dtable, "decode_table", im.dec_batch, im.page_size, im.dec_kv);

  if (im.partition) {
    BatchDecodeWrapper& dec = im.part_own_decode ? *im.part_decode : *im.serial_decode;
    const PrefillPlanInfo& pinfo = im.serial_prefill.plan_info();
    if (pinfo.sm90 && pinfo.num_items > 0) {
      // One stream, in a fixed order: the capped sm90 prefill (SMs - k persistent CTAs, one per
      // SM, each triggering its dependents at its start: one sm90 launch, which the items make
      // certain), then the decode kernel launched programmatically after it. Decode CTAs are
      // dispatched only once every prefill CTA holds its SM, so they take the k free SMs, then
      // each SM a prefill CTA leaves; the decode grid's last CTA waits for the prefill grid, so
      // work after run() sees both complete. With two graph branches (below) the decode CTAs
      // could reach the SMs first: the whole decode grid spreads over every SM and the prefill
      // runs after it on fewer SMs, slower than serial (perf-notes-pod, the slow rows of 3b127c0).
      im.serial_prefill.run_paged(pq, cache, ptable, pout, plse, stream);
      detail::DecodeWrapperAccess::run_after_trigger(dec, dq, cache, dtable, dout, dlse, stream);
      return;
    }
    // Fork: the decode stream waits for the work before run(); the prefill (SMs - k persistent
    // CTAs) is issued first, then decode on the side stream fills the k free SMs; join: the
    // caller's stream waits for decode. Under stream capture the events make the side stream
    // part of the graph (two parallel branches).
    WEFT_CUDA_CHECK(cudaEventRecord(im.fork, stream));
    WEFT_CUDA_CHECK(cudaStreamWaitEvent(im.side, im.fork, 0));
    im.serial_prefill.run_paged(pq, cache, ptable, pout, plse, stream);
    dec.run(dq, cache, dtable, dout, dlse, im.side);
    WEFT_CUDA_CHECK(cudaEventRecord(im.join, im.side));
    WEFT_CUDA_CHECK(cudaStreamWaitEvent(stream, im.join, 0));
    return;
  }
  if (!im.fused) {
    im.serial_prefill.run_paged(pq, cache, ptable, pout, plse, stream);
    im.serial_decode->run(dq, cache, dtable, dout, dlse, stream);
    return;
  }

  char* ws = static_cast<char*>(im.ws);
  const prefill::PrefillWorkspaceLayout& pl = im.layout.pre;
  char* pws = ws + im.layout.off_pre;
  prefill::PrefillParams p;
  p.q = pq.data;
  p.q_stride_token = pq.strides[0];
  p.q_stride_head = pq.strides[1];
  p.o = pout.data;
  p.o_stride_token = pout.strides[0];
  p.o_stride_head = pout.strides[1];
  p.lse = plse != nullptr ? static_cast<float*>(plse->data) : nullptr;
  p.lse_stride_token = plse != nullptr ? plse->strides[0] : 0;
  prefill::set_paged_kv(p, cache, ptable, im.page_size);
  prefill::set_plan(p, pl, pws, b.num_qo_heads / b.num_kv_heads);
  prefill::set_variant(p, im.variant, b.head_dim);  // no ALiBi (plan() rejects it)

  decode::LaunchArgs a;
  a.plan = im.layout.dec.pointers(ws + im.layout.off_dec);
  a.q = &dq;
  a.out = &dout;
  a.lse = dlse;
  a.cache = &cache;
  a.table = &dtable;
  a.group_size = p.group_size;
  a.var = attn::variant_params(im.variant, b.head_dim);
  a.dtype = im.dtype;
  a.head_dim = b.head_dim;
  a.path = DecodePath::kTensorCore;
  a.grid = im.geo.grid;
  a.stages = pod::decode_stages(b.head_dim);
  a.warps = pod::kDecodeWarps;
  a.tile_rows = decode::kPlanTileQ;

  pod::Workspace w;
  w.bind = reinterpret_cast<const attn::sched::BindPlan*>(ws);
  w.counters = reinterpret_cast<attn::sched::Counters*>(ws + kOffCounters);
  pod::launch(p, a, w, im.geo.grid, stream);
  // Split prefill tiles: the plan merge (the prefill wrapper's), launched in every fused run so a
  // captured graph has a fixed topology (it reads the merge count: zero is a no-op).
  if (im.options.prefill_split) prefill::launch_merge(p, pout, im.dtype, b.head_dim, im.geo.grid, stream);
}

}  // namespace weft
