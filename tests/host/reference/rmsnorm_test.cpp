// reference/rmsnorm.h: hand-computed values, fused residual add, all-reduce sum order, rounding.
#include <gtest/gtest.h>

#include <cmath>

#include "common/test_util.h"
#include "reference/rmsnorm.h"

namespace {

namespace ref = weft::ref;

TEST(RefRmsNorm, HandComputed) {
  // Row 0: x = (3, 4): mean square 12.5; row 1: x = (1, -1): mean square 1 (+ eps 0.25).
  const float x[4] = {3, 4, 1, -1}, w[2] = {1, 2};
  const auto out = ref::rmsnorm(x, w, 2, 2, 0.0);
  EXPECT_NEAR(out[0], 3 / std::sqrt(12.5), 1e-15);
  EXPECT_NEAR(out[1], 8 / std::sqrt(12.5), 1e-15);
  const auto out_eps = ref::rmsnorm(x, w, 2, 2, 0.25);
  EXPECT_NEAR(out_eps[2], 1 / std::sqrt(1.25), 1e-15);
  EXPECT_NEAR(out_eps[3], -2 / std::sqrt(1.25), 1e-15);
  EXPECT_NEAR(out_eps[0], 3 / std::sqrt(12.75), 1e-15);
}

TEST(RefRmsNorm, RandomRowsHaveUnitRmsBeforeWeight) {
  auto rng = weft::test::Rng::for_current_test();
  const int64_t T = 5, H = 96;
  const auto x = rng.uniform_vec(T * H, -3, 3);
  const std::vector<float> ones(H, 1.0f);
  const auto out = ref::rmsnorm(x.data(), ones.data(), T, H, 0.0);
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0;
    for (int64_t c = 0; c < H; ++c) ss += out[t * H + c] * out[t * H + c];
    EXPECT_NEAR(ss / H, 1.0, 1e-12);
    // Direction preserved: out / x is the same positive constant across the row.
    const double ratio = out[t * H] / x[t * H];
    EXPECT_GT(ratio, 0);
    for (int64_t c = 0; c < H; ++c) EXPECT_NEAR(out[t * H + c], ratio * x[t * H + c], 1e-12);
  }
}

TEST(RefRmsNorm, FusedAddEqualsAddThenNorm) {
  auto rng = weft::test::Rng::for_current_test();
  const int64_t T = 3, H = 64;
  const auto x = rng.uniform_vec(T * H), res = rng.uniform_vec(T * H), w = rng.uniform_vec(H, 0.5, 1.5);
  const auto f = ref::fused_add_rmsnorm(x.data(), res.data(), w.data(), T, H, 1e-6);
  std::vector<double> sum(T * H);
  for (int64_t n = 0; n < T * H; ++n) sum[n] = double(x[n]) + double(res[n]);
  EXPECT_EQ(f.residual, sum);
  EXPECT_EQ(f.out, ref::rmsnorm_d(sum.data(), w.data(), T, H, 1e-6));
}

TEST(RefRmsNorm, ResidualRoundedBeforeNormalizing) {
  // residual 1, x = 2^-11 (+ tiny): the f16 / bf16 residual rounds back to exactly 1.0.
  const float x[2] = {std::ldexp(1.0f, -11), 0.5f}, res[2] = {1.0f, 1.0f}, w[2] = {1.0f, 1.0f};
  const auto none = ref::fused_add_rmsnorm(x, res, w, 1, 2, 0.0);
  const auto f16 = ref::fused_add_rmsnorm(x, res, w, 1, 2, 0.0, ref::Rounding::kFloat16);
  const auto bf16 = ref::fused_add_rmsnorm(x, res, w, 1, 2, 0.0, ref::Rounding::kBFloat16);
  EXPECT_EQ(none.residual[0], 1.0 + std::ldexp(1.0, -11));
  EXPECT_EQ(f16.residual[0], 1.0);  // tie -> even
  EXPECT_EQ(bf16.residual[0], 1.0);
  EXPECT_EQ(f16.residual[1], 1.5);
  // The normalized output uses the rounded residual: both entries of row (1, 1.5).
  const double rms = std::sqrt((1.0 + 2.25) / 2);
  EXPECT_NEAR(f16.out[0], 1.0 / rms, 1e-15);
  EXPECT_NEAR(f16.out[1], 1.5 / rms, 1e-15);
  EXPECT_NE(none.out[0], f16.out[0]);
}

TEST(RefRmsNorm, AllReduceSumsRanksInOrder) {
  // Ranks hold 2^24, 1, 1: in double the sum is 2^24 + 2; a float32 accumulation in rank order
  // loses both ones (2^24 + 1 ties to even), in reverse order it keeps them.
  const float big = std::ldexp(1.0f, 24);
  const float a[1] = {big}, b[1] = {1.0f}, c[1] = {1.0f}, zero[1] = {0.0f}, w[1] = {1.0f};
  EXPECT_EQ(ref::allreduce_sum({a, b, c}, 1)[0], double(big) + 2);
  const auto fwd = ref::allreduce_add_rmsnorm({a, b, c}, zero, w, 1, 1, 0.0, ref::Rounding::kFloat32);
  const auto rev = ref::allreduce_add_rmsnorm({c, b, a}, zero, w, 1, 1, 0.0, ref::Rounding::kFloat32);
  const auto exact = ref::allreduce_add_rmsnorm({a, b, c}, zero, w, 1, 1, 0.0);
  EXPECT_EQ(fwd.residual[0], double(big));
  EXPECT_EQ(rev.residual[0], double(big) + 2);
  EXPECT_EQ(exact.residual[0], double(big) + 2);
}

TEST(RefRmsNorm, AllReduceMatchesHandSumAndSingleRankFusedAdd) {
  auto rng = weft::test::Rng::for_current_test();
  const int64_t T = 4, H = 32, R = 4;
  std::vector<std::vector<float>> xs;
  std::vector<const float*> ptrs;
  for (int64_t r = 0; r < R; ++r) xs.push_back(rng.uniform_vec(T * H));
  for (auto& x : xs) ptrs.push_back(x.data());
  const auto res = rng.uniform_vec(T * H), w = rng.uniform_vec(H, 0.5, 1.5);
  const auto ar = ref::allreduce_add_rmsnorm(ptrs, res.data(), w.data(), T, H, 1e-5);
  std::vector<double> sum(T * H);
  for (int64_t n = 0; n < T * H; ++n) {
    sum[n] = double(res[n]);
    for (int64_t r = 0; r < R; ++r) sum[n] += double(xs[r][n]);
  }
  for (int64_t n = 0; n < T * H; ++n) EXPECT_NEAR(ar.residual[n], sum[n], 1e-14);
  const auto want = ref::rmsnorm_d(sum.data(), w.data(), T, H, 1e-5);
  for (int64_t n = 0; n < T * H; ++n) EXPECT_NEAR(ar.out[n], want[n], 1e-13);
  // One rank: identical to fused_add_rmsnorm, with and without rounding.
  for (auto rnd : {ref::Rounding::kNone, ref::Rounding::kBFloat16}) {
    const auto one = ref::allreduce_add_rmsnorm({ptrs[0]}, res.data(), w.data(), T, H, 1e-5, rnd);
    const auto fused = ref::fused_add_rmsnorm(ptrs[0], res.data(), w.data(), T, H, 1e-5, rnd);
    EXPECT_EQ(one.residual, fused.residual);
    EXPECT_EQ(one.out, fused.out);
  }
}

}  // namespace
