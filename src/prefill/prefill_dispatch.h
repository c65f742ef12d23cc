// Host-side dispatch from a runtime (TileConfig, dtype) to the instantiated kernel launcher.
#pragma once
#include <cuda_runtime_api.h>

#include "prefill/kernel/params.h"
#include "prefill/prefill_config.h"
#include "weft/dtype.h"

namespace weft::prefill {

struct KernelEntry {
  void (*launch)(const PrefillParams&, int, cudaStream_t) = nullptr;
  int (*occupancy)() = nullptr;
};

// Throws weft::Error("head_dim" / "dtype", ...) when (cfg, dtype) is not instantiated.
KernelEntry find_kernel(const TileConfig& cfg, DType dtype);

}  // namespace weft::prefill
