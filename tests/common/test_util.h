// Shared test helpers (host side): seeded random data that is never all zeros, low-precision
// rounding on the host, and the one comparison helper every kernel test uses.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "weft/dtype.h"
#include "weft/error.h"

namespace weft::test {

// Deterministic per-test generator. Seed comes from the test name unless WEFT_TEST_SEED is set,
// so a failure reproduces and distinct tests see distinct data.
class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  static Rng for_current_test(uint64_t salt = 0);
  uint64_t seed_used() const { return seed_; }
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(gen_); }
  int64_t randint(int64_t lo, int64_t hi) {  // inclusive
    return std::uniform_int_distribution<int64_t>(lo, hi)(gen_);
  }
  // n values uniform in [lo, hi); re-drawn if all came out zero.
  std::vector<float> uniform_vec(std::size_t n, double lo = -1.0, double hi = 1.0);
  std::mt19937_64& engine() { return gen_; }

 private:
  std::mt19937_64 gen_;
  uint64_t seed_ = 0;
  friend Rng make_rng(uint64_t);
};

// Round-trip through a storage dtype on the host (what the GPU will see): f16, bf16 or f32.
float round_to(DType dtype, float x);
void round_inplace(DType dtype, std::vector<float>& v);
// Pack floats (already representable) into raw 16-bit storage and back.
std::vector<uint16_t> to_half_bits(DType dtype, const std::vector<float>& v);
std::vector<float> from_half_bits(DType dtype, const std::vector<uint16_t>& bits);

// Result of comparing a kernel's output with a float64 reference.
struct Comparison {
  double rel_l2 = 0;     // ||a - r|| / ||r||  (||r|| == 0: absolute L2)
  double max_abs = 0;    // max |a - r| over finite pairs
  int64_t max_index = -1;
  int64_t nan_count = 0;     // NaN or Inf in `actual` where reference is finite
  int64_t mismatched_inf = 0;  // reference is ±inf and actual differs
  std::string summary() const;
};
Comparison compare(const std::vector<float>& actual, const std::vector<double>& reference);

// Tolerance for a kernel computing in `dtype` (inputs and P rounded to it, fp32 accumulate):
// `baseline_rel_l2` is the error of that same computation emulated on the host (see
// ref::emulate_low_precision in reference/attention.h); a kernel may be at most `factor` times
// worse, plus a floor for references whose own error is ~0.
struct Tolerance {
  double rel_l2;
  double max_abs;
};
Tolerance tolerance_from_baseline(const Comparison& baseline, double factor = 4.0,
                                  double floor_rel = 1e-5, double floor_abs = 1e-4);
// gtest assertion helper: ASSERT_TRUE(within(cmp, tol)) << cmp.summary();
bool within(const Comparison& cmp, const Tolerance& tol);

// Validation tests: a fake, 1 MiB-aligned device address `mib` MiB in (never dereferenced: every
// call that gets it is rejected or empty), and a pointer `bytes` further.
inline void* fake_device_ptr(uintptr_t mib) { return reinterpret_cast<void*>(mib << 20); }
inline void* byte_offset(void* p, int64_t bytes) { return static_cast<char*>(p) + bytes; }

// The argument() of the weft::Error that f() throws, or "<no throw>". Negative tests compare
// it with the name the caller knows the argument by.
template <class F>
std::string thrown_argument(F&& f) {
  try {
    f();
  } catch (const weft::Error& e) {
    return e.argument();
  }
  return "<no throw>";
}

}  // namespace weft::test
