#!/usr/bin/env bash
# One device call for issues 22 and 24 (the session of 2026-11-24): the decode GPU tests of block
# tables, the work queue and the public routes (DecodeRouteSmall) + memcheck on the *Small* ones;
# the router calibrated on one trace seed and reported on a held-out seed through the public
# DecodeRoute::kAuto wrapper; FlashInfer's decode wrapper on the held-out steps (the kit's wheel
# and pre-built modules); the Python package's pytest suite from an in-tree wheel built on the
# 2-core machine (carried as $PYSITE) and the HF Llama example (fp16 and bf16).
#   OUT=... WEFT_COMMIT=... PYSITE=.pysite-serve KIT=<kit: whl/, aot/, fi_bench.py> scripts/diag/serve_py_check.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH="/usr/local/cuda/bin:$PATH"
OUT="${OUT:-$PWD/serve-py-out}"
PYSITE="$(cd "${PYSITE:-.pysite-serve}" 2>/dev/null && pwd)"
KIT="${KIT:-.baselines}"
STEPS="${STEPS:-40}"
mkdir -p "$OUT"
t0=$SECONDS
log() { echo "[$((SECONDS - t0))s] $*" | tee -a "$OUT/check.log"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.used --format=csv >> "$OUT/check.log" 2>&1
python3 --version >> "$OUT/check.log" 2>&1

# 1. Build (background) while FlashInfer installs and the Python tests run.
( cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_BUILD_TESTS=ON -DWEFT_WITH_COMM=OFF \
    -DWEFT_DISABLE="prefill;norm;comm" > "$OUT/build.log" 2>&1 \
  && cmake --build build-gpu -j12 --target weft_gpu_decode weft-serve-sim >> "$OUT/build.log" 2>&1
  echo "rc=$?" > "$OUT/build.rc" ) &
bpid=$!
( python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/fisite \
    "$KIT"/whl/*.whl > "$OUT/fi_install.log" 2>&1; echo "rc=$?" >> "$OUT/fi_install.log" ) &
fipid=$!
if [ -n "$PYSITE" ] && [ -d "$PYSITE/weft" ]; then
  ( cd python/tests && PYTHONPATH="$PYSITE" PYTHONDONTWRITEBYTECODE=1 timeout 120 python3 -m pytest -q -rs \
      -p no:cacheprovider > "$OUT/pytest.log" 2>&1; echo "rc=$?" >> "$OUT/pytest.log" )
  log "pytest $(tail -3 "$OUT/pytest.log" | tr '\n' ' ')"
else
  log "no Python site at '$PYSITE': pytest skipped"
fi
# The HF Llama example (fp16 and bf16; tokens, logits, teacher-forced check, step times), while the
# build runs on 12 of the 16 cores (its step times are CPU-contended: compare weft with SDPA only).
if [ -n "$PYSITE" ] && [ -d "$PYSITE/weft" ]; then
  PYTHONPATH="$PYSITE" timeout "${HF_TIMEOUT:-150}" python3 examples/hf_llama_generate.py --out "$OUT/hf_llama_generate.json" \
    > "$OUT/hf_llama_generate.log" 2>&1
  log "hf example rc=$? $(tail -1 "$OUT/hf_llama_generate.log")"
  grep -E "tokens equal|teacher-forced" "$OUT/hf_llama_generate.log" | tee -a "$OUT/check.log"
fi
wait $bpid
log "build $(cat "$OUT/build.rc")"
grep -q "rc=0" "$OUT/build.rc" || { grep -n "error" "$OUT/build.log" | head -30; }
wait $fipid
log "flashinfer install $(tail -1 "$OUT/fi_install.log")"

# 2. GPU tests of this work + memcheck on the small ones.
if [ -x build-gpu/tests/weft_gpu_decode ]; then
  timeout 60 ./build-gpu/tests/weft_gpu_decode --gtest_brief=1 \
    --gtest_filter='DecodeBlockTable*:DecodeWorkQueue*:DecodeRoute*' > "$OUT/tests.log" 2>&1
  log "weft_gpu_decode (block table, work queue, routes) rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests.log" | tr '\n' ' ')"
  grep -B2 -A12 "Failure" "$OUT/tests.log" | head -60
  timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 ./build-gpu/tests/weft_gpu_decode --gtest_brief=1 \
    --gtest_filter='DecodeRouteSmall*:DecodeWorkQueueSmall*' > "$OUT/memcheck.log" 2>&1
  log "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
fi

# 3. Router (calibration seed 20260622, held-out 20260623, kAuto wrapper) and 4. FlashInfer on the
# same held-out steps: scripts/diag/serve-router.sh.
B=build-gpu/bench/weft-serve-sim KIT="$KIT" STEPS="$STEPS" FI_LOG="$OUT/fi_install.log" bash scripts/diag/serve-router.sh "$OUT" 2>&1 |
  tee -a "$OUT/check.log"

log "done"
# The device tool returns a few files only: everything but check.log in one archive.
# (written outside $OUT first: tar over a folder that gains its own archive fails with "file
# changed as we read it", and then nothing was deleted and the results did not come back)
( cd "$OUT" && tar -czf /tmp/serve-results.tgz --exclude=check.log --exclude=build.log . ; \
  mv /tmp/serve-results.tgz results.tgz && find . -maxdepth 1 -type f ! -name check.log ! -name results.tgz -delete )
