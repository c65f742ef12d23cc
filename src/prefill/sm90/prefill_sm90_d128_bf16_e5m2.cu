// Hopper (sm_90a) prefill kernel, head_dim 128, bf16 q / out on fp8 e5m2 K/V pools (sm90_fp8.cuh):
// one instantiation per file.
#include <cuda_fp8.h>

#include "prefill/sm90/sm90_kernel.cuh"

WEFT_PREFILL_SM90_INSTANCE_KV(128, __nv_bfloat16, __nv_fp8_e5m2)
