// fp8 element formats on the host (weft/fp8.h): saturating round-to-nearest-even quantization,
// decoding, and scale calibration from a sample. The device side (append's quantizer, decode's
// dequantization) must produce the same values; tests compare both against these.
#include "weft/fp8.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>

#include "weft/error.h"
#include "weft/validate.h"

namespace weft {
namespace {

// Format parameters: exponent bits, mantissa bits, bias.
struct Fp8Format {
  int exp_bits, man_bits, bias;
  float max_finite;
};

Fp8Format format_of(DType t, const char* name) {
  switch (t) {
    case DType::kFloat8E4M3: return {4, 3, 7, 448.f};
    case DType::kFloat8E5M2: return {5, 2, 15, 57344.f};
    default: break;
  }
  throw Error(name, std::string("expected fp8_e4m3 or fp8_e5m2, got ") + dtype_name(t));
}

float half_bits_to_float(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const float sign = (h & 0x8000) ? -1.f : 1.f;
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), -24);
  if (e == 31) return m ? NAN : sign * INFINITY;
  return sign * std::ldexp(static_cast<float>(m | 0x400), e - 25);
}

float bf16_bits_to_float(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

bool is_fp8(DType t) { return t == DType::kFloat8E4M3 || t == DType::kFloat8E5M2; }

float fp8_max(DType format) { return format_of(format, "dtype").max_finite; }

uint8_t fp8_from_float(float x, DType format) {
  const Fp8Format f = format_of(format, "format");
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | (f.exp_bits == 4 ? 0x7F : 0x7E);
  const double a = std::fabs(static_cast<double>(x));
  // max_finite: e4m3 S.1111.110 (S.1111.111 is NaN), e5m2 S.11110.11 (exponent 31 is inf / NaN).
  const uint8_t max_code = f.exp_bits == 4 ? 0x7E : 0x7B;
  if (a >= f.max_finite) return sign | max_code;               // saturate (also +-inf)
  // Grid spacing at a: 2^(e - man_bits) in the normal range, 2^(1 - bias - man_bits) below it.
  const int min_exp = 1 - f.bias;
  int e = min_exp;
  if (a > 0) {
    int fe;
    std::frexp(a, &fe);  // a = m * 2^fe, m in [0.5, 1): floor(log2 a) = fe - 1
    e = std::max(fe - 1, min_exp);
  }
  const double quantum = std::ldexp(1.0, e - f.man_bits);
  const double n = std::nearbyint(a / quantum);  // default rounding mode: ties to even
  const double v = n * quantum;                  // on the grid, <= max_finite (a < max_finite)
  if (v == 0) return sign;
  // Encode v (it may have carried into the next binade).
  int fe;
  std::frexp(v, &fe);
  const int ev = fe - 1;
  if (ev < min_exp) {  // subnormal: exponent field 0
    return sign | static_cast<uint8_t>(std::lround(v / std::ldexp(1.0, min_exp - f.man_bits)));
  }
  const int man = static_cast<int>(std::lround(std::ldexp(v, f.man_bits - ev))) - (1 << f.man_bits);
  return sign | static_cast<uint8_t>(((ev + f.bias) << f.man_bits) | man);
}

float fp8_to_float(uint8_t bits, DType format) {
  const Fp8Format f = format_of(format, "format");
  const float sign = (bits & 0x80) ? -1.f : 1.f;
  const int field = (bits & 0x7F) >> f.man_bits;
  const int man = bits & ((1 << f.man_bits) - 1);
  const int max_field = (1 << f.exp_bits) - 1;
  if (f.exp_bits == 4 && field == max_field && man == (1 << f.man_bits) - 1) return NAN;  // e4m3: S.1111.111
  if (f.exp_bits == 5 && field == max_field) return man ? NAN : sign * INFINITY;
  if (field == 0) return sign * std::ldexp(static_cast<float>(man), 1 - f.bias - f.man_bits);
  return sign * std::ldexp(static_cast<float>(man + (1 << f.man_bits)), field - f.bias - f.man_bits);
}

std::vector<float> calibrate_kv_scales(const TensorView& sample, DType format, bool per_head) {
  const float fmax = format_of(format, "format").max_finite;
  check::on_device(sample, "sample", Device::kCPU);
  check::ndim_is(sample, "sample", 3);
  check::dtype_in(sample, "sample", {DType::kFloat16, DType::kBFloat16, DType::kFloat32});
  WEFT_CHECK_ARG(sample.stride(2) == 1 || sample.size(2) <= 1, "sample",
                 "inner stride must be 1, got " << sample.stride(2));
  const int64_t tokens = sample.size(0), heads = sample.size(1), dim = sample.size(2);
  WEFT_CHECK_ARG(heads >= 1, "sample", "needs at least one KV head, got " << sample.describe());
  std::vector<float> amax(static_cast<size_t>(heads), 0.f);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t base = t * sample.stride(0) + h * sample.stride(1);
      for (int64_t d = 0; d < dim; ++d) {
        float x;
        switch (sample.dtype) {
          case DType::kFloat32: x = sample.ptr<const float>()[base + d]; break;
          case DType::kFloat16: x = half_bits_to_float(sample.ptr<const uint16_t>()[base + d]); break;
          default: x = bf16_bits_to_float(sample.ptr<const uint16_t>()[base + d]); break;
        }
        WEFT_CHECK_ARG(std::isfinite(x), "sample",
                       "non-finite value " << x << " at token " << t << ", head " << h << ", dim " << d);
        amax[h] = std::max(amax[h], std::fabs(x));
      }
    }
  if (!per_head) {
    float m = 0.f;
    for (float a : amax) m = std::max(m, a);
    amax.assign(1, m);
  }
  std::vector<float> scale(amax.size());
  for (size_t h = 0; h < amax.size(); ++h) scale[h] = amax[h] > 0.f ? std::max(amax[h] / fmax, FLT_MIN) : 1.f;  // never 0
  return scale;
}

}  // namespace weft
