// Generated from WEFT_PREFILL_CONFIGS (src/prefill/prefill_config.h): one instantiation per file
// so the kernels compile in parallel. head_dim 256, CTA_Q 16, CTA_KV 32, bf16.
#include "prefill/kernel/prefill_kernel.cuh"
#include "prefill/kernel/launch.h"

WEFT_PREFILL_INSTANCE(256, 16, 32, __nv_bfloat16)
