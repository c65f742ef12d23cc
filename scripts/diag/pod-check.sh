#!/usr/bin/env bash
# One device call for the POD work (issue 28): build only the targets it needs, run the POD GPU
# tests (SUITES=1 adds the decode/prefill suites: after a change to their shared kernel bodies),
# compute-sanitizer memcheck + racecheck on small POD filters, then bench group "pod" one model per
# process (a timeout loses one model, not all), then FlashInfer's POD wrapper and serial kernels
# on the same kept batches (bench/fi_pod_bench.py; needs the FlashInfer kit carried as
# ../.baselines and, optionally, a pre-built batch-POD module in fi_aot/<uri>/<uri>.so), merged
# into one JSON with a plot (bench/pod_merge.py). Few files under $OUT (the device tool returns a
# limited number).
#   OUT=... WEFT_COMMIT=... scripts/diag/pod-check.sh [budget_s] [bench_models]
# KIT=<FlashInfer kit dir> (default ../.baselines; absent: no FlashInfer rows).
# FI_WEFT_JSON=<weft pod JSON of an earlier run>: FlashInfer times that run's kept batches WHILE
#   weft builds (FI_BUDGET s, default 110), instead of after weft's bench (a shorter call).
#   FI_ARGS: more fi_pod_bench.py arguments in that mode (e.g. --no-fa3).
# TESTS_FILTER: gtest filter of the POD GPU tests before the bench (default all); the rest
#   (PodRandom) then runs after the bench when time is left. NO_SANITIZER=1 skips the sanitizers,
#   NO_RACECHECK=1 racecheck alone; SANITIZER_LAST=1 runs them after the bench (the bench first).
# WEFT_DISABLE: components left out of the build (default comm;tp;norm: POD needs none of them).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH="/usr/local/cuda/bin:$PATH"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" || exit 1
OUT="${OUT:-$ROOT/pod-out}"; mkdir -p "$OUT"
TMP="$(mktemp -d)"
BUDGET="${1:-560}"; MODELS="${2:-llama3-8b yi-6b llama2-7b}"
T0=$(date +%s)
KIT="${KIT:-$ROOT/../.baselines}"
if [ -d "$KIT/whl" ]; then  # FlashInfer into /tmp/site while weft builds
  ( python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      "$KIT"/whl/*.whl >"$TMP/pip.log" 2>&1; echo "rc=$?" >>"$TMP/pip.log" ) &
  PIP_PID=$!
  if [ -n "${FI_WEFT_JSON:-}" ]; then
    # (a subshell cannot wait for its parent's child: poll the install's rc line instead; the
    # FlashInfer kit's modules must be installed before flashinfer imports, or it JIT-builds them)
    ( until grep -q '^rc=' "$TMP/pip.log" 2>/dev/null; do sleep 1; done; PYTHONPATH=/tmp/site timeout $(( ${FI_BUDGET:-110} + 20 )) python3 bench/fi_pod_bench.py \
        --kit "$KIT" --weft "$FI_WEFT_JSON" --aot fi_aot --budget "${FI_BUDGET:-110}" ${FI_ARGS:-} --out "$OUT/fi_pod.json" \
        >"$TMP/fi.log" 2>&1; echo "rc=$?" >>"$TMP/fi.log" ) &
    FI_PID=$!
  fi
fi
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/log.txt"; }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv | tee -a "$OUT/log.txt"
log "configure"
cmake -S . -B build-pod -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_BUILD_TESTS=ON -DWEFT_WITH_COMM=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90a -DWEFT_DISABLE="${WEFT_DISABLE:-comm;tp;norm}" >"$TMP/build.log" 2>&1 || { log "configure failed"; tail -30 "$TMP/build.log"; exit 1; }
log "build"
targets="weft_gpu_pod weft_host_pod weft-bench"
[ "${SUITES:-0}" = 1 ] && targets="$targets weft_gpu_decode weft_gpu_prefill"
timeout 300 ninja -C build-pod -j16 $targets >>"$TMP/build.log" 2>&1 \
  || { log "build failed"; grep -n "error" "$TMP/build.log" | head -30 | tee -a "$OUT/log.txt"; exit 1; }
grep "spill" "$TMP/build.log" | grep -i pod | cut -c1-220 | tee -a "$OUT/log.txt"
log "host pod"; build-pod/tests/weft_host_pod --gtest_brief=1 2>&1 | tail -3 | tee -a "$OUT/log.txt"
log "gpu pod ${TESTS_FILTER:-}"; timeout 150 build-pod/tests/weft_gpu_pod --gtest_brief=1 --gtest_filter="${TESTS_FILTER:-*}" >"$TMP/t.txt" 2>&1; echo "rc=$?" >>"$TMP/t.txt"
tail -25 "$TMP/t.txt" | tee -a "$OUT/log.txt"
if [ "${SUITES:-0}" = 1 ]; then
  log "gpu decode (refactor regression)"
  timeout 60 build-pod/tests/weft_gpu_decode --gtest_brief=1 >"$TMP/t.txt" 2>&1; echo "rc=$?" >>"$TMP/t.txt"
  tail -4 "$TMP/t.txt" | tee -a "$OUT/log.txt"
  log "gpu prefill (refactor regression, without the large suite)"
  timeout 60 build-pod/tests/weft_gpu_prefill --gtest_brief=1 --gtest_filter=-*Large*:*large* >"$TMP/t.txt" 2>&1; echo "rc=$?" >>"$TMP/t.txt"
  tail -4 "$TMP/t.txt" | tee -a "$OUT/log.txt"
fi
sanitizers() {
if [ "${NO_SANITIZER:-0}" != 1 ]; then
log "memcheck"
timeout ${MEMCHECK_S:-90} compute-sanitizer --tool memcheck --print-limit 20 build-pod/tests/weft_gpu_pod --gtest_brief=1 \
  --gtest_filter='PodEdges.*:PodNegative.*' >"$TMP/t.txt" 2>&1; echo "rc=$?" >>"$TMP/t.txt"
tail -5 "$TMP/t.txt" | tee -a "$OUT/log.txt"
if [ "${NO_RACECHECK:-0}" != 1 ]; then
log "racecheck"
timeout 90 compute-sanitizer --tool racecheck --print-limit 20 build-pod/tests/weft_gpu_pod --gtest_brief=1 \
  --gtest_filter='PodEdges.*:PodNegative.*' >"$TMP/t.txt" 2>&1; echo "rc=$?" >>"$TMP/t.txt"
tail -5 "$TMP/t.txt" | tee -a "$OUT/log.txt"
fi  # NO_RACECHECK
if [ "${MEMCHECK_RANDOM:-0}" = 1 ]; then
  log "memcheck PodRandom/0 (split prefill + merge path)"
  timeout 60 compute-sanitizer --tool memcheck --print-limit 20 build-pod/tests/weft_gpu_pod --gtest_brief=1 \
    --gtest_filter='*PodRandom*/0' >"$TMP/t.txt" 2>&1; echo "rc=$?" >>"$TMP/t.txt"
  tail -5 "$TMP/t.txt" | tee -a "$OUT/log.txt"
fi
fi  # NO_SANITIZER
}
[ "${SANITIZER_LAST:-0}" = 1 ] || sanitizers
# FlashInfer (parallel mode) must be done before weft's bench shares the GPU with it.
if [ -n "${FI_PID:-}" ]; then log "waiting for flashinfer"; wait "$FI_PID"; log "flashinfer done"; fi
jsons=""
for m in $MODELS; do
  # Each model at most 70 s, and FI_RESERVE s (default 100) kept for FlashInfer.
  l=$(( $(left) - ${FI_RESERVE:-100} )); [ "$l" -gt 85 ] && l=85
  [ "$l" -lt 40 ] && { log "no time left for bench $m"; continue; }
  log "bench $m (limit $((l - 15))s)"
  timeout $((l - 15)) build-pod/bench/weft-bench --group pod --filter "pod/$m/" --no-ceilings \
    --commit "${WEFT_COMMIT:-unknown}" --json "$TMP/bench_$m.json" >"$TMP/b.txt" 2>&1
  echo "rc=$?" >>"$TMP/b.txt"; cat "$TMP/b.txt" >>"$OUT/bench_tables.txt"; tail -4 "$TMP/b.txt" | tee -a "$OUT/log.txt"
  [ -f "$TMP/bench_$m.json" ] && jsons="$jsons $TMP/bench_$m.json"
  [ -f "$TMP/bench_$m.json" ] && [ -n "${KEEP_RAW:-}" ] && cp "$TMP/bench_$m.json" "$OUT/"
done
fiarg=""
if [ -n "${FI_PID:-}" ]; then
  tail -4 "$TMP/fi.log" | tee -a "$OUT/log.txt"; grep -m3 "Error" "$TMP/fi.log" | tee -a "$OUT/log.txt"
  [ -f "$OUT/fi_pod.json" ] && fiarg="--fi $OUT/fi_pod.json"
elif [ -n "$jsons" ] && [ -n "${PIP_PID:-}" ]; then
  wait "$PIP_PID"; tail -2 "$TMP/pip.log" | tee -a "$OUT/log.txt"
  python3 bench/pod_merge.py "$TMP/weft_pod.json" $jsons >/dev/null 2>&1
  l=$(left)
  if [ "$l" -gt 60 ]; then
    log "flashinfer (budget $((l - 25))s)"
    PYTHONPATH=/tmp/site timeout $((l - 15)) python3 bench/fi_pod_bench.py --kit "$KIT" --weft "$TMP/weft_pod.json" \
      --aot fi_aot --budget $((l - 40)) --out "$OUT/fi_pod.json" >"$TMP/fi.log" 2>&1; echo "rc=$?" >>"$TMP/fi.log"
    tail -6 "$TMP/fi.log" | tee -a "$OUT/log.txt"; grep -m5 -i "error\|Traceback" "$TMP/fi.log" | tee -a "$OUT/log.txt"
    [ -f "$OUT/fi_pod.json" ] && fiarg="--fi $OUT/fi_pod.json"
  else
    log "no time left for flashinfer"
  fi
fi
if [ -n "${TESTS_FILTER:-}" ] && [ "$(left)" -gt 30 ]; then
  log "gpu pod, the rest"; timeout $(( $(left) - 8 )) build-pod/tests/weft_gpu_pod --gtest_brief=1 \
    --gtest_filter="-${TESTS_FILTER}" >"$TMP/t.txt" 2>&1; echo "rc=$?" >>"$TMP/t.txt"
  grep -v "^\[ info" "$TMP/t.txt" | tail -6 | tee -a "$OUT/log.txt"
fi
[ "${SANITIZER_LAST:-0}" = 1 ] && sanitizers
if [ -n "$jsons" ]; then
  log "merge + plot"
  python3 bench/pod_merge.py "$OUT/bench_pod.json" $jsons --plot "$OUT/pod_speedup.png" $fiarg 2>&1 | tee -a "$OUT/log.txt"
fi
rm -rf "$TMP"
log "done"
