// Programmatic dependent launch (sm_90+): a kernel launched through launch_programmatic may be
// scheduled before the kernel ahead of it on the stream has finished (once every CTA of that one
// executed ptx::grid_launch_dependents or exited); it orders itself against it on the device
// (ptx::grid_dependency_wait, which also makes the earlier grid's memory visible; common/ptx.cuh). Captured into CUDA
// graphs as a programmatic edge. Used by the prefill plan's merge (attention/merge.cu) and the
// decode kernel beside the wide-pack kernel (decode/kernels_packed.cu).
#pragma once
#include <cuda_runtime.h>

#include <utility>

#include "common/cuda_check.h"

namespace weft {

template <class... KArgs, class... Args>
void launch_programmatic(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                         Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  WEFT_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace weft
