// The dispatch table: every (configuration, dtype) of WEFT_PREFILL_INSTANCES, the prefill rows of
// src/instances.txt. Each entry refers to the launcher explicitly instantiated in the .cu file
// CMake generated for that row.
#include "prefill/prefill_dispatch.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "prefill/kernel/launch.h"
#include "weft/error.h"

namespace weft::prefill {

KernelEntry find_kernel(const TileConfig& cfg, DType dtype) {
  WEFT_CHECK_ARG(dtype == DType::kFloat16 || dtype == DType::kBFloat16, "dtype",
                 "expected f16 or bf16, got " << dtype_name(dtype));
  const bool bf16 = dtype == DType::kBFloat16;
#define WEFT_X(D, Q, KV, T)                                                                    \
  if (cfg.head_dim == D && cfg.cta_q == Q && cfg.cta_kv == KV && std::is_same_v<T, __nv_bfloat16> == bf16) \
    return {&launch_batch_prefill<PrefillTraits<D, Q, KV, T>>, &occupancy_batch_prefill<PrefillTraits<D, Q, KV, T>>};
  WEFT_PREFILL_INSTANCES(WEFT_X)
#undef WEFT_X
  throw Error("head_dim", "no prefill kernel instantiated for " + describe(cfg) + " and " + dtype_name(dtype));
}

}  // namespace weft::prefill
