#include "prefill/prefill_params.h"

#include <cstring>

#include "attention/merge.cuh"
#include "attention/variant_host.h"

namespace weft::prefill {

void set_paged_kv(PrefillParams& p, const PagedKVCache& cache, const PageTable& table, int64_t page_size) {
  const bool nhd = cache.layout == KVLayout::kNHD;
  p.k = cache.k_pages.data;
  p.v = cache.v_pages.data;
  p.k_page_stride = cache.k_pages.strides[0];
  p.k_slot_stride = cache.k_pages.strides[nhd ? 1 : 2];
  p.k_head_stride = cache.k_pages.strides[nhd ? 2 : 1];
  p.v_page_stride = cache.v_pages.strides[0];
  p.v_slot_stride = cache.v_pages.strides[nhd ? 1 : 2];
  p.v_head_stride = cache.v_pages.strides[nhd ? 2 : 1];
  p.paged = 1;
  p.page_size = static_cast<int32_t>(page_size);
  p.page_shift = -1;
  for (int sh = 0; sh < 31; ++sh)
    if ((int64_t(1) << sh) == page_size) p.page_shift = sh;
  p.page_indptr = table.indptr.device;
  p.page_indices = table.indices.device;
  p.k_rows = cache.k_pages.shape[0];
  p.v_rows = cache.v_pages.shape[0];
  // fp8 pools (validate_paged_kv: both scales present, size 1 or num_kv_heads): per-head stride 1,
  // one scale per pool 0. 16-bit pools: none.
  p.k_scale = cache.k_scale.device;
  p.v_scale = cache.v_scale.device;
  p.k_scale_stride = cache.k_scale.size > 1 ? 1 : 0;
  p.v_scale_stride = cache.v_scale.size > 1 ? 1 : 0;
}

void set_plan(PrefillParams& p, const PrefillWorkspaceLayout& layout, void* workspace, int32_t group_size) {
  p.plan = layout.plan.pointers(workspace);
  const char* ws = static_cast<const char*>(workspace);
  p.seg_request = reinterpret_cast<const int32_t*>(ws + layout.off_seg_request);
  p.seg_token0 = reinterpret_cast<const int32_t*>(ws + layout.off_seg_token0);
  p.seg_pos0 = reinterpret_cast<const int32_t*>(ws + layout.off_seg_pos0);
  p.real_kv_len = reinterpret_cast<const int32_t*>(ws + layout.off_real_kv_len);
  p.group_size = group_size;
  p.head_fold = layout.plan.bounds().head_fold;
}

void set_variant(PrefillParams& p, const AttentionVariant& variant, int32_t head_dim) {
  const attn::VariantParams vp = attn::variant_params(variant, head_dim);
  p.causal = vp.causal;
  p.window_left = vp.window_left;
  p.scale_log2 = vp.scale_log2;
  p.softcap_pre = vp.softcap_pre;
  p.softcap_post = vp.softcap_post;
  p.alibi_slopes = vp.alibi_slopes;
}

void segment_image(const PrefillWorkspaceLayout& layout, const SegmentedPlan& sp, const std::vector<int32_t>& kv_len,
                   std::vector<unsigned char>& out) {
  out.resize(layout.extra_bytes);
  segment_image(layout, sp, kv_len, out.data());
}

void segment_image(const PrefillWorkspaceLayout& layout, const SegmentedPlan& sp, const std::vector<int32_t>& kv_len,
                   unsigned char* out) {
  std::memset(out, 0, layout.extra_bytes);
  const std::size_t base = layout.off_seg_request;
  auto put = [&](std::size_t off, const std::vector<int32_t>& v) {
    if (!v.empty()) std::memcpy(out + (off - base), v.data(), v.size() * sizeof(int32_t));
  };
  put(layout.off_seg_request, sp.seg_request);
  put(layout.off_seg_token0, sp.seg_token0);
  put(layout.off_seg_pos0, sp.seg_pos0);
  put(layout.off_real_kv_len, kv_len);
}

void launch_merge(const PrefillParams& p, const TensorView& out, DType dtype, int32_t head_dim, int num_blocks,
                  cudaStream_t stream) {
  attn::MergeOutput mo;
  mo.o = out.data;
  mo.dtype = dtype;
  mo.o_stride_token = out.strides[0];
  mo.o_stride_head = out.strides[1];
  mo.lse = p.lse;
  mo.lse_stride_token = p.lse_stride_token;
  mo.head_dim = head_dim;
  mo.group_size = p.group_size;
  attn::launch_plan_merge(p.plan, mo, num_blocks, stream);
}

}  // namespace weft::prefill
