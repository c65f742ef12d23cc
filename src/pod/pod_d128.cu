// Fused POD kernel instances, head_dim 128 (both dtypes).
#include "pod/pod_kernels.cuh"
WEFT_POD_INSTANCE(128)
