// weft-serve-sim's per-step machinery: definitions (engine.h).
#include "serve/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "reference/attention.h"

namespace weft::serve::sim {

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

Sample exec_route(Engine& e, Family& f, const weft::BlockTable& t, const RouteOption& o, bool routed) {
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
  weft::diag::plan_phases_begin();
  const auto tp = Clock::now();
  auto planned = [&] {  // plan() returned: its phases (diagnostic builds) and its host time
    weft::diag::plan_phases_end();
    s.plan_us = us_since(tp);
    for (int p = 0; p < weft::diag::kPhCount; ++p) s.phase_us[p] = 1e-3 * double(weft::diag::plan_phase_clock().ns[p]);
  };
  if (routed) {
    e.routed->plan(t, kHq, kHkv, kD, kPage, weft::DType::kBFloat16, weft::KVLayout::kNHD, var, e.ws_routed,
                   e.ws_routed_bytes, e.stream);
    planned();
    CK(cudaEventRecord(e.e0, e.stream));
    e.routed->run(q, f.cache, t, out, &lse, e.stream);
  } else switch (o.route) {
    case Route::kBalanced:
      e.bal.plan(t, kHq, kHkv, kD, kPage, weft::DType::kBFloat16, weft::KVLayout::kNHD, var, e.ws_bal,
                 e.ws_bal_bytes, e.stream);
      planned();
      CK(cudaEventRecord(e.e0, e.stream));
      e.bal.run(q, f.cache, t, out, &lse, e.stream);
      break;
    case Route::kPrefixShare:
      e.share->plan(t, kHq, kHkv, kD, kPage, weft::DType::kBFloat16, weft::KVLayout::kNHD, var, e.ws_share,
                    e.ws_share_bytes, e.stream);
      planned();
      CK(cudaEventRecord(e.e0, e.stream));
      e.share->run(q, f.cache, t, out, &lse, e.stream);
      break;
    case Route::kWorkQueue:
    case Route::kNoSplit:
      e.wq.plan(t, o.route == Route::kNoSplit ? 0 : o.chunk, kPage, weft::DType::kBFloat16, weft::KVLayout::kNHD,
                var, e.ws_wq, e.ws_wq_bytes, e.stream);
      planned();
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

Sample replan_balanced(Engine& e, const weft::BlockTable& t) {
  Sample s;
  const weft::AttentionVariant var;
  weft::diag::plan_phases_begin();
  const auto tp = Clock::now();
  e.bal.plan(t, kHq, kHkv, kD, kPage, weft::DType::kBFloat16, weft::KVLayout::kNHD, var, e.ws_bal, e.ws_bal_bytes,
             e.stream);
  weft::diag::plan_phases_end();
  s.plan_us = us_since(tp);
  for (int p = 0; p < weft::diag::kPhCount; ++p) s.phase_us[p] = 1e-3 * double(weft::diag::plan_phase_clock().ns[p]);
  CK(cudaStreamSynchronize(e.stream));
  return s;
}

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

}  // namespace weft::serve::sim
