#!/usr/bin/env bash
# One device call that checks main after a session's branches land: gpu-check (build, every host
# and GPU test) without its sanitizer and bench steps, then memcheck on the small tests of the
# suites that changed and racecheck on the decode work-plan tests, the Python package's pytest from
# a wheel built on the 2-core machine (in parallel with the build), and the serving harness
# (router calibrated on seed 20260622, reported on the held-out seed 20260623, FlashInfer's decode
# wrapper on the same steps). At most 8 files come back: gpu-check.log, summary.txt, python.log,
# san.log and the four serve JSONs.
# GPU_CHECK=0: no build and no test step (a warm machine's build-gpu from the previous call); SAN=0: no
# sanitizers. MEMCHECK_FILTER / RACECHECK_FILTER (decode) / RACECHECK_PREFILL_FILTER (optional): gtest filters under the sanitizers (defaults below); SERVE=0
# skips the serving harness; WEFT_GPU_CHECK_GPU_ONLY=1 (gpu-check.sh) runs only the GPU suites.
# PLAN_BENCH_ARGS (optional): weft-plan-bench arguments (host planner rows, console into san.log).
# BENCH_ARGS (optional): weft-bench arguments for a few rows after the sanitizers (console into san.log).
#   OUT=... WEFT_COMMIT=... [PYSITE_TAR=pysite.tar.xz] [KIT=../.baselines] [BUDGET=440] [BENCH_ARGS=...] scripts/diag/main-check.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH="/usr/local/cuda/bin:$PATH"
OUT="${OUT:-$PWD/main-check-out}"
mkdir -p "$OUT"
KIT="$(cd "${KIT:-../.baselines}" 2>/dev/null && pwd)"
export WEFT_DISABLE="${WEFT_DISABLE:-comm;tp;norm}"
t0=$SECONDS
note() { echo "[$((SECONDS - t0))s] $*" | tee -a "$OUT/san.log"; }
if [ -n "$KIT" ]; then
  ( python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/fisite \
      "$KIT"/whl/*.whl > /tmp/fi_install.log 2>&1; echo "rc=$?" >> /tmp/fi_install.log ) &
fi
if [ -f "${PYSITE_TAR:-pysite.tar.xz}" ]; then
  ( mkdir -p /tmp/ps && tar -xJf "${PYSITE_TAR:-pysite.tar.xz}" -C /tmp/ps && site=$(find /tmp/ps -mindepth 1 -maxdepth 1 -type d | head -1) &&
    cd python/tests && PYTHONPATH="$site" PYTHONDONTWRITEBYTECODE=1 timeout 150 python3 -m pytest -q -rs \
      -p no:cacheprovider > "$OUT/python.log" 2>&1; echo "pytest rc=$?" >> "$OUT/python.log" ) &
fi
if [ "${GPU_CHECK:-1}" = 1 ]; then
  OUT=/tmp/gc bash scripts/gpu-check.sh --no-torch --skip-sanitizer --skip-bench --budget "${BUDGET:-440}"
  cp /tmp/gc/gpu-check.log /tmp/gc/summary.txt "$OUT"/ 2>/dev/null
fi
T=build-gpu/tests
if [ "${SAN:-1}" = 1 ]; then
F="${MEMCHECK_FILTER:-DecodeSmall.SplitKVWithEmptyRequests:DecodeSmall.SharePrefixesRandomForests:DecodeSmall.SharePrefixesNoSharingFallsBack:DecodeWorkQueueSmall.MatchesReference:DecodeRouteSmall.*:PrefillSmall.SplitKVChunk:PrefillSm90.ChunkedSplitAndEmpty:PrefillFp8Sm90Small.*:PrefillFp8Small.EdgeShapesAndVariants:PodEdges.*}"
for s in decode prefill pod; do
  timeout 60 compute-sanitizer --tool memcheck --print-limit 10 "$T/weft_gpu_$s" --gtest_brief=1 "--gtest_filter=$F" > /tmp/san_$s.log 2>&1
  note "memcheck weft_gpu_$s rc=$? $(grep -E 'ERROR SUMMARY' /tmp/san_$s.log | tail -1) $(grep -E '^\[  (PASSED|FAILED)' /tmp/san_$s.log | tr '\n' ' ')"
done
timeout 60 compute-sanitizer --tool racecheck --print-limit 10 "$T/weft_gpu_decode" --gtest_brief=1 \
  "--gtest_filter=${RACECHECK_FILTER:-DecodeSmall.SplitKVWithEmptyRequests:DecodeWorkQueueSmall.MatchesReference:DecodeSmall.SharePrefixesNoSharingFallsBack}" > /tmp/race.log 2>&1
note "racecheck weft_gpu_decode rc=$? $(grep -E 'RACECHECK SUMMARY' /tmp/race.log | tail -1)"
if [ -n "${RACECHECK_PREFILL_FILTER:-}" ]; then
  timeout 90 compute-sanitizer --tool racecheck --print-limit 10 "$T/weft_gpu_prefill" --gtest_brief=1 \
    "--gtest_filter=$RACECHECK_PREFILL_FILTER" > /tmp/race_prefill.log 2>&1
  note "racecheck weft_gpu_prefill rc=$? $(grep -E 'RACECHECK SUMMARY' /tmp/race_prefill.log | tail -1) $(grep -E '^\[  (PASSED|FAILED)' /tmp/race_prefill.log | tr '\n' ' ')"
fi
fi  # SAN
if [ -n "${BENCH_ARGS:-}" ]; then  # a few weft-bench rows, console into san.log (8-file cap)
  # shellcheck disable=SC2086
  timeout "${BENCH_TIMEOUT:-120}" build-gpu/bench/weft-bench $BENCH_ARGS --commit "${WEFT_COMMIT:-?}" > /tmp/bench.log 2>&1
  note "weft-bench $BENCH_ARGS rc=$?"; grep -vE '^\s*$' /tmp/bench.log | tail -n 80 >> "$OUT/san.log"
fi
if [ -n "${PLAN_BENCH_ARGS:-}" ]; then  # weft-plan-bench rows (host time), console into san.log
  # shellcheck disable=SC2086
  timeout 60 build-gpu/bench/weft-plan-bench $PLAN_BENCH_ARGS > /tmp/plan_bench.log 2>&1
  note "weft-plan-bench $PLAN_BENCH_ARGS rc=$?"; grep -vE '^\s*$' /tmp/plan_bench.log | tail -n 40 >> "$OUT/san.log"
fi
[ "${SERVE:-1}" = 1 ] && B=build-gpu/bench/weft-serve-sim KIT="$KIT" bash scripts/diag/serve-router.sh "$OUT" 2>&1 | tee -a "$OUT/san.log"
wait
note "done"
