// The balance planner's plan builders (balance.cpp): build() (steps 3-5 over tiles and chunks, then
// the flatten by CTA) and build_whole_units() (unsplit plans of one tile per request and KV head).
#include <algorithm>

#include "attention/plan/balance.h"
#include "attention/plan/balance_internal.h"

namespace weft::plan {

namespace {

// The flatten by CTA (each CTA's items in the order dealt), the part build() and
// build_whole_units() share: p.cta_indptr holds each CTA's item count at c + 1 and becomes the
// CTAs' item offsets; cursor, each CTA's next place, starts at them; the plan's seven item arrays
// are sized for n items (their capacity kept). The caller then writes each item, in the deal
// order, at place cur[its CTA]++.
struct ItemArrays {
  int32_t *request, *kv_head, *row_begin, *row_end, *kv_begin, *kv_end, *partial_slot;
  int32_t* cur;  // cursor's data
};
ItemArrays start_flatten(Plan& p, std::vector<int32_t>& cursor, int32_t num_ctas, std::size_t n) {
  int32_t* const ci = p.cta_indptr.data();
  for (int32_t c = 0; c < num_ctas; ++c) ci[c + 1] += ci[c];
  cursor.assign(ci, ci + num_ctas);
  for (auto* v : {&p.item_request, &p.item_kv_head, &p.item_row_begin, &p.item_row_end, &p.item_kv_begin,
                  &p.item_kv_end, &p.item_partial_slot})
    v->resize(n);
  return {p.item_request.data(), p.item_kv_head.data(), p.item_row_begin.data(), p.item_row_end.data(),
          p.item_kv_begin.data(), p.item_kv_end.data(), p.item_partial_slot.data(), cursor.data()};
}

}  // namespace

void Planner::build(bool split, int64_t L, Plan& p) {
  const BalanceConfig& cfg = cfg_;
  p.version = kPlanVersion;
  p.num_ctas = cfg.num_ctas;
  p.num_kv_heads = cfg.num_kv_heads;
  p.group_size = cfg.group_size;
  p.tile_q = cfg.tile_q;
  p.head_fold = cfg.head_fold;
  p.batch = batch_;
  p.qo_indptr.assign(qo_indptr_.begin(), qo_indptr_.end());
  p.kv_len.assign(kv_len_.begin(), kv_len_.end());
  p.num_tiles = static_cast<int32_t>(num_tiles_);
  p.max_chunk = num_tiles_ == 0 ? 0 : static_cast<int32_t>(split ? L : longest_);
  for (auto* v : {&p.merge_request, &p.merge_kv_head, &p.merge_row_begin, &p.merge_row_end}) v->clear();
  p.merge_indptr.assign(1, 0);
  const bool whole = !split || longest_ <= L;
  // An unsplit plan of one tile per (request, KV head) with integral costs: dealt per request
  // (build_whole_units), the same plan.
  if (whole && one_tile_ && int_costs_ && num_tiles_ > 0 && cfg.num_kv_heads <= 256 &&
      num_tiles_ / cfg.num_kv_heads < (int64_t(1) << 24) && build_whole_units(p))
    return;
  ensure_tiles();
  const std::size_t T = tiles_.size();
  const Tile* tiles = tiles_.data();

  // Step 3: chunks (generation order), partial slots and merges, and each chunk's cost. Unsplit,
  // chunk t is tile t (its whole range, no slot): no chunk records.
  std::size_t n = T;
  if (!whole) {
    n = 0;
    for (std::size_t t = 0; t < T; ++t)
      n += static_cast<std::size_t>(cut_tile(tiles[t].kv_end - tiles[t].kv_begin, true, L, cfg.kv_granularity).n_used);
  }
  grow(order_, n);
  grow(order_tmp_, n);
  grow(keys_, n);
  grow(keys_tmp_, n);
  uint64_t min_ic = ~uint64_t(0), max_ic = 0, total_ic = 0;  // total_ic: wraps only past n * max_ic
  double total_cost = 0;
  if (int_costs_) grow(c_icost_, n);
  else grow(c_cost_, n);
  auto put_cost = [&](std::size_t w, int32_t rows, int32_t len) {
    if (int_costs_) {
      const uint64_t c = ia_ * static_cast<uint64_t>(rows) + ib_ * static_cast<uint64_t>(len);
      c_icost_[w] = c;
      min_ic = std::min(min_ic, c);
      max_ic = std::max(max_ic, c);
      total_ic += c;  // an integer sum: a double one is a 4-cycle dependency chain per chunk
    } else {
      c_cost_[w] = chunk_cost(cfg, rows, len);
    }
  };
  bool several_tiles_per_head = false;
  if (whole) {
    for (std::size_t t = 0; t < T; ++t) {
      put_cost(t, tiles[t].row_end - tiles[t].row_begin, tiles[t].kv_end - tiles[t].kv_begin);
      order_[t] = static_cast<uint32_t>(t);
    }
  } else {
    grow(chunks_, n);
    grow(t_chunk0_, T + 1);
    std::size_t w = 0;
    for (std::size_t t = 0; t < T; ++t) {
      const Tile& tl = tiles[t];
      const int32_t rows = tl.row_end - tl.row_begin;
      const int32_t kb = tl.kv_begin, ke = tl.kv_end;
      const Cut cut = cut_tile(ke - kb, true, L, cfg.kv_granularity);
      const int32_t slot0 = p.merge_indptr.back();
      t_chunk0_[t] = static_cast<int32_t>(w);
      for (int64_t c = 0; c < cut.n_used; ++c, ++w) {
        const int32_t b0 = static_cast<int32_t>(kb + c * cut.clen);
        const int32_t b1 = cut.n_used == 1 ? ke : static_cast<int32_t>(std::min<int64_t>(ke, b0 + cut.clen));
        chunks_[w] = {static_cast<int32_t>(t), b0, b1, cut.n_used == 1 ? -1 : slot0 + static_cast<int32_t>(c)};
        put_cost(w, rows, b1 - b0);
      }
      if (cut.n_used > 1) {
        p.merge_request.push_back(tl.request);
        p.merge_kv_head.push_back(tl.kv_head);
        p.merge_row_begin.push_back(tl.row_begin);
        p.merge_row_end.push_back(tl.row_end);
        p.merge_indptr.push_back(slot0 + static_cast<int32_t>(cut.n_used));
      }
      if (t > 0 && tl.request == tiles[t - 1].request && tl.kv_head == tiles[t - 1].kv_head)
        several_tiles_per_head = true;
    }
    t_chunk0_[T] = static_cast<int32_t>(w);
    // Step 4's tie order. With row_tiles_together: (request, kv_head, chunk index, tile), chunk
    // c of every tile of one (request, kv head) before chunk c + 1 (tiles of one (request, kv
    // head) are consecutive, their chunks too). Otherwise generation order. (Unsplit, every tile
    // has one chunk and both orders are generation order.)
    if (cfg.row_tiles_together && several_tiles_per_head) {
      std::size_t o = 0;
      for (std::size_t t = 0; t < T;) {
        std::size_t te = t + 1;
        int32_t max_n = t_chunk0_[t + 1] - t_chunk0_[t];
        while (te < T && tiles[te].request == tiles[t].request && tiles[te].kv_head == tiles[t].kv_head) {
          max_n = std::max(max_n, t_chunk0_[te + 1] - t_chunk0_[te]);
          ++te;
        }
        for (int32_t c = 0; c < max_n; ++c)
          for (std::size_t u = t; u < te; ++u)
            if (c < t_chunk0_[u + 1] - t_chunk0_[u]) order_[o++] = static_cast<uint32_t>(t_chunk0_[u] + c);
        t = te;
      }
    } else {
      for (std::size_t i = 0; i < n; ++i) order_[i] = static_cast<uint32_t>(i);
    }
  }

  // Steps 4-5: a stable sort by cost, descending; deal, lowest (load, CTA index) first.
  const int32_t C = cfg.num_ctas;
  // cfg.heads_in_turn: the sorted order partitioned by KV head, stable (a counting pass).
  auto heads_in_turn = [&]() {
    if (!cfg.heads_in_turn || cfg.num_kv_heads <= 1) return;
    const Chunk* chunks = chunks_.data();
    auto head_of = [&](uint32_t c) { return tiles[whole ? c : static_cast<uint32_t>(chunks[c].tile)].kv_head; };
    cursor_.assign(static_cast<std::size_t>(cfg.num_kv_heads) + 1, 0);
    for (std::size_t k = 0; k < n; ++k) ++cursor_[head_of(order_[k]) + 1];
    for (int32_t h = 0; h < cfg.num_kv_heads; ++h) cursor_[h + 1] += cursor_[h];
    for (std::size_t k = 0; k < n; ++k) order_tmp_[cursor_[head_of(order_[k])]++] = order_[k];
    order_.swap(order_tmp_);
  };
  grow(assigned_, n);
  p.cta_cost.assign(C, 0.0);
  // The integer sum is exact unless n * max_ic could exceed 2^64 (then the double queue is used).
  const bool total_exact = max_ic == 0 || n <= ~uint64_t(0) / max_ic;
  if (int_costs_) total_cost = static_cast<double>(total_ic);
  if (int_costs_ && n > 0 && total_exact && int_keys_for_total(total_cost)) {
    sort_int_desc(c_icost_.data(), n, min_ic, max_ic);
    heads_in_turn();
    reset_deal_int();
    const uint64_t* ic = c_icost_.data();
    const uint32_t* ord = order_.data();
    for (std::size_t k = 0; k < n; ++k) assigned_[k] = deal_int(ic[ord[k]]);
    loads_int(p.cta_cost.data());
  } else if (n > 0) {
    if (int_costs_) {  // integral but too large for the integer keys: the double queue
      grow(c_cost_, n);
      for (std::size_t i = 0; i < n; ++i) c_cost_[i] = static_cast<double>(c_icost_[i]);
    }
    for (std::size_t i = 0; i < n; ++i) keys_[i] = desc_key(c_cost_[order_[i]]);
    grow(hist_, kRadixHist);
    radix_sort(keys_.data(), order_.data(), keys_tmp_.data(), order_tmp_.data(), n, hist_.data());
    heads_in_turn();
    if (use_int_keys(c_cost_.data(), n, nullptr)) {
      reset_deal_int();
      for (std::size_t k = 0; k < n; ++k) assigned_[k] = deal_int(static_cast<uint64_t>(c_cost_[order_[k]]));
      loads_int(p.cta_cost.data());
    } else {
      reset_deal();
      for (std::size_t k = 0; k < n; ++k) assigned_[k] = deal_one(c_cost_[order_[k]]);
      const Slot* q = heap_mode_ ? heap_.data() : ring_.data() + head_;
      for (int32_t i = 0; i < C; ++i) p.cta_cost[q[i].cta] = q[i].load;
    }
  }

  // Flatten by CTA (each CTA's items in the order dealt).
  p.cta_indptr.assign(C + 1, 0);
  int32_t* const ci = p.cta_indptr.data();
  for (std::size_t k = 0; k < n; ++k) ++ci[assigned_[k] + 1];
  const ItemArrays it = start_flatten(p, cursor_, C, n);
  int32_t *const ir = it.request, *const ih = it.kv_head, *const irb = it.row_begin, *const ire = it.row_end;
  int32_t *const ikb = it.kv_begin, *const ike = it.kv_end, *const isl = it.partial_slot, *const cur = it.cur;
  const int32_t* const as = assigned_.data();
  const uint32_t* const ord = order_.data();
  // Item k of the deal order: its chunk (unsplit: the tile's whole range, no slot) and tile.
  auto flatten = [&](auto chunk_of) {
    for (std::size_t k = 0; k < n; ++k) {
      const Chunk ch = chunk_of(ord[k]);
      const Tile& t = tiles[ch.tile];
      const int32_t i = cur[as[k]]++;
      ir[i] = t.request;
      ih[i] = t.kv_head;
      irb[i] = t.row_begin;
      ire[i] = t.row_end;
      ikb[i] = ch.kv_begin;
      ike[i] = ch.kv_end;
      isl[i] = ch.slot;
    }
  };
  if (whole) {
    flatten([&](uint32_t c) { return Chunk{static_cast<int32_t>(c), tiles[c].kv_begin, tiles[c].kv_end, -1}; });
  } else {
    const Chunk* chunks = chunks_.data();
    flatten([&](uint32_t c) { return chunks[c]; });
  }
  p.split = p.num_merges() > 0;
}

// build(false, .) when every request with rows has one tile per KV head and costs are integral:
// the H tiles of request b (generation order b, then kv_head) all cost ia * rows + ib * keys, so
// the stable descending sort of the tiles is the stable sort of the requests (units) with each
// unit's H tiles kept together in head order. Sorting and costing the units instead of the tiles
// (H times fewer), without tile records, gives the same deal order, hence the same deal and the
// same plan, bit for bit (PlanIdentity.*). Returns false (nothing written but the common fields)
// when the integer queue cannot hold the loads; build() then takes the general path.
bool Planner::build_whole_units(Plan& p) {
  const int32_t H = cfg_.num_kv_heads;
  const int32_t C = cfg_.num_ctas;
  // The units and their costs from prepare()'s pass.
  const std::size_t U = num_units_;
  const Unit* const un = units_.data();
  const uint64_t* const ic = u_icost_.data();
  const uint64_t min_ic = u_min_, max_ic = u_max_, sum_ic = u_sum_;
  order_.resize(U);
  order_tmp_.resize(U);
  keys_.resize(U);
  keys_tmp_.resize(U);
  for (std::size_t u = 0; u < U; ++u) order_[u] = static_cast<uint32_t>(u);
  const std::size_t n = U * static_cast<std::size_t>(H);
  // The general path's conditions for the integer queue: the integer total exact, the loads below
  // the queue's bound.
  if (!(max_ic == 0 || n <= ~uint64_t(0) / max_ic)) return false;
  if (!int_keys_for_total(static_cast<double>(sum_ic * static_cast<uint64_t>(H)))) return false;
  const std::size_t distinct = sort_int_desc(ic, U, min_ic, max_ic);
  const uint32_t* const o = order_.data();  // (sort_int_desc may swap order_'s buffer)

  // Step 5: the deal, tile by tile in the sorted order (unit o[k]'s H heads back to back).
  assigned_.resize(n);
  int32_t* const as = assigned_.data();
  p.cta_indptr.assign(C + 1, 0);
  int32_t* const ci = p.cta_indptr.data();  // items per CTA first (at c + 1), then their offsets
  reset_deal_int();
  // cfg.heads_in_turn: head 0's tiles (the units in sorted order) all before head 1's, ...
  const bool in_turn = cfg_.heads_in_turn && H > 1;
  // cfg.deal_heads_together: the units before the tail go whole (H tiles to one CTA).
  const std::size_t tail = static_cast<std::size_t>(std::max(cfg_.grouped_tail_units, 0));
  const std::size_t grouped = !in_turn && cfg_.deal_heads_together && H > 1 && U > tail ? U - tail : 0;
  // Units of equal cost are consecutive in the sorted order: each run of them is dealt at once
  // (deal_run_int: the CTAs deal_int gives them one by one) where the runs are long (runs_pay).
  // (the counting sort counted them; otherwise one pass over the sorted costs)
  std::size_t runs = distinct;
  if (runs == 0) {
    // Only whether the runs are long matters (runs_pay, decreasing in runs; U <= n, so runs_pay(U, .)
    // fails where runs_pay(n, .) does): the count stops once they are not (b256 of distinct lengths:
    // after ~n / kMinRunLength units instead of all).
    runs = U > 0;
    for (std::size_t k = 1; k < U && runs_pay(n, runs); ++k) runs += ic[o[k]] != ic[o[k - 1]];
  }
  const bool by_run = runs_pay(n, runs);
  grow(run_ctas_, grouped);
  for (std::size_t k = 0; k < grouped;) {
    const uint64_t c = ic[o[k]];
    std::size_t r = k + 1;
    while (r < grouped && ic[o[r]] == c) ++r;
    int32_t* const rc = run_ctas_.data();
    if (by_run) deal_run_int(c * static_cast<uint64_t>(H), r - k, rc);
    else
      for (std::size_t u = k; u < r; ++u) rc[u - k] = deal_int(c * static_cast<uint64_t>(H));
    for (std::size_t u = k; u < r; ++u) {
      const int32_t cta = rc[u - k];
      for (int32_t h = 0; h < H; ++h) as[u * H + h] = cta;
      ci[cta + 1] += H;
    }
    k = r;
  }
  if (in_turn) {
    // Runs of one head: U / runs units each (runs_pay for the U-chunk deal of one head).
    const bool by_run_h = runs_pay(U, runs);
    grow(run_ctas_, U);
    int32_t* const rc = run_ctas_.data();
    for (int32_t h = 0; h < H; ++h)
      for (std::size_t k = 0; k < U;) {
        const uint64_t c = ic[o[k]];
        std::size_t r = k + 1;
        while (r < U && ic[o[r]] == c) ++r;
        if (by_run_h) {
          deal_run_int(c, r - k, rc);
          for (std::size_t u = k; u < r; ++u) as[u * H + h] = rc[u - k];
        } else {
          for (std::size_t u = k; u < r; ++u) as[u * H + h] = deal_int(c);
        }
        k = r;
      }
  } else if (by_run) {
    for (std::size_t k = grouped; k < U;) {
      const uint64_t c = ic[o[k]];
      std::size_t r = k + 1;
      while (r < U && ic[o[r]] == c) ++r;
      deal_run_int(c, (r - k) * static_cast<std::size_t>(H), as + k * H);
      k = r;
    }
  } else if (H == 1) {  // tile by tile (no run scan), each CTA's count taken as it is dealt
    for (std::size_t k = grouped; k < U; ++k) {  // (a head-folded decode plan: one head class)
      const int32_t cta = deal_int(ic[o[k]]);
      as[k] = cta;
      ++ci[cta + 1];
    }
  } else {
    for (std::size_t k = grouped; k < U; ++k) {
      const uint64_t c = ic[o[k]];
      for (int32_t h = 0; h < H; ++h) {
        const int32_t cta = deal_int(c);
        as[k * H + h] = cta;
        ++ci[cta + 1];
      }
    }
  }
  if (in_turn || by_run)
    for (std::size_t i = grouped * H; i < n; ++i) ++ci[as[i] + 1];
  p.cta_cost.assign(C, 0.0);
  loads_int(p.cta_cost.data());

  // Flatten by CTA (each CTA's items in the order dealt).
  const ItemArrays it = start_flatten(p, cursor_, C, n);
  int32_t *const ir = it.request, *const ih = it.kv_head, *const irb = it.row_begin, *const ire = it.row_end;
  int32_t *const ikb = it.kv_begin, *const ike = it.kv_end, *const isl = it.partial_slot, *const cur = it.cur;
  // Each item written straight to its CTA's next place, in the deal order.
  auto put = [&](std::size_t k, int32_t h, const Unit& u) {
    const int32_t i = cur[as[k * H + h]]++;
    ir[i] = u.request;
    ih[i] = h;
    ire[i] = u.rows;
    ikb[i] = u.kv_begin;
    ike[i] = u.kv_end;
  };
  if (H == 1) {  // (every unit's one tile: no head loop)
    for (std::size_t k = 0; k < U; ++k) {
      const Unit& u = un[o[k]];
      const int32_t i = cur[as[k]]++;
      ir[i] = u.request;
      ih[i] = 0;
      ire[i] = u.rows;
      ikb[i] = u.kv_begin;
      ike[i] = u.kv_end;
    }
  } else if (in_turn) {
    for (int32_t h = 0; h < H; ++h)
      for (std::size_t k = 0; k < U; ++k) put(k, h, un[o[k]]);
  } else {
    for (std::size_t k = 0; k < U; ++k) {  // the unit read once for its H heads
      const Unit u = un[o[k]];
      for (int32_t h = 0; h < H; ++h) put(k, h, u);
    }
  }
  std::fill(irb, irb + n, 0);   // whole tiles: every row from 0,
  std::fill(isl, isl + n, -1);  // final outputs
  p.split = false;
  return true;
}

}  // namespace weft::plan
