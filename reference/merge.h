// float64 reference for merging attention states (split-KV / cascade attention).
//
// A state of one (row, head) is (o[head_dim], lse) where lse = log(sum exp(s)) (NATURAL log) over
// the keys it covers and o is the softmax-weighted V over those keys. Merging two states that
// cover disjoint key sets:
//   lse = logaddexp(lse_a, lse_b) = m + log(exp(lse_a - m) + exp(lse_b - m)), m = max(lse_a, lse_b)
//   o   = o_a * exp(lse_a - lse) + o_b * exp(lse_b - lse)
// A state with lse = -inf covers no key: it is the identity (its o is ignored, even if NaN).
// Both -inf: o = 0, lse = -inf.
//
// Chunk states for split-KV tests come from attention_kv_range() in reference/attention.h.
#pragma once
#include <cstdint>
#include <vector>

#include "reference/attention.h"

namespace weft::ref {

// One (row, head): writes o_out[0..head_dim) and *lse_out. o_out may alias o_a or o_b.
void merge_state(const double* o_a, double lse_a, const double* o_b, double lse_b, int64_t head_dim,
                 double* o_out, double* lse_out);

// Element-wise over whole states: a.lse.size() == b.lse.size() == rows*heads,
// a.o.size() == b.o.size() == rows*heads*head_dim.
Result merge(const Result& a, const Result& b, int64_t head_dim);

// Merges states in list order (left fold). An empty list throws; one state is returned as is.
Result merge_many(const std::vector<Result>& states, int64_t head_dim);

// Float-input overload for states produced by kernels (o float, lse float natural log):
// o [n, head_dim], lse [n] for each of `states`; merged in list order in double.
Result merge_many_f(const std::vector<std::vector<float>>& o, const std::vector<std::vector<float>>& lse,
                    int64_t head_dim);

}  // namespace weft::ref
