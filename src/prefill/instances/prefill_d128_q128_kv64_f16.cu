// Generated from WEFT_PREFILL_CONFIGS (src/prefill/prefill_config.h): one instantiation per file
// so the kernels compile in parallel. head_dim 128, CTA_Q 128, CTA_KV 64, f16.
#include "prefill/kernel/prefill_kernel.cuh"
#include "prefill/kernel/launch.h"

WEFT_PREFILL_INSTANCE(128, 128, 64, half)
