// Tile heuristic (FlashInfer §3.2.2) and the instantiation list.
#include <gtest/gtest.h>

#include <algorithm>

#include "attention/heuristics.h"
#include "prefill/prefill_config.h"
#include "prefill/sm90/sm90_launch.h"
#include "weft/error.h"

namespace weft::prefill {
namespace {

TEST(PrefillTiles, QueryTileIsSmallestCoveringAverage) {
  EXPECT_EQ(choose_tiles(1, 128).cta_q, 16);
  EXPECT_EQ(choose_tiles(16, 128).cta_q, 16);
  EXPECT_EQ(choose_tiles(17, 128).cta_q, 64);
  EXPECT_EQ(choose_tiles(64, 128).cta_q, 64);
  EXPECT_EQ(choose_tiles(65, 128).cta_q, 128);
  EXPECT_EQ(choose_tiles(32768, 128).cta_q, 128);
}

TEST(PrefillTiles, KnownConfigurations) {
  EXPECT_EQ(choose_tiles(8192 * 4, 128), (TileConfig{128, 128, 64}));
  EXPECT_EQ(choose_tiles(8192, 64), (TileConfig{64, 128, 128}));
  EXPECT_EQ(choose_tiles(8192, 256), (TileConfig{256, 64, 32}));  // 128-row d256 tile too big
  EXPECT_EQ(choose_tiles(4, 128), (TileConfig{128, 16, 64}));
  EXPECT_EQ(choose_tiles(4, 256), (TileConfig{256, 16, 32}));
}

TEST(PrefillTiles, EveryChoiceIsInstantiatedAndWithinBudgets) {
  for (int d : {64, 128, 256}) {
    int prev_q = 0;
    for (double avg = 0.5; avg < 1e5; avg *= 1.37) {
      const TileConfig c = choose_tiles(avg, d);
      const auto& all = instantiated_configs();
      EXPECT_NE(std::find(all.begin(), all.end(), c), all.end()) << describe(c) << " avg " << avg;
      EXPECT_LE(smem_bytes_of(c.head_dim, c.cta_q, c.cta_kv), heuristics::kSmemBudget) << describe(c);
      EXPECT_LE(acc_regs_of(c.head_dim, c.cta_q, c.cta_kv), heuristics::kAccRegBudget) << describe(c);
      EXPECT_GE(c.cta_q, prev_q) << "query tile must not shrink as queries grow";
      prev_q = c.cta_q;
    }
  }
}

TEST(PrefillTiles, InstantiationsAreReachableAndWellFormed) {
  for (const TileConfig& c : instantiated_configs()) {
    bool reachable = false;
    for (double avg : {1.0, 40.0, 1000.0}) reachable |= choose_tiles(avg, c.head_dim) == c;
    EXPECT_TRUE(reachable) << describe(c) << " is compiled but never chosen";
    EXPECT_EQ(c.cta_q % 16, 0);
    EXPECT_EQ((c.cta_kv / warps_kv_of(c.head_dim, c.cta_q, c.cta_kv)) % 16, 0) << describe(c);
    EXPECT_EQ(threads_of(c.head_dim, c.cta_q, c.cta_kv) % (c.head_dim / 8), 0) << describe(c);
    EXPECT_GE(threads_of(c.head_dim, c.cta_q, c.cta_kv), 64) << describe(c);
  }
}

TEST(PrefillTiles, RejectsUnsupportedHeadDim) {
  try {
    choose_tiles(100, 96);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "head_dim");
  }
}

// The sm90 mainloop's shape rule for fp8 K/V pools (the device-independent part of
// sm90::eligible; PrefillMainloop::kSm90 is an error where it says no): bf16 q at head_dim 128,
// paged, page sizes 8..128 dividing 128 keys or multiples of 128, GQA groups dividing 128.
TEST(PrefillSm90Dispatch, Fp8Shapes) {
  using sm90::shape_supported;
  const DType bf16 = DType::kBFloat16, f16 = DType::kFloat16;
  for (DType f8 : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
    EXPECT_NE(sm90::find(128, bf16, f8).launch, nullptr);
    for (int64_t page : {8, 16, 32, 64, 128, 256})
      for (int32_t group : {1, 2, 4, 8, 16}) EXPECT_TRUE(shape_supported(128, bf16, group, true, page, f8));
    EXPECT_FALSE(shape_supported(128, bf16, 4, true, 1, f8));   // page 1: FA2
    EXPECT_FALSE(shape_supported(128, bf16, 4, true, 5, f8));   // page not tiling 128 keys
    EXPECT_FALSE(shape_supported(128, bf16, 4, true, 192, f8));
    EXPECT_FALSE(shape_supported(128, bf16, 3, true, 16, f8));  // group not dividing 128
    EXPECT_FALSE(shape_supported(128, bf16, 4, false, 0, f8));  // ragged: fp8 is a pool feature
    EXPECT_FALSE(shape_supported(128, f16, 4, true, 16, f8));   // f16 q: not instantiated
    EXPECT_FALSE(shape_supported(64, bf16, 4, true, 16, f8));
    EXPECT_FALSE(shape_supported(256, bf16, 4, true, 16, f8));
    EXPECT_EQ(sm90::find(64, bf16, f8).launch, nullptr);
    EXPECT_EQ(sm90::find(128, f16, f8).launch, nullptr);
  }
  EXPECT_FALSE(shape_supported(128, bf16, 4, true, 16, DType::kFloat32));
  // 16-bit pools unchanged: ragged and paged, every head dim.
  for (int32_t d : {64, 128, 256})
    for (DType t : {bf16, f16}) {
      EXPECT_TRUE(shape_supported(d, t, 4, false, 0, t));
      EXPECT_TRUE(shape_supported(d, t, 4, true, 16, t));
    }
}

}  // namespace
}  // namespace weft::prefill
