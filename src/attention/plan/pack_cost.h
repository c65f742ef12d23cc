// The inputs of the prefix-sharing cost model (heuristics::PrefixShareCostInputs, the decode
// wrapper's plan-time choice between a sharing plan and the standard decode plan) from a pack
// plan and its forest (pure C++).
#pragma once
#include <cstdint>

#include "attention/heuristics.h"
#include "attention/plan/prefix_forest.h"
#include "attention/plan/work_plan.h"

namespace weft::plan {

// forest: the plan's prefix forest (its nodes' shared segments); p: the pack plan made from it with
// head_fold (PackPlanConfig::head_fold: only the folded plan's first copy is read, O(items /
// head_fold)); kv_len[batch]; kv_bytes_per_key: K + V bytes of one key of one KV head
// (PackPlanConfig::kv_bytes_per_key; the model counts keys of 512 bytes); cuda_core_decode: the
// standard decode plan would run the CUDA-core path.
heuristics::PrefixShareCostInputs share_cost_inputs(const PrefixForest& forest, const WorkPlan& p,
                                                    const int32_t* kv_len, int32_t batch, int32_t page_size,
                                                    int32_t head_fold, int32_t kv_bytes_per_key,
                                                    bool cuda_core_decode);

}  // namespace weft::plan
