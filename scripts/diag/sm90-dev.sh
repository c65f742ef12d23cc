#!/usr/bin/env bash
# One device call for the Hopper prefill mainloop (src/prefill/sm90/): build the prefill tests and
# weft-bench, run the prefill GPU tests, the prefill bench rows (sm90, FA2 pinned, default; the
# d256/d64 rows in a second weft-bench run so a fault there cannot cost the others), PyTorch SDPA
# cuDNN + FLASH on the same shapes (bench/sdpa_prefill.py), FlashInfer's sm90 backend (fi-auto,
# when .baselines/ was carried), compute-sanitizer memcheck / racecheck on small sm90 filters, and
# the same-call ratios (bench/sm90_compare.py -> $OUT/bench_cmp.json, extra.speedup_vs_*).
# Usage (device machine, repo root): scripts/diag/sm90-dev.sh [steps]
#   steps: a comma list of suite, test (PrefillSm90* only), bench, sdpa, fi, memcheck, racecheck,
#   variants, pagedv (default: suite,bench,sdpa,memcheck,fi,racecheck), run in that order.
#   pagedv: a second tree built with -DWEFT_SM90_PAGED_V_WHOLE=ON (the experimental whole-page V
#   boxes, sm90_launch.h): its PrefillSm90* tests, a memcheck of its paged cases, then its paged
#   and ragged rows alternated with the shipped build's (two passes each).
# Env: OUT, WEFT_COMMIT, DEADLINE (seconds from the start after which no new step starts; 400),
#      SM90_VARIANTS (variants step), BENCH_ARGS, FI_ARGS, MEMCHECK_FILTER, RACECHECK_FILTER (gtest filters).
set -uo pipefail
OUT=${OUT:-/tmp/sm90-out}
mkdir -p "$OUT"
STEPS=",${1:-suite,bench,sdpa,memcheck,fi,racecheck},"
has() { [[ "$STEPS" == *",$1,"* ]]; }
source scripts/env.sh
BUILD=build-gpu
DEADLINE=${DEADLINE:-400}
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
# A step starts only before the deadline; its own timeout is capped by what is left.
room() { local left=$(( DEADLINE - $(el) )); if [ "$left" -lt 15 ]; then echo "skip $1: deadline (t=$(el) s)"; return 1; fi; echo "== $1 (t=$(el) s)"; }
cap() { local left=$(( DEADLINE + 40 - $(el) )); [ "$1" -lt "$left" ] && echo "$1" || echo "$left"; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

if has fi && [ -d .baselines/whl ]; then
  ( python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      .baselines/whl/*.whl > "$OUT/fi_install.log" 2>&1 ) &
  FI_PID=$!
fi
cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_DISABLE=comm -DWEFT_BUILD_TESTS=ON \
  > "$OUT/build.log" 2>&1
targets="weft_gpu_prefill"
if has bench || has variants; then targets="$targets weft-bench"; fi
if has variants; then
  for v in ${SM90_VARIANTS:-0 3}; do
    [ "$v" = 15 ] && continue
    ( cmake -S . -B $BUILD-v$v -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_DISABLE="comm;norm" \
        -DWEFT_BUILD_TESTS=OFF -DWEFT_SM90_PIPELINE=$v && cmake --build $BUILD-v$v -j8 --target weft-bench ) \
      > "$OUT/build_v$v.log" 2>&1 &
  done
fi
if has pagedv; then
  ( cmake -S . -B $BUILD-pv -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_DISABLE=comm -DWEFT_BUILD_TESTS=ON \
      -DWEFT_SM90_PAGED_V_WHOLE=ON && cmake --build $BUILD-pv -j8 --target weft_gpu_prefill weft-bench ) \
    > "$OUT/build_pv.log" 2>&1 &
  PV_PID=$!
  targets="weft_gpu_prefill weft-bench"
fi
if ! cmake --build $BUILD -j16 --target $targets >> "$OUT/build.log" 2>&1; then
  tail -n 40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1
fi
echo "build: $(el) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
T=$BUILD/tests/weft_gpu_prefill

if has suite && room suite; then
  timeout "$(cap 170)" $T --gtest_brief=1 > "$OUT/test_suite.log" 2>&1
  echo "prefill suite rc=$?"; grep -E "^\[  (FAILED|PASSED|SKIPPED) |tests ran|Failure|sm90 mainloop not" "$OUT/test_suite.log" | head -30
elif has test && room test; then
  timeout "$(cap 120)" $T --gtest_filter='PrefillSm90*' > "$OUT/test_sm90.log" 2>&1
  echo "sm90 tests rc=$?"; grep -E "^\[  (FAILED|PASSED) |Failure" "$OUT/test_sm90.log" | head -30
fi
if has bench && room bench; then
  F="--filter prefill/causal/ --filter prefill/chunked/ --filter prefill/mixed --filter prefill/plan/"
  F="$F --filter prefill/sm90/causal/ --filter prefill/sm90/noncausal/ --filter prefill/sm90/chunked/ --filter prefill/fa2/causal/"
  F="$F --filter prefill/fa2/noncausal/ --filter prefill/fa2/chunked/"
  timeout "$(cap 90)" $BUILD/bench/weft-bench --group prefill $F ${BENCH_ARGS:-} --commit "${WEFT_COMMIT:-}" \
    --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1
  echo "bench rc=$?"
  if room bench-dims; then
    timeout "$(cap 60)" $BUILD/bench/weft-bench --group prefill --no-ceilings --filter /d256/ --filter /d64/ \
      --commit "${WEFT_COMMIT:-}" --json "$OUT/bench_dims.json" > "$OUT/bench_dims.log" 2>&1
    echo "bench dims rc=$?"
  fi
fi
if has sdpa && room sdpa; then
  timeout "$(cap 110)" python3 bench/sdpa_prefill.py --budget "$(cap 80)" --out "$OUT/sdpa.json" > "$OUT/sdpa.log" 2>&1
  echo "sdpa rc=$?"; tail -n 2 "$OUT/sdpa.log"
fi
if has memcheck && room memcheck; then
  timeout "$(cap 60)" compute-sanitizer --tool memcheck --error-exitcode 9 $T \
    --gtest_filter="${MEMCHECK_FILTER:-PrefillSm90.ChunkedSplitAndEmpty:PrefillSm90.HeadDim256Forced128OnFa2Rejected:PrefillSm90.HeadDim256DefaultTile}" \
    > "$OUT/memcheck.log" 2>&1
  echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/memcheck.log" | head -5
fi
if has fi && [ -n "${FI_PID:-}" ] && room fi; then
  wait $FI_PID
  PYTHONPATH=/tmp/site timeout "$(cap 100)" python3 .baselines/fi_bench.py --group prefill --variant fi-auto \
    --budget "$(cap 70)" ${FI_ARGS:-} --out "$OUT/fi.json" > "$OUT/fi.log" 2>&1
  echo "fi rc=$?"; tail -n 3 "$OUT/fi.log"
fi
if has racecheck && room racecheck; then
  timeout "$(cap 60)" compute-sanitizer --tool racecheck --error-exitcode 9 $T \
    --gtest_filter="${RACECHECK_FILTER:-PrefillSm90.HeadDim256DefaultTile}" > "$OUT/racecheck.log" 2>&1
  echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY|PASSED|FAILED" "$OUT/racecheck.log" | head -5
fi
# Same-call A/B of the sm90 pipeline variants (bit 0 overlap, bit 1 ping-pong, 15 = shipped): the
# shipped build's weft-bench and one per experimental variant.
if has variants; then
  wait
  for v in 15 ${SM90_VARIANTS:-0 3}; do
    bin=$BUILD/bench/weft-bench
    [ "$v" = 15 ] || bin=$BUILD-v$v/bench/weft-bench
    [ -x "$bin" ] || { echo "variant $v: build failed (see build_v$v.log)"; continue; }
    timeout 120 "$bin" --group prefill --no-ceilings \
      ${VARIANT_ARGS:---filter prefill/sm90/causal/ragged/L4096 --filter prefill/sm90/causal/ragged/L16384} \
      --json "/tmp/variant$v.json" > "/tmp/variant$v.log" 2>&1
    python3 -c "import json,sys; d=json.load(open('/tmp/variant$v.json')); print('variant $v', ' '.join('%s=%.1f' % (c['name'].split('sm90/')[-1], c['flops']/c['ms']/1e9) for c in d['cases'] if c.get('ms')))"
  done
fi
if has pagedv && room pagedv; then
  if wait $PV_PID; then
    timeout "$(cap 90)" $BUILD-pv/tests/weft_gpu_prefill --gtest_filter='PrefillSm90*' > "$OUT/pv_tests.log" 2>&1
    echo "pagedv tests rc=$?"; grep -E "^\[  (FAILED|PASSED) |Failure" "$OUT/pv_tests.log" | head -20
    timeout "$(cap 60)" compute-sanitizer --tool memcheck --error-exitcode 9 $BUILD-pv/tests/weft_gpu_prefill \
      --gtest_filter='PrefillSm90.BatchesPagedAndRagged:PrefillSm90.HeadDim256DefaultTile' > "$OUT/pv_memcheck.log" 2>&1
    echo "pagedv memcheck rc=$?"; grep -E "ERROR SUMMARY" "$OUT/pv_memcheck.log" | head -3
    PF="--filter prefill/sm90/causal/ragged/L8192 --filter prefill/sm90/causal/paged/L8192 --filter prefill/sm90/causal/ragged/L16384"
    PF="$PF --filter prefill/sm90/causal/paged/L16384 --filter prefill/sm90/d256/causal/ --filter prefill/sm90/chunked/c512/h16384"
    for pass in 1 2; do
      for b in shipped pv; do
        bin=$BUILD/bench/weft-bench; [ $b = pv ] && bin=$BUILD-pv/bench/weft-bench
        room "pagedv bench $b $pass" && timeout "$(cap 60)" $bin --group prefill --no-ceilings $PF \
          --commit "${WEFT_COMMIT:-}" --json "$OUT/pv_${b}_$pass.json" > "$OUT/pv_${b}_$pass.log" 2>&1
        grep -E "^prefill/" "$OUT/pv_${b}_$pass.log" | sed "s/^/$b$pass /"
      done
    done
  else
    echo "pagedv build failed"; tail -n 20 "$OUT/build_pv.log"
  fi
fi
W="$OUT/bench.json"
[ -f "$OUT/bench_dims.json" ] && W="$W,$OUT/bench_dims.json"
[ -f "$OUT/bench.json" ] && python3 bench/sm90_compare.py --weft "$W" --fi "$OUT/fi.json" --sdpa "$OUT/sdpa.json" \
  --out "$OUT/bench_cmp.json" | tee "$OUT/compare.md"
echo "total: $(el) s"
