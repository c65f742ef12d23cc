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
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
OUT="${OUT:-$ROOT/pat-out}"
BIN="${BIN:?BIN: folder with weft-bench.xz and weft_gpu_decode.xz}"
mkdir -p "$OUT"
BUDGET="${BUDGET:-390}"
T0=$SECONDS
say() { echo "=== [$((SECONDS - T0))s] $*" | tee -a "$OUT/steps.log"; }
left() { echo $((BUDGET - (SECONDS - T0))); }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUT/env.txt"
echo "commit ${WEFT_COMMIT:-?}" | tee -a "$OUT/env.txt"

X="$(mktemp -d)"
say unpack
for b in weft-bench weft_gpu_decode; do xz -dc "$BIN/$b.xz" > "$X/$b" && chmod +x "$X/$b"; done
ls -la "$X" | tee -a "$OUT/steps.log"

WIDE='DecodeSmall.SharePrefixesWidePacks:DecodeSmall.SharePrefixesWideSm90Selection'
PACK_TESTS='DecodeSmall.WorkPlanPacksMatchReference:DecodeSmall.SharePrefixes*:DecodeSmall.CascadeLevels*'
say tests
timeout 90 "$X/weft_gpu_decode" --gtest_brief=1 --gtest_filter="$PACK_TESTS" > "$OUT/tests_pat.log" 2>&1
echo "pat tests rc=$?" | tee -a "$OUT/steps.log"
grep -E "PASSED|FAILED|Failure|tests ran" "$OUT/tests_pat.log" | head -20

say "bench pat"
timeout 110 "$X/weft-bench" --group pat --commit "${WEFT_COMMIT:-?}" --json "$OUT/pat.json" > "$OUT/bench_pat.log" 2>&1
echo "bench pat rc=$?" | tee -a "$OUT/steps.log"
grep -E "summary" -A3 "$OUT/bench_pat.log" | head -8

say memcheck
timeout 70 compute-sanitizer --tool memcheck --error-exitcode 9 "$X/weft_gpu_decode" --gtest_brief=1 \
  --gtest_filter="$WIDE" > "$OUT/memcheck.log" 2>&1
echo "memcheck rc=$?" | tee -a "$OUT/steps.log"
grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/memcheck.log" | tail -4

t=$(( $(left) - 40 ))
if [ $t -gt 20 ]; then
  say racecheck
  timeout "$((t < 70 ? t : 70))" compute-sanitizer --tool racecheck --error-exitcode 9 "$X/weft_gpu_decode" \
    --gtest_brief=1 --gtest_filter=DecodeSmall.SharePrefixesWideSm90Selection > "$OUT/racecheck.log" 2>&1
  echo "racecheck rc=$? (124: out of time)" | tee -a "$OUT/steps.log"
  grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED" "$OUT/racecheck.log" | tail -4
else
  say "racecheck skipped: budget"
fi

t=$(( $(left) - 6 ))
if [ $t -gt 15 ]; then
  say "decode suite"
  timeout "$t" "$X/weft_gpu_decode" --gtest_brief=1 > "$OUT/tests_decode.log" 2>&1
  echo "decode suite rc=$? (124: out of time)" | tee -a "$OUT/steps.log"
else
  say "decode suite skipped: budget"
fi
say "all done"
{
  cat "$OUT/env.txt" "$OUT/steps.log"
  for f in tests_pat memcheck racecheck tests_decode; do
    [ -f "$OUT/$f.log" ] || continue
    echo "----- $f.log (filtered)"
    grep -E "error|FAILED|Failure|PASSED|SUMMARY|rc=|tests ran|Expected|Which is|actual|OK \]" "$OUT/$f.log" | head -60
  done
  echo "----- bench_pat.log (summary)"
  grep -E "summary|FAIL|error" "$OUT/bench_pat.log" | head -10
} > "$OUT/check.txt"
cp "$OUT/bench_pat.log" "$OUT/bench_pat.txt" 2>/dev/null
rm -f "$OUT"/*.log "$OUT/env.txt"
rm -rf "$X"
