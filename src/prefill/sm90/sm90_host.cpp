// Hopper prefill, host side: eligibility and the (head_dim, dtype) table (the tensor maps:
// src/attention/sm90_tensor_maps.cpp).
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/cuda_check.h"
#include "prefill/sm90/sm90_launch.h"
#include "prefill/sm90/sm90_params.h"
#include "weft/error.h"

namespace weft::prefill::sm90 {

namespace {
std::atomic<uint64_t> g_launches{0};
}  // namespace
uint64_t launch_count() { return g_launches.load(); }
void note_launch() { g_launches.fetch_add(1); }

Entry find(int32_t head_dim, DType dtype, DType kv_dtype) {
  const bool bf16 = dtype == DType::kBFloat16;
  if (kv_dtype != dtype) {  // fp8 pools: bf16 q / out at head_dim 128 (compile time: 2 kernels)
    if (!bf16 || head_dim != 128) return {};
    if (kv_dtype == DType::kFloat8E4M3)
      return {&launch_prefill_sm90<128, __nv_bfloat16, __nv_fp8_e4m3>, &occupancy_prefill_sm90<128, __nv_bfloat16, __nv_fp8_e4m3>};
    if (kv_dtype == DType::kFloat8E5M2)
      return {&launch_prefill_sm90<128, __nv_bfloat16, __nv_fp8_e5m2>, &occupancy_prefill_sm90<128, __nv_bfloat16, __nv_fp8_e5m2>};
    return {};
  }
  if (head_dim == 128) {
    if (bf16) return {&launch_prefill_sm90<128, __nv_bfloat16, __nv_bfloat16>, &occupancy_prefill_sm90<128, __nv_bfloat16, __nv_bfloat16>};
    return {&launch_prefill_sm90<128, half, half>, &occupancy_prefill_sm90<128, half, half>};
  }
  if (head_dim == 256) {
    if (bf16) return {&launch_prefill_sm90<256, __nv_bfloat16, __nv_bfloat16>, &occupancy_prefill_sm90<256, __nv_bfloat16, __nv_bfloat16>};
    return {&launch_prefill_sm90<256, half, half>, &occupancy_prefill_sm90<256, half, half>};
  }
  if (head_dim == 64) {
    if (bf16) return {&launch_prefill_sm90<64, __nv_bfloat16, __nv_bfloat16>, &occupancy_prefill_sm90<64, __nv_bfloat16, __nv_bfloat16>};
    return {&launch_prefill_sm90<64, half, half>, &occupancy_prefill_sm90<64, half, half>};
  }
  return {};
}

bool shape_supported(int32_t head_dim, DType dtype, int32_t group_size, bool paged, int64_t page_size,
                     DType kv_dtype) {
  if (dtype != DType::kBFloat16 && dtype != DType::kFloat16) return false;
  if (find(head_dim, dtype, kv_dtype).launch == nullptr) return false;
  if (kv_dtype != dtype && !paged) return false;  // fp8: paged pools only (the maps of make_tensor_maps)
  return tile_fits(head_dim, group_size, paged, page_size);
}

bool eligible(int device, int32_t head_dim, DType dtype, int32_t group_size, bool paged,
              int64_t page_size, DType kv_dtype) {
  if (!shape_supported(head_dim, dtype, group_size, paged, page_size, kv_dtype)) return false;
  int major = 0, minor = 0;
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (major != 9 || minor != 0) return false;
  // The library must hold sm_90a code for this kernel (a build for other targets compiles an
  // empty stub): occupancy_prefill_sm90 returns 0 then.
  int prev = 0;
  WEFT_CUDA_CHECK(cudaGetDevice(&prev));
  if (prev != device) WEFT_CUDA_CHECK(cudaSetDevice(device));
  const int occ = find(head_dim, dtype, kv_dtype).occupancy();
  if (prev != device) WEFT_CUDA_CHECK(cudaSetDevice(prev));
  return occ >= 1;
}

}  // namespace weft::prefill::sm90
