// The wide-pack kernel of the decode work plans (decode/wide_pack.cuh): the prefill FA2 item
// mainloop over the work plan's wide items (packs of more than tile_rows rows), Q gathered from
// the pack's requests, partial states into the work plan's slots. Its own translation unit (two
// instances: d128 fp16 / bf16), compiled in parallel with the decode kernels.
//
// Tile: PrefillTraits<128, 128, 64>, the FA2 d128 tile of the prefill family (4 warps x 32 rows,
// KV tile 64, 112 KB shared memory, two CTAs per SM at 255 registers: instances.txt, prefill
// rows). 128 rows = kWidePackRows: a wide node's keys are read once per 128 rows instead of once
// per 32 (decode::pack_tile_rows), and each K/V fragment read from shared memory feeds 4 MMAs
// (the 32-row warps of the prefill tile). Other head dims have no wide packs (the wrapper leaves
// PackPlanConfig::wide_rows at 0).
#include "common/cuda_check.h"
#include "decode/decode_params.cuh"
#include "decode/launch.h"
#include "decode/wide_pack.cuh"

namespace weft::decode {

namespace {

template <class T>
using WideTile = prefill::PrefillTraits<128, kWidePackRows, 64, T>;
static_assert(WideTile<half>::kWarpsKV == 1 && WideTile<half>::kRowsPerWarp == 32, "the 4 x 32-row FA2 tile");

template <class T>
void launch_wide(const LaunchArgs& a, const plan::WorkPlanPointers& work, cudaStream_t stream) {
  using Tr = WideTile<T>;
  const DecodeParams<T, T> d = make_decode_params<T, T>(a);
  const prefill::PrefillParams p = wide_pack_params(d, a);
  WidePackRows rows;
  rows.work = work;
  rows.q = d.q;
  rows.q_stride_token = d.q_stride_token;
  rows.q_stride_head = d.q_stride_head;
  decode_wide_pack_kernel<Tr><<<a.grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(p, rows);
  WEFT_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool wide_packs_compiled(int32_t head_dim, DType dtype) {
  return head_dim == 128 && (dtype == DType::kFloat16 || dtype == DType::kBFloat16);
}

void prepare_decode_wide_packs() {
  for (const void* k : {reinterpret_cast<const void*>(decode_wide_pack_kernel<WideTile<half>>),
                        reinterpret_cast<const void*>(decode_wide_pack_kernel<WideTile<__nv_bfloat16>>)})
    WEFT_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, WideTile<half>::kSmemBytes));
}

int wide_pack_ctas_per_sm() {
  int n = 0;
  prepare_decode_wide_packs();
  WEFT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &n, decode_wide_pack_kernel<WideTile<__nv_bfloat16>>, WideTile<__nv_bfloat16>::kThreads,
      WideTile<__nv_bfloat16>::kSmemBytes));
  return n;
}

void launch_decode_wide_packs(const LaunchArgs& a, const plan::WorkPlanPointers& work, cudaStream_t stream) {
  WEFT_CHECK_ARG(wide_packs_compiled(a.head_dim, a.dtype), "head_dim",
                 "wide packs run at head_dim 128 with fp16 / bf16, got " << a.head_dim);
  WEFT_CHECK_ARG(a.kv_dtype == a.dtype, "cache", "wide packs read 16-bit pools of q's dtype");
  WEFT_CHECK_ARG(a.var.alibi_slopes == nullptr && a.var.window_left < 0 && a.var.custom_mask == nullptr, "variant",
                 "wide packs run neither ALiBi, a sliding window nor a custom mask");
  if (a.dtype == DType::kFloat16)
    launch_wide<half>(a, work, stream);
  else
    launch_wide<__nv_bfloat16>(a, work, stream);
}

}  // namespace weft::decode
