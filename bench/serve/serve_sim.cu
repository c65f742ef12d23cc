// weft-serve-sim: continuous decode steps of serving traces (serve/trace.h) through every decode
// route that exists (decode/router.h) and through the router itself; per step the synchronized
// wall time (metadata upload + plan + kernels, host clock around a stream sync) and the GPU time
// (CUDA events around run()), medians of --reps repeats interleaved over the options in a shuffled
// order, the L2 flushed before every execution; the router
// is a BatchDecodeWrapper with DecodeRoute::kAuto over the table; correctness of every route against the
// float64 reference on the first and last step of every family (the longest and the shortest
// row, every head). Writes one JSON file.
//
//   weft-serve-sim --calibrate data/router/h100.json --seed 20260622 [--steps 40] [--out cal.json]
//   weft-serve-sim --router data/router/h100.json --seed 20260623 [--steps 40] --out serve.json
//   weft-serve-sim --dump-steps steps.json --seed 20260623      (host only: the traces as JSON)
//   weft-serve-sim --refit walls.txt --seed 20260622 --gpu ... --slots 264 ...   (host only)
//   weft-serve-sim --families hybrid --seed 20260623 [--steps 40] --out hybrid.json
//       (chunked prefill + decodes through POD's modes, kAuto as "router": serve/hybrid.h; not in
//        `all`: not decode routes, so not in the decode router's table or summary)
//
// Calibration fits each route option's coefficients (router.h) to the wall times of the
// calibration seed and measures the router's decision time; the held-out run reports, per family,
// every fixed route's mean step time, the router's, how often it picked each option, and the
// ratio best fixed / router (>= 0.99 is the target).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "decode/router.h"
#include "decode/work_queue_decode.h"
#include "json.h"
#include "reference/attention.h"
#include "serve/hybrid.h"
#include "serve/routes.h"
#include "serve/sim_util.h"
#include "serve/trace.h"
#include "weft/decode.h"
#include "weft/error.h"

namespace {

using weft::decode::RouterFeatures;
using namespace weft::serve::sim;  // CK, the step shape, fill_kernel, statistics (sim_util.h); Args, route options (routes.h)

constexpr int32_t kMaxBatch = 256;

// Everything a step needs on the device, allocated once per family.
struct Engine {
  cudaStream_t stream = nullptr;
  weft::BatchDecodeWrapper bal{kMaxBatch, kHq, kHkv, kD};
  std::unique_ptr<weft::BatchDecodeWrapper> share;
  weft::decode::WorkQueueDecode wq{kMaxBatch, kHq, kHkv, kD, kMaxTasks};
  void *ws_bal = nullptr, *ws_share = nullptr, *ws_wq = nullptr;
  size_t ws_bal_bytes = 0, ws_share_bytes = 0, ws_wq_bytes = 0;
  void *q = nullptr, *out = nullptr;
  float* lse = nullptr;
  // The router as a serving engine uses it: a BatchDecodeWrapper with DecodeRoute::kAuto, the
  // table's text and share_prefixes (its persistent candidate is the prefix-sharing plan where rows
  // share leading pages, the balanced plan where none do; held-out runs only).
  std::unique_ptr<weft::BatchDecodeWrapper> routed;
  void* ws_routed = nullptr;
  size_t ws_routed_bytes = 0;
  cudaEvent_t e0, e1;
  // Written before every execution (outside the timed region): 2x the L2, so no execution starts
  // with K/V pages the previous option left in L2 (f0a6d7b / da02796 ran without it: zipf and
  // B1 steps read 60-130 MB, partly L2-resident after the option before; a serving step reads
  // other layers' KV between two runs of one layer).
  void* flush = nullptr;
  size_t flush_bytes = 0;
  void flush_l2() {
    CK(cudaMemsetAsync(flush, int(++flush_count & 0xff), flush_bytes, stream));
    CK(cudaStreamSynchronize(stream));
  }
  uint32_t flush_count = 0;
  void make_routed(const std::string& table_text) {
    weft::DecodeOptions o;
    o.route = weft::DecodeRoute::kAuto;
    o.router_table = table_text;
    o.max_tasks = kMaxTasks;  // the same task capacity as the fixed work-queue options
    o.share_prefixes = true;
    ws_routed_bytes = weft::BatchDecodeWrapper::workspace_size(kMaxBatch, kHq, kHkv, kD, o);
    routed = std::make_unique<weft::BatchDecodeWrapper>(kMaxBatch, kHq, kHkv, kD, o);
    CK(cudaMalloc(&ws_routed, ws_routed_bytes));
  }
  Engine() {
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    ws_bal_bytes = weft::BatchDecodeWrapper::workspace_size(kMaxBatch, kHq, kHkv, kD);
    weft::DecodeOptions so;
    so.share_prefixes = true;
    ws_share_bytes = weft::BatchDecodeWrapper::workspace_size(kMaxBatch, kHq, kHkv, kD, so);
    share = std::make_unique<weft::BatchDecodeWrapper>(kMaxBatch, kHq, kHkv, kD, so);
    ws_wq_bytes = weft::decode::WorkQueueDecode::workspace_size(kMaxBatch, kHkv, kD, kMaxTasks);
    CK(cudaMalloc(&ws_bal, ws_bal_bytes));
    CK(cudaMalloc(&ws_share, ws_share_bytes));
    CK(cudaMalloc(&ws_wq, ws_wq_bytes));
    CK(cudaMalloc(&q, size_t(kMaxBatch) * kHq * kD * 2));
    CK(cudaMalloc(&out, size_t(kMaxBatch) * kHq * kD * 2));
    CK(cudaMalloc(&lse, size_t(kMaxBatch) * kHq * 4));
    fill_kernel<<<256, 256>>>(static_cast<__nv_bfloat16*>(q), int64_t(kMaxBatch) * kHq * kD, 77);
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    int dev = 0, l2 = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    flush_bytes = size_t(std::max(l2, 1 << 20)) * 2;
    CK(cudaMalloc(&flush, flush_bytes));
  }
  ~Engine() {
    cudaFree(ws_bal);
    cudaFree(ws_share);
    cudaFree(ws_wq);
    cudaFree(ws_routed);
    cudaFree(flush);
    cudaFree(q);
    cudaFree(out);
    cudaFree(lse);
  }
};

// The paged pool of one family plus the step's block table (pinned host + device).
struct Family {
  weft::serve::Trace trace;
  std::vector<weft::serve::Step> steps;
  void *k = nullptr, *v = nullptr;
  int32_t stride = 0;
  int32_t* h_ids = nullptr;  // pinned [kMaxBatch, stride]
  int32_t* h_lens = nullptr;
  int32_t *d_ids = nullptr, *d_lens = nullptr;
  weft::PagedKVCache cache;
  ~Family() {
    cudaFree(k);
    cudaFree(v);
    cudaFreeHost(h_ids);
    cudaFreeHost(h_lens);
    cudaFree(d_ids);
    cudaFree(d_lens);
  }
};

void setup_family(Family& f, const std::string& name, uint64_t seed, int32_t steps) {
  f.trace = weft::serve::make_trace(name, seed, kPage, kHole, steps);
  f.steps = weft::serve::simulate_steps(f.trace, steps);
  const int64_t elems = f.trace.num_pages * kPage * kHkv * kD;
  CK(cudaMalloc(&f.k, size_t(elems) * 2));
  CK(cudaMalloc(&f.v, size_t(elems) * 2));
  fill_kernel<<<1024, 256>>>(static_cast<__nv_bfloat16*>(f.k), elems, seed * 2 + 1);
  fill_kernel<<<1024, 256>>>(static_cast<__nv_bfloat16*>(f.v), elems, seed * 2 + 2);
  CK(cudaDeviceSynchronize());
  f.stride = f.trace.max_blocks + 8;  // a little row slack: the stride is not the used width
  CK(cudaHostAlloc(reinterpret_cast<void**>(&f.h_ids), size_t(kMaxBatch) * f.stride * 4, cudaHostAllocDefault));
  CK(cudaHostAlloc(reinterpret_cast<void**>(&f.h_lens), size_t(kMaxBatch) * 4, cudaHostAllocDefault));
  CK(cudaMalloc(&f.d_ids, size_t(kMaxBatch) * f.stride * 4));
  CK(cudaMalloc(&f.d_lens, size_t(kMaxBatch) * 4));
  const int64_t np = f.trace.num_pages;
  f.cache.layout = weft::KVLayout::kNHD;
  f.cache.k_pages = weft::TensorView(f.k, weft::DType::kBFloat16, {np, kPage, kHkv, kD});
  f.cache.v_pages = weft::TensorView(f.v, weft::DType::kBFloat16, {np, kPage, kHkv, kD});
}

// The step's block table rows (host, pinned) and the view of them.
weft::BlockTable fill_table(Family& f, const weft::serve::Step& st) {
  const int32_t B = int32_t(st.req.size());
  int32_t maxb = 0;
  for (int32_t i = 0; i < B; ++i) {
    const auto& pages = f.trace.requests[st.req[i]].pages;
    const int32_t used = (st.kv_len[i] + kPage - 1) / kPage;
    std::memcpy(f.h_ids + int64_t(i) * f.stride, pages.data(), size_t(used) * 4);
    f.h_lens[i] = st.kv_len[i];
    maxb = std::max(maxb, used);
  }
  weft::BlockTable t;
  t.batch_size = B;
  t.max_blocks = f.trace.max_blocks;
  t.row_stride = f.stride;
  t.block_ids = {f.d_ids, f.h_ids, int64_t(std::max(1, B)) * f.stride};
  t.seq_lens = {f.d_lens, f.h_lens, B};
  return t;
}

struct Sample {
  double wall_us = 0, gpu_us = 0, plan_us = 0;
};

// One execution of `o` (or, with `routed`, of the kAuto wrapper) on the step: upload the block
// table, plan, run (events around run), sync.
Sample exec_route(Engine& e, Family& f, const weft::BlockTable& t, const RouteOption& o, bool routed = false) {
  const int32_t B = t.batch_size;
  Sample s;
  e.flush_l2();
  const auto t0 = Clock::now();
  CK(cudaMemcpyAsync(f.d_ids, f.h_ids, size_t(B) * f.stride * 4, cudaMemcpyHostToDevice, e.stream));
  CK(cudaMemcpyAsync(f.d_lens, f.h_lens, size_t(B) * 4, cudaMemcpyHostToDevice, e.stream));
  weft::TensorView q(e.q, weft::DType::kBFloat16, {B, kHq, kD});
  weft::TensorView out(e.out, weft::DType::kBFloat16, {B, kHq, kD});
  weft::TensorView lse(e.lse, weft::DType::kFloat32, {B, kHq});
  const weft::AttentionVariant var;
  const auto tp = Clock::now();
  if (routed) {
    e.routed->plan(t, kHq, kHkv, kD, kPage, weft::DType::kBFloat16, weft::KVLayout::kNHD, var, e.ws_routed,
                   e.ws_routed_bytes, e.stream);
    s.plan_us = us_since(tp);
    CK(cudaEventRecord(e.e0, e.stream));
    e.routed->run(q, f.cache, t, out, &lse, e.stream);
  } else switch (o.route) {
    case Route::kBalanced:
      e.bal.plan(t, kHq, kHkv, kD, kPage, weft::DType::kBFloat16, weft::KVLayout::kNHD, var, e.ws_bal,
                 e.ws_bal_bytes, e.stream);
      s.plan_us = us_since(tp);
      CK(cudaEventRecord(e.e0, e.stream));
      e.bal.run(q, f.cache, t, out, &lse, e.stream);
      break;
    case Route::kPrefixShare:
      e.share->plan(t, kHq, kHkv, kD, kPage, weft::DType::kBFloat16, weft::KVLayout::kNHD, var, e.ws_share,
                    e.ws_share_bytes, e.stream);
      s.plan_us = us_since(tp);
      CK(cudaEventRecord(e.e0, e.stream));
      e.share->run(q, f.cache, t, out, &lse, e.stream);
      break;
    case Route::kWorkQueue:
    case Route::kNoSplit:
      e.wq.plan(t, o.route == Route::kNoSplit ? 0 : o.chunk, kPage, weft::DType::kBFloat16, weft::KVLayout::kNHD,
                var, e.ws_wq, e.ws_wq_bytes, e.stream);
      s.plan_us = us_since(tp);
      CK(cudaEventRecord(e.e0, e.stream));
      e.wq.run(q, f.cache, t, out, &lse, e.stream);
      break;
  }
  CK(cudaEventRecord(e.e1, e.stream));
  CK(cudaStreamSynchronize(e.stream));
  s.wall_us = us_since(t0);
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e.e0, e.e1));
  s.gpu_us = ms * 1e3;
  return s;
}

// The float64 reference of rows `rows` of a step (K/V of those rows copied back from their
// pages), computed once per checked step and compared with every option's output.
struct RefRows {
  std::vector<int32_t> rows;
  std::vector<std::vector<double>> o, lse;  // per row: [Hq * D], [Hq]
};
RefRows reference_rows(Engine& e, Family& f, const weft::serve::Step& st, const std::vector<int32_t>& rows) {
  RefRows r;
  r.rows = rows;
  const int32_t B = int32_t(st.req.size());
  std::vector<uint16_t> q(size_t(B) * kHq * kD);
  CK(cudaMemcpy(q.data(), e.q, q.size() * 2, cudaMemcpyDeviceToHost));
  for (int32_t row : rows) {
    const weft::ref::OwnedKV kv = gather_request_kv(f.k, f.v, f.trace.requests[st.req[row]].pages, st.kv_len[row]);
    std::vector<float> qf(size_t(kHq) * kD);
    for (size_t i = 0; i < qf.size(); ++i) qf[i] = bf16_to_float(q[size_t(row) * kHq * kD + i]);
    weft::ref::RaggedQ rq{qf.data(), kHq, kD, {0, 1}};
    weft::ref::Result ex = weft::ref::attention(rq, kv.view(), weft::ref::Options{});
    r.o.push_back(std::move(ex.o));
    r.lse.push_back(std::move(ex.lse));
  }
  return r;
}

// Max |O - O_ref| and |LSE - LSE_ref| of the last run's rows against the reference.
struct CheckResult {
  double max_o_err = 0, max_lse_err = 0;
  bool ok = true;
};
CheckResult check_rows(Engine& e, const weft::serve::Step& st, const RefRows& ref) {
  CheckResult r;
  const int32_t B = int32_t(st.req.size());
  std::vector<uint16_t> o(size_t(B) * kHq * kD);
  std::vector<float> lse(size_t(B) * kHq);
  CK(cudaMemcpy(o.data(), e.out, o.size() * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(lse.data(), e.lse, lse.size() * 4, cudaMemcpyDeviceToHost));
  for (size_t k = 0; k < ref.rows.size(); ++k) {
    const int32_t row = ref.rows[k];
    for (int i = 0; i < kHq * kD; ++i)
      r.max_o_err = std::max(r.max_o_err, std::fabs(double(bf16_to_float(o[size_t(row) * kHq * kD + i])) - ref.o[k][i]));
    for (int h = 0; h < kHq; ++h)
      r.max_lse_err = std::max(r.max_lse_err, std::fabs(double(lse[size_t(row) * kHq + h]) - ref.lse[k][h]));
  }
  r.ok = within_tolerance(r.max_o_err, r.max_lse_err);  // sim_util.h: its reasons
  return r;
}

int32_t grid_slots(const Engine& e) { return e.bal.num_ctas(); }


struct RouteStats {
  std::vector<double> wall, gpu, plan;
};

struct FamilyResult {
  std::string name;
  int32_t max_active = 0, steps = 0;
  std::map<std::string, RouteStats> routes;  // fixed options + "router"
  std::map<std::string, int> picks;
  std::map<std::string, CheckResult> checks;
  std::vector<double> router_decide_us, bal_plan_us_b256;
  std::vector<weft::decode::StepFeatures> step_x;  // per measured step (the router table's steps)
  std::vector<std::vector<int64_t>> step_shape;     // hybrid: per step (hybrid.h)
  std::map<std::string, int> partition_k;           // hybrid: the partition option's k per step
  // Calibration samples per option: features, wall time.
  std::map<std::string, std::pair<std::vector<RouterFeatures>, std::vector<double>>> samples;
};

FamilyResult run_family(Engine& e, const std::string& name, const Args& a, const RouterModel* model) {
  Family f;
  setup_family(f, name, a.seed, a.steps);
  FamilyResult fr;
  fr.name = name;
  fr.max_active = f.trace.max_active;
  fr.steps = int32_t(f.steps.size());
  const bool shared = name == "shared";
  const std::vector<RouteOption> opts = default_options(shared);
  const int32_t slots = grid_slots(e);
  // Warm-up: the first step through every option for ~50 ms, so clocks have ramped from idle
  // and first-use costs are paid before anything is timed.
  for (size_t si = 0; si < f.steps.size(); ++si) {
    if (f.steps[si].req.empty()) continue;
    const weft::BlockTable t = fill_table(f, f.steps[si]);
    const auto w0 = Clock::now();
    while (us_since(w0) < 5e4)
      for (const RouteOption& o : opts) exec_route(e, f, t, o);
    break;
  }
  for (size_t si = 0; si < f.steps.size(); ++si) {
    const weft::serve::Step& st = f.steps[si];
    if (st.req.empty()) continue;
    const weft::BlockTable t = fill_table(f, st);
    const StepSummary sum = summary_of(st);
    const bool check = a.check && (si == 0 || si + 1 == f.steps.size());
    // Rows checked: the longest and the shortest.
    RefRows ref;
    if (check) {
      const auto mm = std::minmax_element(st.kv_len.begin(), st.kv_len.end());
      std::vector<int32_t> rows{int32_t(mm.second - st.kv_len.begin()), int32_t(mm.first - st.kv_len.begin())};
      if (rows[0] == rows[1]) rows.pop_back();
      ref = reference_rows(e, f, st, rows);
    }
    // Repeats interleaved over the options (rep-major, in a shuffled order per step and repeat):
    // a host or GPU disturbance of a few hundred us lands on one repeat of several options,
    // not on every repeat of one option, so each option's median is robust to it (f0a6d7b ran
    // the repeats of one option back to back and charged such bursts to single options).
    const size_t n = opts.size() + (model ? 1 : 0);
    auto is_router = [&](size_t idx) { return model != nullptr && idx == opts.size(); };
    auto run_idx = [&](size_t idx) {
      return is_router(idx) ? exec_route(e, f, t, opts[0], /*routed=*/true) : exec_route(e, f, t, opts[idx]);
    };
    if (si == 0)  // warm-up of every option (first-use allocations, instruction cache)
      for (size_t idx = 0; idx < n; ++idx) run_idx(idx);
    // A seeded shuffle per (step, repeat): no option always follows the same other option.
    std::vector<std::vector<Sample>> reps(n);
    std::vector<size_t> order(n);
    for (int r = 0; r < a.reps; ++r) {
      for (size_t k = 0; k < n; ++k) order[k] = k;
      std::mt19937 shuffle_rng(uint32_t(si * 1009 + size_t(r)));
      std::shuffle(order.begin(), order.end(), shuffle_rng);
      for (size_t idx : order) reps[idx].push_back(run_idx(idx));
    }
    if (model != nullptr) {  // what the routed wrapper planned, and the decision's own time
      const weft::DecodePlanInfo& pi = e.routed->plan_info();
      const auto route = static_cast<weft::DecodeRoute>(pi.route);
      ++fr.picks[route == weft::DecodeRoute::kWorkQueue ? "work_queue/c" + std::to_string(pi.route_chunk)
                 : pi.prefix_sharing                      ? std::string("prefix_share")
                                                          : std::string(weft::decode_route_name(route))];
      for (int r = 0; r < 3; ++r) {
        const auto t0 = Clock::now();
        StepSummary est = sum;  // the wrapper estimates the shared keys from the rows
        est.shared_keys = weft::decode::shared_prefix_keys(t.block_ids.host, t.row_stride, t.seq_lens.host,
                                                           t.batch_size, kPage);
        const weft::decode::RouteFilter filter = share_filter(est);
        volatile int32_t pick = weft::decode::choose_route(*model, est, filter);
        (void)pick;
        fr.router_decide_us.push_back(us_since(t0));
      }
    }
    fr.step_x.push_back(weft::decode::step_features(sum));
    for (size_t idx = 0; idx < n; ++idx) {
      const bool router = is_router(idx);
      const std::string key = router ? "router" : opts[idx].name;
      std::vector<double> w, g, p;
      for (const Sample& s : reps[idx]) w.push_back(s.wall_us), g.push_back(s.gpu_us), p.push_back(s.plan_us);
      RouteStats& rs = fr.routes[key];
      rs.wall.push_back(percentile(w, 0.5));
      rs.gpu.push_back(percentile(g, 0.5));
      rs.plan.push_back(percentile(p, 0.5));
      if (!router) {
        auto& smp = fr.samples[key];
        smp.first.push_back(weft::decode::route_features(opts[idx], sum, kHkv, slots));
        smp.second.push_back(percentile(w, 0.5));
        if (opts[idx].route == Route::kBalanced && t.batch_size == 256)
          for (const Sample& s : reps[idx]) fr.bal_plan_us_b256.push_back(s.plan_us);
      }
      if (check) {  // one more execution of the option, its output against the reference
        run_idx(idx);
        const CheckResult c = check_rows(e, st, ref);
        CheckResult& acc = fr.checks[key];
        acc.max_o_err = std::max(acc.max_o_err, c.max_o_err);
        acc.max_lse_err = std::max(acc.max_lse_err, c.max_lse_err);
        acc.ok = acc.ok && c.ok;
      }
    }
    std::fprintf(stderr, "\r[%s] step %zu/%zu", name.c_str(), si + 1, f.steps.size());
  }
  std::fprintf(stderr, "\n");
  return fr;
}

// The hybrid family (hybrid.h): POD's modes pinned and kAuto as "router", as a FamilyResult.
FamilyResult hybrid_family(Engine& e, const Args& a) {
  FamilyResult fr;
  fr.name = "hybrid";
#ifdef WEFT_SERVE_POD
  const weft::serve::HybridResult hr =
      weft::serve::run_hybrid(e.stream, [&] { e.flush_l2(); }, a.seed, a.steps, a.reps, a.check);
  fr.max_active = hr.max_active;
  fr.steps = hr.steps;
  for (const auto& [k, s] : hr.routes) fr.routes[k] = RouteStats{s.wall, s.gpu, s.plan};
  fr.picks = hr.picks;
  for (const auto& [k, c] : hr.checks) fr.checks[k] = CheckResult{c.max_o_err, c.max_lse_err, c.ok};
  fr.step_shape = hr.step_shape;
  fr.partition_k = hr.partition_k;
#else
  (void)e;
  (void)a;
  std::fprintf(stderr, "[hybrid] weft-serve-sim was built without the pod component\n");
  fr.checks["error"].ok = false;
#endif
  return fr;
}

void write_stats(weft::bench::JsonWriter& j, const RouteStats& s) {
  j.begin_object();
  j.key("wall_us_mean").value(mean(s.wall));
  j.key("wall_us_p50").value(percentile(s.wall, 0.5));
  j.key("wall_us_p90").value(percentile(s.wall, 0.9));
  j.key("wall_us_p99").value(percentile(s.wall, 0.99));
  j.key("gpu_us_mean").value(mean(s.gpu));
  j.key("gpu_us_p50").value(percentile(s.gpu, 0.5));
  j.key("plan_us_p50").value(percentile(s.plan, 0.5));
  j.end_object();
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  std::ostringstream cmd;
  for (int i = 0; i < argc; ++i) cmd << (i ? " " : "") << argv[i];
  a.command = cmd.str();
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (s == "--calibrate") a.calibrate = next();
    else if (s == "--router") a.router = next();
    else if (s == "--out") a.out = next();
    else if (s == "--seed") a.seed = std::stoull(next());
    else if (s == "--steps") a.steps = std::stoi(next());
    else if (s == "--reps") a.reps = std::stoi(next());
    else if (s == "--families") a.families = next();
    else if (s == "--no-check") a.check = false;
    else if (s == "--dump-steps") a.dump = next();
    else if (s == "--refit") a.refit = next();
    else if (s == "--gpu") a.gpu = next();
    else if (s == "--slots") a.slots = std::stoi(next());
    else if (s == "--router-us") a.router_us = std::stod(next());
    else if (s == "--neighbours") a.neighbours = std::stoi(next());
    else if (s == "--calibration") a.calibration_text = next();
    else if (s == "--replay") a.replay = next();
    else if (s == "--replay-seed") a.replay_seed = std::stoull(next());
    else {
      std::fprintf(stderr, "unknown argument %s\n", s.c_str());
      return 2;
    }
  }
  if (const char* c = std::getenv("WEFT_COMMIT")) a.commit = c;  // the harness, not libweft
  if (!a.dump.empty()) return dump_steps(a) ? 0 : 1;
  if (!a.refit.empty()) return refit(a) ? 0 : 1;
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return 2;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::vector<std::string> fams;
  if (a.families == "all") {
    fams = weft::serve::family_names();
  } else {
    std::stringstream ss(a.families);
    std::string x;
    while (std::getline(ss, x, ',')) fams.push_back(x);
  }
  RouterModel model;
  std::string table_text;
  const bool routed = !a.router.empty();
  if (routed) {
    std::ifstream in(a.router);
    std::stringstream buf;
    buf << in.rdbuf();
    table_text = buf.str();
    model = RouterModel::from_json(table_text);
  }
  try {
    Engine e;
    if (routed) e.make_routed(table_text);
    std::vector<FamilyResult> results;
    for (const std::string& fam : fams) {
      try {
        results.push_back(fam == "hybrid" ? hybrid_family(e, a) : run_family(e, fam, a, routed ? &model : nullptr));
      } catch (const weft::Error& err) {  // report the family, keep the others
        std::fprintf(stderr, "\n[%s] weft::Error: %s\n", fam.c_str(), err.what());
        FamilyResult fr;
        fr.name = fam;
        fr.checks["error"].ok = false;
        results.push_back(fr);
      }
    }

    weft::bench::JsonWriter j;
    j.begin_object();
    j.key("gpu").value(prop.name);
    j.key("sm_count").value(prop.multiProcessorCount);
    j.key("commit").value(a.commit);
    j.key("command").value(a.command);
    j.key("seed").value(static_cast<long long>(a.seed));
    j.key("steps").value(a.steps);
    j.key("reps").value(a.reps);
    j.key("shape").value("Hq 32, Hkv 8, D 128, bf16, page 16, NHD, hole fraction 0.25");
    j.key("grid_slots").value(grid_slots(e));
    j.key("families").begin_array();
    double worst_ratio = 1e30, hybrid_ratio = -1;
    std::vector<double> plan256;
    bool all_ok = true;
    for (const FamilyResult& fr : results) {
      j.begin_object();
      j.key("name").value(fr.name);
      j.key("max_active").value(fr.max_active);
      j.key("steps").value(fr.steps);
      j.key("routes").begin_object();
      std::string best;
      double best_mean = 1e30;
      if (fr.routes.empty()) {
        j.key("error").value(true);
        j.end_object();
        j.key("check").begin_object().end_object();
        j.end_object();
        all_ok = false;
        worst_ratio = 0;
        continue;
      }
      for (const auto& [k, s] : fr.routes) {
        j.key(k);
        write_stats(j, s);
        if (k != "router" && mean(s.wall) < best_mean) best_mean = mean(s.wall), best = k;
      }
      j.end_object();
      // Per-step medians (wall and GPU us) of every option, for replays and plots.
      j.key("per_step").begin_object();
      for (const auto& [k, s] : fr.routes) {
        j.key(k).begin_object();
        if (auto it = fr.samples.find(k); it != fr.samples.end()) {  // the model's features
          j.key("features").begin_array();
          for (const RouterFeatures& f : it->second.first) {
            j.begin_array();
            for (double v : f) j.value(v);
            j.end_array();
          }
          j.end_array();
        }
        j.key("wall_us").begin_array();
        for (double v : s.wall) j.value(v);
        j.end_array();
        j.key("gpu_us").begin_array();
        for (double v : s.gpu) j.value(v);
        j.end_array();
        j.end_object();
      }
      j.end_object();
      j.key("best_fixed").value(best);
      j.key("best_fixed_wall_us_mean").value(best_mean);
      const bool hybrid = fr.name == "hybrid";
      if (hybrid) {  // its routes are POD's modes; the router is POD's kAuto planner (hybrid.h)
        j.key("routes_are").value("weft::BatchPODAttention: serial, fused, partition = PodMode pinned (partition: "
                                  "the planner's k); router = PodMode::kAuto");
        j.key("step_shape_is").value("[prefill requests, prefill query tokens, decode requests, decode keys]");
        j.key("step_shape").begin_array();
        for (const auto& x : fr.step_shape) {
          j.begin_array();
          for (int64_t v : x) j.value(static_cast<long long>(v));
          j.end_array();
        }
        j.end_array();
        j.key("partition_k").begin_object();  // the pinned partition option's k (planner's) per step
        for (const auto& [k, c] : fr.partition_k) j.key(k).value(c);
        j.end_object();
      }
      if (fr.routes.count("router")) {  // decode families: with --router only; hybrid: always
        const double rm = mean(fr.routes.at("router").wall);
        j.key("router_wall_us_mean").value(rm);
        j.key("router_vs_best_fixed").value(best_mean / rm);
        if (hybrid) hybrid_ratio = best_mean / rm;
        else worst_ratio = std::min(worst_ratio, best_mean / rm);  // the decode router's summary
        if (!fr.router_decide_us.empty()) j.key("router_decide_us_p50").value(percentile(fr.router_decide_us, 0.5));
        j.key("tbt_us_p50").value(percentile(fr.routes.at("router").wall, 0.5));
        j.key("tbt_us_p99").value(percentile(fr.routes.at("router").wall, 0.99));
        j.key("picks").begin_object();
        for (const auto& [k, c] : fr.picks) j.key(k).value(c);
        j.end_object();
      }
      if (!fr.bal_plan_us_b256.empty()) {
        j.key("balanced_plan_us_p50_b256").value(percentile(fr.bal_plan_us_b256, 0.5));
        plan256.insert(plan256.end(), fr.bal_plan_us_b256.begin(), fr.bal_plan_us_b256.end());
      }
      j.key("check").begin_object();
      for (const auto& [k, c] : fr.checks) {
        j.key(k).begin_object();
        j.key("max_o_err").value(c.max_o_err);
        j.key("max_lse_err").value(c.max_lse_err);
        j.key("ok").value(c.ok);
        j.end_object();
        all_ok = all_ok && c.ok;
      }
      j.end_object();
      j.end_object();
    }
    j.end_array();
    j.key("correct").value(all_ok);
    j.key("cases").begin_array();
    j.begin_object();
    j.key("name").value("serve/summary");
    j.key("group").value("serve");
    j.key("extra").begin_object();
    if (routed) j.key("router_vs_best_fixed_min").value(worst_ratio);
    if (hybrid_ratio >= 0) j.key("hybrid_router_vs_best_fixed").value(hybrid_ratio);  // POD kAuto / best mode
    if (!plan256.empty()) j.key("decode_plan_us_p50_256").value(percentile(plan256, 0.5));
    j.key("correct").value(all_ok);
    j.end_object();
    j.end_object();
    j.end_array();
    j.end_object();
    std::ofstream(a.out) << j.str() << "\n";
    std::fprintf(stderr, "wrote %s\n", a.out.c_str());

    if (!a.calibrate.empty()) {
      RouterModel m;
      m.gpu = prop.name;
      m.num_kv_heads = kHkv;
      m.group_size = kHq / kHkv;
      m.head_dim = kD;
      m.slots = grid_slots(e);
      std::ostringstream cal;
      cal << "seed " << a.seed << ", " << fams.size() << " families x " << a.steps << " steps, median of " << a.reps
          << " interleaved reps, wall us; linear fallback: relative least squares, critical path = 1-D makespan; "
             "decisions: vote of the " << kRouterNeighbours << " nearest calibration steps";
      m.calibration = cal.str();
      for (RouteOption o : default_options(true)) {
        std::vector<RouterFeatures> x;
        std::vector<double> t;
        for (const FamilyResult& fr : results) {
          auto it = fr.samples.find(o.name);
          if (it == fr.samples.end()) continue;
          x.insert(x.end(), it->second.first.begin(), it->second.first.end());
          t.insert(t.end(), it->second.second.begin(), it->second.second.end());
        }
        if (x.empty()) continue;
        o.coef = weft::decode::fit_route(x, t, /*relative=*/true);
        m.options.push_back(o);
      }
      for (const FamilyResult& fr : results) {
        std::map<std::string, std::vector<double>> walls;
        for (const auto& [k, rs] : fr.routes) walls[k] = rs.wall;
        add_steps(m, fr.step_x, walls);
      }
      // The router's own decision time on the calibration steps (median over repeats).
      std::vector<double> d;
      for (const std::string& fam : fams) {
        if (fam == "hybrid") continue;  // POD's modes: not decode routes, not in the table
        const auto tr = weft::serve::make_trace(fam, a.seed, kPage, kHole, a.steps);
        for (const auto& st : weft::serve::simulate_steps(tr, a.steps)) {
          if (st.req.empty()) continue;
          const StepSummary s = summary_of(st);
          for (int r = 0; r < 5; ++r) {
            const auto t0 = Clock::now();
            volatile int32_t pick = weft::decode::choose_route(m, s, share_filter(s));
            (void)pick;
            d.push_back(us_since(t0));
          }
        }
      }
      m.router_us = percentile(d, 0.5);
      std::ofstream(a.calibrate) << m.to_json();
      std::fprintf(stderr, "wrote router table %s\n", a.calibrate.c_str());
    }
    return all_ok ? 0 : 1;
  } catch (const weft::Error& err) {
    std::fprintf(stderr, "weft::Error: %s\n", err.what());
    return 4;
  }
}
