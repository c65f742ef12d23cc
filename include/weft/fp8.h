// fp8 KV cache: element formats, quantization and scale calibration on the host. Host-only header.
//
// An fp8 page pool (DType::kFloat8E4M3 or kFloat8E5M2, see paged_kv.h) stores x8 = fp8(x / s)
// and means x = s * x8, with one float scale s per KV head (or one per tensor), separate for K
// and V (PagedKVCache::k_scale / v_scale). Quantization rounds to nearest, ties to even, and
// SATURATES: a finite x never becomes NaN or inf (|x / s| above the format's largest finite
// value stores that value, with x's sign). These functions are the host definition of that
// rounding: append_paged_kv's kernel produces the same bits (tests/gpu/paged/append_fp8_test.cpp).
//
//   format   exponent/mantissa bits   largest finite   smallest subnormal
//   e4m3     4 / 3 (bias 7, no inf)   448              2^-9
//   e5m2     5 / 2 (bias 15)          57344            2^-16
#pragma once
#include <cstdint>
#include <vector>

#include "weft/dtype.h"
#include "weft/export.h"
#include "weft/tensor.h"

namespace weft WEFT_API {

// True for kFloat8E4M3 and kFloat8E5M2.
bool is_fp8(DType t);
// Largest finite value of an fp8 format (448 or 57344); weft::Error("dtype") for other types.
float fp8_max(DType format);
// Round-to-nearest-even, saturating float -> fp8 bits. NaN stays NaN (0x7F / 0x7E with x's sign).
uint8_t fp8_from_float(float x, DType format);
// fp8 bits -> float (exact). e4m3 0x7F / 0xFF and e5m2 exponent 31 decode to NaN / inf.
float fp8_to_float(uint8_t bits, DType format);

// Scale calibration from a sample of K (or V) rows: scale[h] = amax[h] / fp8_max(format), where
// amax[h] is the largest |x| of head h over the sample (a head whose sample is all zeros gets
// 1.0, so its scale stays a positive finite number). With per_head == false one scale for the
// whole tensor (the maximum over all heads) is returned. The result is what
// PagedKVCache::k_scale / v_scale expect (copy it to the device).
//   sample: HOST memory (Device::kCPU), [tokens, num_kv_heads, head_dim], f16, bf16 or f32,
//           inner stride 1 (other strides free). Throws weft::Error naming "sample" or "format".
std::vector<float> calibrate_kv_scales(const TensorView& sample, DType format, bool per_head = true);

}  // namespace weft
