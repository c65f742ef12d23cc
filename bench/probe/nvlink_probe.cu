// weft-nvlink-probe: how many GB/s can ONE SM (one CTA) move, locally and over NVLink, and does
// it scale with CTAs? Question behind it: the fused all-reduce moves ~35-48 GB/s per SM per
// direction with both register-staged and TMA bulk copies (docs/perf-notes-comm.md); is that a
// per-SM hardware limit or the kernel's fault?
// Standalone (CUDA runtime only, no NCCL, no multicast): every kernel runs on device 0; device
// 1's memory is reached through cudaDeviceEnablePeerAccess (plain NVLink loads/stores/bulk copies).
// Cases, each at C CTAs in kCtaCounts (one CTA per SM), CTA c moving the contiguous c-th 1/C share:
//   ldst  register-staged 16-byte copy, 512 threads, U 16-byte loads in flight per thread
//   bulk  TMA bulk-copy ring(s) (src/comm/bulk_copy.cuh), one issuing thread per ring
//   read  16-byte loads only (xor-folded): separates the load limit from the store limit
//   ce    cudaMemcpyAsync (copy engine, no SM) of the same bytes: the reference
// Directions: local->local, local->peer (push, dst on device 1), peer->local (pull, src on 1).
// Output: one JSON document on stdout, a table on stderr. Time limits: no case starts after
// kCaseDeadlineS; a watchdog thread prints what was measured and exits after kWatchdogS.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/bulk_copy.cuh"
#include "common/cuda_check.h"
#include "common/device_allocation.h"

namespace {

namespace bulk = weft::comm_detail::bulk;
using weft::detail::DeviceAllocation;

// 256 MiB per buffer: > 4x the 60 MB L2, so every run streams from/to HBM (or NVLink).
constexpr int64_t kBufBytes = int64_t{256} << 20;
constexpr int kCtaCounts[] = {1, 2, 4, 8, 16};
constexpr int kWarmups = 2;    // the first one is also the correctness check
constexpr int kTimedRuns = 7;  // median of 7
// 512 threads x U x 16 B = 32 KB (U 4) / 64 KB (U 8) of loads in flight per CTA.
constexpr int kLdstThreads = 512;
constexpr int kReadUnroll = 8;  // read-only kernel: as many loads in flight as ldst U8
// Dynamic shared memory requested by every kernel: more than half of the SM's 228 KB, so two
// CTAs never share an SM and C CTAs = C SMs.
constexpr int kOneCtaPerSmSmem = 120 << 10;
// The run has a hard 60 s limit: start no case after 40 s (a case takes < 1 s at >= 5 GB/s),
// and if anything hangs, print what was measured and exit at 55 s.
constexpr double kCaseDeadlineS = 40.0;
constexpr int kWatchdogS = 55;
constexpr int kRandomSamples = 256;  // words checked per copy, beside every share boundary
constexpr uint32_t kPoison = 0xDEADBEEFu;

__host__ __device__ inline uint32_t pattern(int64_t word, uint32_t seed) {  // splitmix-like
  uint64_t x = static_cast<uint64_t>(word) * 0x9E3779B97F4A7C15ull + seed;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  return static_cast<uint32_t>(x ^ (x >> 32));
}

__global__ void fill_kernel(uint32_t* buf, int64_t words, uint32_t seed) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < words; i += stride)
    buf[i] = pattern(i, seed);
}

// Poisons the sampled words (out == nullptr) or read them back into out.
__global__ void sample_kernel(uint32_t* buf, const int64_t* idx, int n, uint32_t* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (out) out[i] = buf[idx[i]];
  else buf[idx[i]] = kPoison;
}

// Part `part` of `parts` contiguous parts of n units.
__host__ __device__ inline void share_of(int64_t n, int64_t part, int64_t parts, int64_t* b, int64_t* e) {
  *b = n * part / parts;
  *e = n * (part + 1) / parts;
}

// kStore: copy src -> dst (ldst); else read only, xor-folding the words (read). Consecutive
// threads take consecutive 16-byte vectors (512 B per warp access); all kUnroll loads are issued
// before the first store.
template <int kUnroll, bool kStore>
__global__ void __launch_bounds__(kLdstThreads)
    ldst_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, int64_t n_vec) {
  int64_t i, end;
  share_of(n_vec, blockIdx.x, gridDim.x, &i, &end);
  i += threadIdx.x;
  uint32_t acc = 0;
  for (; i + (kUnroll - 1) * kLdstThreads < end; i += kUnroll * kLdstThreads) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = src[i + u * kLdstThreads];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (kStore) dst[i + u * kLdstThreads] = v[u];
      else acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
  }
  for (; i < end; i += kLdstThreads) {
    if (kStore) dst[i] = src[i];
    else acc ^= src[i].x;
  }
  // read: a data-dependent store (dst = a 64-word sink), so the loads cannot be dropped.
  if (!kStore && acc == kPoison) reinterpret_cast<uint32_t*>(dst)[blockIdx.x] = acc;
}

// kRings rings (lane 0 of warp r drives ring r over its contiguous part of the CTA's share), each
// kSlots chunks of kChunk bytes, at most kAhead loads in flight; a slot is reloaded once the bulk
// store that read it is done reading (wait_group.read). kSlots = 12, kAhead = 6, 16 KB is the
// fused all-reduce kernel's copy ring (the bulk kernel, removed with issue 26).
template <int kSlots, int kAhead, uint32_t kChunk, int kRings>
__global__ void __launch_bounds__(kRings * 32) bulk_copy_kernel(const char* src, char* dst, int64_t bytes) {
  static_assert(kAhead >= 1 && kAhead <= kSlots, "loads in flight fit in the ring");
  static_assert(kChunk % 16 == 0, "bulk copies move multiples of 16 bytes");
  __shared__ uint64_t ring_bar[kRings][kSlots];
  extern __shared__ __align__(128) char smem[];
  if (threadIdx.x % 32 != 0) return;
  const int ring = threadIdx.x / 32;
  int64_t b, e;  // in 16-byte units: bulk addresses and sizes are 16-byte aligned
  share_of(bytes / 16, int64_t{blockIdx.x} * kRings + ring, int64_t{gridDim.x} * kRings, &b, &e);
  const char* const s = src + b * 16;
  char* const d = dst + b * 16;
  const int64_t n = (e - b) * 16;
  char* const buf = smem + ring * kSlots * kChunk;
  uint64_t* const bar = ring_bar[ring];
  for (int i = 0; i < kSlots; ++i) bulk::mbar_init(&bar[i], 1);
  bulk::fence_mbar_init();
  // Chunk i: slot i % kSlots, mbarrier phase (i / kSlots) & 1; nl / ns: chunks loaded / stored.
  const uint32_t n_chunks = static_cast<uint32_t>((n + kChunk - 1) / kChunk);
  auto chunk_bytes = [&](uint32_t i) {
    return static_cast<uint32_t>(min(int64_t{kChunk}, n - int64_t{i} * kChunk));
  };
  uint32_t nl = 0, ns = 0;
  auto store_next = [&] {
    const uint32_t slot = ns % kSlots;
    bulk::mbar_wait(&bar[slot], (ns / kSlots) & 1u);
    bulk::store(d + int64_t{ns} * kChunk, buf + slot * kChunk, chunk_bytes(ns));
    bulk::commit();
    ++ns;
  };
  for (; nl < n_chunks; ++nl) {
    if (nl - ns == kAhead) store_next();
    // nl - ns <= kAhead - 1: chunk nl - kSlots (this slot's last user) is at least
    // kSlots - kAhead store groups old, so all but the newest kSlots - kAhead done reading suffice.
    bulk::wait_read<kSlots - kAhead>();
    const uint32_t slot = nl % kSlots;
    bulk::mbar_expect_tx(&bar[slot], chunk_bytes(nl));
    bulk::load(buf + slot * kChunk, s + int64_t{nl} * kChunk, chunk_bytes(nl), &bar[slot]);
  }
  while (ns < nl) store_next();
  bulk::wait_all<0>();  // writes performed before the CTA exits
}

template <class Kernel>
bool allow_smem(Kernel kernel, int bytes) {
  WEFT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  return true;
}

using LaunchFn = void (*)(const void* src, void* dst, int64_t bytes, int ctas, cudaStream_t);

template <int kUnroll, bool kStore>
void launch_ldst(const void* src, void* dst, int64_t bytes, int ctas, cudaStream_t st) {
  [[maybe_unused]] static const bool ready = allow_smem(ldst_kernel<kUnroll, kStore>, kOneCtaPerSmSmem);
  ldst_kernel<kUnroll, kStore><<<ctas, kLdstThreads, kOneCtaPerSmSmem, st>>>(
      static_cast<const uint4*>(src), static_cast<uint4*>(dst), bytes / 16);
  WEFT_CUDA_CHECK_LAUNCH();
}
template <int kSlots, int kAhead, uint32_t kChunk, int kRings>
void launch_bulk(const void* src, void* dst, int64_t bytes, int ctas, cudaStream_t st) {
  constexpr int kRingSmem = kRings * kSlots * static_cast<int>(kChunk);
  static_assert(kRingSmem <= 200 * 1024, "<= 200 KB of rings (227 KB per block on sm_90)");
  constexpr int kSmem = std::max(kRingSmem, kOneCtaPerSmSmem);
  auto* kernel = bulk_copy_kernel<kSlots, kAhead, kChunk, kRings>;
  [[maybe_unused]] static const bool ready = allow_smem(kernel, kSmem);
  kernel<<<ctas, kRings * 32, kSmem, st>>>(static_cast<const char*>(src), static_cast<char*>(dst), bytes);
  WEFT_CUDA_CHECK_LAUNCH();
}
void launch_ce(const void* src, void* dst, int64_t bytes, int /*ctas*/, cudaStream_t st) {
  WEFT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, st));
}

struct Variant { const char* kind; const char* name; LaunchFn launch; };
// Ring shapes: {slots, loads ahead, chunk, rings}. Loads in flight per CTA: 48 / 96 / 160 / 96 /
// 96 KB; the 4-warp variant has the fused ring's smem (192 KB) split over 4 issuing threads.
const Variant kVariants[] = {
    {"ce", "cudaMemcpyAsync", launch_ce},
    {"read", "U8", launch_ldst<kReadUnroll, false>},
    {"ldst", "U4", launch_ldst<4, true>},
    {"ldst", "U8", launch_ldst<8, true>},
    {"bulk", "r6x16K_ahead3", launch_bulk<6, 3, 16384, 1>},
    {"bulk", "r12x16K_ahead6_fused", launch_bulk<12, 6, 16384, 1>},
    {"bulk", "r12x16K_ahead10", launch_bulk<12, 10, 16384, 1>},
    {"bulk", "r4x48K_ahead2", launch_bulk<4, 2, 49152, 1>},
    {"bulk", "4warps_r6x8K_ahead3", launch_bulk<6, 3, 8192, 4>},
};

// After a copy, dst holds pattern(word, src_seed).
struct Direction { const char* name; const void* src; void* dst; uint32_t src_seed; bool needs_peer; };
struct Result { std::string kind, direction, variant; int ctas; double ms; bool ok; };

std::mutex g_results_mutex;
std::vector<Result> g_results;
std::string g_gpu_name = "unknown";
int g_num_gpus = 0;
bool g_peer = false;
const auto g_start = std::chrono::steady_clock::now();

double elapsed_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - g_start).count();
}

// Prints the JSON document of everything measured so far and exits (main, errors, watchdog).
[[noreturn]] void finish(const std::string& status, int code) {
  static std::mutex once;
  once.lock();  // never unlocked: the first caller exits, any other waits for that
  std::lock_guard<std::mutex> lock(g_results_mutex);
  std::string esc;
  for (char c : status) esc += (c == '"' || c == '\\') ? '\'' : (c == '\n' ? ' ' : c);
  std::printf("{\"gpu\": \"%s\", \"num_gpus\": %d, \"peer_access\": %s, \"status\": \"%s\",\n",
              g_gpu_name.c_str(), g_num_gpus, g_peer ? "true" : "false", esc.c_str());
  std::printf(" \"elapsed_s\": %.1f, \"warmups\": %d, \"timed_runs\": %d, \"cases\": [\n", elapsed_s(),
              kWarmups, kTimedRuns);
  for (size_t i = 0; i < g_results.size(); ++i) {
    const Result& r = g_results[i];
    const double gbps = kBufBytes / (r.ms * 1e-3) / 1e9;
    char per_cta[32] = "null";  // the copy engine uses no CTA
    if (r.ctas > 0) std::snprintf(per_cta, sizeof per_cta, "%.2f", gbps / r.ctas);
    std::printf("  {\"kind\": \"%s\", \"direction\": \"%s\", \"ctas\": %d, \"variant\": \"%s\", ",
                r.kind.c_str(), r.direction.c_str(), r.ctas, r.variant.c_str());
    std::printf("\"bytes\": %lld, \"ms\": %.4f, \"gbps\": %.2f, \"gbps_per_cta\": %s, \"ok\": %s}%s\n",
                static_cast<long long>(kBufBytes), r.ms, gbps, per_cta, r.ok ? "true" : "false",
                i + 1 < g_results.size() ? "," : "");
  }
  std::printf("]}\n");
  std::fflush(stdout);
  std::fprintf(stderr, "%s after %.1f s, %zu cases\n", status.c_str(), elapsed_s(), g_results.size());
  std::fflush(stderr);
  std::_Exit(code);  // no CUDA teardown: a hung kernel must not keep the process alive
}

// Word indices checked after a copy: first and last word of every part at every CTA count
// (x 4 for the 4-ring variant), where share/tail arithmetic goes wrong, plus random words.
std::vector<int64_t> sample_words() {
  const int64_t words = kBufBytes / 4, vecs = kBufBytes / 16;
  std::vector<int64_t> idx;
  for (int ctas : kCtaCounts)
    for (int64_t p = 0; p < 4 * ctas; ++p) {
      int64_t b, e;
      share_of(vecs, p, 4 * ctas, &b, &e);
      idx.push_back(4 * b);
      idx.push_back(4 * e - 1);
    }
  std::mt19937_64 rng(42);
  for (int i = 0; i < kRandomSamples; ++i) idx.push_back(static_cast<int64_t>(rng() % words));
  return idx;
}

struct Probe {
  cudaStream_t stream;
  cudaEvent_t start, stop;
  const int64_t* d_idx;  // device 0
  uint32_t* d_out;       // device 0
  std::vector<int64_t> idx;

  bool verify(const Variant& v, const Direction& d, int ctas) {
    const int n = static_cast<int>(idx.size());
    uint32_t* dst = static_cast<uint32_t*>(d.dst);
    sample_kernel<<<(n + 255) / 256, 256, 0, stream>>>(dst, d_idx, n, nullptr);
    WEFT_CUDA_CHECK_LAUNCH();
    v.launch(d.src, d.dst, kBufBytes, ctas, stream);
    sample_kernel<<<(n + 255) / 256, 256, 0, stream>>>(dst, d_idx, n, d_out);
    WEFT_CUDA_CHECK_LAUNCH();
    std::vector<uint32_t> got(n);
    WEFT_CUDA_CHECK(cudaMemcpyAsync(got.data(), d_out, n * sizeof(uint32_t), cudaMemcpyDeviceToHost, stream));
    WEFT_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (int i = 0; i < n; ++i)
      if (got[i] != pattern(idx[i], d.src_seed)) return false;
    return true;
  }

  void run_case(const Variant& v, const Direction& d, int ctas) {
    const bool is_copy = std::string(v.kind) != "read";
    bool ok = true;
    for (int w = 0; w < kWarmups; ++w)
      if (w == 0 && is_copy) ok = verify(v, d, ctas);
      else v.launch(d.src, d.dst, kBufBytes, ctas, stream);
    WEFT_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<float> ms(kTimedRuns);
    for (float& t : ms) {
      WEFT_CUDA_CHECK(cudaEventRecord(start, stream));
      v.launch(d.src, d.dst, kBufBytes, ctas, stream);
      WEFT_CUDA_CHECK(cudaEventRecord(stop, stream));
      WEFT_CUDA_CHECK(cudaEventSynchronize(stop));
      WEFT_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    }
    std::sort(ms.begin(), ms.end());
    const Result r{v.kind, d.name, v.name, ctas, ms[kTimedRuns / 2], ok};
    { std::lock_guard<std::mutex> lock(g_results_mutex); g_results.push_back(r); }
    const double gbps = kBufBytes / (r.ms * 1e-3) / 1e9;
    std::fprintf(stderr, "%-5s %-13s %-21s %4d %9.3f %8.1f %8.1f %s\n", r.kind.c_str(), r.direction.c_str(),
                 r.variant.c_str(), ctas, r.ms, gbps, ctas > 0 ? gbps / ctas : 0.0, ok ? "ok" : "FAIL");
  }
};

void run_all() {
  int num_gpus = 0;
  WEFT_CUDA_CHECK(cudaGetDeviceCount(&num_gpus));
  cudaDeviceProp prop{};
  WEFT_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  {
    std::lock_guard<std::mutex> lock(g_results_mutex);  // the watchdog may print them
    g_num_gpus = num_gpus;
    g_gpu_name = prop.name;
  }
  if (num_gpus >= 2) {
    int can01 = 0, can10 = 0;
    WEFT_CUDA_CHECK(cudaDeviceCanAccessPeer(&can01, 0, 1));
    WEFT_CUDA_CHECK(cudaDeviceCanAccessPeer(&can10, 1, 0));
    for (int dev = 0; dev < 2 && can01 && can10; ++dev) {
      WEFT_CUDA_CHECK(cudaSetDevice(dev));
      const cudaError_t e = cudaDeviceEnablePeerAccess(1 - dev, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();
      else WEFT_CUDA_CHECK(e);
    }
    std::lock_guard<std::mutex> lock(g_results_mutex);
    g_peer = can01 && can10;
  }
  std::fprintf(stderr, "gpu: %s, gpus: %d, peer access: %s\n", g_gpu_name.c_str(), g_num_gpus,
               g_peer ? "yes" : "no (only local cases)");
  // Source buffers hold pattern(word, seed); seed 1 on device 0, seed 2 on device 1.
  std::vector<DeviceAllocation> bufs;  // src0, dst0 [, src1, dst1]
  for (int dev = 0; dev < (g_peer ? 2 : 1); ++dev) {
    WEFT_CUDA_CHECK(cudaSetDevice(dev));
    bufs.emplace_back(kBufBytes);
    bufs.emplace_back(kBufBytes);
    fill_kernel<<<1024, 256>>>(bufs[bufs.size() - 2].as<uint32_t>(), kBufBytes / 4, 1 + dev);
    WEFT_CUDA_CHECK_LAUNCH();
    WEFT_CUDA_CHECK(cudaDeviceSynchronize());
  }
  WEFT_CUDA_CHECK(cudaSetDevice(0));
  Probe probe;
  probe.idx = sample_words();
  DeviceAllocation d_idx(probe.idx.size() * sizeof(int64_t)), d_out(probe.idx.size() * sizeof(uint32_t));
  DeviceAllocation sink(sizeof(uint32_t) * 64);  // the read kernel's sink: one word per CTA
  WEFT_CUDA_CHECK(cudaMemcpy(d_idx.get(), probe.idx.data(), d_idx.bytes(), cudaMemcpyHostToDevice));
  probe.d_idx = d_idx.as<int64_t>();
  probe.d_out = d_out.as<uint32_t>();
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&probe.stream, cudaStreamNonBlocking));
  WEFT_CUDA_CHECK(cudaEventCreate(&probe.start));
  WEFT_CUDA_CHECK(cudaEventCreate(&probe.stop));

  void *const src0 = bufs[0].get(), *const dst0 = bufs[1].get();
  void *const src1 = g_peer ? bufs[2].get() : nullptr, *const dst1 = g_peer ? bufs[3].get() : nullptr;
  const std::vector<Direction> copy_dirs = {{"local->local", src0, dst0, 1, false},
                                            {"local->peer", src0, dst1, 1, true},
                                            {"peer->local", src1, dst0, 2, true}};
  const std::vector<Direction> read_dirs = {{"local", src0, sink.get(), 1, false},
                                            {"peer", src1, sink.get(), 2, true}};
  std::fprintf(stderr, "%-5s %-13s %-21s %4s %9s %8s %8s\n", "kind", "direction", "variant", "ctas", "ms",
               "GB/s", "GB/s/CTA");
  for (const Variant& v : kVariants) {
    const bool is_read = std::string(v.kind) == "read", is_ce = std::string(v.kind) == "ce";
    for (const Direction& d : is_read ? read_dirs : copy_dirs) {
      if (d.needs_peer && !g_peer) continue;
      for (int ctas : kCtaCounts) {
        if (elapsed_s() > kCaseDeadlineS) finish("time budget reached: later cases not run", 0);
        probe.run_case(v, d, is_ce ? 0 : ctas);
        if (is_ce) break;  // the copy engine uses no CTA: one case per direction
      }
    }
  }
  finish(g_peer ? "complete" : "complete (one GPU or no peer access: local cases only)", 0);
}

}  // namespace

int main() {
  std::thread([] {
    std::this_thread::sleep_for(std::chrono::seconds(kWatchdogS));
    finish("watchdog: over " + std::to_string(kWatchdogS) + " s, stopped", 3);
  }).detach();
  try {
    run_all();
  } catch (const std::exception& e) {
    finish(std::string("error: ") + e.what(), 1);
  }
}
