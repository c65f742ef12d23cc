// Bench group "tp_world": the TP layer (weft::TpLayer) at world size >= 2, one thread per GPU in
// this process (bench/multi_gpu.h, as the comm group). Skipped with a line when < 2 GPUs are
// visible. World = the first two GPUs (world 2; the issue's 4-GPU run would add {0..3}).
// Shapes: the Llama-3-70B layer (hidden 8192, 64 q / 8 kv heads, MLP 28672, head_dim 128, bf16,
// page 16) sharded over TP s: s = world (the real sharding: 32 / 4 heads, MLP 14336 per rank at
// world 2) and s = 4 (the shard the docs' ledger predicted with world-2 comm rows: 16 / 2 heads,
// MLP 7168 per rank). One prefill request of T tokens (T = 1K..16K), as the world-1 group.
// Rows tp_world/llama3-70b/w<W>/tp<s>/t<T>/...:
//   nccl_baseline  kUnsplit on a Communicator with CommOptions::force_fallback (ncclAllReduce +
//                  fused_add_rmsnorm, non-overlapped): the baseline of every speedup;
//   unsplit        kUnsplit on the LSA Communicator (fused two-shot calls, 8 CTAs), no overlap;
//   split          kSplit on LSA (the planner's halves, one stream), 8 CTAs;
//   overlap/k<k>   kOverlap on LSA with comm_ctas = k (2/4/8/16; GEMMs planned for SMs - k).
// params.comm_path names the path the "LSA" communicator really took: off the LSA path (e.g.
// binaries built against other NCCL headers than the runtime's) those rows run NCCL too, and
// the group prints a WARNING line.
// extra: speedup_vs_nccl_baseline (= baseline ms / row ms), world_size, comm_ctas, m1,
// rank_spread (max over ranks / min over ranks of the median, 1 = ranks agree).
// Timing (the world-1 group's method, made collective): each rank holds both layers (same seed:
// same weights); after plan(), two untimed steps on every rank (tp_layer.h WARM-UP: the first
// launch of a kernel must not meet a comm kernel that waits for its peers), then per rep:
// every rank flushes its L2 (a memset of 2x L2 on its stream), synchronizes its stream and
// meets at the host barrier; each rank brackets ONE layer step with its own events. A rep's time
// is the slowest rank's (the step ends when the last rank's out is complete); ms = median over
// reps. The first case of the process runs ~1 s back to back first (clock ramp, as
// Context::warm_up_once).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "multi_gpu.h"
#include "weft/comm.h"
#include "weft/tp_layer.h"

namespace {

using weft::bench::DeviceArray;

struct WorldCase {
  int shard;          // TP s the model is sharded over (heads and MLP width / s)
  int64_t tokens;
  int kind;           // 0 nccl_baseline, 1 unsplit (LSA), 2 split (LSA), 3 overlap (LSA)
  int ctas;
  std::string name, base;
  std::vector<std::vector<double>> samples;  // [rank][rep]
  int64_t m1 = 0;
  double ms = -1;
};

weft::TpLayerShape shard_shape(int s) {
  weft::TpLayerShape sh;
  sh.hidden = 8192;
  sh.num_qo_heads = 64 / s;
  sh.num_kv_heads = 8 / s > 0 ? 8 / s : 1;
  sh.head_dim = 128;
  sh.intermediate = 28672 / s;
  sh.dtype = weft::DType::kBFloat16;
  return sh;
}

void run_world(weft::bench::Context& ctx, const std::vector<int>& devs) {
  const int world = static_cast<int>(devs.size());
  std::vector<int64_t> tokens = {1024, 2048, 4096, 8192, 16384};
  if (ctx.quick()) tokens = {1024, 4096, 16384};
  const int64_t max_t = tokens.back(), hidden = 8192;
  const int ks[] = {2, 4, 8, 16};
  std::vector<int> shards = {world};
  if (world != 4) shards.push_back(4);
  std::vector<WorldCase> cases;
  for (int s : shards)
    for (int64_t T : tokens) {
      const std::string base = "tp_world/llama3-70b/w" + std::to_string(world) + "/tp" + std::to_string(s) + "/t" +
                               std::to_string(T) + "/";
      cases.push_back({s, T, 0, 8, base + "nccl_baseline", base});
      cases.push_back({s, T, 1, 8, base + "unsplit", base});
      cases.push_back({s, T, 2, 8, base + "split", base});
      for (int k : ks) cases.push_back({s, T, 3, k, base + "overlap/k" + std::to_string(k), base});
    }
  // A speedup needs its baseline: keep a T's baseline when any row of that T is wanted.
  std::vector<bool> wanted(cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) wanted[i] = ctx.wants(cases[i].name);
  for (std::size_t i = 0; i < cases.size(); ++i)
    if (cases[i].kind == 0)
      for (std::size_t j = i + 1; j < cases.size() && cases[j].kind != 0; ++j) wanted[i] = wanted[i] || wanted[j];
  if (std::none_of(wanted.begin(), wanted.end(), [](bool b) { return b; })) return;

  const int warmup = 2, reps = ctx.quick() ? 7 : 10;
  weft::bench::HostBarrier barrier(world);
  const ncclUniqueId id_lsa = weft::Communicator::new_unique_id();
  const ncclUniqueId id_nccl = weft::Communicator::new_unique_id();
  std::vector<std::string> rank_error(world);
  std::string path_line, lsa_path = "?";
  int ramp_steps = 0;  // written by rank 0 between two barriers
  for (WorldCase& c : cases) c.samples.assign(world, {});
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        WEFT_BENCH_CUDA(cudaSetDevice(devs[r]));
        const int dev = devs[r];
        weft::CommOptions co;
        co.max_tokens = max_t;
        co.max_hidden = hidden;
        weft::Communicator lsa(id_lsa, r, world, co);
        co.force_fallback = true;
        weft::Communicator nccl(id_nccl, r, world, co);
        if (r == 0) {
          lsa_path = weft::comm_path_name(lsa.path());
          path_line = lsa_path + " (" + lsa.path_reason() + ")";
        }
        cudaStream_t st;
        WEFT_BENCH_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
        cudaEvent_t e0, e1;
        WEFT_BENCH_CUDA(cudaEventCreate(&e0));
        WEFT_BENCH_CUDA(cudaEventCreate(&e1));
        int l2 = 0;
        WEFT_BENCH_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
        // 2x L2 written before each rep evicts the previous step's lines (harness: 2x L2 read).
        DeviceArray flush(2 * static_cast<std::size_t>(l2));
        const std::size_t n = static_cast<std::size_t>(max_t * hidden);
        DeviceArray x(n * 2), res(n * 2), out(n * 2);
        weft::bench::fill_random(x.get(), n, weft::DType::kBFloat16, 11);
        weft::bench::fill_random(res.get(), n, weft::DType::kBFloat16, 12);
        bool ramped = false;
        for (int s : shards) {
          bool any = false;
          for (std::size_t i = 0; i < cases.size(); ++i) any = any || (wanted[i] && cases[i].shard == s);
          if (!any) continue;
          const weft::TpLayerShape sh = shard_shape(s);
          weft::TpLayerBounds bd;
          bd.max_tokens = max_t;
          bd.max_batch = 1;
          bd.max_kv_tokens = max_t;
          bd.page_size = 16;
          // Same seed on both layers and every rank: one model's weights (values do not change work).
          weft::TpLayer layer_lsa(lsa, sh, bd, 1), layer_nccl(nccl, sh, bd, 1);
          for (std::size_t i = 0; i < cases.size(); ++i) {
            WorldCase& c = cases[i];
            if (!wanted[i] || c.shard != s) continue;
            weft::TpBatch batch;
            batch.q_lens = {static_cast<int32_t>(c.tokens)};
            batch.ctx_lens = {0};
            const int64_t T = c.tokens;
            const weft::TensorView tx(x.get(), weft::DType::kBFloat16, {T, hidden}, weft::Device::kCUDA, dev);
            const weft::TensorView tr(res.get(), weft::DType::kBFloat16, {T, hidden}, weft::Device::kCUDA, dev);
            const weft::TensorView to(out.get(), weft::DType::kBFloat16, {T, hidden}, weft::Device::kCUDA, dev);
            weft::TpLayer& layer = c.kind == 0 ? layer_nccl : layer_lsa;
            weft::TpLayerOptions o;
            o.schedule = c.kind <= 1 ? weft::TpSchedule::kUnsplit
                                     : c.kind == 2 ? weft::TpSchedule::kSplit : weft::TpSchedule::kOverlap;
            o.comm_ctas = c.ctas;
            layer.plan(batch, o, st);
            if (r == 0) c.m1 = layer.split_tokens();
            auto step = [&] { layer.run(tx, tr, to, st); };
            // All ranks meet with idle streams, then one step bracketed by this rank's events.
            auto timed_step = [&] {
              WEFT_BENCH_CUDA(cudaStreamSynchronize(st));
              barrier.wait();
              WEFT_BENCH_CUDA(cudaEventRecord(e0, st));
              step();
              WEFT_BENCH_CUDA(cudaEventRecord(e1, st));
              WEFT_BENCH_CUDA(cudaStreamSynchronize(st));
              float ms = 0;
              WEFT_BENCH_CUDA(cudaEventElapsedTime(&ms, e0, e1));
              return ms;
            };
            // Untimed: the clock ramp once per process (~1 s of steps), else the warm-up steps.
            int untimed = warmup;
            if (!ramped) {
              const float one = timed_step();
              // Every rank must run the same count (collective steps): rank 0's estimate decides.
              barrier.wait();
              if (r == 0) ramp_steps = std::max(2, std::min(2000, static_cast<int>(1000.0 / std::max(one, 0.01f))));
              barrier.wait();
              untimed = ramp_steps;
              ramped = true;
            }
            for (int u = 0; u < untimed; ++u) step();
            for (int rep = 0; rep < reps; ++rep) {
              WEFT_BENCH_CUDA(cudaMemsetAsync(flush.get(), rep & 0xFF, flush.bytes(), st));
              c.samples[r].push_back(timed_step());
            }
            lsa.check_remote_errors(st);
          }
          WEFT_BENCH_CUDA(cudaStreamSynchronize(st));
          barrier.wait();  // both layers of every rank idle before they are freed
        }
        WEFT_BENCH_CUDA(cudaEventDestroy(e0));
        WEFT_BENCH_CUDA(cudaEventDestroy(e1));
        WEFT_BENCH_CUDA(cudaStreamDestroy(st));
        barrier.wait();  // destroy the communicators together (collective)
      } catch (const std::exception& e) {
        rank_error[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  std::printf("tp_world: world %d, path %s\n", world, path_line.c_str());
  if (lsa_path != "lsa")
    std::printf("tp_world: WARNING the unsplit / split / overlap rows ran on %s, not on the fused LSA path "
                "(params.comm_path)\n", lsa_path.c_str());
  std::string err;
  for (int r = 0; r < world; ++r)
    if (!rank_error[r].empty()) err += "rank " + std::to_string(r) + ": " + rank_error[r] + "; ";
  double baseline = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    WorldCase& c = cases[i];
    const weft::TpLayerShape sh = shard_shape(c.shard);
    weft::bench::Result res;
    res.name = c.name;
    res.params = {{"model", "llama3-70b"},
                  {"tp", std::to_string(c.shard)},
                  {"tokens", std::to_string(c.tokens)},
                  {"hidden", std::to_string(sh.hidden)},
                  {"q_heads", std::to_string(sh.num_qo_heads)},
                  {"kv_heads", std::to_string(sh.num_kv_heads)},
                  {"intermediate", std::to_string(sh.intermediate)},
                  {"comm", c.kind == 0 ? "nccl_allreduce+fused_add_rmsnorm" : "lsa_fused_two_shot"},
                  // The path the communicator actually took (the LSA one falls back, e.g. on an
                  // NCCL runtime that differs from the headers: then every row is NCCL).
                  {"comm_path", c.kind == 0 ? "nccl_fallback" : lsa_path},
                  {"schedule", c.kind <= 1 ? "unsplit" : c.kind == 2 ? "split" : "overlap"},
                  {"m1", std::to_string(c.m1)}};
    bool measured = !c.samples.empty() && !c.samples[0].empty();
    for (const auto& v : c.samples) measured = measured && v.size() == c.samples[0].size();
    if (c.kind == 0) baseline = 0;
    if (!wanted[i]) continue;
    if (!err.empty() || !measured) {
      ctx.report_error(res, err.empty() ? "not measured" : err);
      continue;
    }
    std::vector<double> slowest(c.samples[0].size(), 0.0);
    double lo = 1e30, hi = 0;
    for (const auto& v : c.samples) {
      for (std::size_t k = 0; k < v.size(); ++k) slowest[k] = std::max(slowest[k], v[k]);
      lo = std::min(lo, weft::bench::median(v));
      hi = std::max(hi, weft::bench::median(v));
    }
    c.ms = weft::bench::median(slowest);
    if (c.kind == 0) baseline = c.ms;
    res.ms = c.ms;
    // FLOPs: the four GEMMs + causal attention, as the world-1 group (per rank).
    const double H = sh.hidden, I = sh.intermediate, qw = double(sh.num_qo_heads) * sh.head_dim, T = c.tokens;
    const double nqkv = double(sh.num_qo_heads + 2 * sh.num_kv_heads) * sh.head_dim;
    res.flops = 2.0 * T * (H * nqkv + qw * H + H * 2 * I + I * H) + 2.0 * 2.0 * qw * T * (T + 1) / 2.0;
    res.ceiling = "gemm";
    res.extra = {{"speedup_vs_nccl_baseline", baseline > 0 ? baseline / c.ms : 0},
                 {"nccl_baseline_ms", baseline},
                 {"world_size", world},
                 {"comm_ctas", c.kind == 0 ? 0 : c.ctas},
                 {"m1", double(c.m1)},
                 {"rank_spread", lo > 0 ? hi / lo : 0}};
    ctx.report(res);
  }
}

}  // namespace

WEFT_BENCH_GROUP(tp_world) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
    cudaGetLastError();
    std::printf("tp_world: skipped, needs >= 2 GPUs (%d visible)\n", n);
    return;
  }
  run_world(ctx, {0, 1});
}
