// The dispatch table: every (configuration, dtype) of WEFT_PREFILL_CONFIGS. Each entry refers
// to the launcher explicitly instantiated in src/prefill/instances/ (missing file = link error).
#include "prefill/prefill_dispatch.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "prefill/kernel/launch.h"
#include "weft/error.h"

namespace weft::prefill {

KernelEntry find_kernel(const TileConfig& cfg, DType dtype) {
  WEFT_CHECK_ARG(dtype == DType::kFloat16 || dtype == DType::kBFloat16, "dtype",
                 "expected f16 or bf16, got " << dtype_name(dtype));
  const bool bf16 = dtype == DType::kBFloat16;
#define WEFT_X(D, Q, KV)                                                                   \
  if (cfg.head_dim == D && cfg.cta_q == Q && cfg.cta_kv == KV) {                          \
    if (bf16)                                                                             \
      return {&launch_batch_prefill<PrefillTraits<D, Q, KV, __nv_bfloat16>>,              \
              &occupancy_batch_prefill<PrefillTraits<D, Q, KV, __nv_bfloat16>>};          \
    return {&launch_batch_prefill<PrefillTraits<D, Q, KV, half>>,                         \
            &occupancy_batch_prefill<PrefillTraits<D, Q, KV, half>>};                     \
  }
  WEFT_PREFILL_CONFIGS(WEFT_X)
#undef WEFT_X
  throw Error("head_dim", "no prefill kernel instantiated for " + describe(cfg));
}

}  // namespace weft::prefill
