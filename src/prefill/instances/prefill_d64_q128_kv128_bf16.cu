// Generated from WEFT_PREFILL_CONFIGS (src/prefill/prefill_config.h): one instantiation per file
// so the kernels compile in parallel. head_dim 64, CTA_Q 128, CTA_KV 128, bf16.
#include "prefill/kernel/prefill_kernel.cuh"
#include "prefill/kernel/launch.h"

WEFT_PREFILL_INSTANCE(64, 128, 128, __nv_bfloat16)
