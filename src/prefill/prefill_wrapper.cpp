// BatchPrefillWrapper: validation, planning (tile heuristic + balanced segmented plan copied into
// the workspace at fixed offsets) and launches (persistent prefill kernel, then the plan merge;
// the sm90 kernel merges in place).
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "attention/heuristics.h"
#include "attention/staging_ring.h"
#include "attention/variant_host.h"
#include "common/cuda_check.h"
#include "jit/jit_impl.h"
#include "prefill/kernel/params.h"
#include "prefill/prefill_config.h"
#include "prefill/prefill_dispatch.h"
#include "prefill/prefill_params.h"
#include "prefill/prefill_plan.h"
#include "prefill/prefill_validate.h"
#include "prefill/sm90/sm90_launch.h"
#include "weft/prefill.h"
#include "weft/validate.h"

namespace weft {

using prefill::TileConfig;

struct BatchPrefillWrapper::State {
  DType dtype = DType::kBFloat16;
  DType kv_dtype = DType::kBFloat16;  // the K/V pools' (opt.kv_dtype, else dtype)
  int32_t num_qo_heads = 0, num_kv_heads = 0, head_dim = 0, batch = 0;
  int64_t total_q = 0;
  AttentionVariant variant;
  bool paged = false;
  int64_t page_size = 0;
  std::vector<int32_t> kv_len;           // real requests
  std::vector<int32_t> kv_len_next;      // plan_paged / plan_ragged's lengths for plan_common (reused:
                                         // no allocation per plan; kv_len takes them once valid)
  std::vector<int32_t> kv_indptr_host;   // ragged
  TileConfig cfg;
  int32_t num_ctas = 0;
  prefill::PrefillWorkspaceLayout layout;
  void* workspace = nullptr;
  prefill::KernelEntry kernel;
  bool sm90 = false;  // Hopper mainloop (src/prefill/sm90/) instead of the FA2 kernel
  prefill::sm90::Entry sm90_kernel;
  std::size_t sm90_maps_off = 0;  // per-CTA tensor-map slots after the plan (sm90_launch.h)
  bool launch_merge = false;
  // A run-time compiled variant's kernel and parameters (variant.jit; weft/jit.h). Mutable: run()
  // writes each launch's PrefillParams in front of the user parameters.
  mutable jit_detail::PlanState jit;
  // Planning scratch kept between plan() calls (a warm plan() allocates nothing): the planner, its
  // request and plan, the host images of the metadata and the segment arrays, and what the
  // metadata image holds (for the layout `meta_bounds`: the next serialize clears only the
  // previous plan's excess).
  prefill::PrefillPlanner planner;
  prefill::PlanRequest req;
  prefill::SegmentedPlan sp;
  plan::PlanBounds meta_bounds{};
  // Pinned staging slots of the one copy plan() enqueues (metadata image with the segment arrays at
  // its end; attention/staging_ring.h, the decode wrapper's helper): an asynchronous copy from
  // pinned memory returns at once, where a pageable source made plan() wait for the driver's bounce
  // copy (and, behind queued work, for the stream). A plan() writes a slot whose last copy has
  // landed: the previous plan's slot when the stream drained (one cudaEventQuery), another slot
  // while that copy is still queued, a host wait only when every slot's copy is queued
  // (heuristics::plan_staging_slots of them). Re-made larger when a plan's metadata outgrows a slot.
  std::unique_ptr<plan::StagingRing> staging;
  // What each slot holds (the next serialize into it clears only the previous plan's excess).
  std::vector<plan::WorkspaceLayout::Image> staging_images;
  // The launch-topology facts plan() needs, per device (constant for a process): whether the sm90
  // mainloop can take a call shape, and each FA2 tile's persistent grid. Each is several runtime
  // calls (device attributes, cudaFuncSetAttribute, the occupancy calculator), measured as most
  // of prefill/plan/b64's plan_us on the lent H100's host (420-516 us at 5b2fcc8 / 340773c
  // against ~110 us of planning): asked once, then looked up.
  struct Sm90Key {
    int device;
    int32_t head_dim;
    DType dtype, kv_dtype;
    int32_t group;
    bool paged;
    int64_t page_size;
    bool operator==(const Sm90Key& o) const {
      return device == o.device && head_dim == o.head_dim && dtype == o.dtype && kv_dtype == o.kv_dtype &&
             group == o.group && paged == o.paged && page_size == o.page_size;
    }
  };
  struct GridKey {
    int device;
    TileConfig cfg;
    DType dtype, kv_dtype;
    bool operator==(const GridKey& o) const {
      return device == o.device && cfg.head_dim == o.cfg.head_dim && cfg.cta_q == o.cfg.cta_q &&
             cfg.cta_kv == o.cfg.cta_kv && dtype == o.dtype && kv_dtype == o.kv_dtype;
    }
  };
  std::vector<std::pair<Sm90Key, bool>> sm90_eligible;
  std::vector<std::pair<GridKey, int32_t>> fa2_grid;
  std::vector<std::pair<int, int>> sms;  // (device, SM count)
};

namespace {

int device_of(int32_t d) {
  if (d >= 0) return d;
  int cur = 0;
  WEFT_CUDA_CHECK(cudaGetDevice(&cur));
  return cur;
}

int sm_count(int device) {
  int n = 0;
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
  return n;
}

// Persistent grid of one configuration: every SM filled with as many CTAs as fit.
int32_t num_ctas_for(const TileConfig& cfg, DType dtype, DType kv_dtype, int device) {
  int prev = 0;
  WEFT_CUDA_CHECK(cudaGetDevice(&prev));
  if (prev != device) WEFT_CUDA_CHECK(cudaSetDevice(device));
  const int occ = prefill::find_kernel(cfg, dtype, kv_dtype).occupancy();
  const int sms = sm_count(device);
  if (prev != device) WEFT_CUDA_CHECK(cudaSetDevice(prev));
  return heuristics::persistent_grid(sms, occ);
}

prefill::PrefillWorkspaceLayout layout_for(const PrefillBounds& b, const TileConfig& cfg,
                                           int32_t num_ctas) {
  return prefill::make_layout(b.max_batch, b.max_total_q, b.num_kv_heads, b.num_qo_heads / b.num_kv_heads, cfg.cta_q,
                              cfg.head_dim, num_ctas, prefill::prefill_head_fold(b.num_kv_heads, num_ctas));
}

}  // namespace

BatchPrefillWrapper::BatchPrefillWrapper() : s_(new State) {}
BatchPrefillWrapper::~BatchPrefillWrapper() { delete s_; }

std::size_t BatchPrefillWrapper::workspace_size(const PrefillBounds& b) { return workspace_size(b, 0); }

std::size_t BatchPrefillWrapper::workspace_size(const PrefillBounds& b, int32_t max_ctas) {
  prefill::check_bounds(b);
  WEFT_CHECK_ARG(max_ctas >= 0, "max_ctas", "must be >= 0, got " << max_ctas);
  const int device = device_of(b.device);
  std::size_t need = 0;
  // Each grid a plan may run on: the persistent grid, and the capped one (max_ctas) below it.
  const auto grids = [&](int32_t full) {
    std::vector<int32_t> g{full};
    if (max_ctas > 0 && max_ctas < full) g.push_back(max_ctas);
    return g;
  };
  // Any configuration of this head_dim may be chosen at plan time: size for the largest. The
  // occupancy (hence the grid) does not depend on the dtype: both dtypes compile alike; take the
  // max anyway (fp8-KV kernels too, where instantiated).
  for (const TileConfig& c : prefill::instantiated_configs()) {
    if (c.head_dim != b.head_dim) continue;
    for (DType dt : {DType::kFloat16, DType::kBFloat16}) {
      for (DType kv : {dt, DType::kFloat8E4M3, DType::kFloat8E5M2}) {
        if (kv != dt && prefill::lookup_kernel(c, dt, kv).launch == nullptr) continue;
        for (int32_t ctas : grids(num_ctas_for(c, dt, kv, device)))
          need = std::max(need, layout_for(b, c, ctas).total_bytes);
      }
    }
  }
  // The sm90 mainloop's plan (128-row tiles, one CTA per SM) where it may be chosen.
  for (DType dt : {DType::kFloat16, DType::kBFloat16}) {
    // (fp8 pools run the same plan shape: eligible only where the 16-bit kernel is.)
    if (!prefill::sm90::eligible(device, b.head_dim, dt, b.num_qo_heads / b.num_kv_heads, false, 0, dt)) continue;
    const TileConfig c{b.head_dim, prefill::sm90::kBlockM, prefill::sm90::block_n(b.head_dim)};
    for (int32_t ctas : grids(sm_count(device)))
      need = std::max(need, prefill::sm90::workspace_bytes(layout_for(b, c, ctas).total_bytes, ctas));
  }
  return need;
}

void BatchPrefillWrapper::plan_paged(const int32_t* qo_indptr_host, const PageTable& table,
                                     int64_t page_size, int32_t num_qo_heads, int32_t num_kv_heads,
                                     int32_t head_dim, DType dtype, const AttentionVariant& variant,
                                     void* workspace, std::size_t workspace_bytes,
                                     const PrefillBounds& bounds, cudaStream_t stream,
                                     const int32_t* mask_indptr_host, const PrefillPlanOptions& opt) {
  check::in_range(page_size, "page_size", 1, INT32_MAX);
  prefill::check_table_host(table, page_size);
  std::vector<int32_t>& kv_len = s_->kv_len_next;
  kv_len.resize(table.batch_size);
  for (int32_t b = 0; b < table.batch_size; ++b)
    kv_len[b] = static_cast<int32_t>(kv_len_of(table, page_size, b));
  plan_common(qo_indptr_host, table.batch_size, kv_len, true, page_size, num_qo_heads, num_kv_heads,
              head_dim, dtype, variant, workspace, workspace_bytes, bounds, stream, mask_indptr_host,
              opt);
}

void BatchPrefillWrapper::plan_ragged(const int32_t* qo_indptr_host, const int32_t* kv_indptr_host,
                                      int32_t batch, int32_t num_qo_heads, int32_t num_kv_heads,
                                      int32_t head_dim, DType dtype, const AttentionVariant& variant,
                                      void* workspace, std::size_t workspace_bytes,
                                      const PrefillBounds& bounds, cudaStream_t stream,
                                      const int32_t* mask_indptr_host,
                                      const PrefillPlanOptions& opt) {
  WEFT_CHECK_ARG(batch >= 0, "batch", "must be >= 0, got " << batch);
  check::indptr(kv_indptr_host, batch, "kv_indptr");  // null only for an empty step (batch 0)
  std::vector<int32_t>& kv_len = s_->kv_len_next;
  kv_len.resize(batch);
  for (int32_t b = 0; b < batch; ++b) kv_len[b] = kv_indptr_host[b + 1] - kv_indptr_host[b];
  plan_common(qo_indptr_host, batch, kv_len, false, 0, num_qo_heads, num_kv_heads, head_dim, dtype,
              variant, workspace, workspace_bytes, bounds, stream, mask_indptr_host, opt);
  if (kv_indptr_host != nullptr)
    s_->kv_indptr_host.assign(kv_indptr_host, kv_indptr_host + batch + 1);
  else
    s_->kv_indptr_host.assign(1, 0);
}

void BatchPrefillWrapper::plan_common(const int32_t* qo_indptr_host, int32_t batch,
                                      const std::vector<int32_t>& kv_len, bool paged,
                                      int64_t page_size, int32_t num_qo_heads, int32_t num_kv_heads,
                                      int32_t head_dim, DType dtype,
                                      const AttentionVariant& variant, void* workspace,
                                      std::size_t workspace_bytes, const PrefillBounds& bounds,
                                      cudaStream_t stream, const int32_t* mask_indptr_host,
                                      const PrefillPlanOptions& opt) {
  // ---- validation (nothing is modified before all of it passed) ----
  prefill::check_bounds(bounds);
  WEFT_CHECK_ARG(batch <= bounds.max_batch, "batch",
                 "batch " << batch << " exceeds bounds.max_batch " << bounds.max_batch);
  WEFT_CHECK_ARG(num_qo_heads == bounds.num_qo_heads, "num_qo_heads",
                 "expected bounds.num_qo_heads " << bounds.num_qo_heads << ", got " << num_qo_heads);
  WEFT_CHECK_ARG(num_kv_heads == bounds.num_kv_heads, "num_kv_heads",
                 "expected bounds.num_kv_heads " << bounds.num_kv_heads << ", got " << num_kv_heads);
  WEFT_CHECK_ARG(head_dim == bounds.head_dim, "head_dim",
                 "expected bounds.head_dim " << bounds.head_dim << ", got " << head_dim);
  WEFT_CHECK_ARG(dtype == DType::kFloat16 || dtype == DType::kBFloat16, "dtype",
                 "expected f16 or bf16, got " << dtype_name(dtype));
  check::indptr(qo_indptr_host, batch, "qo_indptr", bounds.max_total_q);  // null: batch 0 only
  prefill::check_variant(variant);
  if (variant.mask == MaskMode::kCustom)
    prefill::check_mask_indptr(mask_indptr_host, qo_indptr_host, kv_len);
  WEFT_CHECK_ARG(opt.cta_q == 0 || opt.cta_q == 16 || opt.cta_q == 64 || opt.cta_q == 128,
                 "opt.cta_q", "expected 0, 16, 64 or 128, got " << opt.cta_q);
  WEFT_CHECK_ARG(opt.min_chunk >= 0, "opt.min_chunk", "must be >= 0, got " << opt.min_chunk);
  WEFT_CHECK_ARG(opt.max_ctas >= 0, "opt.max_ctas", "must be >= 0, got " << opt.max_ctas);
  // fp8 K/V pools (opt.kv_dtype): the FA2 kernel's fp8 instances (src/instances.txt: bf16 q / out,
  // head_dim 128, paged; the built-in variants without ALiBi) and the sm90 mainloop's (below).
  const DType kv_dtype = opt.kv_dtype.value_or(dtype);
  const bool fp8 = kv_dtype != dtype;
  if (fp8) {
    WEFT_CHECK_ARG(kv_dtype == DType::kFloat8E4M3 || kv_dtype == DType::kFloat8E5M2, "opt.kv_dtype",
                   "expected q's dtype " << dtype_name(dtype) << ", fp8_e4m3 or fp8_e5m2, got " << dtype_name(kv_dtype));
    WEFT_CHECK_ARG(dtype == DType::kBFloat16, "dtype", "fp8 K/V pools take bf16 q / out, got " << dtype_name(dtype));
    WEFT_CHECK_ARG(head_dim == 128, "head_dim", "fp8 K/V pools: head_dim 128 only, got " << head_dim);
    WEFT_CHECK_ARG(paged, "opt.kv_dtype", "fp8 K/V: paged pools only (plan_paged)");
    WEFT_CHECK_ARG(variant.alibi_slopes == nullptr, "variant.alibi_slopes", "not supported with fp8 K/V pools");
    WEFT_CHECK_ARG(variant.jit == nullptr, "variant.jit", "not supported with fp8 K/V pools");
    WEFT_CHECK_ARG(opt.cta_q != 64, "opt.cta_q", "fp8 K/V pools: cta_q 16 or 128 at head_dim 128, got 64");
  }
  const int32_t group = num_qo_heads / num_kv_heads;
  const int64_t total_q = qo_indptr_host != nullptr ? qo_indptr_host[batch] : 0;

  // ---- tile configuration ----
  int64_t active = 0;
  for (int32_t b = 0; b < batch; ++b) active += qo_indptr_host[b + 1] > qo_indptr_host[b];
  const double avg_rows = active ? double(total_q) * group / double(active) : 1.0;
  TileConfig cfg = prefill::choose_tiles(avg_rows, head_dim);
  // fp8: the 16- and 128-row tiles are instantiated (few kernels); the heuristic's 64-row tile
  // (17..64 rows per query tile) takes the 128-row one (its 4 warps x 32 rows, as for bf16 with
  // more rows; the padding rows cost math, not K/V traffic).
  if (fp8 && cfg.cta_q == 64)
    for (const TileConfig& c : prefill::instantiated_configs())
      if (c.head_dim == head_dim && c.cta_q == 128) cfg = c;
  // A step without query rows (an empty step) has no work, so any configuration serves it: keep
  // the previous plan's. A graph captured on that plan then replays this one as a no-op, where a
  // change of configuration would move the plan's workspace offsets under the captured kernel.
  if (active == 0 && planned_ && s_->cfg.head_dim == head_dim) cfg = s_->cfg;
  if (opt.cta_q != 0) {
    TileConfig forced{};
    for (const TileConfig& c : prefill::instantiated_configs())
      if (c.head_dim == head_dim && c.cta_q == opt.cta_q) forced = c;
    // head_dim 256 has no 128-row FA2 tile: cta_q 128 names the sm90 one there (an error below
    // where the sm90 mainloop cannot take the call).
    if (forced.head_dim == 0 && opt.cta_q == prefill::sm90::kBlockM)
      forced = TileConfig{head_dim, prefill::sm90::kBlockM, prefill::sm90::block_n(head_dim)};
    WEFT_CHECK_ARG(forced.head_dim != 0, "opt.cta_q",
                   "no kernel with cta_q " << opt.cta_q << " for head_dim " << head_dim);
    cfg = forced;
  }
  jit_detail::check_jit_variant(variant);
  const bool jit = variant.jit != nullptr;
  const int device = device_of(bounds.device);
  State& st = *s_;
  auto cached = [](auto& table, const auto& key, auto compute) {
    for (const auto& e : table)
      if (e.first == key) return e.second;
    const auto v = compute();
    table.push_back({key, v});
    return v;
  };
  const auto sm_count_of = [&] { return cached(st.sms, device, [&] { return sm_count(device); }); };
  // Mainloop: the sm90 kernel (wgmma + TMA, 128 x 128 tiles, one CTA per SM) where the heuristic
  // chose the 128-row tile and the device/arguments allow it; the FA2 kernel otherwise.
  // ALiBi runs on either (the sm90 consumer's bias step: sm90_consumer.cuh); run-time compiled
  // variants (weft/jit.h) on the FA2 kernel only (their logit hook is compiled into FA2 tiles by
  // the JIT; the sm90 mainloop has no JIT instances). fp8 K/V pools: kAuto and kSm90 take the sm90 mainloop's fp8 instances where
  // they can run (sm90_fp8.cuh: bf16 q, head_dim 128, page sizes of sm90::shape_supported; measured
  // faster than the FA2 kernel's: heuristics::prefill_auto_prefers_sm90), FA2's elsewhere.
  WEFT_CHECK_ARG(opt.mainloop == PrefillMainloop::kAuto || opt.mainloop == PrefillMainloop::kFA2 ||
                     opt.mainloop == PrefillMainloop::kSm90,
                 "opt.mainloop", "unknown mainloop " << static_cast<int>(opt.mainloop));
  const bool force_sm90 = opt.mainloop == PrefillMainloop::kSm90;
  WEFT_CHECK_ARG(!force_sm90 || opt.cta_q == 0 || opt.cta_q == prefill::sm90::kBlockM, "opt.cta_q",
                 "mainloop kSm90 runs 128-row tiles, got cta_q " << opt.cta_q);
  // head_dim 256: the FA2 tiles stop at 64 rows (O alone is 128 registers per thread), so the
  // sm90 128-row tile takes the calls for which prefill_tiles picks 128 rows at the smaller head
  // dims (more than 64 packed query rows per request; the POD planner's rule as well).
  const bool wide_tile = cfg.cta_q == prefill::sm90::kBlockM || (head_dim == 256 && opt.cta_q == 0 && avg_rows > 64);
  const bool want_sm90 =
      force_sm90 || (opt.mainloop == PrefillMainloop::kAuto && heuristics::prefill_auto_prefers_sm90(wide_tile, fp8));
  const bool use_sm90 =
      want_sm90 && !jit &&
      cached(st.sm90_eligible, State::Sm90Key{device, head_dim, dtype, kv_dtype, group, paged, page_size},
             [&] { return prefill::sm90::eligible(device, head_dim, dtype, group, paged, page_size, kv_dtype); });
  WEFT_CHECK_ARG(!force_sm90 || use_sm90, "opt.mainloop",
                 "kSm90: the Hopper mainloop cannot run this call (compute capability 9.0 with sm_90a code, "
                 "head_dim / dtype / kv_dtype instances, GQA group dividing 128, page size tiling "
                     << prefill::sm90::block_n(head_dim)
                     << " keys; no run-time compiled variant: those run on the FA2 mainloop only)");
  if (use_sm90) cfg = TileConfig{head_dim, prefill::sm90::kBlockM, prefill::sm90::block_n(head_dim)};
  // On the FA2 kernel, ALiBi needs a tile whose kernel has the bias step (kernel/params.h
  // bias_supported): the heuristic's d128 x 128-row tile gives way to the 64-row one; a forced
  // tile without it is an error. (The sm90 mainloop, chosen above where it can run the call, has
  // the bias step in every instance.) A run-time compiled variant (weft/jit.h) takes the same
  // tiles (its logit hook is the same per-tile step), unless a tile is forced (it is compiled
  // with the hook whatever the tile).
  if (!use_sm90 && (variant.alibi_slopes != nullptr || jit) && !prefill::bias_supported(cfg.head_dim, cfg.cta_q)) {
    WEFT_CHECK_ARG(opt.cta_q == 0 || jit, "opt.cta_q",
                   "cta_q " << opt.cta_q << " at head_dim " << head_dim
                            << " has no ALiBi kernel on the FA2 mainloop (use 16 or 64, or the sm90 mainloop)");
    if (opt.cta_q == 0)
      for (const TileConfig& c : prefill::instantiated_configs())
        if (c.head_dim == head_dim && c.cta_q == 64) cfg = c;
  }
  const auto fa2_has = [&](const TileConfig& t) {
    for (const TileConfig& c : prefill::instantiated_configs())
      if (c.head_dim == t.head_dim && c.cta_q == t.cta_q && c.cta_kv == t.cta_kv) return true;
    return false;
  };
  WEFT_CHECK_ARG(use_sm90 || fa2_has(cfg), "opt.cta_q",
                 "cta_q " << cfg.cta_q << " at head_dim " << head_dim
                          << " is the sm90 mainloop's tile only, which cannot run this call (device, "
                             "mainloop, variant, GQA group or page size)");
  const prefill::sm90::Entry sm90_kernel = use_sm90 ? prefill::sm90::find(head_dim, dtype, kv_dtype) : prefill::sm90::Entry{};
  const prefill::KernelEntry kernel = use_sm90 ? prefill::KernelEntry{} : prefill::find_kernel(cfg, dtype, kv_dtype);
  // (sm90: one CTA per SM; eligible() checked that it fits.)
  // opt.max_ctas caps the grid (an SM partition with a kernel on another stream).
  const int32_t full_grid = use_sm90 ? sm_count_of()
                                     : cached(st.fa2_grid, State::GridKey{device, cfg, dtype, kv_dtype},
                                              [&] { return num_ctas_for(cfg, dtype, kv_dtype, device); });
  const int32_t num_ctas = opt.max_ctas > 0 ? std::min(full_grid, opt.max_ctas) : full_grid;
  prefill::PrefillWorkspaceLayout layout = layout_for(bounds, cfg, num_ctas);
  const std::size_t plan_bytes = layout.total_bytes;
  if (use_sm90) layout.total_bytes = prefill::sm90::workspace_bytes(plan_bytes, num_ctas);
  check::workspace(workspace, workspace_bytes, layout.total_bytes, "workspace");
  // The JIT kernel of this tile (compiled, read from the cache, or already loaded). Its grid is
  // the ahead-of-time kernel's of the same tile (num_ctas_for).
  jit_detail::PlanState jit_state;
  if (jit) {
    const jit_detail::KernelSpec spec{"prefill_q" + std::to_string(cfg.cta_q) + "_kv" + std::to_string(cfg.cta_kv),
                                      dtype == DType::kFloat16 ? "f16" : "bf16", head_dim};
    jit_state.kernel = variant.jit->impl().get_kernel(spec, prefill::smem_bytes_of(cfg.head_dim, cfg.cta_q, cfg.cta_kv));
    jit_state.params.init(jit_state.kernel->layout, variant.jit_params, variant.jit->source().params_size);
  }

  prefill::PlanRequest& req = s_->req;
  req.qo_len.resize(batch);
  for (int32_t b = 0; b < batch; ++b) req.qo_len[b] = qo_indptr_host[b + 1] - qo_indptr_host[b];
  req.kv_len.assign(kv_len.begin(), kv_len.end());
  req.num_kv_heads = num_kv_heads;
  req.group_size = group;
  req.causal = variant.mask == MaskMode::kCausal;
  req.window_left = variant.window_left;
  req.cta_q = cfg.cta_q;
  req.cta_kv = cfg.cta_kv;
  req.num_ctas = num_ctas;
  req.head_fold = layout.plan.bounds().head_fold;
  req.allow_split = opt.allow_split_kv;
  req.min_chunk = opt.min_chunk;
  req.deal_heads_together = opt.deal_heads_together;
  req.heads_in_turn = heuristics::prefill_heads_in_turn(use_sm90);
  prefill::SegmentedPlan& sp = s_->sp;
  s_->planner.make_plan(req, sp);

  // Host image of the metadata (the segment arrays at its end: PrefillWorkspaceLayout) in a pinned
  // staging slot whose previous copy has left it (plan::StagingRing::acquire: no host wait while
  // another slot is free), then ONE asynchronous copy and the slot's event.
  const std::size_t meta_bytes = layout.plan.metadata_bytes();
  if (!st.staging || st.staging->slot_bytes() < meta_bytes) {
    st.staging.reset();  // its destructor waits for the copies still reading the old slots
    auto ring = std::make_unique<plan::StagingRing>();
    ring->allocate(meta_bytes, heuristics::plan_staging_slots(meta_bytes));
    st.staging = std::move(ring);
    st.staging_images.assign(std::size_t(st.staging->slots()), plan::WorkspaceLayout::Image{});  // cleared in full
  }
  const plan::PlanBounds& pb = layout.plan.bounds();
  const plan::PlanBounds& mb = st.meta_bounds;
  if (pb.max_batch != mb.max_batch || pb.max_tiles != mb.max_tiles || pb.num_ctas != mb.num_ctas ||
      pb.tile_q != mb.tile_q || pb.head_dim != mb.head_dim || pb.head_fold != mb.head_fold ||
      pb.tail_bytes != mb.tail_bytes) {
    for (plan::WorkspaceLayout::Image& im : st.staging_images) im = plan::WorkspaceLayout::Image{};  // another layout
    st.meta_bounds = pb;
  }
  const int32_t slot = st.staging->acquire();
  unsigned char* meta = st.staging->slot(slot);
  layout.plan.serialize(sp.plan, meta, &st.staging_images[std::size_t(slot)]);  // throws if the plan exceeds the bounds
  prefill::segment_image(layout, sp, kv_len, meta + layout.off_seg_request);
  WEFT_CUDA_CHECK(cudaMemcpyAsync(workspace, meta, meta_bytes, cudaMemcpyHostToDevice, stream));
  st.staging->enqueued(slot, stream);

  State& s = *s_;
  s.dtype = dtype;
  s.kv_dtype = kv_dtype;
  s.num_qo_heads = num_qo_heads;
  s.num_kv_heads = num_kv_heads;
  s.head_dim = head_dim;
  s.batch = batch;
  s.total_q = total_q;
  s.variant = variant;
  s.paged = paged;
  s.page_size = page_size;
  s.kv_len = kv_len;
  s.kv_indptr_host.clear();
  s.cfg = cfg;
  s.num_ctas = num_ctas;
  s.layout = layout;
  s.workspace = workspace;
  s.kernel = kernel;
  s.jit = std::move(jit_state);
  s.sm90 = use_sm90;
  s.sm90_kernel = sm90_kernel;
  s.sm90_maps_off = prefill::sm90::map_scratch_offset(plan_bytes);
  // Fixed launch topology for graphs: the FA2 / run-time compiled kernels' merge kernel runs
  // whenever splitting is allowed (it reads the number of merges from the workspace; zero is a
  // no-op). The sm90 kernel merges split tiles itself (sm90_merge.cuh: the CTA that counts a
  // tile's last slot, counters zeroed by every plan copy), so its run() is one launch whatever
  // the plan.
  s.launch_merge = opt.allow_split_kv && !use_sm90;
  info_.cta_q = cfg.cta_q;
  info_.cta_kv = cfg.cta_kv;
  info_.num_ctas = num_ctas;
  // Counted per KV head (the launch runs head_fold items per item of a head-folded plan).
  info_.num_items = sp.plan.num_items() * sp.plan.head_fold;
  info_.num_merges = sp.plan.num_merges() * sp.plan.head_fold;
  info_.split = sp.plan.split;
  info_.sm90 = use_sm90;
  planned_ = true;
}

void BatchPrefillWrapper::check_common(const TensorView& q, const TensorView& out,
                                       const TensorView* lse, const CustomMaskDevice* mask) const {
  WEFT_CHECK_ARG(planned_, "plan", "run called before plan");
  const State& s = *s_;
  check::on_device(q, "q");
  check::dtype_is(q, "q", s.dtype);
  check::shape_is(q, "q", {s.total_q, s.num_qo_heads, s.head_dim});
  check::inner_contiguous(q, "q", 16);
  check::on_device(out, "out");
  check::dtype_is(out, "out", s.dtype);
  check::shape_is(out, "out", {s.total_q, s.num_qo_heads, s.head_dim});
  check::inner_contiguous(out, "out", 16);
  WEFT_CHECK_ARG(lse != nullptr || s.jit.kernel == nullptr || s.jit.kernel->softmax, "lse",
                 "the planned run-time compiled variant has kSoftmax = false: its output needs the LSE");
  if (lse != nullptr) {
    check::on_device(*lse, "lse");
    check::dtype_is(*lse, "lse", DType::kFloat32);
    check::shape_is(*lse, "lse", {s.total_q, s.num_qo_heads});
    WEFT_CHECK_ARG(lse->strides[1] == 1, "lse", "head stride must be 1, got " << lse->strides[1]);
    // Each LSE is stored as one float (attention epilogue and merge): a pointer that is not
    // 4-byte aligned faults the launch (cudaErrorMisalignedAddress, sticky: the caller's context
    // would be lost). The token stride counts floats, so later rows stay aligned.
    check::aligned(lse->data, "lse", sizeof(float));
  }
  if (s.variant.mask == MaskMode::kCustom) {
    // An empty step (batch 0) has no mask segments: the mask (or its arrays) may be null.
    WEFT_CHECK_ARG(mask != nullptr || s.batch == 0, "mask", "planned with a custom mask: mask must be given");
    if (mask != nullptr) {
      // Bits are loaded one byte at a time (mask.cuh, custom_bit): any address will do.
      if (s.batch > 0) check::not_null(mask->bits, "mask.bits");
      // mask_indptr entries are loaded as int32.
      check::device_index_array(mask->indptr, s.batch > 0 ? s.batch + 1 : 0, "mask.indptr");
    }
  }
}

void BatchPrefillWrapper::launch(const void* params_ptr, const TensorView& out,
                                 const TensorView* lse, cudaStream_t stream) {
  const State& s = *s_;
  prefill::PrefillParams p = *static_cast<const prefill::PrefillParams*>(params_ptr);
  p.o = out.data;
  p.o_stride_token = out.strides[0];
  p.o_stride_head = out.strides[1];
  p.lse = lse ? static_cast<float*>(lse->data) : nullptr;
  p.lse_stride_token = lse ? lse->strides[0] : 0;
  prefill::set_plan(p, s.layout, s.workspace, s.num_qo_heads / s.num_kv_heads);
  // The variant's runtime parameters (attention/variant.cuh; the custom mask's arrays were set by
  // the run call).
  prefill::set_variant(p, s.variant, s.head_dim);
  if (s.sm90) {
    prefill::sm90::Shapes sh;
    sh.q_rows = s.total_q;
    sh.num_qo_heads = s.num_qo_heads;
    sh.num_kv_heads = s.num_kv_heads;
    sh.k_rows = p.k_rows;
    sh.v_rows = p.v_rows;
    sh.map_scratch = static_cast<char*>(s.workspace) + s.sm90_maps_off;
    s.sm90_kernel.launch(p, sh, s.num_ctas, stream);
  } else if (s.jit.kernel != nullptr) {
    s.jit.params.set_base(&p, sizeof(p));
    const TileConfig& c = s.cfg;
    jit_detail::launch(*s.jit.kernel, s.jit.params, dim3(s.num_ctas),
                       dim3(prefill::threads_of(c.head_dim, c.cta_q, c.cta_kv)),
                       prefill::smem_bytes_of(c.head_dim, c.cta_q, c.cta_kv), stream);
  } else {
    s.kernel.launch(p, s.num_ctas, stream);
  }
  if (s.launch_merge) prefill::launch_merge(p, out, s.dtype, s.head_dim, s.num_ctas, stream);
  if (s.jit.kernel != nullptr && !s.jit.kernel->softmax)  // O *= exp(LSE): unnormalized output
    jit_detail::launch_scale_by_lse(*s.jit.kernel, out.data, out.strides[0], out.strides[1], p.lse,
                                    p.lse_stride_token, static_cast<int32_t>(s.total_q), s.num_qo_heads,
                                    s.head_dim, stream);
}

void BatchPrefillWrapper::run_paged(const TensorView& q, const PagedKVCache& cache,
                                    const PageTable& table, const TensorView& out,
                                    const TensorView* lse, cudaStream_t stream,
                                    const CustomMaskDevice* mask) {
  check_common(q, out, lse, mask);
  const State& s = *s_;
  WEFT_CHECK_ARG(s.paged, "plan", "planned for ragged K/V (plan_ragged): call run_ragged");
  validate_paged_kv(cache, table);  // fp8 pools: K and V alike, scales present (16-bit: absent)
  check::dtype_is(cache.k_pages, "k_pages", s.kv_dtype);
  WEFT_CHECK_ARG(cache.page_size() == s.page_size, "page_size",
                 "planned " << s.page_size << ", cache has " << cache.page_size());
  WEFT_CHECK_ARG(cache.num_kv_heads() == s.num_kv_heads, "num_kv_heads",
                 "planned " << s.num_kv_heads << ", cache has " << cache.num_kv_heads());
  WEFT_CHECK_ARG(cache.head_dim() == s.head_dim, "head_dim",
                 "planned " << s.head_dim << ", cache has " << cache.head_dim());
  WEFT_CHECK_ARG(table.batch_size == s.batch, "table",
                 "batch_size " << table.batch_size << " differs from the planned " << s.batch);
  for (int32_t b = 0; b < s.batch; ++b)
    WEFT_CHECK_ARG(kv_len_of(table, s.page_size, b) == s.kv_len[b], "table",
                   "request " << b << " has kv_len " << kv_len_of(table, s.page_size, b)
                              << ", planned " << s.kv_len[b] << " (re-plan after appending)");
  // A plan without items (an empty step) makes the kernels read only the workspace (their item
  // ranges and merge count, all empty), so they are launched whenever every pointer is given: a
  // graph captured here replays correctly after a re-plan with the same buffers. With a null
  // pointer nothing is launched, so a graph captured here cannot dereference it after a re-plan.
  const bool custom = s.variant.mask == MaskMode::kCustom;
  const bool bound = q.data != nullptr && out.data != nullptr && (lse == nullptr || lse->data != nullptr) &&
                     cache.k_pages.data != nullptr && cache.v_pages.data != nullptr &&
                     table.indptr.device != nullptr && table.indices.device != nullptr &&
                     (!custom || (mask != nullptr && mask->bits != nullptr && mask->indptr != nullptr));
  if (info_.num_items == 0 && !bound) return;
  prefill::PrefillParams p;
  p.q = q.data;
  p.q_stride_token = q.strides[0];
  p.q_stride_head = q.strides[1];
  prefill::set_paged_kv(p, cache, table, s.page_size);
  if (s.variant.mask == MaskMode::kCustom) {
    p.custom_mask = mask->bits;
    p.mask_indptr = mask->indptr;
  }
  launch(&p, out, lse, stream);
}

void BatchPrefillWrapper::run_ragged(const TensorView& q, const TensorView& k, const TensorView& v,
                                     const int32_t* kv_indptr, const TensorView& out,
                                     const TensorView* lse, cudaStream_t stream,
                                     const CustomMaskDevice* mask) {
  check_common(q, out, lse, mask);
  const State& s = *s_;
  WEFT_CHECK_ARG(!s.paged, "plan", "planned for paged K/V (plan_paged): call run_paged");
  const int64_t total_kv = s.kv_indptr_host.empty() ? 0 : s.kv_indptr_host.back();
  for (const auto& [t, name] : {std::pair<const TensorView*, const char*>{&k, "k"}, {&v, "v"}}) {
    check::on_device(*t, name);
    check::dtype_is(*t, name, s.dtype);
    check::shape_is(*t, name, {-1, s.num_kv_heads, s.head_dim});
    check::inner_contiguous(*t, name, 16);
    WEFT_CHECK_ARG(t->shape[0] >= total_kv, name,
                   "has " << t->shape[0] << " rows, the planned kv_indptr needs " << total_kv);
  }
  // Device kv_indptr: loaded as int32 by the kernel (4-byte aligned); may be null only for an
  // empty step.
  check::device_index_array(kv_indptr, s.batch > 0 ? s.batch + 1 : 0, "kv_indptr");
  // Launch rule of an empty step: see run_paged.
  const bool custom = s.variant.mask == MaskMode::kCustom;
  const bool bound = q.data != nullptr && out.data != nullptr && (lse == nullptr || lse->data != nullptr) &&
                     k.data != nullptr && v.data != nullptr && kv_indptr != nullptr &&
                     (!custom || (mask != nullptr && mask->bits != nullptr && mask->indptr != nullptr));
  if (info_.num_items == 0 && !bound) return;
  prefill::PrefillParams p;
  p.q = q.data;
  p.q_stride_token = q.strides[0];
  p.q_stride_head = q.strides[1];
  p.k = k.data;
  p.v = v.data;
  p.k_page_stride = k.strides[0];
  p.k_head_stride = k.strides[1];
  p.v_page_stride = v.strides[0];
  p.v_head_stride = v.strides[1];
  p.paged = 0;
  p.kv_indptr = kv_indptr;
  p.k_rows = k.shape[0];
  p.v_rows = v.shape[0];
  if (s.variant.mask == MaskMode::kCustom) {
    p.custom_mask = mask->bits;
    p.mask_indptr = mask->indptr;
  }
  launch(&p, out, lse, stream);
}

}  // namespace weft
