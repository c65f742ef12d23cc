// Internal: what a decode kernel receives (one struct, passed by value as the kernel parameter).
// Every pointer is fixed between plans (workspace offsets, caller buffers), so a captured CUDA
// graph stays valid after a re-plan.
#pragma once
#include <cstdint>

#include "attention/plan/balance.h"
#include "paged/paged_access.cuh"

namespace weft::decode {

template <class T>
struct DecodeParams {
  plan::PlanPointers plan;       // work items, merge map, partial states (workspace)
  paged::PagedKV<T> kv;          // pools + device page table
  const T* q = nullptr;          // [batch, Hq, D], inner stride 1
  int64_t q_stride_token = 0, q_stride_head = 0;
  T* o = nullptr;                // [batch, Hq, D], inner stride 1
  int64_t o_stride_token = 0, o_stride_head = 0;
  float* lse = nullptr;          // optional [batch, Hq], natural log
  int64_t lse_stride_token = 0;
  int32_t group_size = 1;        // Hq / Hkv
  float scale_log2 = 0;          // sm_scale * log2(e) (no soft cap)
  float sm_scale = 0;            // used with the soft cap
  float soft_cap = 0;            // <= 0: off
  float cap_log2 = 0;            // soft_cap * log2(e)
  int32_t page_shift = -1;       // log2(page_size) when it is a power of two, else -1 (divide)
  int32_t stages = 3;            // per-warp pipeline stages (2 .. kMaxStages); sizes shared memory
  int32_t warps = 4;             // warps per CTA (= blockDim.x / 32, 2 .. kMaxWarps)
};

}  // namespace weft::decode
