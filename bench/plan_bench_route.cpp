// weft-plan-bench's route/ rows (plan_bench.h): the decode router's host parts.
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attention/plan/balance.h"
#include "common/plan_phases.h"
#include "decode/decode_plan.h"
#include "decode/direct_plan.h"
#include "attention/plan/pack_planner.h"
#include "decode/router.h"
#include "prefix_tree.h"
#include "paged/block_table.h"
#include "plan_bench.h"
#include "tests/host/decode/router_reference.h"

namespace weft::plan_bench {

using weft::plan::BalanceConfig;
using weft::plan::BatchShape;
using weft::plan::Plan;
using weft::plan::WorkspaceLayout;

// The router's host parts of BatchDecodeWrapper::plan(BlockTable) under DecodeRoute::kAuto with
// share_prefixes (what the serving harness's routed wrapper runs, weft-serve-sim), on block tables
// shaped like the harness's families (bench/serve/trace.cpp: page 16, 25% holes, scattered
// physical page ids, row stride = max_blocks), with the committed H100 table
// (data/router/h100.json, --router FILE), Llama-3-8B heads (8 KV heads):
//   route/<case>  rows check       paged::check_block_table_rows; ref: twice (the kAuto wrapper
//                                  and its balanced twin each checked the rows), new: once
//   route/<case>  shared keys      decode::shared_prefix_keys; ref: the sort of (first id, row)
//                                  keys (tests/host/decode/router_reference.h), new: the hash
//   route/<case>  choose_route     the nearest-neighbour vote (one implementation: ref = new)
//   route/<case>  decide           shared keys + choose_route (the harness's router_decide_us)
//   route/<case>  decide (cold)    the same after 32 MiB of other writes (the harness runs every
//                                  option between two routed plans: the router's data is not in
//                                  L1/L2 when the routed plan starts)
//   route/<case>  balanced plan    batch_shape + plan_decode + serialize (the fixed balanced
//                                  route's planning, for scale)
//   route/<case>  share step       the routed prefix_share step: feature + choose_route + pack
//                                  plan; ref: shared_prefix_keys then PackPlanner::plan, new:
//                                  PackPlanner::prepare then plan(prepared) (ids walked once);
//                                  warm and cold (lazy updates), and "share full (cold)" (reset:
//                                  a full plan after a structural change)
// Cases: b1 (one 32K row), b8 (bimodal), b32-shared (a 4096-key prefix shared by all), b256
// (512..4096 keys, unshared).
void route_cases(const std::string& filter, const std::string& router_path) {
  if (!filter.empty() && std::string("route/").find(filter) == std::string::npos &&
      filter.find("route") == std::string::npos)
    return;
  std::string text;
  if (FILE* f = std::fopen(router_path.c_str(), "rb")) {
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
    std::fclose(f);
  }
  if (text.empty()) {
    std::printf("route/: cannot read the router table %s (--router FILE)\n", router_path.c_str());
    return;
  }
  const weft::decode::RouterModel model = weft::decode::RouterModel::from_json(text);
  constexpr int32_t kPage = 16, kGrid = 264, kHq = 32, kHkv = 8, kHeadDim = 128;
  struct Case {
    std::string name;
    int32_t batch, shared_prefix;  // keys of a prefix every row lists first (0: none)
  };
  const Case cases[] = {{"route/b1", 1, 0}, {"route/b8", 8, 0}, {"route/b32-shared", 32, 4096}, {"route/b256", 256, 0}};
  std::vector<unsigned char> evict(32u << 20);
  unsigned char evict_round = 0;
  for (const Case& c : cases) {
    if (c.name.find(filter) == std::string::npos) continue;
    std::mt19937_64 rng(99 + c.batch);
    auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    std::vector<int32_t> lens(c.batch);
    for (int32_t b = 0; b < c.batch; ++b)
      lens[b] = c.batch == 1   ? 32768
                : c.batch == 8 ? (b % 4 == 0 ? uni(32768, 65536) : uni(1024, 4096))
                               : c.shared_prefix + uni(c.shared_prefix ? 256 : 512, 4096);
    const int32_t shared_pages = c.shared_prefix / kPage;
    int32_t max_blocks = 0;
    int64_t logical = shared_pages;
    for (int32_t l : lens) {
      max_blocks = std::max(max_blocks, (l + kPage - 1) / kPage);
      logical += (l + kPage - 1) / kPage - shared_pages;
    }
    std::vector<int32_t> perm(size_t(logical * 4 / 3 + 1));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int32_t> ids(size_t(c.batch) * max_blocks, -1);
    std::size_t next = size_t(shared_pages);
    for (int32_t b = 0; b < c.batch; ++b)
      for (int32_t p = 0; p < (lens[b] + kPage - 1) / kPage; ++p)
        ids[size_t(b) * max_blocks + p] = perm[p < shared_pages ? size_t(p) : next++];
    weft::BlockTable t;
    t.batch_size = c.batch;
    t.max_blocks = max_blocks;
    t.row_stride = max_blocks;
    // The device pointers are only checked (non-null, aligned), never read on the host: the host
    // arrays stand in for them.
    t.block_ids = {ids.data(), ids.data(), int64_t(ids.size())};
    t.seq_lens = {lens.data(), lens.data(), c.batch};

    const Stats chk1 = time_calls([&] { weft::paged::check_block_table_rows(t, kPage, -1); });
    const Stats chk2 = time_calls([&] {
      weft::paged::check_block_table_rows(t, kPage, -1);
      weft::paged::check_block_table_rows(t, kPage, -1);
    });
    print_row(c.name, "rows check", chk2, chk1, "ref: outer + twin, new: once");
    const int64_t shared_ref =
        weft::decode::reference::shared_prefix_keys(ids.data(), max_blocks, lens.data(), c.batch, kPage);
    const int64_t shared_new = weft::decode::shared_prefix_keys(ids.data(), max_blocks, lens.data(), c.batch, kPage);
    const Stats sk_ref = time_calls([&] {
      g_sink =
          int32_t(weft::decode::reference::shared_prefix_keys(ids.data(), max_blocks, lens.data(), c.batch, kPage));
    });
    const Stats sk_new = time_calls([&] {
      g_sink = int32_t(weft::decode::shared_prefix_keys(ids.data(), max_blocks, lens.data(), c.batch, kPage));
    });
    char note[160];
    std::snprintf(note, sizeof note, "shared keys %lld %s", static_cast<long long>(shared_new),
                  shared_ref == shared_new ? "(same)" : "DIFFERS FROM THE REFERENCE");
    print_row(c.name, "shared keys", sk_ref, sk_new, note);
    // What the kAuto wrapper decides (wrapper_plan.cpp): share_prefixes on, the task capacity of
    // the harness's routed wrapper.
    auto decide = [&](bool ref) {
      const int64_t sh =
          ref ? weft::decode::reference::shared_prefix_keys(ids.data(), max_blocks, lens.data(), c.batch, kPage)
              : weft::decode::shared_prefix_keys(ids.data(), max_blocks, lens.data(), c.batch, kPage);
      weft::decode::RouteFilter filter;
      filter.balanced = sh <= 0;
      filter.max_tasks = 65536;
      return weft::decode::choose_route(model, {lens.data(), c.batch, sh}, filter);
    };
    const int32_t pick = decide(false);
    weft::decode::RouteFilter f0;
    f0.balanced = shared_new <= 0;
    f0.max_tasks = 65536;
    const Stats ch = time_calls([&] {
      g_sink = weft::decode::choose_route(model, {lens.data(), c.batch, shared_new}, f0);
    });
    std::snprintf(note, sizeof note, "pick %s", pick >= 0 ? model.options[pick].name.c_str() : "none");
    print_row(c.name, "choose_route", ch, ch, note);
    // The same step again through a RouteMemo (the wrapper's: consecutive decode steps share the
    // features' grid cell): ref = without the memo, new = with it.
    weft::decode::RouteMemo memo;
    g_sink = weft::decode::choose_route(model, {lens.data(), c.batch, shared_new}, f0, &memo);
    const Stats ch_memo = time_calls([&] {
      g_sink = weft::decode::choose_route(model, {lens.data(), c.batch, shared_new}, f0, &memo);
    });
    print_row(c.name, "choose_route memo", ch, ch_memo,
              weft::decode::choose_route(model, {lens.data(), c.batch, shared_new}, f0, &memo) == pick ? "same pick"
                                                                                                       : "PICK DIFFERS");
    const Stats d_ref = time_calls([&] { g_sink = decide(true); });
    const Stats d_new = time_calls([&] { g_sink = decide(false); });
    print_row(c.name, "decide", d_ref, d_new, decide(true) == pick ? "same pick" : "PICK DIFFERS");
    auto cold = [&](bool ref) {
      return [&, ref] {
        std::memset(evict.data(), ++evict_round, evict.size());
        const auto t0 = Clock::now();
        g_sink = decide(ref);
        return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      };
    };
    print_row(c.name, "decide (cold)", time_calls(cold(true)), time_calls(cold(false)), "after 32 MiB of writes");
    // The fixed balanced route's planning on the same lengths (the wrapper's folded plan).
    const int32_t rows = weft::decode::decode_tile_rows(kHq / kHkv, kHeadDim, false);
    const int32_t fold = weft::decode::decode_head_fold(kHkv, kGrid);
    const BalanceConfig cfg = weft::decode::balance_config(kGrid, kHq, kHkv, rows, fold);
    const WorkspaceLayout layout(weft::decode::plan_bounds(c.batch, kHq, kHkv, kHeadDim, kGrid, rows, fold));
    std::vector<unsigned char> img(layout.metadata_bytes());
    weft::plan::Planner planner;
    BatchShape shape;
    Plan plan;
    WorkspaceLayout::Image image;
    const Stats bal = time_calls([&] {
      weft::decode::batch_shape(lens.data(), c.batch, -1, shape);
      weft::decode::plan_decode(shape, cfg, planner, plan);
      layout.serialize(plan, img.data(), &image);
    });
    print_row(c.name, "balanced plan", bal, bal, "for scale: the fixed route's planning");
    // The wrapper's unsplit balanced plans (decode/direct_plan.h): ref = batch_shape + plan_decode +
    // serialize (the row above), new = DirectPlanner::plan + write into another buffer; warm, and
    // after 32 MiB of other writes (the serving harness plans with cold caches).
    weft::decode::DirectPlanner direct;
    std::vector<unsigned char> img_direct(layout.metadata_bytes());
    WorkspaceLayout::Image image_direct;
    bool took = true;
    auto direct_plan = [&] {
      took = direct.plan(lens.data(), c.batch, cfg);
      if (took) direct.write(layout, img_direct.data(), &image_direct);
    };
    const Stats dir = time_calls(direct_plan);
    const bool same = took && std::memcmp(img.data(), img_direct.data(), img.size()) == 0;
    print_row(c.name, "direct plan", bal, dir,
              !took ? "not a direct plan (split): the general planner" : same ? "same image" : "IMAGE DIFFERS");
    auto cold_plan = [&](bool use_direct) {
      return [&, use_direct] {
        std::memset(evict.data(), ++evict_round, evict.size());
        const auto t0 = Clock::now();
        if (use_direct) {
          direct_plan();
        } else {
          weft::decode::batch_shape(lens.data(), c.batch, -1, shape);
          weft::decode::plan_decode(shape, cfg, planner, plan);
          layout.serialize(plan, img.data(), &image);
        }
        return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      };
    };
    print_row(c.name, "direct plan (cold)", time_calls(cold_plan(false)), time_calls(cold_plan(true)),
              "after 32 MiB of writes");
    // The routed prefix-sharing step (plan(BlockTable) under kAuto with share_prefixes where the
    // pick is prefix_share: the feature, choose_route with the wrapper's memo, the pack plan over
    // the rows view; not the image copy): ref = decode::shared_prefix_keys then PackPlanner::plan
    // (the ids walked twice), new = PackPlanner::prepare then plan(prepared) (once; the hash pass
    // where prepare declines: an unshared table whose key does not hold). Warm and cold steps of
    // an unchanged table (a lazy update), and cold steps after a structural change (reset: a full
    // plan; new builds the forest in prepare and reuses it).
    {
      const weft::plan::PackPlanConfig pc = weft::bench::pack_bench_config(kPage, kGrid, kHkv, kHq / kHkv, kHeadDim);
      std::vector<int32_t> offsets(size_t(c.batch) + 1);
      for (int32_t b = 0; b <= c.batch; ++b)
        offsets[b] = b < c.batch ? b * max_blocks : (c.batch - 1) * max_blocks + max_blocks;
      weft::plan::PackPlanner pk_old, pk_new;
      weft::decode::RouteMemo memo_old, memo_new;
      int64_t last_new = 0;
      int32_t pick_old = -1, pick_new = -1;
      int64_t sh_old = -1, sh_new = -1;
      weft::decode::RouteFilter rf;
      rf.max_tasks = 65536;
      auto step = [&](bool use_new, bool reset) {
        weft::plan::PackPlanner& pk = use_new ? pk_new : pk_old;
        if (reset) pk.reset();
        int64_t sh = -1;
        if (use_new)
          sh = pk.prepare(offsets.data(), ids.data(), lens.data(), c.batch, kPage, last_new > 0);
        const bool prepared = sh >= 0;
        if (sh < 0) sh = weft::decode::shared_prefix_keys(ids.data(), max_blocks, lens.data(), c.batch, kPage);
        if (use_new) last_new = sh;
        weft::decode::RouteFilter f = rf;
        f.balanced = sh <= 0;
        const int32_t pk_pick =
            weft::decode::choose_route(model, {lens.data(), c.batch, sh}, f, use_new ? &memo_new : &memo_old);
        pk.plan(offsets.data(), ids.data(), lens.data(), c.batch, pc, use_new && prepared);
        (use_new ? pick_new : pick_old) = pk_pick;
        (use_new ? sh_new : sh_old) = sh;
      };
      auto timed = [&](bool use_new, bool reset) {
        return [&, use_new, reset] {
          std::memset(evict.data(), ++evict_round, evict.size());
          const auto t0 = Clock::now();
          step(use_new, reset);
          return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        };
      };
      step(false, false);
      step(true, false);
      const weft::plan::WorkPlanLayout wl(weft::bench::pack_bench_bounds(c.batch, kGrid, kHkv, kHeadDim));
      std::vector<unsigned char> im_old(wl.metadata_bytes()), im_new(wl.metadata_bytes());
      wl.serialize(pk_old.current(), im_old.data());
      wl.serialize(pk_new.current(), im_new.data());
      std::snprintf(note, sizeof note, "shared keys %lld/%lld, pick %s, %s", static_cast<long long>(sh_old),
                    static_cast<long long>(sh_new),
                    pick_old == pick_new ? (pick_new >= 0 ? model.options[pick_new].name.c_str() : "none") : "DIFFERS",
                    im_old == im_new ? "same image" : "IMAGE DIFFERS");
      print_row(c.name, "share step", time_calls([&] { step(false, false); }), time_calls([&] { step(true, false); }),
                note);
      print_row(c.name, "share step (cold)", time_calls(timed(false, false)), time_calls(timed(true, false)),
                "after 32 MiB of writes");
      print_row(c.name, "share full (cold)", time_calls(timed(false, true)), time_calls(timed(true, true)),
                "structure changed (reset), after 32 MiB of writes");
    }
#if defined(WEFT_PLAN_PHASES)
    // -DWEFT_PLAN_PHASES=ON: the balanced plan(BlockTable)'s host parts with the phase clock of
    // src/common/plan_phases.h (the wrapper's marks: rows check, shape, plan_decode's four, image
    // size, serialize; not the CUDA calls), p50 of 400 calls, warm and after 32 MiB of writes.
    for (int cold_run = 0; cold_run < 2; ++cold_run) {
      namespace dg = weft::diag;
      std::vector<std::array<double, dg::kPhCount>> ph;
      std::vector<double> total;
      for (int r = 0; r < 400; ++r) {
        if (cold_run) std::memset(evict.data(), ++evict_round, evict.size());
        dg::plan_phases_begin();
        const int64_t t0 = dg::plan_phase_clock().last_ns;
        weft::paged::check_block_table_rows(t, kPage, -1);
        dg::plan_phase_mark(dg::kPhRows);
        weft::decode::batch_shape(lens.data(), c.batch, -1, shape);
        dg::plan_phase_mark(dg::kPhShape);
        weft::decode::plan_decode(shape, cfg, planner, plan);  // marks prepare .. build
        g_sink = weft::plan::launch_records_used(plan).records;
        dg::plan_phase_mark(dg::kPhRecords);
        layout.serialize(plan, img.data(), &image);
        dg::plan_phase_mark(dg::kPhSerialize);
        total.push_back(1e-3 * double(dg::plan_phase_clock().last_ns - t0));
        std::array<double, dg::kPhCount> x{};
        for (int k = 0; k < dg::kPhCount; ++k) x[k] = 1e-3 * double(dg::plan_phase_clock().ns[k]);
        ph.push_back(x);
      }
      auto median_of = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
      };
      std::printf("%-40s %-20s total p50 %.2f us |", c.name.c_str(), cold_run ? "phases (cold)" : "phases (warm)",
                  median_of(total));
      for (int k = 0; k < dg::kPhCount; ++k) {
        std::vector<double> v;
        for (const auto& x : ph) v.push_back(x[k]);
        if (*std::max_element(v.begin(), v.end()) > 0) std::printf(" %s %.2f", dg::plan_phase_name(k), median_of(v));
      }
      std::printf("\n");
    }
#endif
  }
}

}  // namespace weft::plan_bench
