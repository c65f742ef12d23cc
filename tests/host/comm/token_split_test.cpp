// Host tests: wave-aware token split (TokenWeave §3.1.1), against the paper's example and a
// brute-force search on random problems.
#include <gtest/gtest.h>

#include <cstdlib>

#include "weft/token_split.h"
#include "common/test_util.h"
#include "weft/error.h"

namespace {

using weft::gemm_ctas;
using weft::gemm_waves;
using weft::plan_token_split;
using weft::TokenSplit;
using weft::TokenSplitProblem;

TEST(TokenSplit, PaperExample300CtasOn132Sms) {
  TokenSplitProblem p;
  p.tile_m = 128;
  p.tile_n = 128;
  p.n = 128;               // one CTA column: CTAs == M tiles
  p.tokens = 300 * 128;    // 300 CTAs
  p.sm_count = 132;
  const TokenSplit s = plan_token_split(p);
  EXPECT_EQ(s.ctas_total, 300);
  EXPECT_EQ(s.waves_total, 3);
  EXPECT_TRUE(s.can_split);
  EXPECT_TRUE(s.wave_neutral);
  EXPECT_EQ(s.ctas1, 132);
  EXPECT_EQ(s.ctas2, 168);
  EXPECT_EQ(s.waves1 + s.waves2, 3);
  EXPECT_EQ(s.m1 + s.m2, p.tokens);
  // The even split would cost a fourth wave.
  EXPECT_EQ(2 * gemm_waves(p, gemm_ctas(p, 150 * 128)), 4);
}

TEST(TokenSplit, SameExampleWithSeveralColumnsAndRaggedTail) {
  TokenSplitProblem p;
  p.tile_m = 64;
  p.tile_n = 256;
  p.n = 4 * 256;           // 4 CTAs per M tile -> 75 M tiles = 300 CTAs
  p.tokens = 75 * 64 - 17; // ragged last tile: still 75 tiles
  p.sm_count = 132;
  const TokenSplit s = plan_token_split(p);
  EXPECT_EQ(s.ctas_total, 300);
  EXPECT_TRUE(s.wave_neutral);
  EXPECT_EQ(s.waves1 + s.waves2, 3);
  EXPECT_EQ(s.m1 % p.tile_m, 0);
  EXPECT_EQ(s.m1 + s.m2, p.tokens);
  EXPECT_EQ(s.ctas1, 132);  // 33 tiles: the most balanced wave-neutral cut
}

TEST(TokenSplit, NothingToCutAndOneWave) {
  TokenSplitProblem p;
  p.n = 4096;
  p.tokens = 100;  // < tile_m
  TokenSplit s = plan_token_split(p);
  EXPECT_FALSE(s.can_split);
  EXPECT_EQ(s.m1, 100);
  EXPECT_EQ(s.m2, 0);
  p.tokens = 0;
  s = plan_token_split(p);
  EXPECT_FALSE(s.can_split);
  EXPECT_EQ(s.ctas_total, 0);
  // 2 M tiles x 32 column tiles = 64 CTAs: one wave; any cut costs two -> not wave neutral,
  // still the most balanced cut.
  p.tokens = 256;
  s = plan_token_split(p);
  EXPECT_TRUE(s.can_split);
  EXPECT_FALSE(s.wave_neutral);
  EXPECT_EQ(s.m1, 128);
  EXPECT_EQ(s.m2, 128);
}

TEST(TokenSplit, RejectsBadProblems) {
  TokenSplitProblem p;
  p.n = 128;
  p.tokens = -1;
  EXPECT_THROW(plan_token_split(p), weft::Error);
  p.tokens = 10;
  p.tile_m = 0;
  EXPECT_THROW(plan_token_split(p), weft::Error);
  p.tile_m = 128;
  p.sm_count = 0;
  EXPECT_THROW(plan_token_split(p), weft::Error);
  p.sm_count = 132;
  p.n = 0;
  EXPECT_THROW(plan_token_split(p), weft::Error);
}

TEST(TokenSplit, RandomizedAgainstBruteForce) {
  auto rng = weft::test::Rng::for_current_test();
  for (int it = 0; it < 3000; ++it) {
    TokenSplitProblem p;
    const int64_t tm[] = {16, 64, 128, 256};
    p.tile_m = tm[rng.randint(0, 3)];
    p.tile_n = tm[rng.randint(0, 3)];
    p.n = rng.randint(1, 16384);
    p.tokens = rng.randint(0, 20000);
    p.sm_count = rng.randint(1, 160);
    p.ctas_per_sm = rng.randint(1, 3);
    const TokenSplit s = plan_token_split(p);
    const int64_t tiles = (p.tokens + p.tile_m - 1) / p.tile_m;
    ASSERT_EQ(s.ctas_total, gemm_ctas(p, p.tokens));
    ASSERT_EQ(s.waves_total, gemm_waves(p, s.ctas_total));
    ASSERT_EQ(s.m1 + s.m2, p.tokens);
    ASSERT_EQ(s.can_split, tiles >= 2);
    if (!s.can_split) continue;
    ASSERT_GT(s.m1, 0);
    ASSERT_GT(s.m2, 0);
    ASSERT_EQ(s.m1 % p.tile_m, 0);
    ASSERT_EQ(s.ctas1, gemm_ctas(p, s.m1));
    ASSERT_EQ(s.ctas2, gemm_ctas(p, s.m2));
    ASSERT_EQ(s.waves1, gemm_waves(p, s.ctas1));
    ASSERT_EQ(s.waves2, gemm_waves(p, s.ctas2));
    ASSERT_EQ(s.wave_neutral, s.waves1 + s.waves2 <= s.waves_total);
    // brute force: best (most balanced, then smallest m1) among wave-neutral cuts, else among all
    int64_t best = -1, best_imb = 0;
    bool any_neutral = false;
    for (int pass = 0; pass < 2 && best < 0; ++pass) {
      for (int64_t k = 1; k < tiles; ++k) {
        const int64_t m1 = k * p.tile_m, m2 = p.tokens - m1;
        const bool neutral = gemm_waves(p, gemm_ctas(p, m1)) + gemm_waves(p, gemm_ctas(p, m2)) <= s.waves_total;
        any_neutral = any_neutral || neutral;
        if (pass == 0 && !neutral) continue;
        const int64_t imb = std::llabs(m1 - m2);
        if (best < 0 || imb < best_imb) {
          best = m1;
          best_imb = imb;
        }
      }
    }
    ASSERT_EQ(s.wave_neutral, any_neutral);
    ASSERT_EQ(s.m1, best) << "tokens " << p.tokens << " n " << p.n << " tile " << p.tile_m << "x" << p.tile_n
                          << " sms " << p.sm_count << "x" << p.ctas_per_sm;
  }
}

}  // namespace
