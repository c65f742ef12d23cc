// Declarations of the per-instantiation entry points (defined, one configuration per file, in
// the .cu files CMake generates from src/instances.txt, via WEFT_PREFILL_INSTANCE). Included by
// the dispatcher, which never sees device code, so only the instance files pay for compiling the
// kernel.
#pragma once
#include <cuda_runtime_api.h>

#include "prefill/kernel/params.h"

namespace weft::prefill {

template <int HEAD_DIM, int CTA_Q, int CTA_KV, class T, class KV>
struct PrefillTraits;

template <class Tr>
void launch_batch_prefill(const PrefillParams& p, int num_ctas, cudaStream_t stream);
template <class Tr>
int occupancy_batch_prefill();

}  // namespace weft::prefill

// Explicit instantiation of one configuration (the only line of an instance file).
#define WEFT_PREFILL_INSTANCE(D, Q, KV, T, TKV)                                                   \
  namespace weft::prefill {                                                                     \
  template void launch_batch_prefill<PrefillTraits<D, Q, KV, T, TKV>>(const PrefillParams&, int, \
                                                                      cudaStream_t);           \
  template int occupancy_batch_prefill<PrefillTraits<D, Q, KV, T, TKV>>();                      \
  }
