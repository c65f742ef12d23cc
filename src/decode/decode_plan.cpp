#include "decode/decode_plan.h"

#include <algorithm>
#include <climits>
#include <numeric>

#include "attention/variant.cuh"
#include "common/plan_phases.h"
#include "decode/direct_plan.h"
#include "weft/error.h"
#include "weft/validate.h"

namespace weft::decode {

int32_t decode_tile_rows(int32_t group_size, int32_t head_dim, bool cuda_core_forced) {
  return group_size > kPlanTileQ && head_dim <= 128 && !cuda_core_forced ? kPlanTileQWide : kPlanTileQ;
}

int32_t plan_tile_rows(const plan::BatchShape& shape, int32_t num_kv_heads, int32_t group_size, int32_t grid,
                       int32_t max_rows) {
  return plan_tile_rows_of(shape.kv_len.data(), shape.kv_start.empty() ? nullptr : shape.kv_start.data(),
                           static_cast<int32_t>(shape.kv_len.size()), num_kv_heads, group_size, grid, max_rows);
}

int32_t decode_head_fold(int32_t num_kv_heads, int32_t grid) {
  return num_kv_heads >= 1 && grid >= 1 ? std::gcd(num_kv_heads, grid) : 1;
}

namespace {
void check_fold(int32_t head_fold, int32_t num_kv_heads, int32_t grid) {
  WEFT_CHECK_ARG(head_fold >= 1 && num_kv_heads % head_fold == 0 && grid % head_fold == 0, "head_fold",
                 "must divide num_kv_heads " << num_kv_heads << " and the grid " << grid << ", got " << head_fold);
}
}  // namespace

plan::PlanBounds plan_bounds(int32_t max_batch, int32_t num_qo_heads, int32_t num_kv_heads, int32_t head_dim,
                             int32_t grid, int32_t tile_rows, int32_t head_fold) {
  WEFT_CHECK_ARG(max_batch >= 1, "max_batch", "must be >= 1, got " << max_batch);
  WEFT_CHECK_ARG(num_kv_heads >= 1, "num_kv_heads", "must be >= 1, got " << num_kv_heads);
  WEFT_CHECK_ARG(num_qo_heads >= 1 && num_qo_heads % num_kv_heads == 0, "num_qo_heads",
                 "must be a positive multiple of num_kv_heads " << num_kv_heads << ", got " << num_qo_heads);
  // Any GQA group: a group larger than the query tile is cut into several tiles of the same
  // (request, kv head), each reading the same KV (see balance_config: row_tiles_together).
  const int32_t group = num_qo_heads / num_kv_heads;
  WEFT_CHECK_ARG(tile_rows == kPlanTileQ || tile_rows == kPlanTileQWide, "tile_rows",
                 "must be " << kPlanTileQ << " or " << kPlanTileQWide << ", got " << tile_rows);
  check::head_dim_supported(head_dim, "head_dim");
  check_fold(head_fold, num_kv_heads, grid);
  plan::PlanBounds b;
  b.max_batch = max_batch;
  // Tiles counted at the narrow height: a plan may cut 16-row tiles (plan_tile_rows); partial
  // slots keep tile_rows rows.
  const int64_t tiles = int64_t(max_batch) * (num_kv_heads / head_fold) * plan::tiles_per_head(1, group, kPlanTileQ);
  WEFT_CHECK_ARG(tiles <= INT32_MAX / 2, "max_batch", "too large: " << max_batch);
  b.max_tiles = static_cast<int32_t>(tiles);
  b.num_ctas = grid / head_fold;
  b.head_fold = head_fold;
  b.launch_records = true;  // the decode kernels read their CtaRecord by launched CTA (fold_launch_order)
  b.tile_q = tile_rows;
  b.head_dim = head_dim;
  return b;
}

plan::BalanceConfig balance_config(int32_t grid, int32_t num_qo_heads, int32_t num_kv_heads,
                                   int32_t tile_rows, int32_t head_fold) {
  check_fold(head_fold, num_kv_heads, grid);
  plan::BalanceConfig cfg;
  cfg.num_ctas = grid / head_fold;
  cfg.num_kv_heads = num_kv_heads / head_fold;
  cfg.head_fold = head_fold;
  cfg.group_size = num_qo_heads / num_kv_heads;
  cfg.tile_q = tile_rows;
  cfg.kv_granularity = kPlanKVTile;
  cfg.min_chunk = kMinChunk;
  // Groups > 16 rows: the tiles of one (request, kv head) read the same keys. Dealt next to each
  // other, they run at the same time on neighbouring CTAs and the second read of each KV line is
  // served by L2 instead of DRAM.
  cfg.row_tiles_together = true;
  return cfg;
}

plan::BatchShape batch_shape(const int32_t* kv_lens, int32_t batch, int32_t window_left) {
  plan::BatchShape shape;
  batch_shape(kv_lens, batch, window_left, shape);
  return shape;
}

void batch_shape(const int32_t* kv_lens, int32_t batch, int32_t window_left, plan::BatchShape& shape) {
  shape.qo_len.assign(batch, 1);
  shape.kv_len.assign(kv_lens, kv_lens + batch);
  shape.kv_start.clear();
  if (window_left >= 0) {
    // The variant's KV-range hook (attention/variant.cuh), the one the kernels use, for the one
    // query at position p = kv_len - 1 (attends j >= p - window_left; a causal limit is kv_len).
    attn::VariantParams vp;
    vp.window_left = window_left;
    const attn::DefaultVariant v(vp);
    shape.kv_start.resize(batch);
    for (int32_t b = 0; b < batch; ++b) {
      const int64_t p = int64_t(kv_lens[b]) - 1;
      shape.kv_start[b] = v.kv_range<int64_t>(p, p, kv_lens[b]).begin;
    }
  }
}

plan::Plan plan_decode(const plan::BatchShape& shape, const plan::BalanceConfig& cfg) {
  plan::Planner planner;
  plan::Plan p;
  plan_decode(shape, cfg, planner, p);
  return p;
}

void plan_decode(const plan::BatchShape& shape, const plan::BalanceConfig& cfg, plan::Planner& planner,
                 plan::Plan& out) {
  // balance()'s plan first: split at L0 or not.
  const int64_t L0 = planner.prepare(shape, cfg);
  WEFT_PLAN_PHASE(kPhPrepare);
  double best_ms = 0, ms_whole = 0;
  const bool split = planner.choose_split(L0, &best_ms, &ms_whole);
  WEFT_PLAN_PHASE(kPhChooseSplit);
  if (!split) {  // nothing split: a larger bound changes nothing
    planner.build(false, L0, out);
    WEFT_PLAN_PHASE(kPhBuild);
    return;
  }
  int64_t longest = 0;
  for (size_t b = 0; b < shape.kv_len.size(); ++b)
    longest = std::max<int64_t>(longest, shape.kv_len[b] - (shape.kv_start.empty() ? 0 : shape.kv_start[b]));
  const int64_t g = cfg.kv_granularity;
  const int64_t n0 = (longest + L0 - 1) / L0;
  int64_t best_L = L0;
  for (int64_t n = n0 - 1; n >= std::max<int64_t>(1, n0 - kPlanSearch); --n) {
    const int64_t bound = ((longest + n - 1) / n + g - 1) / g * g;
    if (bound <= best_L || bound > INT32_MAX) continue;
    // balance() with min_chunk = bound: L = bound (rounded), split when that pays.
    const int64_t L = planner.chunk_bound(bound);
    // A candidate that does not split has the no-split makespan, which the split best beats.
    if (planner.longest_tile() <= L) continue;
    // Its makespan is at least its largest chunk's cost (and, unsplit, the no-split one).
    if (planner.max_chunk_cost(L) >= best_ms) continue;
    const double ms = planner.makespan(true, L);
    if (ms <= (1.0 - cfg.min_gain) * ms_whole && ms < best_ms) {
      best_ms = ms;
      best_L = L;
    }
  }
  WEFT_PLAN_PHASE(kPhSearch);
  planner.build(true, best_L, out);
  WEFT_PLAN_PHASE(kPhBuild);
}

}  // namespace weft::decode
