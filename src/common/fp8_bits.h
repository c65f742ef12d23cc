// Internal (host + device): fp8 -> 16-bit float bit patterns, the dequantization step of the
// decode kernels (decode_common.cuh dequant_tile). Plain integer code, so a host test checks it
// for every fp8 code (tests/host/core/fp8_test.cpp).
//
// Why bit moves and not cvt: on sm_90 only e4m3/e5m2 -> f16x2 has a conversion instruction, and
// bf16 would take 4 conversions per pair (fp8x2 -> f16x2 -> 2 x f32 -> bf16x2) on the
// quarter-rate conversion pipe: 2 per element, more than the decode loop's whole budget at
// fp8 bandwidth. An fp8 value's exponent and mantissa bits placed at the top of a 16-bit
// float's exponent / mantissa fields (sign kept) give the same value times a power of two
// 2^-(bias_16 - bias_8), subnormals included (both are "0.m x 2^(1 - bias)" with the same m),
// and one exact f16x2 / bf16x2 multiply by 2^(bias_16 - bias_8) restores it:
//   e4m3 -> bf16: bits 14..8 >> 4, x 2^120     e5m2 -> bf16: >> 3, x 2^112
//   e4m3 -> f16:  bits 14..8 >> 1, x 2^8       e5m2 -> f16:  >> 0, no multiply (f16's top byte)
// Every finite fp8 value is exactly representable in both 16-bit formats. (e4m3's NaN codes
// S.1111.111 become the finite 480; weft's quantizer never writes them.)
#pragma once
#include "common/rtc_compat.h"  // fixed-width integers (CCCL's under NVRTC)

#if defined(__CUDACC__)
#define WEFT_FP8_HD __host__ __device__ __forceinline__
#else
#define WEFT_FP8_HD inline
#endif

namespace weft::fp8bits {

struct Widen {
  uint32_t shift;     // right shift of each 16-bit half holding (code << 8)
  uint32_t mask;      // keeps the moved exponent + mantissa bits of both halves
  uint32_t mul_bits;  // the 16-bit multiplier 2^mul_log2, replicated in both halves (0: none)
  int mul_log2;
};

// is_e5m2: the fp8 format; to_bf16: the 16-bit target (else f16).
constexpr Widen widen_of(bool is_e5m2, bool to_bf16) {
  if (to_bf16) return is_e5m2 ? Widen{3, 0x0fe00fe0u, 0x77807780u, 112} : Widen{4, 0x07f007f0u, 0x7b807b80u, 120};
  return is_e5m2 ? Widen{0, 0x7f007f00u, 0u, 0} : Widen{1, 0x3f803f80u, 0x5c005c00u, 8};
}

// Four fp8 codes (byte i = element i) -> codes 0, 1 (lo) and 2, 3 (hi) as (code << 8) in the
// two 16-bit halves of a word (element 0 / 2 in the low half).
WEFT_FP8_HD uint32_t spread_lo(uint32_t w) { return ((w & 0xffu) << 8) | ((w & 0xff00u) << 16); }
WEFT_FP8_HD uint32_t spread_hi(uint32_t w) { return ((w >> 8) & 0xff00u) | (w & 0xff000000u); }

// Two spread codes -> two 16-bit patterns whose values are the fp8 values x 2^-mul_log2.
WEFT_FP8_HD uint32_t widen_pair(uint32_t spread, Widen c) {
  return ((spread >> c.shift) & c.mask) | (spread & 0x80008000u);
}

// The same patterns from the sign-extended form (the sm90 prefill widening, sm90_fp8.cuh): two
// codes as int16(int8(code)) in the halves of a word (one prmt with sign replication of the loaded
// bytes, modelled by sext_lo / sext_hi) -> (sx << (8 - shift)) & (mask | sign): the left shift
// puts the exponent + mantissa bits where widen_pair's right shift does and a replicated sign bit
// at bit 15 of each half; the low half's sign copies that the 32-bit shift moves into the high
// half (and the copies at bits 11.. of each half) fall outside the mask. One shift + one AND per
// pair where widen_pair takes a shift + two ANDs. shift 0 (e5m2 -> f16) is the spread itself.
WEFT_FP8_HD uint32_t sext_byte(uint32_t b) { return (b & 0x80u) ? (b | 0xff00u) : b; }
WEFT_FP8_HD uint32_t sext_lo(uint32_t w) { return sext_byte(w & 0xffu) | (sext_byte((w >> 8) & 0xffu) << 16); }
WEFT_FP8_HD uint32_t sext_hi(uint32_t w) { return sext_byte((w >> 16) & 0xffu) | (sext_byte(w >> 24) << 16); }
WEFT_FP8_HD uint32_t widen_pair_sext(uint32_t sx, Widen c) { return (sx << (8 - c.shift)) & (c.mask | 0x80008000u); }

}  // namespace weft::fp8bits
