// Ceilings measured in the same process as the cases, so every fraction_of_ceiling compares
// against what this GPU, driver and clock state actually deliver:
//   copy: cudaMemcpyAsync D2D of 2 GiB (bytes read + written)
//   read: a streaming-read kernel over 4 GiB (bytes read only): the bound for decode-like kernels
//   gemm: cuBLAS bf16 GEMM 8192^3 with fp32 accumulation: the bound for prefill-like kernels
// Plus the "ceiling_check" group: a plain copy kernel timed with the same method as every case,
// which should land near 1.0 of the copy ceiling (a sanity check of the timing method).
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "harness.h"
#include "weft/error.h"

namespace weft::bench {
namespace {

#define WEFT_BENCH_CUBLAS(expr)                                                           \
  do {                                                                                    \
    cublasStatus_t st_ = (expr);                                                          \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                     \
      throw ::weft::Error("cuBLAS", std::string(#expr) + " failed: " +                    \
                                        cublasGetStatusString(st_) + " at " __FILE__ ":" + \
                                        std::to_string(__LINE__));                        \
  } while (0)

constexpr std::size_t kGiB = std::size_t{1} << 30;

// 8 independent 16-byte loads per thread per iteration: 128 B in flight per thread, which with
// a full SM (2048 threads) is ~256 KiB outstanding per SM, enough to cover HBM latency.
constexpr int kReadUnroll = 8;
constexpr int kReadThreads = 256;

__global__ void __launch_bounds__(kReadThreads)
    stream_read_kernel(const uint4* __restrict__ in, std::size_t n_vec, uint32_t* __restrict__ out) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  uint32_t acc = 0;
  // Consecutive threads read consecutive 16-byte vectors: every warp load is 512 contiguous bytes.
  for (; i + (kReadUnroll - 1) * stride < n_vec; i += kReadUnroll * stride) {
    uint4 v[kReadUnroll];
#pragma unroll
    for (int u = 0; u < kReadUnroll; ++u) v[u] = __ldcs(in + i + u * stride);
#pragma unroll
    for (int u = 0; u < kReadUnroll; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n_vec; i += stride) {
    uint4 v = __ldcs(in + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  // One value per block: the loads feed a store, so the compiler cannot drop them.
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
  __shared__ uint32_t warp_acc[kReadThreads / 32];
  if ((threadIdx.x & 31) == 0) warp_acc[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t b = 0;
    for (int w = 0; w < kReadThreads / 32; ++w) b ^= warp_acc[w];
    out[blockIdx.x] = b;
  }
}

// One-shot tiles: each block reads one contiguous 32 KiB tile (8 vectors per thread, spaced a
// block apart so every warp load stays 512 contiguous bytes) and exits; the hardware block
// scheduler keeps SMs full. DRAM sees long contiguous runs, as a decode kernel streaming whole
// pages does.
__global__ void __launch_bounds__(kReadThreads)
    tile_read_kernel(const uint4* __restrict__ in, std::size_t n_vec, uint32_t* __restrict__ out) {
  const std::size_t base = static_cast<std::size_t>(blockIdx.x) * kReadThreads * kReadUnroll + threadIdx.x;
  uint4 v[kReadUnroll];
#pragma unroll
  for (int u = 0; u < kReadUnroll; ++u) {
    const std::size_t i = base + static_cast<std::size_t>(u) * kReadThreads;
    v[u] = i < n_vec ? __ldcs(in + i) : make_uint4(0, 0, 0, 0);
  }
  uint32_t acc = 0;
#pragma unroll
  for (int u = 0; u < kReadUnroll; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  // Almost never true (data is a constant fill), but the compiler cannot know: keeps the loads.
  if (acc == 0x12345678u) out[blockIdx.x & 1023] = acc;
}

// Block-contiguous chunks: block b streams [b*chunk, (b+1)*chunk) with 8 loads in flight per
// thread, one persistent wave of blocks.
__global__ void __launch_bounds__(kReadThreads)
    chunk_read_kernel(const uint4* __restrict__ in, std::size_t n_vec, uint32_t* __restrict__ out) {
  const std::size_t chunk = (n_vec + gridDim.x - 1) / gridDim.x;
  const std::size_t begin = static_cast<std::size_t>(blockIdx.x) * chunk;
  const std::size_t end = begin + chunk < n_vec ? begin + chunk : n_vec;
  uint32_t acc = 0;
  std::size_t i = begin + threadIdx.x;
  for (; i + (kReadUnroll - 1) * kReadThreads < end; i += kReadUnroll * kReadThreads) {
    uint4 v[kReadUnroll];
#pragma unroll
    for (int u = 0; u < kReadUnroll; ++u) v[u] = __ldcs(in + i + u * kReadThreads);
#pragma unroll
    for (int u = 0; u < kReadUnroll; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < end; i += kReadThreads) {
    uint4 v = __ldcs(in + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) out[blockIdx.x & 1023] = acc;
}

// Plain grid-stride copy, 4 x 16-byte vectors per thread per iteration.
constexpr int kCopyUnroll = 4;
__global__ void __launch_bounds__(256)
    copy_kernel(const uint4* __restrict__ in, uint4* __restrict__ out, std::size_t n_vec) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (kCopyUnroll - 1) * stride < n_vec; i += kCopyUnroll * stride) {
    uint4 v[kCopyUnroll];
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u) v[u] = __ldcs(in + i + u * stride);
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u) __stcs(out + i + u * stride, v[u]);
  }
  for (; i < n_vec; i += stride) __stcs(out + i, __ldcs(in + i));
}

double measure_copy(Context& ctx) {
  const std::size_t bytes = 2 * kGiB;
  DeviceArray src(bytes), dst(bytes);
  WEFT_BENCH_CUDA(cudaMemset(src.get(), 0x5A, bytes));
  double ms = ctx.time_ms(
      [&](cudaStream_t s) {
        WEFT_BENCH_CUDA(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, s));
      },
      3, 20);
  return 2.0 * static_cast<double>(bytes) / ms / 1e6;
}

double measure_read(Context& ctx) {
  const std::size_t bytes = 4 * kGiB;
  DeviceArray buf(bytes);
  WEFT_BENCH_CUDA(cudaMemset(buf.get(), 0x5A, bytes));
  const std::size_t n_vec = bytes / sizeof(uint4);
  // Blocks per SM: 8 x 256 threads fills an SM (2048 threads); 4 is tried too because fewer,
  // longer-lived blocks sometimes stream better. The best median is the ceiling.
  const int ks[] = {4, 8};
  DeviceArray out(sizeof(uint32_t) * static_cast<std::size_t>(ctx.sm_count()) * 8);
  double best = 0;
  for (int k : ks) {
    const unsigned grid = static_cast<unsigned>(ctx.sm_count() * k);
    double ms = ctx.time_ms(
        [&](cudaStream_t s) {
          stream_read_kernel<<<grid, kReadThreads, 0, s>>>(buf.as<const uint4>(), n_vec,
                                                           out.as<uint32_t>());
        },
        3, 20);
    best = std::max(best, static_cast<double>(bytes) / ms / 1e6);
  }
  // The read ceiling is the best of several access patterns, so that no kernel's pattern can
  // beat it merely by being friendlier to DRAM than the ceiling's.
  DeviceArray sink(sizeof(uint32_t) * 1024);
  const unsigned tiles = static_cast<unsigned>((n_vec + kReadThreads * kReadUnroll - 1) / (kReadThreads * kReadUnroll));
  best = std::max(best, static_cast<double>(bytes) / ctx.time_ms([&](cudaStream_t s) {
    tile_read_kernel<<<tiles, kReadThreads, 0, s>>>(buf.as<const uint4>(), n_vec, sink.as<uint32_t>());
  }, 3, 20) / 1e6);
  for (int k : {2, 4, 8}) {
    const unsigned grid = static_cast<unsigned>(ctx.sm_count() * k);
    best = std::max(best, static_cast<double>(bytes) / ctx.time_ms([&](cudaStream_t s) {
      chunk_read_kernel<<<grid, kReadThreads, 0, s>>>(buf.as<const uint4>(), n_vec, sink.as<uint32_t>());
    }, 3, 20) / 1e6);
  }
  WEFT_BENCH_CUDA(cudaGetLastError());
  return best;
}

double measure_gemm(Context& ctx) {
  const int m = 8192, n = 8192, k = 8192;
  const std::size_t elems = static_cast<std::size_t>(m) * k;  // all three are 8192^2
  DeviceArray a(elems * 2), b(elems * 2), c(elems * 2), ws(std::size_t{64} << 20);
  fill_random(a.get(), elems, weft::DType::kBFloat16, 101);
  fill_random(b.get(), elems, weft::DType::kBFloat16, 202);
  cublasHandle_t h = nullptr;
  WEFT_BENCH_CUBLAS(cublasCreate(&h));
  struct Guard {
    cublasHandle_t h;
    ~Guard() { cublasDestroy(h); }
  } guard{h};
  WEFT_BENCH_CUBLAS(cublasSetStream(h, ctx.stream()));
  WEFT_BENCH_CUBLAS(cublasSetWorkspace(h, ws.get(), ws.bytes()));
  const float alpha = 1.f, beta = 0.f;
  double ms = ctx.time_ms(
      [&](cudaStream_t) {  // cuBLAS is bound to ctx.stream(), which is the stream passed here
        WEFT_BENCH_CUBLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, a.get(),
                                       CUDA_R_16BF, m, b.get(), CUDA_R_16BF, k, &beta, c.get(),
                                       CUDA_R_16BF, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      },
      3, 20);
  WEFT_BENCH_CUDA(cudaStreamSynchronize(ctx.stream()));
  return 2.0 * m * n * static_cast<double>(k) / ms / 1e9;
}

}  // namespace

double plain_read_ms(Context& ctx, std::size_t bytes, int copies, int runs) {
  WEFT_CHECK_ARG(copies >= 1 && runs >= 1, "copies/runs", "must be >= 1, got " << copies << ", " << runs);
  std::vector<DeviceArray> bufs;
  for (int c = 0; c < copies; ++c) {
    bufs.emplace_back(bytes);
    WEFT_BENCH_CUDA(cudaMemset(bufs.back().get(), 0x5A, bytes));
  }
  DeviceArray sink(sizeof(uint32_t) * 1024);
  DeviceArray out(sizeof(uint32_t) * static_cast<std::size_t>(ctx.sm_count()) * 8);
  const std::size_t n_vec = bytes / sizeof(uint4);
  // One launch per run, run i on copy i % copies; several runs are captured into one graph (as
  // the steady-state decode rows are), so that the host's launch rate never shows in the time.
  auto timed = [&](const std::function<void(const uint4*, cudaStream_t)>& launch_one) {
    if (runs == 1) return ctx.time_ms([&](cudaStream_t s) { launch_one(bufs[0].as<const uint4>(), s); });
    double ms = 0;
    with_graph(
        ctx, [&](cudaStream_t st) { for (int i = 0; i < runs; ++i) launch_one(bufs[i % copies].as<const uint4>(), st); },
        [&](const LaunchFn& launch) { ms = ctx.time_ms(launch) / runs; });
    return ms;
  };
  double best = 1e30;
  for (int k : {2, 4}) {  // one persistent wave: block-contiguous chunks
    const unsigned grid = static_cast<unsigned>(ctx.sm_count() * k);
    best = std::min(best, timed([&](const uint4* buf, cudaStream_t s) {
      chunk_read_kernel<<<grid, kReadThreads, 0, s>>>(buf, n_vec, sink.as<uint32_t>());
    }));
  }
  for (int k : {4, 8}) {  // grid-stride
    const unsigned grid = static_cast<unsigned>(ctx.sm_count() * k);
    best = std::min(best, timed([&](const uint4* buf, cudaStream_t s) {
      stream_read_kernel<<<grid, kReadThreads, 0, s>>>(buf, n_vec, out.as<uint32_t>());
    }));
  }
  WEFT_BENCH_CUDA(cudaGetLastError());
  return best;
}

void Context::measure_ceilings() {
  std::printf("measuring ceilings (copy 2 GiB memcpy, 4 GiB streaming read, bf16 GEMM 8192^3)...\n");
  std::fflush(stdout);
  ceilings_.copy_gbps = measure_copy(*this);
  ceilings_.read_gbps = measure_read(*this);
  ceilings_.gemm_tflops = measure_gemm(*this);
  std::printf("ceilings: copy %.1f GB/s, read %.1f GB/s, gemm %.1f TFLOP/s\n", ceilings_.copy_gbps,
              ceilings_.read_gbps, ceilings_.gemm_tflops);
  std::fflush(stdout);
}

}  // namespace weft::bench

// Sanity check of the timing method: a copy kernel should reach ~1.0 of the memcpy ceiling.
WEFT_BENCH_GROUP(ceiling_check) {
  using namespace weft::bench;
  Result r;
  r.name = "ceiling_check/copy_kernel/1GiB";
  if (!ctx.wants(r.name)) return;
  const std::size_t bytes = std::size_t{1} << 30;
  DeviceArray src(bytes), dst(bytes);
  fill_random(src.get(), bytes / 4, weft::DType::kFloat32, 7);
  const std::size_t n_vec = bytes / sizeof(uint4);
  const unsigned grid = static_cast<unsigned>(ctx.sm_count() * 8);  // 8 x 256 threads per SM
  r.params = {{"bytes", std::to_string(bytes)}, {"grid", std::to_string(grid)}};
  r.ms = ctx.time_ms([&](cudaStream_t s) {
    copy_kernel<<<grid, 256, 0, s>>>(src.as<const uint4>(), dst.as<uint4>(), n_vec);
  });
  r.bytes = 2.0 * static_cast<double>(bytes);
  r.ceiling = "copy";
  ctx.report(r);
}
