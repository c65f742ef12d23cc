#!/usr/bin/env bash
# Follow-up device call of pat_sm90_check.sh (same carried binaries, BIN=<dir with weft-bench.xz
# and weft_gpu_decode.xz>): the prefix-sharing GPU tests, weft-bench --group pat, and a per-kernel
# time breakdown of the cases matching PROFILE (nsys's CUDA kernel summary with graph nodes traced,
# or ncu's gpu__time_duration per launch where nsys is missing).
#   OUT=<dir> BIN=<dir> WEFT_COMMIT=<sha> [PROFILE=pat/64x8/bf16/B1-32/L4096-128/] scripts/diag/pat_sm90_profile.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib-pat.sh"
BIN="${BIN:?BIN: folder with weft-bench.xz and weft_gpu_decode.xz}"
pat_init
PROFILE="${PROFILE:-pat/64x8/bf16/B1-32/L4096-128/}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$OUT/steps.log"
echo "commit ${WEFT_COMMIT:-?}" | tee -a "$OUT/steps.log"
pat_unpack weft-bench weft_gpu_decode

pat_tests 70 "$X/weft_gpu_decode" "$OUT/tests.txt"
grep -E "PASSED|FAILED|Failure" "$OUT/tests.txt" | head -10 >> "$OUT/steps.log"  # (steps.log comes back)

say "bench pat"
timeout 60 "$X/weft-bench" --group pat --commit "${WEFT_COMMIT:-?}" --json "$OUT/pat.json" > "$OUT/bench_pat.txt" 2>&1
echo "bench pat rc=$?" | tee -a "$OUT/steps.log"

say "profile $PROFILE"
if command -v nsys > /dev/null; then
  timeout 90 nsys profile -o "$X/prof" --force-overwrite true --cuda-graph-trace=node --trace=cuda \
    "$X/weft-bench" --group pat --filter "$PROFILE" --no-ceilings --reps 50 > "$OUT/profile_run.txt" 2>&1
  echo "nsys rc=$?" | tee -a "$OUT/steps.log"
  timeout 60 nsys stats --report cuda_gpu_kern_sum --format csv "$X/prof.nsys-rep" > "$OUT/profile.txt" 2>&1
  echo "nsys stats rc=$?" | tee -a "$OUT/steps.log"
elif command -v ncu > /dev/null; then
  timeout 100 ncu --metrics gpu__time_duration.sum --csv "$X/weft-bench" --group pat --filter "$PROFILE" \
    --no-ceilings --reps 3 > "$OUT/profile.txt" 2>&1
  echo "ncu rc=$?" | tee -a "$OUT/steps.log"
else
  echo "no nsys / ncu" | tee -a "$OUT/steps.log"
fi
say "all done"
rm -rf "$X"
