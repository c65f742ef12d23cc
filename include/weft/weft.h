// Umbrella header: everything a host program needs. Includes no CUDA device code.
#pragma once
#include "weft/config.h"  // generated: what this build of the library contains
#include "weft/attention.h"
#include "weft/decode.h"
#include "weft/dtype.h"
#include "weft/error.h"
#include "weft/jit.h"
#include "weft/merge.h"
#include "weft/export.h"
#include "weft/fp8.h"
#include "weft/norm.h"
#include "weft/paged_kv.h"
#include "weft/pod.h"
#include "weft/prefill.h"
#include "weft/tensor.h"
#include "weft/validate.h"
#include "weft/version.h"
// The comm component's headers exist (and are installed) only when the library was built with
// NCCL; comm.h includes nccl.h. The token-split planner is compiled in that component.
#if WEFT_HAS_COMM
#include "weft/comm.h"
#include "weft/token_split.h"
#endif
#if WEFT_HAS_TP
#include "weft/tp_layer.h"
#endif
