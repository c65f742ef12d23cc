// Host validation of prefill plan inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "prefill/prefill_validate.h"
#include "weft/error.h"
#include "weft/prefill.h"
#include "common/test_util.h"

namespace weft::prefill {
namespace {

using weft::test::thrown_argument;

TEST(PrefillValidate, Bounds) {
  PrefillBounds b{2, 100, 8, 2, 128, -1};
  EXPECT_EQ(thrown_argument([&] { check_bounds(b); }), "<no throw>");
  PrefillBounds x = b;
  x.max_batch = 0;
  EXPECT_EQ(thrown_argument([&] { check_bounds(x); }), "bounds.max_batch");
  x = b;
  x.num_qo_heads = 6;
  x.num_kv_heads = 4;
  EXPECT_EQ(thrown_argument([&] { check_bounds(x); }), "bounds.num_qo_heads");
  x = b;
  x.head_dim = 80;
  EXPECT_EQ(thrown_argument([&] { check_bounds(x); }), "bounds.head_dim");
  x = b;
  x.max_total_q = -1;
  EXPECT_EQ(thrown_argument([&] { check_bounds(x); }), "bounds.max_total_q");
}

TEST(PrefillValidate, Variant) {
  AttentionVariant v;
  EXPECT_EQ(thrown_argument([&] { check_variant(v); }), "<no throw>");
  v.sm_scale = -1;
  EXPECT_EQ(thrown_argument([&] { check_variant(v); }), "variant.sm_scale");
  v = {};
  v.sm_scale = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(thrown_argument([&] { check_variant(v); }), "variant.sm_scale");
  v = {};
  v.window_left = -2;
  EXPECT_EQ(thrown_argument([&] { check_variant(v); }), "variant.window_left");
  v = {};
  v.logits_soft_cap = std::numeric_limits<float>::infinity();
  EXPECT_EQ(thrown_argument([&] { check_variant(v); }), "variant.logits_soft_cap");
  v = {};
  v.mask = static_cast<MaskMode>(7);
  EXPECT_EQ(thrown_argument([&] { check_variant(v); }), "variant.mask");
}

TEST(PrefillValidate, MaskIndptr) {
  const std::vector<int32_t> qo = {0, 3, 3, 10};
  const std::vector<int32_t> kv = {5, 4, 9};
  // bytes: ceil(15/8)=2, 0, ceil(63/8)=8
  std::vector<int32_t> good = {0, 2, 2, 10};
  EXPECT_EQ(thrown_argument([&] { check_mask_indptr(good.data(), qo.data(), kv); }), "<no throw>");
  std::vector<int32_t> bad = {0, 2, 3, 11};
  EXPECT_EQ(thrown_argument([&] { check_mask_indptr(bad.data(), qo.data(), kv); }), "mask_indptr");
  std::vector<int32_t> off = {1, 3, 3, 11};
  EXPECT_EQ(thrown_argument([&] { check_mask_indptr(off.data(), qo.data(), kv); }), "mask_indptr");
  EXPECT_EQ(thrown_argument([&] { check_mask_indptr(nullptr, qo.data(), kv); }), "mask_indptr");
}

TEST(PrefillValidate, PageTableHost) {
  std::vector<int32_t> indptr = {0, 2, 2, 5}, last = {16, 0, 3}, idx = {0, 1, 2, 3, 4};
  PageTable t;
  t.batch_size = 3;
  t.indptr = {nullptr, indptr.data(), 4};
  t.indices = {nullptr, idx.data(), 5};
  t.last_page_len = {nullptr, last.data(), 3};
  EXPECT_EQ(thrown_argument([&] { check_table_host(t, 16); }), "<no throw>");
  last[1] = 1;  // request without pages must say 0
  EXPECT_EQ(thrown_argument([&] { check_table_host(t, 16); }), "kv_last_page_len");
  last[1] = 0;
  last[0] = 17;
  EXPECT_EQ(thrown_argument([&] { check_table_host(t, 16); }), "kv_last_page_len");
  last[0] = 16;
  indptr[2] = 1;  // decreasing
  EXPECT_EQ(thrown_argument([&] { check_table_host(t, 16); }), "kv_indptr");
  indptr[2] = 2;
  t.indptr.size = 3;
  EXPECT_EQ(thrown_argument([&] { check_table_host(t, 16); }), "kv_indptr");
}

}  // namespace
}  // namespace weft::prefill

namespace weft::prefill {
// The grid cap of workspace_size(bounds, max_ctas) (an SM partition's capped prefill grid) is
// checked before any device query, so a host without a GPU sees the argument's name.
TEST(PrefillValidate, WorkspaceGridCapNegative) {
  const PrefillBounds b{2, 100, 8, 2, 128, -1};
  EXPECT_EQ(weft::test::thrown_argument([&] { BatchPrefillWrapper::workspace_size(b, -1); }), "max_ctas");
  PrefillBounds x = b;
  x.max_batch = 0;
  EXPECT_EQ(weft::test::thrown_argument([&] { BatchPrefillWrapper::workspace_size(x, 8); }), "bounds.max_batch");
}
}  // namespace weft::prefill
