#!/usr/bin/env bash
# One device call for the partition's decode CTA shape (issue 28, PodOptions::partition_decode_*),
# from binaries built on the dev box (Release, sm_90a) and carried gzipped in this script's folder:
# no device build. Order: the decode-on-k-SMs sweep (bench group pod_decode), the pod bench per
# model with the default and the WEFT_BENCH_POD_DECODE shapes interleaved, then the POD GPU tests
# and memcheck on PodEdges.* (the bench first: it is the measurement; the tests are quick).
#   OUT=... WEFT_COMMIT=... bash <carry>/podk-check.sh [budget_s] [models] [shapes]
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH="/usr/local/cuda/bin:$PATH"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${OUT:-$HERE/out}"; mkdir -p "$OUT"
BUDGET="${1:-400}"; MODELS="${2:-llama3-8b yi-6b llama2-7b}"; SHAPES="${3:-4x3,2x6}"
T0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/log.txt"; }
BIN=/tmp/podk-bin; mkdir -p "$BIN"
for b in weft-bench weft_gpu_pod; do gzip -dc "$HERE/$b.gz" > "$BIN/$b" && chmod +x "$BIN/$b"; done
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv | tee -a "$OUT/log.txt"
log "commit ${WEFT_COMMIT:-unknown}, shapes $SHAPES"
log "bench pod_decode"
timeout 90 "$BIN/weft-bench" --group pod_decode --no-ceilings --commit "${WEFT_COMMIT:-unknown}" \
  --json "$OUT/pod_decode.json" > "$OUT/bench_tables.txt" 2>&1; log "rc=$?"
for m in $MODELS; do
  l=$(( $(left) - 110 )); [ "$l" -gt 100 ] && l=100
  [ "$l" -lt 30 ] && { log "no time left for bench pod $m"; continue; }
  log "bench pod $m (limit ${l}s)"
  WEFT_BENCH_POD_DECODE="$SHAPES" timeout "$l" "$BIN/weft-bench" --group pod --filter "pod/$m/" --no-ceilings \
    --commit "${WEFT_COMMIT:-unknown}" --json "$OUT/bench_pod_$m.json" >> "$OUT/bench_tables.txt" 2>&1
  log "rc=$?"
done
log "gpu pod (all)"
timeout $(( $(left) > 145 ? 120 : $(left) - 25 )) "$BIN/weft_gpu_pod" --gtest_brief=1 > "$OUT/tests.txt" 2>&1
echo "rc=$?" >> "$OUT/tests.txt"; grep -v "^\[ info" "$OUT/tests.txt" | tail -8 | tee -a "$OUT/log.txt"
grep "^\[ info" "$OUT/tests.txt" | tee -a "$OUT/log.txt"
log "memcheck PodEdges.*"
timeout $(( $(left) > 80 ? 70 : $(left) - 4 )) compute-sanitizer --tool memcheck --print-limit 20 "$BIN/weft_gpu_pod" \
  --gtest_brief=1 --gtest_filter='PodEdges.*' > "$OUT/memcheck.txt" 2>&1; echo "rc=$?" >> "$OUT/memcheck.txt"
tail -5 "$OUT/memcheck.txt" | tee -a "$OUT/log.txt"
log "done"
