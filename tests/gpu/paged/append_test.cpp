// append_paged_kv on the GPU: bit-exact against a host model of the pools (it is a copy: the
// whole pools are compared as raw 16-bit patterns, so unwritten slots must keep their previous
// random contents), and rejected calls leave the pools byte-identical.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <string>
#include <tuple>

#include "paged_scenario.h"
#include "weft/error.h"

namespace {

using weft::DType;
using weft::KVLayout;
using weft::test::PagedDevice;
using weft::test::PagedScenario;
using weft::test::PagedScenarioSpec;

// Host model: start from the initial pools and copy every new row where the table says.
void expected_pools(const PagedScenario& sc, std::vector<uint16_t>& k, std::vector<uint16_t>& v) {
  k = sc.k_pool;
  v = sc.v_pool;
  std::vector<uint16_t>& vdst = sc.s.interleaved ? k : v;
  for (int64_t i = 0; i < sc.nnz(); ++i)
    for (int64_t h = 0; h < sc.s.heads; ++h)
      for (int64_t d = 0; d < sc.s.head_dim; ++d) {
        k[sc.token_offset(false, sc.batch_idx[i], sc.positions[i], h) + d] = sc.new_buf[sc.new_offset(false, i, h) + d];
        vdst[sc.token_offset(true, sc.batch_idx[i], sc.positions[i], h) + d] = sc.new_buf[sc.new_offset(true, i, h) + d];
      }
}

::testing::AssertionResult bits_equal(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                                      const char* what) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << what << ": size " << got.size() << " vs " << want.size();
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i]) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++bad;
    }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << got.size()
                                       << " elements differ; first at " << first << " (got 0x" << std::hex
                                       << got[first] << ", want 0x" << want[first] << ")";
}

void run_and_check(const PagedScenarioSpec& spec, uint64_t salt = 0) {
  auto rng = weft::test::Rng::for_current_test(salt);
  const PagedScenario sc = weft::test::make_paged_scenario(spec, rng);
  PagedDevice dev(sc);
  weft::append_paged_kv(dev.new_k, dev.new_v, dev.bi, dev.pos, dev.cache, dev.table, nullptr);
  WEFT_TEST_CUDA(cudaDeviceSynchronize());
  std::vector<uint16_t> k, v;
  expected_pools(sc, k, v);
  EXPECT_TRUE(bits_equal(dev.k_now(sc), k, "k_pages"));
  if (!spec.interleaved) EXPECT_TRUE(bits_equal(dev.v_now(sc), v, "v_pages"));
}

// Requests: empty (0 + 0), 0 new tokens on an existing sequence, fresh prefill, starts
// mid-page, starts exactly on a page boundary, one decode token.
PagedScenarioSpec base_spec(int64_t page_size) {
  PagedScenarioSpec s;
  s.page_size = page_size;
  const int32_t ps = static_cast<int32_t>(page_size);
  s.old_lens = {0, 2 * ps + 1, 0, ps + (ps > 1 ? ps / 2 : 0) + 1, 2 * ps, 37};
  s.new_lens = {0, 0, 3 * ps + 2, 2 * ps + 3, ps, 1};
  return s;
}

using Param = std::tuple<int, KVLayout, DType, int, bool>;  // page_size, layout, dtype, head_dim, strided

class AppendExact : public ::testing::TestWithParam<Param> {};

TEST_P(AppendExact, MatchesHostModelBitExactly) {
  WEFT_REQUIRE_GPU();
  const auto [page_size, layout, dtype, head_dim, strided] = GetParam();
  PagedScenarioSpec s = base_spec(page_size);
  s.layout = layout;
  s.dtype = dtype;
  s.head_dim = head_dim;
  // Heads chosen so one token's K+V (2 * heads * head_dim / 8 = 16, 96, 128 16-byte chunks)
  // is smaller than the 256-chunk step of a thread: several tokens per step, a step that is
  // not a whole number of tokens (96), and one that is (128).
  s.heads = head_dim == 64 ? 1 : head_dim == 128 ? 3 : 2;
  s.interleaved = strided;
  s.fused_new = strided;
  s.shuffle_tokens = strided;
  run_and_check(s);
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  const auto [ps, layout, dtype, d, strided] = info.param;
  return "ps" + std::to_string(ps) + "_" + weft::kv_layout_name(layout) + "_" + weft::dtype_name(dtype) + "_d" +
         std::to_string(d) + (strided ? "_strided" : "");
}

INSTANTIATE_TEST_SUITE_P(Paged, AppendExact,
                         ::testing::Combine(::testing::Values(1, 3, 16, 64),
                                            ::testing::Values(KVLayout::kNHD, KVLayout::kHND),
                                            ::testing::Values(DType::kBFloat16, DType::kFloat16),
                                            ::testing::Values(64, 128, 256), ::testing::Bool()),
                         param_name);

TEST(AppendLarge, ManyTokensEightHeads) {
  WEFT_REQUIRE_GPU();
  for (KVLayout layout : {KVLayout::kNHD, KVLayout::kHND}) {
    PagedScenarioSpec s;
    s.page_size = 16;
    s.heads = 8;
    s.layout = layout;
    s.old_lens = {5, 0, 1000, 17, 0};
    s.new_lens = {1200, 777, 1, 900, 131};  // 3009 tokens: many blocks and a ragged tail
    run_and_check(s, static_cast<uint64_t>(layout));
  }
}

TEST(AppendLarge, TokenWiderThanABlock) {
  WEFT_REQUIRE_GPU();
  // 40 heads x 256 dims: 2560 chunks per token > the 2048 a block covers, so tokens straddle blocks.
  PagedScenarioSpec s;
  s.page_size = 3;
  s.heads = 40;
  s.head_dim = 256;
  s.layout = KVLayout::kHND;
  s.old_lens = {4, 0};
  s.new_lens = {9, 14};
  s.interleaved = true;
  run_and_check(s);
}

TEST(AppendLarge, RandomRequests) {
  WEFT_REQUIRE_GPU();
  auto rng = weft::test::Rng::for_current_test();
  for (int iter = 0; iter < 12; ++iter) {
    PagedScenarioSpec s;
    s.page_size = rng.randint(1, 40);
    s.heads = rng.randint(1, 9);
    s.head_dim = 64 << rng.randint(0, 2);
    s.layout = rng.randint(0, 1) ? KVLayout::kHND : KVLayout::kNHD;
    s.dtype = rng.randint(0, 1) ? DType::kFloat16 : DType::kBFloat16;
    s.interleaved = rng.randint(0, 1);
    s.fused_new = rng.randint(0, 1);
    s.shuffle_tokens = rng.randint(0, 1);
    const int batch = static_cast<int>(rng.randint(1, 8));
    for (int b = 0; b < batch; ++b) {
      s.old_lens.push_back(static_cast<int32_t>(rng.randint(0, 200)));
      s.new_lens.push_back(static_cast<int32_t>(rng.randint(0, 3) ? rng.randint(0, 150) : 0));
    }
    SCOPED_TRACE("iter " + std::to_string(iter));
    run_and_check(s, iter + 1);
  }
}

// Negative tests with real device buffers: the call throws, names the argument, and the pools
// are byte-identical afterwards.
template <class Mutate>
void expect_rejected_untouched(const std::string& argument, Mutate&& mutate) {
  PagedScenarioSpec s = base_spec(16);
  auto rng = weft::test::Rng::for_current_test();
  PagedScenario sc = weft::test::make_paged_scenario(s, rng);
  PagedDevice dev(sc);
  mutate(sc, dev);
  const std::vector<uint16_t> k_before = dev.k_now(sc), v_before = dev.v_now(sc);
  std::string got = "<no throw>";
  try {
    weft::append_paged_kv(dev.new_k, dev.new_v, dev.bi, dev.pos, dev.cache, dev.table, nullptr);
  } catch (const weft::Error& e) {
    got = e.argument();
  }
  WEFT_TEST_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ(got, argument);
  EXPECT_TRUE(bits_equal(dev.k_now(sc), k_before, "k_pages"));
  EXPECT_TRUE(bits_equal(dev.v_now(sc), v_before, "v_pages"));
}

TEST(AppendRejected, BadPageIdWritesNothing) {
  WEFT_REQUIRE_GPU();
  expect_rejected_untouched("kv_indices", [](PagedScenario& sc, PagedDevice& dev) {
    sc.indices.back() = static_cast<int32_t>(sc.num_pages);  // host mirror (table points at it)
    dev.indices.upload(sc.indices.data(), sc.indices.size() * sizeof(int32_t));
  });
}

TEST(AppendRejected, PositionPastKvLenWritesNothing) {
  WEFT_REQUIRE_GPU();
  expect_rejected_untouched("positions", [](PagedScenario& sc, PagedDevice& dev) {
    sc.positions.back() = static_cast<int32_t>(sc.kv_len(sc.batch_idx.back()));
    dev.positions.upload(sc.positions.data(), sc.positions.size() * sizeof(int32_t));
  });
}

TEST(AppendRejected, DtypeMismatchWritesNothing) {
  WEFT_REQUIRE_GPU();
  expect_rejected_untouched("new_v", [](PagedScenario&, PagedDevice& dev) { dev.new_v.dtype = DType::kFloat16; });
}

TEST(AppendRejected, BatchIndexOutOfRangeWritesNothing) {
  WEFT_REQUIRE_GPU();
  expect_rejected_untouched("batch_indices", [](PagedScenario& sc, PagedDevice& dev) {
    sc.batch_idx[0] = sc.batch();
    dev.batch_idx.upload(sc.batch_idx.data(), sc.batch_idx.size() * sizeof(int32_t));
  });
}

}  // namespace

namespace {

TEST(AppendEdge, NoNewTokensIsANoOp) {
  WEFT_REQUIRE_GPU();
  PagedScenarioSpec s;
  s.old_lens = {5, 0, 40};
  s.new_lens = {0, 0, 0};
  run_and_check(s);  // expected pools == initial random contents
}

}  // namespace
