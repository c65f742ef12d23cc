#!/usr/bin/env bash
# Diagnostic (device): issue 19's planning bar and "no speed lost" A/B in one call.
#   1. builds, in parallel, the new tree (weft-plan-bench, weft-bench and the decode, prefill, pod
#      and jit_run GPU tests; no norm/comm) and weft-bench of the old tree (core-ab.sh's build);
#   2. runs those GPU tests (TESTS_FILTER, default the small suites and the sm90 prefill suite),
#      all at once, under one time limit (TESTS_S);
#   3. weft-plan-bench --copy on this machine's CPU (host time of the planners, the staging copy,
#      event record and landed-event sync apart, a copy-size sweep), then the new tree's plan-cost
#      bench rows (decode/plan/, prefill/plan/: plan_us of the wrappers' whole plan());
#   4. core-ab.sh's interleaved old/new weft-bench processes over the given rows until DEADLINE.
# Writes $OUT: cpu.txt, build.log (tails), tests.log, plan_bench.txt, plan_rows.json, core_ab.json,
# ab.log.
# Usage (repo root of the new tree; the old tree extracted with git archive and carried):
#   OUT=... WEFT_COMMIT=<new> BASE_COMMIT=<old> [PAIRS=2] [DEADLINE=400] [TESTS_FILTER=...] \
#     scripts/diag/plan-check.sh <old tree> [weft-bench args of the A/B, e.g. --filter ...]
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
BASE_SRC=${1:?usage: plan-check.sh <old source tree> [weft-bench args]}
shift
OUT="${OUT:-./plan-check-out}"
mkdir -p "$OUT"
SECONDS=0
DEADLINE=${DEADLINE:-400}
TESTS_S=${TESTS_S:-80}
TESTS_FILTER=${TESTS_FILTER:-*Small*:PrefillSm90.*}
{
  lscpu | grep -E "Model name|^CPU\(s\)|MHz|L2|L3"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  uptime
} > "$OUT/cpu.txt" 2>&1

(cmake -S "$BASE_SRC" -B /tmp/ab-old -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_DISABLE="norm;comm" \
   -DWEFT_WITH_COMM=OFF -DWEFT_BUILD_TESTS=OFF > /tmp/build_old.log 2>&1 &&
   ninja -C /tmp/ab-old -j7 weft-bench >> /tmp/build_old.log 2>&1) &
OLD_PID=$!
cmake -S . -B /tmp/ab-new -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_DISABLE="norm;comm" -DWEFT_WITH_COMM=OFF \
  -DWEFT_BUILD_TESTS=ON > /tmp/build_new.log 2>&1 &&
  ninja -C /tmp/ab-new -j9 weft-bench weft-plan-bench weft_gpu_decode weft_gpu_prefill weft_gpu_pod weft_gpu_jit_run \
    >> /tmp/build_new.log 2>&1
NEW_RC=$?
wait $OLD_PID
OLD_RC=$?
{ echo "== new rc $NEW_RC"; tail -15 /tmp/build_new.log; echo "== old rc $OLD_RC"; tail -8 /tmp/build_old.log; } > "$OUT/build.log"
echo "build $SECONDS s (new rc $NEW_RC, old rc $OLD_RC)"
[ "$NEW_RC" -eq 0 ] || { tail -30 /tmp/build_new.log; exit 1; }

# GPU tests, the four executables at once (one GPU; each its own process), one time limit.
: > "$OUT/tests.log"
for t in weft_gpu_decode weft_gpu_prefill weft_gpu_pod weft_gpu_jit_run; do
  (timeout "$TESTS_S" /tmp/ab-new/tests/$t --gtest_filter="$TESTS_FILTER:*Pod*:JitVariantGpu.*" --gtest_brief=1 > /tmp/$t.log 2>&1;
   echo "rc $?" >> /tmp/$t.log) &
done
wait
for t in weft_gpu_decode weft_gpu_prefill weft_gpu_pod weft_gpu_jit_run; do
  { echo "=== $t (filter $TESTS_FILTER:*Pod*:JitVariantGpu.*, limit ${TESTS_S}s)"; grep -vE "^Running main|^$" /tmp/$t.log | tail -25; } >> "$OUT/tests.log"
done
echo "tests $SECONDS s: $(grep -h -E '^\[  (PASSED|FAILED)|^rc ' /tmp/weft_gpu_*.log | tr '\n' ' ')"

# Planner host time on this CPU, then the wrappers' plan() rows.
{
  echo "# weft-plan-bench --copy --min-ms ${PLAN_MIN_MS:-60} on $(grep 'Model name' "$OUT/cpu.txt" | sed 's/.*: *//'), commit ${WEFT_COMMIT:-unknown}"
  timeout 60 /tmp/ab-new/bench/weft-plan-bench --copy --min-ms "${PLAN_MIN_MS:-60}" --filter llama3-8b
  timeout 30 /tmp/ab-new/bench/weft-plan-bench --copy --min-ms "${PLAN_MIN_MS:-60}" --filter prefill/b64
  timeout 30 /tmp/ab-new/bench/weft-plan-bench --copy --min-ms 30 --filter staging
  # The same planners with cold CPU caches (8 MiB written between calls), as a serving loop meets
  # them: the harness's plan p50 (weft-serve-sim) runs other wrappers between two plans.
  echo "# --cold 8"
  timeout 40 /tmp/ab-new/bench/weft-plan-bench --cold 8 --min-ms "${PLAN_MIN_MS:-60}" --filter llama3-8b
  timeout 20 /tmp/ab-new/bench/weft-plan-bench --cold 8 --min-ms "${PLAN_MIN_MS:-60}" --filter prefill/b64
} > "$OUT/plan_bench.txt" 2>&1
echo "plan bench $SECONDS s"
timeout 60 /tmp/ab-new/bench/weft-bench --group decode --group prefill --filter decode/plan/ --filter prefill/plan/ \
  --no-ceilings --commit "${WEFT_COMMIT:-unknown}" --json "$OUT/plan_rows.json" > /tmp/plan_rows.log 2>&1
grep -E "^(decode|prefill)/" /tmp/plan_rows.log | head
echo "plan rows $SECONDS s"

# The A/B with the time left.
SKIP_BUILD=1 DEADLINE=$((DEADLINE - SECONDS)) OUT="$OUT" scripts/diag/core-ab.sh "$BASE_SRC" --no-ceilings "$@" 2>&1 |
  tee "$OUT/ab.log" | tail -8
echo "done $SECONDS s"
