#!/usr/bin/env bash
# One device call for refitting kAuto's SM-partition bands (issue 28) after a decode change, from
# binaries built on the dev box (Release, sm_90a) and carried xz-compressed in this script's folder
# (weft-bench, optionally weft-bench.old and weft_gpu_pod): no device build.
#   measure (default): bench pod_decode (decode alone on k SMs), then the pod group per model with
#     the partition pinned at every k of WEFT_BENCH_POD_K for the default decode shape and each
#     WEFT_BENCH_POD_DECODE shape (the refit's grid; serial, kAuto and the ideal bound's two sides
#     in the same process), then the POD GPU tests if time is left.
#   verify: the POD GPU tests, then the pod group with the partition pinned only at VERIFY_K (40),
#     new (weft-bench) and old (weft-bench.old) processes per model in turn.
#   OUT=... WEFT_COMMIT=... bash <carry>/podfit-check.sh [budget_s] [mode] [models]
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH="/usr/local/cuda/bin:$PATH"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${OUT:-$HERE/out}"; mkdir -p "$OUT"
BUDGET="${1:-400}"; MODE="${2:-measure}"; MODELS="${3:-llama3-8b yi-6b llama2-7b}"
SWEEP_K="${SWEEP_K:-8,16,24,32,40,48,56,64}"; SHAPES="${SHAPES:-4x3,8x2}"
T0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/log.txt"; }
BIN=/tmp/podfit-bin; mkdir -p "$BIN"
for f in "$HERE"/*.xz; do b=$(basename "$f" .xz); xz -dc "$f" > "$BIN/$b" && chmod +x "$BIN/$b"; done
ls "$BIN" | tee -a "$OUT/log.txt"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv | tee -a "$OUT/log.txt"
log "commit ${WEFT_COMMIT:-unknown}, mode $MODE, k $SWEEP_K, shapes $SHAPES"
C="${WEFT_COMMIT:-unknown}"
run_tests() {
  [ -x "$BIN/weft_gpu_pod" ] && [ "$(left)" -gt 30 ] || return 0
  log "gpu pod (all)"
  local l=$(( $(left) - 5 )); [ "$MODE" = verify ] && [ "$l" -gt "${TESTS_LIMIT:-90}" ] && l="${TESTS_LIMIT:-90}"
  timeout "$l" "$BIN/weft_gpu_pod" --gtest_brief=1 > "$OUT/tests.txt" 2>&1
  echo "rc=$?" >> "$OUT/tests.txt"; grep -v "^\[ info" "$OUT/tests.txt" | tail -8 | tee -a "$OUT/log.txt"
}
if [ "$MODE" = measure ]; then
  log "bench pod_decode"
  timeout 60 "$BIN/weft-bench" --group pod_decode --no-ceilings --commit "$C" \
    --json "$OUT/pod_decode.json" > "$OUT/bench_tables.txt" 2>&1; log "rc=$?"
  # Two processes per model (contexts 4K-12K, 16K-20K): the bench writes its JSON at exit, so a
  # process cut by its limit loses only its half. Each gets up to 1.6x an equal share of what is
  # left (75 s kept for the tests).
  PARTS=("ctx4096 ctx8192 ctx12288" "ctx16384 ctx20480")
  n=0; for m in $MODELS; do n=$((n + 2)); done
  for m in $MODELS; do
    for h in 0 1; do
      l=$(( ($(left) - 75) * 16 / (10 * n) )); [ "$l" -gt $(( $(left) - 75 )) ] && l=$(( $(left) - 75 )); n=$((n - 1))
      [ "$l" -lt 20 ] && { log "no time left for bench pod $m part $h"; continue; }
      F=(); for c in ${PARTS[$h]}; do F+=(--filter "pod/$m/$c/"); done
      log "bench pod $m part $h (limit ${l}s)"
      WEFT_BENCH_POD_K="$SWEEP_K" WEFT_BENCH_POD_DECODE="$SHAPES" timeout "$l" "$BIN/weft-bench" --group pod \
        "${F[@]}" --no-ceilings --commit "$C" --json "$OUT/bench_pod_${m}_$h.json" >> "$OUT/bench_tables.txt" 2>&1
      log "rc=$? rows $(grep -o "pod/$m/ctx" "$OUT/bench_pod_${m}_$h.json" 2>/dev/null | wc -l)"
    done
  done
else
  # verify: the POD GPU tests first (the new bands' shapes in every random shape), then per model
  # a new and an old process in turn (each kAuto interleaved with serial; the partition pinned only
  # at VERIFY_K, to spend the time on the interleaved rows).
  run_tests
  for m in $MODELS; do
    for tree in new old; do
      exe="$BIN/weft-bench"; [ "$tree" = old ] && exe="$BIN/weft-bench.old"
      [ -x "$exe" ] || continue
      l=$(( $(left) - 3 )); [ "$l" -gt 45 ] && l=45
      [ "$l" -lt 15 ] && { log "no time left for bench pod $m $tree"; continue; }
      log "bench pod $m $tree (limit ${l}s)"
      WEFT_BENCH_POD_K="${VERIFY_K:-40}" timeout "$l" "$exe" --group pod --filter "pod/$m/" --no-ceilings \
        --commit "$C-$tree" --json "$OUT/verify_${tree}_$m.json" >> "$OUT/bench_tables.txt" 2>&1
      log "rc=$? rows $(grep -o "pod/$m/ctx" "$OUT/verify_${tree}_$m.json" 2>/dev/null | wc -l)"
    done
  done
fi
[ "$MODE" = measure ] && run_tests
# At most 8 files come back: the bench JSONs travel as one archive.
(cd "$OUT" && ls *.json > /dev/null 2>&1 && tar czf results.tgz *.json && rm -f *.json)
ls -la "$OUT" | tee -a "$OUT/log.txt"
log "done"
