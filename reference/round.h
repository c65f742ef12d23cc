// Host-side rounding to the 16-bit storage types, written with bit manipulation (no CUDA headers),
// so the references can emulate what a kernel computing in f16/bf16 sees.
//
//   bf16: 1 sign, 8 exponent, 7 mantissa bits (the top half of an IEEE float32).
//   f16:  1 sign, 5 exponent (bias 15), 10 mantissa bits; subnormals down to 2^-24; max 65504.
// All conversions round to nearest, ties to even (what __float2half_rn / __float2bfloat16_rn do).
// Overflow goes to +-inf; NaN stays NaN (quiet, sign kept); -0 stays -0.
#pragma once
#include <cstdint>

#include "weft/dtype.h"

namespace weft::ref {

uint16_t f32_to_bf16_bits(float x);
float bf16_bits_to_f32(uint16_t bits);
uint16_t f32_to_f16_bits(float x);
float f16_bits_to_f32(uint16_t bits);

inline float round_to_bf16(float x) { return bf16_bits_to_f32(f32_to_bf16_bits(x)); }
inline float round_to_f16(float x) { return f16_bits_to_f32(f32_to_f16_bits(x)); }

// What a value is rounded to before it is stored / used. kNone keeps full (double) precision.
enum class Rounding : int32_t { kNone = 0, kFloat32 = 1, kFloat16 = 2, kBFloat16 = 3 };

// kFloat16 -> Rounding::kFloat16, kBFloat16 -> kBFloat16, kFloat32 -> kFloat32; others: kNone.
Rounding rounding_of(DType dtype);

// Rounds a double: kNone returns x; kFloat32 returns (float)x; kFloat16 / kBFloat16 round x to
// float first, then to the 16-bit type (what a GPU does when it stores an fp32 result).
double round_value(Rounding r, double x);
inline float round_float(Rounding r, float x) { return static_cast<float>(round_value(r, x)); }

}  // namespace weft::ref
