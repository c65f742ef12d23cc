#!/usr/bin/env bash
# One device call for PAT (issue 21): build only what it needs (comm, prefill, tp left out:
# WEFT_DISABLE), the decode GPU suite (the prefix-sharing tests and every other decode test: the
# item pipeline they share changed), compute-sanitizer memcheck on the prefix-sharing tests and
# racecheck (RACE_FILTER, default the wide-pack test, with the time left), weft-bench's "pat" group,
# and FlashInfer's decode + multi-level cascade on the same batches (bench/fi_pat.py, the kit in
# .baselines) in the same call.
#   OUT=<dir> WEFT_COMMIT=<sha> [BASELINES=<kit folder, default ./.baselines>] [BUDGET=seconds]
#   [STAGES="build tests san bench fi"] [JOBS=16] [RACE_FILTER=gtest filter] scripts/diag/pat_check.sh
# (The dev box dry-run: JOBS=2 STAGES=build, under nice.)
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib-pat.sh"
pat_init
B="$ROOT/build-pat"
STAGES="${STAGES:-build tests san bench fi}"
BASELINES="${BASELINES:-$ROOT/.baselines}"
BUDGET="${BUDGET:-430}"
JOBS="${JOBS:-16}"
RACE_FILTER="${RACE_FILTER:-DecodeSmall.SharePrefixesWidePacks}"
has() { [[ " $STAGES " == *" $1 "* ]]; }
pat_env

if has fi; then  # FlashInfer's wheels install while weft builds
  (python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$BASELINES"/whl/*.whl \
     > "$OUT/fi_install.log" 2>&1; echo "rc=$?" >> "$OUT/fi_install.log") &
fi

if has build; then pat_build 240; fi

PACK_TESTS='DecodeSmall.WorkPlanPacksMatchReference:DecodeSmall.SharePrefixes*:DecodeSmall.CascadeLevelsMatchReference'
if has tests; then
  say tests
  # The prefix-sharing tests twice (bitwise repeatability across processes is checked
  # inside each; repeats catch order-dependent state), then the whole decode suite once.
  timeout 90 "$B/tests/weft_gpu_decode" --gtest_brief=1 --gtest_filter="$PACK_TESTS" --gtest_repeat=2 > "$OUT/tests_pat.log" 2>&1
  echo "pat tests rc=$?" | tee -a "$OUT/steps.log"
  grep -E "PASSED|FAILED|Failure" "$OUT/tests_pat.log" | head -20
  say "pat tests done"
fi

if has san; then  # memcheck now; racecheck (slow) with what is left at the end
  say memcheck
  timeout 110 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tests/weft_gpu_decode" --gtest_brief=1 \
    --gtest_filter="$PACK_TESTS" > "$OUT/memcheck.log" 2>&1
  echo "memcheck rc=$?" | tee -a "$OUT/steps.log"
  grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/memcheck.log" | tail -4
fi

if has bench; then
  say bench
  timeout 150 "$B/bench/weft-bench" --group pat --commit "${WEFT_COMMIT:-?}" --json "$OUT/pat.json" > "$OUT/bench.log" 2>&1
  echo "bench rc=$?" | tee -a "$OUT/steps.log"
  grep -E "summary|nosharing|FAIL|error" "$OUT/bench.log" | head -20
  say "bench done"
fi

if has fi; then
  say fi
  grep rc= "$OUT/fi_install.log"
  fi_budget=$(( $(left) - 120 ))
  [ $fi_budget -gt 110 ] && fi_budget=110
  if [ $fi_budget -gt 20 ]; then
    PYTHONPATH=/tmp/site timeout $((fi_budget + 40)) python3 bench/fi_pat.py --kit "$BASELINES" --out "$OUT/fi_pat.json" \
      --budget "$fi_budget" > "$OUT/fi_pat.log" 2>&1
    echo "fi rc=$?" | tee -a "$OUT/steps.log"
    tail -n 5 "$OUT/fi_pat.log"
  else
    say "fi skipped: budget"
  fi
fi

if has tests; then  # the whole decode suite (the item pipeline changed) with what is left
  t=$(( $(left) - 25 ))
  if [ $t -gt 30 ]; then
    say "decode suite"
    timeout "$t" "$B/tests/weft_gpu_decode" --gtest_brief=1 > "$OUT/tests_decode.log" 2>&1
    echo "decode suite rc=$? (124: out of time)" | tee -a "$OUT/steps.log"
    grep -E "PASSED|FAILED|Failure|tests ran" "$OUT/tests_decode.log" | head -20
  else
    say "decode suite skipped: budget"
  fi
fi

if has san; then
  t=$(( $(left) - 3 ))
  if [ $t -gt 15 ]; then
    say racecheck
    timeout "$t" compute-sanitizer --tool racecheck --error-exitcode 9 "$B/tests/weft_gpu_decode" --gtest_brief=1 \
      --gtest_filter="$RACE_FILTER" > "$OUT/racecheck.log" 2>&1
    echo "racecheck rc=$? (124: out of time)" | tee -a "$OUT/steps.log"
    grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED" "$OUT/racecheck.log" | tail -4
  else
    say "racecheck skipped: budget"
  fi
fi
say "all done"
# At most 8 files come back from a device call: the two JSONs and one text file with the logs'
# summaries (check.txt); the full logs are dropped.
{
  cat "$OUT/env.txt" "$OUT/steps.log"
  for f in build tests_pat memcheck bench fi_install fi_pat tests_decode racecheck; do
    [ -f "$OUT/$f.log" ] || continue
    echo "----- $f.log (filtered)"
    grep -E "error|FAILED|Failure|PASSED|SUMMARY|rc=|tests ran|summary|nosharing|Expected|Which is|actual|OK \]" "$OUT/$f.log" | head -60
  done
  echo "----- bench.log"
  tail -n 120 "$OUT/bench.log" 2>/dev/null
} > "$OUT/check.txt"
rm -f "$OUT"/*.log "$OUT/env.txt"
