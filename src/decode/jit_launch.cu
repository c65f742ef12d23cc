// Decode with a run-time compiled variant (weft/jit.h): which JIT specialization a plan needs
// (the same choice as kernels.cu launch_variant makes among the ahead-of-time kernels) and its
// launch with the plan's user parameters.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "decode/decode_common.cuh"
#include "decode/jit_launch.h"

namespace weft::decode {

jit_detail::KernelSpec jit_kernel_spec(DecodePath path, int32_t tile_rows, int32_t group_size, int32_t head_dim,
                                       DType dtype) {
  jit_detail::KernelSpec s;
  s.dtype = dtype == DType::kFloat16 ? "f16" : "bf16";
  s.head_dim = head_dim;
  if (head_dim <= 128 && tile_rows == kPlanTileQWide) s.kind = "decode_tc4";
  else if (path == DecodePath::kCudaCore) s.kind = "decode_cc";
  else s.kind = group_size <= 8 ? "decode_tc1" : "decode_tc2";
  return s;
}

std::size_t jit_smem_bytes(const jit_detail::KernelSpec& spec, int32_t stages, int32_t warps) {
  // Same sizes for both 16-bit types; the 4-tile kernel has 32-row Q buffers.
  const bool wide = spec.kind == "decode_tc4";
  switch (spec.head_dim) {
    case 64: return wide ? SmemLayout<half, 64, kPlanTileQWide>::bytes(stages, warps) : SmemLayout<half, 64>::bytes(stages, warps);
    case 128: return wide ? SmemLayout<half, 128, kPlanTileQWide>::bytes(stages, warps) : SmemLayout<half, 128>::bytes(stages, warps);
    default: return SmemLayout<half, 256>::bytes(stages, warps);
  }
}

void launch_decode_jit(const LaunchArgs& a, const jit_detail::LoadedKernel& k, jit_detail::ParamBlock& params,
                       std::size_t smem, cudaStream_t stream) {
  if (a.dtype == DType::kFloat16) {
    const DecodeParams<half> p = make_decode_params<half, half>(a);
    params.set_base(&p, sizeof(p));
  } else {
    const DecodeParams<__nv_bfloat16> p = make_decode_params<__nv_bfloat16, __nv_bfloat16>(a);
    params.set_base(&p, sizeof(p));
  }
  jit_detail::launch(k, params, dim3(a.grid), dim3(a.warps * 32), smem, stream);
}

}  // namespace weft::decode
