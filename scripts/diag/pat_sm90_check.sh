#!/usr/bin/env bash
# One device call for the wide packs on the Hopper mainloop (issue 21, DecodeOptions::prefix_wide_sm90),
# with binaries built on the dev box (Release, 90a) and carried xz-compressed (no device build):
# BIN=<dir with weft-bench.xz and weft_gpu_decode.xz>. Steps: the prefix-sharing GPU tests
# (SharePrefixes* incl. SharePrefixesWidePacks (sm90 / FA2 / 32-row, overlapped vs serial bitwise,
# 20 graph replays) and SharePrefixesWideSm90Selection (consecutive vs interleaved sharers, 20 graph
# replays), CascadeLevels*, WorkPlanPacksMatchReference), weft-bench --group pat (share rows on the
# sm90 mainloop where chosen, share_fa2 rows: the same plan on the FA2 tile, same call), memcheck
# and racecheck on the two wide tests, the whole decode suite with what is left.
#   OUT=<dir> BIN=<dir> WEFT_COMMIT=<sha> [BUDGET=seconds] scripts/diag/pat_sm90_check.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib-pat.sh"
BIN="${BIN:?BIN: folder with weft-bench.xz and weft_gpu_decode.xz}"
pat_init
BUDGET="${BUDGET:-390}"
pat_env

say unpack
pat_unpack weft-bench weft_gpu_decode
ls -la "$X" | tee -a "$OUT/steps.log"

WIDE='DecodeSmall.SharePrefixesWidePacks:DecodeSmall.SharePrefixesWideSm90Selection'
pat_tests 90 "$X/weft_gpu_decode"

say "bench pat"
timeout 110 "$X/weft-bench" --group pat --commit "${WEFT_COMMIT:-?}" --json "$OUT/pat.json" > "$OUT/bench_pat.log" 2>&1
echo "bench pat rc=$?" | tee -a "$OUT/steps.log"
grep -E "summary" -A3 "$OUT/bench_pat.log" | head -8

pat_memcheck 70 "$X/weft_gpu_decode" "$WIDE"
pat_racecheck 40 70 "$X/weft_gpu_decode" DecodeSmall.SharePrefixesWideSm90Selection
pat_decode_suite 6 15 "$X/weft_gpu_decode"
cp "$OUT/bench_pat.log" "$OUT/bench_pat.txt" 2>/dev/null
pat_finish tests_pat memcheck racecheck tests_decode
rm -rf "$X"
