#!/usr/bin/env bash
# One device call for the POD work (issue 28): build only the targets it needs, run the POD GPU
# tests plus the decode/prefill suites whose kernels it touched (prefill_item_range /
# decode_items(p, cta) refactor; SKIP_DECODE=1 leaves decode out), compute-sanitizer memcheck +
# racecheck on small POD filters, then bench group "pod" one model per process (a timeout loses
# one model, not all), merged into one JSON with a plot (bench/pod_merge.py). Few files under $OUT
# (the device tool returns a limited number).
#   OUT=... WEFT_COMMIT=... scripts/diag/pod-check.sh [budget_s] [bench_models]
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH="/usr/local/cuda/bin:$PATH"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" || exit 1
OUT="${OUT:-$ROOT/pod-out}"; mkdir -p "$OUT"
TMP="$(mktemp -d)"
BUDGET="${1:-560}"; MODELS="${2:-llama3-8b yi-6b llama2-7b}"
T0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/log.txt"; }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv | tee -a "$OUT/log.txt"
log "configure"
cmake -S . -B build-pod -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_BUILD_TESTS=ON -DWEFT_WITH_COMM=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90a >"$TMP/build.log" 2>&1 || { log "configure failed"; tail -30 "$TMP/build.log"; exit 1; }
log "build"
targets="weft_gpu_pod weft_host_pod weft_gpu_prefill weft-bench"
[ "${SKIP_DECODE:-0}" = 1 ] || targets="$targets weft_gpu_decode"
timeout 300 ninja -C build-pod -j16 $targets >>"$TMP/build.log" 2>&1 \
  || { log "build failed"; grep -n "error" "$TMP/build.log" | head -30 | tee -a "$OUT/log.txt"; exit 1; }
grep "spill" "$TMP/build.log" | grep -i pod | cut -c1-220 | tee -a "$OUT/log.txt"
log "host pod"; build-pod/tests/weft_host_pod --gtest_brief=1 2>&1 | tail -3 | tee -a "$OUT/log.txt"
log "gpu pod"; timeout 150 build-pod/tests/weft_gpu_pod --gtest_brief=1 >"$TMP/t.txt" 2>&1; echo "rc=$?" >>"$TMP/t.txt"
tail -25 "$TMP/t.txt" | tee -a "$OUT/log.txt"
if [ "${SKIP_DECODE:-0}" != 1 ]; then
  log "gpu decode (refactor regression)"
  timeout 60 build-pod/tests/weft_gpu_decode --gtest_brief=1 >"$TMP/t.txt" 2>&1; echo "rc=$?" >>"$TMP/t.txt"
  tail -4 "$TMP/t.txt" | tee -a "$OUT/log.txt"
fi
log "gpu prefill (refactor regression, without the large suite)"
timeout 60 build-pod/tests/weft_gpu_prefill --gtest_brief=1 --gtest_filter=-*Large*:*large* >"$TMP/t.txt" 2>&1; echo "rc=$?" >>"$TMP/t.txt"
tail -4 "$TMP/t.txt" | tee -a "$OUT/log.txt"
log "memcheck"
timeout 90 compute-sanitizer --tool memcheck --print-limit 20 build-pod/tests/weft_gpu_pod --gtest_brief=1 \
  --gtest_filter='PodEdges.*:PodNegative.*' >"$TMP/t.txt" 2>&1; echo "rc=$?" >>"$TMP/t.txt"
tail -5 "$TMP/t.txt" | tee -a "$OUT/log.txt"
log "racecheck"
timeout 90 compute-sanitizer --tool racecheck --print-limit 20 build-pod/tests/weft_gpu_pod --gtest_brief=1 \
  --gtest_filter='PodEdges.*:PodNegative.*' >"$TMP/t.txt" 2>&1; echo "rc=$?" >>"$TMP/t.txt"
tail -5 "$TMP/t.txt" | tee -a "$OUT/log.txt"
jsons=""
for m in $MODELS; do
  l=$(left); [ "$l" -lt 40 ] && { log "no time left for bench $m"; continue; }
  log "bench $m (limit $((l - 15))s)"
  timeout $((l - 15)) build-pod/bench/weft-bench --group pod --filter "pod/$m/" --no-ceilings \
    --commit "${WEFT_COMMIT:-unknown}" --json "$TMP/bench_$m.json" >"$TMP/b.txt" 2>&1
  echo "rc=$?" >>"$TMP/b.txt"; cat "$TMP/b.txt" >>"$OUT/bench_tables.txt"; tail -4 "$TMP/b.txt" | tee -a "$OUT/log.txt"
  [ -f "$TMP/bench_$m.json" ] && jsons="$jsons $TMP/bench_$m.json"
done
if [ -n "$jsons" ]; then
  log "merge + plot"
  python3 bench/pod_merge.py "$OUT/bench_pod.json" $jsons --plot "$OUT/pod_speedup.png" 2>&1 | tee -a "$OUT/log.txt"
fi
rm -rf "$TMP"
log "done"
