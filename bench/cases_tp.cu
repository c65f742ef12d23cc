// Bench group "tp": one TP-sharded Llama layer (weft::TpLayer) on ONE GPU (world size 1: the
// fused calls are the local residual add + RMSNorm on comm_ctas CTAs), the overhead side of
// TokenWeave's ledger (docs/perf-notes-tp.md turns it into the multi-GPU prediction).
// Shapes: Llama-3-70B (hidden 8192, 64 q / 8 kv heads, MLP 28672) and Llama-3-8B (4096, 32 / 8,
// 14336), sharded over TP 4 and 8 (heads and MLP width / TP; kv heads at least 1), head_dim 128,
// bf16, one prefill request of T tokens (T = 1K..16K), page size 16. Rows
// tp/<model>/tp<N>/t<T>/...:
//   unsplit        the whole layer, one stream (TpSchedule::kUnsplit), 8 comm CTAs;
//   split          two halves from the wave-aware planner (all SMs), one stream, no overlap:
//                  extra.split_overhead = split / unsplit - 1 (the split's wave cost);
//   hold/k<k>      the split schedule (GEMMs and cut planned for SMs - k: gemm_sms) while a
//                  kernel occupies k SMs for its whole duration
//                  (1024 threads + 227 KB shared memory per CTA: no GEMM or attention CTA can
//                  share the SM, as with the real comm kernel, whose 512 x 128 registers fill it):
//                  extra.overlap_overhead = hold / unsplit - 1 = GEMM slowdown from reserving
//                  k SMs + the split's wave cost (the planner's cut with sm_count - k);
//   overlap/k<k>   the real overlapped schedule (TpSchedule::kOverlap, comm_ctas = k; at world 1
//                  the comm stream runs the local add + norm): extra.overlap_vs_unsplit.
// FLOPs: the four GEMMs (2 T N K each) + causal attention (2 x 2 hq d T (T + 1) / 2).
// Each timed run starts from an L2 flush (harness); the residual is updated in place (values
// change, work does not).
#include <cuda_runtime_api.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness.h"
#include "weft/comm.h"
#include "weft/tp_layer.h"

namespace {

using weft::bench::DeviceArray;

struct Model {
  const char* name;
  int64_t hidden, inter;
  int32_t q_heads, kv_heads;
};
const Model kModels[] = {{"llama3-70b", 8192, 28672, 64, 8}, {"llama3-8b", 4096, 14336, 32, 8}};
const int kHoldKs[] = {2, 4, 8, 16};

// Holds its SM until *flag != 0 (thread 0 polls; the others wait at the barrier) or until
// max_ns have passed (then counts a timeout): a safety net, since a GEMM that waits for all its
// CTAs to be resident would otherwise never let the flag be set (see src/tp/gemm_lt.h).
__global__ void __launch_bounds__(1024, 1) hold_sm_kernel(const volatile int* flag, unsigned long long max_ns,
                                                          int* timeouts) {
  extern __shared__ char hold_smem[];
  if (threadIdx.x == 0) {
    hold_smem[0] = 0;
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (;;) {
      if (*flag != 0) break;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
      if (t - t0 > max_ns) {
        atomicAdd(timeouts, 1);
        break;
      }
      __nanosleep(2000);
    }
  }
  __syncthreads();
}

struct Holder {
  DeviceArray flag{sizeof(int)}, timeouts{sizeof(int)};
  unsigned long long max_ns = 0;
  cudaStream_t side = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
  int smem = 0;
  Holder() {
    int lo = 0, hi = 0;
    WEFT_BENCH_CUDA(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    WEFT_BENCH_CUDA(cudaStreamCreateWithPriority(&side, cudaStreamNonBlocking, hi));
    WEFT_BENCH_CUDA(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    WEFT_BENCH_CUDA(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    int dev = 0;
    WEFT_BENCH_CUDA(cudaGetDevice(&dev));
    WEFT_BENCH_CUDA(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    WEFT_BENCH_CUDA(cudaFuncSetAttribute(hold_sm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    WEFT_BENCH_CUDA(cudaMemset(timeouts.get(), 0, sizeof(int)));
  }
  int take_timeouts() {
    int n = 0;
    WEFT_BENCH_CUDA(cudaDeviceSynchronize());
    WEFT_BENCH_CUDA(cudaMemcpy(&n, timeouts.get(), sizeof(int), cudaMemcpyDeviceToHost));
    WEFT_BENCH_CUDA(cudaMemset(timeouts.get(), 0, sizeof(int)));
    return n;
  }
  ~Holder() {
    cudaStreamSynchronize(side);
    cudaEventDestroy(fork);
    cudaEventDestroy(join);
    cudaStreamDestroy(side);
  }
  // k SMs held on the side stream while `work` runs on s.
  void around(cudaStream_t s, int k, const std::function<void(cudaStream_t)>& work) {
    WEFT_BENCH_CUDA(cudaMemsetAsync(flag.get(), 0, sizeof(int), s));
    WEFT_BENCH_CUDA(cudaEventRecord(fork, s));
    WEFT_BENCH_CUDA(cudaStreamWaitEvent(side, fork, 0));
    hold_sm_kernel<<<k, 1024, smem, side>>>(flag.as<int>(), max_ns, timeouts.as<int>());
    WEFT_BENCH_CUDA(cudaGetLastError());
    work(s);
    WEFT_BENCH_CUDA(cudaMemsetAsync(flag.get(), 0xFF, sizeof(int), s));
    WEFT_BENCH_CUDA(cudaEventRecord(join, side));
    WEFT_BENCH_CUDA(cudaStreamWaitEvent(s, join, 0));
  }
};

double layer_flops(const weft::TpLayerShape& sh, int64_t T) {
  const double H = sh.hidden, I = sh.intermediate, qw = double(sh.num_qo_heads) * sh.head_dim;
  const double nqkv = double(sh.num_qo_heads + 2 * sh.num_kv_heads) * sh.head_dim;
  const double gemm = 2.0 * T * (H * nqkv + qw * H + H * 2 * I + I * H);
  const double attn = 2.0 * 2.0 * qw * double(T) * double(T + 1) / 2.0;
  return gemm + attn;
}

}  // namespace

WEFT_BENCH_GROUP(tp) {
  std::vector<int64_t> tokens = {1024, 2048, 4096, 8192, 16384};
  if (ctx.quick()) tokens = {1024, 4096, 16384};
  const int64_t max_t = tokens.back();
  bool any = false;
  for (const Model& m : kModels)
    for (int tp : {4, 8})
      for (int64_t T : tokens)
        any = any || ctx.wants(std::string("tp/") + m.name + "/tp" + std::to_string(tp) + "/t" + std::to_string(T) + "/");
  if (!any) return;
  weft::CommOptions co;
  co.max_tokens = max_t;
  co.max_hidden = 8192;
  weft::Communicator comm(weft::Communicator::new_unique_id(), 0, 1, co);
  Holder holder;
  for (const Model& m : kModels)
    for (int tp : {4, 8}) {
      const std::string prefix = std::string("tp/") + m.name + "/tp" + std::to_string(tp) + "/";
      bool wanted = false;
      for (int64_t T : tokens) wanted = wanted || ctx.wants(prefix + "t" + std::to_string(T) + "/");
      if (!wanted) continue;
      weft::TpLayerShape sh;
      sh.hidden = m.hidden;
      sh.num_qo_heads = m.q_heads / tp;
      sh.num_kv_heads = m.kv_heads / tp > 0 ? m.kv_heads / tp : 1;
      sh.head_dim = 128;
      sh.intermediate = m.inter / tp;
      sh.dtype = weft::DType::kBFloat16;
      weft::TpLayerBounds bd;
      bd.max_tokens = max_t;
      bd.max_batch = 1;
      bd.max_kv_tokens = max_t;
      bd.page_size = 16;
      std::unique_ptr<weft::TpLayer> layer;
      try {
        layer = std::make_unique<weft::TpLayer>(comm, sh, bd, 1);
      } catch (const std::exception& e) {
        weft::bench::Result r;
        r.name = prefix + "setup";
        ctx.report_error(r, e.what());
        continue;
      }
      const std::size_t n = static_cast<std::size_t>(max_t * m.hidden);
      DeviceArray x(n * 2), res(n * 2), out(n * 2);
      weft::bench::fill_random(x.get(), n, weft::DType::kBFloat16, 11);
      weft::bench::fill_random(res.get(), n, weft::DType::kBFloat16, 12);
      for (int64_t T : tokens) {
        const std::string base = prefix + "t" + std::to_string(T) + "/";
        if (!ctx.wants(base)) continue;
        weft::TpBatch batch;
        batch.q_lens = {static_cast<int32_t>(T)};
        batch.ctx_lens = {0};
        const weft::TensorView tx(x.get(), weft::DType::kBFloat16, {T, m.hidden});
        const weft::TensorView tr(res.get(), weft::DType::kBFloat16, {T, m.hidden});
        const weft::TensorView to(out.get(), weft::DType::kBFloat16, {T, m.hidden});
        const double flops = layer_flops(sh, T);
        auto params = [&](weft::bench::Result& r, const weft::TpLayerOptions& o) {
          r.params = {{"model", m.name},
                      {"tp", std::to_string(tp)},
                      {"tokens", std::to_string(T)},
                      {"hidden", std::to_string(sh.hidden)},
                      {"q_heads", std::to_string(sh.num_qo_heads)},
                      {"kv_heads", std::to_string(sh.num_kv_heads)},
                      {"intermediate", std::to_string(sh.intermediate)},
                      {"schedule", weft::tp_schedule_name(o.schedule)},
                      {"comm_ctas", std::to_string(o.comm_ctas)},
                      {"m1", std::to_string(layer->split_tokens())}};
          r.flops = flops;
          r.ceiling = "gemm";
        };
        double t_unsplit = 0;
        std::vector<std::pair<std::string, double>> unsplit_extra;
        weft::bench::Result ru;
        try {
          weft::TpLayerOptions o;
          o.schedule = weft::TpSchedule::kUnsplit;
          ru.name = base + "unsplit";
          layer->plan(batch, o, ctx.stream());
          ctx.warm_up_once([&](cudaStream_t s) { layer->run(tx, tr, to, s); });
          ru.ms = t_unsplit = ctx.time_ms([&](cudaStream_t s) { layer->run(tx, tr, to, s); }, 2, 10);
          params(ru, o);
          // split (planner on all SMs), one stream
          weft::bench::Result rs;
          o.schedule = weft::TpSchedule::kSplit;
          rs.name = base + "split";
          layer->plan(batch, o, ctx.stream());
          rs.ms = ctx.time_ms([&](cudaStream_t s) { layer->run(tx, tr, to, s); }, 2, 10);
          params(rs, o);
          rs.extra = {{"split_overhead", rs.ms / t_unsplit - 1}, {"wave_neutral", layer->split().wave_neutral ? 1.0 : 0.0},
                      {"waves_total", double(layer->split().waves_total)},
                      {"waves_split", double(layer->split().waves1 + layer->split().waves2)}};
          unsplit_extra.push_back({"split_overhead", rs.ms / t_unsplit - 1});
          ctx.report(rs);
          for (int k : kHoldKs) {
            // k SMs held for the whole split schedule, the cut planned for SMs - k (as kOverlap does).
            weft::bench::Result rh;
            rh.name = base + "hold/k" + std::to_string(k);
            weft::TpLayerOptions oh;
            oh.schedule = weft::TpSchedule::kSplit;
            oh.gemm_sms = ctx.sm_count() - k;  // GEMMs and the cut planned for the SMs left
            layer->plan(batch, oh, ctx.stream());
            // Released when the layer ends; at the latest after 4x the split time (never hit
            // unless the GEMMs wait for held SMs: extra.hold_timeouts).
            holder.max_ns = static_cast<unsigned long long>(4e6 * rs.ms);
            rh.ms = ctx.time_ms(
                [&](cudaStream_t s) { holder.around(s, k, [&](cudaStream_t s2) { layer->run(tx, tr, to, s2); }); },
                2, 10);
            params(rh, oh);
            rh.params.push_back({"held_sms", std::to_string(k)});
            rh.extra = {{"overlap_overhead", rh.ms / t_unsplit - 1}, {"k", double(k)},
                        {"hold_timeouts", double(holder.take_timeouts())}};
            unsplit_extra.push_back({"overlap_overhead_k" + std::to_string(k), rh.ms / t_unsplit - 1});
            ctx.report(rh);
          }
          for (int k : kHoldKs) {
            weft::bench::Result ro;
            ro.name = base + "overlap/k" + std::to_string(k);
            weft::TpLayerOptions oo;
            oo.schedule = weft::TpSchedule::kOverlap;
            oo.comm_ctas = k;
            layer->plan(batch, oo, ctx.stream());
            ro.ms = ctx.time_ms([&](cudaStream_t s) { layer->run(tx, tr, to, s); }, 2, 10);
            params(ro, oo);
            ro.extra = {{"overlap_vs_unsplit", ro.ms / t_unsplit - 1}, {"k", double(k)}};
            ctx.report(ro);
          }
          ru.extra = unsplit_extra;
          ctx.report(ru);
        } catch (const std::exception& e) {
          ctx.report_error(ru, e.what());
        }
      }
    }
}
