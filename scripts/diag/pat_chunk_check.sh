#!/usr/bin/env bash
# One device call for wide items cut from their own work (issue 21, PackPlanScratch::wide_chunk):
# build (comm, tp, norm, pod, prefill left out: WEFT_DISABLE), the prefix-sharing GPU tests
# (SharePrefixes*, CascadeLevels*, WorkPlanPacksMatchReference), memcheck on
# SharePrefixesWidePacks, then weft-bench --group pat at the shipped tile selector
# (heuristics::kPackWideMinRows) and at lower ones (--pat-wide-min-rows) in the same call, then
# the whole decode suite with what is left. Model: pat_check.sh.
#   OUT=<dir> WEFT_COMMIT=<sha> [BUDGET=seconds] [JOBS=16] [LOWER="64 256"] scripts/diag/pat_chunk_check.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib-pat.sh"
pat_init
B="$ROOT/build-pat"
BUDGET="${BUDGET:-280}"
JOBS="${JOBS:-16}"
LOWER="${LOWER:-64 256}"
pat_env

pat_build 200
pat_tests 60 "$B/tests/weft_gpu_decode"
pat_memcheck 60 "$B/tests/weft_gpu_decode" DecodeSmall.SharePrefixesWidePacks

pat_bench default
for n in $LOWER; do pat_bench "w$n" --pat-wide-min-rows "$n"; done

pat_decode_suite 10 20 "$B/tests/weft_gpu_decode"
pat_finish build tests_pat memcheck tests_decode
