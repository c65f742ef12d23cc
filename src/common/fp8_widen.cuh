// Device side of common/fp8_bits.h: fp8 codes -> exact 16-bit values in registers, shared by the
// decode kernels (decode_tc.cuh fragments, decode_common.cuh dequant_tile) and the prefill kernel
// (prefill/kernel/widen.cuh).
#pragma once
#include "common/rtc_compat.h"

#include <cuda/std/type_traits>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "common/fp8_bits.h"

namespace weft::fp8bits {

template <class T, class KV>
__host__ __device__ constexpr Widen widen_consts() {
  return widen_of(cuda::std::is_same<KV, __nv_fp8_e5m2>::value, cuda::std::is_same<T, __nv_bfloat16>::value);
}

// The power-of-two multiply that ends a widening (none for e5m2 -> f16).
template <class T, class KV>
__device__ __forceinline__ uint32_t widen_scale(uint32_t o) {
  constexpr Widen c = widen_consts<T, KV>();
  if constexpr (c.mul_log2 != 0) {
    if constexpr (cuda::std::is_same<T, __nv_bfloat16>::value)
      asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(o) : "r"(o), "r"(c.mul_bits), "r"(0x80008000u));
    else
      asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(o) : "r"(o), "r"(c.mul_bits));
  }
  return o;
}

// Two fp8 codes spread as (code << 8) in the halves of a word (a __byte_perm of the loaded bytes)
// -> the two T values, exact: bit moves, then one f16x2 / bf16x2 multiply by a power of two
// (values stay in range, subnormal inputs included: f16 / bf16 arithmetic keeps subnormals;
// + (-0) keeps -0 and +0 as they are).
template <class T, class KV>
__device__ __forceinline__ uint32_t widen_fp8_pair(uint32_t spread) {
  return widen_scale<T, KV>(widen_pair(spread, widen_consts<T, KV>()));
}

// Codes 2 kHi, 2 kHi + 1 of a word -> the two T values through the sign-extended form
// (fp8_bits.h widen_pair_sext): one prmt whose selector nibbles 8 + i replicate byte i's sign
// over the high byte of each half, a shift and an AND, then the multiply: 4 instructions per pair
// where widen_fp8_pair(__byte_perm) takes 5 (prmt, shift, two ANDs, multiply). Same bits.
template <class T, class KV, int kHi>
__device__ __forceinline__ uint32_t widen_fp8_word_pair(uint32_t w) {
  constexpr Widen c = widen_consts<T, KV>();
  if constexpr (c.shift == 0) {
    return widen_fp8_pair<T, KV>(__byte_perm(w, 0u, kHi ? 0x3424 : 0x1404));
  } else {
    uint32_t sx;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(sx) : "r"(w), "r"(0u), "r"(kHi ? 0xb3a2u : 0x9180u));
    return widen_scale<T, KV>(widen_pair_sext(sx, c));
  }
}

// 16 fp8 codes -> 16 T values (lo: elements 0..7, hi: 8..15).
template <class T, class KV>
__device__ __forceinline__ void widen16(const uint4& v, uint4& lo, uint4& hi) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  uint32_t o[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    o[2 * i] = widen_fp8_pair<T, KV>(__byte_perm(w[i], 0u, 0x1404));      // codes 0, 1 of the word
    o[2 * i + 1] = widen_fp8_pair<T, KV>(__byte_perm(w[i], 0u, 0x3424));  // codes 2, 3
  }
  lo = make_uint4(o[0], o[1], o[2], o[3]);
  hi = make_uint4(o[4], o[5], o[6], o[7]);
}

}  // namespace weft::fp8bits
