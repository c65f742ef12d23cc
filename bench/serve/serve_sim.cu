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
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "decode/router.h"
#include "decode/work_queue_decode.h"
#include "json.h"
#include "reference/attention.h"
#include "serve/engine.h"
#include "serve/hybrid.h"
#include "serve/routes.h"
#include "serve/sim_util.h"
#include "serve/trace.h"
#include "weft/decode.h"
#include "weft/error.h"

namespace {

using weft::decode::RouterFeatures;
using namespace weft::serve::sim;  // CK, the step shape, fill_kernel, statistics (sim_util.h); Args, route options (routes.h)



struct RouteStats {
  std::vector<double> wall, gpu, plan;
  // Every execution's plan() host time and its phases (not per-step medians): -DWEFT_PLAN_PHASES=ON.
  std::vector<double> plan_all;
  std::vector<std::array<double, weft::diag::kPhCount>> phases;
};

struct FamilyResult {
  std::string name;
  int32_t max_active = 0, steps = 0;
  std::map<std::string, RouteStats> routes;  // fixed options + "router"
  std::map<std::string, RouteStats> replans;  // --replan-warm: plan() phases of the warm re-plans
  std::map<std::string, int> picks;
  std::map<std::string, CheckResult> checks;
  std::vector<double> router_decide_us, bal_plan_us_b256;
  std::vector<weft::decode::StepFeatures> step_x;  // per measured step (the router table's steps)
  std::vector<int32_t> step_batch;                  // per measured step: its rows
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
      for (size_t idx : order) {
        reps[idx].push_back(run_idx(idx));
#if defined(WEFT_PLAN_PHASES)
        if (a.replan_warm && !is_router(idx) && opts[idx].route == Route::kBalanced) {
          const Sample again = replan_balanced(e, t);
          RouteStats& rs = fr.replans["balanced/again"];
          rs.plan_all.push_back(again.plan_us);
          rs.phases.push_back(again.phase_us);
        }
#endif
      }
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
    fr.step_batch.push_back(sum.batch);
    for (size_t idx = 0; idx < n; ++idx) {
      const bool router = is_router(idx);
      const std::string key = router ? "router" : opts[idx].name;
      std::vector<double> w, g, p;
      for (const Sample& s : reps[idx]) w.push_back(s.wall_us), g.push_back(s.gpu_us), p.push_back(s.plan_us);
      RouteStats& rs = fr.routes[key];
      rs.wall.push_back(percentile(w, 0.5));
      rs.gpu.push_back(percentile(g, 0.5));
      rs.plan.push_back(percentile(p, 0.5));
#if defined(WEFT_PLAN_PHASES)
      for (const Sample& s : reps[idx]) rs.plan_all.push_back(s.plan_us), rs.phases.push_back(s.phase_us);
#endif
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

void write_phases(weft::bench::JsonWriter& j, const RouteStats& s);

void write_stats(weft::bench::JsonWriter& j, const RouteStats& s) {
  j.begin_object();
  j.key("wall_us_mean").value(mean(s.wall));
  j.key("wall_us_p50").value(percentile(s.wall, 0.5));
  j.key("wall_us_p90").value(percentile(s.wall, 0.9));
  j.key("wall_us_p99").value(percentile(s.wall, 0.99));
  j.key("gpu_us_mean").value(mean(s.gpu));
  j.key("gpu_us_p50").value(percentile(s.gpu, 0.5));
  j.key("plan_us_p50").value(percentile(s.plan, 0.5));
  write_phases(j, s);
  j.end_object();
}

void write_phases(weft::bench::JsonWriter& j, const RouteStats& s) {
  if (!s.phases.empty()) {  // -DWEFT_PLAN_PHASES=ON: p50 over every execution (not per-step medians)
    j.key("plan_us_p50_all").value(percentile(s.plan_all, 0.5));
    std::vector<double> sum;
    for (const auto& ph : s.phases) sum.push_back(std::accumulate(ph.begin(), ph.end(), 0.0));
    j.key("plan_phases_sum_us_p50").value(percentile(sum, 0.5));
    for (const double q : {0.5, 0.9}) {  // each phase's p50 and p90 (phases never timed left out)
      j.key(q == 0.5 ? "plan_phases_us_p50" : "plan_phases_us_p90").begin_object();
      for (int p = 0; p < weft::diag::kPhCount; ++p) {
        std::vector<double> v;
        for (const auto& ph : s.phases) v.push_back(ph[p]);
        if (percentile(v, 1.0) > 0) j.key(weft::diag::plan_phase_name(p)).value(percentile(v, q));
      }
      j.end_object();
    }
  }
}

// One line per route of the plan() phases' p50 (-DWEFT_PLAN_PHASES=ON), on stderr.
void print_phases(const std::string& family, const std::string& route, const RouteStats& s) {
  if (s.phases.empty()) return;
  std::fprintf(stderr, "[phases] %-12s %-16s plan p50 %6.2f us |", family.c_str(), route.c_str(),
               percentile(s.plan_all, 0.5));
  for (int p = 0; p < weft::diag::kPhCount; ++p) {
    std::vector<double> v;
    for (const auto& ph : s.phases) v.push_back(ph[p]);
    if (percentile(v, 1.0) > 0) std::fprintf(stderr, " %s %.2f", weft::diag::plan_phase_name(p), percentile(v, 0.5));
  }
  std::fprintf(stderr, "\n");
}

#if defined(WEFT_PLAN_PHASES)
// What one steady_clock::now() costs on this host (each phase mark reads it once), ns.
double clock_read_ns() {
  constexpr int kReads = 20000;
  std::vector<double> per;
  volatile int64_t sink = 0;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < kReads; ++i) sink = Clock::now().time_since_epoch().count();
    per.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / kReads);
  }
  (void)sink;
  return percentile(per, 0.5);
}
#endif

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
    else if (s == "--replan-warm") a.replan_warm = true;
    else if (s == "--dump-steps") a.dump = next();
    else if (s == "--refit") a.refit = next();
    else if (s == "--gpu") a.gpu = next();
    else if (s == "--slots") a.slots = std::stoi(next());
    else if (s == "--router-us") a.router_us = std::stod(next());
    else if (s == "--neighbours") a.neighbours = std::stoi(next());
    else if (s == "--vote-margin") a.vote_margin = std::stod(next());
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
#if defined(WEFT_PLAN_PHASES)
    j.key("plan_phases").value("built with -DWEFT_PLAN_PHASES=ON: plan() phase marks (src/common/plan_phases.h)");
    j.key("clock_read_ns").value(clock_read_ns());
#endif
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
        print_phases(fr.name, k, s);
        if (k != "router" && mean(s.wall) < best_mean) best_mean = mean(s.wall), best = k;
      }
      j.end_object();
      if (!fr.replans.empty()) {  // --replan-warm
        j.key("replan_warm").begin_object();
        for (const auto& [k, s] : fr.replans) {
          j.key(k).begin_object();
          write_phases(j, s);
          j.end_object();
          print_phases(fr.name, k, s);
        }
        j.end_object();
      }
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
          << " interleaved reps; vote on modelled walls (GPU us + host fit a + b x batch per option); linear fallback: relative least squares, critical path = 1-D makespan; "
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
      std::vector<MeasuredFamily> measured;
      for (const FamilyResult& fr : results) {
        if (fr.name == "hybrid") continue;  // POD's modes: not decode routes
        MeasuredFamily mf{fr.step_x, fr.step_batch, {}, {}};
        for (const auto& [k, rs] : fr.routes)
          if (k != "router") mf.wall[k] = rs.wall, mf.gpu[k] = rs.gpu;
        measured.push_back(std::move(mf));
      }
      add_modelled_steps(m, measured);
      m.vote_margin = a.vote_margin;
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
