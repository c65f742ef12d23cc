// Issue 18 (host, no GPU): the fused all-reduce + RMSNorm checks every pointer it receives
// against the 16-byte vector / TMA bulk accesses of its kernels (x, out and residual rows, the
// weight), and accepts an empty call (tokens 0, views without storage).
#include <gtest/gtest.h>

#include <cstdint>

#include "comm/comm_validate.h"
#include "common/test_util.h"

namespace weft::comm_detail {
namespace {

using weft::test::thrown_argument;

void* fake(uintptr_t mib, int bytes = 0) { return reinterpret_cast<void*>((mib << 20) + bytes); }

constexpr int64_t T = 7, H = 2048;
const DType dt = DType::kBFloat16;
const std::size_t kCap = std::size_t(T) * H * 2;

std::string call(const TensorView& x, const TensorView& r, const TensorView& w, const TensorView& o) {
  return thrown_argument([&] { check_fused_args(x, r, w, 1e-6, o, 4, AllReduceVariant::kAuto, kCap, 0); });
}

TEST(CommHardening, EveryPointerIsChecked) {
  const TensorView x(fake(1), dt, {T, H}), r(fake(2), dt, {T, H}), w(fake(3), dt, {H}), o(fake(4), dt, {T, H});
  ASSERT_EQ(call(x, r, w, o), "<no throw>");
  for (int off : {2, 8}) {
    EXPECT_EQ(call(TensorView(fake(1, off), dt, {T, H}), r, w, o), "x") << off;
    EXPECT_EQ(call(x, TensorView(fake(2, off), dt, {T, H}), w, o), "residual") << off;
    EXPECT_EQ(call(x, r, TensorView(fake(3, off), dt, {H}), o), "weight") << off;
    EXPECT_EQ(call(x, r, w, TensorView(fake(4, off), dt, {T, H})), "out") << off;
  }
  // residual may be strided, but every row must stay 16-byte aligned.
  EXPECT_EQ(call(x, TensorView(fake(2), dt, {T, H}, {H + 4, 1}), w, o), "residual");
}

TEST(CommHardening, EmptyCallWithNullRows) {
  const TensorView none(nullptr, dt, {0, H}), w(fake(3), dt, {H});
  EXPECT_EQ(call(none, none, w, TensorView()), "<no throw>");
  EXPECT_EQ(call(none, none, w, none), "<no throw>");
}

}  // namespace
}  // namespace weft::comm_detail
