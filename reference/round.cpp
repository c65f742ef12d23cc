// Bit-exact float32 -> f16 / bf16 rounding (round to nearest, ties to even) without CUDA headers.
#include "reference/round.h"

#include <cmath>
#include <cstring>

namespace weft::ref {
namespace {

uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// Rounds `value >> shift` to nearest, ties to even (shift >= 1).
uint32_t shift_round_even(uint32_t value, int shift) {
  const uint32_t q = value >> shift;
  const uint32_t rem = value & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  return (rem > half || (rem == half && (q & 1u))) ? q + 1u : q;
}

}  // namespace

uint16_t f32_to_bf16_bits(float x) {
  const uint32_t u = bits_of(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) {  // NaN: keep sign and top payload, force quiet bit
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  }
  // bf16 is the top half of the float; round the low 16 bits away. A carry out of the mantissa
  // bumps the exponent (and the largest finite values round up to inf), as IEEE requires.
  return static_cast<uint16_t>(shift_round_even(u, 16));
}

float bf16_bits_to_f32(uint16_t bits) { return float_of(static_cast<uint32_t>(bits) << 16); }

uint16_t f32_to_f16_bits(float x) {
  const uint32_t u = bits_of(x);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t ax = u & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) {  // NaN: quiet, keep the top payload bits
    return static_cast<uint16_t>(sign | 0x7E00u | ((ax >> 13) & 0x3FFu));
  }
  const int32_t e_f = static_cast<int32_t>(ax >> 23);  // biased float exponent
  const int32_t e_h = e_f - 127 + 15;                   // biased half exponent
  if (e_h >= 31) return static_cast<uint16_t>(sign | 0x7C00u);  // overflow or inf
  const uint32_t mant = ax & 0x7FFFFFu;
  if (e_h >= 1) {
    // Normal: 10 mantissa bits kept, 13 rounded away; a carry propagates into the exponent
    // (and from 65504 + half ulp into inf: 0x7BFF + 1 = 0x7C00).
    const uint32_t h = (static_cast<uint32_t>(e_h) << 10) | (mant >> 13);
    const uint32_t rem = mant & 0x1FFFu;
    const bool up = rem > 0x1000u || (rem == 0x1000u && (h & 1u));
    return static_cast<uint16_t>(sign | (h + (up ? 1u : 0u)));
  }
  // Subnormal half (or zero): result in units of 2^-24. value = full * 2^(e_f - 150) with the
  // implicit bit; shift = 126 - e_f >= 14 bits are rounded away. A float subnormal (e_f == 0)
  // is far below 2^-25 and goes to zero.
  if (e_f == 0) return static_cast<uint16_t>(sign);
  const int shift = 126 - e_f;
  if (shift > 25) return static_cast<uint16_t>(sign);  // < 2^-25: rounds to (signed) zero
  const uint32_t full = mant | 0x800000u;
  // May give 0x400, the smallest normal: that encoding is correct as is.
  return static_cast<uint16_t>(sign | shift_round_even(full, shift));
}

float f16_bits_to_f32(uint16_t bits) {
  const uint32_t sign = (static_cast<uint32_t>(bits) & 0x8000u) << 16;
  const uint32_t e = (bits >> 10) & 0x1Fu;
  const uint32_t m = bits & 0x3FFu;
  if (e == 0) {
    const float mag = std::ldexp(static_cast<float>(m), -24);  // exact (subnormal or zero)
    return sign ? -mag : mag;
  }
  if (e == 31) return float_of(sign | 0x7F800000u | (m << 13));  // inf / NaN (payload kept)
  return float_of(sign | ((e + 112u) << 23) | (m << 13));
}

Rounding rounding_of(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return Rounding::kFloat16;
    case DType::kBFloat16: return Rounding::kBFloat16;
    case DType::kFloat32: return Rounding::kFloat32;
    default: return Rounding::kNone;
  }
}

double round_value(Rounding r, double x) {
  switch (r) {
    case Rounding::kFloat32: return static_cast<float>(x);
    case Rounding::kFloat16: return round_to_f16(static_cast<float>(x));
    case Rounding::kBFloat16: return round_to_bf16(static_cast<float>(x));
    case Rounding::kNone: break;
  }
  return x;
}

}  // namespace weft::ref
