// Tensor maps of the Hopper (sm_90a) attention mainloop (src/prefill/sm90/), host side: shared by
// the prefill wrapper's sm90 kernel and the decode wrapper's wide packs on it
// (src/decode/kernels_wide_sm90.cu), so it lives with the shared attention core (a decode-only
// build has no prefill component). Declared in prefill/sm90/sm90_params.h.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "common/cuda_check.h"
#include "prefill/sm90/sm90_launch.h"
#include "prefill/sm90/sm90_params.h"
#include "weft/error.h"

namespace weft::prefill::sm90 {

namespace {

using EncodeFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                              const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                              CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// cuTensorMapEncodeTiled from the driver the runtime already loaded (no -lcuda).
EncodeFn encode_fn() {
  static EncodeFn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    WEFT_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || f == nullptr)
      throw Error("device", "cuTensorMapEncodeTiled is not available from the CUDA driver");
    return reinterpret_cast<EncodeFn>(f);
  }();
  return fn;
}

// The tensor's stride; a dimension of extent <= 1 may carry any stride (the validation allows it,
// it is never stepped), which is replaced by an aligned one as the encoder requires.
cuuint64_t stride_bytes(int64_t stride_elems, int64_t extent, int64_t fallback_bytes, int64_t elem_bytes = 2) {
  const int64_t b = stride_elems * elem_bytes;
  const bool usable = b > 0 && b % 16 == 0;
  return static_cast<cuuint64_t>(usable || extent > 1 ? b : fallback_bytes);
}

// dtype: bf16 / f16 (128-byte swizzle), or an fp8 type (bytes, no swizzle: the widening warps'
// input, sm90_fp8.cuh).
void encode(CUtensorMap* map, DType dtype, int rank, const void* base, const cuuint64_t* dims,
            const cuuint64_t* strides, const cuuint32_t* box, const char* what) {
  const bool bytes = dtype_size(dtype) == 1;
  cuuint32_t elem[4] = {1, 1, 1, 1};
  // A null base (an empty tensor: nothing is ever loaded through the map) still needs a valid,
  // aligned address for the encoder.
  void* addr = base ? const_cast<void*>(base) : reinterpret_cast<void*>(uintptr_t{256});
  const CUresult r = encode_fn()(map, bytes                       ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                      : dtype == DType::kBFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                                  : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                 rank, addr, dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                 bytes ? CU_TENSOR_MAP_SWIZZLE_NONE : CU_TENSOR_MAP_SWIZZLE_128B,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw Error(what, "cuTensorMapEncodeTiled failed (CUresult " + std::to_string(static_cast<int>(r)) + ")");
}

}  // namespace

void make_tensor_maps(KernelParams& kp, const Shapes& s, DType dtype, DType kv_dtype, int head_dim) {
  const PrefillParams& p = kp.p;
  const int64_t D = head_dim;
  const int g = p.group_size;
  const int64_t bn = block_n(head_dim);  // keys per stage
  {
    const cuuint64_t dims[3] = {cuuint64_t(D), cuuint64_t(s.num_qo_heads), cuuint64_t(std::max<int64_t>(s.q_rows, 1))};
    const cuuint64_t strides[2] = {stride_bytes(p.q_stride_head, s.num_qo_heads, D * 2),
                                   stride_bytes(p.q_stride_token, s.q_rows, D * 2 * s.num_qo_heads)};
    const cuuint32_t box[3] = {64, cuuint32_t(g), cuuint32_t(s.q_box_tokens > 0 ? s.q_box_tokens : kBlockM / g)};
    encode(&kp.tm_q, dtype, 3, p.q, dims, strides, box, "q");
  }
  const int64_t halves = D / 64;
  // whole_page (paged 16-bit V): one box per page piece covering every 64-column half, the half as a
  // dimension of its own (stride 128 B) between the slot and the head, so the box lands as
  // [half][slot][64] (KernelParams: the V stage layout).
  auto kv_map = [&](CUtensorMap* map, const void* base, int64_t rows, int64_t page_stride,
                    int64_t slot_stride, int64_t head_stride, const char* what, bool whole_page) {
    if (dtype_size(kv_dtype) == 1) {  // fp8 pools (paged only: eligible()): one box of whole byte rows
      const int64_t ps = p.page_size;
      const cuuint64_t dims[4] = {cuuint64_t(D), cuuint64_t(ps), cuuint64_t(s.num_kv_heads),
                                  cuuint64_t(std::max<int64_t>(rows, 1))};
      const cuuint64_t strides[3] = {stride_bytes(slot_stride, ps, D, 1),
                                     stride_bytes(head_stride, s.num_kv_heads, D * ps, 1),
                                     stride_bytes(page_stride, rows, D * ps * s.num_kv_heads, 1)};
      const cuuint32_t box[4] = {cuuint32_t(D), cuuint32_t(std::min<int64_t>(ps, bn)), 1, 1};
      encode(map, kv_dtype, 4, base, dims, strides, box, what);
    } else if (!p.paged) {
      const cuuint64_t dims[3] = {cuuint64_t(D), cuuint64_t(s.num_kv_heads), cuuint64_t(std::max<int64_t>(rows, 1))};
      const cuuint64_t strides[2] = {stride_bytes(head_stride, s.num_kv_heads, D * 2),
                                     stride_bytes(page_stride, rows, D * 2 * s.num_kv_heads)};
      const cuuint32_t box[3] = {64, 1, cuuint32_t(bn)};
      encode(map, dtype, 3, base, dims, strides, box, what);
    } else if (whole_page) {
      const int64_t ps = p.page_size;
      const cuuint64_t dims[5] = {64, cuuint64_t(ps), cuuint64_t(halves), cuuint64_t(s.num_kv_heads),
                                  cuuint64_t(std::max<int64_t>(rows, 1))};
      const cuuint64_t strides[4] = {stride_bytes(slot_stride, ps, D * 2), 128,
                                     stride_bytes(head_stride, s.num_kv_heads, D * 2 * ps),
                                     stride_bytes(page_stride, rows, D * 2 * ps * s.num_kv_heads)};
      const cuuint32_t box[5] = {64, cuuint32_t(std::min<int64_t>(ps, bn)), cuuint32_t(halves), 1, 1};
      encode(map, dtype, 5, base, dims, strides, box, what);
    } else {
      const int64_t ps = p.page_size;
      const cuuint64_t dims[4] = {cuuint64_t(D), cuuint64_t(ps), cuuint64_t(s.num_kv_heads),
                                  cuuint64_t(std::max<int64_t>(rows, 1))};
      const cuuint64_t strides[3] = {stride_bytes(slot_stride, ps, D * 2),
                                     stride_bytes(head_stride, s.num_kv_heads, D * 2 * ps),
                                     stride_bytes(page_stride, rows, D * 2 * ps * s.num_kv_heads)};
      const cuuint32_t box[4] = {64, cuuint32_t(std::min<int64_t>(ps, bn)), 1, 1};
      encode(map, dtype, 4, base, dims, strides, box, what);
    }
  };
  kv_map(&kp.tm_k, p.k, s.k_rows, p.k_page_stride, p.k_slot_stride, p.k_head_stride, "k", false);
  kv_map(&kp.tm_v, p.v, s.v_rows, p.v_page_stride, p.v_slot_stride, p.v_head_stride, "v", true);
  kp.map_scratch = static_cast<CUtensorMap*>(s.map_scratch);
  const int32_t rpc = static_cast<int32_t>(p.paged ? std::min<int64_t>(p.page_size, bn) : bn);
  kp.rows_per_copy = rpc;  // a power of two (eligible(): page sizes dividing kBlockN or multiples of it)
  const int32_t piece = dtype_size(kv_dtype) == 2 ? rpc : static_cast<int32_t>(bn);  // keys per V piece
  int32_t shift = 0;
  while ((1 << shift) < piece) ++shift;
  kp.v_piece_shift = shift;
  kp.v_half_bytes = static_cast<uint32_t>(piece) * 128;
  kp.v_piece_bytes = kp.v_half_bytes * static_cast<uint32_t>(halves);
  kp.v_sbo_bytes = piece >= 16 ? 1024 : kp.v_piece_bytes;
  for (uint32_t kk = 0; kk < 8; ++kk) {
    const uint32_t key = 16 * kk;
    kp.v_kstep[kk] = ((key >> shift) * kp.v_piece_bytes + (key & static_cast<uint32_t>(rpc - 1)) * 128) >> 4;
  }
}

}  // namespace weft::prefill::sm90
