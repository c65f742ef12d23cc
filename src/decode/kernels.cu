// Decode kernel instantiations (the decode rows of src/instances.txt, WEFT_DECODE_INSTANCES of
// the generated weft_gen/instances.h) and their launcher.
#include <algorithm>
#include <string>
#include <type_traits>

#include "attention/heuristics.h"
#include "attention/merge.cuh"
#include "common/cuda_check.h"
#include "common/pdl_launch.h"
#include "decode/decode_cc.cuh"
#include "decode/decode_tc.cuh"
#include "decode/launch.h"
#include "decode/trace.h"
#include "weft_gen/instances.h"

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

// V: the attention variant (attention/variant.cuh), chosen per launch by launch_path.
// KV: the pools' element type (T, or fp8: the same kernels with dequantized tiles, decode_params.cuh).
// programmatic: LaunchArgs::programmatic (the kernels' last CTA waits for the grid before them).
template <class T, int D, class V, class KV>
void launch_variant(const DecodeParams<T, KV>& p, DecodePath path, int tile_rows, int grid, bool programmatic,
                    cudaStream_t stream) {
  // The dynamic shared memory limit was raised by ctas_per_sm() (wrapper construction), and the
  // fixed grid is the smallest residency of all kernels of this head_dim.
  // Tensor cores: one n8 tile of query columns covers groups <= 8, two cover 9..16 and the
  // 16-row tiles of larger groups at D256, four the 32-row items (tile_rows 32).
  if constexpr (D <= 128) {
    if (tile_rows == kPlanTileQWide) {
      const size_t smem = SmemLayout<T, D, kPlanTileQWide>::bytes(p.stages, p.warps);
      if (programmatic)
        launch_programmatic(decode_tc_kernel<T, D, 4, V, false, KV>, dim3(grid), dim3(p.warps * 32), smem, stream, p);
      else
        decode_tc_kernel<T, D, 4, V, false, KV><<<grid, p.warps * 32, smem, stream>>>(p);
      WEFT_CUDA_CHECK_LAUNCH();
      return;
    }
  }
  auto kernel = path == DecodePath::kCudaCore ? decode_cc_kernel<T, D, V, KV>
                : p.group_size <= 8            ? decode_tc_kernel<T, D, 1, V, false, KV>
                                               : decode_tc_kernel<T, D, 2, V, false, KV>;
  const size_t smem = SmemLayout<T, D>::bytes(p.stages, p.warps);
  if (programmatic)
    launch_programmatic(kernel, dim3(grid), dim3(p.warps * 32), smem, stream, p);
  else
    kernel<<<grid, p.warps * 32, smem, stream>>>(p);
  WEFT_CUDA_CHECK_LAUNCH();
}

// Every kernel exists per variant: the default one (scale, soft cap; windows are trimmed by the
// plan) and ALiBi (slopes given). The default kernels compute nothing per element for the bias.
// fp8 pools: the default variant only (run() rejects ALiBi with an fp8 cache: fewer instances).
template <class T, int D, class KV>
void launch_path(const DecodeParams<T, KV>& p, DecodePath path, int tile_rows, int grid, bool programmatic,
                 cudaStream_t stream) {
  if constexpr (std::is_same_v<T, KV>) {
    if (p.var.alibi_slopes != nullptr)
      return launch_variant<T, D, attn::AlibiVariant>(p, path, tile_rows, grid, programmatic, stream);
  }
  launch_variant<T, D, attn::DefaultVariant>(p, path, tile_rows, grid, programmatic, stream);
}

int log2_exact(int32_t x) {
  if (x <= 0 || (x & (x - 1)) != 0) return -1;
  int s = 0;
  while ((1 << s) < x) ++s;
  return s;
}

}  // namespace

template <class T, class KV>
DecodeParams<T, KV> make_decode_params(const LaunchArgs& a) {
  DecodeParams<T, KV> p;
  p.plan = a.plan;
  p.kv = a.blocks != nullptr ? paged::make_paged_kv<KV>(*a.cache, *a.blocks) : paged::make_paged_kv<KV>(*a.cache, *a.table);
  if constexpr (!std::is_same_v<T, KV>) {  // validated by run(): sizes 1 or num_kv_heads
    p.k_scale = a.cache->k_scale.device;
    p.v_scale = a.cache->v_scale.device;
    p.k_scale_stride = a.cache->k_scale.size > 1 ? 1 : 0;
    p.v_scale_stride = a.cache->v_scale.size > 1 ? 1 : 0;
  }
  p.q = static_cast<const T*>(a.q->data);
  p.q_stride_token = a.q->strides[0];
  p.q_stride_head = a.q->strides[1];
  p.o = static_cast<T*>(a.out->data);
  p.o_stride_token = a.out->strides[0];
  p.o_stride_head = a.out->strides[1];
  p.lse = a.lse != nullptr ? static_cast<float*>(a.lse->data) : nullptr;
  p.lse_stride_token = a.lse != nullptr ? a.lse->strides[0] : 0;
  p.group_size = a.group_size;
  p.var = a.var;
  p.page_shift = log2_exact(p.kv.table.page_size);
  p.stages = a.stages;
  p.warps = a.warps;
  return p;
}
template DecodeParams<half, half> make_decode_params<half, half>(const LaunchArgs&);
template DecodeParams<__nv_bfloat16, __nv_bfloat16> make_decode_params<__nv_bfloat16, __nv_bfloat16>(const LaunchArgs&);

namespace {

constexpr DecodePath path_of(const char* tag) {
  return tag[0] == 'C' ? DecodePath::kCudaCore : DecodePath::kTensorCore;
}

template <class T>
void dispatch(const LaunchArgs& a, cudaStream_t stream) {
  // 16-bit pools always have q's dtype (run() checks it), whatever a.kv_dtype was left at.
  const DType kv = a.kv_dtype == DType::kFloat8E4M3 || a.kv_dtype == DType::kFloat8E5M2 ? a.kv_dtype : a.dtype;
#define WEFT_DECODE_INSTANCE(TYPE, KV_TYPE, DIM, PATH)                                                     \
  if (std::is_same_v<T, TYPE> && kv == detail::TypeOf<KV_TYPE>::value && a.head_dim == DIM &&               \
      a.path == path_of(#PATH)) {                                                                           \
    if constexpr (std::is_same_v<T, TYPE>)                                                                  \
      return launch_path<TYPE, DIM>(make_decode_params<TYPE, KV_TYPE>(a), a.path, a.tile_rows, a.grid, a.programmatic, \
                                    stream);                                                                      \
  }
  WEFT_DECODE_INSTANCES(WEFT_DECODE_INSTANCE)
#undef WEFT_DECODE_INSTANCE
  throw Error("head_dim", "no decode kernel compiled for head_dim " + std::to_string(a.head_dim) + ", KV dtype " +
                              dtype_name(a.kv_dtype) + " and path " + decode_path_name(a.path));
}

}  // namespace

void launch_decode(const LaunchArgs& a, cudaStream_t stream) {
  WEFT_DISPATCH_HALF_TYPES(a.dtype, "q", [&] { dispatch<scalar_t>(a, stream); });
}

// The tuned defaults and their measurements: src/attention/heuristics.cpp.
int decode_stages(int32_t head_dim) { return heuristics::decode_default_stages(head_dim); }
int decode_warps(int32_t head_dim) { return heuristics::decode_default_warps(head_dim); }
static_assert(kDecodeMaxWarpsPerCta == kMaxWarps && kDecodeMaxPipelineStages == kMaxStages,
              "DecodeOptions' ranges (weft/decode.h) are the kernels' limits");

namespace {
// Residency query of the fp8-KV kernels of one instance row (nothing for 16-bit rows: their
// kernels are queried with the variant lists below).
template <class T, class KV, int D, class Query>
void query_quantized_kv(Query& query, int32_t stages, int32_t warps) {
  if constexpr (!std::is_same_v<T, KV>) {
    using V = attn::DefaultVariant;
    query(SmemLayout<T, D>::bytes(stages, warps), decode_tc_kernel<T, D, 1, V, false, KV>,
          decode_tc_kernel<T, D, 2, V, false, KV>, decode_cc_kernel<T, D, V, KV>);
    if constexpr (D <= 128)
      query(SmemLayout<T, D, kPlanTileQWide>::bytes(stages, warps), decode_tc_kernel<T, D, 4, V, false, KV>);
  }
}
}  // namespace

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
// Both variants' kernels (attention/variant.cuh): default and ALiBi.
#define WEFT_DECODE_KERNELS_V(DIM, V)                                                                     \
  decode_tc_kernel<__nv_bfloat16, DIM, 1, V>, decode_tc_kernel<half, DIM, 1, V>,                         \
      decode_tc_kernel<__nv_bfloat16, DIM, 2, V>, decode_tc_kernel<half, DIM, 2, V>,                     \
      decode_cc_kernel<__nv_bfloat16, DIM, V>, decode_cc_kernel<half, DIM, V>
#define WEFT_DECODE_KERNELS(DIM)                                                          \
  SmemLayout<half, DIM>::bytes(stages, warps), WEFT_DECODE_KERNELS_V(DIM, attn::DefaultVariant), \
      WEFT_DECODE_KERNELS_V(DIM, attn::AlibiVariant)
// The 32-row tensor-core kernels (D <= 128) have larger Q buffers: their own smem size.
#define WEFT_DECODE_WIDE_KERNELS(DIM) \
  SmemLayout<half, DIM, kPlanTileQWide>::bytes(stages, warps), decode_tc_kernel<__nv_bfloat16, DIM, 4>, \
      decode_tc_kernel<half, DIM, 4>, decode_tc_kernel<__nv_bfloat16, DIM, 4, attn::AlibiVariant>,     \
      decode_tc_kernel<half, DIM, 4, attn::AlibiVariant>
  switch (head_dim) {
    case 64: query(WEFT_DECODE_KERNELS(64)); query(WEFT_DECODE_WIDE_KERNELS(64)); break;
    case 128: query(WEFT_DECODE_KERNELS(128)); query(WEFT_DECODE_WIDE_KERNELS(128)); break;
    case 256: query(WEFT_DECODE_KERNELS(256)); break;
    default: throw Error("head_dim", "expected 64, 128 or 256, got " + std::to_string(head_dim));
  }
  // The fp8-KV kernels of the instance table (rows with dtype_kv != dtype_q; default variant):
  // same shared memory as the 16-bit ones (the tiles are widened in place), their own registers.
#define WEFT_DECODE_INSTANCE(TYPE, KV_TYPE, DIM, PATH) \
  if (head_dim == DIM) query_quantized_kv<TYPE, KV_TYPE, DIM>(query, stages, warps);
  WEFT_DECODE_INSTANCES(WEFT_DECODE_INSTANCE)
#undef WEFT_DECODE_INSTANCE
#undef WEFT_DECODE_KERNELS
#undef WEFT_DECODE_KERNELS_V
#undef WEFT_DECODE_WIDE_KERNELS
  return n_min < 1 ? 1 : n_min;
}

bool path_compiled(DecodePath path) {
  // Whether the instance table (src/instances.txt) has a decode row of this path.
#define WEFT_DECODE_INSTANCE(TYPE, KV_TYPE, DIM, PATH) \
  if (path == path_of(#PATH)) return true;
  WEFT_DECODE_INSTANCES(WEFT_DECODE_INSTANCE)
#undef WEFT_DECODE_INSTANCE
  return false;
}

bool kv_dtype_compiled(DType q, DType kv, int32_t head_dim, DecodePath path) {
#define WEFT_DECODE_INSTANCE(TYPE, KV_TYPE, DIM, PATH)                                                  \
  if (q == detail::TypeOf<TYPE>::value && kv == detail::TypeOf<KV_TYPE>::value && head_dim == DIM &&     \
      path == path_of(#PATH))                                                                           \
    return true;
  WEFT_DECODE_INSTANCES(WEFT_DECODE_INSTANCE)
#undef WEFT_DECODE_INSTANCE
  return false;
}

}  // namespace weft::decode
