#include "reference/custom_logits.h"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace weft::ref {

Result attention_custom_logits(const RaggedQ& q, const RaggedKV& kv, const Options& opt, const LogitFn& logit,
                               bool normalize) {
  const int64_t hq = q.num_qo_heads, hk = kv.num_kv_heads, d = q.head_dim;
  if (kv.head_dim != d || hk <= 0 || hq % hk != 0 || q.qo_indptr.size() != kv.kv_indptr.size())
    throw std::invalid_argument("attention_custom_logits: inconsistent shapes");
  const int64_t batch = static_cast<int64_t>(q.qo_indptr.size()) - 1;
  const int64_t total_q = q.qo_indptr.back();
  const double sm_scale = opt.sm_scale > 0 ? opt.sm_scale : 1.0 / std::sqrt(static_cast<double>(d));
  const double ninf = -std::numeric_limits<double>::infinity();
  Result r;
  r.o.assign(static_cast<std::size_t>(total_q * hq * d), 0.0);
  r.lse.assign(static_cast<std::size_t>(total_q * hq), ninf);
  std::vector<double> l, acc(static_cast<std::size_t>(d));
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t q0 = q.qo_indptr[b], q_len = q.qo_indptr[b + 1] - q0;
    const int64_t k0 = kv.kv_indptr[b], kv_len = kv.kv_indptr[b + 1] - k0;
    for (int64_t i = 0; i < q_len; ++i) {
      const int64_t p = kv_len - q_len + i;
      for (int64_t h = 0; h < hq; ++h) {
        const int64_t g = h / (hq / hk);
        const float* qi = q.data + ((q0 + i) * hq + h) * d;
        l.assign(static_cast<std::size_t>(kv_len), ninf);
        double mx = ninf;
        for (int64_t j = 0; j < kv_len; ++j) {
          if (opt.causal && j > p) continue;
          if (opt.window_left >= 0 && j < p - opt.window_left) continue;
          const float* kj = kv.k + ((k0 + j) * hk + g) * d;
          double dot = 0;
          for (int64_t e = 0; e < d; ++e) dot += static_cast<double>(qi[e]) * kj[e];
          l[j] = logit(sm_scale * dot, p, j, h);
          mx = std::max(mx, l[j]);
        }
        if (mx == ninf) continue;  // nothing attended: O = 0, LSE = -inf
        double sum = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < kv_len; ++j) {
          if (l[j] == ninf) continue;
          const double w = std::exp(l[j] - mx);
          sum += w;
          const float* vj = kv.v + ((k0 + j) * hk + g) * d;
          for (int64_t e = 0; e < d; ++e) acc[e] += w * vj[e];
        }
        const double lse = mx + std::log(sum);
        r.lse[(q0 + i) * hq + h] = lse;
        // softmax: acc / sum;  unnormalized: acc * exp(mx)
        const double f = normalize ? 1.0 / sum : std::exp(mx);
        double* o = r.o.data() + ((q0 + i) * hq + h) * d;
        for (int64_t e = 0; e < d; ++e) o[e] = acc[e] * f;
      }
    }
  }
  return r;
}

}  // namespace weft::ref
