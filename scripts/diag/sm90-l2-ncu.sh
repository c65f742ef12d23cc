#!/usr/bin/env bash
# Diagnostic (device): L2 hit rate and DRAM bytes read of the sm90 prefill kernel, two weft-bench
# builds side by side (issue 20, the plan's item order at 16K). Nsight Compute, three metrics,
# one launch per row (the 4th: after the row's warm-up runs), --clock-control none. Run after
# scripts/diag/sm90-paged-ab.sh (it unpacks the binaries into BIN_DIR).
# Usage: OUT=... BIN_DIR=/tmp/pab-bin [ROWS="prefill/sm90/causal/ragged/L16384 ..."] \
#   [TREES="old new"] [CAP=40] scripts/diag/sm90-l2-ncu.sh    -> $OUT/ncu_l2.txt
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-./l2-out}
BIN_DIR=${BIN_DIR:-/tmp/pab-bin}
mkdir -p "$OUT"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1 || echo /usr/local/cuda/bin/ncu)
M=lts__t_sector_hit_rate.pct,dram__bytes_read.sum,gpu__time_duration.sum
for row in ${ROWS:-prefill/sm90/causal/ragged/L16384 prefill/sm90/causal/paged/L16384}; do
  for t in ${TREES:-old new}; do
    echo "== $t $row" | tee -a "$OUT/ncu_l2.txt"
    timeout "${CAP:-40}" "$NCU" --clock-control none --metrics $M -k regex:prefill_sm90_kernel --launch-skip 3 \
      --launch-count 1 "$BIN_DIR/weft-bench.$t" --group prefill --no-ceilings --warmup-s 0 --reps 2 --filter "$row" \
      > /tmp/ncu_l2.log 2>&1
    echo "rc=$?" >> "$OUT/ncu_l2.txt"
    grep -E "lts__t_sector_hit_rate|dram__bytes_read|gpu__time_duration|==ERROR==|==WARNING==" /tmp/ncu_l2.log \
      | tee -a "$OUT/ncu_l2.txt"
  done
done
