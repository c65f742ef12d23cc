#!/usr/bin/env bash
# One device call for the overlapped wide launch (issue 21, DecodeOptions::prefix_wide_overlap):
# build (comm, tp, norm, pod, prefill left out: WEFT_DISABLE), the prefix-sharing GPU tests
# (SharePrefixes*, CascadeLevels*, WorkPlanPacksMatchReference; SharePrefixesWidePacks holds the
# overlapped / serial bitwise check and 20 graph replays), weft-bench --group pat at the shipped
# selector and at the lower ones in SELECTORS ("rows[:keys]", --pat-wide-min-rows /
# --pat-wide-min-keys; each run has share (overlapped) and share_serial rows), memcheck and
# racecheck on SharePrefixesWidePacks, then the whole decode suite with what is left.
# Model: pat_chunk_check.sh.
#   OUT=<dir> WEFT_COMMIT=<sha> [BUDGET=seconds] [JOBS=16] [SELECTORS="64 256 64:2048 256:4096"] scripts/diag/pat_overlap_check.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib-pat.sh"
pat_init
B="$ROOT/build-pat"
BUDGET="${BUDGET:-380}"
JOBS="${JOBS:-16}"
SELECTORS="${SELECTORS:-64 256 64:2048 256:4096}"
pat_env

pat_build 210
pat_tests 70 "$B/tests/weft_gpu_decode"

pat_bench default
for sel in $SELECTORS; do
  rows="${sel%%:*}"
  args=(--pat-wide-min-rows "$rows")
  tag="w$rows"
  if [ "$sel" != "$rows" ]; then args+=(--pat-wide-min-keys "${sel#*:}"); tag="w${rows}k${sel#*:}"; fi
  pat_bench "$tag" "${args[@]}"
done

pat_memcheck 70 "$B/tests/weft_gpu_decode" DecodeSmall.SharePrefixesWidePacks
pat_racecheck 60 90 "$B/tests/weft_gpu_decode" DecodeSmall.SharePrefixesWidePacks
pat_decode_suite 8 20 "$B/tests/weft_gpu_decode"
pat_finish build tests_pat memcheck racecheck tests_decode
