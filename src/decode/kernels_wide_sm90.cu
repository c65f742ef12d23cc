// Wide packs on the Hopper prefill mainloop (src/prefill/sm90/: TMA + wgmma, two consumer
// warpgroups x 64 rows, 128-key tiles) where its Q boxes can load the wide items' rows
// (plan::wide_rows_loadable: whole GQA groups; at groups < 8 consecutive requests too). Why: the
// FA2 128-row tile of kernels_wide.cu is bound by its mma.sync tensor work on wide nodes (docs/perf-notes-decode.md "PAT wide packs"); the
// sm90 mainloop runs the same 128-row x 128-key tiles at its wgmma rate.
//
// Rows policy of prefill_sm90_kernel (WideSm90Rows, as the FA2 one's WidePackRows):
//   items     CTA c runs the work plan's wide items wide_cta_indptr[c] .. [c + 1] - 1 (the
//             planner's deal; the launch has the decode grid's CTAs, so at one sm90 CTA per SM
//             they run in waves of one per SM);
//   Q         a decode batch has one query token per request, so the rows (request j, head h of
//             the group) of one request are the group's heads of one token of Q. GQA group >= 8:
//             one TMA box {64 columns, group heads, 1 token} per request of the item (q_token; a
//             box is >= 1024 bytes, whole 128-byte-swizzle atoms), any request order. Smaller
//             groups: the kernel's own box {64, group heads, 128 / group tokens} from the item's
//             first request (geometry's token_abs0), so the item's requests must be consecutive
//             (plan::wide_rows_contiguous); tile rows past the item read other requests' rows or
//             TMA's zero fill and are never written;
//   K / V     the item's page range through the kernel's paged boxes (ItemGeom::kv_base = the
//             item's page base into the page table, keys [kv_begin, kv_end), tiles from the
//             128-key multiple below kv_begin, keys outside masked);
//   write     WidePackRows::write: fp32 O and base-2 LSE of row r at partial row slot *
//             tile_rows + r, merged by the work plan's merge as the FA2 wide items are;
//   no in-kernel merge (the work plan's merge runs after the decode kernel), and the tensor maps
//             are the kernel parameters' (no per-CTA staging: the extents are the run's Q tokens
//             and the pools' pages, fixed for a captured launch).
// Instances: d128 x {fp16, bf16} (wide packs exist at head_dim 128 only), built for sm_90a
// (a stub elsewhere: wide_sm90_device() is then false).
#include "common/cuda_check.h"
#include "decode/decode_params.cuh"
#include "decode/launch.h"
#include "decode/wide_pack.cuh"
#include "prefill/sm90/sm90_kernel.cuh"

namespace weft::decode {

namespace {

struct WideSm90Rows : WidePackRows {
  static constexpr bool kStageMaps = false;
  // The overlapped launch (DecodeOptions::prefix_wide_overlap): the decode kernel after this one
  // may start at once, as with the FA2 wide kernel.
  static constexpr bool kTriggerDependents = true;
  // GQA group >= 8: Q gathered, one box of one token x group heads per request of the item.
  static constexpr bool kGatherQ = true;
  // No ALiBi step (launch_decode_wide_sm90 rejects ALiBi): the consumer's bias branch is not
  // compiled in.
  static constexpr bool kBias = false;

  __device__ __forceinline__ prefill::CtaItems items(const prefill::PrefillParams&) const {
    const int c = static_cast<int>(blockIdx.x);
    return {work.wide_cta_indptr[c], work.wide_cta_indptr[c + 1], 0};
  }
  __device__ __forceinline__ prefill::ItemGeom geometry(const prefill::PrefillParams& p, int w, int fold) const {
    prefill::ItemGeom g = WidePackRows::geometry(p, w, fold);
    g.token_abs0 = __ldg(work.req_list + g.seg + g.token0 / p.group_size);  // row_begin 0: the Q box's first token
    return g;
  }
  // Token (request) of tile rows j * group .. j * group + group - 1: the item's j-th request; rows
  // past the item read its first request again (never written).
  __device__ __forceinline__ int q_token(const prefill::PrefillParams& p, const prefill::ItemGeom& g, int j) const {
    const int n = (g.row_end + p.group_size - 1) / p.group_size;
    return __ldg(work.req_list + g.seg + g.token0 / p.group_size + (j < n ? j : 0));
  }
  template <class T, int D>
  __device__ __forceinline__ void merge(const prefill::PrefillParams&, const prefill::CtaItems&, int) const {}
};

constexpr int kD = kWidePackHeadDim;
template <class T>
using Cfg = prefill::sm90::CfgOf<kD, T, T, prefill::sm90::kPipelineVariant>;
template <class T>
const void* wide_sm90_kernel() {
  return reinterpret_cast<const void*>(
      prefill::sm90::prefill_sm90_kernel<kD, T, T, prefill::sm90::kPipelineVariant, WideSm90Rows>);
}

template <class T>
void launch_wide_sm90(const LaunchArgs& a, const plan::WorkPlanPointers& work, cudaStream_t stream) {
  const DecodeParams<T, T> d = make_decode_params<T, T>(a);
  prefill::sm90::KernelParams kp{};
  kp.p = wide_pack_params(d, a);
  prefill::sm90::Shapes s;
  s.q_rows = a.q->size(0);
  s.num_qo_heads = static_cast<int32_t>(a.q->size(1));
  s.num_kv_heads = static_cast<int32_t>(a.cache->num_kv_heads());
  s.k_rows = a.cache->num_pages();
  s.v_rows = a.cache->num_pages();
  s.q_box_tokens = a.group_size >= kWideSm90GatherGroup ? 1 : 0;  // WideSm90Rows::kGatherQ
  prefill::sm90::make_tensor_maps(kp, s, a.dtype, a.dtype, kD);
  WideSm90Rows rows;
  rows.work = work;
  rows.q = d.q;
  rows.q_stride_token = d.q_stride_token;
  rows.q_stride_head = d.q_stride_head;
  prefill::sm90::prefill_sm90_kernel<kD, T, T, prefill::sm90::kPipelineVariant, WideSm90Rows>
      <<<a.grid, Cfg<T>::kThreads, Cfg<T>::kSmemBytes, stream>>>(kp, rows);
  WEFT_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool wide_sm90_shape(int32_t group_size, int64_t page_size, DType dtype) {
  return wide_packs_compiled(kD, dtype) && prefill::sm90::tile_fits(kD, group_size, /*paged=*/true, page_size);
}

bool wide_sm90_device() {
  int dev = 0, major = 0, minor = 0;
  WEFT_CUDA_CHECK(cudaGetDevice(&dev));
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  if (major != 9 || minor != 0) return false;
  // A build without sm_90a code compiles a trapping stub (a handful of registers, as
  // prefill::sm90::occupancy_variant tells them apart).
  cudaFuncAttributes attr{};
  WEFT_CUDA_CHECK(cudaFuncGetAttributes(&attr, wide_sm90_kernel<__nv_bfloat16>()));
  return attr.numRegs >= 64;
}

void prepare_decode_wide_sm90() {
  WEFT_CUDA_CHECK(cudaFuncSetAttribute(wide_sm90_kernel<half>(), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       Cfg<half>::kSmemBytes));
  WEFT_CUDA_CHECK(cudaFuncSetAttribute(wide_sm90_kernel<__nv_bfloat16>(),
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg<__nv_bfloat16>::kSmemBytes));
}

void launch_decode_wide_sm90(const LaunchArgs& a, const plan::WorkPlanPointers& work, cudaStream_t stream) {
  WEFT_CHECK_ARG(wide_sm90_shape(a.group_size, a.cache->page_size(), a.dtype), "head_dim",
                 "the sm90 wide packs run head_dim 128, fp16 / bf16, a GQA group dividing 128 and pages "
                 "tiling 128 keys");
  WEFT_CHECK_ARG(a.kv_dtype == a.dtype, "cache", "wide packs read 16-bit pools of q's dtype");
  WEFT_CHECK_ARG(a.var.alibi_slopes == nullptr && a.var.window_left < 0 && a.var.custom_mask == nullptr, "variant",
                 "wide packs run neither ALiBi, a sliding window nor a custom mask");
  if (a.dtype == DType::kFloat16)
    launch_wide_sm90<half>(a, work, stream);
  else
    launch_wide_sm90<__nv_bfloat16>(a, work, stream);
}

}  // namespace weft::decode
