// The decode bench's row runner (declarations and what each runner does: cases_decode_rows.h; what the
// rows time: cases_decode.cu's header).
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
#include "cases_decode_rows.h"

namespace weft::bench::decode_rows {

using weft::bench::DeviceArray;
using weft::bench::LaunchFn;
using weft::bench::with_graph;

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
                       const std::vector<int32_t>& lens, const CaseOptions& opt) {
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
    uint64_t plan_news = 0;  // C++ allocations in the warm plan_us calls (operator new)
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
      // (WEFT_BENCH_ALLOC_TRACE set: the call stacks of the first allocations in these calls, stderr.)
      const bool trace = rep == 0 && std::getenv("WEFT_BENCH_ALLOC_TRACE") != nullptr;
      plan_us.reserve(plan_us.size() + kPlanCalls);  // (the counts below are plan()'s alone)
      if (trace) weft::bench::trace_allocs(8);
      for (int i = 0; rep == 0 && i < kPlanCalls; ++i) {
        const uint64_t n0 = weft::bench::operator_news();
        const double us = plan_once();
        plan_news += weft::bench::operator_news() - n0;
        plan_us.push_back(us);
        WEFT_BENCH_CUDA(cudaStreamSynchronize(s));
      }
      if (trace) weft::bench::print_alloc_traces(r.name.c_str());
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
               {"plan_allocs", plan_us.empty() ? 0.0 : double(plan_news) / double(plan_us.size())},
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
                       std::vector<std::pair<std::string, std::string>> params, double bytes, int spacer,
                       int copies, int runs) {
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

}  // namespace weft::bench::decode_rows
