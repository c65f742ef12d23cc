// reference/merge.h: algebra of state merging and split-KV equivalence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "problem.h"
#include "reference/merge.h"

namespace {

namespace ref = weft::ref;
using weft::reftest::close;
using weft::reftest::make_problem;
using weft::reftest::Problem;

ref::Result random_state(weft::test::Rng& rng, int64_t n, int64_t d, double p_empty = 0) {
  ref::Result s;
  for (int64_t r = 0; r < n; ++r) {
    s.lse.push_back(rng.uniform(0, 1) < p_empty ? -INFINITY : rng.uniform(-5, 5));
    for (int64_t t = 0; t < d; ++t) s.o.push_back(rng.uniform(-1, 1));
  }
  return s;
}

TEST(RefMerge, HandComputedPair) {
  const double oa[2] = {1.0, 2.0}, ob[2] = {3.0, -1.0};
  double o[2], lse;
  ref::merge_state(oa, std::log(1.0), ob, std::log(3.0), 2, o, &lse);
  EXPECT_NEAR(lse, std::log(4.0), 1e-15);
  EXPECT_NEAR(o[0], 0.25 * 1 + 0.75 * 3, 1e-15);
  EXPECT_NEAR(o[1], 0.25 * 2 + 0.75 * -1, 1e-15);
  // Large LSEs do not overflow.
  ref::merge_state(oa, 1000.0, ob, 1000.0, 2, o, &lse);
  EXPECT_NEAR(lse, 1000.0 + std::log(2.0), 1e-12);
  EXPECT_NEAR(o[0], 2.0, 1e-15);
}

TEST(RefMerge, CommutativeAndAssociative) {
  auto rng = weft::test::Rng::for_current_test();
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t d = 8;
    const auto a = random_state(rng, 6, d, 0.2), b = random_state(rng, 6, d, 0.2), c = random_state(rng, 6, d, 0.2);
    EXPECT_TRUE(close(ref::merge(a, b, d), ref::merge(b, a, d), 1e-14));
    EXPECT_TRUE(close(ref::merge(ref::merge(a, b, d), c, d), ref::merge(a, ref::merge(b, c, d), d), 1e-13));
    EXPECT_TRUE(close(ref::merge_many({a, b, c}, d), ref::merge(a, ref::merge(c, b, d), d), 1e-13));
  }
}

TEST(RefMerge, MinusInfStateIsIdentityEvenWithGarbageO) {
  auto rng = weft::test::Rng::for_current_test();
  const auto a = random_state(rng, 4, 16);
  ref::Result empty;
  empty.lse.assign(4, -INFINITY);
  empty.o.assign(4 * 16, NAN);  // an empty chunk's O must never leak in
  EXPECT_TRUE(close(ref::merge(a, empty, 16), a, 0));
  EXPECT_TRUE(close(ref::merge(empty, a, 16), a, 0));
  const ref::Result both = ref::merge(empty, empty, 16);
  for (double x : both.o) EXPECT_EQ(x, 0.0);
  for (double x : both.lse) EXPECT_EQ(x, -INFINITY);
}

TEST(RefMerge, RandomSplitsOfKvEqualUnsplit) {
  auto rng = weft::test::Rng::for_current_test();
  for (int trial = 0; trial < 12; ++trial) {
    const Problem P = make_problem(rng, {rng.randint(1, 4), rng.randint(1, 3)}, {rng.randint(0, 40), rng.randint(1, 40)},
                                   4, 2, 16);
    ref::Options opt;
    opt.causal = trial % 2 == 0;
    if (trial % 3 == 0) opt.window_left = rng.randint(0, 10);
    if (trial % 4 == 1) opt.alibi_slopes = {0.5, 0.25, 0.125, 0.0625};
    if (trial % 5 == 2) opt.logits_soft_cap = 1.5;
    const ref::Result full = ref::attention(P.rq(), P.rkv(), opt);
    for (int64_t b = 0; b < P.batch(); ++b) {
      const int64_t kl = P.kv_len(b);
      std::vector<int64_t> cuts = {0, kl};
      const int64_t extra = rng.randint(0, 5);  // may repeat a cut: empty chunks included
      for (int64_t c = 0; c < extra; ++c) cuts.push_back(rng.randint(0, kl));
      std::sort(cuts.begin(), cuts.end());
      std::vector<ref::Result> chunks;
      for (std::size_t c = 0; c + 1 < cuts.size(); ++c) {
        chunks.push_back(ref::attention_kv_range(P.rq(), P.rkv(), opt, b, cuts[c], cuts[c + 1]));
      }
      std::vector<ref::Result> reversed(chunks.rbegin(), chunks.rend());
      // The request's rows of the unsplit result.
      ref::Result want;
      const int64_t r0 = P.qo_indptr[b], r1 = P.qo_indptr[b + 1];
      want.o.assign(full.o.begin() + r0 * 4 * 16, full.o.begin() + r1 * 4 * 16);
      want.lse.assign(full.lse.begin() + r0 * 4, full.lse.begin() + r1 * 4);
      EXPECT_TRUE(close(ref::merge_many(chunks, 16), want, 1e-12)) << "trial " << trial << " b " << b;
      EXPECT_TRUE(close(ref::merge_many(reversed, 16), want, 1e-12)) << "trial " << trial << " b " << b;
      // The whole range through attention_kv_range is the unsplit result exactly.
      EXPECT_TRUE(close(ref::attention_kv_range(P.rq(), P.rkv(), opt, b, 0, kl), want, 0));
    }
  }
}

TEST(RefMerge, FloatOverloadMatchesDouble) {
  auto rng = weft::test::Rng::for_current_test();
  const auto a = random_state(rng, 3, 4), b = random_state(rng, 3, 4);
  auto f = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  const auto merged = ref::merge_many_f({f(a.o), f(b.o)}, {f(a.lse), f(b.lse)}, 4);
  EXPECT_TRUE(close(merged, ref::merge(a, b, 4), 1e-6));
  EXPECT_THROW(ref::merge(a, random_state(rng, 2, 4), 4), std::invalid_argument);
  EXPECT_THROW(ref::merge_many({}, 4), std::invalid_argument);
}

}  // namespace
