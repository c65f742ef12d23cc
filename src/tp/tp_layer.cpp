// weft::TpLayer: the TP layer runner (weft/tp_layer.h): buffers, planning of the whole batch and
// of the two token halves, and the three schedules (unsplit, split, split + overlap).
#include "weft/tp_layer.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "common/cuda_check.h"
#include "common/device_allocation.h"
#include "tp/gemm_lt.h"
#include "tp/tp_kernels.h"
#include "tp/tp_plan.h"
#include "weft/error.h"
#include "weft/paged_kv.h"
#include "weft/prefill.h"

namespace weft {

const char* tp_schedule_name(TpSchedule s) {
  switch (s) {
    case TpSchedule::kUnsplit: return "unsplit";
    case TpSchedule::kSplit: return "split";
    case TpSchedule::kOverlap: return "overlap";
  }
  return "unknown";
}

namespace {

using detail::DeviceAllocation;

// Device mirrors of one StepTable's index arrays (sized for the bounds).
struct DeviceTable {
  DeviceAllocation indptr, indices, last;
  PageTable table;  // host pointers into the StepPlan, device pointers into the allocations
};

// Rows [r0, r1) of the step and the attention plan that covers them.
struct Half {
  int64_t r0 = 0, r1 = 0;
  int which = 0;  // 0 full, 1 A, 2 B
  int64_t rows() const { return r1 - r0; }
};

}  // namespace

struct TpLayer::Impl {
  Communicator& comm;
  TpLayerShape sh;
  TpLayerBounds bd;
  int device = 0, sm_count = 0;
  int64_t n_qkv = 0, q_width = 0, max_pages = 0;
  std::size_t es = 2;

  DeviceAllocation w_qkv, w_o, w_gu, w_down, w_norm1, w_norm2;
  DeviceAllocation qkv, attn, o, h2, gu, act, down;
  DeviceAllocation k_pages, v_pages;
  DeviceAllocation batch_indices, positions;
  DeviceTable tables[3];  // full, A, B
  BatchPrefillWrapper prefill[3];
  DeviceAllocation prefill_ws[3];
  std::size_t prefill_ws_bytes = 0;
  PrefillBounds pbounds;
  tp::LtGemm gemm;
  DeviceAllocation gemm_ws;
  cudaStream_t comm_stream = nullptr;
  // Overlap schedule: attention done (A, B), comm1 done (A, B), MLP done (A, B), comm2 of B done.
  cudaEvent_t ev_attn[2] = {}, ev_comm1[2] = {}, ev_mlp[2] = {}, ev_comm2 = nullptr;

  bool planned = false;
  TpLayerOptions opt;
  tp::StepPlan plan;
  TokenSplit split;
  int gemm_sms = 0;  // SM count target of every GEMM (0: the device's)

  Impl(Communicator& c, const TpLayerShape& s, const TpLayerBounds& b) : comm(c), sh(s), bd(b) {}
  ~Impl() {
    for (cudaEvent_t e : {ev_attn[0], ev_attn[1], ev_comm1[0], ev_comm1[1], ev_mlp[0], ev_mlp[1], ev_comm2})
      if (e) cudaEventDestroy(e);
    if (comm_stream) cudaStreamDestroy(comm_stream);
  }

  template <class T = char>
  T* at(const DeviceAllocation& a, int64_t elem) const {
    return reinterpret_cast<T*>(static_cast<char*>(a.get()) + elem * static_cast<int64_t>(es));
  }
  TensorView view2(const DeviceAllocation& a, int64_t r0, int64_t rows, int64_t cols) const {
    return TensorView(at(a, r0 * cols), sh.dtype, {rows, cols}, Device::kCUDA, device);
  }

  // QKV GEMM, K/V append, attention, O GEMM of one half.
  void attention_part(const Half& h, const void* x, cudaStream_t s) {
    if (h.rows() == 0) return;
    const int64_t H = sh.hidden, hq = sh.num_qo_heads, hkv = sh.num_kv_heads, d = sh.head_dim;
    gemm.run(static_cast<const char*>(x) + h.r0 * H * es, H, w_qkv.get(), H, at(qkv, h.r0 * n_qkv), n_qkv, h.rows(),
             n_qkv, H, sh.dtype, gemm_sms, s);
    char* base = at(qkv, h.r0 * n_qkv);
    const TensorView q(base, sh.dtype, {h.rows(), hq, d}, {n_qkv, d, 1}, Device::kCUDA, device);
    const TensorView k(base + hq * d * es, sh.dtype, {h.rows(), hkv, d}, {n_qkv, d, 1}, Device::kCUDA, device);
    const TensorView v(base + (hq + hkv) * d * es, sh.dtype, {h.rows(), hkv, d}, {n_qkv, d, 1}, Device::kCUDA,
                       device);
    const DeviceTable& t = tables[h.which];
    IndexArray bi{batch_indices.as<int32_t>() + h.r0, plan.batch_indices.data() + h.r0, h.rows()};
    IndexArray pos{positions.as<int32_t>() + h.r0, plan.positions.data() + h.r0, h.rows()};
    PagedKVCache cache;
    cache.k_pages = TensorView(k_pages.get(), sh.dtype, {max_pages, bd.page_size, hkv, d}, Device::kCUDA, device);
    cache.v_pages = TensorView(v_pages.get(), sh.dtype, {max_pages, bd.page_size, hkv, d}, Device::kCUDA, device);
    cache.layout = KVLayout::kNHD;
    append_paged_kv(k, v, bi, pos, cache, t.table, s);
    const TensorView out(at(attn, h.r0 * q_width), sh.dtype, {h.rows(), hq, d}, Device::kCUDA, device);
    prefill[h.which].run_paged(q, cache, t.table, out, nullptr, s);
    gemm.run(at(attn, h.r0 * q_width), q_width, w_o.get(), q_width, at(o, h.r0 * H), H, h.rows(), H, q_width, sh.dtype,
             gemm_sms, s);
  }

  // Gate/up GEMM, SiLU-mul, down GEMM of one half.
  void mlp_part(const Half& h, cudaStream_t s) {
    if (h.rows() == 0) return;
    const int64_t H = sh.hidden, I = sh.intermediate;
    gemm.run(at(h2, h.r0 * H), H, w_gu.get(), H, at(gu, h.r0 * 2 * I), 2 * I, h.rows(), 2 * I, H, sh.dtype, gemm_sms, s);
    tp::launch_silu_mul(at(gu, h.r0 * 2 * I), at(act, h.r0 * I), h.rows(), I, sh.dtype, s);
    gemm.run(at(act, h.r0 * I), I, w_down.get(), I, at(down, h.r0 * H), H, h.rows(), H, I, sh.dtype, gemm_sms, s);
  }

  // Fused all-reduce + residual + RMSNorm of one half: after attention (h2 = norm1(...)) or after
  // the MLP (out = norm2(...)).
  void comm_part(const Half& h, bool second, const TensorView& residual, const TensorView& out, cudaStream_t s) {
    if (h.rows() == 0) return;
    const int64_t H = sh.hidden;
    const TensorView x = view2(second ? down : o, h.r0, h.rows(), H);
    const TensorView res(static_cast<char*>(residual.data) + h.r0 * residual.strides[0] * es, sh.dtype,
                         {h.rows(), H}, {residual.strides[0], 1}, Device::kCUDA, device);
    const TensorView w(second ? w_norm2.get() : w_norm1.get(), sh.dtype, {H}, Device::kCUDA, device);
    const TensorView dst = second ? TensorView(static_cast<char*>(out.data) + h.r0 * H * es, sh.dtype,
                                               {h.rows(), H}, Device::kCUDA, device)
                                  : view2(h2, h.r0, h.rows(), H);
    fused_allreduce_add_rmsnorm(comm, x, res, w, sh.eps, dst, opt.comm_ctas, s);
  }
};

TpLayer::TpLayer(Communicator& comm, const TpLayerShape& shape, const TpLayerBounds& bounds, uint64_t seed)
    : impl_(new Impl(comm, shape, bounds)) {
  Impl& m = *impl_;
  WEFT_CHECK_ARG(shape.dtype == DType::kBFloat16 || shape.dtype == DType::kFloat16, "shape.dtype",
                 "expected f16 or bf16, got " << dtype_name(shape.dtype));
  WEFT_CHECK_ARG(shape.hidden > 0 && shape.hidden % 8 == 0, "shape.hidden", "must be a positive multiple of 8, got "
                                                                                 << shape.hidden);
  WEFT_CHECK_ARG(shape.num_qo_heads > 0 && shape.num_kv_heads > 0 && shape.num_qo_heads % shape.num_kv_heads == 0,
                 "shape.num_kv_heads", "need num_qo_heads % num_kv_heads == 0 (both > 0), got "
                                           << shape.num_qo_heads << " / " << shape.num_kv_heads);
  WEFT_CHECK_ARG(shape.head_dim == 64 || shape.head_dim == 128 || shape.head_dim == 256, "shape.head_dim",
                 "expected 64, 128 or 256, got " << shape.head_dim);
  WEFT_CHECK_ARG(shape.intermediate > 0 && shape.intermediate % 8 == 0, "shape.intermediate",
                 "must be a positive multiple of 8, got " << shape.intermediate);
  WEFT_CHECK_ARG(std::isfinite(shape.eps) && shape.eps > 0, "shape.eps", "must be finite and > 0");
  WEFT_CHECK_ARG(bounds.max_tokens > 0, "bounds.max_tokens", "must be > 0, got " << bounds.max_tokens);
  WEFT_CHECK_ARG(bounds.max_batch > 0, "bounds.max_batch", "must be > 0, got " << bounds.max_batch);
  WEFT_CHECK_ARG(bounds.max_kv_tokens >= bounds.max_tokens, "bounds.max_kv_tokens",
                 "must be >= max_tokens (" << bounds.max_tokens << "), got " << bounds.max_kv_tokens);
  WEFT_CHECK_ARG(bounds.page_size >= 1, "bounds.page_size", "must be >= 1, got " << bounds.page_size);
  const std::size_t need = static_cast<std::size_t>(bounds.max_tokens * shape.hidden) * dtype_size(shape.dtype);
  WEFT_CHECK_ARG(comm.capacity_bytes() >= need, "comm",
                 "capacity " << comm.capacity_bytes() << " bytes < max_tokens x hidden (" << need << " bytes)");
  m.device = comm.device();
  int cur = -1;
  WEFT_CUDA_CHECK(cudaGetDevice(&cur));
  WEFT_CHECK_ARG(cur == m.device, "comm", "the communicator uses cuda:" << m.device << ", current is cuda:" << cur);
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&m.sm_count, cudaDevAttrMultiProcessorCount, m.device));
  m.es = dtype_size(shape.dtype);
  const int64_t H = shape.hidden, I = shape.intermediate, T = bounds.max_tokens, d = shape.head_dim;
  m.q_width = int64_t{shape.num_qo_heads} * d;
  m.n_qkv = (int64_t{shape.num_qo_heads} + 2 * shape.num_kv_heads) * d;
  m.max_pages = tp::ceil_div(bounds.max_kv_tokens, bounds.page_size) + bounds.max_batch;
  auto alloc = [&](int64_t elems) { return DeviceAllocation(static_cast<std::size_t>(elems) * m.es); };
  m.w_qkv = alloc(m.n_qkv * H);
  m.w_o = alloc(H * m.q_width);
  m.w_gu = alloc(2 * I * H);
  m.w_down = alloc(H * I);
  m.w_norm1 = alloc(H);
  m.w_norm2 = alloc(H);
  m.qkv = alloc(T * m.n_qkv);
  m.attn = alloc(T * m.q_width);
  m.o = alloc(T * H);
  m.h2 = alloc(T * H);
  m.gu = alloc(T * 2 * I);
  m.act = alloc(T * I);
  m.down = alloc(T * H);
  const int64_t cache_elems = m.max_pages * bounds.page_size * shape.num_kv_heads * d;
  m.k_pages = alloc(cache_elems);
  m.v_pages = alloc(cache_elems);
  m.batch_indices = DeviceAllocation(static_cast<std::size_t>(T) * 4);
  m.positions = DeviceAllocation(static_cast<std::size_t>(T) * 4);
  for (DeviceTable& t : m.tables) {
    t.indptr = DeviceAllocation(static_cast<std::size_t>(bounds.max_batch + 1) * 4);
    t.indices = DeviceAllocation(static_cast<std::size_t>(m.max_pages) * 4);
    t.last = DeviceAllocation(static_cast<std::size_t>(bounds.max_batch) * 4);
  }
  m.pbounds.max_batch = bounds.max_batch;
  m.pbounds.max_total_q = T;
  m.pbounds.num_qo_heads = shape.num_qo_heads;
  m.pbounds.num_kv_heads = shape.num_kv_heads;
  m.pbounds.head_dim = shape.head_dim;
  m.pbounds.device = m.device;
  m.prefill_ws_bytes = BatchPrefillWrapper::workspace_size(m.pbounds);
  for (auto& ws : m.prefill_ws) ws = DeviceAllocation(m.prefill_ws_bytes);
  m.gemm_ws = DeviceAllocation(tp::LtGemm::kWorkspaceBytes);
  m.gemm.set_workspace(m.gemm_ws.get(), tp::LtGemm::kWorkspaceBytes);
  // The comm stream at the highest priority: its few CTAs are then dispatched ahead of the
  // compute stream's queued GEMM CTAs as soon as SMs free up, instead of waiting for a wave.
  int lo = 0, hi = 0;
  WEFT_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  WEFT_CUDA_CHECK(cudaStreamCreateWithPriority(&m.comm_stream, cudaStreamNonBlocking, hi));
  for (cudaEvent_t* e : {&m.ev_attn[0], &m.ev_attn[1], &m.ev_comm1[0], &m.ev_comm1[1], &m.ev_mlp[0], &m.ev_mlp[1],
                         &m.ev_comm2})
    WEFT_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  // Weights: uniform(-1/sqrt(K), 1/sqrt(K)) keeps every GEMM output O(1) for O(1) inputs; norm
  // weights around 1; the cache like projected keys / values. Distinct seeds per tensor.
  cudaStream_t s = nullptr;
  auto fill = [&](DeviceAllocation& a, int64_t n, float lo_v, float hi_v, uint64_t k) {
    tp::launch_fill_uniform(a.get(), n, lo_v, hi_v, seed * 16 + k, shape.dtype, s);
  };
  const auto inv = [](int64_t k) { return 1.f / std::sqrt(static_cast<float>(k)); };
  fill(m.w_qkv, m.n_qkv * H, -inv(H), inv(H), 1);
  fill(m.w_o, H * m.q_width, -inv(m.q_width), inv(m.q_width), 2);
  fill(m.w_gu, 2 * I * H, -inv(H), inv(H), 3);
  fill(m.w_down, H * I, -inv(I), inv(I), 4);
  fill(m.w_norm1, H, 0.5f, 1.5f, 5);
  fill(m.w_norm2, H, 0.5f, 1.5f, 6);
  fill(m.k_pages, cache_elems, -1.f, 1.f, 7);
  fill(m.v_pages, cache_elems, -1.f, 1.f, 8);
  WEFT_CUDA_CHECK(cudaDeviceSynchronize());
}

TpLayer::~TpLayer() {
  if (impl_) cudaDeviceSynchronize();  // nothing of ours may still run when the buffers go
}

void TpLayer::plan(const TpBatch& batch, const TpLayerOptions& options, cudaStream_t stream) {
  Impl& m = *impl_;
  WEFT_CHECK_ARG(options.schedule == TpSchedule::kUnsplit || options.schedule == TpSchedule::kSplit ||
                     options.schedule == TpSchedule::kOverlap,
                 "options.schedule", "unknown value " << static_cast<int>(options.schedule));
  WEFT_CHECK_ARG(options.comm_ctas >= 1 && options.comm_ctas <= kCommMaxCtas, "options.comm_ctas",
                 "must be in [1, " << kCommMaxCtas << "], got " << options.comm_ctas);
  WEFT_CHECK_ARG(options.tile_m > 0 && options.tile_n > 0, "options.tile_m", "tiles must be > 0");
  WEFT_CHECK_ARG(batch.q_lens.size() >= 1 && batch.q_lens.size() <= static_cast<std::size_t>(m.bd.max_batch),
                 "batch.q_lens", "expected 1.." << m.bd.max_batch << " requests, got " << batch.q_lens.size());
  int64_t T = 0, kv = 0;
  for (std::size_t b = 0; b < batch.q_lens.size(); ++b) {
    T += std::max(batch.q_lens[b], 0);
    if (b < batch.ctx_lens.size()) kv += std::max(batch.ctx_lens[b], 0);
  }
  kv += T;
  WEFT_CHECK_ARG(T >= 1 && T <= m.bd.max_tokens, "batch.q_lens",
                 "total tokens " << T << " not in [1, bounds.max_tokens = " << m.bd.max_tokens << "]");
  WEFT_CHECK_ARG(kv <= m.bd.max_kv_tokens, "batch.ctx_lens",
                 "context + new tokens " << kv << " > bounds.max_kv_tokens " << m.bd.max_kv_tokens);
  WEFT_CHECK_ARG(options.gemm_sms >= 0 && options.gemm_sms <= m.sm_count, "options.gemm_sms",
                 "must be in [0, " << m.sm_count << "] (0: by schedule), got " << options.gemm_sms);
  const int gemm_sms = options.gemm_sms > 0 ? options.gemm_sms
                       : options.schedule == TpSchedule::kOverlap ? m.sm_count - options.comm_ctas
                                                                   : 0;
  TokenSplit split;
  int64_t m1 = T;
  if (options.schedule != TpSchedule::kUnsplit) {
    if (options.split_tokens > 0) {
      WEFT_CHECK_ARG(options.split_tokens <= T, "options.split_tokens",
                     "must be in [1, " << T << "] (0: planned), got " << options.split_tokens);
      m1 = options.split_tokens;
    } else {
      WEFT_CHECK_ARG(options.split_tokens == 0, "options.split_tokens", "must be >= 0, got " << options.split_tokens);
      TokenSplitProblem p;
      p.tokens = T;
      p.n = 2 * m.sh.intermediate;  // the gate/up GEMM: the layer's largest
      p.tile_m = options.tile_m;
      p.tile_n = options.tile_n;
      p.sm_count = gemm_sms > 0 ? gemm_sms : m.sm_count;
      split = plan_token_split(p);
      m1 = split.can_split ? split.m1 : T;
    }
  }
  tp::StepPlan sp = tp::plan_step(batch.q_lens, batch.ctx_lens, m1, m.bd.page_size);
  m.planned = false;
  m.plan = std::move(sp);
  m.opt = options;
  m.split = split;
  m.gemm_sms = gemm_sms;
  tp::StepPlan& P = m.plan;
  WEFT_CUDA_CHECK(cudaMemcpyAsync(m.batch_indices.get(), P.batch_indices.data(), P.batch_indices.size() * 4,
                                  cudaMemcpyHostToDevice, stream));
  WEFT_CUDA_CHECK(cudaMemcpyAsync(m.positions.get(), P.positions.data(), P.positions.size() * 4,
                                  cudaMemcpyHostToDevice, stream));
  const tp::StepTable* st[3] = {&P.full, &P.a, &P.b};
  AttentionVariant causal;
  causal.mask = MaskMode::kCausal;
  for (int i = 0; i < 3; ++i) {
    DeviceTable& t = m.tables[i];
    const tp::StepTable& s = *st[i];
    WEFT_CUDA_CHECK(cudaMemcpyAsync(t.indptr.get(), s.kv_indptr.data(), s.kv_indptr.size() * 4,
                                    cudaMemcpyHostToDevice, stream));
    if (!s.kv_indices.empty())
      WEFT_CUDA_CHECK(cudaMemcpyAsync(t.indices.get(), s.kv_indices.data(), s.kv_indices.size() * 4,
                                      cudaMemcpyHostToDevice, stream));
    WEFT_CUDA_CHECK(cudaMemcpyAsync(t.last.get(), s.last_page_len.data(), s.last_page_len.size() * 4,
                                    cudaMemcpyHostToDevice, stream));
    t.table.batch_size = static_cast<int32_t>(s.last_page_len.size());
    t.table.indptr = {t.indptr.as<int32_t>(), s.kv_indptr.data(), static_cast<int64_t>(s.kv_indptr.size())};
    t.table.indices = {t.indices.as<int32_t>(), s.kv_indices.data(), static_cast<int64_t>(s.kv_indices.size())};
    t.table.last_page_len = {t.last.as<int32_t>(), s.last_page_len.data(), static_cast<int64_t>(s.last_page_len.size())};
    const bool used = (i == 0) == (m1 == T);  // unsplit: the full table; split: A and B
    if (!used || s.rows == 0) continue;
    m.prefill[i].plan_paged(s.qo_indptr.data(), t.table, m.bd.page_size, m.sh.num_qo_heads, m.sh.num_kv_heads,
                            m.sh.head_dim, m.sh.dtype, causal, m.prefill_ws[i].get(), m.prefill_ws_bytes, m.pbounds,
                            stream);
  }
  // GEMM heuristics for every shape run() will issue (host only; keeps run() free of them).
  const int64_t H = m.sh.hidden, I = m.sh.intermediate;
  for (int64_t rows : {m1, T - m1}) {
    m.gemm.prepare(H, H, m.n_qkv, rows, m.n_qkv, H, m.sh.dtype, gemm_sms);
    m.gemm.prepare(m.q_width, m.q_width, H, rows, H, m.q_width, m.sh.dtype, gemm_sms);
    m.gemm.prepare(H, H, 2 * I, rows, 2 * I, H, m.sh.dtype, gemm_sms);
    m.gemm.prepare(I, I, H, rows, H, I, m.sh.dtype, gemm_sms);
  }
  m.planned = true;
}

void TpLayer::run(const TensorView& x, const TensorView& residual, const TensorView& out, cudaStream_t stream) {
  Impl& m = *impl_;
  WEFT_CHECK_ARG(m.planned, "plan", "run() before a successful plan()");
  const int64_t T = m.plan.tokens, H = m.sh.hidden;
  for (const auto& [t, name] : {std::pair<const TensorView*, const char*>{&x, "x"}, {&residual, "residual"},
                                {&out, "out"}}) {
    WEFT_CHECK_ARG(t->ndim == 2 && t->shape[0] == T && t->shape[1] == H, name,
                   "expected [" << T << ", " << H << "], got " << t->describe());
    WEFT_CHECK_ARG(t->dtype == m.sh.dtype, name, "expected " << dtype_name(m.sh.dtype) << ", got " << t->describe());
    WEFT_CHECK_ARG(t->strides[1] == 1 && t->strides[0] == H, name, "must be row-contiguous, got " << t->describe());
    WEFT_CHECK_ARG(t->device == Device::kCUDA && t->device_id == m.device, name,
                   "must live on cuda:" << m.device << ", got " << t->describe());
    WEFT_CHECK_ARG(t->data != nullptr, name, "is null");
  }
  const std::size_t bytes = static_cast<std::size_t>(T * H) * m.es;
  auto overlaps = [&](const TensorView& a, const TensorView& b) {
    const char *pa = static_cast<const char*>(a.data), *pb = static_cast<const char*>(b.data);
    return pa < pb + bytes && pb < pa + bytes;
  };
  WEFT_CHECK_ARG(!overlaps(x, residual), "residual", "overlaps x");
  WEFT_CHECK_ARG(!overlaps(x, out), "out", "overlaps x");
  WEFT_CHECK_ARG(!overlaps(residual, out), "out", "overlaps residual");

  const int64_t m1 = m.plan.m1;
  if (m.opt.schedule == TpSchedule::kUnsplit || m1 == T) {
    const Half all{0, T, 0};
    m.attention_part(all, x.data, stream);
    m.comm_part(all, false, residual, out, stream);
    m.mlp_part(all, stream);
    m.comm_part(all, true, residual, out, stream);
    return;
  }
  const Half a{0, m1, 1}, b{m1, T, 2};
  if (m.opt.schedule == TpSchedule::kSplit) {  // the overlapped order, one stream
    m.attention_part(a, x.data, stream);
    m.comm_part(a, false, residual, out, stream);
    m.attention_part(b, x.data, stream);
    m.comm_part(b, false, residual, out, stream);
    m.mlp_part(a, stream);
    m.comm_part(a, true, residual, out, stream);
    m.mlp_part(b, stream);
    m.comm_part(b, true, residual, out, stream);
    return;
  }
  // kOverlap: compute on `stream`, the fused calls on the comm stream (in call order, so the
  // communicator's calls stay stream-ordered), joined by events only.
  cudaStream_t cs = m.comm_stream;
  m.attention_part(a, x.data, stream);
  WEFT_CUDA_CHECK(cudaEventRecord(m.ev_attn[0], stream));
  WEFT_CUDA_CHECK(cudaStreamWaitEvent(cs, m.ev_attn[0], 0));  // also forks cs from everything before
  m.comm_part(a, false, residual, out, cs);                    // A.comm1 || B.attn
  WEFT_CUDA_CHECK(cudaEventRecord(m.ev_comm1[0], cs));
  m.attention_part(b, x.data, stream);
  WEFT_CUDA_CHECK(cudaEventRecord(m.ev_attn[1], stream));
  WEFT_CUDA_CHECK(cudaStreamWaitEvent(cs, m.ev_attn[1], 0));
  m.comm_part(b, false, residual, out, cs);                    // B.comm1 || A.mlp
  WEFT_CUDA_CHECK(cudaEventRecord(m.ev_comm1[1], cs));
  WEFT_CUDA_CHECK(cudaStreamWaitEvent(stream, m.ev_comm1[0], 0));
  m.mlp_part(a, stream);
  WEFT_CUDA_CHECK(cudaEventRecord(m.ev_mlp[0], stream));
  WEFT_CUDA_CHECK(cudaStreamWaitEvent(cs, m.ev_mlp[0], 0));
  m.comm_part(a, true, residual, out, cs);                     // A.comm2 || B.mlp
  WEFT_CUDA_CHECK(cudaStreamWaitEvent(stream, m.ev_comm1[1], 0));
  m.mlp_part(b, stream);
  WEFT_CUDA_CHECK(cudaEventRecord(m.ev_mlp[1], stream));
  WEFT_CUDA_CHECK(cudaStreamWaitEvent(cs, m.ev_mlp[1], 0));
  m.comm_part(b, true, residual, out, cs);                     // B.comm2 (|| the next layer's A.attn)
  WEFT_CUDA_CHECK(cudaEventRecord(m.ev_comm2, cs));
  WEFT_CUDA_CHECK(cudaStreamWaitEvent(stream, m.ev_comm2, 0));  // join: cs is serial, covers A.comm2
}

int64_t TpLayer::tokens() const { return impl_->plan.tokens; }
int64_t TpLayer::split_tokens() const { return impl_->plan.m1; }
const TokenSplit& TpLayer::split() const { return impl_->split; }
const TpLayerShape& TpLayer::shape() const { return impl_->sh; }
const std::vector<int32_t>& TpLayer::kv_indptr() const { return impl_->plan.full.kv_indptr; }
const std::vector<int32_t>& TpLayer::kv_indices() const { return impl_->plan.full.kv_indices; }
const std::vector<int32_t>& TpLayer::kv_last_page_len() const { return impl_->plan.full.last_page_len; }

TpLayer::Views TpLayer::views() const {
  const Impl& m = *impl_;
  const int64_t T = m.plan.tokens, H = m.sh.hidden, I = m.sh.intermediate;
  Views v;
  v.w_qkv = m.view2(m.w_qkv, 0, m.n_qkv, H);
  v.w_o = m.view2(m.w_o, 0, H, m.q_width);
  v.w_gate_up = m.view2(m.w_gu, 0, 2 * I, H);
  v.w_down = m.view2(m.w_down, 0, H, I);
  v.w_post_attn_norm = TensorView(m.w_norm1.get(), m.sh.dtype, {H}, Device::kCUDA, m.device);
  v.w_next_norm = TensorView(m.w_norm2.get(), m.sh.dtype, {H}, Device::kCUDA, m.device);
  v.qkv = m.view2(m.qkv, 0, T, m.n_qkv);
  v.attn = m.view2(m.attn, 0, T, m.q_width);
  v.o = m.view2(m.o, 0, T, H);
  v.h2 = m.view2(m.h2, 0, T, H);
  v.gate_up = m.view2(m.gu, 0, T, 2 * I);
  v.act = m.view2(m.act, 0, T, I);
  v.down = m.view2(m.down, 0, T, H);
  v.k_pages = TensorView(m.k_pages.get(), m.sh.dtype, {m.max_pages, m.bd.page_size, m.sh.num_kv_heads, m.sh.head_dim},
                         Device::kCUDA, m.device);
  v.v_pages = TensorView(m.v_pages.get(), m.sh.dtype, {m.max_pages, m.bd.page_size, m.sh.num_kv_heads, m.sh.head_dim},
                         Device::kCUDA, m.device);
  return v;
}

}  // namespace weft
