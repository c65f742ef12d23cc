// The balance planner's steps 4-5 (balance.cpp): the stable sorts by cost and the CTA queue that
// deals chunks, lowest (load, CTA index) first, with double loads or integer keys.
#include <algorithm>
#include <cstring>
#include <utility>

#include "attention/plan/balance.h"
#include "attention/plan/balance_internal.h"

namespace weft::plan {
namespace balance_detail {

// Stable LSD radix sort of (keys, vals), ascending by key. Only the bytes in which keys differ
// are sorted (integral costs of a few distinct magnitudes differ in 2-3 bytes); nothing is done
// when the keys are already in order. tmp buffers hold n entries; hist kRadixHist (512) entries.
// The first pass, which finds the differing bytes, also counts bytes 0 and 1 (the digits of most
// plans' keys: decode lengths up to 64K keys), so their passes only scatter (b256: one counting
// pass over the keys instead of three).
void radix_sort(uint64_t* keys, uint32_t* vals, uint64_t* ktmp, uint32_t* vtmp, std::size_t n, uint32_t* hist) {
  if (n < 2) return;
  std::memset(hist, 0, kRadixHist * sizeof(uint32_t));
  uint32_t* const h0 = hist;
  uint32_t* const h1 = hist + 256;
  uint64_t diff = 0;
  bool sorted = true;
  ++h0[keys[0] & 0xff];
  ++h1[(keys[0] >> 8) & 0xff];
  for (std::size_t i = 1; i < n; ++i) {
    const uint64_t x = keys[i];
    diff |= x ^ keys[0];
    sorted &= keys[i - 1] <= x;
    ++h0[x & 0xff];
    ++h1[(x >> 8) & 0xff];
  }
  if (sorted) return;
  uint64_t* k = keys;
  uint32_t* v = vals;
  uint64_t* kt = ktmp;
  uint32_t* vt = vtmp;
  for (int shift = 0; shift < 64; shift += 8) {
    if (((diff >> shift) & 0xff) == 0) continue;
    uint32_t* const h = shift == 8 ? h1 : h0;  // bytes 2..7: h0, free once byte 0's pass is done
    if (shift >= 16) {
      std::memset(h, 0, 256 * sizeof(uint32_t));
      for (std::size_t i = 0; i < n; ++i) ++h[(k[i] >> shift) & 0xff];
    }
    uint32_t sum = 0;
    for (int b = 0; b < 256; ++b) {
      const uint32_t c = h[b];
      h[b] = sum;
      sum += c;
    }
    for (std::size_t i = 0; i < n; ++i) {
      const uint32_t dst = h[(k[i] >> shift) & 0xff]++;
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

}  // namespace balance_detail

namespace {

// 2^e as a double (0 <= e < 64), exactly std::ldexp(1.0, e) without the libm call.
inline double pow2_double(int e) { return static_cast<double>(uint64_t(1) << e); }

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
  return balance_detail::deal_heap(iheap_.data(), C, key_shift_, add);
}

namespace balance_detail {
// The heap's pop-and-push, a leaf function of its own (deal_int calls it directly in heap mode:
// no ring-mode registers to save per deal).
int32_t deal_heap(uint64_t* h, std::size_t C, int key_shift, uint64_t add) {
  const uint64_t mask = (uint64_t(1) << key_shift) - 1;
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
}  // namespace balance_detail

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
  grow(hist_, kRadixHist);
  radix_sort(keys_.data(), ord, keys_tmp_.data(), order_tmp_.data(), n, hist_.data());
  return 0;
}

}  // namespace weft::plan
