// Issue 18 (host, no GPU): the prefill plan-side checks accept an empty step (batch 0 with size-0,
// null arrays) and still reject malformed ones. (The wrapper's own plan/run need a device: see
// tests/gpu/prefill/prefill_hardening_test.cpp.)
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/test_util.h"
#include "prefill/prefill_validate.h"
#include "weft/error.h"

namespace weft::prefill {
namespace {

using weft::test::thrown_argument;

constexpr const char* kNoThrow = "<no throw>";

TEST(PrefillHardening, EmptyPageTableHost) {
  PageTable t;  // batch 0, every array {nullptr, nullptr, 0}
  EXPECT_EQ(thrown_argument([&] { check_table_host(t, 16); }), kNoThrow);
  const std::vector<int32_t> zero{0}, one{1};
  t.indptr = {nullptr, zero.data(), 1};
  EXPECT_EQ(thrown_argument([&] { check_table_host(t, 16); }), kNoThrow);
  t.indptr = {nullptr, one.data(), 1};
  EXPECT_EQ(thrown_argument([&] { check_table_host(t, 16); }), "kv_indptr");
  t.indptr = {nullptr, nullptr, 1};  // says one entry, gives none
  EXPECT_EQ(thrown_argument([&] { check_table_host(t, 16); }), "kv_indptr");
  t.indptr = {nullptr, zero.data(), 2};
  EXPECT_EQ(thrown_argument([&] { check_table_host(t, 16); }), "kv_indptr");
  // A batch with requests still needs its host mirrors.
  t.batch_size = 1;
  t.indptr = {nullptr, nullptr, 0};
  EXPECT_EQ(thrown_argument([&] { check_table_host(t, 16); }), "kv_indptr");
  const std::vector<int32_t> ip{0, 1};
  t.indptr = {nullptr, ip.data(), 2};
  EXPECT_EQ(thrown_argument([&] { check_table_host(t, 16); }), "kv_last_page_len");
}

TEST(PrefillHardening, EmptyMaskIndptr) {
  const std::vector<int32_t> none;
  const std::vector<int32_t> qo0{0};
  EXPECT_EQ(thrown_argument([&] { check_mask_indptr(nullptr, nullptr, none); }), kNoThrow);
  EXPECT_EQ(thrown_argument([&] { check_mask_indptr(qo0.data(), qo0.data(), none); }), kNoThrow);
  const std::vector<int32_t> one{1};
  EXPECT_EQ(thrown_argument([&] { check_mask_indptr(one.data(), qo0.data(), none); }), "mask_indptr");
  // With requests the mask indptr stays required.
  const std::vector<int32_t> qo{0, 2};
  EXPECT_EQ(thrown_argument([&] { check_mask_indptr(nullptr, qo.data(), std::vector<int32_t>{3}); }), "mask_indptr");
}

}  // namespace
}  // namespace weft::prefill
