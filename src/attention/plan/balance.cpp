// FlashInfer Algorithm 1 (balanced split-KV scheduling): validation, the request pass, the split
// decision and the public entry points. The CTA queue and the sorts: balance_deal.cpp; the plan
// builders: balance_build.cpp. The fixed workspace layout of its plans: plan_layout.cpp.
#include "attention/plan/balance.h"

#include <algorithm>
#include <string>

#include "attention/plan/balance_internal.h"
#include "weft/error.h"

namespace weft::plan {

int64_t tiles_per_head(int64_t qo_len, int32_t group_size, int32_t tile_q) {
  const int64_t rows = qo_len * group_size;
  return (rows + tile_q - 1) / tile_q;
}

double chunk_cost(const BalanceConfig& cfg, int32_t rows, int32_t kv_length) {
  return cfg.alpha * rows + cfg.beta * kv_length;
}

namespace {

void validate(const BatchShape& s, const BalanceConfig& c) {
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
}

// The per-request checks (prepare() runs them in its pass over the requests, request by request).
inline void validate_request(const int32_t* qo, const int32_t* kv, const int32_t* ks, int32_t b) {
  WEFT_CHECK_ARG(qo[b] >= 0, "shape.qo_len[" + std::to_string(b) + "]", "must be >= 0, got " << qo[b]);
  WEFT_CHECK_ARG(kv[b] >= 0, "shape.kv_len[" + std::to_string(b) + "]", "must be >= 0, got " << kv[b]);
  if (ks) {
    WEFT_CHECK_ARG(ks[b] >= 0 && ks[b] <= kv[b], "shape.kv_start[" + std::to_string(b) + "]",
                   "must be in [0, kv_len = " << kv[b] << "], got " << ks[b]);
  }
}

// prepare()'s pass over the requests: query offsets (qo_indptr[1..batch]), tile counts, total keys
// and the longest range, with the request checks folded into one flag (bad: validate_request and
// the overflow checks fail somewhere; the caller runs them one by one for the error). A small
// function of its own so that its sums stay in registers (inside prepare(), next to the error
// paths, they lived on the stack: 3.3 ns per request at prefill/b64's 586).
struct RequestTotals {
  std::size_t units = 0;  // unit records written (requests with rows)
  uint64_t umin = ~uint64_t(0), umax = 0, usum = 0;  // their integral costs (kCost)
  int64_t next = 0, num_tiles = 0, total = 0;
  int32_t longest = 0;
  bool one_tile = true, bad = false;
};
// kStart: ks is given (prefill segments always give it). kCost: the unit's integral cost
// ia * rows + ib * keys written beside its record (uc[U]) and its min / max / sum over the units
// kept (the same values a second pass over the records computed; prefill b64: 586 segments).
// kQ1: every request has one query row (decode batches; the caller checked qo): the rows, tiles
// and the unit kept per request are loop constants (the same values; b256: ~60 -> ~30
// instructions per request on the dev box).
template <bool kStart, bool kCost, bool kQ1, class UnitT>
[[gnu::noinline]] RequestTotals request_totals_impl(const int32_t* __restrict qo, const int32_t* __restrict kv,
                                                    const int32_t* __restrict ks, int32_t batch, int64_t gs,
                                                    int64_t tq, int32_t* __restrict qi, UnitT* __restrict un,
                                                    uint64_t ia, uint64_t ib, uint64_t* __restrict uc) {
  RequestTotals r;
  std::size_t U = 0;
  uint64_t umin = ~uint64_t(0), umax = 0, usum = 0;
  int64_t next = 0, num_tiles = 0, total = 0;
  int32_t longest = 0;
  bool one_tile = true, bad = false;
  for (int32_t b = 0; b < batch; ++b) {
    const int32_t q = kQ1 ? 1 : qo[b], k = kv[b], s0 = kStart ? ks[b] : 0;
    bad |= (q < 0) | (k < 0) | (s0 < 0) | (s0 > k);
    next += q;
    qi[b + 1] = static_cast<int32_t>(next);
    const int64_t rows = int64_t(q) * gs;
    bad |= rows > INT32_MAX;
    const int64_t nt = rows <= tq ? (rows > 0) : (rows + tq - 1) / tq;
    one_tile &= nt <= 1;
    num_tiles += nt;
    const int32_t len = nt > 0 ? k - s0 : 0;
    total += int64_t(len) * nt;
    longest = std::max(longest, len);
    // The unit record (build_whole_units; meaningful while one_tile holds), written always and
    // kept only for a request with rows.
    un[U] = {b, static_cast<int32_t>(rows), s0, k};
    if (kCost) {  // (meaningful while !bad: rows and keys below 2^31, ia / ib below 2^20)
      const uint64_t c = ia * static_cast<uint64_t>(static_cast<int32_t>(rows)) + ib * uint64_t(uint32_t(k) - uint32_t(s0));
      uc[U] = c;
      const bool keep = nt > 0;
      umin = keep && c < umin ? c : umin;
      umax = keep && c > umax ? c : umax;
      usum += keep ? c : 0;
    }
    U += nt > 0;
  }
  r.units = U;
  r.umin = umin;
  r.umax = umax;
  r.usum = usum;
  r.next = next;
  r.num_tiles = num_tiles;
  r.total = total;
  r.longest = longest;
  r.one_tile = one_tile;
  r.bad = bad || next > INT32_MAX;
  return r;
}
template <class UnitT>
inline RequestTotals request_totals(const int32_t* qo, const int32_t* kv, const int32_t* ks, int32_t batch,
                                    int64_t gs, int64_t tq, int32_t* qi, UnitT* un, uint64_t ia, uint64_t ib,
                                    uint64_t* uc) {
  // Decode batches (no kv_start, one query each): the kQ1 loop (the check: one branch-free pass
  // the compiler vectorizes).
  bool q1 = ks == nullptr;
  if (q1) {
    int32_t other = 0;
    for (int32_t b = 0; b < batch; ++b) other |= qo[b] ^ 1;
    q1 = other == 0;
  }
  if (uc) {
    if (q1) return request_totals_impl<false, true, true>(qo, kv, ks, batch, gs, tq, qi, un, ia, ib, uc);
    return ks ? request_totals_impl<true, true, false>(qo, kv, ks, batch, gs, tq, qi, un, ia, ib, uc)
              : request_totals_impl<false, true, false>(qo, kv, ks, batch, gs, tq, qi, un, ia, ib, uc);
  }
  if (q1) return request_totals_impl<false, false, true>(qo, kv, ks, batch, gs, tq, qi, un, 0, 0, nullptr);
  return ks ? request_totals_impl<true, false, false>(qo, kv, ks, batch, gs, tq, qi, un, 0, 0, nullptr)
            : request_totals_impl<false, false, false>(qo, kv, ks, batch, gs, tq, qi, un, 0, 0, nullptr);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
int64_t Planner::prepare(const BatchShape& shape, const BalanceConfig& cfg) {
  validate(shape, cfg);
  cfg_ = cfg;
  whole_valid_ = false;
  batch_ = static_cast<int32_t>(shape.kv_len.size());
  // Integral alpha / beta below 2^20: with rows and keys below 2^31 every cost is an integer below
  // 2^53, computed exactly either way (the integer path's result is the double path's, bit for bit).
  auto whole = [](double x, uint64_t* out) {
    if (!(x >= 0 && x < 1048576.0) || x != static_cast<double>(static_cast<int64_t>(x))) return false;
    *out = static_cast<uint64_t>(x);
    return true;
  };
  int_costs_ = whole(cfg.alpha, &ia_) && whole(cfg.beta, &ib_);

  // One pass: query offsets, tile counts, total keys and the longest range. A request's rows fit
  // one tile in decode (the GQA group) and in prefill segments: no division then.
  const int32_t* qo = shape.qo_len.data();
  const int32_t* kv = shape.kv_len.data();
  const int32_t* ks = shape.kv_start.empty() ? nullptr : shape.kv_start.data();
  const int64_t tq = cfg.tile_q, H = cfg.num_kv_heads;
  qo_indptr_.resize(batch_ + 1);
  qo_indptr_[0] = 0;
  // (units_: build_whole_units)
  units_.resize(batch_);
  u_icost_.resize(int_costs_ ? batch_ : 0);
  Unit* __restrict const un = units_.data();
  uint64_t* __restrict const uc = u_icost_.data();
  std::size_t U = 0;
  uint64_t umin = ~uint64_t(0), umax = 0, usum = 0;
  const int64_t gs = cfg.group_size;
  const int32_t nb = batch_;
  // (a unit's cost at uc[U], U <= b: batch_ entries hold them)
  const RequestTotals rt =
      request_totals(qo, kv, ks, nb, gs, tq, qo_indptr_.data(), un, ia_, ib_, int_costs_ ? uc : nullptr);
  const bool bad = rt.bad, one_tile = rt.one_tile;
  const int64_t num_tiles = rt.num_tiles, total = rt.total;
  const int32_t longest = rt.longest;
  // Every request with rows in one tile per KV head: the units and their integral costs.
  if (one_tile && !bad) {
    U = rt.units;
    if (int_costs_) {
      umin = rt.umin;
      umax = rt.umax;
      usum = rt.usum;
    }
  }
  if (bad) {  // the checks one by one, in their order: the first failing one throws
    int64_t tokens = 0;
    for (int32_t b = 0; b < batch_; ++b) {
      validate_request(qo, kv, ks, b);
      tokens += qo[b];
      WEFT_CHECK_ARG(tokens <= INT32_MAX, "shape.qo_len", "total query tokens overflow int32");
      WEFT_CHECK_ARG(int64_t(qo[b]) * cfg.group_size <= INT32_MAX, "shape.qo_len",
                     "rows of request " << b << " overflow int32");
    }
  }
  num_units_ = U;
  u_min_ = umin;
  u_max_ = umax;
  u_sum_ = usum;
  kv_len_.assign(kv, kv + batch_);
  if (ks) kv_start_.assign(ks, ks + batch_);
  else kv_start_.clear();
  total_kv_ = total * H;
  longest_ = longest;
  one_tile_ = one_tile;
  num_tiles_ = num_tiles * H;
  // The tiles themselves (generation order) on first use: ensure_tiles().
  tiles_valid_ = false;
  return chunk_bound(cfg.min_chunk);
}

// Tiles in generation order (request, kv_head, tile) from prepare()'s lengths.
void Planner::ensure_tiles() const {
  if (tiles_valid_) return;
  tiles_valid_ = true;
  tiles_.resize(static_cast<std::size_t>(num_tiles_));
  Tile* t = tiles_.data();
  const int64_t tq = cfg_.tile_q;
  const int32_t* ks = kv_start_.empty() ? nullptr : kv_start_.data();
  for (int32_t b = 0; b < batch_; ++b) {
    const int32_t rows = (qo_indptr_[b + 1] - qo_indptr_[b]) * cfg_.group_size;
    if (rows == 0) continue;
    const int32_t kb = ks ? ks[b] : 0, ke = kv_len_[b];
    if (rows <= tq) {
      for (int32_t h = 0; h < cfg_.num_kv_heads; ++h) *t++ = {b, h, 0, rows, kb, ke};
      continue;
    }
    for (int32_t h = 0; h < cfg_.num_kv_heads; ++h)
      for (int64_t r0 = 0; r0 < rows; r0 += tq)
        *t++ = {b, h, static_cast<int32_t>(r0), static_cast<int32_t>(std::min<int64_t>(rows, r0 + tq)), kb, ke};
  }
}

// Step 2: the maximum chunk length.
int64_t Planner::chunk_bound(int64_t min_chunk) const {
  int64_t L = (total_kv_ + cfg_.num_ctas - 1) / cfg_.num_ctas;
  L = std::max<int64_t>({L, min_chunk, 1});
  L = (L + cfg_.kv_granularity - 1) / cfg_.kv_granularity * cfg_.kv_granularity;
  return L;
}

double Planner::max_chunk_cost(int64_t L) const {
  ensure_tiles();
  double m = 0;
  for (const Tile& t : tiles_) {
    const int64_t len = t.kv_end - t.kv_begin;
    const Cut cut = cut_tile(len, true, L, cfg_.kv_granularity);
    const int64_t first = cut.n_used == 1 ? len : cut.clen;  // the first chunk is the longest
    m = std::max(m, chunk_cost(cfg_, t.row_end - t.row_begin, static_cast<int32_t>(first)));
  }
  return m;
}

double Planner::makespan(bool split, int64_t L) {
  if (!split && whole_valid_) return whole_ms_;
  ensure_tiles();
  // The multiset of chunk costs as runs (cost, count); the deal depends on nothing else.
  runs_.clear();
  auto add = [&](double cost, int64_t count) {
    if (!runs_.empty() && runs_.back().first == cost) runs_.back().second += count;
    else runs_.push_back({cost, count});
  };
  for (const Tile& t : tiles_) {
    const int32_t rows = t.row_end - t.row_begin;
    const int64_t len = t.kv_end - t.kv_begin;
    const Cut cut = cut_tile(len, split, L, cfg_.kv_granularity);
    if (cut.n_used == 1) {
      add(chunk_cost(cfg_, rows, static_cast<int32_t>(len)), 1);
    } else {
      add(chunk_cost(cfg_, rows, static_cast<int32_t>(cut.clen)), cut.n_used - 1);
      add(chunk_cost(cfg_, rows, static_cast<int32_t>(len - (cut.n_used - 1) * cut.clen)), 1);
    }
  }
  const std::size_t R = runs_.size();
  grow(keys_, R);
  grow(keys_tmp_, R);
  grow(order_, R);
  grow(order_tmp_, R);
  grow(hist_, kRadixHist);
  for (std::size_t r = 0; r < R; ++r) {
    keys_[r] = desc_key(runs_[r].first);
    order_[r] = static_cast<uint32_t>(r);
  }
  radix_sort(keys_.data(), order_.data(), keys_tmp_.data(), order_tmp_.data(), R, hist_.data());
  bool int_keys = false;
  if (R > 0 && int_costs_) {
    // Integral alpha / beta: every run's cost is an integer below 2^53 (prepare()), so
    // use_int_keys() reduces to the bound on the total, summed as it sums it (the same decision).
    double total = 0;
    for (std::size_t r = 0; r < R; ++r) total += runs_[r].first * double(static_cast<std::size_t>(runs_[r].second));
    int_keys = int_keys_for_total(total);
  } else if (R > 0) {
    grow(tmp_costs_, R);
    grow(tmp_counts_, R);
    for (std::size_t r = 0; r < R; ++r) {
      tmp_costs_[r] = runs_[r].first;
      tmp_counts_[r] = static_cast<std::size_t>(runs_[r].second);
    }
    int_keys = use_int_keys(tmp_costs_.data(), R, tmp_counts_.data());
  }
  double ms = 0;
  if (int_keys) {
    reset_deal_int();
    for (std::size_t r = 0; r < R; ++r) {
      const auto& run = runs_[order_[r]];
      const uint64_t c = static_cast<uint64_t>(run.first);
      for (int64_t k = 0; k < run.second; ++k) deal_int(c);
    }
    ms = max_load_int();
  } else if (R > 0) {
    reset_deal();
    for (std::size_t r = 0; r < R; ++r) {
      const auto& run = runs_[order_[r]];
      for (int64_t k = 0; k < run.second; ++k) deal_one(run.first);
    }
    ms = max_load();
  }
  if (!split) {
    whole_valid_ = true;
    whole_ms_ = ms;
  }
  return ms;
}

bool Planner::choose_split(int64_t L, double* ms_split, double* ms_whole) {
  if (ms_split) *ms_split = 0;
  if (ms_whole) *ms_whole = 0;
  if (!cfg_.allow_split || longest_ <= L) return false;
  // Split only when it lowers the planned makespan by min_gain: splitting adds partial
  // writes and a merge pass that the cost model does not count.
  const double ms_with = makespan(true, L);
  const double ms_without = makespan(false, 0);
  if (ms_split) *ms_split = ms_with;
  if (ms_whole) *ms_whole = ms_without;
  return ms_with <= (1.0 - cfg_.min_gain) * ms_without;
}

void Planner::balance(const BatchShape& shape, const BalanceConfig& cfg, Plan& out) {
  const int64_t L = prepare(shape, cfg);
  build(choose_split(L), L, out);
}

Plan balance(const BatchShape& shape, const BalanceConfig& cfg) {
  Planner planner;
  Plan p;
  planner.balance(shape, cfg, p);
  return p;
}

}  // namespace weft::plan
