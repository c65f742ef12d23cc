#!/usr/bin/env bash
# One device call for a follow-up round landed after scripts/diag/main-check.sh: one build-gpu
# (comm, tp, norm left out) of the GPU tests of the suites that changed + weft-bench +
# weft-serve-sim, the Python pytest from a carried wheel (in parallel with the build), those
# suites' GPU tests and memcheck on their small tests, the serving harness (router calibrated on
# seed 20260622 and reported on the held-out 20260623, FlashInfer's decode wrapper on the same
# steps, the hybrid family through POD) and weft-bench's pat group. 8 files come back: check.log,
# python.log, serve_calibration.json, serve_heldout.json, serve_flashinfer.json, router_h100.json,
# serve_hybrid.json, pat.json.
#   OUT=... WEFT_COMMIT=... [PYSITE_TAR=pysite.tar.xz] [KIT=../.baselines] [SUITES="decode attention"]
#   [MEMCHECK_FILTER=...] scripts/diag/followup-check.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH="/usr/local/cuda/bin:$PATH"
OUT="${OUT:-$PWD/followup-out}"
mkdir -p "$OUT"
LOG="$OUT/check.log"
KIT="$(cd "${KIT:-../.baselines}" 2>/dev/null && pwd)"
SUITES="${SUITES:-decode attention}"
t0=$SECONDS
note() { echo "[$((SECONDS - t0))s] $*" | tee -a "$LOG"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> "$LOG" 2>&1
note "commit ${WEFT_COMMIT:-?} suites: $SUITES"
if [ -n "$KIT" ]; then
  ( python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/fisite \
      "$KIT"/whl/*.whl > /tmp/fi_install.log 2>&1; echo "rc=$?" >> /tmp/fi_install.log ) &
fi
if [ -f "${PYSITE_TAR:-pysite.tar.xz}" ]; then
  # The wheel's folder in the archive may be hidden (.pysite12): list dot-folders too.
  ( mkdir -p /tmp/ps && tar -xJf "${PYSITE_TAR:-pysite.tar.xz}" -C /tmp/ps &&
    site=$(find /tmp/ps -mindepth 1 -maxdepth 1 -type d | head -1) && cd python/tests &&
    PYTHONPATH="$site" PYTHONDONTWRITEBYTECODE=1 timeout 150 python3 -m pytest -q -rs -p no:cacheprovider \
      > "$OUT/python.log" 2>&1; echo "pytest rc=$?" >> "$OUT/python.log" ) &
fi
targets="weft-bench weft-serve-sim"
for s in $SUITES; do targets="$targets weft_gpu_$s"; done
{ cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a -DWEFT_BUILD_TESTS=ON \
    -DWEFT_BUILD_BENCH=ON -DWEFT_WITH_COMM=OFF -DWEFT_DISABLE="comm;tp;norm" &&
  cmake --build build-gpu -j16 --target $targets; } > /tmp/build.log 2>&1
rc=$?
note "build rc=$rc"
[ "$rc" = 0 ] || grep -E "error|FAILED" /tmp/build.log | head -30 | tee -a "$LOG"
T=build-gpu/tests
for s in $SUITES; do
  timeout 150 "$T/weft_gpu_$s" --gtest_brief=1 > /tmp/t_$s.log 2>&1
  note "weft_gpu_$s rc=$? $(grep -E '^\[  (PASSED|FAILED)' /tmp/t_$s.log | tr '\n' ' ')"
  grep -B3 -A15 "Failure" /tmp/t_$s.log | head -60 >> "$LOG"
done
MF="${MEMCHECK_FILTER:-DecodeSmall.SharePrefixes*:DecodeSmall.SplitKVWithEmptyRequests:DecodeWorkQueueSmall.MatchesReference:DecodeRouteSmall.*:StateMergeGpu.*}"
for s in $SUITES; do
  timeout 90 compute-sanitizer --tool memcheck --print-limit 10 "$T/weft_gpu_$s" --gtest_brief=1 "--gtest_filter=$MF" \
    > /tmp/m_$s.log 2>&1
  note "memcheck weft_gpu_$s rc=$? $(grep -E 'ERROR SUMMARY' /tmp/m_$s.log | tail -1) $(grep -E '^\[  (PASSED|FAILED)' /tmp/m_$s.log | tr '\n' ' ')"
done
B=build-gpu/bench/weft-serve-sim
B="$B" KIT="$KIT" bash scripts/diag/serve-router.sh "$OUT" 2>&1 | tee -a "$LOG"
B="$B" WEFT_COMMIT="${WEFT_COMMIT:-}" bash scripts/diag/serve-hybrid.sh "$OUT/serve_hybrid.json" 2>&1 | tee -a "$LOG"
if [ -x build-gpu/bench/weft-bench ]; then
  timeout 120 build-gpu/bench/weft-bench --group pat --commit "${WEFT_COMMIT:-}" --json "$OUT/pat.json" > /tmp/pat.log 2>&1
  note "weft-bench pat rc=$?"
  python3 - "$OUT/pat.json" <<'PY' 2>&1 | tee -a "$LOG"
import json, sys
d = json.load(open(sys.argv[1]))
for c in d["cases"]:
    if c["name"] == "pat/summary":
        print("pat/summary", c["extra"])
PY
fi
wait
note "done"
