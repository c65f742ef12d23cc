// Decode router (router.h).
#include "decode/router.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "decode/decode_plan.h"
#include "weft/error.h"

namespace weft::decode {

bool work_queue_runs_variant(const AttentionVariant& v) {
  return v.mask != MaskMode::kCustom && v.window_left < 0 && v.alibi_slopes == nullptr && v.jit == nullptr;
}

const char* route_name(Route r) {
  switch (r) {
    case Route::kBalanced: return "balanced";
    case Route::kWorkQueue: return "work_queue";
    case Route::kNoSplit: return "no_split";
    case Route::kPrefixShare: return "prefix_share";
  }
  return "?";
}

namespace {

// Task overhead of a 1-D grid in key-equivalents: a task's fixed cost (Q load, pipeline fill,
// epilogue, its share of the launch) as the keys the same CTA would stream in that time. ~256
// keys at head_dim 128 on H100 (a 16-key tile streams in ~0.1 us; a task's fixed cost is a few
// us): the held-out replay of f0a6d7b's measurements (docs/perf-notes-serve.md) is flat between
// 128 and 512, so the value is not tuned further.
constexpr int64_t kTaskOverheadKeys = 256;

// One pass over the lengths for a split of every row at `chunk` keys (0: no split): the work
// queue's counts (plan::work_queue_shape, without its config checks) and its critical path.
struct Split {
  double tasks = 0, merges = 0, longest = 0, makespan = 0;
};
Split split_counts(const StepSummary& s, int64_t chunk, int32_t hkv, int32_t slots) {
  int64_t tasks = 0, merges = 0, longest = 0;
  int64_t full = 0, rem_sum = 0, rem_max = -1;  // full chunks; the other tasks' keys (row count x 1)
  int64_t rem_n = 0;
  for (int32_t b = 0; b < s.batch; ++b) {
    const int64_t len = s.kv_len[b];
    if (chunk <= 0 || len <= chunk) {
      tasks += 1;
      longest = std::max(longest, len);
      if (chunk > 0 && len == chunk) {
        ++full;
      } else {
        rem_sum += len, ++rem_n;
        rem_max = std::max(rem_max, len);
      }
      continue;
    }
    const int64_t n = (len + chunk - 1) / chunk;
    tasks += n;
    merges += 1;
    longest = chunk;
    full += len / chunk;
    if (len % chunk) {
      rem_sum += len % chunk, ++rem_n;
      rem_max = std::max(rem_max, len % chunk);
    }
  }
  Split r;
  r.tasks = double(tasks * hkv);
  r.merges = double(merges * hkv);
  r.longest = double(longest);
  // Makespan of the 1-D grid in keys: the hardware hands tasks to free CTA slots in order, full
  // chunks first (work_queue.h), so the full chunks fill q whole waves plus rr slots of a partial
  // one; the shorter tasks then go to the least loaded slots: their total spread over the slots
  // (a fluid bound) or the longest of them on a slot of the last whole wave, whichever is later.
  const int64_t a = kTaskOverheadKeys;
  const int64_t nf = full * hkv;
  const int64_t q = nf / std::max(1, slots), rr = nf % std::max(1, slots);
  const double base = double(q) * double(chunk + a);
  const double tot = double(rem_sum + rem_n * a) * hkv + double(rr) * double(chunk + a);
  double ms = base + (rr ? double(chunk + a) : 0.0);
  ms = std::max(ms, base + tot / std::max(1, slots));
  if (rem_max >= 0) ms = std::max(ms, base + double(rem_max + a));
  r.makespan = ms;
  return r;
}

int64_t total_keys(const StepSummary& s) {
  int64_t keys = 0;
  for (int32_t b = 0; b < s.batch; ++b) keys += s.kv_len[b];
  return keys;
}

RouterFeatures features_with_keys(const RouteOption& opt, const StepSummary& s, int64_t keys, int32_t hkv,
                                  int32_t slots, double* tasks_out) {
  const bool share = opt.route == Route::kPrefixShare;
  const int64_t read = std::max<int64_t>(0, keys - (share ? s.shared_keys : 0)) * hkv;
  const int64_t per_slot = (read + slots - 1) / std::max(1, slots);
  int64_t chunk = 0;
  switch (opt.route) {
    case Route::kWorkQueue: chunk = opt.chunk; break;
    case Route::kNoSplit: chunk = 0; break;
    // The balanced planner's chunk bound: keys per CTA, at least kMinChunk, whole 16-key tiles.
    case Route::kBalanced:
    case Route::kPrefixShare:
      chunk = (std::max<int64_t>(kMinChunk, per_slot) + kPlanKVTile - 1) / kPlanKVTile * kPlanKVTile;
      break;
  }
  const Split sp = split_counts(s, chunk, hkv, slots);
  if (tasks_out) *tasks_out = sp.tasks;
  // Critical path: a 1-D grid (work queue, no split) the makespan of its tasks over the slots
  // (split_counts; B1 at 64K keys x 8 heads: 2048-key splits are 256 tasks, one wave on 264
  // slots; 1024-key splits two waves of half the length plus a second wave's fixed costs); the
  // balanced planner's persistent CTAs hold about keys-per-slot each, so there the longest item
  // is the critical path.
  const bool grid_1d = opt.route == Route::kWorkQueue || opt.route == Route::kNoSplit;
  const double crit = grid_1d ? sp.makespan : sp.longest;
  return {1.0, double(per_slot) * 1e-3, crit * 1e-3, sp.tasks * 1e-3, sp.merges * 1e-3};
}

double dot(const RouterFeatures& c, const RouterFeatures& f) {
  double t = 0;
  for (int i = 0; i < kRouterFeatures; ++i) t += c[i] * f[i];
  return t;
}

}  // namespace

RouterFeatures route_features(const RouteOption& opt, const StepSummary& s, int32_t hkv, int32_t slots) {
  return features_with_keys(opt, s, total_keys(s), hkv, slots, nullptr);
}

double predict_us(const RouteOption& opt, const StepSummary& s, int32_t hkv, int32_t slots) {
  return dot(opt.coef, route_features(opt, s, hkv, slots));
}

namespace {

// One pass over the lengths: total and longest (the step features and the admission bounds).
struct StepTotals {
  int64_t keys = 0, longest = 0;
};
StepTotals step_totals(const StepSummary& s) {
  StepTotals t;
  for (int32_t b = 0; b < s.batch; ++b) {
    t.keys += s.kv_len[b];
    t.longest = std::max<int64_t>(t.longest, s.kv_len[b]);
  }
  return t;
}

// The step's features (router.h, step_features) from its totals.
StepFeatures raw_features(const StepSummary& s, const StepTotals& t) {
  const double shared = t.keys > 0 ? double(std::min(std::max<int64_t>(s.shared_keys, 0), t.keys)) / double(t.keys) : 0.0;
  return {std::log2(double(std::max(1, s.batch))), std::log2(double(std::max<int64_t>(1, t.keys))),
          std::log2(double(std::max<int64_t>(1, t.longest))), 4.0 * shared};
}

// The step's cell on the grid of kStepFeatureQuantum (router.h): round(feature / quantum).
std::array<int32_t, kStepFeatures> feature_grid(const StepSummary& s, const StepTotals& t) {
  const StepFeatures x = raw_features(s, t);
  std::array<int32_t, kStepFeatures> q{};
  for (int i = 0; i < kStepFeatures; ++i) q[i] = static_cast<int32_t>(std::lround(x[i] / kStepFeatureQuantum));
  return q;
}

}  // namespace

StepFeatures step_features(const StepSummary& s) { return raw_features(s, step_totals(s)); }

StepFeatures step_grid_point(const StepSummary& s) {
  const std::array<int32_t, kStepFeatures> q = feature_grid(s, step_totals(s));
  StepFeatures x{};
  for (int i = 0; i < kStepFeatures; ++i) x[i] = q[i] * kStepFeatureQuantum;
  return x;
}

namespace {

// Tasks of a 1-D grid (work queue at `chunk` keys, no split at 0) over the step's rows.
int64_t grid_tasks(const StepSummary& s, int64_t chunk, int32_t hkv) {
  int64_t tasks = 0;
  for (int32_t b = 0; b < s.batch; ++b)
    tasks += chunk <= 0 || s.kv_len[b] <= chunk ? 1 : (s.kv_len[b] + chunk - 1) / chunk;
  return tasks * hkv;
}

bool admitted(const RouteOption& o, const StepSummary& s, const RouteFilter& f) {
  if (o.route == Route::kPrefixShare) return s.shared_keys > 0 && f.prefix_share;
  if (o.route == Route::kBalanced) return f.balanced;
  return f.work_queue;  // kWorkQueue, kNoSplit
}

// Bit o: option o may be voted for at this step: the filter admits it and, for a 1-D grid, its
// tasks fit the caller's limit and give every SM one (>= slots / 2; router.h). Exact: the task
// count is taken only where its bounds (rows x heads <= tasks <= (rows + keys / chunk) x heads,
// also >= ceil(keys / chunk) x heads) do not decide.
uint32_t admission_bits(const RouterModel& m, const StepSummary& s, const RouteFilter& filter, const StepTotals& t) {
  const int64_t hkv = m.num_kv_heads;
  const int64_t fill = std::max<int64_t>(1, m.slots / 2);
  uint32_t bits = 0;
  for (size_t o = 0; o < m.options.size(); ++o) {
    const RouteOption& opt = m.options[o];
    if (!admitted(opt, s, filter)) continue;
    if (opt.route == Route::kWorkQueue || opt.route == Route::kNoSplit) {
      const int64_t chunk = opt.route == Route::kNoSplit ? 0 : opt.chunk;
      const int64_t lo = hkv * std::max<int64_t>(s.batch, chunk > 0 ? (t.keys + chunk - 1) / chunk : 0);
      const int64_t hi = chunk > 0 ? hkv * (s.batch + t.keys / chunk + 1) : hkv * s.batch;
      int64_t exact = -1;
      auto tasks = [&] { return exact >= 0 ? exact : (exact = grid_tasks(s, chunk, m.num_kv_heads)); };
      if (lo < fill && tasks() < fill) continue;
      if (hi > filter.max_tasks && tasks() > filter.max_tasks) continue;
    }
    bits |= uint32_t(1) << o;
  }
  return bits;
}

// The nearest-neighbour vote (router.h) over the admitted options at the grid point q; -1 when no
// admitted option was measured at every neighbour (the caller then asks the linear model).
int32_t vote(const RouterModel& m, const std::array<int32_t, kStepFeatures>& q, uint32_t bits) {
  const int32_t nopt = static_cast<int32_t>(m.options.size());
  const int32_t k = std::min<int32_t>(m.neighbours, static_cast<int32_t>(m.steps.size()));
  if (k <= 0 || nopt > kRouterMaxOptions || k > kRouterMaxNeighbours) return -1;
  StepFeatures x{};
  for (int i = 0; i < kStepFeatures; ++i) x[i] = q[i] * kStepFeatureQuantum;
  auto dist2 = [&](int32_t n) {
    double d = 0;
    for (int i = 0; i < kStepFeatures; ++i) d += (m.steps[n].x[i] - x[i]) * (m.steps[n].x[i] - x[i]);
    return d;
  };
  // The k smallest distances to the calibration steps: insertion into a sorted array (k is small;
  // k <= steps, so all k are found). Each step's distance is kept for the voters' pass below
  // (up to kKeep steps on the stack: the committed tables hold ~320; a larger table's later steps
  // are measured again there, the same arithmetic, the same values).
  constexpr int32_t kKeep = 1024;
  double all[kKeep];
  double dist[kRouterMaxNeighbours];
  int32_t found = 0;
  const int32_t nsteps = static_cast<int32_t>(m.steps.size());
  for (int32_t n = 0; n < nsteps; ++n) {
    const double d = dist2(n);
    if (n < kKeep) all[n] = d;
    if (found == k && d >= dist[k - 1]) continue;
    int32_t j = found < k ? found++ : k - 1;
    for (; j > 0 && dist[j - 1] > d; --j) dist[j] = dist[j - 1];
    dist[j] = d;
  }
  // The voters: every step as near as the k-th, and those within one grid cell of it, which are
  // ties at the grid's resolution (a family of near-identical steps, e.g. homogeneous 32K rows,
  // spans 1e-4 in log2 keys): all of them vote, in step order, up to kRouterMaxNeighbours. Without
  // the cell the k of 40 such steps nearest to the cell centre decided by their order in the trace
  // (79126df replayed homogeneous 0.971, 0.998 with the whole family voting).
  const double tie = dist[k - 1] + kStepFeatures * kStepFeatureQuantum * kStepFeatureQuantum;
  int32_t near[kRouterMaxNeighbours];
  found = 0;
  for (int32_t n = 0; n < nsteps && found < kRouterMaxNeighbours; ++n)
    if ((n < kKeep ? all[n] : dist2(n)) <= tie) near[found++] = n;
  // Candidates: admitted and measured at every neighbour.
  bool cand[kRouterMaxOptions];
  double score[kRouterMaxOptions];
  int32_t ncand = 0;
  for (int32_t o = 0; o < nopt; ++o) {
    cand[o] = (bits >> o) & 1u;
    for (int32_t j = 0; j < found && cand[o]; ++j) cand[o] = m.steps[near[j]].wall_us[o] > 0;
    score[o] = 0;
    ncand += cand[o];
  }
  if (ncand == 0) return -1;
  for (int32_t j = 0; j < found; ++j) {
    const std::vector<double>& w = m.steps[near[j]].wall_us;
    double best = 0;
    for (int32_t o = 0; o < nopt; ++o)
      if (cand[o] && (best == 0 || w[o] < best)) best = w[o];
    for (int32_t o = 0; o < nopt; ++o)
      if (cand[o]) score[o] += w[o] / best;
  }
  // The lowest score, then the earliest option within the table's resolution of it
  // (kRouterVoteMargin: a closer call is the calibration run's noise).
  int32_t best = -1;
  for (int32_t o = 0; o < nopt; ++o)
    if (cand[o] && (best < 0 || score[o] < score[best])) best = o;
  for (int32_t o = 0; o < best; ++o)
    if (cand[o] && score[o] <= score[best] * (1 + m.vote_margin)) return o;
  return best;
}

}  // namespace

int32_t choose_route(const RouterModel& m, const StepSummary& s, const RouteFilter& filter, RouteMemo* memo) {
  if (!m.steps.empty() && m.options.size() <= size_t(kRouterMaxOptions)) {
    const StepTotals t = step_totals(s);
    const std::array<int32_t, kStepFeatures> q = feature_grid(s, t);
    const uint32_t bits = admission_bits(m, s, filter, t);
    // The vote is a function of (q, bits) and the table only: a recent step's pick for the same
    // (q, bits) (RouteMemo, kRouteMemoEntries of them), else the vote.
    if (memo != nullptr && memo->model == &m)
      for (const RouteMemo::Entry& e : memo->entries)
        if (e.pick >= 0 && e.bits == bits && e.q == q) {
          ++memo->hits;
          return e.pick;
        }
    const int32_t v = vote(m, q, bits);
    if (v >= 0) {
      if (memo != nullptr) {
        if (memo->model != &m) {  // entries of another table: dropped
          memo->entries = {};
          memo->next = 0;
          memo->model = &m;
        }
        memo->entries[size_t(memo->next)] = {q, bits, v};
        memo->next = (memo->next + 1) % kRouteMemoEntries;
      }
      return v;
    }
  }
  const int64_t keys = total_keys(s);  // once for every option
  int32_t best = -1;
  double best_t = 0;
  for (size_t i = 0; i < m.options.size(); ++i) {
    const RouteOption& o = m.options[i];
    if (!admitted(o, s, filter)) continue;
    double tasks = 0;
    const RouterFeatures f = features_with_keys(o, s, keys, m.num_kv_heads, m.slots, &tasks);
    const bool one_d = o.route == Route::kWorkQueue || o.route == Route::kNoSplit;
    if (one_d && tasks > double(filter.max_tasks)) continue;  // would not fit the workspace
    const double t = dot(o.coef, f);
    if (best < 0 || t < best_t) {
      best = static_cast<int32_t>(i);
      best_t = t;
    }
  }
  return best;
}

int64_t shared_prefix_keys(const int32_t* ids, int64_t row_stride, const int32_t* kv_len, int32_t batch,
                           int32_t page_size) {
  if (batch < 2 || page_size < 1) return 0;
  // One pass over the rows in order, an open-addressing table from first page id to the group's
  // leader (the first row seen with that id, so the lowest: the sorted reference's leader,
  // tests/host/decode/router_reference.h); a row whose first id is taken is compared with its
  // leader. O(batch + the shared pages compared); an unshared step (every first id distinct, the
  // serving case without prefix caching) costs one probe per row and no page comparison.
  // Capacity: a power of two >= 2 x batch (load <= 1/2: ~1.5 probes per row); on the stack up to
  // kStackSlots (batch <= 2048: 32 KiB, cleared only up to cap), above that one heap array per call.
  struct Slot {
    int32_t id, row;  // row < 0: empty
  };
  constexpr int32_t kStackSlots = 4096;
  int32_t bits = 1;
  while (bits < 31 && (int64_t(1) << bits) < 2 * int64_t(batch)) ++bits;
  const uint32_t cap = uint32_t(1) << bits, mask = cap - 1;
  Slot stack_slots[kStackSlots];
  std::vector<Slot> heap_slots;
  Slot* slots = stack_slots;
  if (cap > uint32_t(kStackSlots)) {
    heap_slots.resize(cap);
    slots = heap_slots.data();
  }
  for (uint32_t i = 0; i < cap; ++i) slots[i].row = -1;
  int64_t keys = 0;
  for (int32_t b = 0; b < batch; ++b) {
    if (kv_len[b] < page_size) continue;  // no full page: shares nothing
    const int32_t* mp = ids + b * row_stride;
    const int32_t id = mp[0];
    // Fibonacci hashing: the top bits of id x 2^32 / phi (scattered and sequential ids alike).
    uint32_t h = (uint32_t(id) * 0x9E3779B1u) >> (32 - bits);
    while (slots[h].row >= 0 && slots[h].id != id) h = (h + 1) & mask;
    if (slots[h].row < 0) {
      slots[h] = {id, b};
      continue;
    }
    const int32_t lead = slots[h].row;
    const int32_t* lp = ids + lead * row_stride;
    const int32_t full = std::min(kv_len[lead], kv_len[b]) / page_size;
    // The first differing page: blocks of 64 ids compared with memcmp, the first unequal block
    // scanned (a 4K-key shared prefix is 256 pages per row).
    int32_t p = 0;
    constexpr int32_t kBlock = 64;
    while (p + kBlock <= full && std::memcmp(mp + p, lp + p, kBlock * sizeof(int32_t)) == 0) p += kBlock;
    while (p < full && mp[p] == lp[p]) ++p;
    keys += int64_t(p) * page_size;
  }
  return keys;
}

RouterFeatures fit_route(const std::vector<RouterFeatures>& x_in, const std::vector<double>& t_in, bool relative) {
  WEFT_CHECK_ARG(x_in.size() == t_in.size(), "t", "expected " << x_in.size() << " times, got " << t_in.size());
  constexpr int F = kRouterFeatures;
  // Relative error: rows and targets scaled by 1 / t (targets become 1).
  std::vector<RouterFeatures> x = x_in;
  std::vector<double> t = t_in;
  if (relative)
    for (size_t n = 0; n < x.size(); ++n) {
      WEFT_CHECK_ARG(t[n] > 0, "t", "relative fit needs times > 0, got " << t[n]);
      for (double& v : x[n]) v /= t[n];
      t[n] = 1.0;
    }
  // Column norms (a column of zeros stays at coefficient 0).
  std::array<double, F> norm{};
  for (const auto& r : x)
    for (int i = 0; i < F; ++i) norm[i] += r[i] * r[i];
  for (int i = 0; i < F; ++i) norm[i] = std::sqrt(norm[i]);
  // Normal equations of the scaled problem: A = Xs^T Xs, b = Xs^T t.
  double A[F][F] = {}, bv[F] = {};
  for (size_t n = 0; n < x.size(); ++n)
    for (int i = 0; i < F; ++i) {
      if (norm[i] == 0) continue;
      const double xi = x[n][i] / norm[i];
      bv[i] += xi * t[n];
      for (int j = 0; j < F; ++j)
        if (norm[j] != 0) A[i][j] += xi * x[n][j] / norm[j];
    }
  double c[F] = {};
  for (int it = 0; it < 5000; ++it) {
    double moved = 0;
    for (int i = 0; i < F; ++i) {
      if (A[i][i] <= 0) continue;
      double g = bv[i];
      for (int j = 0; j < F; ++j)
        if (j != i) g -= A[i][j] * c[j];
      const double ci = std::max(0.0, g / A[i][i]);
      moved = std::max(moved, std::fabs(ci - c[i]));
      c[i] = ci;
    }
    if (moved < 1e-12) break;
  }
  RouterFeatures out{};
  for (int i = 0; i < F; ++i) out[i] = norm[i] == 0 ? 0.0 : c[i] / norm[i];
  return out;
}

std::array<double, 2> fit_host_time(const std::vector<int32_t>& batch, const std::vector<double>& host_us) {
  WEFT_CHECK_ARG(batch.size() == host_us.size() && !batch.empty(), "host_us",
                 "expected one host time per batch size (" << batch.size() << "), got " << host_us.size());
  // Weighted least squares rounds, weights 1 / max(|residual|, 0.05 us): converges towards the
  // least absolute deviations line; 50 rounds settle it to well below the 0.1 us the vote can see.
  std::vector<double> w(batch.size(), 1.0);
  std::array<double, 2> c{0, 0};
  for (int round = 0; round < 50; ++round) {
    double s0 = 0, s1 = 0, s2 = 0, t0 = 0, t1 = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      const double x = batch[i];
      s0 += w[i], s1 += w[i] * x, s2 += w[i] * x * x, t0 += w[i] * host_us[i], t1 += w[i] * x * host_us[i];
    }
    const double det = s0 * s2 - s1 * s1;
    if (det > 1e-9 * s0 * s2) {
      c = {(t0 * s2 - t1 * s1) / det, (s0 * t1 - s1 * t0) / det};
    } else {  // one distinct batch size: a constant
      c = {t0 / s0, 0.0};
    }
    for (size_t i = 0; i < batch.size(); ++i)
      w[i] = 1.0 / std::max(0.05, std::fabs(host_us[i] - c[0] - c[1] * batch[i]));
  }
  return c;
}

// ------------------------------------------------------------------------------------------
// JSON table: a fixed shape written by to_json; from_json reads that shape (keys in any order
// inside an option, whitespace free).

std::string RouterModel::to_json() const {
  std::ostringstream os;
  os.precision(9);
  os << "{\n  \"gpu\": \"" << gpu << "\",\n  \"num_kv_heads\": " << num_kv_heads << ",\n  \"group_size\": "
     << group_size << ",\n  \"head_dim\": " << head_dim << ",\n  \"slots\": " << slots
     << ",\n  \"router_us\": " << router_us << ",\n  \"calibration\": \"" << calibration
     << "\",\n  \"features\": [\"1\", \"keys_per_slot_k\", \"critical_path_k\", \"tasks_k\", \"merges_k\"],\n"
     << "  \"options\": [\n";
  for (size_t i = 0; i < options.size(); ++i) {
    const RouteOption& o = options[i];
    os << "    {\"name\": \"" << o.name << "\", \"route\": \"" << route_name(o.route) << "\", \"chunk\": " << o.chunk
       << ", \"coef\": [";
    for (int f = 0; f < kRouterFeatures; ++f) os << (f ? ", " : "") << o.coef[f];
    os << "]";
    if (o.host_us[0] != 0 || o.host_us[1] != 0) os << ", \"host\": [" << o.host_us[0] << ", " << o.host_us[1] << "]";
    os << "}" << (i + 1 < options.size() ? "," : "") << "\n";
  }
  os << "  ]";
  if (!steps.empty()) {
    // One row per calibration step: its kStepFeatures features, then each option's wall us (-1:
    // not measured), in the order of "options".
    os << ",\n  \"neighbours\": " << neighbours << ",\n  \"vote_margin\": " << vote_margin
       << ",\n  \"step_features\": [\"log2_batch\", \"log2_keys\", \"log2_longest\", \"shared_fraction_x4\"],\n"
       << "  \"steps\": [\n";
    for (size_t n = 0; n < steps.size(); ++n) {
      os << "    [";
      for (int i = 0; i < kStepFeatures; ++i) os << (i ? ", " : "") << steps[n].x[i];
      for (double w : steps[n].wall_us) os << ", " << (w > 0 ? w : -1.0);
      os << "]" << (n + 1 < steps.size() ? "," : "") << "\n";
    }
    os << "  ]";
  }
  os << "\n}\n";
  return os.str();
}

namespace {

std::string string_field(const std::string& s, const std::string& key, size_t from = 0, size_t to = std::string::npos) {
  const size_t k = s.find("\"" + key + "\"", from);
  WEFT_CHECK_ARG(k != std::string::npos && k < to, "router table", "missing \"" << key << "\"");
  const size_t a = s.find('"', s.find(':', k) + 1);
  const size_t b = s.find('"', a + 1);
  WEFT_CHECK_ARG(a != std::string::npos && b != std::string::npos && b < to, "router table",
                 "bad string for \"" << key << "\"");
  return s.substr(a + 1, b - a - 1);
}
double number_field(const std::string& s, const std::string& key, size_t from = 0, size_t to = std::string::npos) {
  const size_t k = s.find("\"" + key + "\"", from);
  WEFT_CHECK_ARG(k != std::string::npos && k < to, "router table", "missing \"" << key << "\"");
  const size_t c = s.find(':', k);
  char* end = nullptr;
  const double v = std::strtod(s.c_str() + c + 1, &end);
  WEFT_CHECK_ARG(end != s.c_str() + c + 1, "router table", "bad number for \"" << key << "\"");
  return v;
}
// Position of the ']' closing the '[' at `open` (nested brackets counted; strings hold none).
size_t closing_bracket(const std::string& s, size_t open) {
  int depth = 0;
  for (size_t i = open; i < s.size(); ++i) {
    if (s[i] == '[') ++depth;
    if (s[i] == ']' && --depth == 0) return i;
  }
  throw Error("router table", "unterminated array");
}
// n comma-separated numbers from p (an array's first element): finite, and >= 0 if non_negative.
void read_numbers(const char* p, double* out, int n, bool non_negative, const std::string& option, const char* what) {
  for (int i = 0; i < n; ++i) {
    char* end = nullptr;
    out[i] = std::strtod(p, &end);
    WEFT_CHECK_ARG(end != p && std::isfinite(out[i]) && (!non_negative || out[i] >= 0), "router table",
                   "option " << option << ": " << what << " " << i << " must be a number"
                             << (non_negative ? " >= 0" : ""));
    p = end;
    while (*p == ',' || *p == ' ') ++p;
  }
}
Route route_of(const std::string& n) {
  for (Route r : {Route::kBalanced, Route::kWorkQueue, Route::kNoSplit, Route::kPrefixShare})
    if (n == route_name(r)) return r;
  throw Error("router table", "unknown route \"" + n + "\"");
}

}  // namespace

RouterModel RouterModel::from_json(const std::string& s) {
  RouterModel m;
  const size_t opts = s.find("\"options\"");
  WEFT_CHECK_ARG(opts != std::string::npos, "router table", "missing \"options\"");
  const std::string head = s.substr(0, opts);
  m.gpu = string_field(head, "gpu");
  m.num_kv_heads = static_cast<int32_t>(number_field(head, "num_kv_heads"));
  m.group_size = static_cast<int32_t>(number_field(head, "group_size"));
  m.head_dim = static_cast<int32_t>(number_field(head, "head_dim"));
  m.slots = static_cast<int32_t>(number_field(head, "slots"));
  m.router_us = number_field(head, "router_us");
  m.calibration = string_field(head, "calibration");
  WEFT_CHECK_ARG(m.slots >= 1 && m.num_kv_heads >= 1, "router table", "slots and num_kv_heads must be >= 1");
  size_t pos = s.find('[', opts);
  WEFT_CHECK_ARG(pos != std::string::npos, "router table", "\"options\" is not an array");
  const size_t opts_end = closing_bracket(s, pos);
  while (true) {
    const size_t a = s.find('{', pos);
    if (a == std::string::npos || a > opts_end) break;
    const size_t b = s.find('}', a);
    WEFT_CHECK_ARG(b != std::string::npos, "router table", "unterminated option");
    RouteOption o;
    o.name = string_field(s, "name", a, b);
    o.route = route_of(string_field(s, "route", a, b));
    o.chunk = static_cast<int32_t>(number_field(s, "chunk", a, b));
    const size_t c = s.find('[', s.find("\"coef\"", a));
    WEFT_CHECK_ARG(c < b, "router table", "missing \"coef\" in option " << o.name);
    read_numbers(s.c_str() + c + 1, o.coef.data(), kRouterFeatures, /*non_negative=*/true, o.name, "coefficient");
    const size_t h = s.find("\"host\"", a);  // optional: the host-time fit (RouteOption::host_us)
    if (h < b) {
      const size_t hb = s.find('[', h);
      WEFT_CHECK_ARG(hb < b, "router table", "option " << o.name << ": \"host\" is not an array");
      read_numbers(s.c_str() + hb + 1, o.host_us.data(), 2, /*non_negative=*/false, o.name, "host time coefficient");
    }
    m.options.push_back(o);
    pos = b + 1;
  }
  WEFT_CHECK_ARG(!m.options.empty(), "router table", "no options");
  WEFT_CHECK_ARG(m.options.size() <= size_t(kRouterMaxOptions), "router table",
                 m.options.size() << " options, at most " << kRouterMaxOptions);
  // Calibration steps of the nearest-neighbour vote (optional: older tables have none).
  const size_t st = s.find("\"steps\"", opts_end);
  if (st == std::string::npos) return m;
  const double k = number_field(s, "neighbours", opts_end);
  WEFT_CHECK_ARG(k >= 1 && k <= kRouterMaxNeighbours && k == std::floor(k), "router table",
                 "\"neighbours\" must be an integer in [1, " << kRouterMaxNeighbours << "], got " << k);
  m.neighbours = static_cast<int32_t>(k);
  // Optional (tables before it have none: kRouterVoteMargin).
  const size_t vm = s.find("\"vote_margin\"", opts_end);
  if (vm != std::string::npos && vm < st) {
    const double margin = number_field(s, "vote_margin", opts_end, st);
    WEFT_CHECK_ARG(margin >= 0 && margin <= 0.5, "router table", "\"vote_margin\" must be in [0, 0.5], got " << margin);
    m.vote_margin = margin;
  }
  const size_t a = s.find('[', st);
  WEFT_CHECK_ARG(a != std::string::npos, "router table", "\"steps\" is not an array");
  const size_t end = closing_bracket(s, a);
  const size_t width = kStepFeatures + m.options.size();
  for (size_t r = s.find('[', a + 1); r < end; r = s.find('[', r + 1)) {
    const size_t re = s.find(']', r);
    WEFT_CHECK_ARG(re < end, "router table", "unterminated step " << m.steps.size());
    std::vector<double> v;
    const char* p = s.c_str() + r + 1;
    const char* stop = s.c_str() + re;
    while (p < stop) {
      while (p < stop && (*p == ',' || std::isspace(static_cast<unsigned char>(*p)))) ++p;
      if (p == stop) break;
      char* e = nullptr;
      const double x = std::strtod(p, &e);
      WEFT_CHECK_ARG(e != p && e <= stop && std::isfinite(x), "router table",
                     "step " << m.steps.size() << ": value " << v.size() << " is not a finite number");
      v.push_back(x);
      p = e;
    }
    WEFT_CHECK_ARG(v.size() == width, "router table",
                   "step " << m.steps.size() << " has " << v.size() << " values, expected " << width << " ("
                           << kStepFeatures << " features + one wall time per option)");
    CalibrationStep c;
    std::copy(v.begin(), v.begin() + kStepFeatures, c.x.begin());
    c.wall_us.assign(v.begin() + kStepFeatures, v.end());
    for (size_t o = 0; o < c.wall_us.size(); ++o)
      WEFT_CHECK_ARG(c.wall_us[o] > 0 || c.wall_us[o] == -1.0, "router table",
                     "step " << m.steps.size() << ", option " << m.options[o].name
                             << ": wall time must be > 0 or -1 (not measured), got " << c.wall_us[o]);
    m.steps.push_back(std::move(c));
    r = re;
  }
  WEFT_CHECK_ARG(!m.steps.empty(), "router table", "\"steps\" is empty");
  return m;
}

}  // namespace weft::decode
