// Test-local helpers for the reference's own tests: random ragged problems and an independent
// brute-force attention written from the formula in include/weft/attention.h (dense masks,
// explicit exp / sum, no max subtraction, no shared code with reference/attention.cpp).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/test_util.h"
#include "reference/attention.h"

namespace weft::reftest {

struct Problem {
  int64_t hq = 0, hkv = 0, d = 0;
  std::vector<int32_t> qo_indptr, kv_indptr;
  std::vector<float> q, k, v;
  int64_t batch() const { return static_cast<int64_t>(qo_indptr.size()) - 1; }
  int64_t q_len(int64_t b) const { return qo_indptr[b + 1] - qo_indptr[b]; }
  int64_t kv_len(int64_t b) const { return kv_indptr[b + 1] - kv_indptr[b]; }
  ref::RaggedQ rq() const { return ref::RaggedQ{q.data(), hq, d, qo_indptr}; }
  ref::RaggedKV rkv() const { return ref::RaggedKV{k.data(), v.data(), hkv, d, kv_indptr}; }
};

inline Problem make_problem(test::Rng& rng, const std::vector<int64_t>& q_lens, const std::vector<int64_t>& kv_lens,
                            int64_t hq, int64_t hkv, int64_t d, DType dtype = DType::kFloat32) {
  Problem p;
  p.hq = hq;
  p.hkv = hkv;
  p.d = d;
  p.qo_indptr = {0};
  p.kv_indptr = {0};
  for (std::size_t b = 0; b < q_lens.size(); ++b) {
    p.qo_indptr.push_back(static_cast<int32_t>(p.qo_indptr.back() + q_lens[b]));
    p.kv_indptr.push_back(static_cast<int32_t>(p.kv_indptr.back() + kv_lens[b]));
  }
  p.q = rng.uniform_vec(p.qo_indptr.back() * hq * d);
  p.k = rng.uniform_vec(p.kv_indptr.back() * hkv * d);
  p.v = rng.uniform_vec(p.kv_indptr.back() * hkv * d);
  if (dtype != DType::kFloat32) {
    test::round_inplace(dtype, p.q);
    test::round_inplace(dtype, p.k);
    test::round_inplace(dtype, p.v);
  }
  return p;
}

struct NaiveSpec {
  double scale = 0;  // 0 -> 1/sqrt(d)
  bool causal = false;
  int64_t window_left = -1;
  double cap = 0;
  std::vector<double> slopes;
  std::vector<std::vector<bool>> dense_mask;  // per request [q_len][kv_len] row-major; empty = none
};

// Brute force: one (b, h, i) at a time, dense score row, explicit softmax.
inline ref::Result naive_attention(const Problem& P, const NaiveSpec& s) {
  const double scale = s.scale != 0 ? s.scale : 1.0 / std::sqrt(static_cast<double>(P.d));
  ref::Result r;
  r.o.assign(P.q.size(), 0.0);
  r.lse.assign(P.qo_indptr.back() * P.hq, 0.0);
  for (int64_t b = 0; b < P.batch(); ++b) {
    const int64_t ql = P.q_len(b), kl = P.kv_len(b);
    for (int64_t i = 0; i < ql; ++i) {
      const int64_t row = P.qo_indptr[b] + i;
      const int64_t pos = i + (kl - ql);
      for (int64_t h = 0; h < P.hq; ++h) {
        const int64_t kh = h * P.hkv / P.hq;  // == h / (hq / hkv)
        std::vector<double> e(kl, 0.0);
        std::vector<bool> live(kl, true);
        double sum = 0;
        for (int64_t j = 0; j < kl; ++j) {
          if (s.causal && !(j <= pos)) live[j] = false;
          if (s.window_left >= 0 && pos - j > s.window_left) live[j] = false;
          if (!s.dense_mask.empty() && !s.dense_mask[b][i * kl + j]) live[j] = false;
          if (!live[j]) continue;
          double dot = 0;
          for (int64_t t = 0; t < P.d; ++t) {
            dot += double(P.q[(row * P.hq + h) * P.d + t]) * double(P.k[((P.kv_indptr[b] + j) * P.hkv + kh) * P.d + t]);
          }
          double x = dot * scale;
          if (s.cap > 0) x = std::tanh(x / s.cap) * s.cap;
          if (!s.slopes.empty()) x += s.slopes[h] * double(j - pos);
          e[j] = std::exp(x);
          sum += e[j];
        }
        double* o = &r.o[(row * P.hq + h) * P.d];
        if (sum == 0) {
          r.lse[row * P.hq + h] = -std::numeric_limits<double>::infinity();
          continue;
        }
        for (int64_t j = 0; j < kl; ++j) {
          if (!live[j]) continue;
          for (int64_t t = 0; t < P.d; ++t) o[t] += e[j] / sum * double(P.v[((P.kv_indptr[b] + j) * P.hkv + kh) * P.d + t]);
        }
        r.lse[row * P.hq + h] = std::log(sum);
      }
    }
  }
  return r;
}

// Element-wise closeness; -inf must match exactly; no NaN anywhere.
inline ::testing::AssertionResult close(const ref::Result& a, const ref::Result& b, double tol) {
  if (a.o.size() != b.o.size() || a.lse.size() != b.lse.size()) return ::testing::AssertionFailure() << "size mismatch";
  for (std::size_t n = 0; n < a.o.size(); ++n) {
    if (std::isnan(a.o[n]) || std::isnan(b.o[n]) || std::fabs(a.o[n] - b.o[n]) > tol) {
      return ::testing::AssertionFailure() << "o[" << n << "] " << a.o[n] << " vs " << b.o[n];
    }
  }
  for (std::size_t n = 0; n < a.lse.size(); ++n) {
    const bool ia = std::isinf(a.lse[n]), ib = std::isinf(b.lse[n]);
    if (std::isnan(a.lse[n]) || std::isnan(b.lse[n]) || ia != ib || (ia && a.lse[n] != b.lse[n]) ||
        (!ia && std::fabs(a.lse[n] - b.lse[n]) > tol)) {
      return ::testing::AssertionFailure() << "lse[" << n << "] " << a.lse[n] << " vs " << b.lse[n];
    }
  }
  return ::testing::AssertionSuccess();
}

inline std::vector<bool> random_dense_mask(test::Rng& rng, int64_t n, double p_attend) {
  std::vector<bool> m(n);
  for (int64_t k = 0; k < n; ++k) m[k] = rng.uniform(0, 1) < p_attend;
  return m;
}

}  // namespace weft::reftest
