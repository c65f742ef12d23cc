// attention_low_precision: close to exact, but measurably not exact, with outputs representable
// in the dtype; the error grows from f32 to f16 to bf16.
#include <gtest/gtest.h>

#include <cmath>

#include "problem.h"
#include "reference/attention.h"

namespace {

namespace ref = weft::ref;
using weft::DType;
using weft::reftest::make_problem;
using weft::reftest::Problem;

struct Err {
  weft::test::Comparison o;
  double lse_max_abs = 0;
};

Err low_vs_exact(const Problem& P, const ref::Options& opt, DType dt, bool round_p = true) {
  const ref::Result exact = ref::attention(P.rq(), P.rkv(), opt);
  const ref::Result low = ref::attention_low_precision(P.rq(), P.rkv(), opt, dt, round_p);
  Err e;
  e.o = weft::test::compare(ref::to_float(low.o), exact.o);
  for (std::size_t n = 0; n < exact.lse.size(); ++n) {
    if (std::isinf(exact.lse[n])) {
      EXPECT_EQ(low.lse[n], exact.lse[n]);
    } else {
      e.lse_max_abs = std::max(e.lse_max_abs, std::fabs(low.lse[n] - exact.lse[n]));
    }
  }
  if (dt != DType::kFloat32) {
    for (double x : low.o) EXPECT_EQ(double(weft::test::round_to(dt, float(x))), x) << "not representable";
  }
  return e;
}

TEST(RefLowPrecision, Bf16WithinOnePercentButNotExact) {
  auto rng = weft::test::Rng::for_current_test();
  const Problem P = make_problem(rng, {5, 1}, {96, 200}, 8, 2, 128, DType::kBFloat16);
  for (bool causal : {false, true}) {
    ref::Options opt;
    opt.causal = causal;
    const Err e = low_vs_exact(P, opt, DType::kBFloat16);
    EXPECT_LT(e.o.rel_l2, 1e-2) << e.o.summary();
    EXPECT_GT(e.o.rel_l2, 1e-4) << "bf16 emulation indistinguishable from exact: " << e.o.summary();
    EXPECT_EQ(e.o.nan_count, 0);
    EXPECT_LT(e.lse_max_abs, 1e-4);
    EXPECT_GT(e.lse_max_abs, 0.0);
  }
}

TEST(RefLowPrecision, F16WithinOnePermilleButNotExact) {
  auto rng = weft::test::Rng::for_current_test();
  const Problem P = make_problem(rng, {5, 1}, {96, 200}, 8, 2, 128, DType::kFloat16);
  for (bool causal : {false, true}) {
    ref::Options opt;
    opt.causal = causal;
    const Err e = low_vs_exact(P, opt, DType::kFloat16);
    EXPECT_LT(e.o.rel_l2, 1e-3) << e.o.summary();
    EXPECT_GT(e.o.rel_l2, 1e-5) << "f16 emulation indistinguishable from exact: " << e.o.summary();
    EXPECT_LT(e.lse_max_abs, 1e-4);
  }
}

TEST(RefLowPrecision, ErrorOrderingF32F16Bf16AndVariants) {
  auto rng = weft::test::Rng::for_current_test();
  const Problem P = make_problem(rng, {7, 3}, {64, 33}, 4, 1, 64, DType::kBFloat16);  // bf16 values fit f16 here
  ref::Options opt;
  opt.causal = true;
  opt.window_left = 20;
  opt.logits_soft_cap = 2.0;
  opt.alibi_slopes = {0.25, 0.125, 0.0625, 0.03125};
  const Err f32 = low_vs_exact(P, opt, DType::kFloat32);
  const Err f16 = low_vs_exact(P, opt, DType::kFloat16);
  const Err bf16 = low_vs_exact(P, opt, DType::kBFloat16);
  EXPECT_GT(f32.o.rel_l2, 0.0);  // float32 arithmetic is not double
  EXPECT_LT(f32.o.rel_l2, 1e-6) << f32.o.summary();
  EXPECT_LT(f32.o.rel_l2, f16.o.rel_l2);
  EXPECT_LT(f16.o.rel_l2, bf16.o.rel_l2);
  EXPECT_LT(bf16.o.rel_l2, 1e-2) << bf16.o.summary();
  // Keeping P in fp32 (CUDA-core decode) is still within the same band.
  const Err bf16_p32 = low_vs_exact(P, opt, DType::kBFloat16, /*round_p=*/false);
  EXPECT_LT(bf16_p32.o.rel_l2, 1e-2);
  EXPECT_GT(bf16_p32.o.rel_l2, 0.0);
  // The tolerance the GPU tests derive from it is meaningful (not zero, not huge).
  const auto tol = weft::test::tolerance_from_baseline(bf16.o);
  EXPECT_GT(tol.rel_l2, 1e-4);
  EXPECT_LT(tol.rel_l2, 5e-2);
}

TEST(RefLowPrecision, RejectsIntegerDtype) {
  auto rng = weft::test::Rng::for_current_test();
  const Problem P = make_problem(rng, {1}, {4}, 2, 1, 8);
  EXPECT_THROW(ref::attention_low_precision(P.rq(), P.rkv(), {}, DType::kInt32), std::invalid_argument);
}

}  // namespace
