// Internal, pure C++: how decode uses the balanced planner (plan/balance.h). Host-testable.
#pragma once
#include "common/rtc_compat.h"

#include "attention/plan/balance.h"

namespace weft::decode {

// Chunks are whole 16-key warp tiles and never shorter than 256 keys: below that an item's
// fixed cost (Q load, pipeline fill, epilogue, one merge row) outweighs the parallelism gained.
inline constexpr int32_t kMinChunk = 256;
inline constexpr int32_t kPlanTileQ = 16;   // = kTileQ in decode_common.cuh (rows per item)
// Rows per item for GQA groups above 16 at head_dim <= 128 on the tensor-core path: one item
// holds 32 of the group's query heads (4 n8 tiles of the mma N dimension), so each KV byte is
// brought into an SM once per 32 heads instead of once per 16. Measured on H100 at 007af55
// (bench "decode/gqa/...", fraction of the read ceiling on unique KV bytes, 16-row tiles dealt
// to neighbouring CTAs): group 32 b32/kv16K 0.747 and b128/kv4K 0.73-0.745, against 0.87-0.89
// for group 16 at the same shapes: the second 16-row tile's read, even from L2, costs SM
// ingest bandwidth. At head_dim 256 the 4-tile accumulators (256 registers) do not fit.
inline constexpr int32_t kPlanTileQWide = 32;
// The largest item height a decode wrapper plans with (fixed at construction: it picks the
// kernel and the partial slots' row stride): kPlanTileQWide for groups > 16 at head_dim <= 128
// unless the CUDA-core path is forced (its per-row state is sized for 16 rows), else kPlanTileQ.
int32_t decode_tile_rows(int32_t group_size, int32_t head_dim, bool cuda_core_forced);
// Rows per item (and partial slot) of the prefix-sharing work plans (the generic item path,
// kernels_packed.cu): 32 at head_dim <= 128, where its multi-tile kernel runs items of up to 32
// rows (packs of 32 / group requests) next to 16-row ones; 16 at head_dim 256.
inline int32_t pack_tile_rows(int32_t head_dim) { return head_dim <= 128 ? kPlanTileQWide : kPlanTileQ; }
// Rows of a wide pack item (PackPlanConfig::wide_rows; the FA2 tile of kernels_wide.cu).
inline constexpr int32_t kWidePackRows = 128;
inline constexpr int32_t kWidePackHeadDim = 128;  // the only head dim with wide packs (few instances)
// The item height of one plan, <= max_rows: wide (32-row) items halve the KV bytes each SM
// brings in but also halve the items. When the batch's wide tiles, cut into kMinChunk-key
// pieces, give fewer than kWidePiecesPerCta pieces per CTA of the grid, 16-row tiles are planned
// instead (the 32-row kernel runs them with its upper 16 query columns empty). Measured on
// H100 (007af55 16-row vs 00a0bb6 32-row items, bench "decode/gqa/..."): group 32 (32/1) b1/kv32K
// 45 vs 79 us and b32/kv4K 42 vs 46 us (512 pieces on 264 CTAs), b32/kv16K 122 vs 116,
// b128/kv4K 117 vs 115; group 32 (64/2) b32/kv16K 227 vs 204, b128/kv4K 229 vs 196; group 64
// (64/1) b128/kv4K 227 vs 180; group 24 (48/2) b1/kv32K 36 vs 68 us (256 pieces: narrow).
// Then at 340773c, 16-row plans in the 32-row kernel: group 32 (32/1) b1/kv32K 50 us (narrow),
// b32/kv4K 57 us (narrow at 2 pieces per CTA: 512 < 528), so the bound is one piece per CTA.
inline constexpr int32_t kWidePiecesPerCta = 1;
#if !WEFT_RTC  // host only (NVRTC: common/rtc_compat.h)
int32_t plan_tile_rows(const plan::BatchShape& shape, int32_t num_kv_heads, int32_t group_size, int32_t grid,
                       int32_t max_rows);
#endif  // !WEFT_RTC
// = kWarpKeys: chunk granularity (whole warp tiles; the kernel masks any chunk end, a finer
// granularity only lets chunk counts match the grid, e.g. 8 heads x 33 chunks = 264 CTAs).
inline constexpr int32_t kPlanKVTile = 16;

#if !WEFT_RTC  // host only (NVRTC: common/rtc_compat.h)
// KV heads folded into one in the decode wrapper's plans (plan::Plan::head_fold): gcd(num_kv_heads,
// grid), so that both the heads and the grid divide evenly (8 KV heads on 264 CTAs: 8, the plan
// is made for 1 head class on 33 CTAs; 32 heads: 8; 1 head: 1). Every KV head of a request has
// the same rows and keys, so the folded plan replicated is as balanced as the full one, and the
// planner, the serialization and the copy handle 1 / fold of the items: issue 19's plan() cost
// (measured in weft-plan-bench and the decode/plan bench rows).
int32_t decode_head_fold(int32_t num_kv_heads, int32_t grid);
// Workspace bounds for up to max_batch requests (validates heads / head_dim; weft::Error), for
// plans that fold head_fold KV heads (1: none; it must divide num_kv_heads and grid).
plan::PlanBounds plan_bounds(int32_t max_batch, int32_t num_qo_heads, int32_t num_kv_heads, int32_t head_dim,
                             int32_t grid, int32_t tile_rows = kPlanTileQ, int32_t head_fold = 1);
// Planner configuration: query tiles of tile_rows rows (decode_tile_rows) per (request, kv head),
// 16-key granularity; with head_fold > 1, num_kv_heads / head_fold head classes on grid /
// head_fold CTAs.
plan::BalanceConfig balance_config(int32_t grid, int32_t num_qo_heads, int32_t num_kv_heads,
                                   int32_t tile_rows = kPlanTileQ, int32_t head_fold = 1);
// One query token per request; with a window (window_left >= 0) only keys
// j >= kv_len - 1 - window_left are planned (and read).
plan::BatchShape batch_shape(const int32_t* kv_lens, int32_t batch, int32_t window_left);
// The same into a reused shape (no allocation when its vectors are large enough).
void batch_shape(const int32_t* kv_lens, int32_t batch, int32_t window_left, plan::BatchShape& out);

// plan::balance plus a search over the chunk count of the longest tile. balance() derives the
// chunk bound L from total / num_ctas; when the longest tiles are cut into n chunks of ~L, the
// chunk count can overshoot the grid by a little (e.g. 32 tiles x 9 chunks = 288 items on 264
// CTAs: some CTAs run two chunks, makespan ~1.8x the ideal). This also tries the bounds that
// cut the longest tile into n0 - 1 .. n0 - kPlanSearch chunks (n0: balance's count) and keeps
// the plan with the lowest planned makespan (ties: the earlier, i.e. finer, candidate).
inline constexpr int32_t kPlanSearch = 4;
plan::Plan plan_decode(const plan::BatchShape& shape, const plan::BalanceConfig& cfg);
// The same plan, bit for bit, written into `out` with a reused planner (what the wrapper calls: no
// allocation when warm). The tiles are built once; the no-split makespan is computed once (it
// does not depend on the bound); a candidate bound is dealt only when it can win: its makespan is
// at least its largest chunk's cost, and a candidate that would not split never beats a split
// plan (which is kept only when it is below the no-split makespan). The plan is built once.
void plan_decode(const plan::BatchShape& shape, const plan::BalanceConfig& cfg, plan::Planner& planner,
                 plan::Plan& out);
#endif  // !WEFT_RTC

}  // namespace weft::decode
