#!/usr/bin/env bash
# One device call for the prefix-sharing cost model (issue 21; heuristics::prefix_share_pays,
# DecodeOptions::prefix_cost_model), dev-box binaries carried xz-compressed (BIN=<dir with
# weft-bench.xz and weft_gpu_decode.xz>): the prefix-sharing GPU tests (PAT_TESTS, with
# SharePrefixesCostModelFallsBack), the whole "pat" bench group (the share row is now the
# wrapper's choice; share_forced the declined sharing plan), then compute-sanitizer memcheck on
# SAN_FILTER with what is left of BUDGET.
#   OUT=<dir> BIN=<dir> WEFT_COMMIT=<sha> [BUDGET=seconds] scripts/diag/pat_fallback_check.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib-pat.sh"
BIN="${BIN:?BIN: folder with weft-bench.xz and weft_gpu_decode.xz}"
pat_init
BUDGET="${BUDGET:-380}"
SAN_FILTER="${SAN_FILTER:-DecodeSmall.SharePrefixesCostModelFallsBack:DecodeSmall.SharePrefixesNoSharingFallsBack}"
pat_env
say unpack
pat_unpack weft-bench weft_gpu_decode

# The prefix-sharing tests and the two others whose options now turn the cost model off.
PAT_TESTS="$PAT_TESTS:DecodeBlockTableSmall.PrefixShareEqualsCsrBitwise:DecodeRouteSmall.AutoWithPrefixSharing"
pat_tests 100 "$X/weft_gpu_decode"

say "bench pat"
timeout 170 "$X/weft-bench" --group pat --commit "${WEFT_COMMIT:-?}" --json "$OUT/pat.json" > "$OUT/bench_pat.log" 2>&1
echo "bench pat rc=$?" | tee -a "$OUT/steps.log"

t=$(( $(left) - 5 ))
if [ $t -gt 20 ]; then pat_memcheck "$((t < 90 ? t : 90))" "$X/weft_gpu_decode" "$SAN_FILTER"; else say "memcheck skipped: budget"; fi
pat_finish tests_pat memcheck
rm -rf "$X"
