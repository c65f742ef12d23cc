// Issue 18 (host, no GPU): every pointer the norm entry points receive is checked against the
// 16-byte vector accesses of their kernel (rows of x / out / residual, the weight vector), and an
// empty step (tokens 0, views without storage) is accepted without launching anything.
#include <gtest/gtest.h>

#include <cstdint>

#include "common/test_util.h"
#include "weft/norm.h"

namespace {

using weft::DType;
using weft::TensorView;
using weft::test::thrown_argument;

constexpr const char* kNoThrow = "<no throw>";

void* fake(uintptr_t mib, int bytes = 0) { return reinterpret_cast<void*>((mib << 20) + bytes); }

constexpr int64_t T = 16, H = 4096;
const DType dt = DType::kBFloat16;

TEST(NormHardening, RmsNormPointersAndStrides) {
  const TensorView x(fake(1), dt, {T, H}), w(fake(4), dt, {H}), out(fake(2), dt, {T, H});
  auto run = [](const TensorView& x_, const TensorView& w_, const TensorView& o_) {
    return thrown_argument([&] { weft::rmsnorm(x_, w_, o_, 1e-6, nullptr); });
  };
  for (int off : {2, 4, 8}) {
    EXPECT_EQ(run(TensorView(fake(1, off), dt, {T, H}), w, out), "x") << off;
    EXPECT_EQ(run(x, w, TensorView(fake(2, off), dt, {T, H})), "out") << off;
    EXPECT_EQ(run(x, TensorView(fake(4, off), dt, {H}), out), "weight") << off;
  }
  // Row strides that put row 1 off the 16-byte grid (H + 4 elements = +8 bytes).
  EXPECT_EQ(run(TensorView(fake(1), dt, {T, H}, {H + 4, 1}), w, out), "x");
  EXPECT_EQ(run(x, w, TensorView(fake(2), dt, {T, H}, {H + 4, 1})), "out");
}

TEST(NormHardening, FusedAddRmsNormPointersAndStrides) {
  const TensorView x(fake(1), dt, {T, H}), r(fake(3), dt, {T, H}), w(fake(4), dt, {H});
  auto run = [](const TensorView& x_, const TensorView& r_, const TensorView& w_) {
    return thrown_argument([&] { weft::fused_add_rmsnorm(x_, r_, w_, 1e-6, nullptr); });
  };
  for (int off : {2, 8}) {
    EXPECT_EQ(run(TensorView(fake(1, off), dt, {T, H}), r, w), "x") << off;
    EXPECT_EQ(run(x, TensorView(fake(3, off), dt, {T, H}), w), "residual") << off;
    EXPECT_EQ(run(x, r, TensorView(fake(4, off), dt, {H})), "weight") << off;
  }
  EXPECT_EQ(run(x, TensorView(fake(3), dt, {T, H}, {H + 4, 1}), w), "residual");
}

// tokens 0: nothing to normalize. Accepted with views that have no storage (only the weight,
// a model parameter, is a real vector); nothing is launched, so this runs without a GPU.
TEST(NormHardening, EmptyStepWithNullRowsIsANoOp) {
  const TensorView none(nullptr, dt, {0, H}), w(fake(4), dt, {H});
  EXPECT_EQ(thrown_argument([&] { weft::rmsnorm(none, w, none, 1e-6, nullptr); }), kNoThrow);
  EXPECT_EQ(thrown_argument([&] { weft::fused_add_rmsnorm(none, none, w, 1e-6, nullptr); }), kNoThrow);
  // The weight is still checked: its alignment does not depend on the token count.
  EXPECT_EQ(thrown_argument([&] { weft::rmsnorm(none, TensorView(fake(4, 8), dt, {H}), none, 1e-6, nullptr); }), "weight");
}

}  // namespace
