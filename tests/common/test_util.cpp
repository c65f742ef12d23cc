#include "common/test_util.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>

namespace weft::test {

Rng make_rng(uint64_t seed) {
  Rng r(seed);
  r.seed_ = seed;
  return r;
}

Rng Rng::for_current_test(uint64_t salt) {
  uint64_t seed = 0x5eed;
  if (const char* env = std::getenv("WEFT_TEST_SEED")) {
    seed = std::strtoull(env, nullptr, 0);
  } else if (auto* info = ::testing::UnitTest::GetInstance()->current_test_info()) {
    seed = std::hash<std::string>{}(std::string(info->test_suite_name()) + "." + info->name());
  }
  return make_rng(seed ^ (salt * 0x9e3779b97f4a7c15ULL));
}

std::vector<float> Rng::uniform_vec(std::size_t n, double lo, double hi) {
  std::vector<float> v(n);
  for (int attempt = 0; attempt < 8; ++attempt) {
    bool any_nonzero = false;
    for (auto& x : v) {
      x = static_cast<float>(uniform(lo, hi));
      any_nonzero |= (x != 0.0f);
    }
    if (any_nonzero || n == 0) return v;
  }
  v[0] = 1.0f;  // unreachable in practice; never hand back all zeros
  return v;
}

float round_to(DType dtype, float x) {
  switch (dtype) {
    case DType::kFloat16: return __half2float(__float2half_rn(x));
    case DType::kBFloat16: return __bfloat162float(__float2bfloat16_rn(x));
    default: return x;
  }
}

void round_inplace(DType dtype, std::vector<float>& v) {
  for (auto& x : v) x = round_to(dtype, x);
}

std::vector<uint16_t> to_half_bits(DType dtype, const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::kFloat16) {
      half h = __float2half_rn(v[i]);
      std::memcpy(&out[i], &h, 2);
    } else {
      __nv_bfloat16 h = __float2bfloat16_rn(v[i]);
      std::memcpy(&out[i], &h, 2);
    }
  }
  return out;
}

std::vector<float> from_half_bits(DType dtype, const std::vector<uint16_t>& bits) {
  std::vector<float> out(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) {
    if (dtype == DType::kFloat16) {
      half h;
      std::memcpy(&h, &bits[i], 2);
      out[i] = __half2float(h);
    } else {
      __nv_bfloat16 h;
      std::memcpy(&h, &bits[i], 2);
      out[i] = __bfloat162float(h);
    }
  }
  return out;
}

Comparison compare(const std::vector<float>& actual, const std::vector<double>& reference) {
  Comparison c;
  EXPECT_EQ(actual.size(), reference.size()) << "compare(): size mismatch";
  const std::size_t n = std::min(actual.size(), reference.size());
  double num = 0, den = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double a = actual[i], r = reference[i];
    if (std::isinf(r)) {
      if (a != r) ++c.mismatched_inf;
      continue;
    }
    if (!std::isfinite(a)) {
      ++c.nan_count;
      continue;
    }
    const double d = a - r;
    num += d * d;
    den += r * r;
    if (std::fabs(d) > c.max_abs) {
      c.max_abs = std::fabs(d);
      c.max_index = static_cast<int64_t>(i);
    }
  }
  c.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return c;
}

std::string Comparison::summary() const {
  std::ostringstream os;
  os << "rel_l2=" << rel_l2 << " max_abs=" << max_abs << " (at " << max_index
     << ") nan/inf=" << nan_count << " inf_mismatch=" << mismatched_inf;
  return os.str();
}

Tolerance tolerance_from_baseline(const Comparison& baseline, double factor, double floor_rel,
                                  double floor_abs) {
  return {std::max(factor * baseline.rel_l2, floor_rel), std::max(factor * baseline.max_abs, floor_abs)};
}

bool within(const Comparison& cmp, const Tolerance& tol) {
  return cmp.nan_count == 0 && cmp.mismatched_inf == 0 && cmp.rel_l2 <= tol.rel_l2 &&
         cmp.max_abs <= tol.max_abs;
}

}  // namespace weft::test
