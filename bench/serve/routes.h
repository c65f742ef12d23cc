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
  uint64_t seed = 20260623;
  int32_t steps = 40, reps = 7;
  bool check = true;
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

// Host-only modes (offline.cu; no device work).
bool refit(const Args& a);
bool dump_steps(const Args& a);

}  // namespace weft::serve::sim
