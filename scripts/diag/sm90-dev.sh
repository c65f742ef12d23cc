#!/usr/bin/env bash
# One device call for the Hopper prefill mainloop (src/prefill/sm90/): build the prefill tests and
# weft-bench, run the prefill GPU tests, the prefill bench rows (sm90, FA2 pinned, default; the
# d256/d64 rows in a second weft-bench run so a fault there cannot cost the others), PyTorch SDPA
# cuDNN + FLASH on the same shapes (bench/sdpa_prefill.py), FlashInfer's sm90 backend (fi-auto,
# when .baselines/ was carried), compute-sanitizer memcheck / racecheck on small sm90 filters, and
# the same-call ratios (bench/sm90_compare.py, printed; run it again on the returned JSON files).
# Usage (device machine, repo root): scripts/diag/sm90-dev.sh [steps]
#   steps: a comma list of suite, test (PrefillSm90* only), exp, bench, sdpa, fi, memcheck,
#   racecheck, variants (default: suite,bench,sdpa,memcheck,fi,racecheck). Order of the work:
#   builds (all trees in parallel), suite / test, memcheck, racecheck, exp (its trees' tests,
#   sanitizers and the alternating A/B passes), fi, bench, variants, sdpa.
#   exp: one experiments tree per entry of EXPS, built beside the shipped one, each entry
#   "name:flag,flag" (CMake -D flags of an experiments-only option, e.g. "fast:-DWEFT_X=ON"; the
#   2a5f27b run compared -DWEFT_SM90_PAGED_V_WHOLE / -DWEFT_SM90_FAST_START, both shipped since).
#   A flag src=DIR builds that tree from another source tree (e.g. "old:src=../.snap-old": a
#   snapshot of the build before a change, carried beside this one, for a before/after A/B).
#   Per tree: the weft_gpu_prefill suite (EXP_TESTS: a gtest filter,
#   default all; - for none), memcheck (EXP_MEMCHECK; - for none), racecheck (EXP_RACECHECK, when
#   set); then AB_PASSES
#   passes (default 2) of the AB_FILTERS rows alternating the shipped build and each experiment
#   (-> ab.json: every pass's rows, named <tree>/<pass>/<row>); with bench, the experiment trees
#   named in EXP_BENCH (default all) also run the bench step's rows (bench_<name>.json).
# Env: OUT, WEFT_COMMIT, DEADLINE (seconds from the start after which no new step starts; 400),
#      DISABLE (WEFT_DISABLE of every tree; default comm), SM90_VARIANTS (variants step), BENCH_ARGS,
#      AB_ARGS, EXP_JOBS (build jobs per experiment tree; 8), FI_ARGS, MEMCHECK_FILTER, RACECHECK_FILTER (gtest filters),
#      SAN_CAP (seconds per sanitizer run; 60).
# Files in $OUT (at most 8 come back from the device): bench.json (shipped tree, d256/d64 rows
# merged in), bench_<exp>.json, ab.json, fi.json, sdpa.json, logs.tar.gz (console and every log).
set -uo pipefail
OUT=${OUT:-/tmp/sm90-out}
LOG=/tmp/sm90-logs
mkdir -p "$OUT" "$LOG"
exec > >(tee "$LOG/console.txt") 2>&1
STEPS=",${1:-suite,bench,sdpa,memcheck,fi,racecheck},"
has() { [[ "$STEPS" == *",$1,"* ]]; }
source scripts/env.sh
BUILD=build-gpu
DEADLINE=${DEADLINE:-400}
DISABLE=${DISABLE:-comm}
EXPS=${EXPS:-}
if has exp && [ -z "$EXPS" ]; then echo "exp: set EXPS (name:-DOPTION=ON ...)"; exit 2; fi
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
# A step starts only before the deadline; its own timeout is capped by what is left.
room() { local left=$(( DEADLINE - $(el) )); if [ "$left" -lt 15 ]; then echo "skip $1: deadline (t=$(el) s)"; return 1; fi; echo "== $1 (t=$(el) s)"; }
cap() { local left=$(( DEADLINE + 40 - $(el) )); [ "$1" -lt "$left" ] && echo "$1" || echo "$left"; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
echo "commit ${WEFT_COMMIT:-?} steps $STEPS disable '$DISABLE'"
has exp && echo "experiments: $EXPS"

if has fi && [ -d .baselines/whl ]; then
  ( python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      .baselines/whl/*.whl > "$LOG/fi_install.log" 2>&1 ) &
  FI_PID=$!
fi
targets="weft_gpu_prefill"
if has bench || has variants || has exp; then targets="$targets weft-bench"; fi
if has variants; then
  for v in ${SM90_VARIANTS:-0 3}; do
    [ "$v" = 15 ] && continue
    ( cmake -S . -B $BUILD-v$v -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_DISABLE="$DISABLE;norm" \
        -DWEFT_BUILD_TESTS=OFF -DWEFT_SM90_PIPELINE=$v && cmake --build $BUILD-v$v -j8 --target weft-bench ) \
      > "$LOG/build_v$v.log" 2>&1 &
  done
fi
# Experiment trees: name -> flags; built in the background, waited for in the exp step.
declare -A EXP_PID
EXP_NAMES=()
OK_EXPS=()
if has exp; then
  for e in $EXPS; do
    name=${e%%:*}; flags=${e#*:}; src=.
    [ "$flags" = "$e" ] && flags=""
    fl=""; for f in ${flags//,/ }; do case $f in src=*) src=${f#src=} ;; *) fl="$fl $f" ;; esac; done
    EXP_NAMES+=("$name")
    ( cmake -S $src -B $BUILD-$name -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_DISABLE="$DISABLE" -DWEFT_BUILD_TESTS=ON \
        $fl && cmake --build $BUILD-$name -j${EXP_JOBS:-8} --target $targets ) > "$LOG/build_$name.log" 2>&1 &
    EXP_PID[$name]=$!
  done
fi
cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_DISABLE="$DISABLE" -DWEFT_BUILD_TESTS=ON \
  > "$LOG/build.log" 2>&1
if ! cmake --build $BUILD -j16 --target $targets >> "$LOG/build.log" 2>&1; then
  tail -n 40 "$LOG/build.log"; echo "BUILD FAILED"; tar -czf "$OUT/logs.tar.gz" -C "$LOG" .; exit 1
fi
echo "build: $(el) s"
grep -h "spill" "$LOG/build.log" | grep sm90 | sed 's/^.*function //' | sort -u | head -8
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
T=$BUILD/tests/weft_gpu_prefill

# Tests of one tree: suite (all) or test (PrefillSm90*), by the step list.
run_tests() {  # tree-dir label filter
  local bin=$1/tests/weft_gpu_prefill lab=$2 flt=$3
  timeout "$(cap 170)" $bin --gtest_brief=1 --gtest_filter="$flt" > "$LOG/test_$lab.log" 2>&1
  echo "$lab tests ($flt) rc=$?"
  grep -E "^\[  (FAILED|PASSED|SKIPPED) |tests ran|Failure|sm90 mainloop not" "$LOG/test_$lab.log" | head -20
}
sanitize() {  # tool tree-dir label filter
  timeout "$(cap ${SAN_CAP:-60})" compute-sanitizer --tool $1 --error-exitcode 9 $2/tests/weft_gpu_prefill --gtest_filter="$4" \
    > "$LOG/$1_$3.log" 2>&1
  echo "$3 $1 rc=$? ($4)"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$LOG/$1_$3.log" | head -5
}
if has suite && room suite; then run_tests $BUILD shipped '*'
elif has test && room test; then run_tests $BUILD shipped 'PrefillSm90*'
fi
if has memcheck && room memcheck; then
  sanitize memcheck $BUILD shipped "${MEMCHECK_FILTER:-PrefillSm90.ChunkedSplitAndEmpty:PrefillSm90.HeadDim256Forced128OnFa2Rejected:PrefillSm90.HeadDim256DefaultTile}"
fi
if has racecheck && room racecheck; then
  sanitize racecheck $BUILD shipped "${RACECHECK_FILTER:-PrefillSm90.HeadDim256DefaultTile}"
fi

# Experiments: tests + sanitizers per tree, then the alternating A/B passes.
if has exp; then
  for name in "${EXP_NAMES[@]}"; do
    if wait "${EXP_PID[$name]}"; then
      echo "build $name: ok (t=$(el) s)"; OK_EXPS+=("$name")
      grep -h "spill" "$LOG/build_$name.log" | grep sm90 | sed 's/^.*function //' | sort -u | head -8
    else
      echo "build $name FAILED"; tail -n 20 "$LOG/build_$name.log"
    fi
  done
  for name in "${OK_EXPS[@]}"; do
    [ "${EXP_TESTS:-*}" != - ] && room "exp $name tests" && run_tests $BUILD-$name $name "${EXP_TESTS:-*}"
    [ "${EXP_MEMCHECK:-}" != - ] && room "exp $name memcheck" && sanitize memcheck $BUILD-$name $name \
      "${EXP_MEMCHECK:-PrefillSm90.BatchesPagedAndRagged:PrefillSm90.ChunkedSplitAndEmpty:PrefillSm90.HeadDim256DefaultTile}"
    if [ -n "${EXP_RACECHECK:-}" ] && room "exp $name racecheck"; then sanitize racecheck $BUILD-$name $name "$EXP_RACECHECK"; fi
  done
  AB_FILTERS=${AB_FILTERS:-prefill/sm90/causal/ragged/ prefill/sm90/causal/paged/ prefill/sm90/chunked/c512/ prefill/sm90/d256/causal/paged/L8192 prefill/sm90/d64/causal/paged/L8192}
  AF=""; for f in $AB_FILTERS; do AF="$AF --filter $f"; done
  for pass in $(seq 1 "${AB_PASSES:-2}"); do
    for b in shipped "${OK_EXPS[@]}"; do
      bin=$BUILD/bench/weft-bench; [ $b = shipped ] || bin=$BUILD-$b/bench/weft-bench
      room "ab $b $pass" || break 2
      timeout "$(cap 60)" $bin --group prefill --no-ceilings $AF ${AB_ARGS:-} --commit "${WEFT_COMMIT:-}" \
        --json "$LOG/ab_${b}_$pass.json" > "$LOG/ab_${b}_$pass.log" 2>&1
      echo "ab $b $pass rc=$?"
    done
  done
  python3 scripts/diag/ab_table.py "$LOG" "$OUT/ab.json" "$LOG/fi_ab_unused.json"
fi
if has fi && [ -n "${FI_PID:-}" ] && room fi; then
  wait $FI_PID
  PYTHONPATH=/tmp/site timeout "$(cap 100)" python3 .baselines/fi_bench.py --group prefill --variant fi-auto \
    --budget "$(cap 70)" ${FI_ARGS:-} --out "$OUT/fi.json" > "$LOG/fi.log" 2>&1
  echo "fi rc=$?"; tail -n 3 "$LOG/fi.log"
fi
# The bench step's rows for one tree -> $OUT/<json> (d256 / d64 rows merged in).
run_bench() {  # tree-dir json-name
  local F="--filter prefill/causal/ --filter prefill/chunked/ --filter prefill/mixed --filter prefill/plan/"
  F="$F --filter prefill/sm90/causal/ --filter prefill/sm90/noncausal/ --filter prefill/sm90/chunked/ --filter prefill/fa2/causal/"
  F="$F --filter prefill/fa2/noncausal/ --filter prefill/fa2/chunked/"
  local base=${2%.json}
  timeout "$(cap 90)" $1/bench/weft-bench --group prefill $F ${BENCH_ARGS:-} --commit "${WEFT_COMMIT:-}" \
    --json "$OUT/$2" > "$LOG/$base.log" 2>&1
  echo "$base rc=$?"
  if room "$base dims"; then
    timeout "$(cap 60)" $1/bench/weft-bench --group prefill --no-ceilings --filter /d256/ --filter /d64/ \
      --commit "${WEFT_COMMIT:-}" --json "$LOG/${base}_dims.json" > "$LOG/${base}_dims.log" 2>&1
    echo "$base dims rc=$?"
    python3 -c "
import json, sys
a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
a['cases'] += b['cases']; a['command'] += ' ; ' + b['command']
json.dump(a, open(sys.argv[1], 'w'), indent=1)" "$OUT/$2" "$LOG/${base}_dims.json" || true
  fi
}
if has bench && room bench; then
  run_bench $BUILD bench.json
  for name in "${OK_EXPS[@]}"; do
    [[ " ${EXP_BENCH:-${OK_EXPS[*]}} " == *" $name "* ]] && room "bench $name" && run_bench $BUILD-$name "bench_$name.json"
  done
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
      --json "$LOG/variant$v.json" > "$LOG/variant$v.log" 2>&1
    python3 -c "import json,sys; d=json.load(open('$LOG/variant$v.json')); print('variant $v', ' '.join('%s=%.1f' % (c['name'].split('sm90/')[-1], c['flops']/c['ms']/1e9) for c in d['cases'] if c.get('ms')))"
  done
fi
if has sdpa && room sdpa; then
  timeout "$(cap 110)" python3 bench/sdpa_prefill.py --budget "$(cap 80)" --out "$OUT/sdpa.json" > "$LOG/sdpa.log" 2>&1
  echo "sdpa rc=$?"; tail -n 2 "$LOG/sdpa.log"
fi
for j in bench.json $(for n in "${OK_EXPS[@]}"; do echo "bench_$n.json"; done); do
  [ -f "$OUT/$j" ] || continue
  echo "== ratios: $j"
  python3 bench/sm90_compare.py --weft "$OUT/$j" --fi "$OUT/fi.json" --sdpa "$OUT/sdpa.json" --out "$LOG/cmp_$j" || true
done
echo "total: $(el) s"
tar -czf "$OUT/logs.tar.gz" -C "$LOG" .
