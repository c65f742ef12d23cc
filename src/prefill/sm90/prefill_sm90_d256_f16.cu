// Hopper (sm_90a) prefill kernel, head_dim 256, f16: one instantiation per file.
#include "prefill/sm90/sm90_kernel.cuh"

WEFT_PREFILL_SM90_INSTANCE(256, half)
