#!/usr/bin/env bash
# One device call for the TP layer runner (issue 26), on ONE GPU: build the tp / comm GPU tests
# and weft-bench, run the tp suite and the world-1 comm test, the tp bench group, then
# compute-sanitizer (memcheck on both, racecheck on the world-1 comm kernel). Each step has its own
# timeout; a failing step does not stop the others. Writes under $OUT: tp-check.log (all output),
# build.log, bench_tp.json.
#   WEFT_COMMIT=<sha> OUT=<dir> scripts/diag/tp-check.sh [--budget SECONDS] [--lean]
# --lean: decode left out of the build (WEFT_DISABLE=decode: nothing here needs it), no comm test
# and no sanitizers, the bench in one process per model (bench_tp_<model>.json), so that a short
# call still brings back what finished.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH="/usr/local/cuda/bin:$PATH"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" || exit 1
BUDGET=500
LEAN=0
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) BUDGET="${2-500}"; shift ;;
    --lean) LEAN=1 ;;
  esac
  shift
done
DISABLE=""
[ "$LEAN" = 1 ] && DISABLE="decode"
OUT="${OUT:-$ROOT/tp-check-out}"
mkdir -p "$OUT"
LOG="$OUT/tp-check.log"
: >"$LOG"
BUILD="$ROOT/build-gpu"
FAIL=0
left() { echo $((BUDGET - SECONDS)); }
step() {  # step <name> <timeout> <command...>
  local name=$1 t=$2 rc
  shift 2
  [ "$t" -gt "$(left)" ] && t=$(left)
  if [ "$t" -le 5 ]; then echo "=== [$name] SKIPPED: no budget left" | tee -a "$LOG"; FAIL=1; return; fi
  echo "=== [$name] (t=${SECONDS}s, timeout ${t}s)" | tee -a "$LOG"
  timeout "$t" "$@" >>"$LOG" 2>&1
  rc=$?
  [ "$rc" -ne 0 ] && FAIL=1
  echo "=== [$name] rc=$rc in t=${SECONDS}s" | tee -a "$LOG"
}
nvidia-smi -L 2>&1 | tee -a "$LOG"
echo "commit ${WEFT_COMMIT:-unknown}" | tee -a "$LOG"
step configure 60 cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DWEFT_BUILD_TESTS=ON -DWEFT_WITH_COMM=ON -DWEFT_BUILD_BENCH=ON -DWEFT_DISABLE="$DISABLE"
if [ "$LEAN" = 1 ]; then
  step build 300 bash -c "ninja -C '$BUILD' -j16 weft_gpu_tp weft-bench >'$OUT/build.log' 2>&1 || { grep -E 'error|FAILED' '$OUT/build.log' | head -30; exit 1; }"
  step gpu_tp 60 "$BUILD/tests/weft_gpu_tp"
  for model in llama3-70b llama3-8b; do
    step "bench_tp_$model" 120 "$BUILD/bench/weft-bench" --group tp --filter "tp/$model/" \
      --json "$OUT/bench_tp_$model.json" --commit "${WEFT_COMMIT:-unknown}"
  done
  grep -E '^=== |FAILED|PASSED|SKIPPED|Failure|^tp/' "$LOG" | head -120
  exit $FAIL
fi
step build 300 bash -c "ninja -C '$BUILD' -j16 weft_gpu_tp weft_gpu_comm weft_host_tp weft-bench >'$OUT/build.log' 2>&1 || { grep -E 'error|FAILED' '$OUT/build.log' | head -30; exit 1; }"
step host_tp 30 "$BUILD/tests/weft_host_tp" --gtest_brief=1
step gpu_tp 150 "$BUILD/tests/weft_gpu_tp"
step gpu_comm_world1 90 "$BUILD/tests/weft_gpu_comm" --gtest_filter='CommFused.SingleRank*'
step bench_tp 200 "$BUILD/bench/weft-bench" --group tp --json "$OUT/bench_tp.json" --commit "${WEFT_COMMIT:-unknown}"
step memcheck_tp 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$BUILD/tests/weft_gpu_tp" \
  --gtest_filter='TpLayer.SplitAnd*:TpLayer.Rejects*' --gtest_brief=1
step memcheck_comm_world1 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$BUILD/tests/weft_gpu_comm" \
  --gtest_filter='CommFused.SingleRank*' --gtest_brief=1
step racecheck_comm_world1 60 compute-sanitizer --tool racecheck --error-exitcode 9 "$BUILD/tests/weft_gpu_comm" \
  --gtest_filter='CommFused.SingleRank*' --gtest_brief=1
grep -E '^=== |FAILED|PASSED|SKIPPED|ERROR SUMMARY|RACECHECK SUMMARY|Failure' "$LOG" | head -80
exit $FAIL
