// The planner as it was before the "planning is cheap" work (issue 19), kept verbatim as the
// reference that the optimized planner must reproduce bit for bit (plan_identity_test.cpp,
// decode_plan_test.cpp, prefill_plan_test.cpp) and as the "before" column of bench/plan_bench.cpp.
// Header-only (inline) so that every host test executable and the bench can include it.
// Straightforward code: per-call vectors, std::priority_queue, two stable_sorts, plan_decode
// re-running balance() per candidate, serialize() clearing the whole metadata region.
#pragma once
#include <algorithm>
#include <cstring>
#include <numeric>
#include <queue>
#include <string>
#include <vector>

#include "attention/plan/balance.h"
#include "decode/decode_plan.h"
#include "prefill/prefill_plan.h"
#include "weft/error.h"

namespace weft::plan::reference {

namespace detail {

inline void validate(const BatchShape& s, const BalanceConfig& c) {
  WEFT_CHECK_ARG(c.num_ctas >= 1, "cfg.num_ctas", "must be >= 1, got " << c.num_ctas);
  WEFT_CHECK_ARG(c.num_kv_heads >= 1, "cfg.num_kv_heads", "must be >= 1, got " << c.num_kv_heads);
  WEFT_CHECK_ARG(c.group_size >= 1, "cfg.group_size", "must be >= 1, got " << c.group_size);
  WEFT_CHECK_ARG(c.tile_q >= 1, "cfg.tile_q", "must be >= 1, got " << c.tile_q);
  WEFT_CHECK_ARG(c.kv_granularity >= 1, "cfg.kv_granularity", "must be >= 1, got " << c.kv_granularity);
  WEFT_CHECK_ARG(c.min_chunk >= 0, "cfg.min_chunk", "must be >= 0, got " << c.min_chunk);
  WEFT_CHECK_ARG(c.alpha >= 0 && c.beta > 0, "cfg.alpha/beta",
                 "need alpha >= 0 and beta > 0, got " << c.alpha << ", " << c.beta);
  WEFT_CHECK_ARG(c.min_gain >= 0 && c.min_gain < 1, "cfg.min_gain", "must be in [0, 1), got " << c.min_gain);
  WEFT_CHECK_ARG(s.qo_len.size() == s.kv_len.size(), "shape.kv_len",
                 "size " << s.kv_len.size() << " differs from qo_len size " << s.qo_len.size());
  WEFT_CHECK_ARG(s.kv_start.empty() || s.kv_start.size() == s.kv_len.size(), "shape.kv_start",
                 "size " << s.kv_start.size() << " must be 0 or " << s.kv_len.size());
  for (size_t b = 0; b < s.kv_len.size(); ++b) {
    WEFT_CHECK_ARG(s.qo_len[b] >= 0, "shape.qo_len[" + std::to_string(b) + "]",
                   "must be >= 0, got " << s.qo_len[b]);
    WEFT_CHECK_ARG(s.kv_len[b] >= 0, "shape.kv_len[" + std::to_string(b) + "]",
                   "must be >= 0, got " << s.kv_len[b]);
    if (!s.kv_start.empty()) {
      WEFT_CHECK_ARG(s.kv_start[b] >= 0 && s.kv_start[b] <= s.kv_len[b],
                     "shape.kv_start[" + std::to_string(b) + "]",
                     "must be in [0, kv_len = " << s.kv_len[b] << "], got " << s.kv_start[b]);
    }
  }
}

struct Tile {
  int32_t request, kv_head, row_begin, row_end, kv_begin, kv_end;
};
struct Chunk {
  int32_t tile, kv_begin, kv_end;
  double cost;
};

// Steps 3-5 for chunk bound L (split) or whole tiles (!split); fills p's items, merges, costs.
inline void deal(const std::vector<Tile>& tiles, const BalanceConfig& cfg, int64_t L, bool split, Plan& p) {
  int32_t longest = 0;
  for (const Tile& t : tiles) longest = std::max(longest, t.kv_end - t.kv_begin);
  p.max_chunk = tiles.empty() ? 0 : static_cast<int32_t>(split ? L : longest);

  p.split = false;
  // Step 3: chunks (generation order), partial slots and merges.
  std::vector<Chunk> chunks;
  std::vector<int32_t> chunk_slot;
  p.merge_indptr.push_back(0);
  for (int32_t t = 0; t < static_cast<int32_t>(tiles.size()); ++t) {
    const Tile& tl = tiles[t];
    const int32_t rows = tl.row_end - tl.row_begin;
    const int64_t len = tl.kv_end - tl.kv_begin;
    const int64_t n = (split && len > L) ? (len + L - 1) / L : 1;
    // n near-equal chunks (length rounded up to the granularity, <= L) balance better than
    // n - 1 chunks of L plus a short remainder.
    int64_t clen = (len + n - 1) / n;
    clen = (clen + cfg.kv_granularity - 1) / cfg.kv_granularity * cfg.kv_granularity;
    const int64_t n_used = n == 1 ? 1 : (len + clen - 1) / clen;
    for (int64_t c = 0; c < n_used; ++c) {
      const int32_t b0 = static_cast<int32_t>(tl.kv_begin + c * clen);
      const int32_t b1 = n_used == 1 ? tl.kv_end : static_cast<int32_t>(std::min<int64_t>(tl.kv_end, b0 + clen));
      chunks.push_back({t, b0, b1, chunk_cost(cfg, rows, b1 - b0)});
      chunk_slot.push_back(n_used == 1 ? -1 : p.merge_indptr.back() + static_cast<int32_t>(c));
    }
    if (n_used > 1) {
      p.merge_request.push_back(tl.request);
      p.merge_kv_head.push_back(tl.kv_head);
      p.merge_row_begin.push_back(tl.row_begin);
      p.merge_row_end.push_back(tl.row_end);
      p.merge_indptr.push_back(p.merge_indptr.back() + static_cast<int32_t>(n_used));
    }
  }

  // Step 4: stable sort by cost, descending.
  std::vector<int32_t> order(chunks.size());
  std::iota(order.begin(), order.end(), 0);
  if (cfg.row_tiles_together) {
    // Tie order (request, kv_head, chunk index, tile): chunk c of every tile of one (request,
    // kv head) before chunk c + 1. Tiles of one (request, kv head) are consecutive in `tiles`.
    std::vector<int64_t> head_of(chunks.size()), chunk_index(chunks.size());
    int64_t head = -1, c = 0;
    for (size_t i = 0; i < chunks.size(); ++i) {
      const Tile& tl = tiles[chunks[i].tile];
      const bool new_tile = i == 0 || chunks[i].tile != chunks[i - 1].tile;
      const bool new_head = i == 0 || tl.request != tiles[chunks[i - 1].tile].request ||
                            tl.kv_head != tiles[chunks[i - 1].tile].kv_head;
      if (new_head) ++head;
      c = new_tile ? 0 : c + 1;
      head_of[i] = head;
      chunk_index[i] = c;
    }
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return head_of[a] != head_of[b] ? head_of[a] < head_of[b] : chunk_index[a] < chunk_index[b];
    });
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return chunks[a].cost > chunks[b].cost; });

  // Step 5: min-heap of (load, cta); ties go to the lower CTA index.
  using Entry = std::pair<double, int32_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  for (int32_t c = 0; c < cfg.num_ctas; ++c) heap.push({0.0, c});
  std::vector<std::vector<int32_t>> per_cta(cfg.num_ctas);
  p.cta_cost.assign(cfg.num_ctas, 0.0);
  for (int32_t w : order) {
    auto [load, c] = heap.top();
    heap.pop();
    per_cta[c].push_back(w);
    load += chunks[w].cost;
    p.cta_cost[c] = load;
    heap.push({load, c});
  }

  // Flatten by CTA.
  p.cta_indptr.assign(cfg.num_ctas + 1, 0);
  const size_t n_items = chunks.size();
  p.item_request.reserve(n_items);
  for (int32_t c = 0; c < cfg.num_ctas; ++c) {
    for (int32_t w : per_cta[c]) {
      const Chunk& ch = chunks[w];
      const Tile& tl = tiles[ch.tile];
      p.item_request.push_back(tl.request);
      p.item_kv_head.push_back(tl.kv_head);
      p.item_row_begin.push_back(tl.row_begin);
      p.item_row_end.push_back(tl.row_end);
      p.item_kv_begin.push_back(ch.kv_begin);
      p.item_kv_end.push_back(ch.kv_end);
      p.item_partial_slot.push_back(chunk_slot[w]);
    }
    p.cta_indptr[c + 1] = static_cast<int32_t>(p.item_request.size());
  }
  p.split = p.num_merges() > 0;
}

}  // namespace detail

inline Plan balance(const BatchShape& shape, const BalanceConfig& cfg) {
  detail::validate(shape, cfg);
  Plan p;
  p.num_ctas = cfg.num_ctas;
  p.num_kv_heads = cfg.num_kv_heads;
  p.group_size = cfg.group_size;
  p.tile_q = cfg.tile_q;
  p.batch = static_cast<int32_t>(shape.kv_len.size());
  p.qo_indptr.assign(p.batch + 1, 0);
  for (int32_t b = 0; b < p.batch; ++b) {
    const int64_t next = int64_t(p.qo_indptr[b]) + shape.qo_len[b];
    WEFT_CHECK_ARG(next <= INT32_MAX, "shape.qo_len", "total query tokens overflow int32");
    p.qo_indptr[b + 1] = static_cast<int32_t>(next);
  }
  p.kv_len = shape.kv_len;

  // Tiles in generation order (request, kv_head, tile).
  std::vector<detail::Tile> tiles;
  int64_t total_kv = 0;
  int32_t longest = 0;  // longest tile KV range
  for (int32_t b = 0; b < p.batch; ++b) {
    const int64_t rows = int64_t(shape.qo_len[b]) * cfg.group_size;
    WEFT_CHECK_ARG(rows <= INT32_MAX, "shape.qo_len", "rows of request " << b << " overflow int32");
    const int64_t nt = tiles_per_head(shape.qo_len[b], cfg.group_size, cfg.tile_q);
    const int32_t kb = shape.kv_start.empty() ? 0 : shape.kv_start[b];
    const int32_t ke = shape.kv_len[b];
    for (int32_t h = 0; h < cfg.num_kv_heads; ++h) {
      for (int64_t t = 0; t < nt; ++t) {
        const int32_t r0 = static_cast<int32_t>(t * cfg.tile_q);
        const int32_t r1 = static_cast<int32_t>(std::min<int64_t>(rows, r0 + int64_t(cfg.tile_q)));
        tiles.push_back({b, h, r0, r1, kb, ke});
        total_kv += ke - kb;
        longest = std::max(longest, ke - kb);
      }
    }
  }
  p.num_tiles = static_cast<int32_t>(tiles.size());

  // Step 2: the maximum chunk length.
  int64_t L = (total_kv + cfg.num_ctas - 1) / cfg.num_ctas;
  L = std::max<int64_t>({L, cfg.min_chunk, 1});
  L = (L + cfg.kv_granularity - 1) / cfg.kv_granularity * cfg.kv_granularity;
  if (cfg.allow_split && longest > L) {
    // Split only when it lowers the planned makespan by min_gain: splitting adds partial
    // writes and a merge pass that the cost model does not count.
    Plan with = p, without = p;
    detail::deal(tiles, cfg, L, true, with);
    detail::deal(tiles, cfg, L, false, without);
    const double ms_with = *std::max_element(with.cta_cost.begin(), with.cta_cost.end());
    const double ms_without = *std::max_element(without.cta_cost.begin(), without.cta_cost.end());
    return ms_with <= (1.0 - cfg.min_gain) * ms_without ? with : without;
  }
  detail::deal(tiles, cfg, L, false, p);
  return p;
}


inline void serialize(const WorkspaceLayout& layout, const Plan& plan, void* dst) {
  WEFT_CHECK_ARG(plan.version == kPlanVersion, "plan", "version " << plan.version << " != " << kPlanVersion);
  WEFT_CHECK_ARG(plan.num_ctas == layout.bounds().num_ctas, "plan",
                 "num_ctas " << plan.num_ctas << " != workspace bound " << layout.bounds().num_ctas);
  WEFT_CHECK_ARG(plan.tile_q == layout.bounds().tile_q, "plan",
                 "tile_q " << plan.tile_q << " != workspace bound " << layout.bounds().tile_q);
  WEFT_CHECK_ARG(plan.batch <= layout.bounds().max_batch, "plan",
                 "batch " << plan.batch << " exceeds max_batch " << layout.bounds().max_batch);
  WEFT_CHECK_ARG(plan.num_tiles <= layout.bounds().max_tiles, "plan",
                 "num_tiles " << plan.num_tiles << " exceeds max_tiles " << layout.bounds().max_tiles);
  WEFT_CHECK_ARG(plan.num_items() <= layout.max_items() && plan.num_merges() <= layout.max_merges() &&
                     plan.num_partial_slots() <= layout.max_slots(),
                 "plan", "items/merges/slots " << plan.num_items() << "/" << plan.num_merges() << "/"
                                               << plan.num_partial_slots() << " exceed bounds "
                                               << layout.max_items() << "/" << layout.max_merges() << "/" << layout.max_slots());
  std::memset(dst, 0, layout.metadata_bytes());
  char* base = static_cast<char*>(dst);
  PlanHeader h{};
  h.version = plan.version;
  h.num_items = plan.num_items();
  h.num_merges = plan.num_merges();
  h.num_ctas = plan.num_ctas;
  h.batch = plan.batch;
  h.tile_q = plan.tile_q;
  h.group_size = plan.group_size;
  h.num_kv_heads = plan.num_kv_heads;
  h.num_partial_slots = plan.num_partial_slots();
  h.split = plan.split ? 1 : 0;
  h.head_fold = plan.head_fold;  // the one field the format gained since (head folding, 1 here)
  std::memcpy(base, &h, sizeof(h));
  PlanPointers v = layout.pointers(dst);
  auto put = [](const int32_t* d, const std::vector<int32_t>& s) {
    if (!s.empty()) std::memcpy(const_cast<int32_t*>(d), s.data(), s.size() * sizeof(int32_t));
  };
  put(v.cta_indptr, plan.cta_indptr);
  put(v.item_request, plan.item_request);
  put(v.item_kv_head, plan.item_kv_head);
  put(v.item_row_begin, plan.item_row_begin);
  put(v.item_row_end, plan.item_row_end);
  put(v.item_kv_begin, plan.item_kv_begin);
  put(v.item_kv_end, plan.item_kv_end);
  put(v.item_partial_slot, plan.item_partial_slot);
  put(v.merge_request, plan.merge_request);
  put(v.merge_kv_head, plan.merge_kv_head);
  put(v.merge_row_begin, plan.merge_row_begin);
  put(v.merge_row_end, plan.merge_row_end);
  put(v.merge_indptr, plan.merge_indptr);
  put(v.qo_indptr, plan.qo_indptr);
  put(v.kv_len, plan.kv_len);
  // item_merge: the merge entry whose slot range holds the item's partial slot (slots of a merge
  // are consecutive); the counters stay 0 (memset above).
  int32_t* item_merge = const_cast<int32_t*>(v.item_merge);
  std::vector<int32_t> slot_merge(std::max(plan.num_partial_slots(), 0), -1);
  for (int32_t m = 0; m < plan.num_merges(); ++m)
    for (int32_t s = plan.merge_indptr[m]; s < plan.merge_indptr[m + 1]; ++s) slot_merge[s] = m;
  for (int32_t i = 0; i < plan.num_items(); ++i) {
    const int32_t s = plan.item_partial_slot[i];
    item_merge[i] = s >= 0 && s < static_cast<int32_t>(slot_merge.size()) ? slot_merge[s] : -1;
  }
  CtaRecord* first = const_cast<CtaRecord*>(v.cta_first);
  for (int32_t c = 0; c < plan.num_ctas; ++c) {
    CtaRecord r{};
    r.item_begin = plan.cta_indptr[c];
    r.item_end = plan.cta_indptr[c + 1];
    if (r.item_begin < r.item_end) {
      const int32_t i = r.item_begin;
      r.request = plan.item_request[i];
      r.kv_head = plan.item_kv_head[i];
      r.row_begin = plan.item_row_begin[i];
      r.row_end = plan.item_row_end[i];
      r.kv_begin = plan.item_kv_begin[i];
      r.kv_end = plan.item_kv_end[i];
      r.partial_slot = plan.item_partial_slot[i];
      r.token0 = plan.qo_indptr[r.request];
      r.merge = item_merge[i];
    }
    first[c] = r;
  }
}


namespace detail {
inline double makespan(const Plan& p) {
  double m = 0;
  for (double c : p.cta_cost) m = std::max(m, c);
  return m;
}
}  // namespace detail

inline Plan plan_decode(const BatchShape& shape, const BalanceConfig& cfg) {
  Plan best = reference::balance(shape, cfg);
  if (!best.split || best.max_chunk <= 0) return best;  // nothing split: a larger bound changes nothing
  int64_t longest = 0;
  for (size_t b = 0; b < shape.kv_len.size(); ++b)
    longest = std::max<int64_t>(longest, shape.kv_len[b] - (shape.kv_start.empty() ? 0 : shape.kv_start[b]));
  const int64_t g = cfg.kv_granularity;
  const int64_t n0 = (longest + best.max_chunk - 1) / best.max_chunk;
  double best_ms = detail::makespan(best);
  for (int64_t n = n0 - 1; n >= std::max<int64_t>(1, n0 - decode::kPlanSearch); --n) {
    const int64_t bound = ((longest + n - 1) / n + g - 1) / g * g;
    if (bound <= best.max_chunk || bound > INT32_MAX) continue;
    BalanceConfig c = cfg;
    c.min_chunk = static_cast<int32_t>(bound);  // raises balance's L to `bound`
    Plan cand = reference::balance(shape, c);
    const double ms = detail::makespan(cand);
    if (ms < best_ms) {
      best_ms = ms;
      best = std::move(cand);
    }
  }
  return best;
}


inline prefill::SegmentedPlan make_prefill_plan(const prefill::PlanRequest& r) {
  WEFT_CHECK_ARG(r.qo_len.size() == r.kv_len.size(), "kv_len",
                 "size " << r.kv_len.size() << " differs from qo_len size " << r.qo_len.size());
  const int32_t seg = prefill::segment_tokens(r.cta_q, r.group_size, r.causal, r.window_left);
  prefill::SegmentedPlan out;
  BatchShape shape;
  const int32_t batch = static_cast<int32_t>(r.qo_len.size());
  for (int32_t b = 0; b < batch; ++b) {
    const int32_t ql = r.qo_len[b], kl = r.kv_len[b];
    WEFT_CHECK_ARG(ql >= 0 && kl >= 0, "qo_len/kv_len", "negative length for request " << b);
    const int32_t step = seg > 0 ? seg : std::max(ql, 1);
    int32_t t0 = 0;
    do {
      const int32_t n = std::min(step, ql - t0);
      const int64_t pos0 = int64_t(kl) - ql + t0;
      // Keys this segment's rows can see: [lo, hi).
      int64_t hi = kl;
      if (r.causal) hi = std::clamp<int64_t>(pos0 + n, 0, kl);  // last token's position + 1
      int64_t lo = 0;
      if (r.window_left >= 0) lo = std::clamp<int64_t>(pos0 - r.window_left, 0, hi);
      out.seg_request.push_back(b);
      out.seg_token0.push_back(t0);
      out.seg_pos0.push_back(static_cast<int32_t>(pos0));
      shape.qo_len.push_back(n);
      shape.kv_len.push_back(static_cast<int32_t>(hi));
      shape.kv_start.push_back(static_cast<int32_t>(lo));
      t0 += n;
    } while (t0 < ql);
  }
  BalanceConfig cfg;
  cfg.num_ctas = r.num_ctas;
  cfg.num_kv_heads = r.num_kv_heads;
  cfg.group_size = r.group_size;
  cfg.tile_q = r.cta_q;
  cfg.kv_granularity = r.cta_kv;
  cfg.min_chunk = r.min_chunk;
  cfg.allow_split = r.allow_split;
  // Cost of a chunk ~ rows x keys of MMA work for a full tile; alpha covers the per-item fixed
  // cost (Q load, epilogue) as if the tile had cta_kv more keys.
  cfg.alpha = static_cast<double>(r.cta_kv) / r.cta_q;
  cfg.beta = 1.0;
  out.plan = reference::balance(shape, cfg);
  if (out.plan.num_merges() > 0) {
    // The shared planner keeps a split plan when its makespan is 10% lower; the partial writes
    // and the merge pass it does not count cost a prefill about kMergePenaltyKeys of one CTA's
    // key-steps (H200, causal L1024 d128: split plan 768 vs 1088 units predicted, measured
    // 122 us vs 61 us unsplit). Keep the split only when it still wins after that penalty
    // (short chunks against long histories: tiles < CTAs).
    constexpr double kMergePenaltyKeys = 1536;
    BalanceConfig no_split = cfg;
    no_split.allow_split = false;
    Plan whole = reference::balance(shape, no_split);
    const double ms_split = *std::max_element(out.plan.cta_cost.begin(), out.plan.cta_cost.end());
    const double ms_whole = *std::max_element(whole.cta_cost.begin(), whole.cta_cost.end());
    if (ms_split + kMergePenaltyKeys >= ms_whole) out.plan = std::move(whole);
  }
  return out;
}

}  // namespace weft::plan::reference
