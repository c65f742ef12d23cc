// Internal, host-only: raw launcher of the public state merge (weft/merge.h), after validation.
// Not the split-KV merge of the plans (merge.cuh: fp32 base-2 partials in the workspace): this one
// reads caller tensors, v in f16 / bf16 / f32 and natural-log LSE.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "weft/dtype.h"

namespace weft::attn {

// Where the states of row (t, h) are. State 0 is in src[0]; state k >= 1 in src[1], k - 1 state
// strides further (merge_state: src[1] is the second tensor and only k = 1 exists; merge_states:
// src[0] / src[1] are states 0 / 1 of the one tensor and the state stride is its dim 1).
// Strides in elements.
struct StateSource {
  const void* v = nullptr;  // + t * v_seq + h * v_head: head_dim contiguous elements
  const float* s = nullptr; // + t * s_seq + h * s_head
  int64_t v_seq = 0, v_head = 0, s_seq = 0, s_head = 0;
};

struct StateMergeArgs {
  StateSource src[2];
  int64_t v_state = 0, s_state = 0;  // between consecutive states of src[1]
  void* v_out = nullptr;             // + t * vo_seq + h * vo_head (may be src[0].v: in place)
  float* s_out = nullptr;            // optional; + t * so_seq + h * so_head (may be src[0].s)
  int64_t vo_seq = 0, vo_head = 0, so_seq = 0, so_head = 0;
  const uint8_t* mask = nullptr;     // optional [seq]: rows of tokens with 0 are not written
  int64_t seq = 0, heads = 0;
  int32_t head_dim = 0;              // a multiple of 16 bytes of elements
  int32_t num_states = 0;            // >= 1
};

// Launches nothing when seq * heads == 0. dtype: v's (f16, bf16 or f32).
void launch_state_merge(const StateMergeArgs& a, DType dtype, cudaStream_t stream);

// Threads per row: the row's 16-byte vectors rounded up to a power of two, at most a warp (a row
// group never straddles warps, so the group syncs with __syncwarp).
int state_merge_threads_per_row(int64_t head_dim, DType dtype);

}  // namespace weft::attn
