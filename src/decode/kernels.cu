// Decode kernel instantiations (from instances.inc) and their launcher.
#include <mutex>

#include "attention/merge.cuh"
#include "common/cuda_check.h"
#include "decode/decode_tc.cuh"
#include "decode/launch.h"

namespace weft::decode {
namespace {

template <class T, int D>
void launch_tc(const DecodeParams<T>& p, int grid, cudaStream_t stream) {
  using L = SmemLayout<T, D>;
  static std::once_flag once;
  std::call_once(once, [] {
    WEFT_CUDA_CHECK(cudaFuncSetAttribute(decode_tc_kernel<T, D>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(L::kBytes)));
  });
  decode_tc_kernel<T, D><<<grid, kThreads, L::kBytes, stream>>>(p);
  WEFT_CUDA_CHECK_LAUNCH();
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
  return p;
}

template <class T>
void dispatch(const LaunchArgs& a, cudaStream_t stream) {
  const DecodeParams<T> p = make_params<T>(a);
#define WEFT_DECODE_INSTANCE(TYPE, DIM, PATH)                                               \
  if (std::is_same_v<T, TYPE> && a.head_dim == DIM && a.path == DecodePath::kTensorCore &&    \
      #PATH[0] == 'T') {                                                                      \
    if constexpr (std::is_same_v<T, TYPE>) return launch_tc<TYPE, DIM>(p, a.grid, stream);    \
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

int ctas_per_sm(int32_t head_dim, int device) {
  int n = 0;
  // Also raises the dynamic shared memory limit of both dtypes' kernels here (wrapper
  // construction), so the first run() never does it inside a CUDA-graph capture.
  auto query = [&](auto kernel, auto kernel_f16, size_t smem) {
    WEFT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    WEFT_CUDA_CHECK(cudaFuncSetAttribute(kernel_f16, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    WEFT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, smem));
  };
  (void)device;
  switch (head_dim) {
    case 64: query(decode_tc_kernel<__nv_bfloat16, 64>, decode_tc_kernel<half, 64>, SmemLayout<half, 64>::kBytes); break;
    case 128: query(decode_tc_kernel<__nv_bfloat16, 128>, decode_tc_kernel<half, 128>, SmemLayout<half, 128>::kBytes); break;
    case 256: query(decode_tc_kernel<__nv_bfloat16, 256>, decode_tc_kernel<half, 256>, SmemLayout<half, 256>::kBytes); break;
    default: throw Error("head_dim", "expected 64, 128 or 256, got " + std::to_string(head_dim));
  }
  return n < 1 ? 1 : n;
}

bool path_compiled(DecodePath path) { return path == DecodePath::kTensorCore; }

}  // namespace weft::decode
