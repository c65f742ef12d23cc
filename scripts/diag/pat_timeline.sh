#!/usr/bin/env bash
# Kernel timeline of one PAT bench row (issue 21), dev-box binaries carried xz-compressed
# (BIN=<dir with weft-bench.xz>): the row's bench times (no profiler), then per-launch GPU time of
# every kernel of the row's graphs with Nsight Compute (clocks and caches left alone: the bench
# flushes L2 itself before each replay), then (if it runs here) an nsys trace with graph nodes for
# the gaps between launches.
#   OUT=<dir> BIN=<dir> WEFT_COMMIT=<sha> [ROW=pat/64x8/bf16/B1-32/L4096-128/] scripts/diag/pat_timeline.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib-pat.sh"
BIN="${BIN:?BIN: folder with weft-bench.xz}"
pat_init
ROW="${ROW:-pat/64x8/bf16/B1-32/L4096-128/}"
pat_env
pat_unpack weft-bench

say "bench $ROW"
timeout 60 "$X/weft-bench" --group pat --filter "$ROW" --commit "${WEFT_COMMIT:-?}" --json "$OUT/row.json" \
  > "$OUT/row.txt" 2>&1
echo "bench rc=$?" | tee -a "$OUT/steps.log"

say "ncu $ROW"
timeout 150 ncu --clock-control none --cache-control none --graph-profiling node \
  --metrics gpu__time_duration.sum,launch__grid_size,launch__block_size,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,lts__t_bytes.sum \
  --csv "$X/weft-bench" --group pat --filter "$ROW" --no-ceilings --reps 3 --warmup-s 0 > "$OUT/ncu.csv" 2> "$OUT/ncu_err.txt"
echo "ncu rc=$?" | tee -a "$OUT/steps.log"
xz -9 -f "$OUT/ncu.csv"

NSYS="$(command -v nsys || ls /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | head -1)"
if [ -n "$NSYS" ]; then
  say "nsys ($NSYS)"
  timeout 50 "$NSYS" profile -o "$X/prof" --force-overwrite true --cuda-graph-trace=node --trace=cuda \
    "$X/weft-bench" --group pat --filter "$ROW" --no-ceilings --reps 10 --warmup-s 0 > "$X/nsys_run.txt" 2>&1
  echo "nsys rc=$?" | tee -a "$OUT/steps.log"
  ls "$X" | tee -a "$OUT/steps.log"
  if [ -f "$X/prof.nsys-rep" ]; then
    timeout 40 "$NSYS" stats --report cuda_gpu_trace --format csv "$X/prof.nsys-rep" > "$OUT/nsys_trace.csv" 2>&1
    echo "nsys stats rc=$?" | tee -a "$OUT/steps.log"
    xz -9 -f "$OUT/nsys_trace.csv"
  fi
  tail -5 "$X/nsys_run.txt" >> "$OUT/steps.log"
else
  echo "no nsys" | tee -a "$OUT/steps.log"
fi
say "all done"
rm -rf "$X"
