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
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
OUT="${OUT:-$ROOT/pat-out}"
mkdir -p "$OUT"
B="$ROOT/build-pat"
BUDGET="${BUDGET:-380}"
JOBS="${JOBS:-16}"
SELECTORS="${SELECTORS:-64 256 64:2048 256:4096}"
T0=$SECONDS
say() { echo "=== [$((SECONDS - T0))s] $*" | tee -a "$OUT/steps.log"; }
left() { echo $((BUDGET - (SECONDS - T0))); }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUT/env.txt"
echo "commit ${WEFT_COMMIT:-?}" | tee -a "$OUT/env.txt"

say build
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a -DWEFT_BUILD_TESTS=ON \
  -DWEFT_BUILD_BENCH=ON -DWEFT_WITH_COMM=OFF -DWEFT_DISABLE="comm;prefill;tp;pod;norm" > "$OUT/build.log" 2>&1 || { say "configure failed"; tail -30 "$OUT/build.log"; }
timeout 210 ninja -C "$B" -j"$JOBS" weft_gpu_decode weft-bench >> "$OUT/build.log" 2>&1
rc=$?
say "build rc=$rc"
[ $rc -ne 0 ] && { grep -E "error|FAILED" "$OUT/build.log" | head -30; }

PACK_TESTS='DecodeSmall.WorkPlanPacksMatchReference:DecodeSmall.SharePrefixes*:DecodeSmall.CascadeLevels*'
say tests
timeout 70 "$B/tests/weft_gpu_decode" --gtest_brief=1 --gtest_filter="$PACK_TESTS" > "$OUT/tests_pat.log" 2>&1
echo "pat tests rc=$?" | tee -a "$OUT/steps.log"
grep -E "PASSED|FAILED|Failure|tests ran" "$OUT/tests_pat.log" | head -20

say "bench default selector"
timeout 40 "$B/bench/weft-bench" --group pat --commit "${WEFT_COMMIT:-?}" --json "$OUT/pat_default.json" > "$OUT/bench_default.log" 2>&1
echo "bench default rc=$?" | tee -a "$OUT/steps.log"
for sel in $SELECTORS; do
  rows="${sel%%:*}"
  args=(--pat-wide-min-rows "$rows")
  tag="w$rows"
  if [ "$sel" != "$rows" ]; then args+=(--pat-wide-min-keys "${sel#*:}"); tag="w${rows}k${sel#*:}"; fi
  say "bench ${args[*]}"
  timeout 40 "$B/bench/weft-bench" --group pat "${args[@]}" --commit "${WEFT_COMMIT:-?}" \
    --json "$OUT/pat_$tag.json" > "$OUT/bench_$tag.log" 2>&1
  echo "bench $tag rc=$?" | tee -a "$OUT/steps.log"
done

say memcheck
timeout 70 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tests/weft_gpu_decode" --gtest_brief=1 \
  --gtest_filter=DecodeSmall.SharePrefixesWidePacks > "$OUT/memcheck.log" 2>&1
echo "memcheck rc=$?" | tee -a "$OUT/steps.log"
grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/memcheck.log" | tail -4

t=$(( $(left) - 60 ))
if [ $t -gt 20 ]; then
  say racecheck
  timeout "$((t < 90 ? t : 90))" compute-sanitizer --tool racecheck --error-exitcode 9 "$B/tests/weft_gpu_decode" \
    --gtest_brief=1 --gtest_filter=DecodeSmall.SharePrefixesWidePacks > "$OUT/racecheck.log" 2>&1
  echo "racecheck rc=$? (124: out of time)" | tee -a "$OUT/steps.log"
  grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED" "$OUT/racecheck.log" | tail -4
else
  say "racecheck skipped: budget"
fi

t=$(( $(left) - 8 ))
if [ $t -gt 20 ]; then
  say "decode suite"
  timeout "$t" "$B/tests/weft_gpu_decode" --gtest_brief=1 > "$OUT/tests_decode.log" 2>&1
  echo "decode suite rc=$? (124: out of time)" | tee -a "$OUT/steps.log"
else
  say "decode suite skipped: budget"
fi
say "all done"
{
  cat "$OUT/env.txt" "$OUT/steps.log"
  for f in build tests_pat memcheck racecheck tests_decode; do
    [ -f "$OUT/$f.log" ] || continue
    echo "----- $f.log (filtered)"
    grep -E "error|FAILED|Failure|PASSED|SUMMARY|rc=|tests ran|Expected|Which is|actual|OK \]" "$OUT/$f.log" | head -60
  done
  for f in "$OUT"/bench_*.log; do
    echo "----- $(basename "$f") (summary)"
    grep -E "summary|nosharing|FAIL|error|group pat" "$f" | head -10
  done
} > "$OUT/check.txt"
rm -f "$OUT"/*.log "$OUT/env.txt"
