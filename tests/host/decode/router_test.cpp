// The decode router (decode/router.h): features against the work queue's own counts, the
// non-negative fit recovering known coefficients, the choice as the argmin of the model, and
// the JSON table's round trip and rejection of malformed tables.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <vector>

#include "attention/plan/work_queue.h"
#include "decode/router.h"
#include "tests/host/decode/random_block_table.h"
#include "tests/host/decode/router_reference.h"
#include "tests/common/test_util.h"
#include "weft/error.h"

namespace weft::decode {
namespace {

using test::random_block_table;
using test::RandomBlockTable;
using test::Rng;
using test::thrown_argument;

RouteOption option(Route r, int32_t chunk, RouterFeatures coef) {
  RouteOption o;
  o.name = std::string(route_name(r)) + (r == Route::kWorkQueue ? "/c" + std::to_string(chunk) : "");
  o.route = r;
  o.chunk = chunk;
  o.coef = coef;
  return o;
}

TEST(Router, WorkQueueFeaturesMatchTheSchedule) {
  Rng rng(7);
  for (int trial = 0; trial < 100; ++trial) {
    const int batch = int(rng.randint(1, 40));
    std::vector<int32_t> lens(batch);
    for (auto& l : lens) l = int32_t(rng.randint(0, 70000));
    const int32_t hkv = int32_t(rng.randint(1, 8));
    const int32_t chunk = 16 * int32_t(rng.randint(0, 256));
    plan::WorkQueueConfig cfg;
    cfg.num_kv_heads = hkv;
    cfg.chunk = chunk;
    const plan::WorkQueueShape sh = plan::work_queue_shape(lens.data(), batch, cfg);
    StepSummary s{lens.data(), batch, 0};
    const RouterFeatures f = route_features(option(Route::kWorkQueue, chunk, {}), s, hkv, 264);
    EXPECT_DOUBLE_EQ(f[0], 1.0);
    EXPECT_NEAR(f[3] * 1e3, double(sh.tasks), 1e-6);
    EXPECT_NEAR(f[4] * 1e3, double(sh.merges), 1e-6);
    // Critical path: between the list-scheduling bounds of the tasks (each chunk or remainder
    // plus kTaskOverheadKeys = 256) on 264 slots: max(total / slots, longest task) and Graham's
    // total / slots + longest task; exact when every task is a full chunk.
    double total = 0, longest = 0;
    bool all_full = chunk > 0;
    for (int32_t l : lens) {
      const int64_t n = chunk <= 0 || l <= chunk ? 1 : (l + chunk - 1) / chunk;
      for (int64_t k = 0; k < n; ++k) {
        const int64_t keys = chunk <= 0 ? l : std::min<int64_t>(chunk, l - k * int64_t(chunk));
        total += double(keys + 256) * hkv;
        longest = std::max(longest, double(keys + 256));
        all_full = all_full && keys == chunk;
      }
    }
    EXPECT_GE(f[2] * 1e3, std::max(total / 264, longest) - 1e-6);
    EXPECT_LE(f[2] * 1e3, total / 264 + longest + 1e-6);
    if (all_full) EXPECT_NEAR(f[2] * 1e3, std::ceil(double(sh.tasks) / 264) * (chunk + 256), 1e-6);
    int64_t keys = 0;
    for (int32_t l : lens) keys += l;
    EXPECT_NEAR(f[1] * 1e3, double((keys * hkv + 263) / 264), 1e-6);
    // No split: one task per row and head; the longest is the longest row.
    const RouterFeatures n = route_features(option(Route::kNoSplit, 0, {}), s, hkv, 264);
    EXPECT_NEAR(n[3] * 1e3, double(batch * hkv), 1e-6);
    EXPECT_EQ(n[4], 0.0);
  }
}

TEST(Router, PrefixShareReadsSharedKeysOnce) {
  const std::vector<int32_t> lens{4096, 4096, 4096, 4096};
  StepSummary s{lens.data(), 4, 3 * 4000};
  const RouterFeatures pat = route_features(option(Route::kPrefixShare, 0, {}), s, 8, 100);
  const RouterFeatures bal = route_features(option(Route::kBalanced, 0, {}), s, 8, 100);
  EXPECT_LT(pat[1], bal[1]);
  EXPECT_NEAR(pat[1] * 1e3, double(((4 * 4096 - 12000) * 8 + 99) / 100), 1e-6);
}

TEST(Router, FitRecoversCoefficients) {
  Rng rng(11);
  const RouterFeatures truth{12.0, 3.5, 0.0, 40.0, 7.0};
  std::vector<RouterFeatures> x;
  std::vector<double> t;
  for (int n = 0; n < 300; ++n) {
    RouterFeatures f{1.0, rng.uniform(0, 50), rng.uniform(0, 10), rng.uniform(0, 3), rng.uniform(0, 0.5)};
    double y = 0;
    for (int i = 0; i < kRouterFeatures; ++i) y += truth[i] * f[i];
    x.push_back(f);
    t.push_back(y);
  }
  const RouterFeatures c = fit_route(x, t);
  for (int i = 0; i < kRouterFeatures; ++i) EXPECT_NEAR(c[i], truth[i], 1e-3 + 1e-4 * truth[i]) << i;
  // Exact data: the relative fit finds the same coefficients.
  const RouterFeatures r = fit_route(x, t, /*relative=*/true);
  for (int i = 0; i < kRouterFeatures; ++i) EXPECT_NEAR(r[i], truth[i], 1e-3 + 1e-4 * truth[i]) << i;
}

TEST(Router, FitIsNonNegative) {
  // y decreases with feature 1: the unconstrained fit would be negative there.
  std::vector<RouterFeatures> x;
  std::vector<double> t;
  for (int n = 0; n < 50; ++n) {
    x.push_back({1.0, double(n), 0, 0, 0});
    t.push_back(100.0 - n);
  }
  const RouterFeatures c = fit_route(x, t);
  for (double v : c) EXPECT_GE(v, 0.0);
  EXPECT_EQ(c[1], 0.0);
  EXPECT_NEAR(c[0], 75.5, 1e-6);  // the mean, with feature 1 clamped out
}

TEST(Router, ChoosesTheArgminOfTheModel) {
  RouterModel m;
  m.num_kv_heads = 8;
  m.slots = 264;
  m.options = {option(Route::kBalanced, 0, {20, 2, 0, 0, 10}), option(Route::kWorkQueue, 1024, {8, 2, 0, 5, 20}),
               option(Route::kNoSplit, 0, {6, 2, 8, 5, 0}), option(Route::kPrefixShare, 0, {30, 2, 0, 0, 10})};
  Rng rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const int batch = int(rng.randint(1, 64));
    std::vector<int32_t> lens(batch);
    for (auto& l : lens) l = int32_t(rng.randint(1, 65536));
    StepSummary s{lens.data(), batch, trial % 2 ? rng.randint(0, 100000) : 0};
    const int32_t pick = choose_route(m, s);
    ASSERT_GE(pick, 0);
    if (s.shared_keys == 0) EXPECT_NE(m.options[pick].route, Route::kPrefixShare);
    for (size_t i = 0; i < m.options.size(); ++i) {
      if (m.options[i].route == Route::kPrefixShare && s.shared_keys == 0) continue;
      EXPECT_LE(predict_us(m.options[pick], s, 8, 264), predict_us(m.options[i], s, 8, 264));
    }
  }
  // Short batch with one long row: no-split's critical path (8 x 65536 keys) loses.
  const std::vector<int32_t> one{65536};
  EXPECT_NE(m.options[choose_route(m, {one.data(), 1, 0})].route, Route::kNoSplit);
  RouterModel empty;
  EXPECT_EQ(choose_route(empty, {one.data(), 1, 0}), -1);
  // The filter: no balanced plan, and no 1-D grid with more tasks than the workspace holds (one
  // row of 65536 keys at 1024-key splits is 64 x 8 tasks; no split is 8).
  RouteFilter f;
  f.balanced = false;
  f.prefix_share = false;
  f.max_tasks = 100;
  const std::vector<int32_t> lens2{65536, 100};
  const int32_t p = choose_route(m, {lens2.data(), 2, 5000}, f);
  ASSERT_GE(p, 0);
  EXPECT_EQ(m.options[p].route, Route::kNoSplit);
  f.max_tasks = 1;
  EXPECT_EQ(choose_route(m, {lens2.data(), 2, 5000}, f), -1);
}

// The shared keys of a block table (a prefix-sharing plan's saving): groups by first page id,
// full leading pages equal to the group's first row's.
TEST(Router, SharedPrefixKeys) {
  const int32_t page = 4, stride = 6;
  // Rows 0, 2, 3 start with pages 7 8 9; row 2 diverges after 2 pages, row 3 is shorter (its
  // third page partial); row 1 and row 4 share nothing with anyone; row 5 is empty.
  const std::vector<int32_t> ids{7, 8, 9, 1, -1, -1,   //
                                 3, 4, -1, -1, -1, -1,  //
                                 7, 8, 5, 6, -1, -1,    //
                                 7, 8, 9, -1, -1, -1,   //
                                 11, -1, -1, -1, -1, -1,  //
                                 0, 0, 0, 0, 0, 0};
  const std::vector<int32_t> lens{16, 8, 16, 10, 3, 0};
  // Row 2: 2 pages with row 0 (8 keys); row 3: min(16, 10) / 4 = 2 full pages compared, both equal.
  EXPECT_EQ(shared_prefix_keys(ids.data(), stride, lens.data(), 6, page), 16);
  EXPECT_EQ(shared_prefix_keys(ids.data(), stride, lens.data(), 1, page), 0);
  // The trace definition: m rows sharing a P-key prefix give P x (m - 1).
  Rng rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    const int32_t m = int32_t(rng.randint(2, 40)), prefix_pages = int32_t(rng.randint(1, 50)), ps = 16;
    const int32_t width = prefix_pages + 20;
    std::vector<int32_t> t(static_cast<size_t>(m) * width), l(static_cast<size_t>(m));
    int32_t next = 1000;
    for (int32_t r = 0; r < m; ++r) {
      for (int32_t p = 0; p < prefix_pages; ++p) t[size_t(r) * width + p] = p;
      for (int32_t p = prefix_pages; p < width; ++p) t[size_t(r) * width + p] = next++;
      l[r] = prefix_pages * ps + int32_t(rng.randint(1, 15 * ps));  // a private suffix of >= 1 key
    }
    EXPECT_EQ(shared_prefix_keys(t.data(), width, l.data(), m, ps), int64_t(prefix_pages) * ps * (m - 1));
  }
}

// The hash grouping returns exactly what the sorted reference (router_reference.h) returns, on
// random block tables: unshared rows (scattered distinct ids), groups sharing prefixes of random
// lengths (diverging at any page, rows shorter than the prefix, partial last pages), rows with
// equal first ids but nothing else in common, empty and sub-page rows, negative ids (unchecked
// entries), page size 1, strides wider than the rows, and batches past the stack table (2048).
TEST(Router, SharedPrefixKeysHashEqualsSortedReference) {
  Rng rng(22);
  int64_t shared_tables = 0;
  for (int trial = 0; trial < 600; ++trial) {
    const int32_t batch = trial % 50 == 49 ? int32_t(rng.randint(2049, 5000)) : int32_t(rng.randint(0, 300));
    const RandomBlockTable t = random_block_table(rng, trial, batch);
    const std::vector<int32_t>& ids = t.ids;
    const std::vector<int32_t>& lens = t.lens;
    const int64_t stride = t.stride;
    const int32_t ps = t.page_size;
    const int64_t want = reference::shared_prefix_keys(ids.data(), stride, lens.data(), batch, ps);
    ASSERT_EQ(shared_prefix_keys(ids.data(), stride, lens.data(), batch, ps), want)
        << "trial " << trial << " batch " << batch << " page " << ps;
    shared_tables += want > 0;
  }
  EXPECT_GT(shared_tables, 200);  // the random tables exercise the comparing path, not only the early one
  // Every row with the same first id and the same pages: the lowest row leads; an id of INT32_MIN
  // and INT32_MAX (the hash and the sign flip of the reference's key).
  for (int32_t first : {INT32_MIN, -1, 0, INT32_MAX}) {
    const int32_t batch = 33, ps = 4, width = 5;
    std::vector<int32_t> ids(static_cast<size_t>(batch) * width), lens(static_cast<size_t>(batch));
    for (int32_t b = 0; b < batch; ++b) {
      for (int32_t p = 0; p < width; ++p) ids[size_t(b) * width + p] = p == 0 ? first : p;
      lens[b] = 1 + (b * 7) % (width * ps);
    }
    EXPECT_EQ(shared_prefix_keys(ids.data(), width, lens.data(), batch, ps),
              reference::shared_prefix_keys(ids.data(), width, lens.data(), batch, ps));
  }
}

TEST(Router, JsonRoundTripAndRejection) {
  RouterModel m;
  m.gpu = "NVIDIA H100 80GB HBM3";
  m.num_kv_heads = 8;
  m.group_size = 4;
  m.head_dim = 128;
  m.slots = 264;
  m.router_us = 0.75;
  m.calibration = "seed 20260622, 6 families x 40 steps";
  m.options = {option(Route::kBalanced, 0, {20.5, 2.25, 0, 0, 10}), option(Route::kWorkQueue, 1024, {8, 2, 0, 5, 1e-7})};
  const RouterModel r = RouterModel::from_json(m.to_json());
  EXPECT_EQ(r.gpu, m.gpu);
  EXPECT_EQ(r.slots, 264);
  EXPECT_EQ(r.calibration, m.calibration);
  EXPECT_DOUBLE_EQ(r.router_us, 0.75);
  ASSERT_EQ(r.options.size(), 2u);
  EXPECT_EQ(r.options[1].name, "work_queue/c1024");
  EXPECT_EQ(r.options[1].route, Route::kWorkQueue);
  EXPECT_EQ(r.options[1].chunk, 1024);
  for (int i = 0; i < kRouterFeatures; ++i) EXPECT_DOUBLE_EQ(r.options[0].coef[i], m.options[0].coef[i]);
  EXPECT_DOUBLE_EQ(r.options[1].coef[4], 1e-7);
  EXPECT_EQ(thrown_argument([] { RouterModel::from_json("{}"); }), "router table");
  std::string bad = m.to_json();
  bad.replace(bad.find("work_queue\""), 10, "warp_queue");
  EXPECT_EQ(thrown_argument([&] { RouterModel::from_json(bad); }), "router table");
  std::string neg = m.to_json();
  neg.replace(neg.find("[20.5"), 5, "[-2.5");
  EXPECT_EQ(thrown_argument([&] { RouterModel::from_json(neg); }), "router table");
}

TEST(Router, JsonHostFitRejectedWhenMalformed) {
  RouterModel m;
  m.num_kv_heads = 8;
  m.slots = 264;
  m.options = {option(Route::kBalanced, 0, {1, 0, 0, 0, 0})};
  m.options[0].host_us = {30.5, 0.04};
  const std::string good = m.to_json();
  EXPECT_EQ(RouterModel::from_json(good).options[0].host_us[0], 30.5);
  std::string not_number = good;
  not_number.replace(not_number.find("[30.5"), 5, "[x0.5");
  EXPECT_EQ(thrown_argument([&] { RouterModel::from_json(not_number); }), "router table");
  std::string not_array = good;
  not_array.replace(not_array.find("[30.5"), 1, " ");
  not_array.replace(not_array.find("0.04]"), 5, "0.04 ");
  EXPECT_EQ(thrown_argument([&] { RouterModel::from_json(not_array); }), "router table");
}

// A table with calibration steps over random steps: options balanced, two work-queue chunks, no
// split and prefix sharing (measured only where the step shares keys); random wall times.
struct VoteCase {
  RouterModel m;
  std::vector<std::vector<int32_t>> lens;
  std::vector<StepSummary> sums;
};
VoteCase vote_case(uint64_t seed, int32_t steps, int32_t k) {
  Rng rng(seed);
  VoteCase c;
  c.m.num_kv_heads = 8;
  c.m.slots = 16;  // every step has >= 8 tasks = slots / 2: the vote's fill rule never applies here
                   // (VoteSkipsOneDGridsThatLeaveSMsIdle tests it)
  c.m.options = {option(Route::kBalanced, 0, {1, 0, 0, 0, 0}), option(Route::kWorkQueue, 1024, {1, 0, 0, 0, 0}),
                 option(Route::kWorkQueue, 4096, {1, 0, 0, 0, 0}), option(Route::kNoSplit, 0, {1, 0, 0, 0, 0}),
                 option(Route::kPrefixShare, 0, {1, 0, 0, 0, 0})};
  c.m.neighbours = k;
  c.lens.resize(size_t(steps));
  for (int32_t n = 0; n < steps; ++n) {
    c.lens[n].resize(size_t(rng.randint(1, 64)));
    int64_t keys = 0;
    for (auto& l : c.lens[n]) keys += (l = int32_t(rng.randint(1, 70000)));
    c.sums.push_back({c.lens[n].data(), int32_t(c.lens[n].size()), n % 3 == 0 ? rng.randint(1, keys) : 0});
  }
  for (int32_t n = 0; n < steps; ++n) {
    CalibrationStep cs;
    cs.x = step_features(c.sums[n]);
    for (const RouteOption& o : c.m.options)
      cs.wall_us.push_back(o.route == Route::kPrefixShare && c.sums[n].shared_keys == 0 ? -1.0 : rng.uniform(50, 500));
    c.m.steps.push_back(cs);
  }
  return c;
}

// Brute force of the vote's neighbours: the k calibration steps nearest to the step's cell centre
// (stable by distance), then every step within one grid cell of the k-th (ties at the grid's
// resolution), in step order, at most kRouterMaxNeighbours.
std::vector<int32_t> voters(const RouterModel& m, const StepSummary& s) {
  const StepFeatures x = step_grid_point(s);
  std::vector<std::pair<double, int32_t>> d;
  for (int32_t n = 0; n < int32_t(m.steps.size()); ++n) {
    double dd = 0;
    for (int i = 0; i < kStepFeatures; ++i) dd += (m.steps[n].x[i] - x[i]) * (m.steps[n].x[i] - x[i]);
    d.push_back({dd, n});
  }
  std::vector<std::pair<double, int32_t>> sorted = d;
  std::stable_sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return a.first < b.first; });
  const double tie = sorted[size_t(m.neighbours) - 1].first + kStepFeatures * kStepFeatureQuantum * kStepFeatureQuantum;
  std::vector<int32_t> v;
  for (const auto& [dd, n] : d)
    if (dd <= tie && v.size() < size_t(kRouterMaxNeighbours)) v.push_back(n);
  return v;
}

// The vote's pick from per-option scores (< 0: not a candidate): the lowest, then the earliest
// option within `margin` of it (router.h, kRouterVoteMargin).
int32_t within_margin_pick(const std::vector<double>& score, double margin) {
  int32_t best = -1;
  for (int32_t o = 0; o < int32_t(score.size()); ++o)
    if (score[o] >= 0 && (best < 0 || score[o] < score[best])) best = o;
  for (int32_t o = 0; o < best; ++o)
    if (score[o] >= 0 && score[o] <= score[best] * (1 + margin)) return o;
  return best;
}

TEST(Router, VotePicksTheCalibrationStepsBestOnItsOwnData) {
  // One neighbour: at a calibration step the vote is that step's fastest admitted option, unless
  // other steps lie within a grid cell of it (random batches of 30-60 rows of uniform lengths lie
  // close: steps 14 and 50 of this seed are 1/64 apart in one feature); then all of them vote.
  VoteCase c = vote_case(21, 60, 1);
  int32_t merged = 0;
  for (size_t n = 0; n < c.sums.size(); ++n) {
    const std::vector<int32_t> v = voters(c.m, c.sums[n]);
    merged += v.size() > 1;
    if (v.size() > 1) continue;  // VoteIsTheLowestSumOfRelativeTimesOverTheNearestSteps covers these
    ASSERT_EQ(v[0], int32_t(n));
    const size_t first = n;
    for (bool bal : {true, false}) {
      RouteFilter f;
      f.balanced = bal;
      const int32_t pick = choose_route(c.m, c.sums[n], f);
      ASSERT_GE(pick, 0);
      std::vector<double> w = c.m.steps[first].wall_us;
      if (!bal) w[0] = -1;
      EXPECT_EQ(pick, within_margin_pick(w, c.m.vote_margin)) << "step " << n;
      if (c.sums[n].shared_keys == 0) EXPECT_NE(c.m.options[pick].route, Route::kPrefixShare);
    }
  }
  EXPECT_LT(merged, 8);  // few steps share a cell
}

TEST(Router, MemoGivesThePicksOfNoMemoWhateverCameBefore) {
  // Random walks of decode steps (each row +1 key per step, rows joining and leaving, prefix
  // sharing on and off) through one memo: every pick equals the memo-less pick of the same step.
  for (int32_t k : {1, 8}) {
    VoteCase c = vote_case(300 + k, 80, k);
    c.m.slots = 264;  // the fill rule live: small batches admit fewer 1-D grids
    Rng rng(77 + k);
    RouteMemo memo;
    int64_t steps = 0;
    for (int walk = 0; walk < 20; ++walk) {
      std::vector<int32_t> lens(size_t(rng.randint(1, 40)));
      for (auto& l : lens) l = int32_t(rng.randint(1, 70000));
      for (int t = 0; t < 50; ++t, ++steps) {
        for (auto& l : lens) ++l;
        if (rng.randint(0, 9) == 0) lens.push_back(int32_t(rng.randint(1, 70000)));
        if (lens.size() > 1 && rng.randint(0, 9) == 0) lens.pop_back();
        const int64_t shared = walk % 3 == 0 ? 1000 : 0;
        RouteFilter f;
        f.balanced = shared == 0;
        f.max_tasks = walk % 4 == 1 ? 300 : INT64_MAX;
        const StepSummary s{lens.data(), int32_t(lens.size()), shared};
        ASSERT_EQ(choose_route(c.m, s, f, &memo), choose_route(c.m, s, f)) << "walk " << walk << " step " << t;
      }
    }
    // Consecutive steps mostly share a grid point: most answers come from the memo.
    EXPECT_GT(memo.hits, steps / 2) << "k " << k;
  }
  // Steps alternating between a few cells (a batch's keys wandering back and forth): after the
  // first visit of each, every pick comes from the memo, and equals the memo-less pick.
  {
    VoteCase c = vote_case(900, 80, 8);
    std::vector<std::vector<int32_t>> cells;
    for (int32_t i = 0; i < kRouteMemoEntries; ++i) cells.push_back(std::vector<int32_t>(size_t(8 + i), 3000 + 700 * i));
    RouteMemo memo;
    for (int round = 0; round < 5; ++round)
      for (const auto& l : cells) {
        const StepSummary s{l.data(), int32_t(l.size()), 0};
        ASSERT_EQ(choose_route(c.m, s, {}, &memo), choose_route(c.m, s));
      }
    EXPECT_EQ(memo.hits, 4 * kRouteMemoEntries);
  }
  // A memo of another table is not used.
  VoteCase a = vote_case(1, 30, 1), b = vote_case(2, 30, 1);
  const std::vector<int32_t> one{5000};
  RouteMemo memo;
  const int32_t pa = choose_route(a.m, {one.data(), 1, 0}, {}, &memo);
  EXPECT_EQ(choose_route(b.m, {one.data(), 1, 0}, {}, &memo), choose_route(b.m, {one.data(), 1, 0}));
  EXPECT_EQ(memo.hits, 0);
  EXPECT_GE(pa, 0);
}

TEST(Router, VoteIsTheLowestSumOfRelativeTimesOverTheNearestSteps) {
  Rng rng(4);
  // 1100 calibration steps: past the vote's kept distances (1024; the rest measured again).
  for (int32_t k : {1, 3, 8, 9}) {
    VoteCase c = vote_case(100 + k, k == 9 ? 1100 : 50, k == 9 ? 8 : k);
    for (int trial = 0; trial < 100; ++trial) {
      std::vector<int32_t> lens(size_t(rng.randint(1, 64)));
      for (auto& l : lens) l = int32_t(rng.randint(1, 70000));
      const StepSummary s{lens.data(), int32_t(lens.size()), 0};
      // Brute force: the voters (above), options measured at all of them (here: all but prefix
      // sharing, which this unshared step does not admit).
      std::vector<double> score(c.m.options.size(), 0.0);
      std::vector<bool> ok(c.m.options.size(), true);
      ok[4] = false;  // the step shares nothing
      for (int32_t n : voters(c.m, s)) {
        const auto& w = c.m.steps[n].wall_us;
        double best = 1e30;
        for (size_t o = 0; o < w.size(); ++o)
          if (ok[o]) best = std::min(best, w[o]);
        for (size_t o = 0; o < w.size(); ++o)
          if (ok[o]) score[o] += w[o] / best;
      }
      score[4] = -1;
      EXPECT_EQ(choose_route(c.m, s), within_margin_pick(score, c.m.vote_margin)) << "k " << k << " trial " << trial;
    }
  }
}

TEST(Router, VoteKeepsTheEarlierOptionWithinTheMargin) {
  // One calibration step, balanced (option 0) against c1024 (option 1): c1024 wins only when it
  // is faster by more than the margin; a margin of 0 is the plain lowest time.
  VoteCase c = vote_case(5, 1, 1);
  const std::vector<int32_t> lens(16, 30000);
  const StepSummary s{lens.data(), 16, 0};
  RouteFilter f;
  c.m.steps.assign(1, CalibrationStep{step_features(s), {101.5, 100, 500, 500, -1}});
  ASSERT_DOUBLE_EQ(c.m.vote_margin, kRouterVoteMargin);
  EXPECT_EQ(choose_route(c.m, s, f), 0);  // 1.5% apart: inside 2%
  c.m.steps[0].wall_us = {102.5, 100, 500, 500, -1};
  EXPECT_EQ(choose_route(c.m, s, f), 1);  // 2.5% apart
  c.m.vote_margin = 0;
  c.m.steps[0].wall_us = {100.1, 100, 500, 500, -1};
  EXPECT_EQ(choose_route(c.m, s, f), 1);
  c.m.vote_margin = 0.05;  // the earliest within the margin, not the second best
  c.m.steps[0].wall_us = {104, 103, 100, 500, -1};
  EXPECT_EQ(choose_route(c.m, s, f), 0);
  c.m.steps[0].wall_us = {106, 103, 100, 500, -1};
  EXPECT_EQ(choose_route(c.m, s, f), 1);
  f.balanced = false;  // a non-admitted earlier option is no candidate
  c.m.steps[0].wall_us = {100, 103, 100, 500, -1};
  EXPECT_EQ(choose_route(c.m, s, f), 1);
  // The table keeps its margin; a margin outside [0, 0.5] is rejected naming the table.
  c.m.vote_margin = 0.035;
  const std::string text = c.m.to_json();
  EXPECT_DOUBLE_EQ(RouterModel::from_json(text).vote_margin, 0.035);
  for (const char* bad : {"-0.01", "0.6", "nan"}) {
    std::string t = text;
    t.replace(t.find("0.035"), 5, bad);
    EXPECT_EQ(thrown_argument([&] { RouterModel::from_json(t); }), "router table") << bad;
  }
  // A table without the field (written before it) gets kRouterVoteMargin.
  std::string old = text;
  old.erase(old.find(",\n  \"vote_margin\""), std::string(",\n  \"vote_margin\": 0.035").size());
  EXPECT_DOUBLE_EQ(RouterModel::from_json(old).vote_margin, kRouterVoteMargin);
}

TEST(Router, VoteRespectsTheTaskLimitAndFallsBackToTheModel) {
  VoteCase c = vote_case(9, 20, 1);
  // Step 1's measured order: no split fastest, then c1024; balanced not admitted.
  const std::vector<int32_t> lens{65536, 100};
  StepSummary s{lens.data(), 2, 0};
  c.m.steps.assign(1, CalibrationStep{step_features(s), {300, 200, 250, 100, -1}});
  RouteFilter f;
  f.balanced = false;
  EXPECT_EQ(c.m.options[choose_route(c.m, s, f)].route, Route::kNoSplit);
  // 8 tasks for no split, 8 x 65 for c1024, 8 x 17 for c4096: a limit of 7 leaves no 1-D grid; the
  // linear model then finds none either.
  f.max_tasks = 7;
  EXPECT_EQ(choose_route(c.m, s, f), -1);
  f.max_tasks = 200;  // no split (8 tasks) and c4096 (136 tasks) fit, c1024 (520) not
  c.m.steps[0].wall_us = {300, 50, 250, 400, -1};
  EXPECT_EQ(c.m.options[choose_route(c.m, s, f)].chunk, 4096);
  // No admitted option measured at the neighbour: the linear model decides (all its predictions
  // equal: the earliest admitted option that fits, c4096; c1024 has too many tasks).
  c.m.steps[0].wall_us = {300, -1, -1, -1, -1};
  EXPECT_EQ(choose_route(c.m, s, f), 2);
}

TEST(Router, VoteSkipsOneDGridsThatLeaveSMsIdle) {
  // 264 slots: a 1-D grid needs >= 132 tasks. One calibration step where c2048 was fastest.
  RouterModel m;
  m.num_kv_heads = 8;
  m.slots = 264;
  m.neighbours = 1;
  m.options = {option(Route::kBalanced, 0, {1, 0, 0, 0, 0}), option(Route::kWorkQueue, 2048, {1, 0, 0, 0, 0}),
               option(Route::kNoSplit, 0, {1, 0, 0, 0, 0})};
  const std::vector<int32_t> at32k{32768};
  const StepSummary cal{at32k.data(), 1, 0};
  m.steps.assign(1, CalibrationStep{step_features(cal), {100, 90, 400}});
  // 32K keys: 16 x 8 = 128 tasks < 132: c2048 is no candidate, balanced is picked.
  EXPECT_EQ(choose_route(m, cal), 0);
  // 64K keys: 32 x 8 = 256 tasks: c2048 fills the grid and wins its neighbour.
  const std::vector<int32_t> at64k{65536};
  EXPECT_EQ(choose_route(m, {at64k.data(), 1, 0}), 1);
  // 8K keys (the 74061e5 held-out case: 32 tasks): balanced.
  const std::vector<int32_t> at8k{8192};
  EXPECT_EQ(choose_route(m, {at8k.data(), 1, 0}), 0);
  // 17 rows x 8 heads = 136 tasks even unsplit: the rule does not apply, no split may win.
  const std::vector<int32_t> rows17(17, 1000);
  m.steps[0] = CalibrationStep{step_features({rows17.data(), 17, 0}), {100, 90, 80}};
  EXPECT_EQ(choose_route(m, {rows17.data(), 17, 0}), 2);
  // Balanced not admitted and every 1-D grid under the fill: no vote; the linear model (equal
  // predictions) takes the earliest admitted option that fits.
  RouteFilter f;
  f.balanced = false;
  m.steps[0] = CalibrationStep{step_features(cal), {100, 90, 400}};
  EXPECT_EQ(choose_route(m, {at8k.data(), 1, 0}, f), 1);
}

// A variant the work queue does not run (RouteFilter::work_queue false): neither the vote nor the
// linear model picks a 1-D grid, even where it was fastest; with balanced not admitted either, no
// option (the wrapper then plans balanced or prefix sharing). work_queue_runs_variant names the
// variants.
TEST(Router, NoOneDGridForAVariantTheWorkQueueDoesNotRun) {
  RouterModel m;
  m.num_kv_heads = 8;
  m.slots = 264;
  m.neighbours = 1;
  m.options = {option(Route::kBalanced, 0, {5, 0, 0, 0, 0}), option(Route::kWorkQueue, 2048, {1, 0, 0, 0, 0}),
               option(Route::kNoSplit, 0, {1, 0, 0, 0, 0})};
  const std::vector<int32_t> at64k{65536};
  const StepSummary s{at64k.data(), 1, 0};
  m.steps.assign(1, CalibrationStep{step_features(s), {100, 50, 400}});
  EXPECT_EQ(choose_route(m, s), 1);  // c2048 fastest at its neighbour
  RouteFilter f;
  f.work_queue = false;
  EXPECT_EQ(choose_route(m, s, f), 0);
  RouteMemo memo;  // a memo entry made with the 1-D grids admitted is not reused without them
  EXPECT_EQ(choose_route(m, s, RouteFilter{}, &memo), 1);
  EXPECT_EQ(choose_route(m, s, f, &memo), 0);
  RouterModel linear = m;  // no calibration steps: the linear model (1-D grids predicted faster)
  linear.steps.clear();
  linear.neighbours = 0;
  EXPECT_NE(linear.options[choose_route(linear, s)].route, Route::kBalanced);
  EXPECT_EQ(choose_route(linear, s, f), 0);
  f.balanced = false;
  EXPECT_EQ(choose_route(m, s, f), -1);
  EXPECT_EQ(choose_route(linear, s, f), -1);

  AttentionVariant v;
  EXPECT_TRUE(work_queue_runs_variant(v));
  AttentionVariant w = v;
  w.window_left = 128;
  EXPECT_FALSE(work_queue_runs_variant(w));
  AttentionVariant a = v;
  const float slopes[1] = {0.5f};
  a.alibi_slopes = slopes;
  EXPECT_FALSE(work_queue_runs_variant(a));
  AttentionVariant c = v;
  c.mask = MaskMode::kCustom;
  EXPECT_FALSE(work_queue_runs_variant(c));
  AttentionVariant j = v;
  j.jit = reinterpret_cast<const jit::Variant*>(slopes);  // only compared with null
  EXPECT_FALSE(work_queue_runs_variant(j));
}

TEST(Router, FitHostTimeIsTheLeastAbsoluteDeviationsLine) {
  // host = 20 + 0.1 x batch on 60 steps, 6 of them hit by +40..+200 us disturbances: the fit
  // follows the 54 clean ones (least squares would move by several us).
  Rng rng(12);
  std::vector<int32_t> b;
  std::vector<double> h;
  for (int i = 0; i < 60; ++i) {
    b.push_back(int32_t(rng.randint(1, 256)));
    h.push_back(20.0 + 0.1 * b.back() + (i % 10 == 3 ? rng.uniform(40, 200) : 0.0));
  }
  const auto c = fit_host_time(b, h);
  EXPECT_NEAR(c[0], 20.0, 0.05);
  EXPECT_NEAR(c[1], 0.1, 0.001);
  // One distinct batch size: a constant (the slope is not determined).
  const auto k = fit_host_time({4, 4, 4, 4, 4}, {10, 11, 12, 13, 90});
  EXPECT_EQ(k[1], 0.0);
  EXPECT_NEAR(k[0], 12.0, 0.5);
  // Deterministic, and bad input named.
  EXPECT_EQ(fit_host_time(b, h), c);
  EXPECT_EQ(thrown_argument([] { fit_host_time({1, 2}, {1.0}); }), "host_us");
  EXPECT_EQ(thrown_argument([] { fit_host_time({}, {}); }), "host_us");
}

TEST(Router, JsonStepsRoundTripAndRejection) {
  VoteCase c = vote_case(5, 12, 3);
  c.m.gpu = "test";
  c.m.group_size = 4;
  c.m.head_dim = 128;
  c.m.calibration = "synthetic";
  c.m.options[1].host_us = {28.5, 0.125};  // optional per option: written only where fitted
  const RouterModel r = RouterModel::from_json(c.m.to_json());
  EXPECT_EQ(r.options[1].host_us[0], 28.5);
  EXPECT_EQ(r.options[1].host_us[1], 0.125);
  EXPECT_EQ(r.options[0].host_us[0], 0.0);
  EXPECT_EQ(r.options[2].host_us[1], 0.0);
  ASSERT_EQ(r.steps.size(), c.m.steps.size());
  EXPECT_EQ(r.neighbours, 3);
  for (size_t n = 0; n < r.steps.size(); ++n) {
    for (int i = 0; i < kStepFeatures; ++i) EXPECT_NEAR(r.steps[n].x[i], c.m.steps[n].x[i], 1e-6 * std::fabs(c.m.steps[n].x[i]) + 1e-9);
    ASSERT_EQ(r.steps[n].wall_us.size(), c.m.options.size());
    for (size_t o = 0; o < c.m.options.size(); ++o)
      EXPECT_NEAR(r.steps[n].wall_us[o], c.m.steps[n].wall_us[o], 1e-6 * std::fabs(c.m.steps[n].wall_us[o]));
  }
  // The same decisions from the parsed table.
  for (const StepSummary& s : c.sums) EXPECT_EQ(choose_route(r, s), choose_route(c.m, s));
  const std::string good = c.m.to_json();
  auto rejects = [&](const std::string& from, const std::string& to) {
    std::string bad = good;
    const size_t at = bad.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    bad.replace(at, from.size(), to);
    EXPECT_EQ(thrown_argument([&] { RouterModel::from_json(bad); }), "router table") << from << " -> " << to;
  };
  rejects("\"neighbours\": 3", "\"neighbours\": 0");
  rejects("\"neighbours\": 3", "\"neighbours\": 2.5");
  rejects("\"neighbours\": 3", "\"neighbors\": 3");
  rejects(", -1]", ", 0]");            // a wall time of 0
  rejects(", -1]", ", -2]");           // negative other than "not measured"
  rejects(", -1]", "]");               // a short row
  rejects(", -1]", ", -1, 7]");        // a long row
  rejects(", -1]", ", nan]");          // not finite
  rejects(", -1]", ", x]");            // not a number
  rejects("\"steps\": [", "\"steps\": [\n]");  // empty, then stray rows
  rejects("\"steps\": [", "\"steps\": {");      // not an array (unterminated)
  // A table without steps (the linear model only) still parses.
  EXPECT_TRUE(RouterModel::from_json(good.substr(0, good.find(",\n  \"neighbours\"")) + "\n}\n").steps.empty());
}

}  // namespace
}  // namespace weft::decode
