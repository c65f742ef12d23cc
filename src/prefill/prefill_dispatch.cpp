// The dispatch table: every (configuration, dtype) of WEFT_PREFILL_INSTANCES, the prefill rows of
// src/instances.txt. Each entry refers to the launcher explicitly instantiated in the .cu file
// CMake generated for that row.
#include "prefill/prefill_dispatch.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <type_traits>

#include "prefill/kernel/launch.h"
#include "weft/error.h"

namespace weft::prefill {

namespace {

// DType of an instance's element type (host side: no device headers).
template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return DType::kBFloat16;
  else if constexpr (std::is_same_v<T, half>) return DType::kFloat16;
  else if constexpr (std::is_same_v<T, __nv_fp8_e4m3>) return DType::kFloat8E4M3;
  else return DType::kFloat8E5M2;
}

}  // namespace

KernelEntry lookup_kernel(const TileConfig& cfg, DType dtype, DType kv_dtype) {
#define WEFT_X(D, Q, KV, T, TKV)                                                                 \
  if (cfg.head_dim == D && cfg.cta_q == Q && cfg.cta_kv == KV && dtype_of<T>() == dtype && \
      dtype_of<TKV>() == kv_dtype)                                                    \
    return {&launch_batch_prefill<PrefillTraits<D, Q, KV, T, TKV>>,                               \
            &occupancy_batch_prefill<PrefillTraits<D, Q, KV, T, TKV>>};
  WEFT_PREFILL_INSTANCES(WEFT_X)
#undef WEFT_X
  return {};
}

KernelEntry find_kernel(const TileConfig& cfg, DType dtype, DType kv_dtype) {
  WEFT_CHECK_ARG(dtype == DType::kFloat16 || dtype == DType::kBFloat16, "dtype",
                 "expected f16 or bf16, got " << dtype_name(dtype));
  const KernelEntry e = lookup_kernel(cfg, dtype, kv_dtype);
  if (e.launch == nullptr)
    throw Error("head_dim", "no prefill kernel instantiated for " + describe(cfg) + ", " + dtype_name(dtype) +
                                " q/o and " + dtype_name(kv_dtype) + " K/V");
  return e;
}

}  // namespace weft::prefill
