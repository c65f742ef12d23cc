// Decode kernel instantiations (from instances.inc) and their launcher.
#include <algorithm>
#include <cstdlib>
#include <string>

#include "attention/merge.cuh"
#include "common/cuda_check.h"
#include "decode/decode_cc.cuh"
#include "decode/decode_tc.cuh"
#include "decode/launch.h"
#include "decode/trace.h"

namespace weft::decode {

#if WEFT_DECODE_TRACE
bool trace_compiled() { return true; }
std::vector<TraceRecord> trace_read(int ctas) {
  std::vector<TraceRecord> r(static_cast<size_t>(std::clamp(ctas, 0, kTraceMaxCtas)));
  WEFT_CUDA_CHECK(cudaMemcpyFromSymbol(r.data(), g_trace, r.size() * sizeof(TraceRecord)));
  return r;
}
#else
bool trace_compiled() { return false; }
std::vector<TraceRecord> trace_read(int) { return {}; }
#endif

namespace {

template <class T, int D>
void launch_path(const DecodeParams<T>& p, DecodePath path, int tile_rows, int grid, cudaStream_t stream) {
  // The dynamic shared memory limit was raised by ctas_per_sm() (wrapper construction), and the
  // fixed grid is the smallest residency of all kernels of this head_dim.
  // Tensor cores: one n8 tile of query columns covers groups <= 8, two cover 9..16 and the
  // 16-row tiles of larger groups at D256, four the 32-row items (tile_rows 32).
  if constexpr (D <= 128) {
    if (tile_rows == kPlanTileQWide) {
      decode_tc_kernel<T, D, 4><<<grid, p.warps * 32, SmemLayout<T, D, kPlanTileQWide>::bytes(p.stages, p.warps),
                                  stream>>>(p);
      WEFT_CUDA_CHECK_LAUNCH();
      return;
    }
  }
  auto kernel = path == DecodePath::kCudaCore ? decode_cc_kernel<T, D>
                : p.group_size <= 8            ? decode_tc_kernel<T, D, 1>
                                               : decode_tc_kernel<T, D, 2>;
  kernel<<<grid, p.warps * 32, SmemLayout<T, D>::bytes(p.stages, p.warps), stream>>>(p);
  WEFT_CUDA_CHECK_LAUNCH();
}

int log2_exact(int32_t x) {
  if (x <= 0 || (x & (x - 1)) != 0) return -1;
  int s = 0;
  while ((1 << s) < x) ++s;
  return s;
}

template <class T>
DecodeParams<T> make_params(const LaunchArgs& a) {
  DecodeParams<T> p;
  p.plan = a.plan;
  p.kv = paged::make_paged_kv<T>(*a.cache, *a.table);
  p.q = static_cast<const T*>(a.q->data);
  p.q_stride_token = a.q->strides[0];
  p.q_stride_head = a.q->strides[1];
  p.o = static_cast<T*>(a.out->data);
  p.o_stride_token = a.out->strides[0];
  p.o_stride_head = a.out->strides[1];
  p.lse = a.lse != nullptr ? static_cast<float*>(a.lse->data) : nullptr;
  p.lse_stride_token = a.lse != nullptr ? a.lse->strides[0] : 0;
  p.group_size = a.group_size;
  const double log2e = 1.4426950408889634;
  p.sm_scale = static_cast<float>(a.sm_scale);
  p.scale_log2 = static_cast<float>(a.sm_scale * log2e);
  p.soft_cap = a.soft_cap;
  p.cap_log2 = static_cast<float>(a.soft_cap * log2e);
  p.page_shift = log2_exact(p.kv.table.page_size);
  p.stages = a.stages;
  p.warps = a.warps;
  return p;
}

constexpr DecodePath path_of(const char* tag) {
  return tag[0] == 'C' ? DecodePath::kCudaCore : DecodePath::kTensorCore;
}

template <class T>
void dispatch(const LaunchArgs& a, cudaStream_t stream) {
  const DecodeParams<T> p = make_params<T>(a);
#define WEFT_DECODE_INSTANCE(TYPE, DIM, PATH)                                                   \
  if (std::is_same_v<T, TYPE> && a.head_dim == DIM && a.path == path_of(#PATH)) {                 \
    if constexpr (std::is_same_v<T, TYPE>) return launch_path<TYPE, DIM>(p, a.path, a.tile_rows, a.grid, stream); \
  }
#include "decode/instances.inc"
#undef WEFT_DECODE_INSTANCE
  throw Error("head_dim", "no decode kernel compiled for head_dim " + std::to_string(a.head_dim) +
                              " and path " + decode_path_name(a.path));
}

}  // namespace

void launch_decode(const LaunchArgs& a, cudaStream_t stream) {
  WEFT_DISPATCH_HALF_TYPES(a.dtype, "q", [&] { dispatch<scalar_t>(a, stream); });
}

int decode_stages(int32_t head_dim) {
  (void)head_dim;
  // Per-warp stages: S = 2 at every head dim (one 16-key tile in flight while the warp computes
  // the other), 4 warps per CTA:
  //   D64:  2 x 4 KB  x 4 warps = 32 KB / CTA -> 2 CTAs/SM (bound by registers)
  //   D128: 2 x 8 KB  x 4 warps = 64 KB / CTA -> 2 CTAs/SM (the CUDA-core kernel's 227 registers)
  //   D256: 2 x 16 KB x 4 warps = 128 KB / CTA -> 1 CTA/SM
  // (+ 2 Q buffers and the epilogue's m/l). More stages do not help: a warp's later prologue
  // copies wait in the issue queue until the memory system drains (per-CTA timeline,
  // perf-notes-decode.md, change 14), so the CTA starts computing later. Same-call A/Bs on H200:
  // D128 S = 3 -> 2: faster on 23 of 24 tensor-core rows (b1 1.3-6%, b32/kv4K 1.8%) and 16 of 19
  // CUDA-core rows, the others within 0.35% (change 14). D64 S = 6 -> 2: 7% (b1/kv32K), 3%
  // (b32/kv4K), 2% (b128/kv4K) faster, S = 3 and 4 in between; D256 S = 3 -> 2: 0.8% faster at
  // b1/kv32K, within 0.2% at b32/kv4K and b128/kv4K (change 16). S = 4 at D128 (1 CTA/SM) fell
  // to ~2.3 TB/s.
  int s = 2;
  if (const char* env = std::getenv("WEFT_DECODE_STAGES")) {
    const int v = std::atoi(env);
    if (v >= 2 && v <= kMaxStages) s = v;
  }
  return s;
}

int decode_warps(int32_t head_dim) {
  (void)head_dim;
  // 4 warps x 2 CTAs/SM (D <= 128), see decode_stages. Measured on H200 (perf-notes-decode.md):
  // 8 warps x 1 CTA/SM and 4 warps x S=2 were no better overall.
  int w = 4;
  if (const char* env = std::getenv("WEFT_DECODE_WARPS")) {
    const int v = std::atoi(env);
    if (v >= 2 && v <= kMaxWarps) w = v;
  }
  return w;
}

int ctas_per_sm(int32_t head_dim, int32_t stages, int32_t warps, int device) {
  int n = 0;
  int optin = 0;
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  // Raise every kernel's (both dtypes, both paths) limit to the device maximum, so any stage
  // count launches later; the grid is the smaller residency of the two paths (the path is
  // chosen at plan time, the grid is fixed at construction).
  int n_min = 1 << 30;
  auto query = [&](size_t smem, auto... kernels) {
    WEFT_CHECK_ARG(smem <= size_t(optin), "stages",
                   stages << " stages need " << smem << " bytes of shared memory, the device allows " << optin);
    for (const void* k : {reinterpret_cast<const void*>(kernels)...}) {
      WEFT_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
      WEFT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, warps * 32, smem));
      n_min = std::min(n_min, n);
    }
  };
#define WEFT_DECODE_KERNELS(DIM)                                                                     \
  SmemLayout<half, DIM>::bytes(stages, warps), decode_tc_kernel<__nv_bfloat16, DIM, 1>,                    \
      decode_tc_kernel<half, DIM, 1>, decode_tc_kernel<__nv_bfloat16, DIM, 2>, decode_tc_kernel<half, DIM, 2>, \
      decode_cc_kernel<__nv_bfloat16, DIM>, decode_cc_kernel<half, DIM>
// The 32-row tensor-core kernels (D <= 128) have larger Q buffers: their own smem size.
#define WEFT_DECODE_WIDE_KERNELS(DIM) \
  SmemLayout<half, DIM, kPlanTileQWide>::bytes(stages, warps), decode_tc_kernel<__nv_bfloat16, DIM, 4>, \
      decode_tc_kernel<half, DIM, 4>
  switch (head_dim) {
    case 64: query(WEFT_DECODE_KERNELS(64)); query(WEFT_DECODE_WIDE_KERNELS(64)); break;
    case 128: query(WEFT_DECODE_KERNELS(128)); query(WEFT_DECODE_WIDE_KERNELS(128)); break;
    case 256: query(WEFT_DECODE_KERNELS(256)); break;
    default: throw Error("head_dim", "expected 64, 128 or 256, got " + std::to_string(head_dim));
  }
#undef WEFT_DECODE_KERNELS
#undef WEFT_DECODE_WIDE_KERNELS
  return n_min < 1 ? 1 : n_min;
}

bool path_compiled(DecodePath path) {
  return path == DecodePath::kTensorCore || path == DecodePath::kCudaCore;
}

}  // namespace weft::decode
