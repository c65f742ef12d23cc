// make_pack_plan: decode work plan with prefix packs (work_plan.h).
#include <algorithm>
#include <numeric>
#include <utility>

#include "attention/plan/work_plan.h"
#include "weft/error.h"

namespace weft::plan {

int32_t WorkPlan::num_slots() const {
  int32_t n = 0;
  for (int32_t s : item_slot) n = std::max(n, s + 1);
  return n;
}

namespace {

// [begin, end) cut into near-equal chunks of at most max_chunk keys (multiples of gran except
// the last); one (possibly empty) chunk when max_chunk is 0 or the range fits.
std::vector<std::pair<int32_t, int32_t>> chunks_of(int32_t begin, int32_t end, int32_t max_chunk, int32_t gran) {
  const int64_t len = end - begin;
  if (max_chunk <= 0 || len <= max_chunk) return {{begin, end}};
  const int64_t n = (len + max_chunk - 1) / max_chunk;
  int64_t clen = (len + n - 1) / n;
  clen = (clen + gran - 1) / gran * gran;
  std::vector<std::pair<int32_t, int32_t>> v;
  for (int64_t b0 = begin; b0 < end; b0 += clen)
    v.push_back({static_cast<int32_t>(b0), static_cast<int32_t>(std::min<int64_t>(end, b0 + clen))});
  return v;
}

}  // namespace

WorkPlan make_pack_plan(const PrefixForest& forest, const int32_t* indptr, const int32_t* kv_len,
                        const PackPlanConfig& cfg) {
  WEFT_CHECK_ARG(cfg.num_ctas >= 1, "cfg.num_ctas", "must be >= 1, got " << cfg.num_ctas);
  WEFT_CHECK_ARG(cfg.num_kv_heads >= 1, "cfg.num_kv_heads", "must be >= 1, got " << cfg.num_kv_heads);
  WEFT_CHECK_ARG(cfg.group_size >= 1, "cfg.group_size", "must be >= 1, got " << cfg.group_size);
  WEFT_CHECK_ARG(cfg.tile_rows >= 1, "cfg.tile_rows", "must be >= 1, got " << cfg.tile_rows);
  WEFT_CHECK_ARG(cfg.page_size >= 1, "cfg.page_size", "must be >= 1, got " << cfg.page_size);
  WEFT_CHECK_ARG(cfg.kv_granularity >= 1 && cfg.max_chunk >= 0 && cfg.max_chunk % cfg.kv_granularity == 0,
                 "cfg.max_chunk", "must be >= 0 and a multiple of kv_granularity " << cfg.kv_granularity
                                                                                   << ", got " << cfg.max_chunk);
  WEFT_CHECK_ARG(cfg.min_sharers >= 2, "cfg.min_sharers", "must be >= 2, got " << cfg.min_sharers);
  const int32_t B = forest.num_requests(), g = cfg.group_size, H = cfg.num_kv_heads, TR = cfg.tile_rows;
  WorkPlan p;
  p.num_ctas = cfg.num_ctas;
  p.num_kv_heads = H;
  p.group_size = g;
  p.tile_rows = TR;
  p.batch = B;
  p.kv_len.assign(kv_len, kv_len + B);
  p.req_list = forest.order;
  std::vector<int32_t> pos_of(B);
  for (int32_t i = 0; i < B; ++i) pos_of[forest.order[i]] = i;

  // Packs need >= 2 requests' groups in one item.
  const int32_t per_pack = TR / g;
  const bool packs = per_pack >= 2;
  const int32_t row_tiles = (g + TR - 1) / TR;  // output row groups per (request, kv head)
  // Sources of output row group (request b, kv head h, row tile t), group index
  // (b * H + h) * row_tiles + t, appended in generation order (key order within a group) to flat
  // arrays and bucketed by group below (no per-group vectors: a 256-request plan has thousands).
  const size_t G = static_cast<size_t>(B) * H * row_tiles;
  std::vector<int32_t> src_group, src_slot_g, src_row_g;
  std::vector<int32_t> group_sources(G, 0);
  auto add_source = [&](size_t group, int32_t slot, int32_t row) {
    src_group.push_back(static_cast<int32_t>(group));
    src_slot_g.push_back(slot);
    src_row_g.push_back(row);
    ++group_sources[group];
  };
  int32_t next_slot = 0;
  std::vector<int32_t> priv_start(B, 0);
  auto add_item = [&](int32_t req_begin, int32_t num_reqs, int32_t h, int32_t r0, int32_t r1, int32_t page_base,
                      int32_t k0, int32_t k1, int32_t slot) {
    p.item_req_begin.push_back(req_begin);
    p.item_num_reqs.push_back(num_reqs);
    p.item_kv_head.push_back(h);
    p.item_row_begin.push_back(r0);
    p.item_row_end.push_back(r1);
    p.item_page_base.push_back(page_base);
    p.item_kv_begin.push_back(k0);
    p.item_kv_end.push_back(k1);
    p.item_slot.push_back(slot);
  };

  // Packs: forest nodes in preorder (an ancestor's keys before its descendants').
  if (packs) {
    for (const PrefixNode& n : forest.nodes) {
      if (n.req_end - n.req_begin < cfg.min_sharers) continue;
      const int32_t k0 = n.page_begin * cfg.page_size, k1 = n.page_end * cfg.page_size;
      for (int32_t i = n.req_begin; i < n.req_end; ++i)
        priv_start[forest.order[i]] = std::max(priv_start[forest.order[i]], k1);
      const auto ch = chunks_of(k0, k1, cfg.max_chunk, cfg.kv_granularity);
      for (int32_t h = 0; h < H; ++h)
        for (int32_t q0 = n.req_begin; q0 < n.req_end; q0 += per_pack) {
          const int32_t nr = std::min(per_pack, n.req_end - q0);
          for (const auto& [c0, c1] : ch) {
            const int32_t slot = next_slot++;
            add_item(q0, nr, h, 0, nr * g, indptr[forest.order[q0]], c0, c1, slot);
            for (int32_t j = 0; j < nr; ++j)
              add_source((static_cast<size_t>(forest.order[q0 + j]) * H + h) * row_tiles, slot, j * g);
          }
        }
    }
  }
  // Private suffixes, per (request, kv head, row tile); the only item of a row group that has no
  // other source writes the final output.
  for (int32_t b = 0; b < B; ++b) {
    WEFT_CHECK_ARG(kv_len[b] >= priv_start[b], "kv_len", "request " << b << " is shorter than its shared pages");
    const auto ch = chunks_of(priv_start[b], kv_len[b], cfg.max_chunk, cfg.kv_granularity);
    const bool has_keys = kv_len[b] > priv_start[b];
    for (int32_t h = 0; h < H; ++h)
      for (int32_t t = 0; t < row_tiles; ++t) {
        const size_t grp = (static_cast<size_t>(b) * H + h) * row_tiles + t;
        const bool shared_sources = group_sources[grp] > 0;
        const int32_t r0 = t * TR, r1 = std::min(g, r0 + TR);
        if (!has_keys && shared_sources) continue;  // fully shared: the packs hold every key
        const bool final_item = !shared_sources && ch.size() == 1;
        for (const auto& [c0, c1] : ch) {
          const int32_t slot = final_item ? -1 : next_slot++;
          add_item(pos_of[b], 1, h, r0, r1, indptr[b], c0, c1, slot);
          if (!final_item) add_source(grp, slot, 0);  // its slot's row 0 holds row r0
        }
      }
  }
  // Merges: every row group with partial sources, its sources in generation (= key) order:
  // a stable counting sort of the flat source list by group.
  std::vector<int32_t> group_begin(G + 1, 0);
  for (size_t x = 0; x < G; ++x) group_begin[x + 1] = group_begin[x] + group_sources[x];
  p.src_slot.resize(src_group.size());
  p.src_row.resize(src_group.size());
  {
    std::vector<int32_t> fill(group_begin.begin(), group_begin.end() - 1);
    for (size_t e = 0; e < src_group.size(); ++e) {
      const int32_t at = fill[src_group[e]]++;
      p.src_slot[at] = src_slot_g[e];
      p.src_row[at] = src_row_g[e];
    }
  }
  p.merge_src_indptr.push_back(0);
  for (int32_t b = 0; b < B; ++b)
    for (int32_t h = 0; h < H; ++h)
      for (int32_t t = 0; t < row_tiles; ++t) {
        const size_t grp = (static_cast<size_t>(b) * H + h) * row_tiles + t;
        if (group_sources[grp] == 0) continue;
        p.merge_request.push_back(b);
        p.merge_kv_head.push_back(h);
        p.merge_row_begin.push_back(t * TR);
        p.merge_row_end.push_back(std::min(g, t * TR + TR));
        p.merge_src_indptr.push_back(group_begin[grp + 1]);
      }

  // Deal: longest first (cost = rows + keys, as balance.h's chunk_cost with alpha = beta = 1),
  // stable, each to the least loaded CTA (ties: the lower index).
  const int32_t n = p.num_items();
  // Costs are whole numbers (rows + keys): sort (-cost, index) pairs, which is the stable
  // descending order, without re-reading the item arrays in every comparison.
  std::vector<int64_t> cost_of(n);
  std::vector<std::pair<int64_t, int32_t>> keyed(n);
  for (int32_t i = 0; i < n; ++i) {
    cost_of[i] = int64_t(p.item_row_end[i] - p.item_row_begin[i]) + int64_t(p.item_kv_end[i] - p.item_kv_begin[i]);
    keyed[i] = {-cost_of[i], i};
  }
  std::sort(keyed.begin(), keyed.end());
  std::vector<int32_t> order(n);
  for (int32_t i = 0; i < n; ++i) order[i] = keyed[i].second;
  // The CTAs in a binary min-heap of single 64-bit keys (load << 21 | cta: the same order as
  // (load, cta) pairs, ties to the lower CTA) replaced in place (one sift-down per item instead
  // of a pop and a push): ~3x faster than std::priority_queue of pairs for 4K items on 264 CTAs.
  constexpr int kCtaBits = 21;
  WEFT_CHECK_ARG(cfg.num_ctas < (1 << kCtaBits), "cfg.num_ctas", "must be < 2^21, got " << cfg.num_ctas);
  std::vector<uint64_t> heap(cfg.num_ctas);
  for (int32_t c = 0; c < cfg.num_ctas; ++c) heap[c] = uint64_t(c);  // all loads 0: already a heap
  std::vector<int32_t> cta_of(n), cta_count(cfg.num_ctas + 1, 0);
  const uint64_t cta_mask = (uint64_t(1) << kCtaBits) - 1;
  const size_t H2 = heap.size();
  for (int32_t i : order) {
    const uint64_t top = heap[0];
    const int32_t c = static_cast<int32_t>(top & cta_mask);
    cta_of[i] = c;
    ++cta_count[c + 1];
    const uint64_t key = top + (uint64_t(cost_of[i]) << kCtaBits);
    size_t at = 0;  // sift the grown key down from the root
    while (true) {
      size_t child = 2 * at + 1;
      if (child >= H2) break;
      if (child + 1 < H2 && heap[child + 1] < heap[child]) ++child;
      if (heap[child] >= key) break;
      heap[at] = heap[child];
      at = child;
    }
    heap[at] = key;
  }
  // Flatten by CTA: item arrays permuted into CTA order, each CTA's items in deal order (slots
  // keep their numbers).
  p.cta_indptr.assign(cfg.num_ctas + 1, 0);
  for (int32_t c = 0; c < cfg.num_ctas; ++c) p.cta_indptr[c + 1] = p.cta_indptr[c] + cta_count[c + 1];
  std::vector<int32_t> perm(n), fill(p.cta_indptr.begin(), p.cta_indptr.end() - 1);
  for (int32_t i : order) perm[fill[cta_of[i]]++] = i;
  for (auto* v : {&p.item_req_begin, &p.item_num_reqs, &p.item_kv_head, &p.item_row_begin, &p.item_row_end,
                  &p.item_page_base, &p.item_kv_begin, &p.item_kv_end, &p.item_slot}) {
    std::vector<int32_t> w(n);
    for (int32_t i = 0; i < n; ++i) w[i] = (*v)[perm[i]];
    v->swap(w);
  }
  return p;
}

}  // namespace weft::plan
