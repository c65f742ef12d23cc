#!/usr/bin/env bash
# One device call for issue 22: build the decode GPU tests and weft-serve-sim, run the decode GPU
# tests, compute-sanitizer memcheck (block-table / work-queue *Small* tests) and racecheck (the
# work queue), calibrate the router on one trace seed and report on a held-out seed.
#   OUT=... WEFT_COMMIT=... scripts/diag/serve_check.sh [--steps N] [--skip-tests]
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH="/usr/local/cuda/bin:$PATH"
OUT="${OUT:-$PWD/serve-check-out}"
mkdir -p "$OUT"
STEPS=40
SKIP_TESTS=0
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift ;;
    --skip-tests) SKIP_TESTS=1 ;;
  esac
  shift
done
t0=$SECONDS
log() { echo "[$((SECONDS - t0))s] $*" | tee -a "$OUT/serve_check.log"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.used --format=csv >> "$OUT/serve_check.log" 2>&1
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_BUILD_TESTS=ON -DWEFT_WITH_COMM=OFF \
  -DWEFT_DISABLE="prefill;norm;comm" > "$OUT/build.log" 2>&1 || { log "configure failed"; tail -40 "$OUT/build.log"; exit 1; }
cmake --build build-gpu -j16 --target weft_gpu_decode weft-serve-sim >> "$OUT/build.log" 2>&1 \
  || { log "build failed"; grep -n "error" "$OUT/build.log" | head -40; exit 1; }
log "build ok"
if [ "$SKIP_TESTS" = 0 ]; then
  timeout 90 ./build-gpu/tests/weft_gpu_decode --gtest_brief=1 > "$OUT/tests.log" 2>&1
  log "weft_gpu_decode rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests.log" | tr '\n' ' ')"
  grep -B2 -A12 "Failure" "$OUT/tests.log" | head -60
  timeout 80 compute-sanitizer --tool memcheck --error-exitcode 9 ./build-gpu/tests/weft_gpu_decode --gtest_brief=1 \
    --gtest_filter='DecodeBlockTableSmall*:DecodeWorkQueueSmall*' > "$OUT/memcheck.log" 2>&1
  log "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
  timeout 45 compute-sanitizer --tool racecheck --error-exitcode 9 ./build-gpu/tests/weft_gpu_decode --gtest_brief=1 \
    --gtest_filter='DecodeWorkQueueSmall*' > "$OUT/racecheck.log" 2>&1
  log "racecheck rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/racecheck.log" | tail -1)"
fi
timeout 90 ./build-gpu/bench/weft-serve-sim --calibrate "$OUT/router_h100.json" --seed 20260622 --steps "$STEPS" \
  --out "$OUT/serve_calibration.json" > "$OUT/serve_calibration.log" 2>&1
log "calibration rc=$?"
tail -3 "$OUT/serve_calibration.log"
timeout 90 ./build-gpu/bench/weft-serve-sim --router "$OUT/router_h100.json" --seed 20260623 --steps "$STEPS" \
  --out "$OUT/serve_heldout.json" > "$OUT/serve_heldout.log" 2>&1
log "held-out rc=$?"
tail -3 "$OUT/serve_heldout.log"
python3 - "$OUT/serve_heldout.json" <<'PY' | tee -a "$OUT/serve_check.log"
import json, sys
d = json.load(open(sys.argv[1]))
for f in d["families"]:
    r = f["routes"]
    print(f"{f['name']:12s} best {f['best_fixed']:18s} {f['best_fixed_wall_us_mean']:9.1f} us  router {f.get('router_wall_us_mean', 0):9.1f} us"
          f"  ratio {f.get('router_vs_best_fixed', 0):.3f}  picks {f.get('picks')}  ok {all(c['ok'] for c in f['check'].values())}")
print(d["cases"][0])
PY
log "done"
