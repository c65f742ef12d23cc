// Host layouts of the built-in kernel parameter structs that JIT kernels extend (jit_impl.h
// base_layout): compiled by nvcc, since DecodeParams' header holds device code.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "decode/decode_params.cuh"
#include "jit/jit_impl.h"
#include "prefill/kernel/params.h"
#include "weft/error.h"

namespace weft::jit_detail {

BaseLayout base_layout(const KernelSpec& spec) {
  if (spec.kind.rfind("decode_", 0) == 0) {
    static_assert(sizeof(decode::DecodeParams<half>) == sizeof(decode::DecodeParams<__nv_bfloat16>), "");
    return {sizeof(decode::DecodeParams<half>), alignof(decode::DecodeParams<half>)};
  }
  if (spec.kind.rfind("prefill_", 0) == 0) return {sizeof(prefill::PrefillParams), alignof(prefill::PrefillParams)};
  throw Error("jit.kind", "unknown kernel kind " + spec.kind);
}

}  // namespace weft::jit_detail
