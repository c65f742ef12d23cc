#!/usr/bin/env bash
# One device call for the fp8 KV cache (issue 23): builds this tree (comm and tp left out:
# WEFT_DISABLE) and, when BEFORE is given, a second tree's weft-bench (decode only) in parallel;
# then the fp8 host tests, the prefill and decode GPU suites (fp8 and the 16-bit small ones, as a
# regression check), weft-bench's "decode/fp8/" rows from both trees (before / after in the same
# call) and "prefill/fp8/" rows, and compute-sanitizer memcheck + racecheck on fp8 Small tests
# with the time left. Each step is skipped when the remaining budget cannot hold it.
#   OUT=<dir> WEFT_COMMIT=<sha> [BEFORE=<tree>] [BUDGET=<s>] [STAGES="tests bench san"]
#   [TARGETS="<ninja targets>"] scripts/diag/fp8_check.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
OUT="${OUT:-$ROOT/fp8-out}"
mkdir -p "$OUT"
B="$ROOT/build-fp8"
BUDGET="${BUDGET:-430}"
T0=$SECONDS
say() { echo "=== [$((SECONDS - T0))s] $*" | tee -a "$OUT/steps.log"; }
left() { echo $((BUDGET - (SECONDS - T0))); }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUT/env.txt"
echo "commit ${WEFT_COMMIT:-?}" | tee -a "$OUT/env.txt"

STAGES="${STAGES:-tests bench san}"
has() { [[ " $STAGES " == *" $1 "* ]]; }
TARGETS="${TARGETS:-weft_host_core weft_host_prefill weft_gpu_prefill weft_gpu_decode weft-bench}"
say build
cfg=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a -DWEFT_WITH_COMM=OFF)
if [ -n "${BEFORE:-}" ]; then
  # The before tree's weft-bench with decode only: its other cases files (jit's needs prefill) go.
  find "$BEFORE/bench" -maxdepth 1 -name 'cases_*.cu' ! -name 'cases_decode*.cu' -delete
  ( cmake -S "$BEFORE" -B "$BEFORE/build-before" "${cfg[@]}" -DWEFT_BUILD_BENCH=ON -DWEFT_DISABLE="comm;prefill;tp" \
      > "$OUT/build_before.log" 2>&1 && timeout 260 ninja -C "$BEFORE/build-before" -j6 weft-bench >> "$OUT/build_before.log" 2>&1
    echo "rc=$?" >> "$OUT/build_before.log" ) &
  BPID=$!
fi
cmake -S . -B "$B" "${cfg[@]}" -DWEFT_BUILD_TESTS=ON -DWEFT_BUILD_BENCH=ON -DWEFT_DISABLE="comm;tp" > "$OUT/build.log" 2>&1 \
  || { say "configure failed"; tail -30 "$OUT/build.log"; }
timeout 280 ninja -C "$B" -j12 $TARGETS >> "$OUT/build.log" 2>&1
rc=$?
say "build rc=$rc"
[ $rc -ne 0 ] && grep -E "error|FAILED" "$OUT/build.log" | head -30
grep -E "spill" "$OUT/build.log" | grep -E "fp8|prefill" | sed 's/^.*function //' | head -12
if [ -n "${BEFORE:-}" ]; then wait "$BPID"; say "before build $(tail -1 "$OUT/build_before.log")"; fi

if has tests; then
say tests
{
  "$B/tests/weft_host_core" --gtest_brief=1 --gtest_filter='Fp8*'
  "$B/tests/weft_host_prefill" --gtest_brief=1
  timeout 100 "$B/tests/weft_gpu_prefill" --gtest_brief=1 --gtest_filter='PrefillFp8*:PrefillSmall*:PrefillHardeningSmall*:PrefillAlibiSmall*'
  timeout 100 "$B/tests/weft_gpu_decode" --gtest_brief=1 --gtest_filter='DecodeFp8*:DecodeSmall*:DecodeHardeningSmall*:DecodeBlockTableSmall*'
} > "$OUT/tests.log" 2>&1
grep -E "PASSED|FAILED|\[fp8\]|Failure|tests ran" "$OUT/tests.log" | head -60
say "tests done"
fi

say bench
cap() { local t=$(( $(left) - $2 )); [ $t -gt $1 ] && t=$1; echo $t; }  # min(cap, left - reserve)
if [ "$(left)" -gt 40 ]; then
  timeout "$(cap 90 20)" "$B/bench/weft-bench" --group decode --filter decode/fp8/ --json "$OUT/bench_decode_fp8.json" > "$OUT/bench_decode.log" 2>&1
  say "decode after rc=$?"
fi
if [ -n "${BEFORE:-}" ] && [ -x "$BEFORE/build-before/bench/weft-bench" ] && [ "$(left)" -gt 20 ]; then
  timeout "$(cap 60 5)" "$BEFORE/build-before/bench/weft-bench" --group decode --filter decode/fp8/bf16/ --filter decode/fp8/e4m3/ \
    --json "$OUT/bench_decode_fp8_before.json" > "$OUT/bench_decode_before.log" 2>&1
  say "decode before rc=$?"
fi
if [ "${PREFILL_BENCH:-1}" = 1 ] && [ "$(left)" -gt 60 ]; then
  timeout "$(cap 120 30)" "$B/bench/weft-bench" --group prefill --filter prefill/fp8/ --json "$OUT/bench_prefill_fp8.json" > "$OUT/bench_prefill.log" 2>&1
  say "prefill rc=$?"
fi
grep -hE "fp8/" "$OUT"/bench_*.log | head -120

if has san; then
say sanitizer
{
  if [ "$(left)" -gt 40 ]; then
    timeout $(( $(left) - 25 )) compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tests/weft_gpu_prefill" --gtest_brief=1 --gtest_filter='PrefillFp8Small.FormatsScalesAndTiles'
    echo "memcheck prefill rc=$?"
  fi
  if [ "$(left)" -gt 30 ]; then
    timeout $(( $(left) - 18 )) compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tests/weft_gpu_decode" --gtest_brief=1 --gtest_filter='DecodeFp8Small.BothPathsFormatsAndScaleGranularities'
    echo "memcheck decode rc=$?"
  fi
  if [ "$(left)" -gt 25 ]; then
    timeout $(( $(left) - 10 )) compute-sanitizer --tool racecheck --error-exitcode 9 "$B/tests/weft_gpu_prefill" --gtest_brief=1 --gtest_filter='PrefillFp8Small.RejectedArguments:PrefillFp8Small.EdgeShapesAndVariants'
    echo "racecheck prefill rc=$?"
  fi
} > "$OUT/sanitizer.log" 2>&1
grep -E "rc=|ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$OUT/sanitizer.log"
fi
say "all done"
