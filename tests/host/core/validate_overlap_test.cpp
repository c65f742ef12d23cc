// Host tests: check::writable (no two elements share an address) and check::disjoint (byte
// ranges), used by the entry points that write caller tensors (norms, the state merge).
#include <gtest/gtest.h>

#include <cstdint>

#include "common/test_util.h"
#include "weft/validate.h"

namespace {

using weft::DType;
using weft::TensorView;
using weft::test::thrown_argument;

using weft::test::byte_offset;
using weft::test::fake_device_ptr;
const DType f16 = DType::kFloat16;
const DType f32 = DType::kFloat32;

TEST(ValidateOverlap, WritableAndDisjoint) {
  void* const p1 = fake_device_ptr(1);
  using weft::check::disjoint;
  using weft::check::writable;
  EXPECT_EQ(thrown_argument([&] { writable(TensorView(p1, f16, {4, 8}), "t"); }), "<no throw>");
  EXPECT_EQ(thrown_argument([&] { writable(TensorView(p1, f16, {4, 8}, {16, 1}), "t"); }), "<no throw>");
  EXPECT_EQ(thrown_argument([&] { writable(TensorView(p1, f16, {4, 8}, {1, 2}), "t"); }), "t");  // interleaved
  EXPECT_EQ(thrown_argument([&] { writable(TensorView(p1, f16, {4, 8}, {1, 4}), "t"); }), "<no throw>");  // transposed
  EXPECT_EQ(thrown_argument([&] { writable(TensorView(p1, f16, {4, 8}, {0, 1}), "t"); }), "t");
  EXPECT_EQ(thrown_argument([&] { writable(TensorView(p1, f16, {1, 8}, {0, 1}), "t"); }), "<no throw>");
  EXPECT_EQ(thrown_argument([&] { writable(TensorView(p1, f16, {4, 8}, {-8, 1}), "t"); }), "t");
  EXPECT_EQ(thrown_argument([&] { writable(TensorView(p1, f16, {0, 8}, {0, 0}), "t"); }), "<no throw>");
  TensorView a(p1, f32, {4, 4});  // bytes [1 MiB, 1 MiB + 64)
  EXPECT_EQ(thrown_argument([&] { disjoint(a, "a", TensorView(byte_offset(p1, 64), f32, {4}), "b"); }), "<no throw>");
  EXPECT_EQ(thrown_argument([&] { disjoint(a, "a", TensorView(byte_offset(p1, 60), f32, {4}), "b"); }), "b");
  EXPECT_EQ(thrown_argument([&] { disjoint(a, "a", TensorView(byte_offset(p1, 60), f32, {0}), "b"); }), "<no throw>");
}

}  // namespace
