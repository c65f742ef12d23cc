// weft-serve-sim's per-step machinery (serve_sim.cu drives it): the device state of a run
// (Engine: every route's wrapper, workspace and step buffers) and of a trace family (Family: its
// paged pool and block table), one timed execution of a route option on a step (exec_route), and
// the float64 reference check of a step's rows.
#pragma once
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/plan_phases.h"
#include "decode/work_queue_decode.h"
#include "serve/routes.h"
#include "serve/sim_util.h"
#include "serve/trace.h"
#include "weft/decode.h"

namespace weft::serve::sim {

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

void setup_family(Family& f, const std::string& name, uint64_t seed, int32_t steps);

// The step's block table rows (host, pinned) and the view of them.
weft::BlockTable fill_table(Family& f, const weft::serve::Step& st);

struct Sample {
  double wall_us = 0, gpu_us = 0, plan_us = 0;
  // Host time of plan()'s phases (src/common/plan_phases.h): all zero unless built with
  // -DWEFT_PLAN_PHASES=ON.
  std::array<double, weft::diag::kPhCount> phase_us{};
};

// One execution of `o` (or, with `routed`, of the kAuto wrapper) on the step: upload the block
// table, plan, run (events around run), sync.
Sample exec_route(Engine& e, Family& f, const weft::BlockTable& t, const RouteOption& o, bool routed = false);

// plan() of the balanced wrapper alone on the step just executed (its rows already uploaded, the
// stream drained): the --replan-warm sample (host time and phases; wall and GPU time 0).
Sample replan_balanced(Engine& e, const weft::BlockTable& t);

// The float64 reference of rows `rows` of a step (K/V of those rows copied back from their
// pages), computed once per checked step and compared with every option's output.
struct RefRows {
  std::vector<int32_t> rows;
  std::vector<std::vector<double>> o, lse;  // per row: [Hq * D], [Hq]
};
RefRows reference_rows(Engine& e, Family& f, const weft::serve::Step& st, const std::vector<int32_t>& rows);

// Max |O - O_ref| and |LSE - LSE_ref| of the last run's rows against the reference.
struct CheckResult {
  double max_o_err = 0, max_lse_err = 0;
  bool ok = true;
};
CheckResult check_rows(Engine& e, const weft::serve::Step& st, const RefRows& ref);

inline int32_t grid_slots(const Engine& e) { return e.bal.num_ctas(); }

}  // namespace weft::serve::sim
