// Bench group "prefill": BatchPrefillWrapper, bf16, head_dim 128, 32 qo / 8 kv heads (Llama-3-8B).
//   prefill/causal/{ragged,paged}/L<n>   one causal prefill, q = kv = n (paged: page 16, NHD)
//   prefill/causal/ragged-q64/L<n>       the same with the query tile forced to 64 rows
//   prefill/causal/ragged-nosplit/L<n>   the same with split-KV off
//   prefill/mixed                        a batch of mixed causal prefills (paged)
//   prefill/plan/b64                     64 short causal prompts (the plan_us row of a 64-request step)
//   prefill/plan_ab/...                  (group prefill_plan_ab, opt-in) the KV head classes dealt
//                                        together vs one tile at a time, same shapes interleaved
//   prefill/chunked/c<chunk>/h<hist>     chunked prefill: <chunk> new tokens after <hist> keys
//   (these rows take the wrapper's default mainloop: the sm90 one on Hopper)
//   prefill/sm90/{causal,noncausal}/...  the Hopper wgmma/TMA mainloop (src/prefill/sm90/), asserted
//   prefill/sm90/chunked/...             chosen (an error row when the wrapper would not take it)
//   prefill/sm90/chunked-split/c256/h<n> 256 new tokens: a plan that splits (in-kernel merge)
//   prefill/fa2/...                      the FA2 mainloop pinned (PrefillPlanOptions::mainloop = kFA2)
//   prefill/fp8/{bf16,bf16-fa2}/...      fp8 K/V pools (PrefillPlanOptions::kv_dtype; paged,
//   prefill/fp8/{e4m3,e5m2}{,-sm90,-fa2}/...  per-head scales): the bf16 rows of the same shape
//                                        first (default mainloop: sm90 on Hopper, and FA2 pinned);
//                                        e4m3 / e5m2 take the default mainloop (the sm90 one on
//                                        Hopper since the widening rework; extra.sm90 says), -sm90
//                                        pins the Hopper mainloop's fp8 instances, -fa2 the FA2
//                                        kernel's; fp8 rows carry extra.speedup_vs_bf16 (vs the
//                                        default bf16 row) and speedup_vs_bf16_fa2 (vs the FA2 one).
//   prefill/alibi/{fa2,sm90}/causal/...  ALiBi (BLOOM / MPT slopes 2^(-8 (h + 1) / Hq)), FA2 pinned
//                                        (its 64-row tile at d128: kernel/params.h bias_supported)
//                                        then the sm90 mainloop asserted, with extra.speedup_vs_fa2
// FLOPs: 4 * D * Hq per UNMASKED (query, key) pair (causal counted once, bottom-right aligned:
// pairs = q * (kv - q) + q (q + 1) / 2). Bytes: Q and O once, K and V once. Ceiling "gemm".
// Timing: run() captured once in a CUDA graph, the graph is timed (L2 flushed before each run;
// the GPU is warmed for ~1 s before the first case);
// plan() host time in extra "plan_us". Pages: random permutation of the pool.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "harness.h"
#include "paged_pools.h"
#include "weft/error.h"
#include "weft/paged_kv.h"
#include "weft/prefill.h"

namespace {

using weft::bench::DeviceArray;
constexpr int32_t kHq = 32, kHkv = 8, kPage = 16;  // head_dim: a row parameter (128 unless named)
constexpr weft::DType kBF16 = weft::DType::kBFloat16;

// Mainloop of a row: the wrapper's choice, the sm90 one (requested with PrefillMainloop::kSm90 and
// asserted), or FA2 (pinned at plan time).
enum class Mainloop { kDefault, kSm90, kFa2 };

// Paged pools of a row: page size and page order (shuffled: the bench's fragmented pool; pool
// order: the pages of a request consecutive in memory, the diagnostic of what the shuffle costs).
struct PagedKV {
  int32_t page = kPage;
  bool shuffled = true;
};

// Returns the row's time (0 when skipped or failed). speedup_vs: (extra key, baseline ms) pairs
// reported as key = baseline / this row's time (baselines of 0 are left out).
double run_prefill_case(weft::bench::Context& ctx, const std::string& name,
                        const std::vector<int32_t>& q_lens, const std::vector<int32_t>& kv_lens,
                        bool paged, const weft::PrefillPlanOptions& opt = {}, bool causal = true,
                        Mainloop mainloop = Mainloop::kDefault, int32_t kD = 128, PagedKV pkv = {},
                        const std::vector<std::pair<std::string, double>>& speedup_vs = {},
                        bool alibi = false) {
  weft::bench::Result r;
  r.name = name;
  if (!ctx.wants(r.name)) return 0;
  const weft::DType kv_dtype = opt.kv_dtype.value_or(kBF16);
  const int32_t batch = static_cast<int32_t>(q_lens.size());
  std::vector<int32_t> qo{0}, kvp{0};
  double pairs = 0;
  for (int32_t b = 0; b < batch; ++b) {
    qo.push_back(qo.back() + q_lens[b]);
    kvp.push_back(kvp.back() + kv_lens[b]);
    const double q = q_lens[b], kv = kv_lens[b];
    pairs += causal ? q * (kv - q) + q * (q + 1) / 2 : q * kv;
  }
  const int64_t total_q = qo.back(), total_kv = kvp.back();
  r.params = {{"batch", std::to_string(batch)}, {"total_q", std::to_string(total_q)},
              {"total_kv", std::to_string(total_kv)}, {"qo_heads", std::to_string(kHq)},
              {"kv_heads", std::to_string(kHkv)}, {"head_dim", std::to_string(kD)},
              {"dtype", "bf16"}, {"mask", causal ? "causal" : "none"},
              {"kv", paged ? "paged" + std::to_string(pkv.page) + (pkv.shuffled ? "" : "-pool-order") : "ragged"},
              {"kv_dtype", weft::dtype_name(kv_dtype)}, {"alibi", alibi ? "1" : "0"}};
  r.flops = 4.0 * pairs * kD * kHq;
  r.bytes = 2.0 * total_q * kHq * kD * 2 + 2.0 * total_kv * kHkv * kD * double(weft::dtype_size(kv_dtype));
  r.ceiling = "gemm";
  try {
    const size_t q_elems = size_t(total_q) * kHq * kD;
    DeviceArray q(q_elems * 2), out(q_elems * 2);
    weft::bench::fill_random(q.get(), q_elems, kBF16, 3);
    weft::TensorView tq(q.get(), kBF16, {total_q, kHq, kD});
    weft::TensorView tout(out.get(), kBF16, {total_q, kHq, kD});
    weft::PrefillBounds bounds;
    bounds.max_batch = batch;
    bounds.max_total_q = total_q;
    bounds.num_qo_heads = kHq;
    bounds.num_kv_heads = kHkv;
    bounds.head_dim = kD;
    const size_t ws_bytes = weft::BatchPrefillWrapper::workspace_size(bounds);
    DeviceArray ws(ws_bytes);
    weft::BatchPrefillWrapper w;
    weft::AttentionVariant var;
    var.mask = causal ? weft::MaskMode::kCausal : weft::MaskMode::kNone;
    DeviceArray slopes;
    if (alibi) {  // ALiBi's published slopes (Hq a power of two)
      std::vector<float> h(kHq);
      for (int32_t i = 0; i < kHq; ++i) h[i] = std::pow(2.f, -8.f * float(i + 1) / float(kHq));
      slopes = DeviceArray(h.size() * sizeof(float));
      WEFT_BENCH_CUDA(cudaMemcpy(slopes.get(), h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
      var.alibi_slopes = slopes.as<float>();
    }
    cudaStream_t s = ctx.stream();

    // K/V storage: paged pools (paged_pools.h), or ragged K/V [total_kv, Hkv, D].
    std::optional<weft::bench::PagedPools> pools;
    DeviceArray k, v, d_kv_indptr;
    weft::PageTable table;
    weft::PagedKVCache cache;
    if (paged) {
      pools.emplace(kv_lens, pkv.page, kHkv, kD, kv_dtype, pkv.shuffled);
      table = pools->table;
      cache = pools->cache;
    } else {
      const size_t kv_elems = size_t(total_kv) * kHkv * kD;
      k = DeviceArray(kv_elems * 2);
      v = DeviceArray(kv_elems * 2);
      weft::bench::fill_random(k.get(), kv_elems, kBF16, 1);
      weft::bench::fill_random(v.get(), kv_elems, kBF16, 2);
      d_kv_indptr = DeviceArray(kvp.size() * 4);
      WEFT_BENCH_CUDA(cudaMemcpy(d_kv_indptr.get(), kvp.data(), kvp.size() * 4, cudaMemcpyHostToDevice));
    }
    weft::PrefillPlanOptions plan_opt = opt;
    if (mainloop == Mainloop::kFa2) plan_opt.mainloop = weft::PrefillMainloop::kFA2;
    if (mainloop == Mainloop::kSm90) plan_opt.mainloop = weft::PrefillMainloop::kSm90;
    auto plan = [&] {
      if (paged)
        w.plan_paged(qo.data(), table, pkv.page, kHq, kHkv, kD, kBF16, var, ws.get(), ws_bytes, bounds, s,
                     nullptr, plan_opt);
      else
        w.plan_ragged(qo.data(), kvp.data(), batch, kHq, kHkv, kD, kBF16, var, ws.get(), ws_bytes, bounds,
                      s, nullptr, plan_opt);
    };
    // plan() host time: the median of 21 warm calls (after one cold call), each on an idle stream.
    // plan_allocs: C++ allocations (operator new) per warm call.
    std::vector<double> plan_us;
    uint64_t news = 0;
    for (int i = 0; i < 22; ++i) {
      const uint64_t n0 = weft::bench::operator_news();
      const auto t0 = std::chrono::steady_clock::now();
      plan();
      const auto t1 = std::chrono::steady_clock::now();
      if (i > 0) news += weft::bench::operator_news() - n0;
      if (i > 0) plan_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      WEFT_BENCH_CUDA(cudaStreamSynchronize(s));
    }
    std::sort(plan_us.begin(), plan_us.end());
    const bool is_sm90 = w.plan_info().sm90;
    if (mainloop == Mainloop::kSm90 && !is_sm90) throw weft::Error("mainloop", "sm90 mainloop not selected");
    if (mainloop == Mainloop::kFa2 && is_sm90) throw weft::Error("mainloop", "FA2 mainloop not selected");

    weft::bench::with_graph(
        ctx,
        [&](cudaStream_t st) {
          if (paged) {
            w.run_paged(tq, cache, table, tout, nullptr, st);
          } else {
            const weft::TensorView tk(k.get(), kBF16, {total_kv, kHkv, kD});
            const weft::TensorView tv(v.get(), kBF16, {total_kv, kHkv, kD});
            w.run_ragged(tq, tk, tv, d_kv_indptr.as<int32_t>(), tout, nullptr, st);
          }
        },
        [&](const weft::bench::LaunchFn& launch) {
          ctx.warm_up_once(launch);
          r.ms = ctx.time_ms(launch);
        });
    const weft::PrefillPlanInfo& info = w.plan_info();
    r.extra = {{"plan_us", plan_us[plan_us.size() / 2]}, {"plan_allocs", double(news) / double(plan_us.size())},
               {"plan_us_min", plan_us.front()}, {"cta_q", double(info.cta_q)},
               {"cta_kv", double(info.cta_kv)}, {"num_ctas", double(info.num_ctas)},
               {"num_items", double(info.num_items)}, {"num_merges", double(info.num_merges)},
               {"sm90", is_sm90 ? 1.0 : 0.0}};
    for (const auto& [key, base_ms] : speedup_vs)
      if (base_ms > 0 && r.ms > 0) r.extra.emplace_back(key, base_ms / r.ms);
    ctx.report(r);
    return r.ms;
  } catch (const std::exception& e) {
    ctx.report_error(r, e.what());
  }
  return 0;
}

}  // namespace

// Group "prefill_plan_ab" (opt-in: only with a --filter naming plan_ab): the wrapper's plan with
// the KV head classes dealt together (the default, PrefillPlanOptions::deal_heads_together) and
// the one-tile-at-a-time plan of the same shapes (causal, ragged), rows interleaved:
//   prefill/plan_ab/{grouped,single}/<shape>   extra.plan_us, and ms (GPU time of the plan)
WEFT_BENCH_GROUP(prefill_plan_ab) {
  if (!ctx.filter_names("plan_ab")) return;
  std::vector<std::pair<std::string, std::vector<int32_t>>> shapes = {
      {"L8192", {8192}}, {"L16384", {16384}}, {"b16/L1024", std::vector<int32_t>(16, 1024)},
      {"mixed", {8192, 137, 2048, 512, 4000, 1024, 64, 3000, 700, 1500}}};
  for (int hi : {448, 2048}) {
    std::vector<int32_t> q(64);
    std::mt19937_64 rng(64);  // prefill/plan/b64's draw (hi 448)
    for (auto& l : q) l = static_cast<int32_t>(std::uniform_int_distribution<int>(64, hi)(rng));
    shapes.push_back({"b64/q64-" + std::to_string(hi), q});
  }
  for (const auto& [name, q] : shapes)
    for (bool grouped : {true, false}) {
      weft::PrefillPlanOptions opt;
      opt.deal_heads_together = grouped;
      run_prefill_case(ctx, std::string("prefill/plan_ab/") + (grouped ? "grouped/" : "single/") + name, q, q, false,
                       opt);
    }
}

WEFT_BENCH_GROUP(prefill) {
  std::vector<int32_t> lens = {1024, 2048, 4096, 8192, 16384};
  if (ctx.quick()) lens = {2048, 8192};
  for (bool paged : {false, true})
    for (int32_t L : lens)
      run_prefill_case(ctx, std::string("prefill/causal/") + (paged ? "paged" : "ragged") + "/L" + std::to_string(L),
                       {L}, {L}, paged);
  // The 64-row tile (16 rows per warp, 4 warps, 2 CTAs per SM) forced on the same shapes: the
  // comparison point for the heuristic's 128-row tile (docs/perf-notes-prefill.md).
  weft::PrefillPlanOptions q64;
  q64.cta_q = 64;
  for (int32_t L : {4096, 16384})
    run_prefill_case(ctx, "prefill/causal/ragged-q64/L" + std::to_string(L), {L}, {L}, false, q64);
  // Split-KV off: short causal prompts where the plan would otherwise split and merge.
  weft::PrefillPlanOptions nosplit;
  nosplit.allow_split_kv = false;
  for (int32_t L : {1024, 2048})
    run_prefill_case(ctx, "prefill/causal/ragged-nosplit/L" + std::to_string(L), {L}, {L}, false, nosplit);
  {
    // plan() host time of a 64-request step ("prefill/plan/b64", extra plan_us): 64 causal prompts
    // of 64..448 tokens (a fixed draw, ~16K tokens; bench/plan_bench.cpp times the same shape).
    std::vector<int32_t> q(64);
    std::mt19937_64 rng(64);
    for (auto& l : q) l = static_cast<int32_t>(std::uniform_int_distribution<int>(64, 448)(rng));
    run_prefill_case(ctx, "prefill/plan/b64", q, q, false);
  }
  {
    // Mixed batch: a fixed spread of prompt lengths (short chats to long documents).
    const std::vector<int32_t> mix = {8192, 137, 2048, 512, 4000, 1024, 64, 3000, 700, 1500};
    run_prefill_case(ctx, "prefill/mixed", mix, mix, true);
  }
  std::vector<int32_t> chunks = {512, 1024, 2048}, hists = {4096, 8192, 16384};
  if (ctx.quick()) {
    chunks = {512};
    hists = {16384};
  }
  for (int32_t c : chunks)
    for (int32_t h : hists)
      run_prefill_case(ctx, "prefill/chunked/c" + std::to_string(c) + "/h" + std::to_string(h), {c}, {h + c},
                       true);

  // Hopper mainloop rows (the same shapes as above, asserted sm90), and FA2 pinned for comparison.
  for (bool paged : {false, true})
    for (int32_t L : lens)
      run_prefill_case(ctx, std::string("prefill/sm90/causal/") + (paged ? "paged" : "ragged") + "/L" + std::to_string(L),
                       {L}, {L}, paged, {}, true, Mainloop::kSm90);
  run_prefill_case(ctx, "prefill/sm90/noncausal/ragged/L8192", {8192}, {8192}, false, {}, false, Mainloop::kSm90);
  for (int32_t c : chunks)
    for (int32_t h : hists)
      run_prefill_case(ctx, "prefill/sm90/chunked/c" + std::to_string(c) + "/h" + std::to_string(h), {c}, {h + c},
                       true, {}, true, Mainloop::kSm90);
  // 256 new tokens: 16 query tiles of the folded plan on 33 CTAs, so the plan splits the history
  // (partial slots + merge: the sm90 kernel merges in place, sm90_merge.cuh).
  for (int32_t h : {4096, 16384})
    run_prefill_case(ctx, "prefill/sm90/chunked-split/c256/h" + std::to_string(h), {256}, {h + 256}, true, {}, true,
                     Mainloop::kSm90);
  for (bool paged : {false, true})
    for (int32_t L : {8192, 16384})
      run_prefill_case(ctx, std::string("prefill/fa2/causal/") + (paged ? "paged" : "ragged") + "/L" + std::to_string(L),
                       {L}, {L}, paged, {}, true, Mainloop::kFa2);
  run_prefill_case(ctx, "prefill/fa2/noncausal/ragged/L8192", {8192}, {8192}, false, {}, false, Mainloop::kFa2);
  run_prefill_case(ctx, "prefill/fa2/chunked/c512/h16384", {512}, {16384 + 512}, true, {}, true, Mainloop::kFa2);

  // Paged diagnostics (sm90): the same page-16 pool in pool order (a request's pages consecutive
  // in memory) and 128-key pages (one TMA box per 128-key stage) shuffled, against the ragged and
  // shuffled page-16 rows above: which of page order or box count costs the paged rows.
  for (int32_t L : {8192, 16384}) {
    run_prefill_case(ctx, "prefill/sm90/causal/paged-pool-order/L" + std::to_string(L), {L}, {L}, true, {}, true,
                     Mainloop::kSm90, 128, PagedKV{kPage, false});
    run_prefill_case(ctx, "prefill/sm90/causal/paged128/L" + std::to_string(L), {L}, {L}, true, {}, true,
                     Mainloop::kSm90, 128, PagedKV{128, true});
  }
  // Other head dims (32 qo / 8 kv heads): d256 (the sm90 tile 128 x 64, sm90_launch.h) and d64,
  // sm90 asserted, FA2 pinned beside them.
  for (int32_t d : {256, 64}) {
    const std::string dn = "d" + std::to_string(d);
    for (int32_t L : {4096, 8192, 16384})
      run_prefill_case(ctx, "prefill/sm90/" + dn + "/causal/ragged/L" + std::to_string(L), {L}, {L}, false, {}, true,
                       Mainloop::kSm90, d);
    run_prefill_case(ctx, "prefill/sm90/" + dn + "/causal/paged/L8192", {8192}, {8192}, true, {}, true,
                     Mainloop::kSm90, d);
    run_prefill_case(ctx, "prefill/fa2/" + dn + "/causal/ragged/L8192", {8192}, {8192}, false, {}, true,
                     Mainloop::kFa2, d);
  }

  // fp8 K/V pools (issue 23): per shape the bf16 rows (default mainloop, then FA2 pinned), then
  // e4m3 and e5m2 on the default mainloop, the sm90 one and the FA2 one.
  auto fp8_rows = [&](const std::string& tail, const std::vector<int32_t>& q, const std::vector<int32_t>& kv) {
    const double bf16 = run_prefill_case(ctx, "prefill/fp8/bf16/" + tail, q, kv, true);
    const double fa2 = run_prefill_case(ctx, "prefill/fp8/bf16-fa2/" + tail, q, kv, true, {}, true, Mainloop::kFa2);
    for (Mainloop m : {Mainloop::kDefault, Mainloop::kSm90, Mainloop::kFa2})
      for (weft::DType f : {weft::DType::kFloat8E4M3, weft::DType::kFloat8E5M2}) {
        weft::PrefillPlanOptions o;
        o.kv_dtype = f;
        const std::string fmt = std::string(f == weft::DType::kFloat8E4M3 ? "e4m3" : "e5m2") +
                                (m == Mainloop::kSm90 ? "-sm90/" : m == Mainloop::kFa2 ? "-fa2/" : "/");
        run_prefill_case(ctx, "prefill/fp8/" + fmt + tail, q, kv, true, o, true, m, 128, PagedKV{},
                         {{"speedup_vs_bf16", bf16}, {"speedup_vs_bf16_fa2", fa2}});
      }
  };
  // ALiBi (the sm90 consumer's bias step against the FA2 kernel's 64-row tile), d128 32 / 8.
  for (bool paged : {false, true})
    for (int32_t L : {2048, 8192}) {
      const std::string tail = std::string("causal/") + (paged ? "paged" : "ragged") + "/L" + std::to_string(L);
      const double fa2 = run_prefill_case(ctx, "prefill/alibi/fa2/" + tail, {L}, {L}, paged, {}, true, Mainloop::kFa2,
                                          128, PagedKV{}, {}, true);
      run_prefill_case(ctx, "prefill/alibi/sm90/" + tail, {L}, {L}, paged, {}, true, Mainloop::kSm90, 128, PagedKV{},
                       {{"speedup_vs_fa2", fa2}}, true);
    }

  for (int32_t L : {4096, 16384}) fp8_rows("causal/L" + std::to_string(L), {L}, {L});
  fp8_rows("chunked/c2048/h16384", {2048}, {16384 + 2048});
  fp8_rows("mixed", {8192, 137, 2048, 512, 4000, 1024, 64, 3000, 700, 1500},
           {8192, 137, 2048, 512, 4000, 1024, 64, 3000, 700, 1500});
}
