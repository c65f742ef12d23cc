#include "weft/token_split.h"

#include "weft/error.h"

namespace weft {

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

int64_t gemm_ctas(const TokenSplitProblem& p, int64_t m) {
  return ceil_div(m, p.tile_m) * ceil_div(p.n, p.tile_n);
}

int64_t gemm_waves(const TokenSplitProblem& p, int64_t ctas) {
  return ceil_div(ctas, p.sm_count * p.ctas_per_sm);
}

TokenSplit plan_token_split(const TokenSplitProblem& p) {
  WEFT_CHECK_ARG(p.tokens >= 0, "tokens", "must be >= 0, got " << p.tokens);
  WEFT_CHECK_ARG(p.n > 0, "n", "must be > 0, got " << p.n);
  WEFT_CHECK_ARG(p.tile_m > 0, "tile_m", "must be > 0, got " << p.tile_m);
  WEFT_CHECK_ARG(p.tile_n > 0, "tile_n", "must be > 0, got " << p.tile_n);
  WEFT_CHECK_ARG(p.sm_count > 0, "sm_count", "must be > 0, got " << p.sm_count);
  WEFT_CHECK_ARG(p.ctas_per_sm > 0, "ctas_per_sm", "must be > 0, got " << p.ctas_per_sm);

  TokenSplit s;
  s.ctas_total = gemm_ctas(p, p.tokens);
  s.waves_total = gemm_waves(p, s.ctas_total);
  const int64_t tiles = ceil_div(p.tokens, p.tile_m);
  if (tiles < 2) {  // nothing to cut
    s.m1 = p.tokens;
    s.ctas1 = s.ctas_total;
    s.waves1 = s.waves_total;
    s.wave_neutral = true;
    return s;
  }
  s.can_split = true;
  // Scan every tile-aligned cut: O(tiles), tiles <= tokens / tile_m (a few thousand at most).
  int64_t best_k = -1, best_imbalance = 0;       // best wave-neutral cut
  int64_t bal_k = -1, bal_imbalance = 0;         // most balanced cut of all
  for (int64_t k = 1; k < tiles; ++k) {
    const int64_t m1 = k * p.tile_m, m2 = p.tokens - m1;
    const int64_t imbalance = m1 > m2 ? m1 - m2 : m2 - m1;
    // strict '<' keeps the smaller m1 on ties (k increases)
    if (bal_k < 0 || imbalance < bal_imbalance) { bal_k = k; bal_imbalance = imbalance; }
    const int64_t w = gemm_waves(p, gemm_ctas(p, m1)) + gemm_waves(p, gemm_ctas(p, m2));
    if (w <= s.waves_total && (best_k < 0 || imbalance < best_imbalance)) {
      best_k = k;
      best_imbalance = imbalance;
    }
  }
  s.wave_neutral = best_k >= 0;
  const int64_t k = s.wave_neutral ? best_k : bal_k;
  s.m1 = k * p.tile_m;
  s.m2 = p.tokens - s.m1;
  s.ctas1 = gemm_ctas(p, s.m1);
  s.ctas2 = gemm_ctas(p, s.m2);
  s.waves1 = gemm_waves(p, s.ctas1);
  s.waves2 = gemm_waves(p, s.ctas2);
  return s;
}

}  // namespace weft
