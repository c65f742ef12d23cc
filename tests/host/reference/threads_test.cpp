// The multi-threaded, blocked, SIMD attention reference is bit-for-bit the plain single-threaded
// per-row loop: for every variant, every thread count and both SIMD paths. Also the thread-count
// plumbing of reference/parallel.h.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "problem.h"
#include "reference/attention.h"
#include "reference/parallel.h"
#include "reference/round.h"

namespace {

namespace ref = weft::ref;
using weft::DType;
using weft::reftest::make_problem;
using weft::reftest::Problem;

// Restores the default thread count and SIMD path however a test ends.
struct EngineGuard {
  ~EngineGuard() {
    ref::set_num_threads(0);
    ref::set_reference_simd_limit(2);
  }
};

bool bit_equal(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

::testing::AssertionResult same_bits(const ref::Result& a, const ref::Result& b) {
  if (!bit_equal(a.o, b.o)) {
    for (std::size_t n = 0; n < std::min(a.o.size(), b.o.size()); ++n) {
      if (std::memcmp(&a.o[n], &b.o[n], sizeof(double)) != 0) {
        return ::testing::AssertionFailure() << "o[" << n << "] " << a.o[n] << " vs " << b.o[n];
      }
    }
    return ::testing::AssertionFailure() << "o sizes " << a.o.size() << " vs " << b.o.size();
  }
  if (!bit_equal(a.lse, b.lse)) return ::testing::AssertionFailure() << "lse differs";
  return ::testing::AssertionSuccess();
}

// The reference's arithmetic, spelled as the plain per-row loop (the pre-threading
// implementation): dot in d order; scale, soft-cap, alibi; running max in key order; then over
// visible keys in order w = exp(x - m), l += w, acc += round(w) * v; o = round(acc / l).
template <class T>
ref::Result plain_loop(const Problem& P, const ref::Options& opt, ref::Rounding p_round, ref::Rounding o_round) {
  const int64_t D = P.d, group = P.hq / P.hkv;
  const double scale_d = opt.sm_scale != 0 ? opt.sm_scale : 1.0 / std::sqrt(static_cast<double>(D));
  const T scale = static_cast<T>(scale_d), cap = static_cast<T>(opt.logits_soft_cap);
  ref::Result r;
  r.o.assign(P.q.size(), 0.0);
  r.lse.assign(P.qo_indptr.back() * P.hq, 0.0);
  for (int64_t b = 0; b < P.batch(); ++b) {
    const int64_t ql = P.q_len(b), kl = P.kv_len(b), k0 = P.kv_indptr[b];
    for (int64_t i = 0; i < ql; ++i) {
      const int64_t row = P.qo_indptr[b] + i, p = kl - ql + i;
      for (int64_t h = 0; h < P.hq; ++h) {
        const int64_t hk = h / group;
        const float* q = &P.q[(row * P.hq + h) * D];
        std::vector<T> s;
        std::vector<int64_t> keys;
        T m = -std::numeric_limits<T>::infinity();
        for (int64_t j = 0; j < kl; ++j) {
          if (opt.causal && j > p) continue;
          if (opt.window_left >= 0 && j < p - opt.window_left) continue;
          if (opt.custom_mask != nullptr) {
            const int64_t k = i * kl + j;
            if (((opt.custom_mask[opt.mask_indptr[b] + (k >> 3)] >> (k & 7)) & 1) == 0) continue;
          }
          const float* kr = &P.k[((k0 + j) * P.hkv + hk) * D];
          T dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += static_cast<T>(q[d]) * static_cast<T>(kr[d]);
          T x = scale * dot;
          if (opt.logits_soft_cap > 0) x = cap * std::tanh(x / cap);
          if (!opt.alibi_slopes.empty()) x += static_cast<T>(opt.alibi_slopes[h]) * static_cast<T>(j - p);
          s.push_back(x);
          keys.push_back(j);
          if (x > m) m = x;
        }
        double* o = &r.o[(row * P.hq + h) * D];
        if (keys.empty()) {
          r.lse[row * P.hq + h] = -std::numeric_limits<double>::infinity();
          continue;
        }
        std::vector<T> acc(D, T(0));
        T l = 0;
        for (std::size_t n = 0; n < keys.size(); ++n) {
          const T w = std::exp(s[n] - m);
          l += w;
          const T wp = static_cast<T>(ref::round_value(p_round, w));
          const float* vr = &P.v[((k0 + keys[n]) * P.hkv + hk) * D];
          for (int64_t d = 0; d < D; ++d) acc[d] += wp * static_cast<T>(vr[d]);
        }
        for (int64_t d = 0; d < D; ++d) o[d] = ref::round_value(o_round, static_cast<double>(acc[d] / l));
        r.lse[row * P.hq + h] = static_cast<double>(m + std::log(l));
      }
    }
  }
  return r;
}

enum : int { kCausal = 1, kWindow = 2, kCap = 4, kAlibi = 8, kCustom = 16, kScale = 32 };

struct Case {
  Problem P;
  ref::Options opt;
  ref::PackedMask pm;
};

// Several requests spanning many key tiles and row blocks, including kv_len 0, q_len > kv_len,
// q_len 1 and head dims that are not a multiple of any vector width.
Case make_case(weft::test::Rng& rng, int flags, int64_t d) {
  Case c;
  const std::vector<int64_t> ql = {rng.randint(20, 70), 1, 9, rng.randint(1, 5), 6};
  const std::vector<int64_t> kl = {rng.randint(130, 300), rng.randint(60, 200), 0, rng.randint(1, 3),
                                   rng.randint(70, 140)};
  const int64_t hkv = rng.randint(1, 2), group = rng.randint(1, 5);
  c.P = make_problem(rng, ql, kl, hkv * group, hkv, d, DType::kBFloat16);
  if (flags & kScale) c.opt.sm_scale = rng.uniform(0.05, 0.5);
  if (flags & kCausal) c.opt.causal = true;
  if (flags & kWindow) c.opt.window_left = rng.randint(0, 40);
  if (flags & kCap) c.opt.logits_soft_cap = rng.uniform(0.3, 2.0);
  if (flags & kAlibi) {
    for (int64_t h = 0; h < c.P.hq; ++h) c.opt.alibi_slopes.push_back(std::pow(2.0, -double(h + 1) * 8.0 / double(c.P.hq)));
  }
  if (flags & kCustom) {
    std::vector<std::vector<bool>> dense;
    for (int64_t b = 0; b < c.P.batch(); ++b) dense.push_back(weft::reftest::random_dense_mask(rng, ql[b] * kl[b], 0.6));
    c.pm = ref::pack_custom_mask(c.P.qo_indptr, c.P.kv_indptr,
                                 [&](int64_t b, int64_t i, int64_t j) { return bool(dense[b][i * kl[b] + j]); });
    c.opt.custom_mask = c.pm.bits.data();
    c.opt.mask_indptr = c.pm.indptr;
  }
  return c;
}

const int kVariants[] = {0, kCausal, kWindow, kCap, kAlibi, kCustom, kScale, kCausal | kWindow,
                         kCausal | kWindow | kCap | kAlibi | kCustom | kScale, kWindow | kAlibi | kCustom};
const int kThreadCounts[] = {1, 2, 3, 8};

TEST(RefThreads, ExactEqualsPlainLoopForAnyThreadCountAndSimd) {
  EngineGuard guard;
  auto rng = weft::test::Rng::for_current_test();
  for (int flags : kVariants) {
    for (int64_t d : {40, 64}) {
      const Case c = make_case(rng, flags, d);
      const ref::Result want = plain_loop<double>(c.P, c.opt, ref::Rounding::kNone, ref::Rounding::kNone);
      for (int simd : {0, 1, 2}) {
        ref::set_reference_simd_limit(simd);
        for (int threads : kThreadCounts) {
          ref::set_num_threads(threads);
          EXPECT_TRUE(same_bits(ref::attention(c.P.rq(), c.P.rkv(), c.opt), want))
              << "flags=" << flags << " d=" << d << " simd=" << simd << " threads=" << threads;
        }
      }
    }
  }
}

TEST(RefThreads, LowPrecisionEqualsPlainLoopForAnyThreadCountAndSimd) {
  EngineGuard guard;
  auto rng = weft::test::Rng::for_current_test();
  const int variants[] = {0, kCausal | kCap | kAlibi, kWindow | kCustom | kScale};
  for (int flags : variants) {
    const Case c = make_case(rng, flags, 64);
    for (DType dt : {DType::kFloat16, DType::kBFloat16, DType::kFloat32}) {
      for (bool round_p : {true, false}) {
        const ref::Rounding r = ref::rounding_of(dt);
        const ref::Result want = plain_loop<float>(c.P, c.opt, round_p ? r : ref::Rounding::kNone, r);
        for (int simd : {0, 1, 2}) {
          ref::set_reference_simd_limit(simd);
          for (int threads : kThreadCounts) {
            ref::set_num_threads(threads);
            EXPECT_TRUE(same_bits(ref::attention_low_precision(c.P.rq(), c.P.rkv(), c.opt, dt, round_p), want))
                << "flags=" << flags << " dtype=" << int(dt) << " round_p=" << round_p << " simd=" << simd
                << " threads=" << threads;
          }
        }
      }
    }
  }
}

TEST(RefThreads, KvRangeIdenticalAcrossThreadCountsAndSimd) {
  EngineGuard guard;
  auto rng = weft::test::Rng::for_current_test();
  for (int flags : {0, kCausal | kAlibi, kWindow | kCustom | kCap}) {
    const Case c = make_case(rng, flags, 64);
    const int64_t kv_len = c.P.kv_len(0);
    const int64_t b0 = rng.randint(0, kv_len / 2), b1 = rng.randint(b0, kv_len);
    ref::set_num_threads(1);
    ref::set_reference_simd_limit(0);
    const ref::Result want = ref::attention_kv_range(c.P.rq(), c.P.rkv(), c.opt, 0, b0, b1);
    ASSERT_EQ(want.lse.size(), std::size_t(c.P.q_len(0) * c.P.hq));
    for (int simd : {0, 1, 2}) {
      ref::set_reference_simd_limit(simd);
      for (int threads : kThreadCounts) {
        ref::set_num_threads(threads);
        EXPECT_TRUE(same_bits(ref::attention_kv_range(c.P.rq(), c.P.rkv(), c.opt, 0, b0, b1), want))
            << "flags=" << flags << " simd=" << simd << " threads=" << threads;
      }
    }
  }
}

TEST(RefThreads, EnvironmentAndOverrideSetThreadCount) {
  EngineGuard guard;
  const char* old = std::getenv("WEFT_REF_THREADS");
  const std::string saved = old ? old : "";
  ref::set_num_threads(0);
  setenv("WEFT_REF_THREADS", "3", 1);
  EXPECT_EQ(ref::num_threads(), 3);
  ref::set_num_threads(5);
  EXPECT_EQ(ref::num_threads(), 5);  // the override wins over the environment
  ref::set_num_threads(0);
  setenv("WEFT_REF_THREADS", "zero", 1);  // malformed: ignored
  EXPECT_GE(ref::num_threads(), 1);
  setenv("WEFT_REF_THREADS", "-2", 1);
  EXPECT_GE(ref::num_threads(), 1);
  if (old) {
    setenv("WEFT_REF_THREADS", saved.c_str(), 1);
  } else {
    unsetenv("WEFT_REF_THREADS");
  }
}

TEST(RefThreads, ParallelForRunsEveryTaskOnceAndRethrows) {
  EngineGuard guard;
  ref::set_num_threads(4);
  std::vector<std::atomic<int>> hits(1000);
  ref::parallel_for(1000, [&](int64_t t) { hits[t].fetch_add(1); });
  for (const auto& h : hits) EXPECT_EQ(h.load(), 1);
  ref::parallel_for(0, [](int64_t) { FAIL() << "no task expected"; });
  EXPECT_THROW(ref::parallel_for(100, [](int64_t t) { if (t == 37) throw std::runtime_error("task 37"); }),
               std::runtime_error);
}

}  // namespace
