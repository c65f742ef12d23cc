// Pieces of a PrefillParams (kernel/params.h) from the host objects, shared by the prefill
// wrapper and the POD wrapper (which runs the same FA2 mainloop inside its fused kernel).
// Host only.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "prefill/kernel/params.h"
#include "prefill/prefill_plan.h"
#include "weft/attention.h"
#include "weft/dtype.h"
#include "weft/paged_kv.h"
#include "weft/tensor.h"

namespace weft::prefill {

// Paged K/V: pools (NHD or HND strides), page size and shift, the table's device arrays.
void set_paged_kv(PrefillParams& p, const PagedKVCache& cache, const PageTable& table, int64_t page_size);
// The plan and segment arrays of `layout` in the workspace at `workspace`, and the GQA group.
void set_plan(PrefillParams& p, const PrefillWorkspaceLayout& layout, void* workspace, int32_t group_size);
// The variant's runtime parameters (scale, soft cap, causal, window, ALiBi slopes).
void set_variant(PrefillParams& p, const AttentionVariant& variant, int32_t head_dim);
// Host image of the workspace's segment region (layout.extra_bytes from layout.off_seg_request):
// the plan's segment arrays and the real requests' kv lengths.
void segment_image(const PrefillWorkspaceLayout& layout, const SegmentedPlan& sp, const std::vector<int32_t>& kv_len,
                   std::vector<unsigned char>& out);
// The same into `out` (layout.extra_bytes bytes, e.g. a pinned staging buffer).
void segment_image(const PrefillWorkspaceLayout& layout, const SegmentedPlan& sp, const std::vector<int32_t>& kv_len,
                   unsigned char* out);
// The plan merge of split query tiles (attn::launch_plan_merge) into `out` [tokens, Hq, D] (and
// p.lse), on a fixed grid of `num_blocks` CTAs: reads the merge count on the device, so it is
// launched whenever the plan MAY split (fixed graph topology).
void launch_merge(const PrefillParams& p, const TensorView& out, DType dtype, int32_t head_dim, int num_blocks,
                  cudaStream_t stream);

}  // namespace weft::prefill
