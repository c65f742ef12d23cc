// Internal to the balance planner (balance.cpp, balance_deal.cpp, balance_build.cpp): the helpers
// and the inlined queue steps they share. Not a public header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "attention/plan/balance.h"

namespace weft::plan {
namespace balance_detail {

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

// The integer queue's heap mode (Planner::deal_int): pops the smallest key of the C-key heap h
// (padded with maximal keys), pushes it back plus add, returns its CTA (the key's low key_shift bits).
int32_t deal_heap(uint64_t* h, std::size_t C, int key_shift, uint64_t add);

// Stable LSD radix sort of (keys, vals), ascending by key (balance_deal.cpp); hist: kRadixHist entries.
constexpr std::size_t kRadixHist = 512;
void radix_sort(uint64_t* keys, uint32_t* vals, uint64_t* ktmp, uint32_t* vtmp, std::size_t n, uint32_t* hist);

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

}  // namespace balance_detail

using namespace balance_detail;

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
    return deal_int_slow(add);
  }
  return balance_detail::deal_heap(iheap_.data(), static_cast<std::size_t>(cfg_.num_ctas), key_shift_, add);
}

}  // namespace weft::plan
