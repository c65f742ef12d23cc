// Prefill planning adapter over the shared balanced planner (attention/plan/balance.h).
// Pure C++ (no CUDA headers): unit-tested on the host.
//
// Why an adapter: balance() gives every tile of a request the same KV range [kv_start, kv_len).
// Under a causal mask (or a sliding window) the query tiles of one request see very different key
// counts, so costing them equally would deal a light tile and a heavy tile as equals and leave a
// tail. When the GQA group divides the query tile (cta_q % group == 0) the adapter cuts every
// request into SEGMENTS of cta_q / group tokens -- exactly one query tile per KV head -- and hands
// the segments to balance() as its "requests", each with the key range its tile can actually see:
//   kv_len(segment)   = position of its last token + 1   (causal), else the request's kv_len
//   kv_start(segment) = position of its first token - window_left  (window), else 0
// so costs are exact, heavy (late) tiles are dealt first (longest-processing-time order), and
// keys every row masks are never scheduled. Segments are contiguous in token order, so the
// plan's qo_indptr (prefix sums of segment lengths) is the absolute first token of each segment,
// which is what the shared merge kernel uses to find output rows.
// Otherwise (no causal/window, or group does not divide cta_q) a segment is a whole request.
// The kernel maps a segment back through seg_request / seg_token0 / seg_pos0.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "attention/plan/balance.h"

namespace weft::prefill {

struct PlanRequest {
  std::vector<int32_t> qo_len;  // per real request
  std::vector<int32_t> kv_len;  // per real request
  int32_t num_kv_heads = 1;
  int32_t group_size = 1;
  bool causal = false;
  int32_t window_left = -1;
  int32_t cta_q = 64;
  int32_t cta_kv = 64;
  int32_t num_ctas = 1;
  bool allow_split = true;
  int32_t min_chunk = 256;
  // KV heads folded into one plan head class (plan::Plan::head_fold; prefill_head_fold): the
  // plan is made for num_kv_heads / head_fold heads on num_ctas / head_fold CTAs.
  int32_t head_fold = 1;
  // Deal the KV head classes of a segment to one CTA together, all but the sorted order's last
  // heuristics::kGroupedTailUnitsPerCta x CTAs segments (plan::BalanceConfig::deal_heads_together:
  // half the planner's queue operations for 2 head classes; applies to unsplit plans whose
  // segments fit one query tile with integral costs, else the standard plan). The prefill
  // wrapper passes PrefillPlanOptions::deal_heads_together (default off); POD never sets it.
  bool deal_heads_together = false;
  // Deal the KV head classes in turn (plan::BalanceConfig::heads_in_turn; the wrapper:
  // heuristics::prefill_heads_in_turn).
  bool heads_in_turn = false;
};

// The wrapper's head fold: gcd(num_kv_heads, num_ctas) (every KV head of a segment has the same
// rows and keys; 8 KV heads on the sm90 grid of 132 CTAs: 4, the plan is dealt for 2 head
// classes on 33 CTAs). Cuts the planner's work and the plan copy by the fold (issue 19).
int32_t prefill_head_fold(int32_t num_kv_heads, int32_t num_ctas);

struct SegmentedPlan {
  plan::Plan plan;                  // "requests" of this plan are segments
  std::vector<int32_t> seg_request; // real request of each segment
  std::vector<int32_t> seg_token0;  // first token of the segment inside its request
  std::vector<int32_t> seg_pos0;    // absolute KV position of that token (kv_len - q_len + token0)
};

// Segment length in tokens (0: one segment per request).
int32_t segment_tokens(int32_t cta_q, int32_t group_size, bool causal, int32_t window_left);

SegmentedPlan make_plan(const PlanRequest& req);

// make_plan() with its scratch kept between calls (the wrapper owns one): the same plan, bit for
// bit, written into `out` (its vectors reused: no allocation when warm). The merge-penalty rule
// compares the makespans the planner computed for its own split decision instead of planning the
// batch a second time without split.
class PrefillPlanner {
 public:
  void make_plan(const PlanRequest& req, SegmentedPlan& out);

 private:
  plan::BatchShape shape_;
  plan::Planner planner_;
};

// Workspace bounds for a configuration. Segments <= total_q / segment_tokens + batch.
int32_t max_segments(int32_t max_batch, int64_t max_total_q, int32_t cta_q, int32_t group_size);
plan::PlanBounds plan_bounds(int32_t max_batch, int64_t max_total_q, int32_t num_kv_heads,
                             int32_t group_size, int32_t cta_q, int32_t head_dim, int32_t num_ctas,
                             int32_t head_fold = 1);

// Full workspace layout of one configuration: the shared plan layout with the segment arrays
// (int32 each, fixed offsets) and the real requests' kv lengths at the end of its metadata region
// (PlanBounds::tail_bytes: one copy carries the plan and them), then the partial states.
struct PrefillWorkspaceLayout {
  plan::WorkspaceLayout plan;
  int32_t max_segments = 0;
  int32_t max_batch = 0;
  std::size_t off_seg_request = 0, off_seg_token0 = 0, off_seg_pos0 = 0, off_real_kv_len = 0;
  std::size_t extra_bytes = 0;  // bytes of the arrays above, from off_seg_request (inside
                                // plan.metadata_bytes(): copied with the plan)
  std::size_t total_bytes = 0;
};
PrefillWorkspaceLayout make_layout(int32_t max_batch, int64_t max_total_q, int32_t num_kv_heads,
                                   int32_t group_size, int32_t cta_q, int32_t head_dim,
                                   int32_t num_ctas, int32_t head_fold = 1);

}  // namespace weft::prefill
