// Issue 18 (host, no GPU): the check:: helpers behind pointer-alignment validation and the
// acceptance of empty steps (batch 0 with size-0, null index arrays).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/test_util.h"
#include "weft/validate.h"

namespace {

using weft::test::thrown_argument;

constexpr const char* kNoThrow = "<no throw>";

const void* at(uintptr_t addr) { return reinterpret_cast<const void*>(addr); }

// A device index array is loaded as int32 by every kernel: 4-byte alignment, whatever its size.
TEST(ValidateHardening, DeviceIndexArrayAlignmentAndPresence) {
  using weft::check::device_index_array;
  EXPECT_EQ(thrown_argument([] { device_index_array(at(0x1000), 5, "kv_indptr"); }), kNoThrow);
  EXPECT_EQ(thrown_argument([] { device_index_array(at(0x1004), 5, "kv_indptr"); }), kNoThrow);
  for (uintptr_t off : {1u, 2u, 3u})
    EXPECT_EQ(thrown_argument([&] { device_index_array(at(0x1000 + off), 5, "kv_indptr"); }), "kv_indptr") << off;
  // Present when there are entries ...
  EXPECT_EQ(thrown_argument([] { device_index_array(nullptr, 1, "positions"); }), "positions");
  // ... and optional for none (an empty step), but a given pointer must still be aligned: a graph
  // captured on the empty step replays with it after a non-empty plan.
  EXPECT_EQ(thrown_argument([] { device_index_array(nullptr, 0, "positions"); }), kNoThrow);
  EXPECT_EQ(thrown_argument([] { device_index_array(at(0x1002), 0, "positions"); }), "positions");
  EXPECT_EQ(thrown_argument([] { device_index_array(at(0x1000), -1, "positions"); }), "positions");
}

TEST(ValidateHardening, IndptrOfAnEmptyBatchMayBeNullOrZero) {
  using weft::check::indptr;
  EXPECT_EQ(thrown_argument([] { indptr(nullptr, 0, "qo_indptr"); }), kNoThrow);
  const std::vector<int32_t> zero{0}, one{1};
  EXPECT_EQ(thrown_argument([&] { indptr(zero.data(), 0, "qo_indptr"); }), kNoThrow);
  EXPECT_EQ(thrown_argument([&] { indptr(one.data(), 0, "qo_indptr"); }), "qo_indptr");  // must start at 0
  EXPECT_EQ(thrown_argument([&] { indptr(zero.data(), 0, "qo_indptr", 0); }), kNoThrow);
  // Null stays an error wherever there are requests.
  EXPECT_EQ(thrown_argument([] { indptr(nullptr, 1, "qo_indptr"); }), "qo_indptr");
  EXPECT_EQ(thrown_argument([] { indptr(nullptr, -1, "qo_indptr"); }), "qo_indptr");
}

TEST(ValidateHardening, IndptrSize) {
  using weft::check::indptr_size;
  EXPECT_EQ(thrown_argument([] { indptr_size(4, 3, "kv_indptr"); }), kNoThrow);
  EXPECT_EQ(thrown_argument([] { indptr_size(1, 0, "kv_indptr"); }), kNoThrow);  // {0}
  EXPECT_EQ(thrown_argument([] { indptr_size(0, 0, "kv_indptr"); }), kNoThrow);  // no array
  EXPECT_EQ(thrown_argument([] { indptr_size(0, 3, "kv_indptr"); }), "kv_indptr");
  EXPECT_EQ(thrown_argument([] { indptr_size(3, 3, "kv_indptr"); }), "kv_indptr");
  EXPECT_EQ(thrown_argument([] { indptr_size(2, 0, "kv_indptr"); }), "kv_indptr");
}

// The alignment each kernel class needs (docs/design.md, "Validation: pointer alignment"): a float
// LSE needs 4 bytes, a 16-byte vector row 16. aligned() passes null (presence is checked apart).
TEST(ValidateHardening, AlignedByWidth) {
  using weft::check::aligned;
  EXPECT_EQ(thrown_argument([] { aligned(at(0x2004), "lse", 4); }), kNoThrow);
  EXPECT_EQ(thrown_argument([] { aligned(at(0x2002), "lse", 4); }), "lse");
  EXPECT_EQ(thrown_argument([] { aligned(at(0x2008), "q", 16); }), "q");
  EXPECT_EQ(thrown_argument([] { aligned(nullptr, "lse", 4); }), kNoThrow);
}

// inner_contiguous is what Q / O / K / V / pools / norm rows rely on: the base and every outer
// stride keep each row on a 16-byte boundary (strides in elements, bf16 = 2 bytes).
TEST(ValidateHardening, InnerContiguousCoversEveryRowNotJustTheFirst) {
  using weft::DType;
  using weft::TensorView;
  auto inner = [](const TensorView& t) {
    return thrown_argument([&] { weft::check::inner_contiguous(t, "q", 16); });
  };
  // [tokens, heads, head_dim]: a token stride of 8 * 128 + 4 elements puts token 1 at +8 bytes.
  EXPECT_EQ(inner(TensorView(const_cast<void*>(at(0x10000)), DType::kBFloat16, {4, 8, 128}, {8 * 128 + 4, 128, 1})), "q");
  // A head stride of 132 elements (264 bytes) misaligns head 1.
  EXPECT_EQ(inner(TensorView(const_cast<void*>(at(0x10000)), DType::kBFloat16, {4, 8, 128}, {8 * 132, 132, 1})), "q");
  // Padded but aligned strides are fine; so is any stride of an extent-1 dimension (never used).
  EXPECT_EQ(inner(TensorView(const_cast<void*>(at(0x10000)), DType::kBFloat16, {4, 8, 128}, {8 * 136, 136, 1})), kNoThrow);
  EXPECT_EQ(inner(TensorView(const_cast<void*>(at(0x10000)), DType::kBFloat16, {1, 8, 128}, {3, 128, 1})), kNoThrow);
  // An empty view without storage passes (nothing to load) ...
  EXPECT_EQ(inner(TensorView(nullptr, DType::kBFloat16, {0, 8, 128})), kNoThrow);
  // ... but a given base pointer must be aligned even when empty.
  EXPECT_EQ(inner(TensorView(const_cast<void*>(at(0x10008)), DType::kBFloat16, {0, 8, 128})), "q");
}

}  // namespace
