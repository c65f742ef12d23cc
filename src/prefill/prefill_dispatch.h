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

// Throws weft::Error("head_dim" / "dtype", ...) when (cfg, dtype, kv_dtype) is not instantiated.
// kv_dtype: the K/V element type, dtype itself or (fp8 pools) kFloat8E4M3 / kFloat8E5M2.
KernelEntry find_kernel(const TileConfig& cfg, DType dtype, DType kv_dtype);
// The same, empty (null launch) when not instantiated.
KernelEntry lookup_kernel(const TileConfig& cfg, DType dtype, DType kv_dtype);

}  // namespace weft::prefill
