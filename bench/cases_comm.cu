// Bench group "comm": fused all-reduce + residual add + RMSNorm (weft::Communicator, LSA path)
// vs the baseline ncclAllReduce + fused_add_rmsnorm (the same library's fallback path, on its own
// NCCL communicator), measured in the same run. One thread per GPU inside this process; world =
// all visible GPUs, and 2 (first two GPUs) when more are visible. tokens {128..8K} x hidden 8192,
// bf16, two-shot: the push kernel (register-staged stores) at 4/8/16 CTAs (the bulk kernel's rows
// went with it, issue 26); the copy-engine kernel (ce) at 4/8/16 CTAs with its chunk count chosen by size, a sweep of
// its chunk count (1/2/4/8) at 8 CTAs, ce zero-copy at 8, and the default (kAuto: kernel by
// size) at 2/4/8/16 CTAs: the issue's CTA sweep.
// (One-shot is only selected for <= 4 rows; its bench rows were dropped to keep the group short.)
// Timing: before every rep all ranks synchronize their stream and meet at a host barrier; rank 0
// brackets kIters back-to-back calls with events (amortizes the launch skew between ranks);
// per-call ms = bracket / kIters; median over reps. L2 is not flushed (the peers' data never
// sits in the local L2 anyway). Bytes = tokens * hidden * 2 (the all-reduced tensor).
// extra: nccl_baseline_ms, speedup (= baseline / fused), world_size, ctas.
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "multi_gpu.h"
#include "weft/comm.h"

namespace {

using weft::bench::DeviceArray;
using weft::bench::HostBarrier;
using weft::bench::median;

struct CommCase {
  int64_t tokens;
  int variant;  // 0 baseline (NCCL), 2 two-shot push (3, 4: the removed bulk kernel),
                // 5 two-shot copy engine, 6 copy engine zero-copy, 7 kAuto (kernel by size)
  int ctas;
  std::string name;
  int chunks = 0;  // copy engine: chunks per call (0: by size)
  std::string auto_kernel;  // variant 7: the kernel kAuto ran (rank 0's kernel_for)
  double ms = -1;
  std::string error;
};

void run_world(weft::bench::Context& ctx, const std::vector<int>& devs) {
  const int world = static_cast<int>(devs.size());
  const int64_t hidden = 8192;
  const weft::DType dt = weft::DType::kBFloat16;
  const std::string prefix = "comm/w" + std::to_string(world) + "/";
  std::vector<CommCase> cases;
  for (int64_t t : {128, 512, 1024, 2048, 4096, 8192}) {
    cases.push_back({t, 0, 0, prefix + "nccl_baseline/t" + std::to_string(t)});
    for (int c : {4, 8, 16})
      cases.push_back({t, 2, c, prefix + "two_shot/push/ctas" + std::to_string(c) + "/t" + std::to_string(t)});
    for (int c : {4, 8, 16})
      cases.push_back({t, 5, c, prefix + "two_shot/ce/ctas" + std::to_string(c) + "/t" + std::to_string(t)});
    for (int k : {1, 2, 4, 8})
      cases.push_back({t, 5, 8, prefix + "two_shot/ce_chunks" + std::to_string(k) + "/ctas8/t" + std::to_string(t), k});
    cases.push_back({t, 6, 8, prefix + "two_shot/ce_zero_copy/ctas8/t" + std::to_string(t)});
    for (int c : {2, 4, 8, 16})
      cases.push_back({t, 7, c, prefix + "two_shot/auto/ctas" + std::to_string(c) + "/t" + std::to_string(t)});
  }
  // Baselines are needed for every reported speedup: keep a baseline when any case of its
  // token count is wanted.
  std::vector<bool> wanted(cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) wanted[i] = ctx.wants(cases[i].name);
  for (std::size_t i = 0; i < cases.size(); ++i)
    if (cases[i].variant == 0)
      for (std::size_t j = i + 1; j < cases.size() && cases[j].variant != 0; ++j) wanted[i] = wanted[i] || wanted[j];

  const int reps = ctx.quick() ? 7 : 20, warmup = 3, iters = 10;
  HostBarrier barrier(world);
  std::string path_line;
  const ncclUniqueId id_lsa = weft::Communicator::new_unique_id();
  const ncclUniqueId id_nccl = weft::Communicator::new_unique_id();
  std::vector<std::string> rank_error(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        cudaSetDevice(devs[r]);
        weft::CommOptions o;
        o.max_tokens = 8192;
        o.max_hidden = hidden;
        weft::Communicator lsa(id_lsa, r, world, o);
        o.force_fallback = true;
        weft::Communicator nccl(id_nccl, r, world, o);
        if (r == 0)
          path_line = std::string(weft::comm_path_name(lsa.path())) + " (" + lsa.path_reason() + ")";
        cudaStream_t s;
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0);
        cudaEventCreate(&e1);
        const std::size_t n = 8192 * hidden;
        DeviceArray x(n * 2), res(n * 2), w(hidden * 2), out(n * 2);
        weft::bench::fill_random(x.get(), n, dt, 10 + r);
        weft::bench::fill_random(res.get(), n, dt, 99);
        weft::bench::fill_random(w.get(), hidden, dt, 7, 0.5f, 1.5f);
        cudaDeviceSynchronize();
        for (std::size_t i = 0; i < cases.size(); ++i) {
          if (!wanted[i]) continue;
          CommCase& c = cases[i];
          const int dev = devs[r];
          weft::TensorView tx(x.get(), dt, {c.tokens, hidden}, weft::Device::kCUDA, dev);
          weft::TensorView tres(res.get(), dt, {c.tokens, hidden}, weft::Device::kCUDA, dev);
          weft::TensorView tw(w.get(), dt, {hidden}, weft::Device::kCUDA, dev);
          weft::TensorView tout(out.get(), dt, {c.tokens, hidden}, weft::Device::kCUDA, dev);
          weft::Communicator& comm = c.variant == 0 ? nccl : lsa;
          const weft::AllReduceVariant v = weft::AllReduceVariant::kTwoShot;
          const int ctas = c.variant == 0 ? 1 : c.ctas;
          if (c.variant != 0)
            lsa.set_kernel(c.variant == 2   ? weft::CommKernel::kPush
                           : c.variant == 7 ? weft::CommKernel::kAuto
                                            : weft::CommKernel::kCopyEngine);
          lsa.set_copy_engine_chunks(c.chunks);
          if (r == 0 && c.variant == 7) c.auto_kernel = weft::comm_kernel_name(lsa.kernel_for(c.tokens, hidden, dt));
          if (c.variant == 6) {  // zero copy: x lives in the symmetric input, out is the symmetric output
            if (lsa.input_buffer() == nullptr) throw std::runtime_error("zero copy needs the LSA path");
            cudaMemcpyAsync(lsa.input_buffer(), x.get(), c.tokens * hidden * 2, cudaMemcpyDeviceToDevice, s);
            tx = weft::TensorView(lsa.input_buffer(), dt, {c.tokens, hidden}, weft::Device::kCUDA, dev);
            tout = weft::TensorView(lsa.output_buffer(), dt, {c.tokens, hidden}, weft::Device::kCUDA, dev);
          }
          std::vector<double> samples;
          for (int rep = 0; rep < warmup + reps; ++rep) {
            cudaStreamSynchronize(s);
            barrier.wait();
            if (r == 0) cudaEventRecord(e0, s);
            for (int k = 0; k < iters; ++k)
              weft::fused_allreduce_add_rmsnorm(comm, tx, tres, tw, 1e-6, tout, ctas, s, v);
            if (r == 0) cudaEventRecord(e1, s);
            cudaStreamSynchronize(s);
            if (r == 0 && rep >= warmup) {
              float ms = 0;
              cudaEventElapsedTime(&ms, e0, e1);
              samples.push_back(ms / iters);
            }
          }
          lsa.check_remote_errors(s);
          if (r == 0) c.ms = median(samples);
        }
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
        cudaStreamDestroy(s);
        barrier.wait();  // destroy the communicators together (collective)
      } catch (const std::exception& e) {
        rank_error[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  std::printf("comm: world %d, path %s\n", world, path_line.c_str());
  std::string err;
  for (int r = 0; r < world; ++r)
    if (!rank_error[r].empty()) err += "rank " + std::to_string(r) + ": " + rank_error[r] + "; ";
  double baseline = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const CommCase& c = cases[i];
    if (c.variant == 0) baseline = c.ms;
    if (!wanted[i] || !ctx.wants(c.name)) continue;
    weft::bench::Result res;
    res.name = c.name;
    res.params = {{"tokens", std::to_string(c.tokens)}, {"hidden", std::to_string(hidden)}, {"dtype", "bf16"},
                  {"variant", c.variant == 0 ? "nccl_allreduce+fused_add_rmsnorm" : "two_shot"},
                  {"kernel", c.variant == 0   ? "-"
                             : c.variant == 2 ? "push"
                             : c.variant == 5 ? "ce"
                             : c.variant == 6 ? "ce_zero_copy"
                                              : "auto:" + c.auto_kernel},
                  {"ce_chunks", c.variant >= 5 ? (c.chunks ? std::to_string(c.chunks) : "auto") : "-"}};
    if (!err.empty() || c.ms < 0) {
      ctx.report_error(res, err.empty() ? "not measured" : err);
      continue;
    }
    res.ms = c.ms;
    res.bytes = static_cast<double>(c.tokens) * hidden * 2;
    res.extra = {{"nccl_baseline_ms", baseline}, {"speedup", baseline > 0 ? baseline / c.ms : 0},
                 {"world_size", world}, {"ctas", c.variant == 0 ? 0 : c.ctas}};
    ctx.report(res);
  }
}

}  // namespace

WEFT_BENCH_GROUP(comm) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
    std::printf("comm: skipped, needs >= 2 GPUs (%d visible)\n", n);
    return;
  }
  std::vector<int> all;
  for (int i = 0; i < n; ++i) all.push_back(i);
  run_world(ctx, all);
  if (n > 2) run_world(ctx, {0, 1});
}
