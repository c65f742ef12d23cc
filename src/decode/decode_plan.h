// Internal, pure C++: how decode uses the balanced planner (plan/balance.h). Host-testable.
#pragma once
#include <cstdint>

#include "attention/plan/balance.h"

namespace weft::decode {

// Chunks are whole 16-key warp tiles and never shorter than 256 keys: below that an item's
// fixed cost (Q load, pipeline fill, epilogue, one merge row) outweighs the parallelism gained.
inline constexpr int32_t kMinChunk = 256;
inline constexpr int32_t kPlanTileQ = 16;   // = kTileQ in decode_common.cuh (rows per item)
// = kWarpKeys: chunk granularity (whole warp tiles; the kernel masks any chunk end, a finer
// granularity only lets chunk counts match the grid, e.g. 8 heads x 33 chunks = 264 CTAs).
inline constexpr int32_t kPlanKVTile = 16;

// Workspace bounds for up to max_batch requests (validates heads / head_dim; weft::Error).
plan::PlanBounds plan_bounds(int32_t max_batch, int32_t num_qo_heads, int32_t num_kv_heads, int32_t head_dim,
                             int32_t grid);
// Planner configuration: one 16-row query tile per (request, kv head), 64-key granularity.
plan::BalanceConfig balance_config(int32_t grid, int32_t num_qo_heads, int32_t num_kv_heads);
// One query token per request; with a window (window_left >= 0) only keys
// j >= kv_len - 1 - window_left are planned (and read).
plan::BatchShape batch_shape(const int32_t* kv_lens, int32_t batch, int32_t window_left);

// plan::balance plus a search over the chunk count of the longest tile. balance() derives the
// chunk bound L from total / num_ctas; when the longest tiles are cut into n chunks of ~L, the
// chunk count can overshoot the grid by a little (e.g. 32 tiles x 9 chunks = 288 items on 264
// CTAs: some CTAs run two chunks, makespan ~1.8x the ideal). This also tries the bounds that
// cut the longest tile into n0 - 1 .. n0 - kPlanSearch chunks (n0: balance's count) and keeps
// the plan with the lowest planned makespan (ties: the earlier, i.e. finer, candidate).
inline constexpr int32_t kPlanSearch = 4;

// Dynamic tail (plan::with_dynamic_tail) for plans that split nothing, i.e. about one or more
// whole tiles per CTA (batch >= ~32 at kv >= 2K). There, every CTA streams equal work, yet SMs
// finish apart: ncu on H200 (llama3 b32/kv4K) showed the busiest SM active ~8% longer than the
// average one, and the kernel ends with the slowest. A quarter of the makespan (the budget) is
// cut off the CTAs' last items in up to 4 chunks of >= 256 keys that free CTAs claim at run
// time. Split plans (batch 1-8 at long kv) are left alone: their tiles are already cut in ~one
// chunk per CTA, and more slots would lengthen the merge at the end of the kernel.
inline constexpr double kTailFraction = 0.25;
inline constexpr int32_t kTailChunksPerCta = 4;
inline constexpr int32_t kTailMinChunk = 256;
plan::DynamicTailConfig tail_config();

plan::Plan plan_decode(const plan::BatchShape& shape, const plan::BalanceConfig& cfg, bool dynamic_tail = true);

}  // namespace weft::decode
