// weft-bench harness: timing, reporting, device arrays, random fill, group registry.
#include "harness.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <string>

#include "weft/error.h"

namespace weft::bench {

void check_cuda(cudaError_t e, const char* expr, const char* file, int line) {
  if (e == cudaSuccess) return;
  throw ::weft::Error("CUDA", std::string(expr) + " failed: " + cudaGetErrorString(e) + " at " +
                                  file + ":" + std::to_string(line));
}

// ---------------------------------------------------------------------------------------------
// Registry
namespace {
std::map<std::string, std::vector<GroupFn>>& registry() {
  static std::map<std::string, std::vector<GroupFn>> r;  // function-local: safe in static init
  return r;
}
}  // namespace

int register_group(const char* name, GroupFn fn) {
  registry()[name].push_back(fn);
  return static_cast<int>(registry().size());
}

std::vector<GroupEntry> registered_groups() {
  static const char* kOrder[] = {"ceiling_check", "append", "decode", "prefill", "norm", "comm"};
  std::vector<GroupEntry> out;
  auto& r = registry();
  for (const char* n : kOrder) {
    auto it = r.find(n);
    if (it != r.end()) out.push_back({it->first, it->second});
  }
  for (const auto& kv : r) {  // std::map: the rest alphabetically
    const std::string& name = kv.first;
    bool known = std::any_of(std::begin(kOrder), std::end(kOrder),
                             [&](const char* n) { return name == n; });
    if (!known) out.push_back({name, kv.second});
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Random fill: splitmix64 of (seed, index) -> 24 random bits -> uniform [lo, hi).
namespace {
__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__device__ __forceinline__ float uniform01(uint64_t seed, uint64_t i) {
  uint64_t h = splitmix64(seed * 0xD1B54A32D192ED03ull ^ splitmix64(i));
  return static_cast<float>(h >> 40) * (1.0f / 16777216.0f);  // 24 bits: exact in float
}

template <class T> __device__ __forceinline__ T cvt(float x);
template <> __device__ __forceinline__ float cvt<float>(float x) { return x; }
template <> __device__ __forceinline__ __half cvt<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 cvt<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

template <class T>
__global__ void fill_kernel(T* out, std::size_t n, uint64_t seed, float lo, float span) {
  std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    out[i] = cvt<T>(lo + span * uniform01(seed, i));
}

__global__ void fill_int_kernel(int32_t* out, std::size_t n, uint64_t seed, int32_t lo,
                                uint32_t span) {
  std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    out[i] = lo + static_cast<int32_t>(splitmix64(seed * 0xD1B54A32D192ED03ull ^ splitmix64(i)) %
                                       span);
}

// Random finite fp8 bytes (bit 6, the top exponent bit, cleared: |x| < 2 in e4m3 and e5m2, no
// NaN / inf codes): the fp8 pools of the "decode/fp8/..." and "prefill/fp8/..." rows.
__global__ void fill_fp8_kernel(uint8_t* p, std::size_t n, uint32_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 0x9E3779B1u ^ seed;
    h ^= h >> 15;
    h *= 0x2C1B3C6Du;
    h ^= h >> 12;
    p[i] = uint8_t(h & 0xBFu);
  }
}

// Grid for a grid-stride fill: enough blocks to cover every SM several times, capped.
unsigned fill_blocks(std::size_t n) {
  std::size_t b = (n + 255) / 256;
  return static_cast<unsigned>(std::max<std::size_t>(1, std::min<std::size_t>(b, 65536)));
}
}  // namespace

void fill_random(void* dev, std::size_t n_elems, weft::DType dtype, uint64_t seed, float lo,
                 float hi, cudaStream_t stream) {
  WEFT_CHECK_ARG(hi > lo, "hi", "fill_random needs lo < hi, got lo=" << lo << " hi=" << hi);
  if (n_elems == 0) return;
  WEFT_CHECK_ARG(dev != nullptr, "dev", "non-null device pointer");
  unsigned blocks = fill_blocks(n_elems);
  float span = hi - lo;
  switch (dtype) {
    case weft::DType::kFloat32:
      fill_kernel<<<blocks, 256, 0, stream>>>(static_cast<float*>(dev), n_elems, seed, lo, span);
      break;
    case weft::DType::kFloat16:
      fill_kernel<<<blocks, 256, 0, stream>>>(static_cast<__half*>(dev), n_elems, seed, lo, span);
      break;
    case weft::DType::kBFloat16:
      fill_kernel<<<blocks, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(dev), n_elems, seed, lo,
                                              span);
      break;
    case weft::DType::kFloat8E4M3:
    case weft::DType::kFloat8E5M2:  // lo / hi ignored (fill_fp8_kernel)
      fill_fp8_kernel<<<1024, 256, 0, stream>>>(static_cast<uint8_t*>(dev), n_elems, static_cast<uint32_t>(seed));
      break;
    default:
      throw ::weft::Error("dtype", "fill_random supports f16, bf16, f32, fp8 (use fill_random_int for "
                                   "i32), got dtype code " +
                                       std::to_string(static_cast<int>(dtype)));
  }
  WEFT_BENCH_CUDA(cudaGetLastError());
  if (stream == nullptr) WEFT_BENCH_CUDA(cudaDeviceSynchronize());
}

void fill_random_int(int32_t* dev, std::size_t n_elems, uint64_t seed, int32_t lo, int32_t hi,
                     cudaStream_t stream) {
  WEFT_CHECK_ARG(hi > lo, "hi", "fill_random_int needs lo < hi, got lo=" << lo << " hi=" << hi);
  if (n_elems == 0) return;
  WEFT_CHECK_ARG(dev != nullptr, "dev", "non-null device pointer");
  uint32_t span = static_cast<uint32_t>(static_cast<int64_t>(hi) - lo);
  fill_int_kernel<<<fill_blocks(n_elems), 256, 0, stream>>>(dev, n_elems, seed, lo, span);
  WEFT_BENCH_CUDA(cudaGetLastError());
  if (stream == nullptr) WEFT_BENCH_CUDA(cudaDeviceSynchronize());
}

// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// Context
Context::Context(Options opt) : opt_(std::move(opt)) {
  WEFT_BENCH_CUDA(cudaGetDevice(&device_));
  WEFT_BENCH_CUDA(cudaGetDeviceProperties(&props_, device_));
  WEFT_BENCH_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  WEFT_BENCH_CUDA(cudaStreamCreateWithFlags(&capture_stream_, cudaStreamNonBlocking));
  // 2x the L2 so that nothing a previous run left in L2 survives the flush.
  flush_bytes_ = std::max<std::size_t>(2 * static_cast<std::size_t>(props_.l2CacheSize),
                                       std::size_t{8} << 20);
  WEFT_BENCH_CUDA(cudaMalloc(&flush_buf_, flush_bytes_));
  WEFT_BENCH_CUDA(cudaMemset(flush_buf_, 0x5A, flush_bytes_));  // defined contents, written once
}

Context::~Context() {
  for (auto& [a, b] : events_) {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  if (flush_buf_) cudaFree(flush_buf_);
  if (capture_stream_) cudaStreamDestroy(capture_stream_);
  if (stream_) cudaStreamDestroy(stream_);
}

bool Context::wants(const std::string& case_name) const {
  if (opt_.filters.empty()) return true;
  for (const auto& f : opt_.filters)
    if (case_name.find(f) != std::string::npos) return true;
  return false;
}

bool Context::filter_names(const std::string& word) const {
  for (const auto& f : opt_.filters)
    if (f.find(word) != std::string::npos) return true;
  return false;
}

int Context::effective_reps(int reps) const {
  if (opt_.reps > 0) return opt_.reps;
  if (opt_.quick) return std::max(5, reps / 2);
  return std::max(1, reps);
}

// Reads the whole 2x-L2 scratch buffer. Reading (not writing) matters: a memset flush leaves
// L2 full of dirty lines whose write-back then lands inside the next timed run and is charged
// to the kernel being measured. After this kernel, L2 holds only clean lines of the scratch.
__global__ void flush_read_kernel(const uint4* __restrict__ buf, std::size_t n_vec, uint32_t* sink) {
  uint32_t acc = 0;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n_vec;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const uint4 v = buf[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // keeps the loads; practically never taken
}

void Context::flush_l2(cudaStream_t stream) {
  flush_read_kernel<<<props_.multiProcessorCount * 4, 512, 0, stream>>>(
      static_cast<const uint4*>(flush_buf_), flush_bytes_ / sizeof(uint4),
      static_cast<uint32_t*>(flush_buf_));
  WEFT_BENCH_CUDA(cudaGetLastError());
}

std::vector<double> Context::time_samples_ms(const std::function<void(cudaStream_t)>& fn,
                                             int warmup, int reps) {
  const int n = effective_reps(reps);
  while (static_cast<int>(events_.size()) < n) {
    cudaEvent_t a, b;
    WEFT_BENCH_CUDA(cudaEventCreate(&a));
    WEFT_BENCH_CUDA(cudaEventCreate(&b));
    events_.emplace_back(a, b);
  }
  for (int i = 0; i < warmup; ++i) {
    flush_l2(stream_);
    fn(stream_);
    WEFT_BENCH_CUDA(cudaGetLastError());
  }
  WEFT_BENCH_CUDA(cudaStreamSynchronize(stream_));
  for (int i = 0; i < n; ++i) {
    flush_l2(stream_);  // outside the bracket
    WEFT_BENCH_CUDA(cudaEventRecord(events_[i].first, stream_));
    fn(stream_);
    WEFT_BENCH_CUDA(cudaEventRecord(events_[i].second, stream_));
    WEFT_BENCH_CUDA(cudaGetLastError());
  }
  WEFT_BENCH_CUDA(cudaStreamSynchronize(stream_));
  std::vector<double> samples(n);
  for (int i = 0; i < n; ++i) {
    float ms = 0;
    WEFT_BENCH_CUDA(cudaEventElapsedTime(&ms, events_[i].first, events_[i].second));
    samples[i] = ms;
  }
  return samples;
}

void Context::warm_up_once(const std::function<void(cudaStream_t)>& fn, double seconds) {
  if (warmed_up_) return;
  warmed_up_ = true;
  if (opt_.warmup_s >= 0) seconds = opt_.warmup_s;
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
    for (int i = 0; i < 20; ++i) fn(stream_);
    WEFT_BENCH_CUDA(cudaStreamSynchronize(stream_));
  }
}

double Context::time_ms(const std::function<void(cudaStream_t)>& fn, int warmup, int reps) {
  std::vector<double> s = time_samples_ms(fn, warmup, reps);
  std::sort(s.begin(), s.end());
  const std::size_t n = s.size();
  return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

void with_graph(Context& ctx, const LaunchFn& capture, const std::function<void(const LaunchFn&)>& use) {
  const cudaStream_t cap = ctx.capture_stream();
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  WEFT_BENCH_CUDA(cudaStreamBeginCapture(cap, cudaStreamCaptureModeThreadLocal));
  capture(cap);
  WEFT_BENCH_CUDA(cudaStreamEndCapture(cap, &graph));
  WEFT_BENCH_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  use([exec](cudaStream_t st) { WEFT_BENCH_CUDA(cudaGraphLaunch(exec, st)); });
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

std::vector<GraphNodeTime> graph_timeline(Context& ctx, const LaunchFn& capture) {
  const cudaStream_t cap = ctx.capture_stream();
  cudaGraph_t graph;
  WEFT_BENCH_CUDA(cudaStreamBeginCapture(cap, cudaStreamCaptureModeThreadLocal));
  capture(cap);
  WEFT_BENCH_CUDA(cudaStreamEndCapture(cap, &graph));
  std::size_t n = 0;
  WEFT_BENCH_CUDA(cudaGraphGetNodes(graph, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  WEFT_BENCH_CUDA(cudaGraphGetNodes(graph, nodes.data(), &n));
  // The graph with only the nodes for which keep(j) holds, timed.
  const auto time_kept = [&](const std::function<bool(std::size_t)>& keep) {
    cudaGraph_t clone;
    WEFT_BENCH_CUDA(cudaGraphClone(&clone, graph));
    for (std::size_t j = 0; j < n; ++j) {
      if (keep(j)) continue;
      cudaGraphNode_t c;
      WEFT_BENCH_CUDA(cudaGraphNodeFindInClone(&c, nodes[j], clone));
      WEFT_BENCH_CUDA(cudaGraphDestroyNode(c));
    }
    cudaGraphExec_t exec;
    WEFT_BENCH_CUDA(cudaGraphInstantiate(&exec, clone, 0));
    const double ms = ctx.time_ms([exec](cudaStream_t st) { WEFT_BENCH_CUDA(cudaGraphLaunch(exec, st)); });
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(clone);
    return ms;
  };
  std::vector<GraphNodeTime> out(n);
  for (std::size_t k = 0; k < n; ++k) {
    cudaGraphNodeType type;
    WEFT_BENCH_CUDA(cudaGraphNodeGetType(nodes[k], &type));
    out[k].name = "node type " + std::to_string(int(type));
    if (type == cudaGraphNodeTypeKernel) {
      cudaKernelNodeParams kp{};
      const char* name = nullptr;
      if (cudaGraphKernelNodeGetParams(nodes[k], &kp) == cudaSuccess && cudaFuncGetName(&name, kp.func) == cudaSuccess &&
          name != nullptr)
        out[k].name = name;
      cudaGetLastError();  // a name not found is not an error of the case
    }
    out[k].prefix_ms = time_kept([k](std::size_t j) { return j <= k; });
    out[k].alone_ms = time_kept([k](std::size_t j) { return j == k; });
  }
  cudaGraphDestroy(graph);
  return out;
}

double Context::gb_per_s(const Result& r) {
  return (r.ms > 0 && r.bytes > 0) ? r.bytes / r.ms / 1e6 : 0.0;
}
double Context::tflops(const Result& r) {
  return (r.ms > 0 && r.flops > 0) ? r.flops / r.ms / 1e9 : 0.0;
}
double Context::fraction_of_ceiling(const Result& r) const {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (!r.error.empty()) return nan;
  double got = 0, ceil = 0;
  if (r.ceiling == "read") {
    got = gb_per_s(r);
    ceil = ceilings_.read_gbps;
  } else if (r.ceiling == "copy") {
    got = gb_per_s(r);
    ceil = ceilings_.copy_gbps;
  } else if (r.ceiling == "gemm") {
    got = tflops(r);
    ceil = ceilings_.gemm_tflops;
  } else {
    return nan;
  }
  return (ceil > 0 && got > 0) ? got / ceil : nan;
}

void Context::begin_group(const std::string& group) {
  group_ = group;
  header_printed_ = false;
}

void Context::print_header() {
  if (header_printed_) return;
  header_printed_ = true;
  std::printf("\n== group %s ==\n", group_.c_str());
  std::printf("%-48s %10s %10s %10s %-5s %7s\n", "case", "ms", "GB/s", "TFLOP/s", "ceil", "frac");
  std::fflush(stdout);
}

void Context::report(Result r) {
  if (r.group.empty()) r.group = group_;
  print_header();
  if (!r.error.empty()) {
    std::printf("%-48s  ERROR: %s\n", r.name.c_str(), r.error.c_str());
  } else {
    double frac = fraction_of_ceiling(r);
    char fbuf[32];
    if (std::isnan(frac))
      std::snprintf(fbuf, sizeof fbuf, "%7s", "-");
    else
      std::snprintf(fbuf, sizeof fbuf, "%7.3f", frac);
    std::printf("%-48s %10.4f %10.1f %10.2f %-5s %s\n", r.name.c_str(), r.ms, gb_per_s(r),
                tflops(r), r.ceiling.empty() ? "-" : r.ceiling.c_str(), fbuf);
  }
  std::fflush(stdout);
  results_.push_back(std::move(r));
}

void Context::report_error(Result r, const std::string& error) {
  r.error = error.empty() ? "unknown error" : error;
  r.ms = 0;
  report(std::move(r));
}

}  // namespace weft::bench
