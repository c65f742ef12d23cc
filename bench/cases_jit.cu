// Bench group "jit": run-time compiled variants (weft/jit.h) against the ahead-of-time kernels,
// bf16, head_dim 128, 32 qo / 8 kv heads, paged KV (page 16, NHD).
//   jit/decode/{aot,jit}/b32/kv4096      the default variant: AOT kernels vs the same variant
//                                        written as a JIT source (examples::default_variant)
//   jit/prefill/{aot,jit}/causal/L2048   one causal prefill, FA2 mainloop and the 64-row tile
//                                        pinned for both (the JIT path runs FA2)
//   jit/summary                          extra.cold_compile_s: NVRTC time of one decode + one
//                                        prefill specialization (soft-cap example, empty cache
//                                        directory); extra.warm_load_ms: the same two read from
//                                        that directory and loaded by a new Variant (as a new
//                                        process would); extra.speedup_vs_aot: AOT ms / JIT ms,
//                                        worst row.
// Timing: run() captured in a CUDA graph, L2 flushed before each run; AOT and JIT rows are timed
// alternately twice each and the lower median kept (same process, same buffers).
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "harness.h"
#include "paged_pools.h"
#include "weft/decode.h"
#include "weft/error.h"
#include "weft/jit.h"
#include "weft/jit_examples.h"
#include "weft/paged_kv.h"
#include "weft/prefill.h"

namespace {

using weft::bench::DeviceArray;
constexpr int32_t kHq = 32, kHkv = 8, kD = 128, kPage = 16;
constexpr weft::DType kBF16 = weft::DType::kBFloat16;

// Times fn for each of two variants alternately (twice each); returns the lower medians.
std::pair<double, double> alternate(weft::bench::Context& ctx, const weft::bench::LaunchFn& a,
                                    const weft::bench::LaunchFn& b) {
  double ma = 1e30, mb = 1e30;
  for (int round = 0; round < 2; ++round) {
    ma = std::min(ma, ctx.time_ms(a));
    mb = std::min(mb, ctx.time_ms(b));
  }
  return {ma, mb};
}

}  // namespace

WEFT_BENCH_GROUP(jit) {
  weft::bench::Result summary;
  summary.name = "jit/summary";
  if (!ctx.wants("jit/")) return;
  cudaStream_t s = ctx.stream();
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("weft_bench_jit_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  double worst_speedup = 1e30;
  try {
    // ---- cold compile and warm load: soft cap (decode + prefill specializations) ----
    weft::jit::Options jo;
    jo.cache_dir = dir;
    const weft::jit::examples::SoftCapParams cap{30.f};
    const std::vector<int32_t> dlens(32, 4096);
    weft::bench::PagedPools dkv(dlens, kPage, kHkv, kD);
    const int32_t batch = 32;
    DeviceArray q(size_t(batch) * kHq * kD * 2), out(size_t(batch) * kHq * kD * 2), lse(size_t(batch) * kHq * 4);
    weft::bench::fill_random(q.get(), size_t(batch) * kHq * kD, kBF16, 3);
    weft::TensorView tq(q.get(), kBF16, {batch, kHq, kD}), tout(out.get(), kBF16, {batch, kHq, kD});
    const size_t dws_bytes = weft::BatchDecodeWrapper::workspace_size(batch, kHq, kHkv, kD);
    DeviceArray dws(dws_bytes);
    // prefill: one causal request of 2048 tokens (ragged)
    const int32_t L = 2048;
    std::vector<int32_t> qo{0, L}, kvp{0, L};
    DeviceArray pq(size_t(L) * kHq * kD * 2), pout(size_t(L) * kHq * kD * 2), pk(size_t(L) * kHkv * kD * 2),
        pv(size_t(L) * kHkv * kD * 2), pkvp(8);
    weft::bench::fill_random(pq.get(), size_t(L) * kHq * kD, kBF16, 4);
    weft::bench::fill_random(pk.get(), size_t(L) * kHkv * kD, kBF16, 5);
    weft::bench::fill_random(pv.get(), size_t(L) * kHkv * kD, kBF16, 6);
    WEFT_BENCH_CUDA(cudaMemcpy(pkvp.get(), kvp.data(), 8, cudaMemcpyHostToDevice));
    weft::TensorView ptq(pq.get(), kBF16, {L, kHq, kD}), ptout(pout.get(), kBF16, {L, kHq, kD});
    weft::TensorView ptk(pk.get(), kBF16, {L, kHkv, kD}), ptv(pv.get(), kBF16, {L, kHkv, kD});
    weft::PrefillBounds pb;
    pb.max_batch = 1;
    pb.max_total_q = L;
    pb.num_qo_heads = kHq;
    pb.num_kv_heads = kHkv;
    pb.head_dim = kD;
    const size_t pws_bytes = weft::BatchPrefillWrapper::workspace_size(pb);
    DeviceArray pws(pws_bytes);
    weft::PrefillPlanOptions popt;
    popt.mainloop = weft::PrefillMainloop::kFA2;
    popt.cta_q = 64;

    auto plan_both = [&](weft::BatchDecodeWrapper& dw, weft::BatchPrefillWrapper& pw, const weft::AttentionVariant& dv,
                         const weft::AttentionVariant& pvar) {
      dw.plan(dkv.table, kHq, kHkv, kD, kPage, kBF16, weft::KVLayout::kNHD, dv, dws.get(), dws_bytes, s);
      pw.plan_ragged(qo.data(), kvp.data(), 1, kHq, kHkv, kD, kBF16, pvar, pws.get(), pws_bytes, pb, s, nullptr, popt);
      WEFT_BENCH_CUDA(cudaStreamSynchronize(s));
    };
    // A new Variant (as a new process would have) plans one decode and one prefill: the first
    // compiles both specializations into the empty cache directory, the second reads them back.
    auto plan_fresh_variant = [&] {
      auto v = weft::jit::Variant::create(weft::jit::examples::soft_cap(), jo);
      weft::AttentionVariant av;
      av.jit = v.get();
      av.jit_params = &cap;
      weft::AttentionVariant pav = av;
      pav.mask = weft::MaskMode::kCausal;
      weft::BatchDecodeWrapper dw(batch, kHq, kHkv, kD);
      weft::BatchPrefillWrapper pw;
      plan_both(dw, pw, av, pav);
      return v->stats();
    };
    const weft::jit::Stats cold = plan_fresh_variant();
    summary.extra.push_back({"cold_compile_s", cold.compile_seconds});
    summary.extra.push_back({"cold_compiled", double(cold.compiled)});
    summary.extra.push_back({"cold_load_ms", cold.load_ms});
    const weft::jit::Stats warm = plan_fresh_variant();
    summary.extra.push_back({"warm_load_ms", warm.load_ms});
    summary.extra.push_back({"warm_disk_hits", double(warm.disk_hits)});
    summary.extra.push_back({"warm_compiled", double(warm.compiled)});

    // ---- same-call speed: default variant, AOT vs JIT ----
    auto def = weft::jit::Variant::create(weft::jit::examples::default_variant(), jo);
    weft::AttentionVariant aot_var, jit_var;
    jit_var.jit = def.get();
    weft::AttentionVariant aot_pvar = aot_var, jit_pvar = jit_var;
    aot_pvar.mask = jit_pvar.mask = weft::MaskMode::kCausal;
    weft::BatchDecodeWrapper dw_aot(batch, kHq, kHkv, kD), dw_jit(batch, kHq, kHkv, kD);
    weft::BatchPrefillWrapper pw_aot, pw_jit;
    DeviceArray dws2(dws_bytes), pws2(pws_bytes);
    dw_aot.plan(dkv.table, kHq, kHkv, kD, kPage, kBF16, weft::KVLayout::kNHD, aot_var, dws.get(), dws_bytes, s);
    dw_jit.plan(dkv.table, kHq, kHkv, kD, kPage, kBF16, weft::KVLayout::kNHD, jit_var, dws2.get(), dws_bytes, s);
    pw_aot.plan_ragged(qo.data(), kvp.data(), 1, kHq, kHkv, kD, kBF16, aot_pvar, pws.get(), pws_bytes, pb, s, nullptr, popt);
    pw_jit.plan_ragged(qo.data(), kvp.data(), 1, kHq, kHkv, kD, kBF16, jit_pvar, pws2.get(), pws_bytes, pb, s, nullptr, popt);
    WEFT_BENCH_CUDA(cudaStreamSynchronize(s));

    auto report_pair = [&](const std::string& base, double bytes, double flops, const std::string& ceiling,
                           const weft::bench::LaunchFn& aot_cap, const weft::bench::LaunchFn& jit_cap) {
      weft::bench::with_graph(ctx, aot_cap, [&](const weft::bench::LaunchFn& la) {
        weft::bench::with_graph(ctx, jit_cap, [&](const weft::bench::LaunchFn& lj) {
          ctx.warm_up_once(la);
          const auto [ma, mj] = alternate(ctx, la, lj);
          for (int j = 0; j < 2; ++j) {
            weft::bench::Result r;
            r.name = "jit/" + base.substr(0, base.find('/')) + (j == 0 ? "/aot" : "/jit") + base.substr(base.find('/'));
            r.params = {{"dtype", "bf16"}, {"head_dim", std::to_string(kD)}, {"variant", "default"}};
            r.ms = j == 0 ? ma : mj;
            r.bytes = bytes;
            r.flops = flops;
            r.ceiling = ceiling;
            r.extra = {{"aot_ms", ma}, {"jit_ms", mj}, {"speedup_vs_aot", ma / mj}};
            ctx.report(r);
          }
          worst_speedup = std::min(worst_speedup, ma / mj);
        });
      });
    };
    const double kv_bytes = 2.0 * batch * 4096 * kHkv * kD * 2;
    report_pair("decode/b32/kv4096", kv_bytes + 2.0 * batch * kHq * kD * 2, 4.0 * batch * 4096 * kHq * kD, "read",
                [&](cudaStream_t st) { dw_aot.run(tq, dkv.cache, dkv.table, tout, nullptr, st); },
                [&](cudaStream_t st) { dw_jit.run(tq, dkv.cache, dkv.table, tout, nullptr, st); });
    const double pairs = double(L) * (L + 1) / 2;
    report_pair("prefill/causal/L2048", 2.0 * L * kHq * kD * 2 + 2.0 * L * kHkv * kD * 2, 4.0 * pairs * kD * kHq, "gemm",
                [&](cudaStream_t st) { pw_aot.run_ragged(ptq, ptk, ptv, pkvp.as<int32_t>(), ptout, nullptr, st); },
                [&](cudaStream_t st) { pw_jit.run_ragged(ptq, ptk, ptv, pkvp.as<int32_t>(), ptout, nullptr, st); });
    summary.extra.push_back({"speedup_vs_aot", worst_speedup});
    summary.ms = 0;
    ctx.report(summary);
  } catch (const std::exception& e) {
    ctx.report_error(summary, e.what());
  }
  std::filesystem::remove_all(dir);
}
