// float64 merge of attention states (natural-log LSE), with -inf states as the identity.
#include "reference/merge.h"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace weft::ref {

void merge_state(const double* o_a, double lse_a, const double* o_b, double lse_b, int64_t head_dim,
                 double* o_out, double* lse_out) {
  const double ninf = -std::numeric_limits<double>::infinity();
  if (lse_a == ninf && lse_b == ninf) {
    for (int64_t d = 0; d < head_dim; ++d) o_out[d] = 0;
    *lse_out = ninf;
    return;
  }
  if (lse_b == ninf) {  // b covers no key: identity (its o may be garbage)
    for (int64_t d = 0; d < head_dim; ++d) o_out[d] = o_a[d];
    *lse_out = lse_a;
    return;
  }
  if (lse_a == ninf) {
    for (int64_t d = 0; d < head_dim; ++d) o_out[d] = o_b[d];
    *lse_out = lse_b;
    return;
  }
  const double m = std::max(lse_a, lse_b);
  const double ea = std::exp(lse_a - m), eb = std::exp(lse_b - m);
  const double sum = ea + eb;  // in [1, 2]: no underflow of the normalizer
  const double wa = ea / sum, wb = eb / sum;
  for (int64_t d = 0; d < head_dim; ++d) o_out[d] = o_a[d] * wa + o_b[d] * wb;
  *lse_out = m + std::log(sum);
}

Result merge(const Result& a, const Result& b, int64_t head_dim) {
  if (head_dim <= 0 || a.lse.size() != b.lse.size() || a.o.size() != b.o.size() ||
      a.o.size() != a.lse.size() * static_cast<std::size_t>(head_dim)) {
    throw std::invalid_argument("weft::ref::merge: state shapes differ or do not match head_dim");
  }
  Result r;
  r.o.resize(a.o.size());
  r.lse.resize(a.lse.size());
  for (std::size_t n = 0; n < a.lse.size(); ++n) {
    merge_state(a.o.data() + n * head_dim, a.lse[n], b.o.data() + n * head_dim, b.lse[n], head_dim,
                r.o.data() + n * head_dim, &r.lse[n]);
  }
  return r;
}

Result merge_many(const std::vector<Result>& states, int64_t head_dim) {
  if (states.empty()) throw std::invalid_argument("weft::ref::merge_many: no states");
  Result acc = states[0];
  for (std::size_t s = 1; s < states.size(); ++s) acc = merge(acc, states[s], head_dim);
  return acc;
}

Result merge_many_f(const std::vector<std::vector<float>>& o, const std::vector<std::vector<float>>& lse,
                    int64_t head_dim) {
  if (o.size() != lse.size()) throw std::invalid_argument("weft::ref::merge_many_f: o and lse counts differ");
  std::vector<Result> states(o.size());
  for (std::size_t s = 0; s < o.size(); ++s) {
    states[s].o.assign(o[s].begin(), o[s].end());
    states[s].lse.assign(lse[s].begin(), lse[s].end());
  }
  return merge_many(states, head_dim);
}

}  // namespace weft::ref
