// Internal, pure C++: how decode uses the balanced planner (plan/balance.h). Host-testable.
#pragma once
#include <cstdint>

#include "attention/plan/balance.h"

namespace weft::decode {

// Chunks are whole 64-key pipeline tiles and never shorter than 256 keys: below that an item's
// fixed cost (Q load, pipeline fill, epilogue, one merge row) outweighs the parallelism gained.
inline constexpr int32_t kMinChunk = 256;
inline constexpr int32_t kPlanTileQ = 16;   // = kTileQ in decode_common.cuh (rows per item)
inline constexpr int32_t kPlanKVTile = 64;  // = kTileKV: chunk granularity (whole pipeline tiles)

// Workspace bounds for up to max_batch requests (validates heads / head_dim; weft::Error).
plan::PlanBounds plan_bounds(int32_t max_batch, int32_t num_qo_heads, int32_t num_kv_heads, int32_t head_dim,
                             int32_t grid);
// Planner configuration: one 16-row query tile per (request, kv head), 64-key granularity.
plan::BalanceConfig balance_config(int32_t grid, int32_t num_qo_heads, int32_t num_kv_heads);
// One query token per request; with a window (window_left >= 0) only keys
// j >= kv_len - 1 - window_left are planned (and read).
plan::BatchShape batch_shape(const int32_t* kv_lens, int32_t batch, int32_t window_left);

}  // namespace weft::decode
