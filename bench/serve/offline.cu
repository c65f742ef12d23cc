// weft-serve-sim's host-only modes: --refit (a router table fitted to an earlier run's measured wall
// times, and its replay) and --dump-steps (the traces as JSON for peers driven from Python).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "decode/router.h"
#include "serve/routes.h"
#include "serve/sim_util.h"
#include "serve/trace.h"
#include "weft/error.h"

namespace weft::serve::sim {

using weft::decode::RouterFeatures;

// --refit WALLS --gpu NAME --slots N [--router-us X] [--neighbours K] [--vote-margin F] --calibration TEXT --out TABLE: a router
// table fitted (on the host, no device) to per-step wall times measured by an earlier calibration
// run on --seed / --steps: WALLS has one line per (family, option), "family option w0 w1 ...", the
// medians of that run's non-empty steps in order, and per (family, option) a line
// "family option@gpu g0 g1 ..." of the GPU times (bench/serve/walls.py extracts both from its
// JSON); with GPU times the table's steps hold modelled walls (routes.h, add_modelled_steps). The features are this build's route_features, so a table follows a change of the model's
// features without a device call; the measurements stay those of the run named in --calibration.
bool refit(const Args& a) {
  std::ifstream in(a.refit);
  std::map<std::string, std::pair<std::vector<RouterFeatures>, std::vector<double>>> samples;
  std::map<std::string, std::vector<weft::serve::Step>> steps;
  std::map<std::string, std::map<std::string, std::vector<double>>> fam_walls;  // family -> option -> walls
  std::map<std::string, std::map<std::string, std::vector<double>>> fam_gpus;   // family -> option -> GPU times
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string fam, opt;
    if (!(ls >> fam >> opt)) continue;
    if (!steps.count(fam)) {
      auto all = weft::serve::simulate_steps(weft::serve::make_trace(fam, a.seed, kPage, kHole, a.steps), a.steps);
      for (auto& st : all)
        if (!st.req.empty()) steps[fam].push_back(std::move(st));
    }
    const std::vector<RouteOption> opts = default_options(true);
    const bool gpu_line = opt.size() > 4 && opt.compare(opt.size() - 4, 4, "@gpu") == 0;  // walls.py: GPU times
    if (gpu_line) opt.resize(opt.size() - 4);
    auto it = std::find_if(opts.begin(), opts.end(), [&](const RouteOption& o) { return o.name == opt; });
    if (it == opts.end()) continue;  // the router's own row
    double w = 0;
    if (gpu_line) {
      while (ls >> w) fam_gpus[fam][opt].push_back(w);
      continue;
    }
    for (size_t si = 0; ls >> w; ++si) {
      if (si >= steps[fam].size()) {
        std::fprintf(stderr, "refit: %s %s has more values than steps\n", fam.c_str(), opt.c_str());
        return false;
      }
      auto& smp = samples[opt];
      smp.first.push_back(weft::decode::route_features(*it, summary_of(steps[fam][si]), kHkv, a.slots));
      smp.second.push_back(w);
      fam_walls[fam][opt].push_back(w);
    }
  }
  RouterModel m;
  m.gpu = a.gpu;
  m.num_kv_heads = kHkv;
  m.group_size = kHq / kHkv;
  m.head_dim = kD;
  m.slots = a.slots;
  m.router_us = a.router_us;
  m.calibration = a.calibration_text;
  for (RouteOption o : default_options(true)) {
    auto it = samples.find(o.name);
    if (it == samples.end()) continue;
    o.coef = weft::decode::fit_route(it->second.first, it->second.second, /*relative=*/true);
    m.options.push_back(o);
  }
  if (m.options.empty() || a.slots < 1) return false;
  std::vector<MeasuredFamily> measured;
  for (const auto& [fam, fam_steps] : steps) {
    MeasuredFamily mf;
    for (const auto& st : fam_steps) {
      mf.x.push_back(weft::decode::step_features(summary_of(st)));
      mf.batch.push_back(int32_t(st.kv_len.size()));
    }
    mf.wall = fam_walls[fam];
    mf.gpu = fam_gpus[fam];
    measured.push_back(std::move(mf));
  }
  add_modelled_steps(m, measured, a.neighbours);
  m.vote_margin = a.vote_margin;
  if (m.router_us <= 0) {  // no --router-us: the decision's median host time here, on these steps
    std::vector<double> d;
    for (const auto& [fam, fam_steps] : steps)
      for (const auto& st : fam_steps)
        for (int r = 0; r < 5; ++r) {
          const StepSummary sum = summary_of(st);
          const auto t0 = Clock::now();
          volatile int32_t pick = weft::decode::choose_route(m, sum, share_filter(sum));
          (void)pick;
          d.push_back(us_since(t0));
        }
    m.router_us = percentile(d, 0.5);
    std::fprintf(stderr, "router_us %.3f (median decision time on this host)\n", m.router_us);
  }
  std::ofstream(a.out) << m.to_json();
  std::fprintf(stderr, "wrote router table %s (%zu options)\n", a.out.c_str(), m.options.size());
  {  // the replay below decides with the table as read back from the file (from_json validates it)
    std::ifstream back(a.out);
    std::stringstream text;
    text << back.rdbuf();
    m = RouterModel::from_json(text.str());
  }
  if (a.replay.empty()) return true;
  // --replay WALLS2 --replay-seed S2: the fitted table replayed offline on another run's
  // measurements (not a live run): at each step the option the table picks (choose_route, prefix
  // sharing where the trace shares pages) is charged that option's MEASURED wall time at that
  // step plus router_us; per family against the best fixed option's mean.
  std::ifstream rin(a.replay);
  std::map<std::string, std::map<std::string, std::vector<double>>> walls;
  while (std::getline(rin, line)) {
    std::istringstream ls(line);
    std::string fam, opt;
    if (!(ls >> fam >> opt)) continue;
    if (opt.size() > 4 && opt.compare(opt.size() - 4, 4, "@gpu") == 0) continue;  // charged: wall times only
    double w = 0;
    while (ls >> w) walls[fam][opt].push_back(w);
  }
  double worst = 1e30;
  for (const auto& [fam, by_opt] : walls) {
    std::vector<weft::serve::Step> st;
    const weft::serve::Trace tr = weft::serve::make_trace(fam, a.replay_seed, kPage, kHole, a.steps);
    for (auto& x : weft::serve::simulate_steps(tr, a.steps))
      if (!x.req.empty()) st.push_back(std::move(x));
    std::vector<int32_t> rows;  // the step's block table rows (stride max_blocks), as the wrapper sees them
    std::string best;
    double best_mean = 1e30;
    for (const auto& [opt, w] : by_opt)
      if (opt != "router" && mean(w) < best_mean) best_mean = mean(w), best = opt;
    double total = 0;
    std::map<std::string, int> picks;
    std::vector<double> decide;
    for (size_t si = 0; si < st.size(); ++si) {
      StepSummary sum = summary_of(st[si]);
      const int32_t B = sum.batch;
      rows.assign(size_t(B) * tr.max_blocks, -1);
      for (int32_t b = 0; b < B; ++b) {
        const auto& pages = tr.requests[st[si].req[b]].pages;
        std::copy(pages.begin(), pages.begin() + (st[si].kv_len[b] + kPage - 1) / kPage, rows.begin() + size_t(b) * tr.max_blocks);
      }
      int32_t p = -1;
      for (int r = 0; r < 5; ++r) {  // the kAuto wrapper's decision on this host (median of 5):
        const auto t0 = Clock::now();  // the shared-key estimate from the rows, then the vote
        sum.shared_keys = weft::decode::shared_prefix_keys(rows.data(), tr.max_blocks, sum.kv_len, B, kPage);
        p = weft::decode::choose_route(m, sum, share_filter(sum));
        decide.push_back(us_since(t0));
      }
      if (sum.shared_keys != st[si].shared_keys) {
        std::fprintf(stderr, "replay: %s step %zu: shared keys %lld from the rows, %lld in the trace\n", fam.c_str(), si,
                     (long long)sum.shared_keys, (long long)st[si].shared_keys);
        return false;
      }
      const std::string& name = m.options[p].name;
      ++picks[name];
      total += by_opt.at(name).at(si) + m.router_us;
    }
    const double ratio = best_mean / (total / double(st.size()));
    worst = std::min(worst, ratio);
    std::printf("%-12s best %-17s %8.1f  replay %8.1f  ratio %.3f  decide_us_p50 %.2f (shared-key estimate + decision)  picks", fam.c_str(),
                best.c_str(), best_mean, total / double(st.size()), ratio, percentile(decide, 0.5));
    for (const auto& [k, c] : picks) std::printf(" %s:%d", k.c_str(), c);
    std::printf("\n");
  }
  std::printf("replay router_vs_best_fixed_min %.3f\n", worst);
  return true;
}

// --dump-steps FILE: the traces of --seed (every family, --steps steps) as JSON, for peers driven
// from Python (bench/serve/fi_serve.py): per family the pool size, every request's page ids and per
// step the running requests and their KV lengths. No device work.
bool dump_steps(const Args& a) {
  std::ofstream os(a.dump);
  os << "{\"seed\": " << a.seed << ", \"page_size\": " << kPage << ", \"families\": {";
  bool first_f = true;
  for (const std::string& fam : weft::serve::family_names()) {
    const auto tr = weft::serve::make_trace(fam, a.seed, kPage, kHole, a.steps);
    const auto steps = weft::serve::simulate_steps(tr, a.steps);
    os << (first_f ? "" : ",") << "\n\"" << fam << "\": {\"num_pages\": " << tr.num_pages << ", \"requests\": [";
    first_f = false;
    for (size_t r = 0; r < tr.requests.size(); ++r) {
      os << (r ? "," : "") << "[";
      for (size_t i = 0; i < tr.requests[r].pages.size(); ++i) os << (i ? "," : "") << tr.requests[r].pages[i];
      os << "]";
    }
    os << "], \"steps\": [";
    for (size_t si = 0; si < steps.size(); ++si) {
      os << (si ? "," : "") << "{\"req\": [";
      for (size_t i = 0; i < steps[si].req.size(); ++i) os << (i ? "," : "") << steps[si].req[i];
      os << "], \"kv_len\": [";
      for (size_t i = 0; i < steps[si].kv_len.size(); ++i) os << (i ? "," : "") << steps[si].kv_len[i];
      os << "]}";
    }
    os << "]}";
  }
  os << "}}\n";
  os.flush();
  std::fprintf(stderr, "wrote %s\n", a.dump.c_str());
  return bool(os);
}

}  // namespace weft::serve::sim
