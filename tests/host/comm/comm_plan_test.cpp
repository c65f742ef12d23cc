// Host tests (no GPU): token ownership and CTA mapping of the two-shot schedule, the
// one-shot/two-shot selector, the kernel selector and copy-engine chunk count, and argument validation of fused_allreduce_add_rmsnorm.
#include <gtest/gtest.h>

#include <cstdlib>
#include <algorithm>
#include <set>
#include <vector>

#include "comm/comm_validate.h"
#include "comm/partition.h"
#include "comm/selector.h"
#include "common/test_util.h"
#include "weft/comm.h"
#include "weft/error.h"

namespace {

using namespace weft::comm_detail;
using weft::AllReduceVariant;
using weft::DType;
using weft::TensorView;

TEST(CommPartition, SlicesAreContiguousBalancedAndCoverAllTokens) {
  for (int world = 1; world <= 8; ++world) {
    for (int64_t tokens : {0, 1, 2, 3, 7, 8, 9, 128, 1000, 4096, 16383, 16384}) {
      int64_t next = 0, lo = tokens, hi = 0;
      for (int r = 0; r < world; ++r) {
        const TokenRange t = owned_range(tokens, world, r);
        ASSERT_EQ(t.begin, next) << "contiguous, in rank order";
        ASSERT_GE(t.count, 0);
        next += t.count;
        lo = std::min(lo, t.count);
        hi = std::max(hi, t.count);
      }
      ASSERT_EQ(next, tokens);
      ASSERT_LE(hi - lo, 1) << "balanced";
      if (tokens < world) ASSERT_EQ(lo, 0) << "some ranks own nothing";
    }
  }
}

TEST(CommPartition, EveryRowHasExactlyOneCta) {
  for (int ctas : {1, 3, 4, 8, 32})
    for (int rpc : {1, 2, 8, 16}) {
      std::vector<int> per(ctas, 0);
      for (int64_t k = 0; k < 1000; ++k) {
        const int c = cta_of_row(k, rpc, ctas);
        ASSERT_GE(c, 0);
        ASSERT_LT(c, ctas);
        ASSERT_EQ(c, cta_of_row((k / rpc) * rpc, rpc, ctas)) << "a slot stays on one CTA";
        ++per[c];
      }
      const auto [mn, mx] = std::minmax_element(per.begin(), per.end());
      ASSERT_LE(*mx - *mn, rpc) << "slots dealt round robin";
    }
}

TEST(CommSelector, ThresholdsByWorldSizeAndOverrides) {
  EXPECT_EQ(select_variant(1, 2, -1), AllReduceVariant::kOneShot);
  EXPECT_EQ(select_variant(default_one_shot_max_bytes(2), 2, -1), AllReduceVariant::kOneShot);
  EXPECT_EQ(select_variant(default_one_shot_max_bytes(2) + 1, 2, -1), AllReduceVariant::kTwoShot);
  // One-shot's traffic grows with N: its threshold never grows with the world size.
  for (int w = 2; w < 8; ++w) EXPECT_GE(default_one_shot_max_bytes(w), default_one_shot_max_bytes(w + 1));
  // Monotone in bytes for every world size.
  for (int w = 2; w <= 8; ++w) {
    bool two = false;
    for (int64_t b = 1; b <= (int64_t(64) << 20); b *= 2) {
      const bool t = select_variant(b, w, -1) == AllReduceVariant::kTwoShot;
      ASSERT_TRUE(t || !two) << "no switch back to one-shot at " << b;
      two = t;
    }
    EXPECT_TRUE(two);
  }
  EXPECT_EQ(select_variant(1 << 20, 4, 0), AllReduceVariant::kTwoShot);
  EXPECT_EQ(select_variant(1 << 20, 4, int64_t(1) << 30), AllReduceVariant::kOneShot);
  // 1 token x 8192 bf16 (16 KiB) is one-shot, 8K tokens x 8192 (128 MiB) two-shot, any world.
  for (int w = 2; w <= 8; ++w) {
    EXPECT_EQ(select_variant(8192 * 2, w, -1), AllReduceVariant::kOneShot);
    EXPECT_EQ(select_variant(int64_t(8192) * 8192 * 2, w, -1), AllReduceVariant::kTwoShot);
  }
}

// Kernel under kAuto: push below 16 MiB, the copy engine from there on (monotone in bytes).
TEST(CommSelector, KernelBySize) {
  EXPECT_EQ(select_kernel(int64_t(128) * 8192 * 2), weft::CommKernel::kPush);
  EXPECT_EQ(select_kernel(int64_t(512) * 8192 * 2), weft::CommKernel::kPush);
  EXPECT_EQ(select_kernel(int64_t(1024) * 8192 * 2), weft::CommKernel::kCopyEngine);
  EXPECT_EQ(select_kernel(kCopyEngineMinBytes - 1), weft::CommKernel::kPush);
  bool ce = false;
  for (int64_t b = 1; b <= (int64_t(1) << 31); b *= 2) {
    const bool c = select_kernel(b) == weft::CommKernel::kCopyEngine;
    ASSERT_TRUE(c || !ce) << "switch back to push at " << b;
    ce = c;
  }
  EXPECT_TRUE(ce);
}

// Chunk count: requests are honoured (capped), the size rule gives 1..4 at world 2 and 1..2 at
// world 4 and never decreases with the size.
TEST(CommSelector, CopyEngineChunks) {
  for (int world : {2, 4, 8})
    for (int k = 1; k <= kMaxCeChunks; ++k) EXPECT_EQ(ce_chunk_count(1, world, k), k);
  EXPECT_EQ(ce_chunk_count(1, 2, kMaxCeChunks + 5), kMaxCeChunks);
  const int64_t row = 8192 * 2;
  EXPECT_EQ(ce_chunk_count(128 * row, 2, 0), 1);
  EXPECT_EQ(ce_chunk_count(1024 * row, 2, 0), 2);
  EXPECT_EQ(ce_chunk_count(8192 * row, 2, 0), 4);
  EXPECT_EQ(ce_chunk_count(128 * row, 4, 0), 1);
  EXPECT_EQ(ce_chunk_count(1024 * row, 4, 0), 2);
  EXPECT_EQ(ce_chunk_count(2048 * row, 4, 0), 2);
  EXPECT_EQ(ce_chunk_count(8192 * row, 4, 0), 2);
  for (int world : {2, 3, 4, 8}) {
    int prev = 0;
    for (int64_t b = 1; b <= (int64_t(1) << 33); b *= 2) {
      const int k = ce_chunk_count(b, world, 0);
      EXPECT_GE(k, std::max(prev, 1));
      EXPECT_LE(k, world <= 2 ? 4 : 2);
      prev = k;
    }
  }
}

// CommOptions::copy_engine_chunks is checked before any NCCL call (no GPU needed).
TEST(CommOptionsCheck, CopyEngineChunksOutOfRange) {
  ncclUniqueId id{};
  for (int bad : {-1, kMaxCeChunks + 1}) {
    weft::CommOptions o;
    o.copy_engine_chunks = bad;
    try {
      weft::Communicator c(id, 0, 1, o);
      ADD_FAILURE() << "copy_engine_chunks " << bad << " accepted";
    } catch (const weft::Error& e) {
      EXPECT_EQ(e.argument(), "options.copy_engine_chunks");
    }
  }
}

using weft::test::thrown_argument;

void* fake(uintptr_t mib) { return reinterpret_cast<void*>(mib << 20); }


TEST(CommValidate, RejectsBadArgumentsNamingThem) {
  const int64_t T = 7, H = 2048;
  const std::size_t cap = std::size_t(T) * H * 2;
  TensorView x(fake(1), DType::kBFloat16, {T, H});
  TensorView res(fake(2), DType::kBFloat16, {T, H});
  TensorView w(fake(3), DType::kBFloat16, {H});
  TensorView out(fake(4), DType::kBFloat16, {T, H});
  TensorView none;
  auto call = [&](const TensorView& x_, const TensorView& r_, const TensorView& w_, double eps, const TensorView& o_,
                  int ctas, std::size_t capacity = 0, int dev = 0,
                  AllReduceVariant v = AllReduceVariant::kAuto) {
    return thrown_argument([&] { check_fused_args(x_, r_, w_, eps, o_, ctas, v, capacity ? capacity : cap, dev); });
  };
  EXPECT_EQ(call(x, res, w, 1e-6, none, 8), "<no throw>");
  EXPECT_EQ(call(x, res, w, 1e-6, out, 8), "<no throw>");
  EXPECT_EQ(call(x, res, w, 1e-6, x, 8), "<no throw>");  // explicit in place
  EXPECT_EQ(call(x, res, w, 1e-6, none, 0), "num_ctas");
  EXPECT_EQ(call(x, res, w, 1e-6, none, 33), "num_ctas");
  EXPECT_EQ(call(x, res, w, 1e-6, none, -1), "num_ctas");
  EXPECT_EQ(call(x, res, w, 1e-6, none, 8, 0, 0, static_cast<AllReduceVariant>(9)), "variant");
  EXPECT_EQ(call(TensorView(fake(1), DType::kBFloat16, {T, 2044}), res, w, 1e-6, none, 8), "x");
  EXPECT_EQ(call(TensorView(fake(1), DType::kBFloat16, {T, 16392}), res, w, 1e-6, none, 8), "x");
  EXPECT_EQ(call(TensorView(fake(1), DType::kFloat32, {T, H}), res, w, 1e-6, none, 8), "x");
  EXPECT_EQ(call(TensorView(fake(1), DType::kBFloat16, {T, H}, {H + 8, 1}), res, w, 1e-6, none, 8), "x");  // not row-contiguous
  EXPECT_EQ(call(x, res, w, 1e-6, none, 8, cap - 2), "x");          // over capacity
  EXPECT_EQ(call(x, res, w, 1e-6, none, 8, 0, /*dev=*/1), "x");     // wrong device
  EXPECT_EQ(call(x, TensorView(fake(2), DType::kFloat16, {T, H}), w, 1e-6, none, 8), "residual");
  EXPECT_EQ(call(x, TensorView(fake(2), DType::kBFloat16, {T + 1, H}), w, 1e-6, none, 8), "residual");
  EXPECT_EQ(call(x, x, w, 1e-6, none, 8), "residual");              // overlaps x
  EXPECT_EQ(call(x, res, TensorView(fake(3), DType::kBFloat16, {H + 8}), 1e-6, none, 8), "weight");
  EXPECT_EQ(call(x, res, w, 0.0, none, 8), "eps");
  EXPECT_EQ(call(x, res, w, 1e-6, TensorView(fake(4), DType::kBFloat16, {T, H + 8}), 8), "out");
  EXPECT_EQ(call(x, res, w, 1e-6, TensorView(fake(4), DType::kFloat16, {T, H}), 8), "out");
  EXPECT_EQ(call(x, res, w, 1e-6, res, 8), "out");                  // out overlaps residual
  // residual may be strided (16-byte aligned rows)
  EXPECT_EQ(call(x, TensorView(fake(2), DType::kBFloat16, {T, H}, {H + 8, 1}), w, 1e-6, none, 8), "<no throw>");
  // empty call is valid
  EXPECT_EQ(call(TensorView(fake(1), DType::kBFloat16, {0, H}), TensorView(fake(2), DType::kBFloat16, {0, H}), w,
                 1e-6, none, 1),
            "<no throw>");
}

TEST(CommNames, PathAndVariantNames) {
  EXPECT_STREQ(weft::comm_path_name(weft::CommPath::kLsa), "lsa");
  EXPECT_STREQ(weft::comm_path_name(weft::CommPath::kNcclFallback), "nccl_fallback");
  EXPECT_STREQ(weft::allreduce_variant_name(AllReduceVariant::kTwoShot), "two_shot");
}

}  // namespace
