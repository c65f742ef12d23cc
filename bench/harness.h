// weft-bench harness: ceilings measured in-process, event timing with an L2 flush before every
// timed run, aligned table rows and a JSON record of every case.
//
// A component's cases live in bench/cases_<component>.cu:
//
//   #include "harness.h"
//   WEFT_BENCH_GROUP(decode) {
//     weft::bench::DeviceArray k(bytes);
//     weft::bench::fill_random(k.get(), n, weft::DType::kBFloat16, /*seed=*/1);
//     weft::bench::Result r;
//     r.name = "decode/llama3-8b/b32/kv4096";
//     if (!ctx.wants(r.name)) return;             // --filter
//     r.params = {{"batch", "32"}, {"kv_len", "4096"}};
//     r.ms = ctx.time_ms([&](cudaStream_t s) { launch(..., s); });
//     r.bytes = ...;  r.flops = ...;  r.ceiling = "read";
//     ctx.report(r);
//   }
//
// Host-only header (no CUDA device code): includable from .cpp and .cu files alike.
#pragma once
#include <cuda_runtime_api.h>

#include "common/device_allocation.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "weft/dtype.h"

namespace weft::bench {

// C++ allocations of this process so far (global operator new: bench/alloc_count.cpp).
uint64_t operator_news();
// Diagnostic (bench/alloc_count.cpp): record the call stacks of the next n allocations; print them
// (stderr, "alloc-trace" lines of object+offset).
void trace_allocs(int n);
void print_alloc_traces(const char* what);

// Measured at start-up in the same process (zero when run with --no-ceilings).
struct Ceilings {
  double copy_gbps = 0;    // cudaMemcpyAsync D2D of 2 GiB, bytes read + written
  double read_gbps = 0;    // streaming-read kernel over 4 GiB, bytes read only
  double gemm_tflops = 0;  // cuBLAS bf16 GEMM 8192^3, fp32 accumulate
};

struct Result {
  std::string name;  // "decode/llama3-8b/b32/kv4096"
  std::vector<std::pair<std::string, std::string>> params;
  double ms = 0;          // median, from time_ms()
  double bytes = 0;       // bytes that must move (each input read once, each output written once)
  double flops = 0;       // useful FLOPs (causal counted once)
  std::string ceiling;    // "read" | "copy" | "gemm" | "" (none)
  std::vector<std::pair<std::string, double>> extra;  // e.g. {"torch_ms", 1.2}
  // Filled by Context::report (callers may leave them alone):
  std::string group;      // the registered group that reported it
  std::string error;      // non-empty: the case failed or was refused (see report_error)
};

// Enqueues work on the given stream (never synchronizes it): what time_ms times and a graph
// launch looks like.
using LaunchFn = std::function<void(cudaStream_t)>;

class Context {
 public:
  struct Options {
    bool quick = false;
    int reps = 0;                       // > 0: overrides every time_ms() `reps`
    std::vector<std::string> filters;   // substring match on case names (any of them)
    bool ceilings = true;
    // --pat-wide-min-rows N (> 0): DecodeOptions::prefix_wide_min_rows of the pat group's share
    // rows (0: the library default, heuristics::kPackWideMinRows), to time another tile selector.
    int pat_wide_min_rows = 0;
    // --pat-wide-min-keys N (> 0): DecodeOptions::prefix_wide_min_keys of the same rows (0: the
    // library default, heuristics::kPackWideMinKeys).
    int pat_wide_min_keys = 0;
    // --warmup-s S (>= 0): seconds of the once-per-process GPU warm-up (warm_up_once; 1 s by
    // default). 0 under a profiler (ncu counts and replays every launch of the warm-up loop).
    double warmup_s = -1;
  };
  explicit Context(Options opt);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const Ceilings& ceilings() const { return ceilings_; }
  bool quick() const { return opt_.quick; }
  int pat_wide_min_rows() const { return opt_.pat_wide_min_rows; }
  int pat_wide_min_keys() const { return opt_.pat_wide_min_keys; }
  cudaStream_t stream() const { return stream_; }
  // A second stream, only for capturing CUDA graphs (with_graph); the graphs launch on stream().
  cudaStream_t capture_stream() const { return capture_stream_; }
  int sm_count() const { return props_.multiProcessorCount; }
  const cudaDeviceProp& props() const { return props_; }
  int device() const { return device_; }
  std::size_t l2_bytes() const { return static_cast<std::size_t>(props_.l2CacheSize); }

  // True when no --filter was given or `case_name` contains one of the filter substrings.
  bool wants(const std::string& case_name) const;
  // Some --filter contains `word` (opt-in rows that a run without filters leaves out).
  bool filter_names(const std::string& word) const;

  // Median ms over `reps` timed runs after `warmup` untimed runs. Before every run (timed or
  // not) the L2 is flushed by reading a 2x-L2 buffer (flush_l2), outside the event bracket;
  // events bracket only fn. fn enqueues work on the given stream (never synchronizes it).
  // --reps N overrides `reps`; --quick halves it (at least 5).
  double time_ms(const std::function<void(cudaStream_t)>& fn, int warmup = 3, int reps = 20);
  // Same timing, but returns every timed sample (ms, in run order) for callers that need more
  // than the median (min/max/spread into Result::extra).
  std::vector<double> time_samples_ms(const std::function<void(cudaStream_t)>& fn,
                                      int warmup = 3, int reps = 20);
  // GPU warm-up, once per process: the first call runs fn back to back for `seconds` (the first
  // cases of a process otherwise run while the clocks are still ramping; measured: the same
  // prefill plan 15% slower as the first case than later in its group); later calls return.
  void warm_up_once(const std::function<void(cudaStream_t)>& fn, double seconds = 1.0);
  // Enqueue the L2 flush on `stream` (time_ms does this itself).
  void flush_l2(cudaStream_t stream);

  // Computes GB/s, TFLOP/s and fraction_of_ceiling; prints a table row; keeps it for JSON.
  void report(Result r);
  // Records a case that could not run (unsupported shape, weft::Error, ...): printed and kept
  // in JSON with "error"; it does not fail the run.
  void report_error(Result r, const std::string& error);

  // --- used by main.cpp ---
  void measure_ceilings();
  void set_ceilings(const Ceilings& c) { ceilings_ = c; }
  void begin_group(const std::string& group);
  const std::vector<Result>& results() const { return results_; }
  static double gb_per_s(const Result& r);
  static double tflops(const Result& r);
  double fraction_of_ceiling(const Result& r) const;  // NaN when unknown

 private:
  int effective_reps(int reps) const;
  void print_header();

  Options opt_;
  Ceilings ceilings_;
  int device_ = 0;
  cudaDeviceProp props_{};
  cudaStream_t stream_ = nullptr;
  cudaStream_t capture_stream_ = nullptr;
  bool warmed_up_ = false;
  void* flush_buf_ = nullptr;
  std::size_t flush_bytes_ = 0;
  int flush_count_ = 0;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> events_;
  std::string group_;
  bool header_printed_ = false;
  std::vector<Result> results_;
};

// The best median time of the read ceiling's plain streaming-read kernels (block-contiguous
// chunks on 2 or 4 CTAs per SM, grid-stride on 4 or 8) over `bytes`, each timed like every case
// (one launch after an L2 flush): what one memory-bound kernel of that size takes here, launch
// and ramp included. Decode rows of the same bytes compare against it (bench/ceilings.cu).
// With runs > 1: `copies` buffers of `bytes` and `runs` launches back to back in one graph (run i
// reads copy i % copies) after one flush; returns the graph's time / runs (the steady-state rate).
double plain_read_ms(Context& ctx, std::size_t bytes, int copies = 1, int runs = 1);

// Captures `capture` (enqueueing on ctx.capture_stream()) into a graph and hands `use` a
// function that launches the instantiated graph on a given stream.
void with_graph(Context& ctx, const LaunchFn& capture, const std::function<void(const LaunchFn&)>& use);

// A launch sequence's timeline without a profiler (nsys does not run on the lent machines and ncu
// could not profile the sm90 wide kernel's tensor maps): `capture` is captured into a graph of
// nodes n_0 .. n_{N-1} (cudaGraphGetNodes order: capture order); for each k, `prefix_ms` = the
// median time of the graph with only n_0 .. n_k kept (dependencies on dropped nodes dropped with
// them), `alone_ms` = the graph with only n_k, both timed as every case (time_ms: L2 flushed
// before each run). prefix_ms[k] - prefix_ms[k - 1] is what n_k adds to the sequence (its time
// not hidden by overlap, plus the gap before it); alone_ms[k] its time by itself after a flush
// (a consumer alone reads the producer's outputs of an earlier run, from DRAM). `name` = the
// kernel's (mangled) name, else the node type.
struct GraphNodeTime {
  std::string name;
  double prefix_ms = 0, alone_ms = 0;
};
std::vector<GraphNodeTime> graph_timeline(Context& ctx, const LaunchFn& capture);

// RAII device allocation (src/common/device_allocation.h; throws weft::Error("CUDA", ...) on failure).
using DeviceArray = weft::detail::DeviceAllocation;

// Deterministic uniform [lo, hi) fill of f16/bf16/f32 buffers from a counter-based hash of
// (seed, index): same seed -> same bits; never all zeros (lo < hi required). fp8 (e4m3 / e5m2):
// random finite codes of magnitude < 2 (lo / hi ignored). Synchronous on the
// legacy default stream unless `stream` is given (then asynchronous on it).
void fill_random(void* dev, std::size_t n_elems, weft::DType dtype, uint64_t seed,
                 float lo = -1.f, float hi = 1.f, cudaStream_t stream = nullptr);
// Integer fill in [lo, hi) for i32 index-like buffers (e.g. random page ids).
void fill_random_int(int32_t* dev, std::size_t n_elems, uint64_t seed, int32_t lo, int32_t hi,
                     cudaStream_t stream = nullptr);

// Throws weft::Error("CUDA", ...) with the expression and location.
void check_cuda(cudaError_t e, const char* expr, const char* file, int line);
#define WEFT_BENCH_CUDA(expr) ::weft::bench::check_cuda((expr), #expr, __FILE__, __LINE__)

// --- registry ---
using GroupFn = void (*)(Context&);
int register_group(const char* name, GroupFn fn);
struct GroupEntry {
  std::string name;
  std::vector<GroupFn> fns;  // a group may be registered from several files
};
// Registered groups in canonical order (ceiling_check, append, decode, prefill, norm, comm,
// then the others alphabetically).
std::vector<GroupEntry> registered_groups();

}  // namespace weft::bench

#define WEFT_BENCH_CAT2_(a, b) a##b
#define WEFT_BENCH_CAT_(a, b) WEFT_BENCH_CAT2_(a, b)
#define WEFT_BENCH_GROUP_IMPL_(group_name, fn)                                                 \
  static void fn(::weft::bench::Context& ctx);                                               \
  [[maybe_unused]] static const int WEFT_BENCH_CAT_(fn, _registered) =                       \
      ::weft::bench::register_group(#group_name, &fn);                                       \
  static void fn([[maybe_unused]] ::weft::bench::Context& ctx)
// WEFT_BENCH_GROUP(decode) { ... uses ctx ... }  (may appear several times, in several files)
#define WEFT_BENCH_GROUP(group_name) \
  WEFT_BENCH_GROUP_IMPL_(group_name, WEFT_BENCH_CAT_(weft_bench_group_##group_name##_, __COUNTER__))
