// Validation helpers: every check throws weft::Error naming the argument.
#include <gtest/gtest.h>

#include <vector>

#include "weft/validate.h"
#include "common/test_util.h"

namespace {

using weft::DType;
using weft::TensorView;

using weft::test::thrown_argument;

TEST(Validate, DtypeMismatchNamesArgument) {
  TensorView t(reinterpret_cast<void*>(256), DType::kFloat32, {4, 8});
  EXPECT_EQ(thrown_argument([&] { weft::check::dtype_in(t, "q", {DType::kFloat16, DType::kBFloat16}); }), "q");
  EXPECT_EQ(thrown_argument([&] { weft::check::dtype_is(t, "k", DType::kBFloat16); }), "k");
  weft::check::dtype_is(t, "k", DType::kFloat32);
}

TEST(Validate, ShapeWildcardAndMismatch) {
  TensorView t(reinterpret_cast<void*>(256), DType::kBFloat16, {4, 8, 128});
  weft::check::shape_is(t, "q", {-1, 8, 128});
  EXPECT_EQ(thrown_argument([&] { weft::check::shape_is(t, "q", {-1, 4, 128}); }), "q");
  EXPECT_EQ(thrown_argument([&] { weft::check::shape_is(t, "q", {4, 8}); }), "q");
}

TEST(Validate, HeadDims) {
  for (int d : {64, 128, 256}) weft::check::head_dim_supported(d, "head_dim");
  for (int d : {0, 32, 96, 512}) EXPECT_EQ(thrown_argument([&] { weft::check::head_dim_supported(d, "head_dim"); }), "head_dim");
}

TEST(Validate, IndptrMonotonicStartsAtZeroBounded) {
  std::vector<int32_t> ok{0, 2, 2, 5};
  weft::check::indptr(ok.data(), 3, "kv_indptr", 5);
  std::vector<int32_t> dec{0, 3, 2, 5};
  EXPECT_EQ(thrown_argument([&] { weft::check::indptr(dec.data(), 3, "kv_indptr", 5); }), "kv_indptr");
  std::vector<int32_t> start{1, 2, 3, 5};
  EXPECT_EQ(thrown_argument([&] { weft::check::indptr(start.data(), 3, "kv_indptr"); }), "kv_indptr");
  EXPECT_EQ(thrown_argument([&] { weft::check::indptr(ok.data(), 3, "kv_indptr", 4); }), "kv_indptr");
  EXPECT_EQ(thrown_argument([&] { weft::check::indptr(nullptr, 3, "kv_indptr"); }), "kv_indptr");
}

TEST(Validate, IndicesBelowBound) {
  std::vector<int32_t> v{0, 3, 7};
  weft::check::indices_below(v.data(), 3, "kv_indices", 8);
  EXPECT_EQ(thrown_argument([&] { weft::check::indices_below(v.data(), 3, "kv_indices", 7); }), "kv_indices");
  std::vector<int32_t> neg{0, -1};
  EXPECT_EQ(thrown_argument([&] { weft::check::indices_below(neg.data(), 2, "kv_indices", 8); }), "kv_indices");
}

TEST(Validate, AlignmentAndInnerContiguity) {
  weft::check::aligned(reinterpret_cast<void*>(4096), "p");
  EXPECT_EQ(thrown_argument([&] { weft::check::aligned(reinterpret_cast<void*>(4098), "p"); }), "p");
  TensorView strided(reinterpret_cast<void*>(256), DType::kBFloat16, {4, 128}, {128, 2});
  EXPECT_EQ(thrown_argument([&] { weft::check::inner_contiguous(strided, "k"); }), "k");
  TensorView odd_row(reinterpret_cast<void*>(256), DType::kBFloat16, {4, 128}, {129, 1});
  EXPECT_EQ(thrown_argument([&] { weft::check::inner_contiguous(odd_row, "k"); }), "k");
  TensorView ok(reinterpret_cast<void*>(256), DType::kBFloat16, {4, 128}, {136, 1});
  weft::check::inner_contiguous(ok, "k");
}

TEST(Validate, WorkspaceSizeAndAlignment) {
  weft::check::workspace(reinterpret_cast<void*>(4096), 1024, 512, "workspace");
  EXPECT_EQ(thrown_argument([&] { weft::check::workspace(reinterpret_cast<void*>(4096), 256, 512, "workspace"); }), "workspace");
  EXPECT_EQ(thrown_argument([&] { weft::check::workspace(reinterpret_cast<void*>(4100), 1024, 512, "workspace"); }), "workspace");
}

TEST(Tensor, ContiguityAndDescribe) {
  TensorView t(nullptr, DType::kBFloat16, {2, 3, 4});
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.stride(0), 12);
  EXPECT_EQ(t.describe(), "[2, 3, 4] bf16 cuda:0");
  TensorView s(nullptr, DType::kBFloat16, {2, 3}, {6, 1});
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(thrown_argument([] { TensorView bad(nullptr, DType::kFloat16, {2, -1}); }), "shape");
  EXPECT_EQ(thrown_argument([] { TensorView bad(nullptr, DType::kFloat16, {2, 3}, {1}); }), "strides");
}

TEST(DTypes, SizesAndNames) {
  EXPECT_EQ(weft::dtype_size(DType::kBFloat16), 2u);
  EXPECT_EQ(weft::dtype_size(DType::kFloat32), 4u);
  EXPECT_EQ(weft::dtype_size(DType::kFloat8E4M3), 1u);
  EXPECT_STREQ(weft::dtype_name(DType::kFloat16), "f16");
}

}  // namespace
