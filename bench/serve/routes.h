// weft-serve-sim's route vocabulary, shared by the device runs (serve_sim.cu) and the host-only
// modes (offline.cu: --refit, --dump-steps): the command line, the route options every run measures,
// a step's summary, the routed wrapper's filter and the router table's calibration steps.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "decode/router.h"
#include "serve/trace.h"

namespace weft::serve::sim {

using weft::decode::Route;
using weft::decode::RouteOption;
using weft::decode::RouterModel;
using weft::decode::StepSummary;

constexpr int32_t kMaxTasks = 1 << 16;

constexpr int32_t kRouterNeighbours = 8;  // a fifth of a 40-step family: the vote averages over
                                          // several similar steps (replay of 46595fb: 5..10 alike)

struct Args {
  std::string calibrate, router, out = "serve.json", families = "all", commit, command, dump;
  std::string refit, gpu, calibration_text, replay;  // --refit [--replay]
  uint64_t replay_seed = 20260623;
  int32_t slots = 0, neighbours = kRouterNeighbours;
  double router_us = 0;
  double vote_margin = weft::decode::kRouterVoteMargin;  // --vote-margin (the table's "vote_margin")
  uint64_t seed = 20260623;
  int32_t steps = 40, reps = 7;
  bool check = true;
  // --replan-warm (-DWEFT_PLAN_PHASES=ON builds): after each balanced execution, plan the same
  // step again at once (code and data hot, the stream drained), timed as route "balanced/again".
  bool replan_warm = false;
};

// The route options every run measures (the router chooses among the same ones).
inline std::vector<RouteOption> default_options(bool shared) {
  std::vector<RouteOption> o;
  auto add = [&](const std::string& n, Route r, int32_t c) {
    RouteOption x;
    x.name = n;
    x.route = r;
    x.chunk = c;
    o.push_back(x);
  };
  add("balanced", Route::kBalanced, 0);
  for (int c : {512, 1024, 2048, 4096}) add("work_queue/c" + std::to_string(c), Route::kWorkQueue, c);
  add("no_split", Route::kNoSplit, 0);
  if (shared) add("prefix_share", Route::kPrefixShare, 0);
  return o;
}

inline StepSummary summary_of(const weft::serve::Step& st) {
  return StepSummary{st.kv_len.data(), int32_t(st.kv_len.size()), st.shared_keys};
}

// What the routed wrapper (kAuto with share_prefixes, Engine::make_routed) admits at a step: the
// prefix-sharing plan where rows share leading pages, else the balanced plan; every 1-D grid that
// fits kMaxTasks.
inline weft::decode::RouteFilter share_filter(const StepSummary& s) {
  weft::decode::RouteFilter f;
  f.balanced = s.shared_keys <= 0;
  f.prefix_share = true;
  f.max_tasks = kMaxTasks;
  return f;
}

// The table's calibration steps (the nearest-neighbour vote, decode/router.h): per measured step
// its features and each option's median wall time (-1 where the option did not run).
inline void add_steps(RouterModel& m, const std::vector<weft::decode::StepFeatures>& xs,
               const std::map<std::string, std::vector<double>>& walls, int32_t k = kRouterNeighbours) {
  if (k <= 0) return;  // --neighbours 0 (refit): the linear model only, for comparisons
  for (size_t si = 0; si < xs.size(); ++si) {
    weft::decode::CalibrationStep c;
    c.x = xs[si];
    for (const RouteOption& o : m.options) {
      auto it = walls.find(o.name);
      c.wall_us.push_back(it != walls.end() && si < it->second.size() ? it->second[si] : -1.0);
    }
    m.steps.push_back(std::move(c));
  }
  m.neighbours = k;
}

// One family's measurements as the router table's calibration steps take them: per measured step
// its features and batch, per option the per-step medians of wall and GPU time (us).
struct MeasuredFamily {
  std::vector<weft::decode::StepFeatures> x;
  std::vector<int32_t> batch;
  std::map<std::string, std::vector<double>> wall, gpu;
};

// The table's calibration steps with MODELLED wall times (router.h, CalibrationStep): per option
// the host time (wall - GPU of each step) fitted over every family's steps as a + b x batch
// (weft::decode::fit_host_time, stored as RouteOption::host_us), each step's time = its GPU time +
// that fit. An option without GPU times (a --refit walls file from before they were written)
// keeps its measured walls.
inline void add_modelled_steps(RouterModel& m, const std::vector<MeasuredFamily>& fams, int32_t k = kRouterNeighbours) {
  for (RouteOption& o : m.options) {
    std::vector<int32_t> b;
    std::vector<double> h;
    for (const MeasuredFamily& f : fams) {
      auto w = f.wall.find(o.name);
      auto g = f.gpu.find(o.name);
      if (w == f.wall.end() || g == f.gpu.end()) continue;
      for (size_t si = 0; si < w->second.size() && si < g->second.size() && si < f.batch.size(); ++si)
        if (w->second[si] > 0 && g->second[si] > 0) b.push_back(f.batch[si]), h.push_back(w->second[si] - g->second[si]);
    }
    o.host_us = b.empty() ? std::array<double, 2>{0, 0} : weft::decode::fit_host_time(b, h);
  }
  for (const MeasuredFamily& f : fams) {
    std::map<std::string, std::vector<double>> t = f.wall;
    for (const RouteOption& o : m.options) {
      auto g = f.gpu.find(o.name);
      auto w = t.find(o.name);
      if (g == f.gpu.end() || w == t.end() || (o.host_us[0] == 0 && o.host_us[1] == 0)) continue;
      for (size_t si = 0; si < w->second.size() && si < g->second.size() && si < f.batch.size(); ++si)
        if (w->second[si] > 0 && g->second[si] > 0)
          w->second[si] = g->second[si] + o.host_us[0] + o.host_us[1] * f.batch[si];
    }
    add_steps(m, f.x, t, k);
  }
}

// Host-only modes (offline.cu; no device work).
bool refit(const Args& a);
bool dump_steps(const Args& a);

}  // namespace weft::serve::sim
