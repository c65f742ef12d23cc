// Bench group "pat": PAT's synthetic prefix trees (issue 21; make_prefix_tree_batch in
// prefix_tree.h) through BatchDecodeWrapper with and without DecodeOptions::share_prefixes.
//   tree shapes B (nodes per level) x level lengths L (keys per node; the last level is each
//   request's private suffix): B in {[1,4,16], [1,8,64]} x L in {[128,256,1024], [512,512,512]},
//   B in {[1,32], [1,256], [4,64]} x L in {[2048,512], [4096,128]}, and B = [1,4,16,64] with L in
//   {[128,256,1024,128], [512,512,512,512]} (the 3-level lists with a 4th, private level): 12
//   trees; heads (32,32), (16,8), (32,8), (64,8), d128, bf16, page 16; fp16 at (32,8); plus a
//   no-sharing control per head config ("pat/nosharing/...": 64 requests of 2560 keys, all pages
//   distinct).
// Rows "pat/<heads>/<dtype>/B<...>/L<...>/{decode,share_narrow,share}": the standard decode,
// share_prefixes with 32-row packs only (prefix_wide_packs off) and share_prefixes (wide packs)
// on the same batch, each captured in a CUDA graph and timed after an L2 flush (median); the
// share row also carries extra.wide_items and speedup_vs_narrow_share. The share row is the
// wrapper's choice with the default options: where the cost model (DecodeOptions::
// prefix_cost_model) predicts the sharing plan no faster than standard decode it runs the standard
// decode (extra.prefix_fallback = 1 with packs > 0; extra.predicted_share_us / predicted_decode_us
// are the model's); such trees add ".../share_forced": the declined sharing plan (the model off).
// share_narrow and the rows below run with the model off (the plan kind they name). Trees whose share plan has
// wide items add ".../share_serial": the same plan's kinds run one kernel after the other
// (DecodeOptions::prefix_wide_overlap off), extra.overlap_speedup = its time / share's; trees
// whose share plan ran its wide items on the Hopper mainloop (extra.wide_sm90 = 1,
// DecodeOptions::prefix_wide_sm90) add ".../share_fa2": the same plan with the FA2 wide tile
// (prefix_wide_sm90 off), extra.sm90_speedup = its time / share's; trees whose share plan cut
// its wide items for one wave of the sm90 tile (extra.wide_grid > 0, DecodeOptions::
// prefix_wide_sm90_wave) add ".../share_grid": the sm90 tile on the decode grid's cut (the wave
// option off), extra.wave_speedup = its time / share's; those trees also add
// ".../share_timeline" and ".../share_serial_timeline": the share / share_serial graph's launches
// timed one by one (harness graph_timeline: node<k> = kernel name, node<k>_alone_us,
// node<k>_prefix_us = the sequence up to it). Bytes =
// UNIQUE KV bytes (every page once, however many requests hold it) + q + out, so the fraction of
// the read ceiling (measured in the same run) is on unique bytes; both rows carry
// extra.unique_fraction_of_ceiling, the share row extra.speedup_vs_decode, items and packs.
// "pat/summary": min_unique_fraction_shared8 (min over trees whose deepest shared level has >= 8
// sharers per node, of the share row: the wrapper's choice, so a tree the cost model sends to
// standard decode counts with that time; min_unique_fraction_shared8_fa2: the same with the share_fa2 row where a tree
// has one; min_unique_fraction_shared8_grid: with the share_grid row where a tree has one),
// nosharing_speedup_vs_decode (min over head configs), and the host plan
// times of 256 requests x 3 levels (the weft-plan-bench "pack/b256/levels3" batch, Llama-3-8B
// heads, this machine's grid): plan_us_256x3 / lazy_replan_us = PackPlanner full plan +
// serialize / lazy update + serialize of the key arrays that moved (PackPlanner::serialize_moved,
// as the wrapper's lazy plan() does) (medians); wrapper_plan_us_256x3 /
// wrapper_lazy_plan_us = BatchDecodeWrapper::plan() calls (full: a fresh wrapper's first plan
// after a warm one on another table, lazy: the length of every request moved by one key),
// including the copy's enqueue and the wait for the previous copy.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "attention/plan/pack_planner.h"
#include "attention/plan/work_plan.h"
#include "decode/launch.h"
#include "harness.h"
#include "prefix_tree.h"
#include "weft/decode.h"
#include "weft/error.h"
#include "weft/paged_kv.h"

namespace {

using weft::bench::DeviceArray;
using weft::bench::LaunchFn;
using weft::bench::PrefixTreeBatch;
using weft::bench::with_graph;

constexpr int32_t kD = 128, kPage = 16;

struct Heads {
  int32_t hq, hkv;
};

std::string join(const std::vector<int32_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "-" : "") + std::to_string(v[i]);
  return s;
}

struct PatOutcome {
  double speedup = 0, unique_fraction = 0;
  double unique_fraction_fa2 = 0;  // the share_fa2 row's where it ran, else unique_fraction
  double unique_fraction_grid = 0;  // the share_grid row's where it ran, else unique_fraction
  bool ok = false;
};

// Times standard decode and share_prefixes on one batch; reports both rows.
PatOutcome run_pat_case(weft::bench::Context& ctx, const std::string& base, const PrefixTreeBatch& t, Heads h,
                        weft::DType dtype, const std::vector<std::pair<std::string, std::string>>& params) {
  PatOutcome res;
  if (!ctx.wants(base + "/decode") && !ctx.wants(base + "/share")) return res;
  const int32_t batch = t.batch();
  const size_t pool = size_t(t.num_pages) * kPage * h.hkv * kD;
  DeviceArray k(pool * 2), v(pool * 2), q(size_t(batch) * h.hq * kD * 2), out(size_t(batch) * h.hq * kD * 2);
  weft::bench::fill_random(k.get(), pool, dtype, 1);
  weft::bench::fill_random(v.get(), pool, dtype, 2);
  weft::bench::fill_random(q.get(), size_t(batch) * h.hq * kD, dtype, 3);
  DeviceArray d_indptr(t.indptr.size() * 4), d_indices(t.indices.size() * 4), d_last(t.last_page_len.size() * 4);
  WEFT_BENCH_CUDA(cudaMemcpy(d_indptr.get(), t.indptr.data(), t.indptr.size() * 4, cudaMemcpyHostToDevice));
  WEFT_BENCH_CUDA(cudaMemcpy(d_indices.get(), t.indices.data(), t.indices.size() * 4, cudaMemcpyHostToDevice));
  WEFT_BENCH_CUDA(
      cudaMemcpy(d_last.get(), t.last_page_len.data(), t.last_page_len.size() * 4, cudaMemcpyHostToDevice));
  weft::PageTable table;
  table.batch_size = batch;
  table.indptr = {d_indptr.as<int32_t>(), t.indptr.data(), batch + 1};
  table.indices = {d_indices.as<int32_t>(), t.indices.data(), int64_t(t.indices.size())};
  table.last_page_len = {d_last.as<int32_t>(), t.last_page_len.data(), batch};
  weft::PagedKVCache cache;
  cache.layout = weft::KVLayout::kNHD;
  cache.k_pages = weft::TensorView(k.get(), dtype, {t.num_pages, kPage, h.hkv, kD});
  cache.v_pages = weft::TensorView(v.get(), dtype, {t.num_pages, kPage, h.hkv, kD});
  const weft::TensorView tq(q.get(), dtype, {batch, h.hq, kD});
  const weft::TensorView tout(out.get(), dtype, {batch, h.hq, kD});
  const double unique_kv = double(t.unique_keys) * h.hkv * kD * 2 /*K,V*/ * 2 /*16-bit*/;
  int64_t keys = 0;
  for (int32_t l : t.kv_len) keys += l;
  double decode_ms = 0, narrow_ms = 0, share_ms = 0;
  int32_t share_wide_items = 0;
  bool share_sm90 = false, share_wave = false, share_cost_fallback = false;
  // Modes: 0 standard decode, 1 share_prefixes with 32-row packs only (prefix_wide_packs off: the
  // plan before wide packs), 2 share_prefixes (wide packs where the tile selector picks them,
  // overlapped with the decode kernel: DecodeOptions::prefix_wide_overlap), 3 (only when 2 has
  // wide items) the same with the two kernels one after the other, 4 (only when 2 ran its wide
  // items on the Hopper mainloop) mode 2 with the FA2 wide tile, 5 (only when 2 cut its wide items
  // for one wave of the sm90 tile) mode 2 with the decode grid's cut, 6 (only when 2 fell back by
  // the cost model with packs) mode 2 with the cost model off: the sharing plan it declined. Mode 2
  // is the wrapper's choice (DecodeOptions::prefix_cost_model on, the default); the others keep the
  // plan kind they measure (the model off).
  for (int mode : {0, 1, 2, 6, 3, 4, 5}) {
    if (mode == 6 && !share_cost_fallback) continue;
    if (mode == 3 && share_wide_items == 0) break;
    if (mode == 4 && !share_sm90) continue;
    if (mode == 5 && !share_wave) break;
    const bool share = mode > 0;
    weft::bench::Result r;
    r.name = base + (mode == 6   ? "/share_forced"
                     : mode == 5 ? "/share_grid"
                     : mode == 4 ? "/share_fa2"
                     : mode == 3 ? "/share_serial"
                     : mode == 2 ? "/share"
                     : mode == 1 ? "/share_narrow"
                                 : "/decode");
    r.params = params;
    r.params.push_back({"batch", std::to_string(batch)});
    if (mode >= 2 && ctx.pat_wide_min_rows() > 0) r.params.push_back({"wide_min_rows", std::to_string(ctx.pat_wide_min_rows())});
    if (mode >= 2 && ctx.pat_wide_min_keys() > 0) r.params.push_back({"wide_min_keys", std::to_string(ctx.pat_wide_min_keys())});
    r.bytes = unique_kv + 2.0 * batch * h.hq * kD * 2;
    r.flops = 4.0 * double(keys) * h.hq * kD;
    r.ceiling = "read";
    try {
      weft::DecodeOptions opt;
      opt.share_prefixes = share;
      opt.prefix_wide_packs = mode >= 2;
      opt.prefix_wide_min_rows = ctx.pat_wide_min_rows();  // --pat-wide-min-rows (0: the default)
      opt.prefix_wide_min_keys = ctx.pat_wide_min_keys();  // --pat-wide-min-keys (0: the default)
      opt.prefix_wide_overlap = mode != 3;
      opt.prefix_wide_sm90 = mode != 4;
      opt.prefix_wide_sm90_wave = mode != 5;
      opt.prefix_cost_model = mode == 2;
      const size_t ws_bytes = weft::BatchDecodeWrapper::workspace_size(batch, h.hq, h.hkv, kD, opt);
      DeviceArray ws(ws_bytes);
      weft::BatchDecodeWrapper w(batch, h.hq, h.hkv, kD, opt);
      cudaStream_t s = ctx.stream();
      w.plan(table, h.hq, h.hkv, kD, kPage, dtype, weft::KVLayout::kNHD, {}, ws.get(), ws_bytes, s);
      WEFT_BENCH_CUDA(cudaStreamSynchronize(s));
      with_graph(ctx, [&](cudaStream_t st) { w.run(tq, cache, table, tout, nullptr, st); },
                 [&](const LaunchFn& launch) {
                   ctx.warm_up_once(launch);
                   r.ms = ctx.time_ms(launch);
                 });
      r.extra = {{"items", double(w.plan_info().num_items)},
                 {"packs", double(w.plan_info().num_packs)},
                 {"prefix_fallback", double(w.plan_info().prefix_fallback)},  // DecodeOptions::prefix_fallback
                 {"wide_items", double(w.plan_info().num_wide_items)},        // DecodeOptions::prefix_wide_packs
                 {"wide_split", double(w.plan_info().wide_split)},            // DecodeOptions::prefix_wide_overlap
                 {"wide_sm90", double(w.plan_info().wide_sm90)},              // DecodeOptions::prefix_wide_sm90
                 {"wide_grid", double(w.plan_info().wide_grid)}};             // DecodeOptions::prefix_wide_sm90_wave
      const double frac =
          ctx.ceilings().read_gbps > 0 ? r.bytes / (r.ms * 1e-3) / 1e9 / ctx.ceilings().read_gbps : 0.0;
      r.extra.push_back({"unique_fraction_of_ceiling", frac});
      if (!share) decode_ms = r.ms;
      if (mode == 1) narrow_ms = r.ms;
      if (share && decode_ms > 0) r.extra.push_back({"speedup_vs_decode", decode_ms / r.ms});
      if (mode == 2 && narrow_ms > 0) r.extra.push_back({"speedup_vs_narrow_share", narrow_ms / r.ms});
      if (mode == 2 && decode_ms > 0) res = {decode_ms / r.ms, frac, frac, frac, true};
      if (mode == 2) share_ms = r.ms, share_wide_items = w.plan_info().num_wide_items;
      if (mode == 2) share_cost_fallback = w.plan_info().prefix_fallback && w.plan_info().num_packs > 0;
      if (mode == 2) {  // DecodeOptions::prefix_cost_model's predictions (0 where there was no pack)
        r.extra.push_back({"predicted_share_us", double(w.plan_info().predicted_share_us)});
        r.extra.push_back({"predicted_decode_us", double(w.plan_info().predicted_decode_us)});
      }
      if (mode == 2) share_sm90 = w.plan_info().wide_sm90;
      if (mode == 2) share_wave = w.plan_info().wide_grid > 0;
      if (mode == 2) res.unique_fraction_grid = frac;
      if (mode == 5 && share_ms > 0) r.extra.push_back({"wave_speedup", r.ms / share_ms});  // grid cut / wave cut
      if (mode == 5) res.unique_fraction_grid = frac;
      if (mode == 4 && share_ms > 0) r.extra.push_back({"sm90_speedup", r.ms / share_ms});  // FA2 tile / sm90
      if (mode == 4) res.unique_fraction_fa2 = frac;
      if (mode == 3 && share_ms > 0) r.extra.push_back({"overlap_speedup", r.ms / share_ms});  // serial / overlapped
      ctx.report(r);
      // The launches of plans cut for one wave of the sm90 tile (share and share_serial), one by
      // one: ".../share_timeline" and ".../share_serial_timeline" (graph_timeline: per node its
      // name, alone_us and the sequence up to it, prefix_us; ms = the whole sequence).
      if ((mode == 2 || mode == 3) && w.plan_info().wide_grid > 0) {
        weft::bench::Result tl;
        tl.name = base + (mode == 2 ? "/share_timeline" : "/share_serial_timeline");
        tl.params = r.params;
        const std::vector<weft::bench::GraphNodeTime> nodes = weft::bench::graph_timeline(
            ctx, [&](cudaStream_t st) { w.run(tq, cache, table, tout, nullptr, st); });
        for (size_t k = 0; k < nodes.size(); ++k) {
          tl.params.push_back({"node" + std::to_string(k), nodes[k].name.substr(0, 96)});
          tl.extra.push_back({"node" + std::to_string(k) + "_alone_us", nodes[k].alone_ms * 1e3});
          tl.extra.push_back({"node" + std::to_string(k) + "_prefix_us", nodes[k].prefix_ms * 1e3});
        }
        tl.ms = nodes.empty() ? 0 : nodes.back().prefix_ms;
        tl.bytes = r.bytes;
        tl.ceiling = "read";
        ctx.report(tl);
      }
    } catch (const std::exception& e) {
      ctx.report_error(r, e.what());
    }
  }
  return res;
}

template <class F>
double median_us(F&& f, int calls) {
  std::vector<double> v;
  for (int i = 0; i < calls; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    v.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Host plan times of the 256-request x 3-level tree (see the header comment).
std::vector<std::pair<std::string, double>> plan_times(weft::bench::Context& ctx) {
  PrefixTreeBatch t = weft::bench::make_prefix_tree_batch({1, 4, 16, 256}, {2048, 512, 256, 123}, kPage);
  const int32_t batch = t.batch(), hq = 32, hkv = 8;
  weft::DecodeOptions opt;
  opt.share_prefixes = true;
  const size_t ws_bytes = weft::BatchDecodeWrapper::workspace_size(batch, hq, hkv, kD, opt);
  DeviceArray ws(ws_bytes);
  weft::BatchDecodeWrapper w(batch, hq, hkv, kD, opt);
  // The planner alone, with the wrapper's grid.
  const weft::plan::PackPlanConfig pc = weft::bench::pack_bench_config(kPage, w.num_ctas(), hkv, hq / hkv, kD);
  const weft::plan::WorkPlanLayout layout(weft::bench::pack_bench_bounds(batch, w.num_ctas(), hkv, kD));
  std::vector<unsigned char> image(layout.metadata_bytes());
  weft::plan::PackPlanner planner;
  const double full_us = median_us(
      [&] {
        planner.reset();
        planner.plan(t.indptr.data(), t.indices.data(), t.kv_len.data(), batch, pc);
        layout.serialize(planner.current(), image.data());
      },
      201);
  int delta = 1, lazy = 0, calls = 0;
  const double lazy_us = median_us(
      [&] {
        for (auto& l : t.kv_len) l += delta;
        delta = -delta;
        ++calls;
        lazy += planner.plan(t.indptr.data(), t.indices.data(), t.kv_len.data(), batch, pc) ==
                weft::plan::PackPlanner::Update::kLazy;
        planner.serialize_moved(layout, image.data());  // as the wrapper (image: the previous version)
      },
      2001);
  // The wrapper's plan(): full (alternating with the same tree on other page ids, so the
  // structural key never matches) and lazy (lengths +-1 via last_page_len).
  const PrefixTreeBatch other = weft::bench::make_prefix_tree_batch({1, 4, 16, 256}, {2048, 512, 256, 123}, kPage, 8);
  std::vector<int32_t> last = t.last_page_len;
  weft::PageTable table;
  table.batch_size = batch;
  DeviceArray d_indptr(t.indptr.size() * 4), d_indices(t.indices.size() * 4), d_last(last.size() * 4);
  table.indptr = {d_indptr.as<int32_t>(), t.indptr.data(), batch + 1};
  table.indices = {d_indices.as<int32_t>(), t.indices.data(), int64_t(t.indices.size())};
  table.last_page_len = {d_last.as<int32_t>(), last.data(), batch};
  cudaStream_t s = ctx.stream();
  int which = 0, wfull = 0;
  const double wfull_us = median_us(
      [&] {
        table.indices.host = (which ^= 1) ? other.indices.data() : t.indices.data();
        w.plan(table, hq, hkv, kD, kPage, weft::DType::kBFloat16, weft::KVLayout::kNHD, {}, ws.get(), ws_bytes, s);
        wfull += !w.plan_info().lazy_update;
      },
      101);
  int wlazy = 0, wcalls = 0;
  const double wlazy_us = median_us(
      [&] {
        for (auto& l : last) l += delta;
        delta = -delta;
        w.plan(table, hq, hkv, kD, kPage, weft::DType::kBFloat16, weft::KVLayout::kNHD, {}, ws.get(), ws_bytes, s);
        wlazy += w.plan_info().lazy_update;
        ++wcalls;
      },
      1001);
  WEFT_BENCH_CUDA(cudaStreamSynchronize(s));
  return {{"plan_us_256x3", full_us},
          {"lazy_replan_us", lazy_us},
          {"lazy_fraction", double(lazy) / calls},
          {"wrapper_plan_us_256x3", wfull_us},
          {"wrapper_full_fraction", double(wfull) / 101},
          {"wrapper_lazy_plan_us", wlazy_us},
          {"wrapper_lazy_fraction", double(wlazy) / wcalls},
          {"plan_items_256x3", double(planner.current().num_items())}};
}

}  // namespace

WEFT_BENCH_GROUP(pat) {
  const Heads heads[] = {{32, 32}, {16, 8}, {32, 8}, {64, 8}};
  const std::vector<weft::bench::PatTree> trees = weft::bench::pat_trees();
  double min_shared8 = std::numeric_limits<double>::infinity(), min_nosharing = std::numeric_limits<double>::infinity();
  double min_shared8_fa2 = std::numeric_limits<double>::infinity(), min_shared8_grid = min_shared8_fa2;
  for (const Heads& h : heads)
    for (weft::DType dt : {weft::DType::kBFloat16, weft::DType::kFloat16}) {
      if (dt == weft::DType::kFloat16 && !(h.hq == 32 && h.hkv == 8)) continue;  // fp16 at one head config
      const std::string hs = std::to_string(h.hq) + "x" + std::to_string(h.hkv);
      const std::string dn = weft::dtype_name(dt);
      for (const weft::bench::PatTree& tr : trees) {
        const PrefixTreeBatch t = weft::bench::make_prefix_tree_batch(tr.fan, tr.keys, kPage);
        const size_t n = tr.fan.size();
        const int32_t sharers = tr.fan[n - 1] / tr.fan[n - 2];  // per node of the deepest shared level
        const std::string base = "pat/" + hs + "/" + dn + "/B" + join(tr.fan) + "/L" + join(tr.keys);
        const PatOutcome o = run_pat_case(ctx, base, t, h, dt,
                                          {{"heads", hs}, {"dtype", dn}, {"B", join(tr.fan)}, {"L", join(tr.keys)},
                                           {"sharers", std::to_string(sharers)}});
        if (o.ok && sharers >= 8) min_shared8 = std::min(min_shared8, o.unique_fraction);
        if (o.ok && sharers >= 8) min_shared8_fa2 = std::min(min_shared8_fa2, o.unique_fraction_fa2);
        if (o.ok && sharers >= 8) min_shared8_grid = std::min(min_shared8_grid, o.unique_fraction_grid);
      }
      // No sharing: 64 requests of 2048 + 512 keys on distinct pages (a one-level "tree" of 64 leaves).
      const PrefixTreeBatch t = weft::bench::make_prefix_tree_batch({64}, {2560}, kPage);
      const PatOutcome o = run_pat_case(ctx, "pat/" + hs + "/" + dn + "/nosharing/b64/kv2560", t, h, dt,
                                        {{"heads", hs}, {"dtype", dn}, {"B", "64"}, {"L", "2560"}, {"sharers", "1"}});
      if (o.ok) min_nosharing = std::min(min_nosharing, o.speedup);
    }
  if (!ctx.wants("pat/summary")) return;
  weft::bench::Result r;
  r.name = "pat/summary";
  try {
    r.extra = plan_times(ctx);
    r.ms = r.extra[0].second * 1e-3;  // the full plan's host time
    if (std::isfinite(min_shared8)) r.extra.push_back({"min_unique_fraction_shared8", min_shared8});
    if (std::isfinite(min_shared8_fa2)) r.extra.push_back({"min_unique_fraction_shared8_fa2", min_shared8_fa2});
    if (std::isfinite(min_shared8_grid)) r.extra.push_back({"min_unique_fraction_shared8_grid", min_shared8_grid});
    if (std::isfinite(min_nosharing)) r.extra.push_back({"nosharing_speedup_vs_decode", min_nosharing});
    // The wide-pack kernel runs on the decode grid: its residency per SM against the grid's.
    r.extra.push_back({"wide_ctas_per_sm", double(weft::decode::wide_pack_ctas_per_sm())});
    r.extra.push_back({"decode_grid_d128", double(weft::BatchDecodeWrapper(1, 8, 8, kD).num_ctas())});
    ctx.report(r);
  } catch (const std::exception& e) {
    ctx.report_error(r, e.what());
  }
}
