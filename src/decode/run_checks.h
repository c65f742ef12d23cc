// Internal: the run-time checks every decode entry point makes before a launch (the balanced /
// prefix-sharing wrapper and the work queue), each throwing weft::Error naming the argument.
#pragma once
#include <cstdint>

#include "weft/dtype.h"
#include "weft/paged_kv.h"
#include "weft/tensor.h"

namespace weft::decode {

// What a plan fixed and run() must see again.
struct PlannedShape {
  int64_t batch = 0;
  int32_t num_qo_heads = 0, num_kv_heads = 0, head_dim = 0, page_size = 0;
  DType dtype = DType::kBFloat16;
  KVLayout layout = KVLayout::kNHD;
  bool lse_required = false;  // the planned variant has return_lse
};

// q, out [batch, Hq, D] in the planned dtype (inner stride 1, 16-byte aligned rows); lse
// [batch, Hq] f32 (inner stride 1, 4-byte aligned) or null unless required.
void check_views(const PlannedShape& s, const TensorView& q, const TensorView& out, const TensorView* lse);
// The cache (already validated with its page table) against the plan: dtype, layout, page size,
// heads, head_dim. fp8_ok: fp8 pools (weft/fp8.h) pass the dtype check too (the caller checks
// that it has kernels for them); otherwise the pools must have the planned dtype.
void check_cache(const PlannedShape& s, const PagedKVCache& cache, bool fp8_ok = false);

}  // namespace weft::decode
