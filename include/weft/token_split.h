// Wave-aware token split (TokenWeave §3.1.1 "smart splitting"): a pure host planner, public so
// that a serving engine can split its batch before launching the overlapped GEMMs.
//
// A batch of M tokens feeds GEMMs tiled (tile_m x tile_n) over an [M, N] output: it launches
// ctas(M) = ceil(M / tile_m) * ceil(N / tile_n) CTAs, which run in waves(M) =
// ceil(ctas(M) / (sm_count * ctas_per_sm)) waves. Splitting M into M1 + M2 (to overlap the
// communication of one split with the compute of the other) must not add a wave:
//   waves(M1) + waves(M2) <= waves(M).
// The planner cuts at tile_m granularity (M1 a multiple of tile_m, M2 = M - M1 > 0) and picks,
// among wave-neutral cuts, the most balanced (min |M1 - M2|); ties go to the smaller M1 first
// (the prefix split finishes its compute earlier and starts communicating sooner).
// Example (the paper's): 300 CTAs on 132 SMs -> 132 + 168 CTAs (3 waves, like the unsplit GEMM).
// When no wave-neutral cut exists (e.g. the whole GEMM is one wave), `wave_neutral` is false and
// the split is the most balanced tile-aligned cut (the caller may decide not to split). When
// M <= tile_m there is no cut at all: m1 = M, m2 = 0, can_split = false.
#pragma once
#include <cstdint>

#include "weft/export.h"

namespace weft WEFT_API {

struct TokenSplitProblem {
  int64_t tokens = 0;    // M
  int64_t n = 0;         // output columns of the GEMM
  int64_t tile_m = 128;
  int64_t tile_n = 128;
  int64_t sm_count = 132;
  int64_t ctas_per_sm = 1;  // resident CTAs per SM (occupancy) -> wave width sm_count * ctas_per_sm
};

struct TokenSplit {
  int64_t m1 = 0, m2 = 0;
  int64_t ctas1 = 0, ctas2 = 0, ctas_total = 0;
  int64_t waves1 = 0, waves2 = 0, waves_total = 0;
  bool can_split = false;     // a tile-aligned cut with both parts non-empty exists
  bool wave_neutral = false;  // waves1 + waves2 <= waves_total
};

int64_t gemm_ctas(const TokenSplitProblem& p, int64_t m);
int64_t gemm_waves(const TokenSplitProblem& p, int64_t ctas);

// Throws weft::Error for tokens < 0 or non-positive n, tiles, sm_count, ctas_per_sm.
TokenSplit plan_token_split(const TokenSplitProblem& p);

}  // namespace weft
