// FlashInfer Algorithm 1 (balanced split-KV scheduling): validation, the planner and its CTA queue.
// The fixed workspace layout of its plans: plan_layout.cpp.
#include "attention/plan/balance.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

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

// (load, cta) in the order std::priority_queue<pair, ..., greater> used: lowest load, then lowest
// CTA index. A total order: every correct min-queue pops the same CTA.
inline bool slot_less(double la, int32_t ca, double lb, int32_t cb) { return la < lb || (la == lb && ca < cb); }

// Sort key of a cost, ascending = descending cost. Costs are >= 0 (alpha >= 0, beta > 0) and not
// NaN, so their bit patterns order as unsigned integers (+0.0 added turns a -0.0 into +0.0).
inline uint64_t desc_key(double cost) {
  const double c = cost + 0.0;
  uint64_t bits;
  std::memcpy(&bits, &c, sizeof bits);
  return ~bits;
}

// Stable LSD radix sort of (keys, vals), ascending by key. Only the bytes in which keys differ
// are sorted (integral costs of a few distinct magnitudes differ in 2-3 bytes); nothing is done
// when the keys are already in order. tmp buffers hold n entries; hist 256 entries.
void radix_sort(uint64_t* keys, uint32_t* vals, uint64_t* ktmp, uint32_t* vtmp, std::size_t n, uint32_t* hist) {
  if (n < 2) return;
  uint64_t diff = 0;
  bool sorted = true;
  for (std::size_t i = 1; i < n; ++i) {
    diff |= keys[i] ^ keys[0];
    sorted &= keys[i - 1] <= keys[i];
  }
  if (sorted) return;
  uint64_t* k = keys;
  uint32_t* v = vals;
  uint64_t* kt = ktmp;
  uint32_t* vt = vtmp;
  for (int shift = 0; shift < 64; shift += 8) {
    if (((diff >> shift) & 0xff) == 0) continue;
    std::memset(hist, 0, 256 * sizeof(uint32_t));
    for (std::size_t i = 0; i < n; ++i) ++hist[(k[i] >> shift) & 0xff];
    uint32_t sum = 0;
    for (int b = 0; b < 256; ++b) {
      const uint32_t c = hist[b];
      hist[b] = sum;
      sum += c;
    }
    for (std::size_t i = 0; i < n; ++i) {
      const uint32_t dst = hist[(k[i] >> shift) & 0xff]++;
      kt[dst] = k[i];
      vt[dst] = v[i];
    }
    std::swap(k, kt);
    std::swap(v, vt);
  }
  if (k != keys) {
    std::memcpy(keys, k, n * sizeof(uint64_t));
    std::memcpy(vals, v, n * sizeof(uint32_t));
  }
}

// The plan's seven item arrays sized for n items (their capacity kept).
struct ItemArrays {
  int32_t *request, *kv_head, *row_begin, *row_end, *kv_begin, *kv_end, *partial_slot;
};
ItemArrays item_arrays(Plan& p, std::size_t n) {
  for (auto* v : {&p.item_request, &p.item_kv_head, &p.item_row_begin, &p.item_row_end, &p.item_kv_begin,
                  &p.item_kv_end, &p.item_partial_slot})
    v->resize(n);
  return {p.item_request.data(), p.item_kv_head.data(), p.item_row_begin.data(), p.item_row_end.data(),
          p.item_kv_begin.data(), p.item_kv_end.data(), p.item_partial_slot.data()};
}

// 2^e as a double (0 <= e < 64), exactly std::ldexp(1.0, e) without the libm call.
inline double pow2_double(int e) { return static_cast<double>(uint64_t(1) << e); }

// Grows v to at least n entries and never shrinks it: a planner scratch array sized for this call
// without writing (value-initializing) entries a previous, smaller use had cut off. Every user
// passes its count explicitly.
template <class V>
inline void grow(V& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
}

// Step 3 for one tile: n_used chunks of length clen (the last shorter), as in the algorithm.
struct Cut {
  int64_t clen, n_used;
};
inline Cut cut_tile(int64_t len, bool split, int64_t L, int64_t granularity) {
  if (!split || len <= L) return {len, 1};  // one chunk, the whole range (no division)
  const int64_t n = (len + L - 1) / L;
  // n near-equal chunks (length rounded up to the granularity, <= L) balance better than
  // n - 1 chunks of L plus a short remainder.
  int64_t clen = (len + n - 1) / n;
  clen = (clen + granularity - 1) / granularity * granularity;
  const int64_t n_used = n == 1 ? 1 : (len + clen - 1) / clen;
  return {clen, n_used};
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
template <bool kStart, bool kCost, class UnitT>
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
    const int32_t q = qo[b], k = kv[b], s0 = kStart ? ks[b] : 0;
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
  if (uc) {
    return ks ? request_totals_impl<true, true>(qo, kv, ks, batch, gs, tq, qi, un, ia, ib, uc)
              : request_totals_impl<false, true>(qo, kv, ks, batch, gs, tq, qi, un, ia, ib, uc);
  }
  return ks ? request_totals_impl<true, false>(qo, kv, ks, batch, gs, tq, qi, un, 0, 0, nullptr)
            : request_totals_impl<false, false>(qo, kv, ks, batch, gs, tq, qi, un, 0, 0, nullptr);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Step 5's queue of CTAs.
void Planner::reset_deal() {
  const std::size_t C = static_cast<std::size_t>(cfg_.num_ctas);
  if (ring_.size() < 4 * C + 16) ring_.resize(4 * C + 16);
  for (std::size_t c = 0; c < C; ++c) ring_[c] = {0.0, static_cast<int32_t>(c)};
  head_ = 0;
  heap_mode_ = false;
}

// The queue's sorted window ring_[head_, head_ + C) less its front, plus s, becomes the heap.
void Planner::deal_to_heap(const Slot& s) {
  const std::size_t C = static_cast<std::size_t>(cfg_.num_ctas);
  heap_.resize(C);
  const Slot* rest = ring_.data() + head_ + 1;
  std::size_t i = 0, o = 0;
  for (; i < C - 1 && slot_less(rest[i].load, rest[i].cta, s.load, s.cta); ++i) heap_[o++] = rest[i];
  heap_[o++] = s;
  for (; i < C - 1; ++i) heap_[o++] = rest[i];
  heap_mode_ = true;
}

// Deals a chunk of `cost` to the CTA with the lowest (load, index); returns the CTA. The common
// case (the CTA's new load is the largest: it goes to the back of the sorted queue) is inlined.
[[gnu::always_inline]] inline int32_t Planner::deal_one(double cost) {
  if (!heap_mode_) {
    const std::size_t C = static_cast<std::size_t>(cfg_.num_ctas);
    Slot* const q = ring_.data() + head_;
    const double load = q[0].load + cost;
    const int32_t cta = q[0].cta;
    if (head_ + C + 1 <= ring_.size() && slot_less(q[C - 1].load, q[C - 1].cta, load, cta)) {
      q[C] = {load, cta};
      ++head_;
      return cta;
    }
  }
  return deal_slow(cost);
}

int32_t Planner::deal_slow(double cost) {
  const std::size_t C = static_cast<std::size_t>(cfg_.num_ctas);
  if (!heap_mode_) {
    if (head_ + C + 1 > ring_.size()) {  // keep room for one more at the back
      std::copy(ring_.begin() + head_, ring_.begin() + head_ + C, ring_.begin());
      head_ = 0;
    }
    Slot s = ring_[head_];
    s.load += cost;
    // The others are ring_[head_ + 1, e), sorted. s goes to the back when it is the largest
    // (round robin among equal costs), or a few places before it; otherwise the heap takes over.
    const std::size_t e = head_ + C;
    std::size_t i = e;
    while (i > head_ + 1 && e - i < 8 && slot_less(s.load, s.cta, ring_[i - 1].load, ring_[i - 1].cta)) --i;
    if (i > head_ + 1 && slot_less(s.load, s.cta, ring_[i - 1].load, ring_[i - 1].cta)) {
      deal_to_heap(s);
      return s.cta;
    }
    for (std::size_t j = e; j > i; --j) ring_[j] = ring_[j - 1];
    ring_[i] = s;
    ++head_;
    return s.cta;
  }
  const int32_t cta = heap_[0].cta;
  const Slot s{heap_[0].load + cost, cta};
  std::size_t i = 0;
  for (;;) {  // sift s down from the root
    std::size_t m = 2 * i + 1;
    if (m >= C) break;
    if (m + 1 < C && slot_less(heap_[m + 1].load, heap_[m + 1].cta, heap_[m].load, heap_[m].cta)) ++m;
    if (!slot_less(heap_[m].load, heap_[m].cta, s.load, s.cta)) break;
    heap_[i] = heap_[m];
    i = m;
  }
  heap_[i] = s;
  return cta;
}

// ---- integer keys -----------------------------------------------------------------------------
// costs[i] (times counts[i] when given): all integers in double, and the largest possible load
// (their sum) times 2^shift below 2^63. Exact then: the double loads of the general queue are
// sums of integers below 2^53, which the integer loads equal.
bool Planner::use_int_keys(const double* costs, std::size_t n, const std::size_t* counts) {
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double c = costs[i];
    if (!(c >= 0 && c < 9007199254740992.0) || c != static_cast<double>(static_cast<int64_t>(c))) return false;
    total += c * double(counts ? counts[i] : 1);
  }
  return int_keys_for_total(total);
}

void Planner::reset_deal_int() {
  const std::size_t C = static_cast<std::size_t>(cfg_.num_ctas);
  if (iring_.size() < 4 * C + 16) iring_.resize(4 * C + 16);
  for (std::size_t c = 0; c < C; ++c) iring_[c] = c;  // load 0
  head_ = 0;
  heap_mode_ = false;
}

[[gnu::always_inline]] inline int32_t Planner::deal_int(uint64_t cost) {
  const uint64_t add = cost << key_shift_;
  if (!heap_mode_) {
    const std::size_t C = static_cast<std::size_t>(cfg_.num_ctas);
    uint64_t* const q = iring_.data() + head_;
    const uint64_t key = q[0] + add;
    if (head_ + C + 1 <= iring_.size() && q[C - 1] < key) {
      q[C] = key;
      ++head_;
      return static_cast<int32_t>(key & ((uint64_t(1) << key_shift_) - 1));
    }
  }
  return deal_int_slow(add);
}

int32_t Planner::deal_int_slow(uint64_t add) {
  const std::size_t C = static_cast<std::size_t>(cfg_.num_ctas);
  const uint64_t mask = (uint64_t(1) << key_shift_) - 1;
  if (!heap_mode_) {
    if (head_ + C + 1 > iring_.size()) {
      std::copy(iring_.begin() + head_, iring_.begin() + head_ + C, iring_.begin());
      head_ = 0;
    }
    const uint64_t key = iring_[head_] + add;
    const std::size_t e = head_ + C;
    std::size_t i = e;
    while (i > head_ + 1 && e - i < 8 && key < iring_[i - 1]) --i;
    if (i > head_ + 1 && key < iring_[i - 1]) {
      // To a binary min-heap (the sorted rest with key inserted is one), padded with maximal keys
      // so that a node's second child can always be read.
      iheap_.assign(2 * C + 2, ~uint64_t(0));
      const uint64_t* rest = iring_.data() + head_ + 1;
      std::size_t r = 0, o = 0;
      for (; r < C - 1 && rest[r] < key; ++r) iheap_[o++] = rest[r];
      iheap_[o++] = key;
      for (; r < C - 1; ++r) iheap_[o++] = rest[r];
      heap_mode_ = true;
      return static_cast<int32_t>(key & mask);
    }
    for (std::size_t j = e; j > i; --j) iring_[j] = iring_[j - 1];
    iring_[i] = key;
    ++head_;
    return static_cast<int32_t>(key & mask);
  }
  uint64_t* const h = iheap_.data();
  const int32_t cta = static_cast<int32_t>(h[0] & mask);
  const uint64_t key = h[0] + add;
  std::size_t i = 0;
  for (;;) {  // sift down; the smaller child without a branch (keys are distinct)
    std::size_t m = 2 * i + 1;
    if (m >= C) break;
    if (h[m + 1] < h[m]) ++m;
    if (h[m] > key) break;
    h[i] = h[m];
    i = m;
  }
  h[i] = key;
  return cta;
}

// Average chunks per distinct cost from which a plan is dealt run by run (runs_pay).
constexpr std::size_t kMinRunLength = 4;

// Whether a deal of n chunks with `runs` distinct costs goes run by run (deal_run_int) rather than
// chunk by chunk (deal_int): when the runs are long. With short runs (decode batches of distinct
// lengths, one chunk per cost) the merge's insertion goes deep into the window (a cost below the
// loads' spread) and moves most of it per chunk, where deal_int's heap sifts log2(C) levels:
// weft-plan-bench decode random/b256 3.9 -> 6.1 us when every run was merged; prefill b64 (1172
// chunks, 73 costs) 12.2 -> 8.8 us with the runs, and back to 12.9 if the queue fell back to the
// heap at the first insertion deeper than 8 or 16 keys. Left: bimodal/b128 (two costs, 64 chunks
// each, the short ones below the spread the long ones leave) 1.75 -> 2.0 us.
inline bool runs_pay(std::size_t n, std::size_t runs) { return n >= kMinRunLength * runs; }

// A run of k chunks of one cost. Sequentially, each chunk takes the queue's smallest key q and puts
// back q + add. With the sorted window Q[0..C) and t = Q[0] + add: while Q[i] < t, the smallest key
// of the queue is Q[i] (every key put back so far is Q[i'] + add >= t), so the next j chunks go to
// Q[0..j) in order (j: the leading keys below t, at most k and C), and the queue becomes Q[j..C)
// with Q[0..j) + add, a sorted sequence, merged in from the back (the new loads are the largest but
// a few, so the merge moves few keys). The same pops in the same order as deal_int: the same CTAs
// and loads, with one comparison and one store per chunk where deal_int's heap sifts a key through
// ~log2(C) levels (issue 19: the prefill b64 deal of 1172 chunks, runs of 2 to 124 equal costs).
void Planner::deal_run_int(uint64_t cost, std::size_t k, int32_t* out) {
  const std::size_t C = static_cast<std::size_t>(cfg_.num_ctas);
  const uint64_t add = cost << key_shift_;
  const uint64_t mask = (uint64_t(1) << key_shift_) - 1;
  while (k > 0) {
    if (heap_mode_) {  // (callers deal a whole plan one way: runs_pay())
      for (; k > 0; --k) {
        const int32_t cta = deal_int(cost);
        if (out) *out++ = cta;
      }
      return;
    }
    if (head_ + 2 * C + 1 > iring_.size()) {  // room for the window and j <= C more keys
      std::copy(iring_.begin() + head_, iring_.begin() + head_ + C, iring_.begin());
      head_ = 0;
    }
    uint64_t* const q = iring_.data() + head_;
    const uint64_t t = q[0] + add;
    const std::size_t jmax = std::min(k, C);
    std::size_t j = 1;
    while (j < jmax && q[j] < t) ++j;
    if (out) {
      for (std::size_t i = 0; i < j; ++i) out[i] = static_cast<int32_t>(q[i] & mask);
      out += j;
    }
    // Merge Q[j..C) (at q + j) with Q[0..j) + add into q[j .. C + j), from the back.
    std::size_t d = C + j, a = C;
    std::ptrdiff_t b = static_cast<std::ptrdiff_t>(j) - 1;
    while (b >= 0) {  // without branches on the keys (q[a - 1] is a popped key once a == j)
      const uint64_t nb = q[b] + add, qa = q[a - 1];
      const bool take_a = (a > j) & (qa > nb);
      q[--d] = take_a ? qa : nb;
      a -= take_a;
      b -= !take_a;
    }
    head_ += j;
    k -= j;
  }
}

double Planner::max_load_int() const {
  // Keys order as (load, cta): the largest key holds the largest load (the sorted queue's last).
  const std::size_t C = static_cast<std::size_t>(cfg_.num_ctas);
  uint64_t m = 0;
  if (heap_mode_) {
    for (std::size_t i = 0; i < C; ++i) m = std::max(m, iheap_[i]);
  } else {
    m = iring_[head_ + C - 1];
  }
  return static_cast<double>(m >> key_shift_);
}

void Planner::loads_int(double* loads) const {
  const std::size_t C = static_cast<std::size_t>(cfg_.num_ctas);
  const uint64_t* q = heap_mode_ ? iheap_.data() : iring_.data() + head_;
  const uint64_t mask = (uint64_t(1) << key_shift_) - 1;
  for (std::size_t i = 0; i < C; ++i) loads[q[i] & mask] = static_cast<double>(q[i] >> key_shift_);
}

double Planner::max_load() const {
  const std::size_t C = static_cast<std::size_t>(cfg_.num_ctas);
  const Slot* q = heap_mode_ ? heap_.data() : ring_.data() + head_;
  double m = q[0].load;
  for (std::size_t i = 1; i < C; ++i) m = std::max(m, q[i].load);
  return m;
}

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
  grow(hist_, 256);
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

// The integer queue for loads up to `total` (the sum of every cost dealt): keys (load << shift) |
// cta stay below 2^63.
bool Planner::int_keys_for_total(double total) {
  int shift = 1;
  while ((int64_t(1) << shift) < cfg_.num_ctas) ++shift;
  if (!(total < pow2_double(62 - shift))) return false;
  key_shift_ = shift;
  return true;
}

// Step 4 for integral costs: order_ (the tie order) stably sorted by c_icost_ descending. Costs of
// one plan span a short range (prefill: rows + keys of a segment, a few hundred values; decode:
// the chunk lengths): a counting sort over [min_cost, max_cost] (one counting and one scatter
// pass) where the range is short against n, else the LSD radix sort on max_cost - cost (only the
// bytes that differ); nothing when the costs are already in order.
std::size_t Planner::sort_int_desc(const uint64_t* cost, std::size_t n, uint64_t min_cost, uint64_t max_cost) {
  if (n < 2 || min_cost == max_cost) return 0;
  uint32_t* ord = order_.data();
  bool sorted = true;
  for (std::size_t i = 1; i < n && sorted; ++i) sorted = cost[ord[i - 1]] >= cost[ord[i]];
  if (sorted) return 0;
  const uint64_t range = max_cost - min_cost + 1;
  if (range <= 65536 && range <= 4 * n + 256) {
    hist_.assign(static_cast<std::size_t>(range), 0);
    uint32_t* h = hist_.data();
    for (std::size_t i = 0; i < n; ++i) ++h[max_cost - cost[ord[i]]];
    uint32_t sum = 0;
    std::size_t distinct = 0;
    for (std::size_t k = 0; k < range; ++k) {
      const uint32_t c = h[k];
      h[k] = sum;
      sum += c;
      distinct += c != 0;
    }
    uint32_t* out = order_tmp_.data();
    for (std::size_t i = 0; i < n; ++i) out[h[max_cost - cost[ord[i]]]++] = ord[i];
    order_.swap(order_tmp_);
    return distinct;
  }
  for (std::size_t i = 0; i < n; ++i) keys_[i] = max_cost - cost[ord[i]];
  grow(hist_, 256);
  radix_sort(keys_.data(), ord, keys_tmp_.data(), order_tmp_.data(), n, hist_.data());
  return 0;
}

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
  grow(assigned_, n);
  p.cta_cost.assign(C, 0.0);
  // The integer sum is exact unless n * max_ic could exceed 2^64 (then the double queue is used).
  const bool total_exact = max_ic == 0 || n <= ~uint64_t(0) / max_ic;
  if (int_costs_) total_cost = static_cast<double>(total_ic);
  if (int_costs_ && n > 0 && total_exact && int_keys_for_total(total_cost)) {
    sort_int_desc(c_icost_.data(), n, min_ic, max_ic);
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
    grow(hist_, 256);
    radix_sort(keys_.data(), order_.data(), keys_tmp_.data(), order_tmp_.data(), n, hist_.data());
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
  for (int32_t c = 0; c < C; ++c) ci[c + 1] += ci[c];
  cursor_.assign(ci, ci + C);
  const ItemArrays it = item_arrays(p, n);
  int32_t *const ir = it.request, *const ih = it.kv_head, *const irb = it.row_begin, *const ire = it.row_end;
  int32_t *const ikb = it.kv_begin, *const ike = it.kv_end, *const isl = it.partial_slot;
  int32_t* const cur = cursor_.data();
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
  // cfg.deal_heads_together: the units before the tail go whole (H tiles to one CTA).
  const std::size_t tail = static_cast<std::size_t>(std::max(cfg_.grouped_tail_units, 0));
  const std::size_t grouped = cfg_.deal_heads_together && H > 1 && U > tail ? U - tail : 0;
  // Units of equal cost are consecutive in the sorted order: each run of them is dealt at once
  // (deal_run_int: the CTAs deal_int gives them one by one) where the runs are long (runs_pay).
  // (the counting sort counted them; otherwise one pass over the sorted costs)
  std::size_t runs = distinct;
  if (runs == 0) {
    runs = U > 0;
    for (std::size_t k = 1; k < U; ++k) runs += ic[o[k]] != ic[o[k - 1]];
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
  for (std::size_t k = grouped; k < U;) {
    const uint64_t c = ic[o[k]];
    std::size_t r = k + 1;
    while (r < U && ic[o[r]] == c) ++r;
    if (by_run) deal_run_int(c, (r - k) * static_cast<std::size_t>(H), as + k * H);
    else
      for (std::size_t i = k * H; i < r * H; ++i) as[i] = deal_int(c);
    k = r;
  }
  for (std::size_t i = grouped * H; i < n; ++i) ++ci[as[i] + 1];
  p.cta_cost.assign(C, 0.0);
  loads_int(p.cta_cost.data());

  // Flatten by CTA (each CTA's items in the order dealt).
  for (int32_t c = 0; c < C; ++c) ci[c + 1] += ci[c];
  cursor_.assign(ci, ci + C);
  const ItemArrays it = item_arrays(p, n);
  int32_t *const ir = it.request, *const ih = it.kv_head, *const irb = it.row_begin, *const ire = it.row_end;
  int32_t *const ikb = it.kv_begin, *const ike = it.kv_end, *const isl = it.partial_slot;
  int32_t* const cur = cursor_.data();
  // Each item written straight to its CTA's next place, the unit read once for its H heads.
  for (std::size_t k = 0; k < U; ++k) {
    const Unit u = un[o[k]];
    const int32_t* const ak = as + k * H;
    for (int32_t h = 0; h < H; ++h) {
      const int32_t i = cur[ak[h]]++;
      ir[i] = u.request;
      ih[i] = h;
      ire[i] = u.rows;
      ikb[i] = u.kv_begin;
      ike[i] = u.kv_end;
    }
  }
  std::fill(irb, irb + n, 0);   // whole tiles: every row from 0,
  std::fill(isl, isl + n, -1);  // final outputs
  p.split = false;
  return true;
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
