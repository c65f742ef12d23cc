#!/usr/bin/env bash
# Diagnostic (device): issue 19's same-call A/B (core-ab.sh) with binaries built on the dev box
# (Release, CMAKE_CUDA_ARCHITECTURES=90a, WEFT_DISABLE="norm;comm", the flags core-ab.sh builds
# with), so the device call spends no minutes building two trees. BIN holds them xz-compressed:
#   weft-bench.new.xz   the new tree's weft-bench (static libweft)
#   weft-bench.old.xz   the old tree's weft-bench and libweft.so.0.old.xz (it linked libweft shared)
#   weft_gpu_decode.xz  optional: the new tree's decode GPU tests, run first (TESTS_FILTER, default
#                       all) with their log in $OUT/gpu_tests.txt; MEMCHECK_FILTER (optional) runs
#                       that filter under compute-sanitizer memcheck too (TESTS_TIMEOUT /
#                       MEMCHECK_TIMEOUT seconds, default 150 / 120).
# Usage (repo root): OUT=... WEFT_COMMIT=<new> BASE_COMMIT=<old> BIN=<dir> PAIRS=3 DEADLINE=300 \
#   scripts/diag/core-ab-prebuilt.sh [weft-bench args, e.g. --no-ceilings]
# DEADLINE counts from core-ab.sh's start (after the tests).
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
BIN=${BIN:?BIN: folder of the compressed binaries}
OUT="${OUT:-./ab-out}"
mkdir -p "$OUT" /tmp/ab-old/bench /tmp/ab-new/bench /tmp/ab-tests
unxz_to() {  # <file.xz> <destination>: xz if present, else Python's lzma
  if command -v xz > /dev/null; then xz -dc "$1" > "$2"; else
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"
  fi && chmod +x "$2"
}
unxz_to "$BIN/weft-bench.new.xz" /tmp/ab-new/bench/weft-bench || exit 1
unxz_to "$BIN/weft-bench.old.xz" /tmp/ab-old/bench/weft-bench || exit 1
unxz_to "$BIN/libweft.so.0.old.xz" /tmp/ab-old/libweft.so.0 || exit 1
cuda_libs=$(dirname "$(find /usr/local/cuda* -name 'libcudart.so.*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=/tmp/ab-old:${cuda_libs}:/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
ldd /tmp/ab-old/bench/weft-bench /tmp/ab-new/bench/weft-bench | grep "not found" && exit 1
if [ -f "$BIN/weft_gpu_decode.xz" ]; then
  unxz_to "$BIN/weft_gpu_decode.xz" /tmp/ab-tests/weft_gpu_decode || exit 1
  { nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
    timeout "${TESTS_TIMEOUT:-150}" /tmp/ab-tests/weft_gpu_decode --gtest_filter="${TESTS_FILTER:-*}" 2>&1 | grep -E "^\[ +(OK|FAILED|PASSED|SKIPPED) |tests ran|FAILED"
    echo "gpu tests rc ${PIPESTATUS[0]}"
    if [ -n "${MEMCHECK_FILTER:-}" ]; then
      timeout "${MEMCHECK_TIMEOUT:-120}" compute-sanitizer --tool memcheck /tmp/ab-tests/weft_gpu_decode --gtest_filter="$MEMCHECK_FILTER" 2>&1 |
        grep -E "ERROR SUMMARY|tests ran|PASSED|FAILED"
    fi
  } > "$OUT/gpu_tests.txt" 2>&1
  tail -4 "$OUT/gpu_tests.txt"
fi
SKIP_BUILD=1 scripts/diag/core-ab.sh /dev/null "$@"
