// Entry points of BatchDecodeWrapper for the library's own callers that the public API does not
// offer (detail::DecodeWrapperAccess is a friend of the wrapper; defined in wrapper.cpp).
#pragma once
#include <cuda_runtime_api.h>

#include "weft/decode.h"

namespace weft::detail {

struct DecodeWrapperAccess {
  // run(q, cache, table, out, lse, stream) with the decode kernel launched programmatically after
  // the kernel just before it on `stream` (decode::LaunchArgs::programmatic): the POD wrapper's SM
  // partition, right after its capped sm90 prefill, whose CTAs trigger their dependents at their
  // start. Same checks and outputs as run().
  static void run_after_trigger(BatchDecodeWrapper& w, const TensorView& q, const PagedKVCache& cache,
                                const PageTable& table, const TensorView& out, const TensorView* lse,
                                cudaStream_t stream);
};

}  // namespace weft::detail
