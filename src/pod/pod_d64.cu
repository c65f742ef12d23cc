// Fused POD kernel instances, head_dim 64 (both dtypes).
#include "pod/pod_kernels.cuh"
WEFT_POD_INSTANCE(64)
