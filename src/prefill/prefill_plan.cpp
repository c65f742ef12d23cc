#include "prefill/prefill_plan.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "attention/heuristics.h"
#include "attention/variant.cuh"
#include "weft/error.h"

namespace weft::prefill {

int32_t segment_tokens(int32_t cta_q, int32_t group_size, bool causal, int32_t window_left) {
  if (!causal && window_left < 0) return 0;
  if (group_size <= 0 || cta_q % group_size != 0) return 0;
  return cta_q / group_size;
}

SegmentedPlan make_plan(const PlanRequest& r) {
  PrefillPlanner planner;
  SegmentedPlan out;
  planner.make_plan(r, out);
  return out;
}

void PrefillPlanner::make_plan(const PlanRequest& r, SegmentedPlan& out) {
  WEFT_CHECK_ARG(r.qo_len.size() == r.kv_len.size(), "kv_len",
                 "size " << r.kv_len.size() << " differs from qo_len size " << r.qo_len.size());
  const int32_t seg = segment_tokens(r.cta_q, r.group_size, r.causal, r.window_left);
  plan::BatchShape& shape = shape_;
  attn::VariantParams vp;
  vp.causal = r.causal ? 1 : 0;
  vp.window_left = r.window_left;
  const attn::DefaultVariant variant(vp);
  const int32_t batch = static_cast<int32_t>(r.qo_len.size());
  // Segment count first (one division per request), then every array written through a pointer
  // (sized once; no allocation when warm).
  int64_t nseg = 0;
  for (int32_t b = 0; b < batch; ++b) {
    const int32_t ql = r.qo_len[b], kl = r.kv_len[b];
    WEFT_CHECK_ARG(ql >= 0 && kl >= 0, "qo_len/kv_len", "negative length for request " << b);
    nseg += seg > 0 && ql > seg ? (ql + seg - 1) / seg : 1;
  }
  for (auto* v : {&out.seg_request, &out.seg_token0, &out.seg_pos0, &shape.qo_len, &shape.kv_len, &shape.kv_start})
    v->resize(static_cast<std::size_t>(nseg));
  int32_t* const sreq = out.seg_request.data();
  int32_t* const stok = out.seg_token0.data();
  int32_t* const spos = out.seg_pos0.data();
  int32_t* const qo = shape.qo_len.data();
  int32_t* const kv = shape.kv_len.data();
  int32_t* const ks = shape.kv_start.data();
  std::size_t i = 0;
  for (int32_t b = 0; b < batch; ++b) {
    const int32_t ql = r.qo_len[b], kl = r.kv_len[b];
    const int32_t step = seg > 0 ? seg : std::max(ql, 1);
    int32_t t0 = 0;
    do {
      const int32_t n = std::min(step, ql - t0);
      const int64_t pos0 = int64_t(kl) - ql + t0;
      // Keys this segment's rows (positions pos0 .. pos0 + n - 1) can see: [lo, hi), from the
      // variant's KV-range hook (attention/variant.cuh), the same the kernel trims items with.
      const attn::KVRange kr = variant.kv_range<int64_t>(pos0, pos0 + n - 1, kl);
      sreq[i] = b;
      stok[i] = t0;
      spos[i] = static_cast<int32_t>(pos0);
      qo[i] = n;
      kv[i] = static_cast<int32_t>(kr.end);
      ks[i] = static_cast<int32_t>(kr.begin);
      ++i;
      t0 += n;
    } while (t0 < ql);
  }
  WEFT_CHECK_ARG(r.head_fold >= 1 && r.num_kv_heads % r.head_fold == 0 && r.num_ctas % r.head_fold == 0,
                 "head_fold", "must divide num_kv_heads " << r.num_kv_heads << " and num_ctas " << r.num_ctas
                                                          << ", got " << r.head_fold);
  plan::BalanceConfig cfg;
  cfg.num_ctas = r.num_ctas / r.head_fold;
  cfg.num_kv_heads = r.num_kv_heads / r.head_fold;
  cfg.head_fold = r.head_fold;
  cfg.group_size = r.group_size;
  cfg.tile_q = r.cta_q;
  cfg.kv_granularity = r.cta_kv;
  cfg.min_chunk = r.min_chunk;
  cfg.allow_split = r.allow_split;
  cfg.deal_heads_together = r.deal_heads_together;
  cfg.heads_in_turn = r.heads_in_turn;
  cfg.grouped_tail_units = heuristics::kGroupedTailUnitsPerCta * cfg.num_ctas;
  // Cost of a chunk ~ rows x keys of MMA work for a full tile; alpha covers the per-item fixed
  // cost (Q load, epilogue) as if the tile had cta_kv more keys.
  cfg.alpha = static_cast<double>(r.cta_kv) / r.cta_q;
  cfg.beta = 1.0;
  const int64_t L = planner_.prepare(shape, cfg);
  double ms_split = 0, ms_whole = 0;
  bool split = planner_.choose_split(L, &ms_split, &ms_whole);
  if (split) {
    // The shared planner keeps a split plan when its makespan is 10% lower; the partial writes
    // and the merge pass it does not count cost a prefill about kMergePenaltyKeys of one CTA's
    // key-steps (H200, causal L1024 d128: split plan 768 vs 1088 units predicted, measured
    // 122 us vs 61 us unsplit). Keep the split only when it still wins after that penalty
    // (short chunks against long histories: tiles < CTAs).
    constexpr double kMergePenaltyKeys = 1536;
    if (ms_split + kMergePenaltyKeys >= ms_whole) split = false;
  }
  planner_.build(split, L, out.plan);
}

int32_t max_segments(int32_t max_batch, int64_t max_total_q, int32_t cta_q, int32_t group_size) {
  const int64_t seg = (group_size > 0 && cta_q % group_size == 0) ? cta_q / group_size : 0;
  const int64_t n = seg > 0 ? max_total_q / seg + max_batch : max_batch;
  WEFT_CHECK_ARG(n <= INT32_MAX / 4, "max_total_q", "too many query segments: " << n);
  return static_cast<int32_t>(std::max<int64_t>(n, 1));
}

int32_t prefill_head_fold(int32_t num_kv_heads, int32_t num_ctas) {
  return num_kv_heads >= 1 && num_ctas >= 1 ? std::gcd(num_kv_heads, num_ctas) : 1;
}

plan::PlanBounds plan_bounds(int32_t max_batch, int64_t max_total_q, int32_t num_kv_heads,
                             int32_t group_size, int32_t cta_q, int32_t head_dim, int32_t num_ctas,
                             int32_t head_fold) {
  WEFT_CHECK_ARG(head_fold >= 1 && num_kv_heads % head_fold == 0 && num_ctas % head_fold == 0, "head_fold",
                 "must divide num_kv_heads " << num_kv_heads << " and num_ctas " << num_ctas << ", got " << head_fold);
  const int32_t segs = max_segments(max_batch, max_total_q, cta_q, group_size);
  // Tiles per KV head <= ceil(rows / cta_q) + one partial tile per segment.
  const int64_t rows = max_total_q * group_size;
  const int64_t tiles = int64_t(num_kv_heads / head_fold) * ((rows + cta_q - 1) / cta_q + segs);
  WEFT_CHECK_ARG(tiles <= INT32_MAX / 8, "max_total_q", "too many query tiles: " << tiles);
  plan::PlanBounds b;
  b.max_batch = segs;
  b.max_tiles = static_cast<int32_t>(tiles);
  b.num_ctas = num_ctas / head_fold;
  b.head_fold = head_fold;
  b.tile_q = cta_q;
  b.head_dim = head_dim;
  return b;
}

namespace {
std::size_t align_up(std::size_t x, std::size_t a) { return (x + a - 1) / a * a; }
}  // namespace

PrefillWorkspaceLayout make_layout(int32_t max_batch, int64_t max_total_q, int32_t num_kv_heads,
                                   int32_t group_size, int32_t cta_q, int32_t head_dim,
                                   int32_t num_ctas, int32_t head_fold) {
  PrefillWorkspaceLayout l;
  plan::PlanBounds pb =
      plan_bounds(max_batch, max_total_q, num_kv_heads, group_size, cta_q, head_dim, num_ctas, head_fold);
  l.max_segments = pb.max_batch;
  l.max_batch = max_batch;
  // The segment arrays at the end of the plan's metadata region (PlanBounds::tail_bytes): plan()
  // copies the metadata and them in ONE copy (two copies cost the H100 machine's host ~2-3 us more:
  // a copy below ~24 KiB is written into the driver's command stream by the CPU,
  // heuristics::kMinPlanCopyBytes).
  constexpr std::size_t kA = plan::WorkspaceLayout::kAlign;
  std::size_t off = 0;
  const std::size_t seg_request = off;
  off = align_up(off + sizeof(int32_t) * l.max_segments, kA);
  const std::size_t seg_token0 = off;
  off = align_up(off + sizeof(int32_t) * l.max_segments, kA);
  const std::size_t seg_pos0 = off;
  off = align_up(off + sizeof(int32_t) * l.max_segments, kA);
  const std::size_t real_kv_len = off;
  off = align_up(off + sizeof(int32_t) * max_batch, kA);
  l.extra_bytes = off;
  pb.tail_bytes = off;
  l.plan = plan::WorkspaceLayout(pb);
  const std::size_t base = l.plan.tail_offset();
  l.off_seg_request = base + seg_request;
  l.off_seg_token0 = base + seg_token0;
  l.off_seg_pos0 = base + seg_pos0;
  l.off_real_kv_len = base + real_kv_len;
  l.total_bytes = l.plan.total_bytes();
  return l;
}

}  // namespace weft::prefill
