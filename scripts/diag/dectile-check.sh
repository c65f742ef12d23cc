#!/usr/bin/env bash
# One device call for the decode KV-loop instruction cuts (swizzle offsets by constant XOR,
# per-item source bases, the stage-2/3 wait fast path, the soft-cap test once per tile,
# compile-time stages in the fused POD kernel), modelled on fastaddr-check.sh / decode-ab-check.sh.
# Carried folder (CARRY, default: this script's folder), built on the dev box (Release, sm_90a):
#   bins.tar.xz   weft-bench.old (main before the change), weft-bench.new, weft_gpu_decode,
#                 weft_gpu_jit_run, weft_gpu_pod (new; one solid xz: the binaries share most bytes)
#   include/      <build>/include/weft/device of the new tree: unpacked beside weft_gpu_jit_run,
#                 where weft::jit looks for its device headers (jit/paths.cpp)
# Order: decode GPU tests (all but the slow wide-pack / repeat tests, each with its own budget),
# an interleaved A/B (old, new, old, new) of pod_decode (k 16/32/48/64/132) + the decode subset +
# PAT rows, the JIT decode tests, the POD tests, memcheck on a small decode filter.
#   OUT=... WEFT_COMMIT=... bash <carry>/dectile-check.sh [budget_s]
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH="/usr/local/cuda/bin:$PATH"
HERE="$(cd "${CARRY:-$(dirname "${BASH_SOURCE[0]}")}" && pwd)"
OUT="${OUT:-$HERE/out}"; mkdir -p "$OUT"
BUDGET="${1:-380}"
T0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/log.txt"; }
BIN=/tmp/dectile-bin; mkdir -p "$BIN"
xz -dc "$HERE/bins.tar.xz" | tar -x -C "$BIN" && cp -r "$HERE/include" "$BIN/" && chmod +x "$BIN"/weft*
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv | tee -a "$OUT/log.txt"
log "commit ${WEFT_COMMIT:-unknown}; unpacked: $(ls "$BIN" | tr '\n' ' ')"

# Decode tests: everything but the six slowest (wide packs, sm90 wave chain, repeat-bitwise, fp8
# long split: ~110 s of the suite's ~225 s, none of them a one-page or wait path the others miss).
SLOW='DecodeSmall.SharePrefixesWide*:DecodeSmall.SharePrefixesCostModelFallsBack:DecodeSmall.SharePrefixesLongRootFewPacks'
SLOW+=':DecodeFp8.SplitLongRequestsAndErrorDistribution:Decode.RepeatedRunsBitwiseIdenticalWithSplit:DecodeAlibi.Group32WideItems'
log "gpu decode tests: -$SLOW"
timeout "${TESTS_TIMEOUT:-125}" "$BIN/weft_gpu_decode" --gtest_filter="-$SLOW" > "$OUT/tests.txt" 2>&1
echo "rc=$?" >> "$OUT/tests.txt"
grep -E "^\[  (PASSED|FAILED) |^\[==========\]|rc=|Failure" "$OUT/tests.txt" | tail -12 | tee -a "$OUT/log.txt"

FILTERS=(pod_decode/ decode/llama3-8b/ decode/path/ decode/bimodal64 decode/hdim/d64-32x8/ decode/hdim/d256-16x8/
  decode/fp8/e4m3/llama3-8b/ decode/prefix/llama3-8b/b32/ decode/gqa/g32-32x1/b32/kv4096 decode/steady/llama3-8b/b32/kv4096
  pat/64x8/bf16/B1-32/L4096-128/ pat/32x8/bf16/B1-256/L4096-128/)
F=(); for f in "${FILTERS[@]}"; do F+=(--filter "$f"); done
for run in 1 2; do
  for tree in old new; do
    l=$(( $(left) - 110 )); [ "$l" -gt 45 ] && l=45
    [ "$l" -lt 20 ] && { log "no time left for bench $tree $run"; continue; }
    timeout "$l" "$BIN/weft-bench.$tree" --group pod_decode --group decode --group pat --no-ceilings "${F[@]}" \
      --commit "${WEFT_COMMIT:-unknown}-$tree" --json "$OUT/ab_${tree}_$run.json" > "/tmp/dectile_${tree}_$run.log" 2>&1
    log "bench $tree $run rc=$? rows $(grep -c . "/tmp/dectile_${tree}_$run.log")"
  done
done
cat /tmp/dectile_new_2.log > "$OUT/bench_tables.txt" 2>/dev/null

# The JIT decode path compiles these device headers with NVRTC (weft_gpu_jit_run next to include/).
log "jit decode tests"
timeout 40 "$BIN/weft_gpu_jit_run" --gtest_filter='JitVariantGpu.DecodeExamplesMatchReference:JitVariantGpu.SourceError*' \
  > "$OUT/jit_pod.txt" 2>&1; echo "rc=$?" >> "$OUT/jit_pod.txt"
log "pod tests (the fused kernel runs decode_items with compile-time stages)"
timeout 35 "$BIN/weft_gpu_pod" --gtest_filter='PodEdges.*:Shapes/PodRandom.*' >> "$OUT/jit_pod.txt" 2>&1
echo "rc=$?" >> "$OUT/jit_pod.txt"
grep -E "^\[  (PASSED|FAILED) |^\[==========\]|rc=|Failure" "$OUT/jit_pod.txt" | tee -a "$OUT/log.txt"

log "memcheck"
l=$(( $(left) - 5 )); [ "$l" -gt 50 ] && l=50
timeout "$l" compute-sanitizer --tool memcheck --print-limit 20 "$BIN/weft_gpu_decode" --gtest_brief=1 \
  --gtest_filter='DecodeSmall.WarpsAndStages:DecodeSmall.SampledConfigurations:DecodeSmall.WindowAndSoftCap:DecodeFp8Small.EdgeShapes:DecodeSmall.WorkPlanPacksMatchReference' \
  > "$OUT/memcheck.txt" 2>&1; echo "rc=$?" >> "$OUT/memcheck.txt"
tail -5 "$OUT/memcheck.txt" | tee -a "$OUT/log.txt"
log "done"
