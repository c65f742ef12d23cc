// Internal, pure C++: the decode router. Per step it picks one of the decode routes that exist
// from a linear cost model whose constants were calibrated on the device (weft-serve-sim
// --calibrate writes them as a JSON table per GPU, data/router/<gpu>.json).
//
// Routes (a route option = route + its split parameter):
//   balanced      BatchDecodeWrapper's balanced split-KV plan (persistent CTAs, in-kernel merge)
//   work_queue/cN the compact work queue with N-key splits (attention/plan/work_queue.h)
//   no_split      the work queue with one task per (row, KV head)
//   prefix_share  BatchDecodeWrapper with DecodeOptions::share_prefixes (PAT packs); only a
//                 candidate when the step has shared pages (StepSummary::shared_keys > 0)
// POD (hybrid prefill + decode) is not a route yet.
//
// Model: t(option, step) = sum_i coef[i] * feature[i] (microseconds, synchronized wall time of
// one step: plan + metadata upload + kernels), features from the step's lengths in O(batch):
//   0  1
//   1  KV keys read per CTA slot of the grid (x1e-3): the bandwidth term; a prefix-sharing
//      plan reads the shared keys once
//   2  critical path in keys (x1e-3): 1-D grids (work queue, no split) the makespan of their
//      tasks handed in order to the free slots (full chunks in whole waves, the shorter tasks
//      spread over the least loaded slots; a fixed cost of kTaskOverheadKeys per task);
//      persistent plans (balanced, prefix sharing) the longest item
//   3  tasks (x1e-3): per-task fixed cost (Q load, pipeline fill, epilogue) and plan size
//   4  merged (row, KV head) pairs (x1e-3): partial-state traffic and the merge launch
// Coefficients are fitted per option (non-negative least squares) on the calibration seed's
// steps; the router's own decision time (router_us) is measured and reported with its steps.
//
// Nearest-neighbour vote (tables with "steps", written since the session of 2026-11-24): the
// table also stores every calibration step's step features (step_features: log2 batch, log2
// total keys, log2 longest row, 4 x shared keys / total keys) and each option's wall time there
// (CalibrationStep: modelled from the measured GPU time). choose_route then takes the `neighbours`
// calibration steps nearest to the centre of the step's cell on the feature grid (squared
// Euclidean distance; step_grid_point) and every step within one cell of the k-th, and picks the
// admitted option with the lowest sum of relative times over them (time / the best admitted
// option's time at that neighbour), the earliest option in the table's order whose sum is within
// vote_margin of the lowest (kRouterVoteMargin). Why: the options are 1-5% apart and a per-option linear model ranks them by
// its fitting noise (46595fb on H100: it picked work_queue c2048/c4096 on every family, the
// held-out ratio 0.944-0.998); the measured times rank them directly. Offline replay of 46595fb's
// held-out measurements: docs/perf-notes-serve.md. The linear coefficients stay in the table (a
// table without steps, or a step no neighbour can rank, uses them).
// Decision cost: one O(batch) pass for the features, O(batch) per 1-D-grid option only where the
// bounds on its task count do not decide its admission, then (unless the caller's RouteMemo holds
// the step's cell) two O(steps x features) passes for the neighbours and O(neighbours x options)
// for the vote (kRouterMaxOptions / kRouterMaxNeighbours bound the fixed scratch: no heap).
#pragma once
#include <array>
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "weft/attention.h"

namespace weft::decode {

enum class Route : int32_t { kBalanced = 0, kWorkQueue = 1, kNoSplit = 2, kPrefixShare = 3 };
const char* route_name(Route r);

inline constexpr int kRouterFeatures = 5;
using RouterFeatures = std::array<double, kRouterFeatures>;

struct RouteOption {
  std::string name;          // "balanced", "work_queue/c1024", "no_split", "prefix_share"
  Route route = Route::kBalanced;
  int32_t chunk = 0;         // work queue: keys per split
  RouterFeatures coef{};     // microseconds per feature unit
  // Host time of one step outside the GPU (plan, metadata upload, launch, sync), fitted on the
  // calibration steps as host_us[0] + host_us[1] x batch (fit_host_time); the steps' times of
  // the vote are made with it (CalibrationStep). Not read by choose_route. {0, 0}: not fitted.
  std::array<double, 2> host_us{};
};

// One decode step as the router sees it.
struct StepSummary {
  const int32_t* kv_len = nullptr;  // [batch]
  int32_t batch = 0;
  int64_t shared_keys = 0;  // keys a prefix-sharing plan reads once instead of once per sharer
};

// Step features of the nearest-neighbour vote (all in log2 units except the shared fraction,
// scaled so a fully shared step is 4 units, a factor 16 of keys, from an unshared one). The vote
// takes a step at the centre of its cell on a grid of kStepFeatureQuantum (step_grid_point; the
// calibration steps keep their exact features, so two steps of one cell stay apart): 1/64 of a
// log2 unit is 1.1% of keys, finer than the calibration steps' spacing, and consecutive decode
// steps (one key per row more) share a cell for tens (b256 at 4K) to hundreds (B1 at 32K) of
// steps, so a caller's RouteMemo skips the vote's search without making the pick depend on the
// order of the steps. (1/16 merged whole families into one cell when the table's steps were
// rounded too, and the earlier family won the ties: 79126df replayed homogeneous at 0.971.)
inline constexpr int kStepFeatures = 4;
inline constexpr double kStepFeatureQuantum = 1.0 / 64;
using StepFeatures = std::array<double, kStepFeatures>;
inline constexpr int kRouterMaxOptions = 16;
inline constexpr int kRouterMaxNeighbours = 64;
// The vote's resolution (RouterModel::vote_margin when a table does not give one): an option
// wins only where its mean relative time over the voters beats the EARLIER admitted options' by
// more than this fraction; within it the earliest option in the table's order (balanced first)
// is picked. Why 2%: the options of the serving families are 1-5% apart, and two runs of one build
// rank them differently by 1-2% (calibration and held-out seeds of 3702730 / 448c7b4 on H100:
// c2048 / c4096 first in one run, balanced first by 1-2% in the other; docs/perf-notes-serve.md
// "The vote's resolution"), so a difference inside 2% is the run's noise, not a property of
// the step.
inline constexpr double kRouterVoteMargin = 0.02;

// One calibration step of the table: its features and each option's wall time (us), in the order
// of RouterModel::options; < 0 where the option was not measured (prefix sharing outside
// shared-prefix steps). Tables whose options carry "host" hold the MODELLED wall time: the step's
// measured GPU time (median of the repeats) plus the option's fitted host time at the step's batch
// (RouteOption::host_us). Why: the host part of one step's wall time (plan, upload, launch, sync:
// 20-30 us beside a 100-150 us B1 step) moves by several us between runs, more than the options
// differ, and the raw per-step walls ranked options by that noise (74061e5 on H100: c2048 over
// balanced on bucketed B1 by 2.8 us of host time while its GPU time was 2.8 us slower; held-out
// 0.936). The fit over all ~300 calibration steps averages it out (docs/perf-notes-serve.md).
struct CalibrationStep {
  StepFeatures x{};
  std::vector<double> wall_us;
};

struct RouterModel {
  std::string gpu;              // device name of the calibration
  int32_t num_kv_heads = 0;     // shape the table was calibrated for
  int32_t group_size = 0;
  int32_t head_dim = 0;
  int32_t slots = 0;            // CTA slots of the grid (SMs x resident CTAs)
  double router_us = 0;         // measured decision time per step (median)
  std::string calibration;      // what the coefficients were fitted on (seed, families, steps)
  std::vector<RouteOption> options;
  int32_t neighbours = 0;              // k of the vote (0: no steps, the linear model decides)
  double vote_margin = kRouterVoteMargin;  // the vote's resolution ("vote_margin", [0, 0.5])
  std::vector<CalibrationStep> steps;  // the calibration steps (nearest-neighbour vote)

  std::string to_json() const;
  // Throws weft::Error ("router table") on a malformed table.
  static RouterModel from_json(const std::string& text);
};

// The step's features (log2 of max(1, x) for the counts): what the table's calibration steps hold.
StepFeatures step_features(const StepSummary& step);
// The centre of the step's cell on the grid of kStepFeatureQuantum: where the vote measures the
// distances to the calibration steps.
StepFeatures step_grid_point(const StepSummary& step);

// The features of `opt` for a step (model above). slots >= 1.
RouterFeatures route_features(const RouteOption& opt, const StepSummary& step, int32_t num_kv_heads, int32_t slots);
double predict_us(const RouteOption& opt, const StepSummary& step, int32_t num_kv_heads, int32_t slots);
// Keys a prefix-sharing plan reads once instead of once per sharer (StepSummary::shared_keys),
// from a block table's rows (row b's page ids at ids + b * row_stride): rows are grouped by their
// first page id; each row of a group shares with the group's first row the leading FULL pages
// both hold with the same ids, and contributes those pages' keys. O(batch + the shared pages
// compared): one hash probe per row (no sort, no heap allocation up to 2048 rows); an unshared
// step compares no pages. The trace families' definition (a common prefix of P keys among m rows gives
// P x (m - 1)) is what it returns for such tables.
int64_t shared_prefix_keys(const int32_t* ids, int64_t row_stride, const int32_t* kv_len, int32_t batch,
                           int32_t page_size);

// Whether the work queue runs this variant: no custom mask, window, ALiBi or run-time compiled
// variant (WorkQueueDecode::plan and the decode wrapper's plan_work_queue reject those, naming the
// field). kAuto admits the 1-D grid routes only for such variants (RouteFilter::work_queue).
bool work_queue_runs_variant(const AttentionVariant& v);

// Which options a caller can run (BatchDecodeWrapper's DecodeRoute::kAuto: balanced without
// share_prefixes, prefix sharing with it, the 1-D grids only for variants the work queue runs, and
// no 1-D-grid plan with more tasks than its workspace holds).
struct RouteFilter {
  bool balanced = true;
  bool prefix_share = true;
  // The 1-D grid routes (work queue, no split): false where the step's variant is one the work
  // queue does not run (custom mask, window, ALiBi, a run-time compiled variant:
  // work_queue_runs_variant), so kAuto never picks a route whose plan() would reject it.
  bool work_queue = true;
  int64_t max_tasks = INT64_MAX;
};
// Index of the option the table picks among those the filter admits (prefix_share only when
// step.shared_keys > 0): with calibration steps, the nearest-neighbour vote (above), where a 1-D
// grid with fewer tasks than half the grid's slots (one per SM at 2 CTAs per SM) is not a
// candidate (it leaves SMs idle; the vote's neighbours may be steps 4x longer where the same chunk
// filled the grid: 74061e5, B1 at 8K keys, c2048 = 32 tasks at 64 us GPU vs balanced 29); without
// (or when no admitted option was measured at every neighbour), the lowest predicted time of the
// linear model (ties: the earlier option). -1 when no option is admitted.
//
// The vote is a pure function of the table, the step's cell on the feature grid and which options
// are admitted (filter, fill rule, task limit: exact per step); `memo` (optional, one per caller)
// keeps the last kRouteMemoEntries (grid point, admitted options) -> pick and returns the pick of
// a step whose key it holds without the O(calibration steps) search: the same pick as without the
// memo, whatever came before. Why several entries: a serving batch's total keys wander back and
// forth over a few neighbouring cells as requests finish and arrive (a cell is 1.1% of the keys
// wide; one request of 256 replaced moves them by a fraction of that), and one entry missed on
// every return to the previous cell (the b256 family's routed plan spent 1.5-1.7 us p50 in
// choose_route on H100, against 0.3 us on the shared family whose cells move slowly:
// bench/results/h100_dplan_phases_7db0abd.txt). The linear model's picks are not memoized.
inline constexpr int kRouteMemoEntries = 8;
struct RouteMemo {
  struct Entry {
    std::array<int32_t, kStepFeatures> q{};  // the step's cell: round(features / kStepFeatureQuantum)
    uint32_t bits = 0;                       // bit o: option o admitted
    int32_t pick = -1;                       // -1: empty
  };
  const RouterModel* model = nullptr;  // the table the entries were voted on
  std::array<Entry, kRouteMemoEntries> entries{};
  int32_t next = 0;   // the entry the next vote replaces (round robin)
  int64_t hits = 0;   // steps answered from the memo (for tests and benches)
};
int32_t choose_route(const RouterModel& model, const StepSummary& step, const RouteFilter& filter = {},
                     RouteMemo* memo = nullptr);

// Non-negative least squares fit of coef to (features, time) samples (projected coordinate
// descent on the normal equations, columns scaled to unit norm). Deterministic. relative: the
// squared RELATIVE error is minimized (each sample weighted by 1 / t^2), so a family of 100 us
// steps counts as much as one of 1 ms steps (the router's target is a ratio per family).
RouterFeatures fit_route(const std::vector<RouterFeatures>& x, const std::vector<double>& t, bool relative = false);

// Least absolute deviations line host_us ~ c[0] + c[1] x batch (iteratively reweighted least
// squares, a fixed number of rounds: deterministic): robust to the few steps a host disturbance
// hit. Needs >= 1 sample; with one distinct batch the slope is 0 and c[0] their median-like fit.
std::array<double, 2> fit_host_time(const std::vector<int32_t>& batch, const std::vector<double>& host_us);

}  // namespace weft::decode
