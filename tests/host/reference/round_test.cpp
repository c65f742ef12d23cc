// reference/round.h: bf16 / f16 rounding against known bit patterns and against the CUDA host
// conversions used by tests/common/test_util.h.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>

#include "common/test_util.h"
#include "reference/round.h"

namespace {

namespace ref = weft::ref;
using weft::DType;

float from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

TEST(RefRound, Bf16KnownPatterns) {
  EXPECT_EQ(ref::f32_to_bf16_bits(1.0f), 0x3F80);
  EXPECT_EQ(ref::f32_to_bf16_bits(-2.0f), 0xC000);
  EXPECT_EQ(ref::f32_to_bf16_bits(from_bits(0x3F808000)), 0x3F80);  // 1 + 2^-8: tie -> even (down)
  EXPECT_EQ(ref::f32_to_bf16_bits(from_bits(0x3F818000)), 0x3F82);  // 1 + 3*2^-8: tie -> even (up)
  EXPECT_EQ(ref::f32_to_bf16_bits(from_bits(0x3F808001)), 0x3F81);  // just above the tie
  EXPECT_EQ(ref::f32_to_bf16_bits(from_bits(0x3F80FFFF)), 0x3F81);
  EXPECT_EQ(ref::f32_to_bf16_bits(from_bits(0x3FFF8000)), 0x4000);  // carry into the exponent
  EXPECT_EQ(ref::f32_to_bf16_bits(from_bits(0x7F7F0000)), 0x7F7F);  // bf16 max
  EXPECT_EQ(ref::f32_to_bf16_bits(FLT_MAX), 0x7F80);                // rounds up to inf
  EXPECT_EQ(ref::f32_to_bf16_bits(INFINITY), 0x7F80);
  EXPECT_EQ(ref::f32_to_bf16_bits(-INFINITY), 0xFF80);
  EXPECT_EQ(ref::f32_to_bf16_bits(-0.0f), 0x8000);
  EXPECT_EQ(ref::f32_to_bf16_bits(from_bits(0x00018000)), 0x0002);  // float subnormal, tie -> even
  const uint16_t nan = ref::f32_to_bf16_bits(NAN);
  EXPECT_EQ(nan & 0x7F80, 0x7F80);
  EXPECT_NE(nan & 0x007F, 0);
  EXPECT_TRUE(std::isnan(ref::bf16_bits_to_f32(nan)));
  EXPECT_TRUE(std::isnan(ref::round_to_bf16(from_bits(0x7F800001))));  // signalling NaN stays NaN
  EXPECT_EQ(ref::bf16_bits_to_f32(0x3F81), 1.0f + 1.0f / 128);
}

TEST(RefRound, F16KnownPatterns) {
  EXPECT_EQ(ref::f32_to_f16_bits(1.0f), 0x3C00);
  EXPECT_EQ(ref::f32_to_f16_bits(0.5f), 0x3800);
  EXPECT_EQ(ref::f32_to_f16_bits(-2.0f), 0xC000);
  EXPECT_EQ(ref::f32_to_f16_bits(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // tie -> even (down)
  EXPECT_EQ(ref::f32_to_f16_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie -> even (up)
  EXPECT_EQ(ref::f32_to_f16_bits(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3C01);
  EXPECT_EQ(ref::f32_to_f16_bits(65504.0f), 0x7BFF);  // max
  EXPECT_EQ(ref::f32_to_f16_bits(65519.0f), 0x7BFF);
  EXPECT_EQ(ref::f32_to_f16_bits(65520.0f), 0x7C00);  // tie above max -> inf
  EXPECT_EQ(ref::f32_to_f16_bits(1e6f), 0x7C00);
  EXPECT_EQ(ref::f32_to_f16_bits(-1e6f), 0xFC00);
  EXPECT_EQ(ref::f32_to_f16_bits(-0.0f), 0x8000);
  // Subnormals (units of 2^-24).
  EXPECT_EQ(ref::f32_to_f16_bits(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(ref::f32_to_f16_bits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(ref::f32_to_f16_bits(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even (zero)
  EXPECT_EQ(ref::f32_to_f16_bits(-std::ldexp(1.0f, -25)), 0x8000);
  EXPECT_EQ(ref::f32_to_f16_bits(std::ldexp(3.0f, -26)), 0x0001);     // 0.75 ulp
  EXPECT_EQ(ref::f32_to_f16_bits(std::ldexp(3.0f, -25)), 0x0002);     // 1.5 -> 2
  EXPECT_EQ(ref::f32_to_f16_bits(std::ldexp(5.0f, -25)), 0x0002);     // 2.5 -> 2
  EXPECT_EQ(ref::f32_to_f16_bits(std::ldexp(1023.0f, -24)), 0x03FF);  // largest subnormal
  EXPECT_EQ(ref::f32_to_f16_bits(std::ldexp(2047.0f, -25)), 0x0400);  // 1023.5 -> 1024 = normal
  EXPECT_EQ(ref::f32_to_f16_bits(1e-10f), 0x0000);
  EXPECT_EQ(ref::f16_bits_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(ref::f16_bits_to_f32(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(ref::f16_bits_to_f32(0x7BFF), 65504.0f);
  EXPECT_EQ(ref::f16_bits_to_f32(0xFC00), -INFINITY);
  EXPECT_TRUE(std::signbit(ref::f16_bits_to_f32(0x8000)));
  const uint16_t nan = ref::f32_to_f16_bits(-NAN);
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
  EXPECT_TRUE(std::isnan(ref::f16_bits_to_f32(nan)));
}

TEST(RefRound, MatchesCudaHostConversionsBitExactly) {
  auto rng = weft::test::Rng::for_current_test();
  std::vector<float> xs;
  for (int n = 0; n < 100000; ++n) {
    // Half the values span the f16 range and its subnormals densely; half are arbitrary bits.
    if (n % 2 == 0) {
      xs.push_back(static_cast<float>(rng.uniform(-1, 1) * std::ldexp(1.0, static_cast<int>(rng.randint(-27, 17)))));
    } else {
      const float x = from_bits(static_cast<uint32_t>(rng.engine()()));
      if (!std::isnan(x)) xs.push_back(x);
    }
  }
  // Exact ties too: representable values plus half an ulp.
  for (int n = 0; n < 2000; ++n) {
    const uint32_t exp = static_cast<uint32_t>(rng.randint(100, 140)) << 23;  // f16 subnormals to 2^13
    xs.push_back(from_bits(exp | (static_cast<uint32_t>(rng.randint(0, 1023)) << 13) | 0x1000u));  // f16 tie
    xs.push_back(from_bits(exp | (static_cast<uint32_t>(rng.randint(0, 127)) << 16) | 0x8000u));   // bf16 tie
  }
  const auto f16 = weft::test::to_half_bits(DType::kFloat16, xs);
  const auto bf16 = weft::test::to_half_bits(DType::kBFloat16, xs);
  int64_t bad16 = 0, badb = 0;
  for (std::size_t n = 0; n < xs.size(); ++n) {
    if (ref::f32_to_f16_bits(xs[n]) != f16[n] && ++bad16 < 5) ADD_FAILURE() << "f16 " << xs[n];
    if (ref::f32_to_bf16_bits(xs[n]) != bf16[n] && ++badb < 5) ADD_FAILURE() << "bf16 " << xs[n];
  }
  EXPECT_EQ(bad16, 0);
  EXPECT_EQ(badb, 0);
}

TEST(RefRound, RoundValueDispatch) {
  // 2^-30 is below float's half ulp at 1; 2^-12 below f16's (2^-11) and bf16's (2^-8).
  const double x = 1.0 + std::ldexp(1.0, -12) + std::ldexp(1.0, -30);
  EXPECT_EQ(ref::round_value(ref::Rounding::kNone, x), x);
  EXPECT_EQ(ref::round_value(ref::Rounding::kFloat32, x), 1.0 + std::ldexp(1.0, -12));
  EXPECT_EQ(ref::round_value(ref::Rounding::kFloat16, x), 1.0);
  EXPECT_EQ(ref::round_value(ref::Rounding::kBFloat16, x), 1.0);
  EXPECT_EQ(ref::rounding_of(DType::kBFloat16), ref::Rounding::kBFloat16);
  EXPECT_EQ(ref::rounding_of(DType::kFloat16), ref::Rounding::kFloat16);
}

}  // namespace
