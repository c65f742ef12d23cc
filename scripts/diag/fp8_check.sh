#!/usr/bin/env bash
# One device call for the fp8 KV cache (issue 23): build only what it needs (comm and prefill left
# out: WEFT_DISABLE), the fp8 host tests, the append and decode GPU suites (fp8 and the existing
# 16-bit ones, as a regression check), compute-sanitizer memcheck + racecheck on the fp8 Small
# tests, weft-bench's "decode/fp8/" rows and, when FI_DIR is given, FlashInfer's fp8-KV decode on
# the same rows (FI_DIR: a folder with fi_fp8.py and aot/, run against the kit in .baselines).
#   OUT=<dir> WEFT_COMMIT=<sha> [FI_DIR=<dir>] [BASELINES=<kit folder, default ./.baselines>]
#   [STAGES="build tests san bench fi"] scripts/diag/fp8_check.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
OUT="${OUT:-$ROOT/fp8-out}"
mkdir -p "$OUT"
B="$ROOT/build-fp8"
STAGES="${STAGES:-build tests san bench fi}"
BASELINES="${BASELINES:-$ROOT/.baselines}"
T0=$SECONDS
say() { echo "=== [$((SECONDS - T0))s] $*" | tee -a "$OUT/steps.log"; }
has() { [[ " $STAGES " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUT/env.txt"
echo "commit ${WEFT_COMMIT:-?}" | tee -a "$OUT/env.txt"

if [ -n "${FI_DIR:-}" ] && has fi; then  # FlashInfer's wheels install while weft builds
  (python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$BASELINES"/whl/*.whl \
     > "$OUT/fi_install.log" 2>&1; echo "rc=$?" >> "$OUT/fi_install.log") &
  FI_PID=$!
fi

if has build; then
  say build
  cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a -DWEFT_BUILD_TESTS=ON \
    -DWEFT_BUILD_BENCH=ON -DWEFT_WITH_COMM=OFF -DWEFT_DISABLE="comm;prefill;tp" > "$OUT/build.log" 2>&1 || { say "configure failed"; tail -30 "$OUT/build.log"; }
  timeout 300 ninja -C "$B" -j16 weft_host_core weft_host_paged weft_gpu_decode weft_gpu_paged weft-bench >> "$OUT/build.log" 2>&1
  rc=$?
  say "build rc=$rc"
  [ $rc -ne 0 ] && grep -E "error|FAILED" "$OUT/build.log" | head -30
fi

if has tests; then
  say tests
  {
    "$B/tests/weft_host_core" --gtest_brief=1 --gtest_filter='Fp8*'
    "$B/tests/weft_host_paged" --gtest_brief=1
    "$B/tests/weft_gpu_paged" --gtest_brief=1
    "$B/tests/weft_gpu_decode" --gtest_brief=1
  } > "$OUT/tests.log" 2>&1
  grep -E "PASSED|FAILED|\[fp8\]|Failure" "$OUT/tests.log" | head -60
  say "tests done"
fi

if has san; then
  say sanitizer
  {
    compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tests/weft_gpu_decode" --gtest_brief=1 --gtest_filter='DecodeFp8Small*'
    echo "memcheck decode rc=$?"
    compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tests/weft_gpu_paged" --gtest_brief=1 --gtest_filter='AppendFp8Small*'
    echo "memcheck append rc=$?"
    timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 "$B/tests/weft_gpu_decode" --gtest_brief=1 \
      --gtest_filter='DecodeFp8Small.BothPathsFormatsAndScaleGranularities'
    echo "racecheck decode rc=$?"
  } > "$OUT/sanitizer.log" 2>&1
  grep -E "rc=|ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$OUT/sanitizer.log"
  say "sanitizer done"
fi

if has bench; then
  say bench
  timeout 200 "$B/bench/weft-bench" --group decode --filter decode/fp8/ --json "$OUT/bench_fp8.json" > "$OUT/bench.log" 2>&1
  say "bench rc=$?"
  grep -E "decode/fp8" "$OUT/bench.log" | head -90
fi

if [ -n "${FI_DIR:-}" ] && has fi; then
  wait "$FI_PID"
  say "flashinfer fp8 (install: $(tail -1 "$OUT/fi_install.log"))"
  PYTHONPATH=/tmp/site FI_KIT="$BASELINES" timeout 150 python3 "$FI_DIR/fi_fp8.py" --aot "$FI_DIR/aot" \
    --out "$OUT/fi_fp8.json" > "$OUT/fi.log" 2>&1
  say "flashinfer rc=$?"
  tail -n 8 "$OUT/fi.log"
fi
say "all done"
