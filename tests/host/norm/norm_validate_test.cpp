// Host tests (no GPU): RMSNorm argument validation (every case throws before any launch) and
// the row layout shared by the norm and fused all-reduce kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "norm/norm_launch.h"
#include "norm/row_layout.h"
#include "weft/error.h"
#include "weft/norm.h"
#include "common/test_util.h"

namespace {

using weft::DType;
using weft::TensorView;

// Fake, 256-byte aligned device addresses: validation never dereferences them, and every call
// below is rejected before a launch.
using weft::test::thrown_argument;

void* fake(uintptr_t mib) { return reinterpret_cast<void*>(mib << 20); }


TEST(NormValidate, RejectsBadArgumentsNamingThem) {
  const int64_t T = 16, H = 4096;
  TensorView x(fake(1), DType::kBFloat16, {T, H});
  TensorView out(fake(2), DType::kBFloat16, {T, H});
  TensorView res(fake(3), DType::kBFloat16, {T, H});
  TensorView w(fake(4), DType::kBFloat16, {H});
  cudaStream_t s = nullptr;

  EXPECT_EQ(thrown_argument([&] { weft::rmsnorm(TensorView(fake(1), DType::kBFloat16, {T, 1001}), w, out, 1e-6, s); }), "x");
  EXPECT_EQ(thrown_argument([&] { weft::rmsnorm(TensorView(fake(1), DType::kBFloat16, {T, 16392}), w, out, 1e-6, s); }), "x");
  EXPECT_EQ(thrown_argument([&] { weft::rmsnorm(TensorView(fake(1), DType::kFloat32, {T, H}), w, out, 1e-6, s); }), "x");
  EXPECT_EQ(thrown_argument([&] { weft::rmsnorm(TensorView(fake(1), DType::kBFloat16, {T, H, 1}), w, out, 1e-6, s); }), "x");
  EXPECT_EQ(thrown_argument([&] { weft::rmsnorm(x, w, TensorView(fake(2), DType::kFloat16, {T, H}), 1e-6, s); }), "out");
  EXPECT_EQ(thrown_argument([&] { weft::rmsnorm(x, w, TensorView(fake(2), DType::kBFloat16, {T + 1, H}), 1e-6, s); }), "out");
  EXPECT_EQ(thrown_argument([&] { weft::rmsnorm(x, TensorView(fake(4), DType::kBFloat16, {H / 2}), out, 1e-6, s); }), "weight");
  EXPECT_EQ(thrown_argument([&] { weft::rmsnorm(x, TensorView(fake(4), DType::kFloat16, {H}), out, 1e-6, s); }), "weight");
  EXPECT_EQ(thrown_argument([&] { weft::rmsnorm(x, w, out, 0.0, s); }), "eps");
  EXPECT_EQ(thrown_argument([&] { weft::rmsnorm(x, w, out, -1e-6, s); }), "eps");
  EXPECT_EQ(thrown_argument([&] { weft::rmsnorm(x, w, out, 1.0 / 0.0, s); }), "eps");
  // misaligned rows / data, null data, CPU tensor
  EXPECT_EQ(thrown_argument([&] {
              weft::rmsnorm(TensorView(static_cast<char*>(fake(1)) + 2, DType::kBFloat16, {T, H}), w, out, 1e-6, s);
            }), "x");
  EXPECT_EQ(thrown_argument([&] { weft::rmsnorm(TensorView(fake(1), DType::kBFloat16, {T, H}, {H + 4, 1}), w, out, 1e-6, s); }), "x");
  EXPECT_EQ(thrown_argument([&] { weft::rmsnorm(TensorView(nullptr, DType::kBFloat16, {T, H}), w, out, 1e-6, s); }), "x");
  EXPECT_EQ(thrown_argument([&] { weft::rmsnorm(TensorView(fake(1), DType::kBFloat16, {T, H}, weft::Device::kCPU), w, out, 1e-6, s); }), "x");
  // partial overlap of out with x (in place with the same view is allowed)
  EXPECT_EQ(thrown_argument([&] {
              weft::rmsnorm(x, w, TensorView(static_cast<char*>(fake(1)) + 2 * H, DType::kBFloat16, {T, H}), 1e-6, s);
            }), "out");

  EXPECT_EQ(thrown_argument([&] { weft::fused_add_rmsnorm(x, TensorView(fake(3), DType::kFloat16, {T, H}), w, 1e-6, s); }), "residual");
  EXPECT_EQ(thrown_argument([&] { weft::fused_add_rmsnorm(x, TensorView(fake(3), DType::kBFloat16, {T, H + 8}), w, 1e-6, s); }), "residual");
  EXPECT_EQ(thrown_argument([&] { weft::fused_add_rmsnorm(x, x, w, 1e-6, s); }), "residual");
  EXPECT_EQ(thrown_argument([&] { weft::fused_add_rmsnorm(x, res, w, std::nan(""), s); }), "eps");
  EXPECT_EQ(thrown_argument([&] { weft::fused_add_rmsnorm(TensorView(fake(1), DType::kBFloat16, {T, 12}), res, w, 1e-6, s); }), "x");
}

TEST(NormRowLayout, CoversEveryHiddenSize) {
  using namespace weft::norm_detail;
  for (int64_t hidden = 8; hidden <= weft::kNormMaxHidden; hidden += 8) {
    for (int block : {256, 512}) {
      const RowLayout l = make_row_layout(hidden, block, kNormTargetVpt, kNormMaxVpt);
      const int vecs = static_cast<int>(hidden / 8);
      ASSERT_EQ(l.vecs, vecs);
      ASSERT_GE(l.threads_per_row, 32);
      ASSERT_EQ(l.threads_per_row & (l.threads_per_row - 1), 0) << "power of two";
      ASSERT_LE(l.threads_per_row, block);
      ASSERT_EQ(l.rows_per_cta * l.threads_per_row, block);
      ASSERT_GE(l.threads_per_row * l.vecs_per_thread, vecs) << "row covered";
      ASSERT_LT(l.threads_per_row * (l.vecs_per_thread - 1), vecs) << "no empty step";
      ASSERT_LE(l.vecs_per_thread, block == 256 ? kNormMaxVpt : 4) << hidden;
      // minimal group: half the threads would need more than the target vectors each
      if (l.threads_per_row > 32) ASSERT_GT((vecs + l.threads_per_row / 2 - 1) / (l.threads_per_row / 2), kNormTargetVpt);
    }
  }
}

}  // namespace
