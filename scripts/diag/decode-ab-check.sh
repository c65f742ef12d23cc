#!/usr/bin/env bash
# One device call for a change to the decode mainloop, from binaries built on the dev box (Release,
# sm_90a) and carried xz-compressed in CARRY (default: this script's folder): weft-bench.old (main
# before the change), weft-bench.new, weft_gpu_decode (new). Order: the decode GPU tests of TESTS
# (TESTS_TIMEOUT s), an interleaved A/B (old, new, old, new) of the pod_decode group, a decode-group
# subset and the PAT rows 64x8 B1-32 L4096-128 and 32x8 B1-256 L4096-128, then memcheck on
# MEMCHECK_FILTER. The callers (pgahead-check.sh, fastaddr-check.sh) set TAG, TESTS, MEMCHECK_FILTER.
#   OUT=... WEFT_COMMIT=... TAG=... TESTS=... MEMCHECK_FILTER=... bash decode-ab-check.sh [budget_s]
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH="/usr/local/cuda/bin:$PATH"
HERE="$(cd "${CARRY:-$(dirname "${BASH_SOURCE[0]}")}" && pwd)"  # the binaries
OUT="${OUT:-$HERE/out}"; mkdir -p "$OUT"
BUDGET="${1:-${BUDGET:-300}}"
T0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/log.txt"; }
BIN=/tmp/${TAG:?TAG}-bin; mkdir -p "$BIN"
for b in weft-bench.old weft-bench.new weft_gpu_decode; do xz -dc "$HERE/$b.xz" > "$BIN/$b" && chmod +x "$BIN/$b"; done
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv | tee -a "$OUT/log.txt"
log "commit ${WEFT_COMMIT:-unknown}"
log "gpu decode tests: ${TESTS:?TESTS}"
timeout "${TESTS_TIMEOUT:-110}" "$BIN/weft_gpu_decode" --gtest_filter="${TESTS:?TESTS}" > "$OUT/tests.txt" 2>&1
echo "rc=$?" >> "$OUT/tests.txt"
grep -E "^\[  (PASSED|FAILED) |^\[==========\]|rc=|Failure" "$OUT/tests.txt" | tail -12 | tee -a "$OUT/log.txt"
FILTERS=(pod_decode/ decode/llama3-8b/ decode/path/ decode/bimodal64 decode/hdim/d64-32x8/ decode/hdim/d256-16x8/
  decode/fp8/e4m3/llama3-8b/ decode/prefix/llama3-8b/b32/ decode/gqa/g32-32x1/b32/kv4096 decode/steady/llama3-8b/b32/kv4096
  pat/64x8/bf16/B1-32/L4096-128/ pat/32x8/bf16/B1-256/L4096-128/)
F=(); for f in "${FILTERS[@]}"; do F+=(--filter "$f"); done
for run in 1 2; do
  for tree in old new; do
    l=$(( $(left) - 65 )); [ "$l" -gt 50 ] && l=50
    [ "$l" -lt 20 ] && { log "no time left for bench $tree $run"; continue; }
    timeout "$l" "$BIN/weft-bench.$tree" --group pod_decode --group decode --group pat --no-ceilings "${F[@]}" \
      --commit "${WEFT_COMMIT:-unknown}-$tree" --json "$OUT/ab_${tree}_$run.json" > "/tmp/${TAG}_${tree}_$run.log" 2>&1
    log "bench $tree $run rc=$? rows $(grep -c . "/tmp/${TAG}_${tree}_$run.log")"
  done
done
cat /tmp/${TAG}_new_2.log > "$OUT/bench_tables.txt" 2>/dev/null
log "memcheck"
timeout $(( $(left) > 60 ? 55 : $(left) - 3 )) compute-sanitizer --tool memcheck --print-limit 20 "$BIN/weft_gpu_decode" \
  --gtest_brief=1 --gtest_filter="${MEMCHECK_FILTER:?MEMCHECK_FILTER}" \
  > "$OUT/memcheck.txt" 2>&1; echo "rc=$?" >> "$OUT/memcheck.txt"
tail -5 "$OUT/memcheck.txt" | tee -a "$OUT/log.txt"
log "done"
