// Pins every decision of src/attention/heuristics.cpp: a change of a heuristic must be a change
// of this test too (with the measurement that justifies it in heuristics.cpp).
#include <gtest/gtest.h>

#include <initializer_list>

#include "attention/heuristics.h"
#include "weft/error.h"

namespace weft::heuristics {
namespace {

TEST(Heuristics, DecodePathCudaCoresOnlyForGroupsOneAndTwoAtD128) {
  EXPECT_EQ(kTensorCoreMinGroup, 3);
  for (int32_t g = 1; g <= 64; ++g) {
    EXPECT_EQ(decode_prefers_cuda_cores(g, 128), g <= 2) << "group " << g;
    EXPECT_FALSE(decode_prefers_cuda_cores(g, 64)) << "D64 group " << g;
    EXPECT_FALSE(decode_prefers_cuda_cores(g, 256)) << "D256 group " << g;
  }
}

TEST(Heuristics, DecodeCtaShapeTwoStagesFourWarpsAtEveryHeadDim) {
  for (int32_t d : {64, 128, 256}) {
    EXPECT_EQ(decode_default_stages(d), 2) << "D" << d;
    EXPECT_EQ(decode_default_warps(d), 4) << "D" << d;
  }
}

TEST(Heuristics, PrefillTilesTable) {
  EXPECT_EQ(kSmemBudget, 113u * 1024u);
  EXPECT_EQ(kAccRegBudget, 192);
  struct Row {
    double avg;
    int32_t d, cta_q, cta_kv;
  };
  const Row rows[] = {
      {1, 64, 16, 128},   {16, 64, 16, 128},   {17, 64, 64, 128},   {64, 64, 64, 128},
      {65, 64, 128, 128}, {1e5, 64, 128, 128}, {1, 128, 16, 64},    {16, 128, 16, 64},
      {17, 128, 64, 64},  {64, 128, 64, 64},   {65, 128, 128, 64},  {1e5, 128, 128, 64},
      {1, 256, 16, 32},   {16, 256, 16, 32},   {17, 256, 64, 32},   {64, 256, 64, 32},
      {65, 256, 64, 32},  {1e5, 256, 64, 32},  {0, 128, 16, 64},
  };
  for (const Row& r : rows) {
    const PrefillTiles t = prefill_tiles(r.avg, r.d);
    EXPECT_EQ(t.cta_q, r.cta_q) << "avg " << r.avg << " D" << r.d;
    EXPECT_EQ(t.cta_kv, r.cta_kv) << "avg " << r.avg << " D" << r.d;
  }
  for (int32_t d : {0, 32, 96, 512}) {
    try {
      prefill_tiles(100, d);
      ADD_FAILURE() << "head_dim " << d << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), "head_dim");
    }
  }
}

// kAuto's mainloop: the Hopper one on the wide tile, 16-bit and fp8 pools (its fp8 instances
// measured 1.39-1.61x the FA2 kernel's, heuristics.cpp); never on a narrow tile.
TEST(Heuristics, PrefillAutoMainloop) {
  EXPECT_TRUE(prefill_auto_prefers_sm90(true, false));
  EXPECT_TRUE(prefill_auto_prefers_sm90(true, true));
  EXPECT_FALSE(prefill_auto_prefers_sm90(false, false));
  EXPECT_FALSE(prefill_auto_prefers_sm90(false, true));
}

TEST(Heuristics, PersistentGridFillsEverySm) {
  EXPECT_EQ(persistent_grid(132, 2), 264);
  EXPECT_EQ(persistent_grid(132, 1), 132);
  EXPECT_EQ(persistent_grid(132, 0), 132);  // at least one CTA per SM
  EXPECT_EQ(persistent_grid(114, 3), 342);
}

}  // namespace
}  // namespace weft::heuristics
