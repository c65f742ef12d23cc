// Bench group "decode": BatchDecodeWrapper::run, bf16, page 16, head_dim 128, NHD.
// Shapes: Llama-3-8B (32 qo / 8 kv heads) and Llama-2-7B (32 / 32), batch x kv_len where the KV
// cache fits in ~60 GiB, plus a ragged bimodal batch (64 requests, half 512 and half 32K keys).
// Bytes = KV bytes read (each key/value once) + q read + out written; ceiling "read".
// Timing: run() is captured once in a CUDA graph and the graph is timed (what a serving engine
// replays; it also keeps run()'s host-side validation out of the GPU timeline). plan() is timed
// on the host (including the async copy's enqueue): extra "plan_us" is the median of warm calls on
// an idle stream, "plan_b2b_us" back to back (see run_decode_case).
// Pages come from a random permutation of the pool (a fragmented cache); "decode/seqpages/..."
// rows keep pool order. Each row is the median over 3 fresh allocations of the pools (see
// run_decode_case), with the min / max in extras; tuning rows use one allocation.
// Variants "decode/w<W>s<S>/..." rebuild the wrapper with W warps per CTA and S per-warp stages;
// "decode/floor/..." time a plain read kernel over the same KV bytes (the reachable top for one
// kernel of that size). "decode/steady/..." time 8 runs back to back in one graph on rotated
// copies of the pools (the steady state of a serving step; CaseOptions::copies).
// Path variants "decode/path/{tc,cc}/<model>/b<B>/kv<KV>" force each kernel path (GQA groups
// 1, 2, 4, 8) to set the kAuto heuristic (choose_decode_path); the plain rows use kAuto.
// "decode/gqa/..." rows: GQA groups 16, 24, 32 and 64 (several 16-row tiles per KV head).
// "decode/fp8/{bf16,e4m3,e5m2}/..." rows: fp8 KV pools (per-head scales; q and out bf16) next to
// the bf16 row of the same shape measured just before in the same call; bytes count the pools'
// own element size (fp8: 1 byte), and the fp8 rows carry extra.speedup_vs_bf16.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "decode/trace.h"
#include "harness.h"
#include "weft/decode.h"
#include "weft/error.h"
#include "weft/paged_kv.h"

namespace {

using weft::bench::DeviceArray;
using weft::bench::LaunchFn;
using weft::bench::with_graph;

constexpr int64_t kHeadDim = 128, kPageSize = 16;
constexpr int kPlanCalls = 21;  // warm plan() calls per timing of plan_us (median)
constexpr double kMaxKVBytes = 60.0 * (1ull << 30);
constexpr double kMaxSteadyBytes = 40.0 * (1ull << 30);  // all pool copies of one steady-state row

// "<prefix><model>/b<B>/kv<KV>": the name of a uniform-length row.
std::string row_name(const std::string& prefix, const char* model, int32_t batch, int32_t kv) {
  return prefix + model + "/b" + std::to_string(batch) + "/kv" + std::to_string(kv);
}

// Allocation i of a row (and of the floor/spacer rows) is preceded by a spacer of this many
// bytes, so that fresh allocations land in different places (run_decode_case).
size_t spacer_bytes(int i) { return size_t(i) * ((size_t(1) << 30) + (size_t(6) << 20)); }

struct Model {
  const char* name;
  int32_t hq, hkv;
  int32_t d = kHeadDim;  // head_dim
};

// Bytes of K and V (bf16, or `elem_bytes` per element: fp8 1) that `keys` keys of model m take.
double kv_bytes_of(const Model& m, double keys, int elem_bytes = 2) { return keys * m.hkv * m.d * 2 /*K,V*/ * elem_bytes; }

struct CaseOptions {
  weft::DecodePath path = weft::DecodePath::kAuto;
  // Warps per CTA and per-warp stages (weft::DecodeOptions; 0: the library's tuned default).
  int32_t warps = 0, stages = 0;
  weft::KVLayout layout = weft::KVLayout::kNHD;
  int allocations = 3;        // fresh pool allocations; the row reports the median
  bool shuffled_pages = true; // pages in a random permutation of the pool (fragmented cache)
  // Where the V pool lies relative to the K pool: two cudaMallocs (kSeparate; back to back in
  // a fresh address range, so V = K + pool bytes, a power of two for these shapes), one buffer
  // with each page's K then V (kInterleaved, the [page][2][...] cache of FlashInfer/vLLM-style
  // engines), or one buffer with V 3 MiB past the end of K (kOffset: not a power of two).
  enum class KVPlacement { kSeparate, kInterleaved, kOffset } placement = KVPlacement::kSeparate;
  // Steady-state rows ("decode/steady/..."): > 0 = this many fresh copies of the K/V pools (same
  // page table and plan), and the row times kSteadyRuns runs back to back in one graph, run i on
  // copy i % copies, after one L2 flush; ms = graph time / runs. See steady_copies().
  int copies = 0;
  // Pool element type: bf16, or fp8 e4m3 / e5m2 (scales 1/64 per KV head; q and out stay bf16).
  weft::DType kv_dtype = weft::DType::kBFloat16;
  double bf16_ms = 0;  // > 0: the bf16 row of the same shape, for extra.speedup_vs_bf16
};

// Runs per graph of a steady-state row: the graph's launch and the first run's cold start are
// shared by 8 runs (they are still in the time, 1/8 each).
constexpr int kSteadyRuns = 8;

// Pool copies for a steady-state row of `kv_bytes`: enough that between two reads of one copy the
// other copies move at least 2x the L2 capacity through it (nothing of the copy is left in L2
// when it is read again: every run reads DRAM, as the single-run rows do after their flush).
int steady_copies(double kv_bytes, double l2_bytes) {
  const int others = static_cast<int>(std::ceil(2.0 * l2_bytes / kv_bytes));
  return std::max(2, std::min(kSteadyRuns, others + 1));
}

// Diagnostic build only (-DWEFT_DECODE_TRACE=ON, decode/trace.h): launch `launch` `runs` times,
// each after an L2 flush as in the timed runs, read the per-CTA timeline of each launch and add
// the medians over launches of its summary to r.extra (all in ns; "trace_*"):
//   span: first CTA entry to last CTA exit; start_spread: last entry - first entry;
//   <event>_med / _max over CTAs with items: time from the CTA's entry to the event;
//   last_*: the CTA that exits last (its entry offset, its events, whether it merged);
//   merge_med: entry of the merge to exit, over CTAs that merged a tile.
void add_trace_extras(weft::bench::Context& ctx, const LaunchFn& launch, int ctas,
                      weft::bench::Result& r, const std::string& prefix = "trace_", int runs = 9) {
  namespace wd = weft::decode;
  if (!wd::trace_compiled()) return;
  static const char* kNames[wd::kTraceEvents] = {"entry",      "record",   "indptr", "page0",  "issued",
                                                 "item_ready", "first_tile", "loop_end", "states", "item_stored",
                                                 "merge_decided", "exit"};
  std::vector<std::vector<std::pair<std::string, double>>> per_run;
  for (int run = 0; run < runs; ++run) {
    ctx.flush_l2(ctx.stream());
    launch(ctx.stream());
    WEFT_BENCH_CUDA(cudaStreamSynchronize(ctx.stream()));
    const std::vector<wd::TraceRecord> t = wd::trace_read(ctas);
    double g_ns = 0, cycles = 0;
    uint64_t first_entry = ~uint64_t{0}, last_entry = 0, last_exit = 0;
    int last = -1;
    for (size_t c = 0; c < t.size(); ++c) {
      first_entry = std::min(first_entry, t[c].global_entry_ns);
      last_entry = std::max(last_entry, t[c].global_entry_ns);
      if (t[c].global_exit_ns >= last_exit) last_exit = t[c].global_exit_ns, last = int(c);
      g_ns += double(t[c].global_exit_ns - t[c].global_entry_ns);
      cycles += double(t[c].clock[wd::kTraceExit] - t[c].clock[wd::kTraceEntry]);
    }
    if (last < 0 || cycles <= 0) continue;
    const double ns_per_cycle = g_ns / cycles;  // globaltimer has coarse steps; the ratio of sums is not
    auto since_entry = [&](const wd::TraceRecord& x, int ev) {
      return double(x.clock[ev] - x.clock[wd::kTraceEntry]) * ns_per_cycle;
    };
    std::vector<std::pair<std::string, double>> v = {
        {prefix + "span", double(last_exit - first_entry)}, {prefix + "start_spread", double(last_entry - first_entry)},
        {prefix + "ns_per_cycle", ns_per_cycle}};
    for (int ev = 1; ev < wd::kTraceEvents; ++ev) {
      std::vector<double> d;
      for (const auto& x : t)
        if (x.items > 0) d.push_back(since_entry(x, ev));
      if (d.empty()) continue;
      std::sort(d.begin(), d.end());
      v.push_back({prefix + kNames[ev] + "_med", d[d.size() / 2]});
      v.push_back({prefix + kNames[ev] + "_max", d.back()});
    }
    std::vector<double> merge;
    for (const auto& x : t)
      if (x.merged) merge.push_back(double(x.clock[wd::kTraceExit] - x.clock[wd::kTraceMergeDecided]) * ns_per_cycle);
    std::sort(merge.begin(), merge.end());
    v.push_back({prefix + "merges", double(merge.size())});
    if (!merge.empty()) v.push_back({prefix + "merge_med", merge[merge.size() / 2]});
    const wd::TraceRecord& lx = t[size_t(last)];
    v.push_back({prefix + "last_entry_offset", double(lx.global_entry_ns - first_entry)});
    v.push_back({prefix + "last_merged", double(lx.merged)});
    for (int ev = 1; ev < wd::kTraceEvents; ++ev) v.push_back({prefix + "last_" + kNames[ev], since_entry(lx, ev)});
    per_run.push_back(std::move(v));
    // WEFT_TRACE_DUMP=<file>: the last launch's raw records, one CSV line per CTA (times in ns
    // from the first entry; events relative to the CTA's own entry).
    const char* dump = std::getenv("WEFT_TRACE_DUMP");
    if (dump != nullptr && run == runs - 1) {
      if (FILE* f = std::fopen(dump, "a")) {
        for (size_t c = 0; c < t.size(); ++c) {
          std::fprintf(f, "%s,%s,%zu,%d,%d,%d,%.0f", r.name.c_str(), prefix.c_str(), c, t[c].smid, t[c].items,
                       t[c].merged, double(t[c].global_entry_ns - first_entry));
          for (int ev = 1; ev < wd::kTraceEvents; ++ev) std::fprintf(f, ",%.0f", since_entry(t[c], ev));
          std::fprintf(f, "\n");
        }
        std::fclose(f);
      }
    }
  }
  if (per_run.empty()) return;
  std::string line = "  " + prefix + " (median of " + std::to_string(per_run.size()) + " launches, ns):";
  for (size_t k = 0; k < per_run[0].size(); ++k) {
    std::vector<double> vals;
    for (const auto& v : per_run)
      if (k < v.size() && v[k].first == per_run[0][k].first) vals.push_back(v[k].second);
    std::sort(vals.begin(), vals.end());
    const double med = vals[vals.size() / 2];
    r.extra.push_back({per_run[0][k].first, med});
    char buf[96];
    std::snprintf(buf, sizeof buf, " %s=%.0f", per_run[0][k].first.c_str() + prefix.size(), med);
    line += buf;
  }
  std::printf("%s\n", line.c_str());
}

// Returns the row's ms (0 when it was filtered out or failed).
double run_decode_case(weft::bench::Context& ctx, const std::string& name, const Model& m,
                       const std::vector<int32_t>& lens, const CaseOptions& opt = {}) {
  const weft::DecodePath path = opt.path;
  const weft::KVLayout layout = opt.layout;
  const bool steady = opt.copies > 0;
  const int copies = steady ? opt.copies : 1;
  const int allocations = steady ? 1 : opt.allocations;  // a steady row's copies are its allocations
  weft::bench::Result r;
  r.name = name;
  if (!ctx.wants(r.name)) return 0;
  const int64_t batch = lens.size();
  const bool fp8 = opt.kv_dtype != weft::DType::kBFloat16;
  const int elem = fp8 ? 1 : 2;
  int64_t total_kv = 0;
  for (int32_t l : lens) total_kv += l;
  const double kv_bytes = kv_bytes_of(m, double(total_kv), elem);
  r.params = {{"kv_dtype", weft::dtype_name(opt.kv_dtype)}, {"model", m.name}, {"batch", std::to_string(batch)}, {"total_kv", std::to_string(total_kv)},
              {"qo_heads", std::to_string(m.hq)}, {"kv_heads", std::to_string(m.hkv)},
              {"head_dim", std::to_string(m.d)}, {"page_size", std::to_string(kPageSize)},
              {"dtype", "bf16"}, {"path", weft::decode_path_name(path)},
              {"layout", layout == weft::KVLayout::kNHD ? "NHD" : "HND"},
              {"pages", opt.shuffled_pages ? "shuffled" : "sequential"},
              {"kv_placement", opt.placement == CaseOptions::KVPlacement::kSeparate      ? "separate"
                               : opt.placement == CaseOptions::KVPlacement::kInterleaved ? "interleaved"
                                                                                       : "offset"}};
  r.bytes = kv_bytes + 2.0 * batch * m.hq * m.d * 2;
  r.flops = 4.0 * double(total_kv) * m.hq * m.d;
  r.ceiling = "read";
  const bool marginal = name.find("/marginal/") != std::string::npos;
  if (!weft::decode_path_available(path)) {
    ctx.report_error(r, std::string("path ") + weft::decode_path_name(path) + " not compiled");
    return 0;
  }
  try {
    std::vector<int32_t> indptr{0}, last;
    for (int32_t l : lens) {
      const int32_t pages = (l + kPageSize - 1) / kPageSize;
      indptr.push_back(indptr.back() + pages);
      last.push_back(l == 0 ? 0 : l - (pages - 1) * int32_t(kPageSize));
    }
    const int64_t num_pages = indptr.back();
    std::vector<int32_t> indices(num_pages);
    std::iota(indices.begin(), indices.end(), 0);
    if (opt.shuffled_pages) std::shuffle(indices.begin(), indices.end(), std::mt19937_64(7));
    const size_t pool_elems = size_t(num_pages) * kPageSize * m.hkv * m.d;
    std::vector<double> one_ms_all, plan_us, plan_b2b_us;
    int plan_b2b_busy = 0;
    double marginal_ms = 0, steady_ms = 0;
    weft::DecodePlanInfo info;
    // One measurement per allocation of the pools. Identical cases were measured 0.82 and 0.94
    // of the read ceiling in one process (same shape, same page order, same pool offsets): the
    // placement of a fresh allocation matters, so a row reports the median over `allocations`
    // fresh ones (a spacer allocation before each moves the pools) and the spread in extras.
    for (int rep = 0; rep < allocations; ++rep) {
      DeviceArray spacer(spacer_bytes(rep));
      // K and V pools: two allocations (kSeparate; v_pool holds V), or both in k_pool.
      using KVP = CaseOptions::KVPlacement;
      const bool separate = opt.placement == KVP::kSeparate;
      const size_t page_elems = size_t(kPageSize) * m.hkv * m.d;
      const size_t pool_bytes = pool_elems * elem, page_bytes = page_elems * elem;
      const size_t kv_gap = opt.placement == KVP::kOffset ? (size_t(3) << 20) : 0;
      DeviceArray q(size_t(batch) * m.hq * m.d * 2), out(size_t(batch) * m.hq * m.d * 2),
          d_indptr(indptr.size() * 4), d_indices(indices.size() * 4), d_last(last.size() * 4);
      weft::bench::fill_random(q.get(), size_t(batch) * m.hq * m.d, weft::DType::kBFloat16, 3);
      WEFT_BENCH_CUDA(cudaMemcpy(d_indptr.get(), indptr.data(), indptr.size() * 4, cudaMemcpyHostToDevice));
      WEFT_BENCH_CUDA(cudaMemcpy(d_indices.get(), indices.data(), indices.size() * 4, cudaMemcpyHostToDevice));
      WEFT_BENCH_CUDA(cudaMemcpy(d_last.get(), last.data(), last.size() * 4, cudaMemcpyHostToDevice));

      weft::PageTable table;
      table.batch_size = static_cast<int32_t>(batch);
      table.indptr = {d_indptr.as<int32_t>(), indptr.data(), batch + 1};
      table.indices = {d_indices.as<int32_t>(), indices.data(), num_pages};
      table.last_page_len = {d_last.as<int32_t>(), last.data(), batch};
      const bool nhd = layout == weft::KVLayout::kNHD;
      const int64_t dim1 = nhd ? kPageSize : m.hkv, dim2 = nhd ? m.hkv : kPageSize;
      const int64_t page_stride = int64_t(page_elems) * (opt.placement == KVP::kInterleaved ? 2 : 1);
      const std::initializer_list<int64_t> strides = {page_stride, dim2 * m.d, m.d, 1};
      // One set of pools (copies = 1) or, for a steady-state row, `copies` fresh sets with their
      // own random contents.
      std::vector<DeviceArray> k_pools, v_pools;
      std::vector<weft::PagedKVCache> caches;
      const std::vector<float> host_scales(size_t(m.hkv), 1.f / 64);
      DeviceArray scales(size_t(m.hkv) * 4);
      WEFT_BENCH_CUDA(cudaMemcpy(scales.get(), host_scales.data(), size_t(m.hkv) * 4, cudaMemcpyHostToDevice));
      for (int c = 0; c < copies; ++c) {
        k_pools.emplace_back(separate ? pool_bytes : 2 * pool_bytes + kv_gap);
        v_pools.emplace_back(separate ? pool_bytes : 0);
        char* const k_base = static_cast<char*>(k_pools.back().get());
        void* const v_base = separate ? v_pools.back().get()
                             : opt.placement == KVP::kInterleaved ? k_base + page_bytes
                                                                  : k_base + pool_bytes + kv_gap;
        weft::bench::fill_random(k_base, k_pools.back().bytes() / elem, opt.kv_dtype, 1 + 10 * c);
        if (separate) weft::bench::fill_random(v_base, pool_elems, opt.kv_dtype, 2 + 10 * c);
        weft::PagedKVCache cache;
        cache.layout = layout;
        cache.k_pages = weft::TensorView(k_base, opt.kv_dtype, {num_pages, dim1, dim2, m.d}, strides);
        cache.v_pages = weft::TensorView(v_base, opt.kv_dtype, {num_pages, dim1, dim2, m.d}, strides);
        if (fp8) {
          cache.k_scale = {scales.as<float>(), host_scales.data(), m.hkv};
          cache.v_scale = {scales.as<float>(), host_scales.data(), m.hkv};
        }
        caches.push_back(cache);
      }
      weft::TensorView tq(q.get(), weft::DType::kBFloat16, {batch, m.hq, m.d});
      weft::TensorView tout(out.get(), weft::DType::kBFloat16, {batch, m.hq, m.d});

      weft::DecodeOptions dopt;
      dopt.path = path;
      dopt.warps_per_cta = opt.warps;
      dopt.pipeline_stages = opt.stages;
      const size_t ws_bytes = weft::BatchDecodeWrapper::workspace_size(int32_t(batch), m.hq, m.hkv, m.d, dopt);
      DeviceArray ws(ws_bytes);
      weft::BatchDecodeWrapper w(int32_t(batch), m.hq, m.hkv, m.d, dopt);
      cudaStream_t s = ctx.stream();
      weft::AttentionVariant var;
      // plan() cost on the host, includes enqueueing the async copy (first allocation only):
      // "plan_us" = median of kPlanCalls warm calls (after one cold call), each on an idle stream,
      // so the staging-buffer wait (the previous copy still queued) is never hit; "plan_b2b_us" =
      // median of kPlanCalls calls back to back without a sync, where it may be: "plan_b2b_busy"
      // counts the calls that found the stream still busy (a possible host wait on the GPU).
      auto plan_once = [&] {
        const auto t0 = std::chrono::steady_clock::now();
        w.plan(table, m.hq, m.hkv, m.d, kPageSize, weft::DType::kBFloat16, layout, var, ws.get(), ws_bytes, s);
        return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      };
      plan_once();  // cold: the planner's buffers grow here
      WEFT_BENCH_CUDA(cudaStreamSynchronize(s));
      for (int i = 0; rep == 0 && i < kPlanCalls; ++i) {
        plan_us.push_back(plan_once());
        WEFT_BENCH_CUDA(cudaStreamSynchronize(s));
      }
      for (int i = 0; rep == 0 && i < kPlanCalls; ++i) {
        plan_b2b_busy += cudaStreamQuery(s) == cudaErrorNotReady;
        plan_b2b_us.push_back(plan_once());
      }
      WEFT_BENCH_CUDA(cudaStreamSynchronize(s));
      (void)cudaGetLastError();  // cudaStreamQuery's cudaErrorNotReady is not an error

      // run() `runs` times in one graph, run i on copy i % copies of the pools.
      auto runs_of = [&](int runs) {
        return [&, runs](cudaStream_t st) {
          for (int i = 0; i < runs; ++i) w.run(tq, caches[i % copies], table, tout, nullptr, st);
        };
      };
      auto time_runs = [&](int runs) {
        double ms = 0;
        with_graph(ctx, runs_of(runs), [&](const LaunchFn& launch) {
          ctx.warm_up_once(launch);
          ms = ctx.time_ms(launch);
        });
        return ms;
      };
      one_ms_all.push_back(time_runs(1));
      // Diagnostic build: timeline of this allocation, of one run after the L2 flush ("trace_")
      // and of the second of two runs in one graph ("trace_warm_": caches and translations warm).
      for (int runs = 1; rep == 0 && weft::decode::trace_compiled() && runs <= 2; ++runs)
        with_graph(ctx, runs_of(runs), [&](const LaunchFn& launch) {
          add_trace_extras(ctx, launch, w.plan_info().num_ctas, r, runs == 1 ? "trace_" : "trace_warm_");
        });
      // Steady-state cost of one run: time(2 runs) - time(1 run), without the launch latency
      // and with translations warm for the second run (first allocation only).
      if (marginal && rep == 0) marginal_ms = time_runs(2) - one_ms_all.back();
      if (steady)
        with_graph(ctx, runs_of(kSteadyRuns),
                   [&](const LaunchFn& launch) { steady_ms = ctx.time_ms(launch) / kSteadyRuns; });
      info = w.plan_info();
    }
    std::vector<double> sorted = one_ms_all;
    std::sort(sorted.begin(), sorted.end());
    const double median_ms = sorted[sorted.size() / 2];
    r.ms = marginal ? marginal_ms : steady ? steady_ms : median_ms;
    std::sort(plan_us.begin(), plan_us.end());
    std::sort(plan_b2b_us.begin(), plan_b2b_us.end());
    const std::vector<std::pair<std::string, double>> trace = std::move(r.extra);  // diagnostic build only
    r.extra = {{"plan_us", plan_us[plan_us.size() / 2]},
               {"plan_b2b_us", plan_b2b_us[plan_b2b_us.size() / 2]},
               {"plan_b2b_busy", double(plan_b2b_busy)},
               {"one_run_ms", median_ms},
               {"allocations", double(allocations)},
               {"one_run_ms_min", sorted.front()},
               {"one_run_ms_max", sorted.back()},
               {"num_ctas", double(info.num_ctas)},
               {"num_items", double(info.num_items)},
               {"num_merges", double(info.num_merges)},
               {"max_chunk", double(info.max_chunk)}};
    if (steady) {
      r.extra.push_back({"copies", double(copies)});
      r.extra.push_back({"runs_per_graph", double(kSteadyRuns)});
    }
    for (size_t i = 0; i < one_ms_all.size(); ++i)  // each allocation's time, in allocation order
      r.extra.push_back({"alloc" + std::to_string(i) + "_ms", one_ms_all[i]});
    if (opt.bf16_ms > 0) r.extra.push_back({"speedup_vs_bf16", opt.bf16_ms / r.ms});
    r.extra.insert(r.extra.end(), trace.begin(), trace.end());
    ctx.report(r);
    return r.ms;
  } catch (const std::exception& e) {
    ctx.report_error(r, e.what());
  }
  return 0;
}

// Does nothing: the launch-overhead rows time it.
__global__ void empty_kernel() {}

// "decode/floor/launch/smem<KB>": one empty kernel with the decode grid (2 CTAs per SM of 128
// threads) and `smem_bytes` of dynamic shared memory, captured in a graph and timed like a decode
// row (one graph launch after an L2 flush): the part of a row's time that is launch and
// completion, outside any kernel work.
void report_launch_overhead(weft::bench::Context& ctx, int smem_bytes) {
  weft::bench::Result r;
  r.name = "decode/floor/launch/smem" + std::to_string(smem_bytes / 1024) + "K";
  if (!ctx.wants(r.name)) return;
  r.params = {{"grid", std::to_string(2 * ctx.sm_count())}, {"threads", "128"}, {"smem_bytes", std::to_string(smem_bytes)}};
  try {
    WEFT_BENCH_CUDA(cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    with_graph(
        ctx, [&](cudaStream_t st) { empty_kernel<<<2 * ctx.sm_count(), 128, smem_bytes, st>>>(); },
        [&](const LaunchFn& launch) { r.ms = ctx.time_ms(launch); });
    ctx.report(r);
  } catch (const std::exception& e) {
    ctx.report_error(r, e.what());
  }
}

// A plain-read row (weft::bench::plain_read_ms over `bytes`), after a spacer allocation of
// spacer_bytes(spacer) when spacer > 0.
void report_plain_read(weft::bench::Context& ctx, const std::string& name,
                       std::vector<std::pair<std::string, std::string>> params, double bytes, int spacer = 0,
                       int copies = 1, int runs = 1) {
  weft::bench::Result r;
  r.name = name;
  if (!ctx.wants(r.name)) return;
  r.params = std::move(params);
  r.params.push_back({"kernel", "plain streaming read"});
  r.bytes = bytes;
  r.ceiling = "read";
  try {
    DeviceArray spacer_alloc(spacer_bytes(spacer));
    r.ms = weft::bench::plain_read_ms(ctx, static_cast<std::size_t>(bytes), copies, runs);
    if (runs > 1) r.extra = {{"copies", double(copies)}, {"runs_per_graph", double(runs)}};
    ctx.report(r);
  } catch (const std::exception& e) {
    ctx.report_error(r, e.what());
  }
}

// The ragged bimodal batch: 64 requests, half 512 and half 32K keys, interleaved by a fixed shuffle.
std::vector<int32_t> bimodal_lens() {
  std::vector<int32_t> lens(64);
  for (int i = 0; i < 64; ++i) lens[i] = i % 2 ? 32768 : 512;
  std::shuffle(lens.begin(), lens.end(), std::mt19937_64(11));
  return lens;
}


// "decode/prefix/<model>/b<B>/shared<S>/priv<P>/{decode,share}": B requests whose first S keys
// are the same pages (a system prompt) and P private keys each, pages shuffled in the pool; the
// standard decode (every request reads the shared pages) and DecodeOptions::share_prefixes
// (packs read them once). Bytes count UNIQUE KV bytes (shared pages once) + q + out, so the
// fraction of the read ceiling is on unique bytes; the share row carries
// extra.speedup_vs_decode and extra.unique_fraction_of_ceiling. One allocation per row.
void run_prefix_case(weft::bench::Context& ctx, const Model& m, int32_t batch, int32_t shared, int32_t priv) {
  const std::string base_name = "decode/prefix/" + std::string(m.name) + "/b" + std::to_string(batch) + "/shared" +
                                std::to_string(shared) + "/priv" + std::to_string(priv);
  if (!ctx.wants(base_name + "/decode") && !ctx.wants(base_name + "/share")) return;
  const int32_t sp = shared / int32_t(kPageSize);  // shared full pages
  const int32_t pp = (priv + int32_t(kPageSize) - 1) / int32_t(kPageSize);
  const int64_t num_pages = sp + int64_t(batch) * pp;
  std::vector<int32_t> perm(num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937_64(7));
  std::vector<int32_t> indptr{0}, indices, last, lens;
  for (int32_t b = 0; b < batch; ++b) {
    for (int32_t i = 0; i < sp; ++i) indices.push_back(perm[i]);
    for (int32_t i = 0; i < pp; ++i) indices.push_back(perm[sp + int64_t(b) * pp + i]);
    indptr.push_back(int32_t(indices.size()));
    lens.push_back(shared + priv);
    last.push_back(priv - (pp - 1) * int32_t(kPageSize));
  }
  const double unique_kv = kv_bytes_of(m, double(shared) + double(batch) * priv);
  const size_t pool = size_t(num_pages) * kPageSize * m.hkv * m.d;
  DeviceArray k(pool * 2), v(pool * 2), q(size_t(batch) * m.hq * m.d * 2), out(size_t(batch) * m.hq * m.d * 2);
  weft::bench::fill_random(k.get(), pool, weft::DType::kBFloat16, 1);
  weft::bench::fill_random(v.get(), pool, weft::DType::kBFloat16, 2);
  weft::bench::fill_random(q.get(), size_t(batch) * m.hq * m.d, weft::DType::kBFloat16, 3);
  DeviceArray d_indptr(indptr.size() * 4), d_indices(indices.size() * 4), d_last(last.size() * 4);
  WEFT_BENCH_CUDA(cudaMemcpy(d_indptr.get(), indptr.data(), indptr.size() * 4, cudaMemcpyHostToDevice));
  WEFT_BENCH_CUDA(cudaMemcpy(d_indices.get(), indices.data(), indices.size() * 4, cudaMemcpyHostToDevice));
  WEFT_BENCH_CUDA(cudaMemcpy(d_last.get(), last.data(), last.size() * 4, cudaMemcpyHostToDevice));
  weft::PageTable table;
  table.batch_size = batch;
  table.indptr = {d_indptr.as<int32_t>(), indptr.data(), batch + 1};
  table.indices = {d_indices.as<int32_t>(), indices.data(), int64_t(indices.size())};
  table.last_page_len = {d_last.as<int32_t>(), last.data(), batch};
  weft::PagedKVCache cache;
  cache.layout = weft::KVLayout::kNHD;
  cache.k_pages = weft::TensorView(k.get(), weft::DType::kBFloat16, {num_pages, kPageSize, m.hkv, m.d});
  cache.v_pages = weft::TensorView(v.get(), weft::DType::kBFloat16, {num_pages, kPageSize, m.hkv, m.d});
  const weft::TensorView tq(q.get(), weft::DType::kBFloat16, {batch, m.hq, m.d});
  const weft::TensorView tout(out.get(), weft::DType::kBFloat16, {batch, m.hq, m.d});
  double decode_ms = 0;
  for (bool share : {false, true}) {
    weft::bench::Result r;
    r.name = base_name + (share ? "/share" : "/decode");
    r.params = {{"model", m.name}, {"batch", std::to_string(batch)}, {"shared", std::to_string(shared)},
                {"private", std::to_string(priv)}};
    r.bytes = unique_kv + 2.0 * batch * m.hq * m.d * 2;
    r.flops = 4.0 * double(shared + priv) * batch * m.hq * m.d;
    r.ceiling = "read";
    try {
      weft::DecodeOptions opt;
      opt.share_prefixes = share;
      const size_t ws_bytes = weft::BatchDecodeWrapper::workspace_size(batch, m.hq, m.hkv, m.d, opt);
      DeviceArray ws(ws_bytes);
      weft::BatchDecodeWrapper w(batch, m.hq, m.hkv, m.d, opt);
      cudaStream_t s = ctx.stream();
      w.plan(table, m.hq, m.hkv, m.d, kPageSize, weft::DType::kBFloat16, weft::KVLayout::kNHD, {}, ws.get(),
             ws_bytes, s);
      WEFT_BENCH_CUDA(cudaStreamSynchronize(s));
      with_graph(ctx, [&](cudaStream_t st) { w.run(tq, cache, table, tout, nullptr, st); },
                 [&](const LaunchFn& launch) {
                   ctx.warm_up_once(launch);
                   r.ms = ctx.time_ms(launch);
                 });
      r.extra = {{"items", double(w.plan_info().num_items)}, {"packs", double(w.plan_info().num_packs)}};
      if (!share) decode_ms = r.ms;
      if (share && decode_ms > 0) {
        r.extra.push_back({"speedup_vs_decode", decode_ms / r.ms});
        if (ctx.ceilings().read_gbps > 0)
          r.extra.push_back({"unique_fraction_of_ceiling", r.bytes / (r.ms * 1e-3) / 1e9 / ctx.ceilings().read_gbps});
      }
      ctx.report(r);
    } catch (const std::exception& e) {
      ctx.report_error(r, e.what());
    }
  }
}
}  // namespace

WEFT_BENCH_GROUP(decode) {
  const Model models[] = {{"llama3-8b", 32, 8}, {"llama2-7b", 32, 32}};
  std::vector<int32_t> batches = {1, 8, 32, 128, 256};
  std::vector<int32_t> kvs = {1024, 4096, 16384, 32768, 131072};
  if (ctx.quick()) {
    batches = {1, 32, 128};
    kvs = {4096, 32768};
  }
  for (const Model& m : models)
    for (int32_t b : batches)
      for (int32_t kv : kvs) {
        if (kv_bytes_of(m, double(b) * kv) > kMaxKVBytes) continue;
        run_decode_case(ctx, row_name("decode/", m.name, b, kv),
                        m, std::vector<int32_t>(b, kv));
      }
  // plan() host-time rows at batch 1 and 256 in every mode (extra plan_us / plan_b2b_us; the
  // plain rows above have them too, b256 only in full runs): "decode/plan/<model>/b<B>/kv4096".
  {
    CaseOptions one;
    one.allocations = 1;
    for (int32_t b : {1, 256})
      run_decode_case(ctx, row_name("decode/plan/", models[0].name, b, 4096), models[0],
                      std::vector<int32_t>(b, 4096), one);
  }
  // Ragged bimodal (bimodal_lens).
  {
    const std::vector<int32_t> lens = bimodal_lens();
    run_decode_case(ctx, "decode/bimodal64", models[0], lens);
    CaseOptions seq;
    seq.shuffled_pages = false;
    run_decode_case(ctx, "decode/seqpages/bimodal64", models[0], lens, seq);
  }
  // Steady-state rows "decode/steady/...": the issue's target shapes (batch >= 32 at kv >= 4K,
  // batch 1 at kv >= 32K, the bimodal batch), timed as kSteadyRuns runs back to back in one graph
  // on rotated copies of the pools (CaseOptions::copies) after one L2 flush, i.e. as a serving
  // step's graph replays one layer after another: each run reads its KV from DRAM, but the
  // graph's launch (~4 us, decode/floor/launch) is shared by the runs instead of sitting in every
  // row. The main rows above keep the stricter one-run method; both go into the tables.
  // Skipped where the copies would take more than 40 GiB.
  {
    auto steady_row = [&](const std::string& name, const Model& m, const std::vector<int32_t>& lens) {
      const double kv_bytes = kv_bytes_of(m, std::accumulate(lens.begin(), lens.end(), 0.0));
      CaseOptions o;
      o.copies = steady_copies(kv_bytes, double(ctx.l2_bytes()));
      if (o.copies * kv_bytes > kMaxSteadyBytes) return;
      run_decode_case(ctx, name, m, lens, o);
    };
    for (const Model& m : models)
      for (int32_t b : batches)
        for (int32_t kv : kvs)
          if ((b >= 32 && kv >= 4096) || (b == 1 && kv >= 32768))
            steady_row(row_name("decode/steady/", m.name, b, kv), m,
                       std::vector<int32_t>(b, kv));
    const std::vector<int32_t> lens = bimodal_lens();
    steady_row("decode/steady/bimodal64", models[0], lens);
  }
  // Target shapes with each request's pages in pool order ("seqpages": a fresh cache) instead of
  // a random permutation of the pool (a fragmented cache, the main rows).
  {
    const std::pair<int32_t, int32_t> seq_shapes[] = {{1, 32768}, {32, 4096}, {128, 4096}, {32, 32768}};
    CaseOptions seq;
    seq.shuffled_pages = false;
    for (const Model& m : models)
      for (auto [b, kv] : seq_shapes)
        run_decode_case(ctx, row_name("decode/seqpages/", m.name, b, kv),
                        m, std::vector<int32_t>(b, kv), seq);
  }
  // HND pages ([page][head][slot][dim]: a head's 16 keys are one contiguous 4 KB run instead of
  // 16 rows of 256 B at the NHD token stride) at the target shapes, kAuto path.
  {
    const std::pair<int32_t, int32_t> hnd_shapes[] = {{1, 32768}, {32, 4096}, {128, 4096}, {32, 32768}};
    CaseOptions hnd;
    hnd.layout = weft::KVLayout::kHND;
    for (const Model& m : models)
      for (auto [b, kv] : hnd_shapes)
        run_decode_case(ctx, row_name("decode/hnd/", m.name, b, kv),
                        m, std::vector<int32_t>(b, kv), hnd);
  }
  // "<prefix>{tc,cc}/<model>/b<B>/kv<KV>": both kernel paths forced, for kAuto's choice
  // (choose_decode_path).
  auto forced_path_rows = [&](const std::string& prefix, const auto& path_models, const auto& path_shapes) {
    for (const Model& m : path_models)
      for (auto [b, kv] : path_shapes)
        for (auto [tag, path] : {std::pair{"tc", weft::DecodePath::kTensorCore}, std::pair{"cc", weft::DecodePath::kCudaCore}}) {
          CaseOptions forced;
          forced.path = path;
          run_decode_case(ctx, row_name(prefix + tag + "/", m.name, b, kv), m,
                          std::vector<int32_t>(b, kv), forced);
        }
  };
  // D128 at a few shapes, GQA groups 1 (llama2), 2, 4 (llama3-8b), 8 (llama3-70b heads).
  {
    const Model path_models[] = {{"llama2-7b", 32, 32}, {"g2-16x8", 16, 8}, {"llama3-8b", 32, 8},
                                 {"llama3-70b", 64, 8}};
    const std::pair<int32_t, int32_t> path_shapes[] = {{1, 32768}, {32, 4096}, {32, 16384}, {128, 4096}};
    forced_path_rows("decode/path/", path_models, path_shapes);
  }
  // Head dims 64 and 256 ("decode/hdim/..."): GQA group 4 (a Llama-3.2-1B-like 32/8 at D64) and
  // group 2 (a Gemma-2-9B-like 16/8 at D256), for the stage counts of decode_stages() at those dims;
  // and both paths forced at groups 1, 2 and 4 ("decode/hdim/path/...").
  {
    const Model hdim_models[] = {{"d64-32x8", 32, 8, 64}, {"d256-16x8", 16, 8, 256}};
    const std::pair<int32_t, int32_t> hdim_shapes[] = {{1, 32768}, {32, 4096}, {128, 4096}};
    for (const Model& m : hdim_models)
      for (auto [b, kv] : hdim_shapes)
        run_decode_case(ctx, row_name("decode/hdim/", m.name, b, kv),
                        m, std::vector<int32_t>(b, kv), CaseOptions{});
    const Model hdim_path_models[] = {{"d64-16x16", 16, 16, 64},  {"d64-16x8", 16, 8, 64},   {"d64-32x8", 32, 8, 64},
                                      {"d256-16x16", 16, 16, 256}, {"d256-16x8", 16, 8, 256}, {"d256-32x8", 32, 8, 256}};
    forced_path_rows("decode/hdim/path/", hdim_path_models, hdim_shapes);
  }
  // GQA groups above the 16-row query tile ("decode/gqa/g<G>-<Hq>x<Hkv>/..."): MQA-like groups 24,
  // 32 and 64, each (request, kv head) cut into ceil(G / 16) row tiles that read the same keys
  // (dealt to neighbouring CTAs, balance_config's row_tiles_together); group 16 as the control.
  // Bytes count every KV byte ONCE, so the fraction of the read ceiling is on unique bytes.
  {
    const Model gqa_models[] = {{"g16-32x2", 32, 2}, {"g24-48x2", 48, 2}, {"g32-32x1", 32, 1},
                                {"g32-64x2", 64, 2}, {"g64-64x1", 64, 1}};
    const std::pair<int32_t, int32_t> gqa_shapes[] = {{1, 32768}, {32, 4096},   {32, 16384},
                                                      {32, 32768}, {128, 4096}, {128, 16384}};
    for (const Model& m : gqa_models)
      for (auto [b, kv] : gqa_shapes)
        if (kv_bytes_of(m, double(b) * kv) <= kMaxKVBytes)
          run_decode_case(ctx, row_name("decode/gqa/", m.name, b, kv), m, std::vector<int32_t>(b, kv));
  }
  // fp8 KV ("decode/fp8/{bf16,e4m3,e5m2}/<model>/b<B>/kv<KV>", "decode/fp8/*/bimodal64"): the bf16
  // row of each shape first, then the fp8 rows (extra.speedup_vs_bf16 against it). A subset of the
  // main grid: batch 1 long contexts, the target region (batch >= 32 at kv >= 4K) and batch 256.
  {
    const std::pair<int32_t, int32_t> fp8_shapes[] = {{1, 4096},     {1, 32768},   {1, 131072}, {8, 16384},
                                                      {32, 4096},    {32, 16384},  {32, 32768}, {128, 4096},
                                                      {128, 16384},  {256, 1024},  {256, 4096}, {256, 16384}};
    auto fp8_rows = [&](const std::string& tail, const Model& m, const std::vector<int32_t>& lens) {
      CaseOptions o16;
      const double ms16 = run_decode_case(ctx, "decode/fp8/bf16/" + tail, m, lens, o16);
      for (auto [tag, dt] : {std::pair{"e4m3", weft::DType::kFloat8E4M3}, std::pair{"e5m2", weft::DType::kFloat8E5M2}}) {
        CaseOptions o8;
        o8.kv_dtype = dt;
        o8.bf16_ms = ms16;
        run_decode_case(ctx, std::string("decode/fp8/") + tag + "/" + tail, m, lens, o8);
      }
      // e4m3 with each path forced ("decode/fp8/e4m3-tc/...", "e4m3-cc"): what kAuto's choice for
      // fp8 pools is measured against (heuristics.cpp decode_path).
      for (auto [tag, path] : {std::pair{"e4m3-tc", weft::DecodePath::kTensorCore}, std::pair{"e4m3-cc", weft::DecodePath::kCudaCore}}) {
        CaseOptions o8;
        o8.kv_dtype = weft::DType::kFloat8E4M3;
        o8.path = path;
        o8.bf16_ms = ms16;
        run_decode_case(ctx, std::string("decode/fp8/") + tag + "/" + tail, m, lens, o8);
      }
    };
    for (const Model& m : models)
      for (auto [b, kv] : fp8_shapes)
        if (kv_bytes_of(m, double(b) * kv) <= kMaxKVBytes)
          fp8_rows(std::string(m.name) + "/b" + std::to_string(b) + "/kv" + std::to_string(kv), m,
                   std::vector<int32_t>(b, kv));
    fp8_rows("bimodal64", models[0], bimodal_lens());
  }
  // Prefix sharing ("decode/prefix/..."): a shared system prompt of S keys and P private keys per
  // request, standard decode against DecodeOptions::share_prefixes (run_prefix_case).
  for (const Model& m : models)
    for (auto [b, shared, priv] : {std::tuple{32, 4096, 256}, std::tuple{64, 4096, 128}, std::tuple{128, 2048, 512},
                                   std::tuple{16, 8192, 1024}})
      run_prefix_case(ctx, m, b, shared, priv);
  // CTA shape variants (weft::DecodeOptions::warps_per_cta / pipeline_stages): "decode/w<W>s<S>/..."
  // at a few shapes, to tune the defaults (decode_warps() / decode_stages()).
  const std::pair<int32_t, int32_t> shapes[] = {{1, 32768}, {32, 4096}, {128, 4096}, {32, 32768}};
  // (w4s3: the D128 stage count before change 14, the same-process comparison for the default S = 2.)
  const std::pair<int, int> variants[] = {{8, 3}, {4, 2}, {4, 3}};
  CaseOptions single;  // tuning rows: one allocation each
  single.allocations = 1;
  for (auto [warps, stages] : variants) {
    const std::string tag = "decode/w" + std::to_string(warps) + "s" + std::to_string(stages) + "/";
    CaseOptions tuned = single;
    tuned.warps = warps;
    tuned.stages = stages;
    for (const Model& m : models)
      for (auto [b, kv] : shapes)
        run_decode_case(ctx, row_name(tag, m.name, b, kv), m,
                        std::vector<int32_t>(b, kv), tuned);
  }
  // "decode/kvinterleaved/..." and "decode/kvoffset/...": the V pool placed differently relative
  // to the K pool (CaseOptions::placement), 5 allocations each, at the shapes whose rows showed
  // two speed modes across allocations.
  {
    const std::pair<int32_t, int32_t> shapes_kv[] = {{1, 32768}, {1, 131072}, {32, 4096}};
    const std::pair<const char*, CaseOptions::KVPlacement> placements[] = {
        {"kvseparate", CaseOptions::KVPlacement::kSeparate},
        {"kvinterleaved", CaseOptions::KVPlacement::kInterleaved},
        {"kvoffset", CaseOptions::KVPlacement::kOffset}};
    for (auto [tag, placement] : placements)
      for (const Model& m : models)
        for (auto [b, kv] : shapes_kv) {
          CaseOptions o;
          o.placement = placement;
          o.allocations = 5;
          run_decode_case(ctx, row_name(std::string("decode/") + tag + "/", m.name, b, kv),
                          m, std::vector<int32_t>(b, kv), o);
        }
  }
  // "decode/floor/...": the best plain streaming-read kernel over the same KV bytes, timed the
  // same way (one launch after an L2 flush; weft::bench::plain_read_ms). The fixed cost of one
  // launch and its ramp is in it too, so it shows what fraction of the read ceiling any single
  // kernel of that size reaches here: the reachable top for the decode row of the same shape.
  for (const Model& m : models)
    for (auto [b, kv] : {std::pair{1, 16384}, std::pair{1, 32768}, std::pair{1, 131072}, std::pair{32, 4096}})
      report_plain_read(ctx, row_name("decode/floor/", m.name, b, kv),
                        {{"model", m.name}, {"batch", std::to_string(b)}, {"kv_len", std::to_string(kv)}},
                        kv_bytes_of(m, double(b) * kv));
  for (int kb : {0, 100}) report_launch_overhead(ctx, kb * 1024);
  // "decode/floor/steady/...": the same plain read timed as the steady-state decode rows are
  // (kSteadyRuns reads back to back in one graph on rotated copies), for those rows' fraction.
  for (const Model& m : models)
    for (auto [b, kv] : {std::pair{1, 32768}, std::pair{32, 4096}}) {
      const double bytes = kv_bytes_of(m, double(b) * kv);
      report_plain_read(ctx, row_name("decode/floor/steady/", m.name, b, kv),
                        {{"model", m.name}, {"batch", std::to_string(b)}, {"kv_len", std::to_string(kv)}}, bytes, 0,
                        steady_copies(bytes, double(ctx.l2_bytes())), kSteadyRuns);
    }
  // "decode/floor/spacer<i>/<MB>": the same plain read with a spacer of i x (1 GiB + 6 MiB)
  // allocated first (as run_decode_case's allocation i does), to see whether the speed modes of
  // the decode rows across allocations also show for a plain read.
  for (int i = 0; i < 6; ++i)
    for (int mib : {128, 512})
      report_plain_read(ctx, "decode/floor/spacer" + std::to_string(i) + "/" + std::to_string(mib) + "MiB",
                        {{"spacer_bytes", std::to_string(spacer_bytes(i))}}, double(mib) * (1 << 20), i);
  // "decode/marginal/...": ms = time(2 runs in one graph) - time(1 run), the steady-state cost
  // of a run without the launch latency and with warm address translations (run_decode_case).
  for (const Model& m : models)
    for (auto [b, kv] : shapes)
      run_decode_case(ctx, row_name("decode/marginal/", m.name, b, kv),
                      m, std::vector<int32_t>(b, kv), single);
}
