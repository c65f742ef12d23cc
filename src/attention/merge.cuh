// Merge of split-KV partial attention states, in the order fixed by a plan (shared by decode
// and prefill). Internal header: host-callable launcher, no device code exposed.
//
// Input (written by the attention kernels into the workspace, see plan/balance.h):
//   partial_o[slot, i, :]   fp32, row i of the slot's query tile, normalised by its own sum
//   partial_lse[slot, i]    BASE-2 log-sum-exp of that chunk's logits (-inf: chunk had no key)
// For merge entry m (request b, kv_head h, rows [row_begin, row_end)) and each row r:
//   M = max_s lse_s; w_s = 2^(lse_s - M); O = sum_s w_s * o_s / sum_s w_s (slots in KV order,
//   O sums the slots sequentially in KV order, sum_s w_s is a fixed warp tree: bitwise
//   deterministic); LSE = (M + log2(sum_s w_s)) * ln 2 (natural log).
//   Every lse_s = -inf (all keys masked): O = 0, LSE = -inf.
// Output row: token t = r / group_size of request b, query head h * group_size + r % group_size,
// i.e. o[(qo_indptr[b] + t) * o_stride_token + head * o_stride_head + d].
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "attention/plan/balance.h"
#include "attention/plan/work_plan.h"
#include "weft/dtype.h"

namespace weft::attn {

struct MergeOutput {
  void* o = nullptr;             // f16 / bf16, inner stride 1
  DType dtype = DType::kBFloat16;
  int64_t o_stride_token = 0;    // elements
  int64_t o_stride_head = 0;     // elements
  float* lse = nullptr;          // optional [tokens, num_qo_heads] natural log
  int64_t lse_stride_token = 0;  // elements
  int32_t head_dim = 0;          // multiple of 4
  int32_t group_size = 1;
};

// Launches a fixed grid of `num_blocks` CTAs (CUDA-graph safe: the number of merges is read
// from plan.header on the device; zero merges is a no-op kernel).
void launch_plan_merge(const plan::PlanPointers& plan, const MergeOutput& out, int num_blocks,
                       cudaStream_t stream);

// The merges of a work plan (work_plan.h: decode, one query token per request, so request b's
// rows go to token b): merge m's row r is merged from its sources (slot, row + r - row_begin) in
// the listed order. A fixed grid of `num_blocks` CTAs; the count is read on the device.
void launch_work_plan_merge(const plan::WorkPlanPointers& plan, const MergeOutput& out, int num_blocks,
                            cudaStream_t stream);

}  // namespace weft::attn
