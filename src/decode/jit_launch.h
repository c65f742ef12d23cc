// Internal: decode with a run-time compiled variant (weft/jit.h), between the wrapper
// (wrapper.cpp) and jit_launch.cu. Kept out of launch.h so that the kernel files do not see weft::jit.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "decode/launch.h"
#include "jit/jit_impl.h"

namespace weft::decode {

// Run-time compiled variants (weft/jit.h; jit_launch.cu): the specialization a plan of this
// path / item height / group needs, its dynamic shared memory, and its launch (the plan's user
// parameters in `params`, after the DecodeParams this builds).
jit_detail::KernelSpec jit_kernel_spec(DecodePath path, int32_t tile_rows, int32_t group_size, int32_t head_dim,
                                       DType dtype);
std::size_t jit_smem_bytes(const jit_detail::KernelSpec& spec, int32_t stages, int32_t warps);
void launch_decode_jit(const LaunchArgs& args, const jit_detail::LoadedKernel& k, jit_detail::ParamBlock& params,
                       std::size_t smem, cudaStream_t stream);

}  // namespace weft::decode
