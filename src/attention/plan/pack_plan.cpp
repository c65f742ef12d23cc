// make_pack_plan: decode work plan with prefix packs (work_plan.h).
#include <algorithm>
#include <climits>
#include <cstring>
#include <numeric>
#include <utility>

#include "attention/plan/work_plan.h"
#include "weft/error.h"

namespace weft::plan {

int32_t WorkPlan::num_slots() const {
  if (known_slots >= 0) return known_slots;
  int32_t n = 0;
  const int32_t tr = std::max(1, tile_rows);
  for (size_t i = 0; i < item_slot.size(); ++i) {
    const int32_t rows = item_row_end[i] - item_row_begin[i];
    n = std::max(n, item_slot[i] + (rows > tr ? (rows + tr - 1) / tr : 1));  // a wide item fills several
  }
  return n;
}

int64_t chunk_keys(int64_t len, int32_t max_chunk, int32_t gran) {
  if (max_chunk <= 0 || len <= max_chunk) return len;
  const int64_t n = (len + max_chunk - 1) / max_chunk;
  const int64_t clen = (len + n - 1) / n;
  return (clen + gran - 1) / gran * gran;
}

int32_t pack_max_chunk(int64_t keys, int32_t num_kv_heads, int32_t num_ctas, int32_t min_chunk, int32_t kv_tile) {
  const int64_t per_cta = std::max<int64_t>(min_chunk, (keys * num_kv_heads + num_ctas - 1) / std::max(1, num_ctas));
  int64_t pow2 = 1;
  while (pow2 * 2 <= per_cta) pow2 *= 2;
  const int64_t step = std::max<int64_t>(kv_tile, pow2 / 8);
  return static_cast<int32_t>(std::min<int64_t>(INT32_MAX / 2, (per_cta + step - 1) / step * step));
}

int32_t pack_work_chunk(int64_t keys, int64_t dup, const PackPlanConfig& cfg) {
  const int64_t c = pack_max_chunk(std::max<int64_t>(0, keys - dup), cfg.num_kv_heads, cfg.num_ctas,
                                   cfg.auto_chunk_min, cfg.kv_granularity);
  const int64_t gran = std::max(1, cfg.kv_granularity);  // a multiple of it (pack_max_chunk's step is one for 2^k)
  return static_cast<int32_t>(std::min<int64_t>(INT32_MAX / 2 / gran * gran, (c + gran - 1) / gran * gran));
}

WorkPlan make_pack_plan(const PrefixForest& forest, const int32_t* indptr, const int32_t* kv_len,
                        const PackPlanConfig& cfg) {
  WorkPlan p;
  PackPlanScratch scratch;
  make_pack_plan(forest, indptr, kv_len, cfg, p, scratch);
  return p;
}

namespace {
void make_pack_plan_cut(const PrefixForest& forest, const int32_t* indptr, const int32_t* kv_len,
                        const PackPlanConfig& cfg_in, WorkPlan& p, PackPlanScratch& sc, bool wide_own_chunk,
                        bool wave);
}  // namespace

void make_pack_plan(const PrefixForest& forest, const int32_t* indptr, const int32_t* kv_len,
                    const PackPlanConfig& cfg, WorkPlan& p, PackPlanScratch& sc) {
  WEFT_CHECK_ARG(cfg.max_slots >= 0, "cfg.max_slots", "must be >= 0, got " << cfg.max_slots);
  WEFT_CHECK_ARG(cfg.wide_wave_ctas >= 0 && cfg.wide_item_keys >= 0, "cfg.wide_wave_ctas",
                 "wide_wave_ctas and wide_item_keys must be >= 0, got " << cfg.wide_wave_ctas << ", "
                                                                       << cfg.wide_item_keys);
  // One wave of the wide tile (PackPlanConfig::wide_wave_ctas) where the kinds run one after the
  // other: without overlap at once; with it, only when the plan over the whole grid is not split
  // (the split plan's wide items keep their tile and grid: the second cut only in serial plans).
  const bool wave_ok = cfg.wide_wave_ctas >= std::max(1, cfg.head_fold) && cfg.auto_chunk_min > 0 && cfg.wide_rows > 0;
  const bool wave_first = wave_ok && !cfg.wide_overlap;
  make_pack_plan_cut(forest, indptr, kv_len, cfg, p, sc, true, wave_first);
  if (wave_ok && !wave_first && p.num_wide_items > 0 && !p.wide_split)
    make_pack_plan_cut(forest, indptr, kv_len, cfg, p, sc, true, true);
  // Wide items cut finer than max_chunk fill more partial slots (each ceil(rows / tile_rows));
  // past the workspace's slots (PackPlanConfig::max_slots) they are cut at max_chunk as the
  // narrow items (the plan before wide chunking), a function of the forest, cfg and the
  // private chunk counts, so lazy updates (pack_planner.h) keep it.
  if (cfg.max_slots > 0 && sc.wide_chunk != sc.max_chunk && p.num_slots() > cfg.max_slots)
    make_pack_plan_cut(forest, indptr, kv_len, cfg, p, sc, false, false);
}

namespace {
// The wide items' chunk for one wave of a wide tile that takes a whole SM (PackPlanConfig::
// wide_wave_ctas), Cw folded CTAs. Cost model, in keys of streaming: a wide item costs t0 + its
// keys, t0 = cfg.wide_item_keys (its fixed cost: the pipeline fill before the first tile's
// product, the epilogue, its 128 partial rows written and read again by the merge); a cut at
// chunk c makes N(c) = sum over nodes of items x chunks(keys, c) items of at most L(c) keys
// (chunk_keys, as for_chunks cuts), and the longest-first deal's makespan is estimated as
// ceil(N(c) / Cw) x (t0 + L(c)) (exact when the items are equal: a node's chunks). N falls as
// c grows, so for w = 1 .. kWaves the smallest c (a multiple of kv_granularity, at least
// auto_chunk_min) with N(c) <= w x Cw is found by bisection, and the c of the least estimate
// taken, ties to the longer chunk (fewer partial sources per row). With t0 > 0 that is the one
// wave unless rounding leaves its longest item more than ~t0 keys above the others'.
int32_t wave_chunk(const std::vector<PackPlanScratch::WideNode>& nodes, int32_t Cw, const PackPlanConfig& cfg) {
  constexpr int kWaves = 4;  // more waves only add fixed costs (t0 per wave) to the same keys
  const int64_t gran = std::max(1, cfg.kv_granularity), t0 = cfg.wide_item_keys;
  int64_t max_len = 0;
  for (const auto& u : nodes) max_len = std::max(max_len, u.keys);
  const int64_t lo = (std::max<int64_t>(gran, cfg.auto_chunk_min) + gran - 1) / gran,
                hi = std::max(lo, (max_len + gran - 1) / gran);  // in units of gran
  auto count = [&](int64_t c, int64_t* longest) {  // N(c), L(c)
    int64_t n = 0, l = 0;
    for (const auto& u : nodes) {
      const int64_t clen = chunk_keys(u.keys, static_cast<int32_t>(std::min<int64_t>(c, INT32_MAX / 2)), int32_t(gran));
      n += u.items * ((u.keys + clen - 1) / clen);
      l = std::max(l, std::min(clen, u.keys));
    }
    if (longest) *longest = l;
    return n;
  };
  int64_t best_c = hi * gran;
  double best = -1;
  for (int w = 1; w <= kWaves; ++w) {
    int64_t a = lo, b = hi;  // smallest c in [a, b] with N(c) <= w Cw, else b
    while (a < b) {
      const int64_t m = a + (b - a) / 2;
      if (count(m * gran, nullptr) <= int64_t(w) * Cw) b = m; else a = m + 1;
    }
    int64_t l = 0;
    const int64_t n = count(a * gran, &l);
    const double est = double((n + Cw - 1) / Cw) * double(t0 + l);
    if (best < 0 || est < best || (est == best && a * gran > best_c)) best = est, best_c = a * gran;
  }
  return static_cast<int32_t>(std::min<int64_t>(INT32_MAX / 2 / gran * gran, best_c));
}

void make_pack_plan_cut(const PrefixForest& forest, const int32_t* indptr, const int32_t* kv_len,
                        const PackPlanConfig& cfg_in, WorkPlan& p, PackPlanScratch& sc, bool wide_own_chunk,
                        bool wave) {
  PackPlanConfig cfg = cfg_in;  // with auto_chunk_min: max_chunk from the packed work (below)
  WEFT_CHECK_ARG(cfg.num_ctas >= 1, "cfg.num_ctas", "must be >= 1, got " << cfg.num_ctas);
  WEFT_CHECK_ARG(cfg.num_kv_heads >= 1, "cfg.num_kv_heads", "must be >= 1, got " << cfg.num_kv_heads);
  WEFT_CHECK_ARG(cfg.group_size >= 1, "cfg.group_size", "must be >= 1, got " << cfg.group_size);
  WEFT_CHECK_ARG(cfg.tile_rows >= 1, "cfg.tile_rows", "must be >= 1, got " << cfg.tile_rows);
  WEFT_CHECK_ARG(cfg.page_size >= 1, "cfg.page_size", "must be >= 1, got " << cfg.page_size);
  WEFT_CHECK_ARG(cfg.auto_chunk_min >= 0, "cfg.auto_chunk_min", "must be >= 0, got " << cfg.auto_chunk_min);
  WEFT_CHECK_ARG(cfg.kv_granularity >= 1 && (cfg.auto_chunk_min > 0 ||
                                             (cfg.max_chunk >= 0 && cfg.max_chunk % cfg.kv_granularity == 0)),
                 "cfg.max_chunk", "must be >= 0 and a multiple of kv_granularity " << cfg.kv_granularity
                                                                                   << ", got " << cfg.max_chunk);
  WEFT_CHECK_ARG(cfg.min_sharers >= 2, "cfg.min_sharers", "must be >= 2, got " << cfg.min_sharers);
  WEFT_CHECK_ARG(cfg.wide_rows == 0 || (cfg.wide_rows > cfg.tile_rows && cfg.wide_rows >= cfg.group_size),
                 "cfg.wide_rows", "must be 0 or > tile_rows " << cfg.tile_rows << ", got " << cfg.wide_rows);
  WEFT_CHECK_ARG(cfg.wide_min_keys >= 0, "cfg.wide_min_keys", "must be >= 0, got " << cfg.wide_min_keys);
  WEFT_CHECK_ARG(cfg.wide_key_cost >= 0.f && cfg.wide_key_cost <= 64.f, "cfg.wide_key_cost",
                 "must be in [0, 64], got " << cfg.wide_key_cost);
  WEFT_CHECK_ARG(cfg.wide_split_margin >= 0.f && cfg.wide_split_margin <= 4.f, "cfg.wide_split_margin",
                 "must be in [0, 4], got " << cfg.wide_split_margin);
  constexpr int kCtaBits = 21;  // the deal's heap keys (below)
  WEFT_CHECK_ARG(cfg.num_ctas < (1 << kCtaBits), "cfg.num_ctas", "must be < 2^21, got " << cfg.num_ctas);
  WEFT_CHECK_ARG(cfg.head_fold >= 1 && cfg.num_kv_heads % cfg.head_fold == 0 && cfg.num_ctas % cfg.head_fold == 0,
                 "cfg.head_fold", "must divide num_kv_heads " << cfg.num_kv_heads << " and num_ctas " << cfg.num_ctas
                                                              << ", got " << cfg.head_fold);
  // The folded plan: H heads (one head class) on C0 CTAs; written out replicated head_fold times.
  const int32_t B = forest.num_requests(), g = cfg.group_size, f = cfg.head_fold, H = cfg.num_kv_heads / f,
                TR = cfg.tile_rows;
  int64_t keys = 0;
  for (int32_t b = 0; b < B; ++b) {
    WEFT_CHECK_ARG(kv_len[b] >= 0, "kv_len", "entry " << b << " is negative: " << kv_len[b]);
    keys += kv_len[b];
  }
  sc.dup_keys = 0;
  if (cfg.auto_chunk_min > 0) {  // PackPlanConfig::auto_chunk_min: cut at the packed work's keys per CTA
    sc.dup_keys = pack_duplicate_keys(forest, cfg);
    cfg.max_chunk = pack_work_chunk(keys, sc.dup_keys, cfg);
  }
  sc.max_chunk = cfg.max_chunk;
  p.version = kWorkPlanVersion;
  p.num_ctas = cfg.num_ctas;
  p.num_kv_heads = cfg.num_kv_heads;
  p.group_size = g;
  p.tile_rows = TR;
  p.batch = B;
  p.kv_len.assign(kv_len, kv_len + B);
  // Which nodes get packs, over which pages, for which of their sharers (the profit model).
  schedule_packs(forest, cfg, sc.sched);
  const PackSchedule& sd = sc.sched;
  p.req_list.assign(sd.order.begin(), sd.order.end());
  size_t ni = 0, ns = 0;  // items and sources generated (the scratch arrays only grow: no clear/push_back)
  sc.pos_of.resize(B);
  for (int32_t i = 0; i < B; ++i) sc.pos_of[sd.order[i]] = i;

  // Packs need >= 2 requests' groups in one (narrow) item.
  const bool packs = TR / g >= 2;
  const int32_t row_tiles = (g + TR - 1) / TR;  // output row groups per (request, kv head)
  // Sources of output row group (request b, kv head h, row tile t), group index
  // (b * H + h) * row_tiles + t, appended in generation order (key order within a group) to flat
  // arrays and bucketed by group below (no per-group vectors: a 256-request plan has thousands).
  const size_t G = static_cast<size_t>(B) * H * row_tiles;
  sc.group_sources.assign(G, 0);
  // Generated records are written in place into arrays grown by doubling (push_back of the
  // 36-byte item stalled on store forwarding: ~25% of a 256-request plan).
  auto add_source = [&](size_t group, int32_t slot, int32_t row) {
    if (ns == sc.src_group.size())
      for (auto* v : {&sc.src_group, &sc.src_slot, &sc.src_row}) v->resize(std::max<size_t>(256, 2 * ns));
    sc.src_group[ns] = static_cast<int32_t>(group);
    sc.src_slot[ns] = slot;
    sc.src_row[ns] = row;
    ++ns;
    ++sc.group_sources[group];
  };
  int32_t next_slot = 0;
  auto add_item = [&](int32_t req_begin, int32_t num_reqs, int32_t h, int32_t r0, int32_t r1, int32_t page_base,
                      int32_t k0, int32_t k1, int32_t slot) {
    if (ni == sc.items.size()) sc.items.resize(std::max<size_t>(256, 2 * ni));
    PackPlanScratch::Item& x = sc.items[ni++];
    x.req_begin = req_begin;
    x.num_reqs = num_reqs;
    x.kv_head = h;
    x.row_begin = r0;
    x.row_end = r1;
    x.page_base = page_base;
    x.kv_begin = k0;
    x.kv_end = k1;
    x.slot = slot;
  };
  // The chunks of keys [begin, end): near-equal pieces of chunk_keys() keys (one, possibly empty,
  // when uncut), passed to f(c0, c1) in key order.
  auto for_chunks = [&](int32_t begin, int32_t end, int32_t max_chunk, auto&& f) {
    const int64_t clen = std::max<int64_t>(1, chunk_keys(end - begin, max_chunk, cfg.kv_granularity));
    int64_t c0 = begin;
    do {
      const int64_t c1 = std::min<int64_t>(end, c0 + clen);
      f(static_cast<int32_t>(c0), static_cast<int32_t>(c1));
      c0 = c1;
    } while (c0 < end);
  };
  auto num_chunks = [&](int32_t begin, int32_t end) {
    const int64_t len = end - begin, clen = chunk_keys(len, cfg.max_chunk, cfg.kv_granularity);
    return len == 0 ? 1 : static_cast<int32_t>((len + clen - 1) / clen);
  };

  // Wide items' own chunk bound (auto_chunk_min): the wide kernel runs as its own launch on the
  // plan's grid (wide_cta_indptr; wide_ctas_per_sm = 2 x 132 SMs on H100 = the 264-CTA decode
  // grid, all resident), so its items are cut from ITS work alone: the keys of every wide item
  // (each key costs one 128-row tile of tensor work, whatever the rows) per CTA, as
  // pack_max_chunk rounds, at least auto_chunk_min. Cut at the packed work's bound instead
  // (max_chunk: each key counted once per pack, most of it narrow), a node of few wide items
  // stayed in few long items on a mostly idle grid: 32x32 B1-256 L4096-128 ran 64 wide items of
  // 4096 keys on 64 of 264 CTAs (bench/results/h100_pat_48c877e.json, perf-notes-decode.md).
  // Never coarser than max_chunk. The profit model (schedule_packs) still counts max_chunk chunks.
  sc.wide_chunk = cfg.max_chunk;
  // The wide kernel's folded CTAs: one wave of its tile (wide_wave_ctas / f per folded copy) or C.
  const int32_t Cw = (wave ? std::min(cfg.wide_wave_ctas, cfg.num_ctas) : cfg.num_ctas) / f;
  if (wide_own_chunk && packs && cfg.auto_chunk_min > 0 && cfg.wide_rows > TR) {
    int64_t wide_keys = 0;  // per KV head
    sc.wide_nodes.clear();  // (wide items per head, keys) of each node with wide items
    for (size_t u = 0; u < forest.nodes.size(); ++u) {
      const int32_t q = sd.pack_reqs[u];
      const int32_t per_pack = pack_item_requests(forest.nodes[u], cfg);
      if (q == 0 || per_pack * g <= TR) continue;
      const int64_t items = q / per_pack + ((q % per_pack) * g > TR);  // a last item of <= TR rows is narrow
      const int64_t len = int64_t(forest.nodes[u].page_end - sd.pack_page_begin[u]) * cfg.page_size;
      wide_keys += items * len;
      if (wave && items > 0 && len > 0) sc.wide_nodes.push_back({items * H, len});
    }
    if (wave && !sc.wide_nodes.empty()) {
      sc.wide_chunk = wave_chunk(sc.wide_nodes, Cw, cfg);
    } else if (wide_keys > 0) {
      const int64_t gran = std::max(1, cfg.kv_granularity);
      int64_t c = pack_max_chunk(wide_keys, cfg.num_kv_heads, cfg.num_ctas, cfg.auto_chunk_min, cfg.kv_granularity);
      c = std::min<int64_t>(INT32_MAX / 2 / gran * gran, (c + gran - 1) / gran * gran);
      if (cfg.max_chunk <= 0 || c < cfg.max_chunk) sc.wide_chunk = static_cast<int32_t>(c);
    }
  }

  // Packs: forest nodes in preorder (an ancestor's keys before its descendants'), each over its
  // scheduled pages for its scheduled members (sd.order[req_begin .. + pack_reqs)).
  sc.priv_start.assign(B, 0);
  if (packs) {
    for (size_t u = 0; u < forest.nodes.size(); ++u) {
      const int32_t q_begin = sd.req_begin[u], q_end = q_begin + sd.pack_reqs[u];
      if (q_end == q_begin) continue;
      const int32_t k0 = sd.pack_page_begin[u] * cfg.page_size, k1 = forest.nodes[u].page_end * cfg.page_size;
      for (int32_t i = q_begin; i < q_end; ++i) sc.priv_start[sd.order[i]] = std::max(sc.priv_start[sd.order[i]], k1);
      // Requests per item: the tile selector on the node's sharers (as the profit model saw it).
      const int32_t per_pack = pack_item_requests(forest.nodes[u], cfg);
      for (int32_t h = 0; h < H; ++h)
        for (int32_t q0 = q_begin; q0 < q_end; q0 += per_pack) {
          const int32_t nr = std::min(per_pack, q_end - q0);
          const int32_t base = indptr[sd.order[q0]];
          const int32_t slots = (nr * g + TR - 1) / TR;  // a wide item's rows fill several slots
          for_chunks(k0, k1, nr * g > TR ? sc.wide_chunk : cfg.max_chunk, [&](int32_t c0, int32_t c1) {
            const int32_t slot = next_slot;
            next_slot += slots;
            add_item(q0, nr, h, 0, nr * g, base, c0, c1, slot);
            for (int32_t j = 0; j < nr; ++j)
              add_source((static_cast<size_t>(sd.order[q0 + j]) * H + h) * row_tiles, slot, j * g);
          });
        }
    }
  }
  // Private suffixes, per (request, kv head, row tile); the only item of a row group that has no
  // other source writes the final output.
  sc.priv_items.resize(size_t(B) + 1);
  for (int32_t b = 0; b < B; ++b) {
    sc.priv_items[b] = static_cast<int32_t>(ni);
    const int32_t start = sc.priv_start[b];
    WEFT_CHECK_ARG(kv_len[b] >= start, "kv_len", "request " << b << " is shorter than its shared pages");
    const bool single_chunk = num_chunks(start, kv_len[b]) == 1;
    const bool has_keys = kv_len[b] > start;
    for (int32_t h = 0; h < H; ++h)
      for (int32_t t = 0; t < row_tiles; ++t) {
        const size_t grp = (static_cast<size_t>(b) * H + h) * row_tiles + t;
        const bool shared_sources = sc.group_sources[grp] > 0;
        const int32_t r0 = t * TR, r1 = std::min(g, r0 + TR);
        if (!has_keys && shared_sources) continue;  // fully shared: the packs hold every key
        const bool final_item = !shared_sources && single_chunk;
        for_chunks(start, kv_len[b], cfg.max_chunk, [&](int32_t c0, int32_t c1) {
          const int32_t slot = final_item ? -1 : next_slot++;
          add_item(sc.pos_of[b], 1, h, r0, r1, indptr[b], c0, c1, slot);
          if (!final_item) add_source(grp, slot, 0);  // its slot's row 0 holds row r0
        });
      }
  }
  sc.priv_items[B] = static_cast<int32_t>(ni);
  // Merges: every row group with partial sources, its sources in generation (= key) order:
  // a stable counting sort of the flat source list by group.
  sc.group_begin.assign(G + 1, 0);
  size_t num_merges = 0;
  for (size_t x = 0; x < G; ++x) {
    sc.group_begin[x + 1] = sc.group_begin[x] + sc.group_sources[x];
    num_merges += sc.group_sources[x] > 0;
  }
  // Folded plan first (merge m, source e), then its copies k = 1 .. f - 1 (replicate below).
  const size_t M0 = num_merges;
  for (auto* v : {&p.merge_request, &p.merge_kv_head, &p.merge_row_begin, &p.merge_row_end}) v->resize(M0 * f);
  p.merge_src_indptr.resize(M0 * f + 1);
  p.src_slot.resize(ns * f);
  p.src_row.resize(ns * f);
  sc.fill.assign(sc.group_begin.begin(), sc.group_begin.end() - 1);
  for (size_t e = 0; e < ns; ++e) {
    const int32_t at = sc.fill[sc.src_group[e]]++;
    p.src_slot[at] = sc.src_slot[e];
    p.src_row[at] = sc.src_row[e];
  }
  p.merge_src_indptr[0] = 0;
  size_t m = 0;
  for (int32_t b = 0; b < B; ++b)
    for (int32_t h = 0; h < H; ++h)
      for (int32_t t = 0; t < row_tiles; ++t) {
        const size_t grp = (static_cast<size_t>(b) * H + h) * row_tiles + t;
        if (sc.group_sources[grp] == 0) continue;
        p.merge_request[m] = b;
        p.merge_kv_head[m] = h;
        p.merge_row_begin[m] = t * TR;
        p.merge_row_end[m] = std::min(g, t * TR + TR);
        p.merge_src_indptr[++m] = sc.group_begin[grp + 1];
      }
  // Copy k of the folded plan's first n0 entries of v: v + k * step (slots: -1 stays -1).
  // Blocks of 8 through a local array: no aliasing between d and out for the compiler to fear, a
  // fixed trip count it vectorizes at -O2 (the plain loop ran scalar: ~5 us of a 256-request plan).
  auto replicate = [f](int32_t* d, size_t n0, int32_t step, bool keep_negative = false) {
    for (int32_t k = 1; k < f; ++k) {
      int32_t* out = d + k * n0;
      const int32_t add = k * step;
      if (add == 0) {
        std::copy_n(d, n0, out);
        continue;
      }
      const int32_t keep = keep_negative ? -1 : 0;  // x < 0 stays x when keep_negative
      size_t i = 0;
      for (; i + 8 <= n0; i += 8) {
        int32_t t[8];
        std::memcpy(t, d + i, sizeof t);
        for (int j = 0; j < 8; ++j) t[j] += add & ~((t[j] >> 31) & keep);
        std::memcpy(out + i, t, sizeof t);
      }
      for (; i < n0; ++i) out[i] = d[i] + (add & ~((d[i] >> 31) & keep));
    }
  };
  const int32_t S0 = next_slot;  // the folded plan's slots
  replicate(p.merge_request.data(), M0, 0);
  replicate(p.merge_kv_head.data(), M0, H);
  replicate(p.merge_row_begin.data(), M0, 0);
  replicate(p.merge_row_end.data(), M0, 0);
  if (f > 1) {  // merge_src_indptr[1 ..]: M0 entries per copy, offset by the copy's sources
    std::vector<int32_t>& v = p.merge_src_indptr;
    for (int32_t k = 1; k < f; ++k)
      for (size_t i = 1; i <= M0; ++i) v[k * M0 + i] = v[i] + static_cast<int32_t>(k * ns);
  }
  replicate(p.src_slot.data(), ns, S0);
  replicate(p.src_row.data(), ns, 0);

  // Deal: longest first (cost = rows + keys, as balance.h's chunk_cost with alpha = beta = 1),
  // stable, each to the least loaded CTA (ties: the lower index).
  const int32_t n = static_cast<int32_t>(ni);
  // Costs are whole numbers below 2^32 (rows + keys of int32 ranges): the stable descending order
  // (what a sort of (-cost, index) pairs gives) is an LSD radix sort of max_cost - cost, in as
  // few passes of <= 12-bit digits as its range needs (one for the usual plan, whose costs span
  // less than 4096 keys; ~3x faster than std::sort of pairs for 4K items).
  sc.cost.resize(n);
  sc.order.resize(n);
  sc.tmp.resize(n);
  uint32_t max_cost = 0;
  for (int32_t i = 0; i < n; ++i) {
    const PackPlanScratch::Item& it = sc.items[i];
    sc.cost[i] = static_cast<uint32_t>(int64_t(it.row_end - it.row_begin) + int64_t(it.kv_end - it.kv_begin));
    max_cost = std::max(max_cost, sc.cost[i]);
    sc.order[i] = i;
  }
  {
    int bits = 0;
    while (bits < 32 && (max_cost >> bits) != 0) ++bits;  // max_cost - cost < 2^bits
    // Passes p of ceil(bits / p)-bit digits, p minimising p (2 n + 2^digit): each pass counts and
    // scatters the n items and scans its buckets (a folded plan has few items: 288 for
    // Llama-3-8B x 256 requests, where one pass's 2048-bucket scan cost more than the items).
    int passes = 0;
    for (int q = (bits + 11) / 12; q <= bits; ++q)
      if (passes == 0 || int64_t(q) * (2 * int64_t(n) + (int64_t(1) << ((bits + q - 1) / q))) <
                             int64_t(passes) * (2 * int64_t(n) + (int64_t(1) << ((bits + passes - 1) / passes))))
        passes = q;
    const int digit_bits = passes ? (bits + passes - 1) / passes : 0;
    const uint32_t mask = (uint32_t(1) << digit_bits) - 1;
    sc.count.resize((size_t(1) << digit_bits) + 1);
    for (int pass = 0, shift = 0; pass < passes; ++pass, shift += digit_bits) {
      std::fill(sc.count.begin(), sc.count.end(), 0);
      auto digit = [&](int32_t i) { return ((max_cost - sc.cost[i]) >> shift) & mask; };
      for (int32_t i = 0; i < n; ++i) ++sc.count[digit(i) + 1];
      for (size_t k = 0; k + 1 < sc.count.size(); ++k) sc.count[k + 1] += sc.count[k];
      for (int32_t j = 0; j < n; ++j) sc.tmp[sc.count[digit(sc.order[j])]++] = sc.order[j];
      sc.order.swap(sc.tmp);
    }
  }
  // Wide items (more than tile_rows rows) run in their own kernel (before the decode kernel, or
  // beside it: cfg.wide_key_cost), so they are dealt on their own: the narrow items (in cost order) to the CTAs, then the wide ones
  // to a fresh set of loads (each launch balanced by itself). A stable partition of the order.
  int32_t n_wide = 0;
  for (int32_t i = 0; i < n; ++i) n_wide += sc.items[i].row_end - sc.items[i].row_begin > TR;
  const int32_t n_nar = n - n_wide;
  if (n_wide > 0) {
    int32_t a = 0, w = n_nar;
    for (int32_t j = 0; j < n; ++j) {
      const int32_t i = sc.order[j];
      sc.tmp[sc.items[i].row_end - sc.items[i].row_begin > TR ? w++ : a++] = i;
    }
    sc.order.swap(sc.tmp);
  }
  // The CTAs in a 4-ary min-heap of single 64-bit keys (load << 21 | cta: the same order as
  // (load, cta) pairs, ties to the lower CTA; keys are unique, so any min-heap deals the same).
  // 4-ary with the unused slots holding max keys: half the levels of a binary heap and no bounds
  // checks in the branchless min of 4 (the deal was ~40% of a 256-request x 3-level plan with a
  // binary heap).
  const size_t C = static_cast<size_t>(cfg.num_ctas / f);  // the folded plan's CTAs
  constexpr uint64_t kMax = ~uint64_t(0);
  sc.heap.resize(4 * C + 5);
  sc.ring.resize(C);
  sc.cta_of.resize(n);
  sc.cta_count.assign(2 * (C + 1), 0);  // narrow CTA counts, then the wide ones
  const uint64_t cta_mask = (uint64_t(1) << kCtaBits) - 1;
  uint64_t* heap = sc.heap.data();
  uint64_t* ring = sc.ring.data();
  size_t live = C;  // heap entries; slots past them hold kMax
  auto sift_down = [&](size_t at, uint64_t key) {  // place key in the hole at `at`
    while (true) {
      const size_t first = 4 * at + 1;
      if (first >= live) break;
      size_t m = first;
      uint64_t mv = heap[first];
      for (size_t k = 1; k < 4; ++k) {
        const uint64_t x = heap[first + k];
        const bool less = x < mv;
        mv = less ? x : mv;
        m = less ? first + k : m;
      }
      if (mv >= key) break;
      heap[at] = mv;
      at = m;
    }
    heap[at] = key;
  };
  int32_t* counts = sc.cta_count.data();
  auto deal = [&](int32_t i, uint64_t top) {  // item i to top's CTA; its grown key
    const int32_t c = static_cast<int32_t>(top & cta_mask);
    sc.cta_of[i] = c;
    ++counts[c + 1];
    return top + (uint64_t(sc.cost[i]) << kCtaBits);
  };
  // Deals order[j_begin .. j_end) to CTAs [c_begin, c_end), from all loads 0.
  auto deal_range = [&](int32_t j_begin, int32_t j_end, size_t c_begin, size_t c_end) {
    const size_t Cr = c_end - c_begin;
    std::fill(sc.heap.begin(), sc.heap.end(), kMax);
    for (size_t c = 0; c < Cr; ++c) heap[c] = uint64_t(c_begin + c);  // all loads 0: already a heap
    live = Cr;
    for (int32_t j = j_begin; j < j_end;) {
      const uint32_t w = sc.cost[sc.order[j]];
      int32_t k = j + 1;
      while (k < j_end && sc.cost[sc.order[k]] == w) ++k;
      if (size_t(k - j) * 2 < Cr) {  // a short run of equal costs: replace the heap's top per item
        for (; j < k; ++j) sift_down(0, deal(sc.order[j], heap[0]));
        continue;
      }
      // A long run of equal costs w: the minimum never decreases, so the grown keys (min + w)
      // come out in increasing order: they wait in a FIFO ring (at most C keys in all) instead of
      // the heap, and each item takes the smaller of the heap's and the ring's first key (the
      // same minimum as one heap of all keys). Heap pops only until the ring's keys are the
      // smallest: ~C of them per run instead of one sift per item.
      size_t head = 0, count = 0;
      for (; j < k; ++j) {
        uint64_t top;
        if (count > 0 && ring[head] < heap[0]) {  // heap[0] is kMax once the heap is empty
          top = ring[head];
          head = head + 1 == C ? 0 : head + 1;
          --count;
        } else {
          top = heap[0];
          const uint64_t last = heap[--live];
          heap[live] = kMax;
          if (live > 0) sift_down(0, last);
        }
        const size_t at = head + count;
        ring[at >= C ? at - C : at] = deal(sc.order[j], top);
        ++count;
      }
      // The ring's keys back into the heap: appended, then a bottom-up heapify (O(C)).
      for (size_t t = 0; t < count; ++t) {
        const size_t at = head + t;
        heap[live++] = ring[at >= C ? at - C : at];
      }
      for (size_t v = Cr >= 2 ? (Cr - 2) / 4 + 1 : 0; v-- > 0;) sift_down(v, heap[v]);
    }
  };
  // The wide items' CTAs: all of them when the wide kernel runs alone (before the decode
  // kernel); with cfg.wide_overlap the last W of each folded copy's C when that SPLIT is
  // estimated faster: both kernels' CTAs then fill the grid together. Estimates in narrow-key
  // units (a narrow item costs rows + keys, a wide one rows + wide_key_cost x keys; a kind's
  // makespan over k CTAs = max(its cost / k, its longest item), the wide kind's max(mean item x
  // ceil(items / k), longest item): exact for a node's equal chunks, the usual wide items):
  // serial = narrow over C + wide over C; split(W) = max(narrow over C - W, wide over W), W the
  // first 1 <= W <= min(C - 1, wide items) minimising it. Split when wide_split_margin x split(W)
  // < serial (the margin: PackPlanConfig::wide_split_margin). O(C) per plan with wide items.
  size_t wide_begin = 0;
  p.wide_split = 0;
  if (!wave && n_wide > 0 && n_nar > 0 && C >= 2 && cfg.wide_overlap && cfg.wide_key_cost > 0.f) {
    double cost_nar = 0, max_nar = 0, cost_wide = 0, max_wide = 0;
    for (int32_t j = 0; j < n; ++j) {
      const PackPlanScratch::Item& it = sc.items[sc.order[j]];
      const double rows = it.row_end - it.row_begin, keys = it.kv_end - it.kv_begin;
      const double c = rows + (j < n_nar ? 1.0 : double(cfg.wide_key_cost)) * keys;
      (j < n_nar ? cost_nar : cost_wide) += c;
      double& m = j < n_nar ? max_nar : max_wide;
      m = std::max(m, c);
    }
    const double mean_wide = cost_wide / n_wide;
    auto wide_over = [&](size_t k) { return std::max(mean_wide * double((size_t(n_wide) + k - 1) / k), max_wide); };
    const double serial = std::max(cost_nar / double(C), max_nar) + wide_over(C);
    double best = 0;
    size_t best_w = 0;
    for (size_t W = 1; W <= std::min<size_t>(C - 1, size_t(n_wide)); ++W) {
      const double t = std::max(std::max(cost_nar / double(C - W), max_nar), wide_over(W));
      if (best_w == 0 || t < best) best = t, best_w = W;
    }
    if (best_w > 0 && double(cfg.wide_split_margin) * best < serial) {
      wide_begin = C - best_w;
      p.wide_split = 1;
    }
  }
  deal_range(0, n_nar, 0, wide_begin > 0 ? wide_begin : C);
  if (n_wide > 0) {
    counts = sc.cta_count.data() + C + 1;
    deal_range(n_nar, n, wide_begin, wave ? size_t(Cw) : C);  // one wave: the first Cw (serial plan)
  }
  // Flatten by CTA: the folded narrow items in CTA order (each CTA's in deal order; slots keep
  // their numbers), then the folded wide items in CTA order, written sequentially from the
  // generated records; then the copies (replicate): plan items [narrow copy 0 .. f - 1][wide
  // copy 0 .. f - 1], so each kernel's CTA ranges are increasing (cta_indptr, wide_cta_indptr).
  const int32_t C0 = static_cast<int32_t>(C);
  sc.cta0_indptr.assign(2 * (size_t(C0) + 1), 0);
  int32_t* const nar0 = sc.cta0_indptr.data();
  int32_t* const wide0 = nar0 + C0 + 1;
  const int32_t* const ncount = sc.cta_count.data();
  const int32_t* const wcount = ncount + C0 + 1;
  for (int32_t c = 0; c < C0; ++c) nar0[c + 1] = nar0[c] + ncount[c + 1];
  wide0[0] = n_nar;
  for (int32_t c = 0; c < C0; ++c) wide0[c + 1] = wide0[c] + wcount[c + 1];
  sc.fill.resize(2 * size_t(C0));
  std::copy(nar0, nar0 + C0, sc.fill.begin());
  std::copy(wide0, wide0 + C0, sc.fill.begin() + C0);
  sc.dest.resize(n);
  sc.tmp.resize(n);
  for (int32_t j = 0; j < n; ++j) {
    const int32_t i = sc.order[j];
    const int32_t at = sc.fill[(j >= n_nar ? C0 : 0) + sc.cta_of[i]]++;
    sc.dest[i] = at;  // the folded plan's position (narrow items: also the plan's item index)
    sc.tmp[at] = i;
  }
  p.num_wide_items = f * n_wide;
  p.known_slots = f * S0;  // every slot numbered (a wide item's slots included), in f copies
  p.cta_indptr.resize(size_t(cfg.num_ctas) + 1);
  for (int32_t k = 0; k < f; ++k)
    for (int32_t c = 0; c < C0; ++c) p.cta_indptr[size_t(k) * C0 + c] = k * n_nar + nar0[c];
  p.cta_indptr[cfg.num_ctas] = f * n_nar;
  p.wide_grid = 0;
  if (n_wide > 0) {
    // Copy k's wide CTAs at [k Cw, (k + 1) Cw) of the wide launch (Cw = C0 unless one wave: then
    // the launch is the first f Cw CTAs, WorkPlan::wide_grid, the rest empty).
    const int32_t Ck = wave ? Cw : C0;
    p.wide_cta_indptr.assign(size_t(cfg.num_ctas) + 1, f * n);
    for (int32_t k = 0; k < f; ++k)
      for (int32_t c = 0; c < Ck; ++c)
        p.wide_cta_indptr[size_t(k) * Ck + c] = (f - 1) * n_nar + k * n_wide + wide0[c];
    if (wave) p.wide_grid = f * Cw;
  } else {
    p.wide_cta_indptr.clear();
  }
  for (auto* v : {&p.item_req_begin, &p.item_num_reqs, &p.item_kv_head, &p.item_row_begin, &p.item_row_end,
                  &p.item_page_base, &p.item_kv_begin, &p.item_kv_end, &p.item_slot})
    v->resize(size_t(n) * f);
  for (int32_t at = 0; at < n; ++at) {
    const PackPlanScratch::Item& it = sc.items[sc.tmp[at]];
    // folded position -> plan index: narrow copy 0 at [0, n_nar), wide copy 0 at [f n_nar, + n_wide)
    const size_t x = at < n_nar ? size_t(at) : size_t(f - 1) * n_nar + at;
    p.item_req_begin[x] = it.req_begin;
    p.item_num_reqs[x] = it.num_reqs;
    p.item_kv_head[x] = it.kv_head;
    p.item_row_begin[x] = it.row_begin;
    p.item_row_end[x] = it.row_end;
    p.item_page_base[x] = it.page_base;
    p.item_kv_begin[x] = it.kv_begin;
    p.item_kv_end[x] = it.kv_end;
    p.item_slot[x] = it.slot;
  }
  // Both blocks' copies.
  for (const auto& [at, n0] : {std::pair<size_t, size_t>{0, size_t(n_nar)}, {size_t(f) * n_nar, size_t(n_wide)}}) {
    replicate(p.item_req_begin.data() + at, n0, 0);
    replicate(p.item_num_reqs.data() + at, n0, 0);
    replicate(p.item_kv_head.data() + at, n0, H);
    replicate(p.item_row_begin.data() + at, n0, 0);
    replicate(p.item_row_end.data() + at, n0, 0);
    replicate(p.item_slot.data() + at, n0, S0, /*keep_negative=*/true);
  }
  expand_item_kv(f, p);
}
}  // namespace

void expand_item_kv(int32_t f, WorkPlan& p) {
  const size_t n = p.item_page_base.size() - p.num_wide_items, n0 = n / f, w0 = p.num_wide_items / f;
  for (int32_t k = 1; k < f; ++k)
    for (auto* v : {&p.item_page_base, &p.item_kv_begin, &p.item_kv_end}) {
      std::copy_n(v->data(), n0, v->data() + k * n0);
      std::copy_n(v->data() + n, w0, v->data() + n + k * w0);
    }
}

bool wide_rows_loadable(const WorkPlan& p, int32_t group_size, int32_t head_fold, bool consecutive) {
  if (p.num_wide_items == 0 || group_size <= 0) return false;
  const int32_t n = p.num_items() - p.num_wide_items, w0 = p.num_wide_items / std::max(1, head_fold);
  for (int32_t i = n; i < n + w0; ++i) {  // the folded plan's wide items (copies share their rows)
    const int32_t rb = p.item_row_begin[size_t(i)], re = p.item_row_end[size_t(i)];
    if (rb % group_size != 0 || re <= rb) return false;
    if (!consecutive) continue;
    const int32_t j0 = rb / group_size, j1 = (re + group_size - 1) / group_size;  // the rows' requests
    const int32_t* req = p.req_list.data() + p.item_req_begin[size_t(i)];
    for (int32_t j = j0 + 1; j < j1; ++j)
      if (req[j] != req[j0] + (j - j0)) return false;
  }
  return true;
}

}  // namespace weft::plan
