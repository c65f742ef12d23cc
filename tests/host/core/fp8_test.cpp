// fp8 formats on the host (weft/fp8.h) and the decode kernels' fp8 -> 16-bit widening
// (common/fp8_bits.h): exhaustive over the 256 codes of each format, the quantizer against
// CUDA's own host implementation (cuda_fp8.h) on a sweep of floats, and scale calibration.
#include <gtest/gtest.h>

#include <cuda_fp8.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "common/fp8_bits.h"
#include "common/test_util.h"
#include "reference/round.h"
#include "weft/fp8.h"

namespace {

using weft::DType;

constexpr DType kFormats[] = {DType::kFloat8E4M3, DType::kFloat8E5M2};

bool is_nan_code(uint8_t c, DType f) {
  return f == DType::kFloat8E4M3 ? (c & 0x7f) == 0x7f : (c & 0x7f) > 0x7c;
}
bool is_inf_code(uint8_t c, DType f) { return f == DType::kFloat8E5M2 && (c & 0x7f) == 0x7c; }

float cuda_host_round(float x, DType f) {
  const __nv_fp8_storage_t s =
      __nv_cvt_float_to_fp8(x, __NV_SATFINITE, f == DType::kFloat8E4M3 ? __NV_E4M3 : __NV_E5M2);
  return weft::fp8_to_float(static_cast<uint8_t>(s), f);
}

TEST(Fp8Host, EveryFiniteCodeRoundTrips) {
  for (DType f : kFormats)
    for (int c = 0; c < 256; ++c) {
      const uint8_t code = static_cast<uint8_t>(c);
      const float x = weft::fp8_to_float(code, f);
      if (is_nan_code(code, f)) {
        EXPECT_TRUE(std::isnan(x)) << c;
        continue;
      }
      if (is_inf_code(code, f)) {
        EXPECT_TRUE(std::isinf(x)) << c;
        continue;
      }
      EXPECT_EQ(weft::fp8_from_float(x, f), code) << weft::dtype_name(f) << " code " << c << " value " << x;
      EXPECT_LE(std::fabs(x), weft::fp8_max(f));
    }
  EXPECT_EQ(weft::fp8_to_float(0x7e, DType::kFloat8E4M3), 448.f);
  EXPECT_EQ(weft::fp8_to_float(0x7b, DType::kFloat8E5M2), 57344.f);
  EXPECT_EQ(weft::fp8_to_float(0x01, DType::kFloat8E4M3), std::ldexp(1.f, -9));
  EXPECT_EQ(weft::fp8_to_float(0x01, DType::kFloat8E5M2), std::ldexp(1.f, -16));
}

TEST(Fp8Host, SaturatesAndRoundsToNearestEven) {
  for (DType f : kFormats) {
    const float m = weft::fp8_max(f);
    for (float x : {m * 1.01f, m * 2.f, 1e30f, INFINITY}) {
      EXPECT_EQ(weft::fp8_to_float(weft::fp8_from_float(x, f), f), m) << x;
      EXPECT_EQ(weft::fp8_to_float(weft::fp8_from_float(-x, f), f), -m) << x;
    }
    EXPECT_TRUE(std::isnan(weft::fp8_to_float(weft::fp8_from_float(NAN, f), f)));
    EXPECT_EQ(weft::fp8_from_float(0.f, f), 0);
    EXPECT_EQ(weft::fp8_from_float(-0.f, f), 0x80);
  }
  // e4m3 around 1: grid 1/8. 1 + 1/16 ties to 1 (even), 1 + 3/16 ties to 1.25.
  EXPECT_EQ(weft::fp8_to_float(weft::fp8_from_float(1.0625f, DType::kFloat8E4M3), DType::kFloat8E4M3), 1.f);
  EXPECT_EQ(weft::fp8_to_float(weft::fp8_from_float(1.1875f, DType::kFloat8E4M3), DType::kFloat8E4M3), 1.25f);
  // Below half the smallest subnormal: 0; just above: the smallest subnormal.
  EXPECT_EQ(weft::fp8_from_float(std::ldexp(1.f, -11), DType::kFloat8E4M3), 0);
  EXPECT_EQ(weft::fp8_from_float(std::ldexp(1.1f, -10), DType::kFloat8E4M3), 1);
}

// weft's quantizer is the host definition of append's device rounding; cuda_fp8.h's host path
// implements the same cvt.rn.satfinite. They must agree bit for bit.
TEST(Fp8Host, MatchesCudaHostConversion) {
  weft::test::Rng rng(7);
  for (DType f : kFormats) {
    std::vector<float> xs;
    for (int c = 0; c < 256; ++c) {  // every code, its midpoints and neighbours
      const float v = weft::fp8_to_float(static_cast<uint8_t>(c), f);
      if (!std::isfinite(v)) continue;
      xs.push_back(v);
      xs.push_back(std::nextafter(v, INFINITY));
      xs.push_back(std::nextafter(v, -INFINITY));
      const float w = weft::fp8_to_float(static_cast<uint8_t>(c + 1), f);
      if (std::isfinite(w) && c != 0x7f) {
        const float mid = 0.5f * (v + w);
        xs.insert(xs.end(), {mid, std::nextafter(mid, INFINITY), std::nextafter(mid, -INFINITY)});
      }
    }
    for (int i = 0; i < 200000; ++i) {
      const float e = static_cast<float>(rng.uniform(-24, 20));
      xs.push_back(static_cast<float>(rng.uniform(-1, 1)) * std::exp2(e));
    }
    xs.insert(xs.end(), {1e30f, -1e30f, INFINITY, -INFINITY, 0.f, -0.f});
    for (float x : xs) {
      const float a = weft::fp8_to_float(weft::fp8_from_float(x, f), f);
      const float b = cuda_host_round(x, f);
      ASSERT_TRUE(a == b && std::signbit(a) == std::signbit(b))
          << weft::dtype_name(f) << " x " << x << ": weft " << a << " cuda " << b;
    }
  }
}

// The decode kernels' widening (bit moves + one power-of-two multiply) is exact for every
// finite code, subnormals included.
TEST(Fp8Host, WideningBitMovesAreExact) {
  for (DType f : kFormats)
    for (bool to_bf16 : {false, true}) {
      const weft::fp8bits::Widen w = weft::fp8bits::widen_of(f == DType::kFloat8E5M2, to_bf16);
      for (int c = 0; c < 256; ++c) {
        const uint8_t code = static_cast<uint8_t>(c);
        if (is_nan_code(code, f) || is_inf_code(code, f)) continue;
        const uint32_t word = uint32_t(code) | (uint32_t(code ^ 0x80) << 8) | (0x11u << 16) | (uint32_t(code) << 24);
        const uint32_t lo = weft::fp8bits::widen_pair(weft::fp8bits::spread_lo(word), w);
        const uint32_t hi = weft::fp8bits::widen_pair(weft::fp8bits::spread_hi(word), w);
        auto value = [&](uint16_t bits) {
          const float raw = to_bf16 ? weft::ref::bf16_bits_to_f32(bits) : weft::ref::f16_bits_to_f32(bits);
          return std::ldexp(raw, w.mul_log2);
        };
        const float want = weft::fp8_to_float(code, f);
        EXPECT_EQ(value(lo & 0xffff), want) << weft::dtype_name(f) << " bf16 " << to_bf16 << " code " << c;
        EXPECT_EQ(value(lo >> 16), weft::fp8_to_float(code ^ 0x80, f)) << c;
        EXPECT_EQ(value(hi & 0xffff), weft::fp8_to_float(0x11, f)) << c;
        EXPECT_EQ(value(hi >> 16), want) << c;
        // The multiplier pattern is 2^mul_log2 in the 16-bit format.
        if (w.mul_log2 != 0) {
          const uint16_t m = static_cast<uint16_t>(w.mul_bits & 0xffff);
          EXPECT_EQ(to_bf16 ? weft::ref::bf16_bits_to_f32(m) : weft::ref::f16_bits_to_f32(m), std::ldexp(1.f, w.mul_log2));
          EXPECT_EQ(w.mul_bits >> 16, w.mul_bits & 0xffff);
        }
      }
    }
}

// The sm90 prefill's sign-extended form gives widen_pair's bit patterns for every pair of codes
// (NaN / inf codes included: a bit identity), both fp8 formats, both 16-bit targets.
TEST(Fp8Host, WideningSignExtendedFormMatches) {
  for (DType f : kFormats)
    for (bool to_bf16 : {false, true}) {
      const weft::fp8bits::Widen w = weft::fp8bits::widen_of(f == DType::kFloat8E5M2, to_bf16);
      for (uint32_t a = 0; a < 256; ++a)
        for (uint32_t b = 0; b < 256; ++b) {
          const uint32_t word = a | (b << 8) | ((a ^ 0x5au) << 16) | ((b ^ 0xa5u) << 24);
          using namespace weft::fp8bits;
          ASSERT_EQ(widen_pair_sext(sext_lo(word), w), widen_pair(spread_lo(word), w))
              << weft::dtype_name(f) << " bf16 " << to_bf16 << " codes " << a << " " << b;
          ASSERT_EQ(widen_pair_sext(sext_hi(word), w), widen_pair(spread_hi(word), w))
              << weft::dtype_name(f) << " bf16 " << to_bf16 << " codes " << a << " " << b;
        }
    }
}

TEST(Fp8Host, CalibrateScales) {
  // [tokens 3, heads 2, dim 4] f32: head 0 amax 8, head 1 all zero.
  std::vector<float> x(3 * 2 * 4, 0.f);
  x[0] = -8.f;
  x[2 * 4 + 1] = 3.f;
  const weft::TensorView t(x.data(), DType::kFloat32, {3, 2, 4}, weft::Device::kCPU);
  const std::vector<float> s = weft::calibrate_kv_scales(t, DType::kFloat8E4M3);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0], 8.f / 448.f);
  EXPECT_EQ(s[1], 1.f);
  const std::vector<float> g = weft::calibrate_kv_scales(t, DType::kFloat8E5M2, /*per_head=*/false);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0], 8.f / 57344.f);
  // Quantized with its scale, the amax element lands on the format's max: no clipping.
  EXPECT_EQ(weft::fp8_to_float(weft::fp8_from_float(-8.f / s[0], DType::kFloat8E4M3), DType::kFloat8E4M3), -448.f);
  // bf16 input (bits), strided view: every other head row.
  std::vector<uint16_t> b(2 * 2 * 4, 0);
  b[4 + 2] = weft::ref::f32_to_bf16_bits(-2.f);  // token 0, head 1
  const weft::TensorView tb(b.data(), DType::kBFloat16, {2, 1, 4}, {8, 4, 1}, weft::Device::kCPU);
  EXPECT_EQ(weft::calibrate_kv_scales(tb, DType::kFloat8E4M3)[0], 1.f);  // head 0 rows only: zeros
  const weft::TensorView tb1(b.data() + 4, DType::kBFloat16, {2, 1, 4}, {8, 4, 1}, weft::Device::kCPU);
  EXPECT_EQ(weft::calibrate_kv_scales(tb1, DType::kFloat8E4M3)[0], 2.f / 448.f);
}

TEST(Fp8Host, CalibrateRejectsBadArguments) {
  std::vector<float> x(8, 1.f);
  const weft::TensorView t(x.data(), DType::kFloat32, {1, 2, 4}, weft::Device::kCPU);
  using weft::test::thrown_argument;
  EXPECT_EQ(thrown_argument([&] { weft::calibrate_kv_scales(t, DType::kBFloat16); }), "format");
  weft::TensorView dev = t;
  dev.device = weft::Device::kCUDA;
  EXPECT_EQ(thrown_argument([&] { weft::calibrate_kv_scales(dev, DType::kFloat8E4M3); }), "sample");
  const weft::TensorView flat(x.data(), DType::kFloat32, {8}, weft::Device::kCPU);
  EXPECT_EQ(thrown_argument([&] { weft::calibrate_kv_scales(flat, DType::kFloat8E4M3); }), "sample");
  x[3] = NAN;
  EXPECT_EQ(thrown_argument([&] { weft::calibrate_kv_scales(t, DType::kFloat8E4M3); }), "sample");
  EXPECT_EQ(thrown_argument([&] { weft::fp8_max(DType::kInt32); }), "dtype");
}

}  // namespace
