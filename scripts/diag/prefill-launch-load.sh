#!/usr/bin/env bash
# Diagnostic (dev box, host only): which prefill work each LAUNCHED CTA runs, for an old tree
# without head folding (5427bc0: launched CTA = plan CTA) and this tree (head-folded plans
# launched sub-head major, plan::plan_cta_of), and the load per SM if the co-resident CTAs of a
# 2-CTA/SM grid are c and c + grid/2 (the block scheduler's first wave of one CTA per SM, then
# the second). Load of an item: its keys + cta_kv (the planner's alpha term, PrefillPlanner).
# Issue 19's row prefill/causal/ragged-q64/L<L> (Llama-3-8B heads 32/8, causal, one request,
# the 64-row FA2 tile, cta_kv 64, 2 CTAs/SM on 132 SMs: grid 264).
# Usage (repo root): scripts/diag/prefill-launch-load.sh <old source tree> [L ...]
#   (old tree: `git archive 5427bc0 | tar -x -C <dir>`; this tree needs a configured build-rel/
#   or build/ for the generated instance header)
set -euo pipefail
OLD=${1:?usage: prefill-launch-load.sh <old source tree> [L ...]}
shift
LENS=${*:-4096 16384}
NEW=$(pwd)
GEN=$(dirname "$(dirname "$(find "$NEW"/build-rel "$NEW"/build -path '*generated/weft_gen/instances.h' 2>/dev/null | head -1)")")
TMP=$(mktemp -d)
cat > "$TMP/dump.cpp" <<'CPP'
#include <cstdio>
#include <cstdlib>
#include "prefill/prefill_plan.h"
// dump L grid: one line per launched CTA: "c keys" (sum over its items of kv keys + cta_kv)
int main(int argc, char** argv) {
  const int L = atoi(argv[1]), grid = atoi(argv[2]);
  weft::prefill::PlanRequest r;
  r.qo_len = {L};
  r.kv_len = {L};
  r.num_kv_heads = 8;
  r.group_size = 4;
  r.causal = true;
  r.cta_q = 64;
  r.cta_kv = 64;
  r.num_ctas = grid;
  int fold = 1;
#ifdef FOLDED
  fold = r.head_fold = weft::prefill::prefill_head_fold(r.num_kv_heads, grid);
#endif
  const weft::plan::Plan& p = weft::prefill::make_plan(r).plan;
  const int P = grid / fold;
  for (int c = 0; c < grid; ++c) {
    const int pc = c % P;  // plan::plan_cta_of (identity without folding)
    long keys = 0;
    for (int i = p.cta_indptr[pc]; i < p.cta_indptr[pc + 1]; ++i) keys += p.item_kv_end[i] - p.item_kv_begin[i] + r.cta_kv;
    printf("%d %ld\n", c, keys);
  }
}
CPP
g++ -std=c++17 -O1 -I"$OLD/src" -I"$OLD/include" "$TMP/dump.cpp" "$OLD/src/prefill/prefill_plan.cpp" \
  "$OLD/src/attention/plan/balance.cpp" -o "$TMP/old"
g++ -std=c++17 -O1 -DFOLDED -I"$NEW/src" -I"$NEW/include" -I"$GEN" "$TMP/dump.cpp" "$NEW/src/prefill/prefill_plan.cpp" \
  "$NEW"/src/attention/plan/balance*.cpp "$NEW/src/attention/plan/plan_layout.cpp" "$NEW/src/attention/heuristics.cpp" -o "$TMP/new"
for L in $LENS; do
  for t in old new; do
    "$TMP/$t" "$L" 264 | awk -v t="$t" -v L="$L" '
      { k[$1] = $2; n++ }
      END { h = n / 2; mx = 0; mn = -1; s = 0; cm = 0
            for (c = 0; c < n; c++) if (k[c] > cm) cm = k[c]
            for (c = 0; c < h; c++) { v = k[c] + k[c + h]; s += v; if (v > mx) mx = v; if (mn < 0 || v < mn) mn = v }
            printf "L%-6d %s: CTA max %d keys; SM pair (c, c+%d) max %d avg %.0f min %d, max/avg %.4f\n", L, t, cm, h, mx, s / h, mn, mx / (s / h) }'
  done
done
rm -rf "$TMP"
