// weft-serve-sim's hybrid family (hybrid.h): per step 1..2 prefill chunks and 8..64 decodes on one
// paged pool (make_hybrid_trace), through weft::BatchPODAttention pinned to each mode -- serial
// (the fastest prefill, then decode), fused (the one-launch kernel), partition (the planner's own k)
// -- and kAuto as the route choice among them ("router": POD's plan-time cost model). Same
// protocol as the decode families (serve_sim.cu): per execution the L2 flushed, then the wall
// time of the CSR table upload + plan() + run() to a stream sync (host clock) and the GPU time of
// run() (CUDA events); repeats interleaved over the options in a shuffled order per (step,
// repeat); medians. Correctness on the first and the last step: the last rows of every prefill
// chunk and the longest and shortest decode rows, every head, against the float64 reference.
#include "serve/hybrid.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>

#include "serve/sim_util.h"
#include "serve/trace.h"
#include "weft/pod.h"

namespace weft::serve {
namespace {

using namespace sim;

// The host CSR tables of a step, both sides in one pinned buffer (uploaded with one copy):
// [prefill indptr 3 | prefill last 2 | decode indptr 65 | decode last 64 | pad to kIdxP | prefill
// indices | pad to kIdxD | decode indices]. Pages per row: prefill <= (16K + 2048) / 16 = 1152,
// decode < 32K / 16 = 2048.
constexpr int32_t kPreIndptr = 0, kPreLast = 3, kDecIndptr = 5, kDecLast = kDecIndptr + kHybridMaxDecode + 1;
constexpr int32_t kIdxP = 256;
constexpr int32_t kIdxD = kIdxP + kHybridMaxPrefill * (16384 + kHybridMaxChunk) / kPage;
constexpr int32_t kTableInts = kIdxD + kHybridMaxDecode * (32768 / kPage);
constexpr int32_t kMaxPrefillTokens = kHybridMaxPrefill * kHybridMaxChunk;
constexpr int32_t kCheckPrefillRows = 4;  // the last rows of each chunk: they see every key

struct Option {
  std::string name;
  PodMode mode;
};
const Option kOptions[] = {{"serial", PodMode::kSerial},
                           {"fused", PodMode::kFused},
                           {"partition", PodMode::kPartition},
                           {"router", PodMode::kAuto}};
constexpr size_t kNumOptions = sizeof(kOptions) / sizeof(kOptions[0]);
constexpr size_t kPartitionOpt = 2, kRouterOpt = 3;  // their indices in kOptions

struct Sample {
  double wall_us = 0, gpu_us = 0, plan_us = 0;
};

struct Hybrid {
  cudaStream_t stream;
  Trace trace;
  std::vector<HybridStep> steps;
  void *k = nullptr, *v = nullptr;
  PagedKVCache cache;
  int32_t* h_tab = nullptr;  // pinned, kTableInts
  int32_t* d_tab = nullptr;
  void *pq = nullptr, *po = nullptr, *dq = nullptr, *dout = nullptr;
  float *plse = nullptr, *dlse = nullptr;
  std::unique_ptr<BatchPODAttention> pod[kNumOptions];
  void* ws[kNumOptions] = {};
  size_t ws_bytes = 0;
  cudaEvent_t e0, e1;
  // The step's tables and views (fill()).
  std::vector<int32_t> qo_indptr;
  PageTable ptab, dtab;
  int32_t total_q = 0, dec_batch = 0, upload_ints = 0;

  Hybrid(cudaStream_t s, uint64_t seed, int32_t n) : stream(s) {
    trace = make_hybrid_trace(seed, kPage, kHole, n, &steps);
    const int64_t np = trace.num_pages;
    const int64_t elems = np * kPage * kHkv * kD;
    CK(cudaMalloc(&k, size_t(elems) * 2));
    CK(cudaMalloc(&v, size_t(elems) * 2));
    fill_kernel<<<1024, 256>>>(static_cast<__nv_bfloat16*>(k), elems, seed * 2 + 1);
    fill_kernel<<<1024, 256>>>(static_cast<__nv_bfloat16*>(v), elems, seed * 2 + 2);
    cache.layout = KVLayout::kNHD;
    cache.k_pages = TensorView(k, DType::kBFloat16, {np, kPage, kHkv, kD});
    cache.v_pages = TensorView(v, DType::kBFloat16, {np, kPage, kHkv, kD});
    CK(cudaHostAlloc(reinterpret_cast<void**>(&h_tab), size_t(kTableInts) * 4, cudaHostAllocDefault));
    CK(cudaMalloc(&d_tab, size_t(kTableInts) * 4));
    const size_t row = size_t(kHq) * kD;
    CK(cudaMalloc(&pq, kMaxPrefillTokens * row * 2));
    CK(cudaMalloc(&po, kMaxPrefillTokens * row * 2));
    CK(cudaMalloc(&dq, kHybridMaxDecode * row * 2));
    CK(cudaMalloc(&dout, kHybridMaxDecode * row * 2));
    CK(cudaMalloc(&plse, size_t(kMaxPrefillTokens) * kHq * 4));
    CK(cudaMalloc(&dlse, size_t(kHybridMaxDecode) * kHq * 4));
    fill_kernel<<<256, 256>>>(static_cast<__nv_bfloat16*>(pq), int64_t(kMaxPrefillTokens * row), seed * 2 + 77);
    fill_kernel<<<256, 256>>>(static_cast<__nv_bfloat16*>(dq), int64_t(kHybridMaxDecode * row), seed * 2 + 78);
    CK(cudaDeviceSynchronize());
    PodBounds b;
    b.max_prefill_batch = kHybridMaxPrefill;
    b.max_prefill_tokens = kMaxPrefillTokens;
    b.max_decode_batch = kHybridMaxDecode;
    b.num_qo_heads = kHq;
    b.num_kv_heads = kHkv;
    b.head_dim = kD;
    ws_bytes = BatchPODAttention::workspace_size(b);
    for (size_t i = 0; i < kNumOptions; ++i) {  // one object and workspace per option
      PodOptions o;
      o.mode = kOptions[i].mode;
      pod[i] = std::make_unique<BatchPODAttention>(b, o);
      CK(cudaMalloc(&ws[i], ws_bytes));
    }
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
  }
  ~Hybrid() {
    for (void* w : ws) cudaFree(w);
    for (void* p : {k, v, pq, po, dq, dout}) cudaFree(p);
    cudaFree(plse);
    cudaFree(dlse);
    cudaFree(d_tab);
    cudaFreeHost(h_tab);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
  }

  // The step's CSR tables in the pinned buffer and the PageTable views of them.
  void fill(const HybridStep& st) {
    auto side = [&](const std::vector<int32_t>& req, const std::vector<int32_t>& kv, int32_t indptr, int32_t last,
                    int32_t idx, int32_t cap_rows, int32_t cap_pages, PageTable& t) {
      const int32_t B = int32_t(req.size());
      int64_t need = 0;
      for (int32_t i = 0; i < B; ++i) need += (kv[i] + kPage - 1) / kPage;
      if (B > cap_rows || need > cap_pages) {  // make_hybrid_trace's bounds (trace.h) keep within these
        std::fprintf(stderr, "hybrid: a step beyond the table's capacity (%d rows, %lld pages)\n", B, (long long)need);
        std::exit(3);
      }
      int32_t n = 0;
      h_tab[indptr] = 0;
      for (int32_t i = 0; i < B; ++i) {
        const int32_t pages = (kv[i] + kPage - 1) / kPage;
        std::copy_n(trace.requests[req[i]].pages.begin(), pages, h_tab + idx + n);
        n += pages;
        h_tab[indptr + i + 1] = n;
        h_tab[last + i] = kv[i] - (pages - 1) * kPage;
      }
      t.batch_size = B;
      t.indptr = {d_tab + indptr, h_tab + indptr, B + 1};
      t.indices = {d_tab + idx, h_tab + idx, n};
      t.last_page_len = {d_tab + last, h_tab + last, B};
      return n;
    };
    side(st.pre_req, st.pre_kv, kPreIndptr, kPreLast, kIdxP, kHybridMaxPrefill, kIdxD - kIdxP, ptab);
    upload_ints = kIdxD + side(st.dec_req, st.dec_kv, kDecIndptr, kDecLast, kIdxD, kHybridMaxDecode,
                               kTableInts - kIdxD, dtab);
    qo_indptr.assign(1, 0);
    for (int32_t c : st.pre_chunk) qo_indptr.push_back(qo_indptr.back() + c);
    total_q = qo_indptr.back();
    dec_batch = int32_t(st.dec_req.size());
  }

  Sample exec(size_t opt, const std::function<void()>& flush_l2) {
    Sample s;
    flush_l2();
    const auto t0 = Clock::now();
    CK(cudaMemcpyAsync(d_tab, h_tab, size_t(upload_ints) * 4, cudaMemcpyHostToDevice, stream));
    AttentionVariant var;
    var.mask = MaskMode::kCausal;  // the chunks; a decode row (q_len 1) sees every key either way
    const TensorView tpq(pq, DType::kBFloat16, {total_q, kHq, kD}), tpo(po, DType::kBFloat16, {total_q, kHq, kD});
    const TensorView tdq(dq, DType::kBFloat16, {dec_batch, kHq, kD}),
        tdo(dout, DType::kBFloat16, {dec_batch, kHq, kD});
    const TensorView tpl(plse, DType::kFloat32, {total_q, kHq}), tdl(dlse, DType::kFloat32, {dec_batch, kHq});
    const auto tp = Clock::now();
    pod[opt]->plan(qo_indptr.data(), ptab, dtab, kPage, DType::kBFloat16, var, ws[opt], ws_bytes, stream);
    s.plan_us = us_since(tp);
    CK(cudaEventRecord(e0, stream));
    pod[opt]->run(tpq, tdq, cache, ptab, dtab, tpo, tdo, &tpl, &tdl, stream);
    CK(cudaEventRecord(e1, stream));
    CK(cudaStreamSynchronize(stream));
    s.wall_us = us_since(t0);
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    s.gpu_us = ms * 1e3;
    return s;
  }
};

// One checked row set: where the rows live (prefill or decode outputs), their first row, count,
// and the float64 reference of them.
struct RefBlock {
  bool prefill = false;
  int32_t first = 0, rows = 0;
  weft::ref::Result ref;
};

std::vector<RefBlock> reference_blocks(const Hybrid& h, const HybridStep& st) {
  std::vector<RefBlock> out;
  weft::ref::Options opt;
  opt.causal = true;
  auto block = [&](bool prefill, int32_t req, int32_t kv_len, int32_t first, int32_t rows) {
    RefBlock b;
    b.prefill = prefill;
    b.first = first;
    b.rows = rows;
    std::vector<uint16_t> q(size_t(rows) * kHq * kD);
    const void* src = static_cast<const char*>(prefill ? h.pq : h.dq) + size_t(first) * kHq * kD * 2;
    CK(cudaMemcpy(q.data(), src, q.size() * 2, cudaMemcpyDeviceToHost));
    std::vector<float> qf(q.size());
    for (size_t i = 0; i < q.size(); ++i) qf[i] = bf16_to_float(q[i]);
    const weft::ref::OwnedKV kv = gather_request_kv(h.k, h.v, h.trace.requests[req].pages, kv_len);
    // Bottom-right causal: query i of these `rows` sits at kv_len - rows + i, as in the chunk.
    weft::ref::RaggedQ rq{qf.data(), kHq, kD, {0, rows}};
    b.ref = weft::ref::attention(rq, kv.view(), opt);
    out.push_back(std::move(b));
  };
  for (size_t i = 0; i < st.pre_req.size(); ++i) {
    const int32_t end = h.qo_indptr[i + 1];
    const int32_t rows = std::min(kCheckPrefillRows, st.pre_chunk[i]);
    block(true, st.pre_req[i], st.pre_kv[i], end - rows, rows);
  }
  const auto mm = std::minmax_element(st.dec_kv.begin(), st.dec_kv.end());
  std::vector<int32_t> rows{int32_t(mm.second - st.dec_kv.begin()), int32_t(mm.first - st.dec_kv.begin())};
  if (rows[0] == rows[1]) rows.pop_back();
  for (int32_t r : rows) block(false, st.dec_req[r], st.dec_kv[r], r, 1);
  return out;
}

HybridCheck check_blocks(const Hybrid& h, const std::vector<RefBlock>& blocks) {
  HybridCheck c;
  for (const RefBlock& b : blocks) {
    std::vector<uint16_t> o(size_t(b.rows) * kHq * kD);
    std::vector<float> lse(size_t(b.rows) * kHq);
    CK(cudaMemcpy(o.data(), static_cast<const char*>(b.prefill ? h.po : h.dout) + size_t(b.first) * kHq * kD * 2,
                  o.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(lse.data(), (b.prefill ? h.plse : h.dlse) + size_t(b.first) * kHq, lse.size() * 4,
                  cudaMemcpyDeviceToHost));
    // A NaN (the poison left unwritten) counts as an infinite error (std::max would drop it).
    auto err = [](double x, double r) { const double d = std::fabs(x - r); return std::isnan(d) ? INFINITY : d; };
    for (size_t i = 0; i < o.size(); ++i) c.max_o_err = std::max(c.max_o_err, err(bf16_to_float(o[i]), b.ref.o[i]));
    for (size_t i = 0; i < lse.size(); ++i) c.max_lse_err = std::max(c.max_lse_err, err(lse[i], b.ref.lse[i]));
  }
  c.ok = within_tolerance(c.max_o_err, c.max_lse_err);
  return c;
}

std::string pick_of(const PodPlanInfo& pi) {
  if (pi.partition) return "partition/k" + std::to_string(pi.free_sms);
  return pi.fused ? "fused" : "serial";
}

}  // namespace

HybridResult run_hybrid(cudaStream_t stream, const std::function<void()>& flush_l2, uint64_t seed, int32_t steps,
                        int32_t reps, bool check) {
  Hybrid h(stream, seed, steps);
  HybridResult hr;
  hr.steps = int32_t(h.steps.size());
  hr.max_active = h.trace.max_active;
  if (h.steps.empty()) return hr;
  // Warm-up: the first step through every option for ~50 ms (clocks, first-use costs).
  h.fill(h.steps[0]);
  for (const auto w0 = Clock::now(); us_since(w0) < 5e4;)
    for (size_t i = 0; i < kNumOptions; ++i) h.exec(i, flush_l2);
  for (size_t si = 0; si < h.steps.size(); ++si) {
    const HybridStep& st = h.steps[si];
    h.fill(st);
    int64_t dec_keys = 0;
    for (int32_t x : st.dec_kv) dec_keys += x;
    hr.step_shape.push_back({int64_t(st.pre_req.size()), int64_t(h.total_q), int64_t(h.dec_batch), dec_keys});
    const bool checked = check && (si == 0 || si + 1 == h.steps.size());
    std::vector<RefBlock> ref;
    if (checked) ref = reference_blocks(h, st);
    // Repeats interleaved over the options, a seeded shuffle per (step, repeat) (serve_sim.cu's).
    std::vector<std::vector<Sample>> samples(kNumOptions);
    std::vector<size_t> order(kNumOptions);
    for (int r = 0; r < reps; ++r) {
      for (size_t i = 0; i < kNumOptions; ++i) order[i] = i;
      std::mt19937 shuffle_rng(uint32_t(si * 1009 + size_t(r)));
      std::shuffle(order.begin(), order.end(), shuffle_rng);
      for (size_t i : order) samples[i].push_back(h.exec(i, flush_l2));
    }
    ++hr.picks[pick_of(h.pod[kRouterOpt]->plan_info())];  // what kAuto ran at this step
    ++hr.partition_k["k" + std::to_string(h.pod[kPartitionOpt]->plan_info().free_sms)];
    for (size_t i = 0; i < kNumOptions; ++i) {
      std::vector<double> w, g, p;
      for (const Sample& s : samples[i]) w.push_back(s.wall_us), g.push_back(s.gpu_us), p.push_back(s.plan_us);
      HybridOptionStats& rs = hr.routes[kOptions[i].name];
      rs.wall.push_back(percentile(w, 0.5));
      rs.gpu.push_back(percentile(g, 0.5));
      rs.plan.push_back(percentile(p, 0.5));
      if (checked) {  // one more execution of the option, its outputs against the reference
        CK(cudaMemsetAsync(h.po, 0xff, size_t(h.total_q) * kHq * kD * 2, stream));  // NaN poison
        CK(cudaMemsetAsync(h.dout, 0xff, size_t(h.dec_batch) * kHq * kD * 2, stream));
        CK(cudaMemsetAsync(h.plse, 0xff, size_t(h.total_q) * kHq * 4, stream));
        CK(cudaMemsetAsync(h.dlse, 0xff, size_t(h.dec_batch) * kHq * 4, stream));
        h.exec(i, flush_l2);
        const HybridCheck c = check_blocks(h, ref);
        HybridCheck& acc = hr.checks[kOptions[i].name];
        acc.max_o_err = std::max(acc.max_o_err, c.max_o_err);
        acc.max_lse_err = std::max(acc.max_lse_err, c.max_lse_err);
        acc.ok = acc.ok && c.ok;
      }
    }
    std::fprintf(stderr, "\r[hybrid] step %zu/%zu", si + 1, h.steps.size());
  }
  std::fprintf(stderr, "\n");
  return hr;
}

}  // namespace weft::serve
