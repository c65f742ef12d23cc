// Internal: what a decode kernel receives (one struct, passed by value as the kernel parameter).
// Every pointer is fixed between plans (workspace offsets, caller buffers), so a captured CUDA
// graph stays valid after a re-plan.
#pragma once
#include "common/rtc_compat.h"

#include <cuda/std/type_traits>

#include "attention/plan/balance.h"
#include "attention/plan/work_plan.h"
#include "attention/variant.cuh"
#include "paged/paged_access.cuh"

namespace weft::decode {

// Element types: T is Q's and O's (f16 / bf16; also the 16-bit type the mainloops compute in and
// the shared-memory tiles hold), KV the page pools' (T, or __nv_fp8_e4m3 / __nv_fp8_e5m2: the
// tensor-core mainloop reads fp8 fragments, the CUDA-core one widens the tiles first,
// decode_common.cuh; the scales are folded into the logit scale and the output).
template <class T, class KV = T>
struct DecodeParams {
  using Elem = T;
  using KVElem = KV;
  static constexpr bool kQuantizedKV = !cuda::std::is_same<T, KV>::value;
  plan::PlanPointers plan;       // work items, merge map, partial states (workspace)
  plan::WorkPlanPointers work;   // the generic item path's plan (work_plan.h; kPacked kernels only)
  paged::PagedKV<KV> kv;         // pools + device page table
  const T* q = nullptr;          // [batch, Hq, D], inner stride 1
  int64_t q_stride_token = 0, q_stride_head = 0;
  T* o = nullptr;                // [batch, Hq, D], inner stride 1
  int64_t o_stride_token = 0, o_stride_head = 0;
  float* lse = nullptr;          // optional [batch, Hq], natural log
  int64_t lse_stride_token = 0;
  int32_t group_size = 1;        // Hq / Hkv
  int32_t page_shift = -1;       // log2(page_size) when it is a power of two, else -1 (divide)
  int32_t stages = 3;            // per-warp pipeline stages (2 .. kMaxStages); sizes shared memory
  int32_t warps = 4;             // warps per CTA (= blockDim.x / 32, 2 .. kMaxWarps)
  // Last, after the 4-byte fields above (stages and warps stay 8-byte aligned, one param load):
  // placed before them, the layout change alone cost the tensor-core D128 kernel 7 registers.
  attn::VariantParams var;       // scale, soft cap, window, ALiBi slopes (attention/variant.cuh)
  // fp8 pools (kQuantizedKV) only, after everything else (the 16-bit kernels' layout is unchanged):
  // dequantization scales (weft::KVScale), element kv_head * stride (stride 1: per head, 0: per tensor).
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  int32_t k_scale_stride = 0, v_scale_stride = 0;
};

}  // namespace weft::decode
