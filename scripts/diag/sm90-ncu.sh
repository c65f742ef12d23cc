#!/usr/bin/env bash
# One device call: where the sm90 prefill kernel's time goes against FlashInfer's sm90 kernel
# (Nsight Compute), and a same-call A/B of experiments builds.
#   1. builds (background, parallel): the shipped tree and one tree per entry of EXPS
#      ("name:-DOPT=ON,-DOPT2=ON"), targets weft_gpu_prefill + weft-bench;
#   2. meanwhile ncu (--set full, --clock-control none) on a weft-bench built elsewhere (BENCH_BIN,
#      e.g. carried from the dev box) for NCU_ROWS, one launch per row (the 4th: after the
#      row's warm-up), and on FlashInfer's fa3 kernel (scripts/diag/fi_prefill_probe.py --ncu)
#      for NCU_FI; each report exported as details / raw / SASS-source CSV, then summarized by
#      scripts/diag/ncu_compare.py;
#   3. per experiments tree: the whole weft_gpu_prefill suite, memcheck, racecheck (in parallel);
#   4. AB_PASSES alternating passes of AB_FILTERS (OLD_BIN as tree "old" when set, shipped, then
#      each tree; FlashInfer (fi_prefill_probe.py, FI_SHAPES) in passes 1 and AB_PASSES), nvidia-smi
#      dmon alongside; x columns against AB_REF (default shipped);
#   5. FINAL=1: torch SDPA cuDNN (bench/sdpa_prefill.py, SDPA_FILTERS) and bench/sm90_compare.py on
#      the shipped tree's last pass with FlashInfer = fi_bench.py (FI_BENCH_ARGS, run while the trees
#      build: its rows time CUDA-graph replays behind a GPU spin, so the compile load does not
#      reach them) + the probe's rows.
# Usage (device, repo root of the snapshot): scripts/diag/sm90-ncu.sh
# Env: OUT, WEFT_COMMIT, KIT (FlashInfer kit dir, default ../.baselines), BENCH_BIN, EXPS,
#      DEADLINE (s; 380), DISABLE, AB_PASSES (3), AB_FILTERS, FI_SHAPES, NCU_ROWS (- for none),
#      NCU_FI, TEST_SHIPPED (1: the shipped tree's suite and sanitizers too), OLD_BIN, AB_REF,
#      FINAL, FI_BENCH_ARGS, SDPA_FILTERS.
# Files in $OUT: console.txt, summary.txt, ab.json, fi_ab.json, ncu.tar.gz, logs.tar.gz (+ FINAL:
# final.json, fi.json, sdpa.json).
set -uo pipefail
OUT=${OUT:-/tmp/sm90ncu-out}
LOG=/tmp/sm90ncu-logs
mkdir -p "$OUT" "$LOG/ncu"
exec > >(tee "$OUT/console.txt") 2>&1
source scripts/env.sh 2>/dev/null || true
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
KIT=${KIT:-../.baselines}
DEADLINE=${DEADLINE:-380}
DISABLE=${DISABLE:-comm;tp;norm;pod;decode}
EXPS=${EXPS:-}
NCU_ROWS=${NCU_ROWS:-prefill/sm90/causal/ragged/L2048 prefill/sm90/causal/ragged/L16384 prefill/sm90/noncausal/ragged/L8192}
NCU_FI=${NCU_FI:-causal:2048 causal:16384 none:8192}
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
room() { local left=$(( DEADLINE - $(el) )); if [ "$left" -lt 15 ]; then echo "skip $1: deadline (t=$(el) s)"; return 1; fi; echo "== $1 (t=$(el) s)"; }
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1 || echo /usr/local/cuda/bin/ncu)
echo "commit ${WEFT_COMMIT:-?} exps '$EXPS' ncu $NCU"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit --format=csv,noheader
$NCU --version | tail -1

# 1. builds + FlashInfer install in the background
( python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$KIT"/whl/*.whl > "$LOG/fi_install.log" 2>&1 ) &
FI_PID=$!
declare -A BPID
TREES=(shipped)
build_tree() {  # name src flags...
  local name=$1 src=$2; shift 2
  ( cmake -S $src -B build-$name -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_DISABLE="$DISABLE" -DWEFT_BUILD_TESTS=ON "$@" \
      && cmake --build build-$name -j${BUILD_JOBS:-5} --target weft_gpu_prefill weft-bench ) > "$LOG/build_$name.log" 2>&1
}
build_tree shipped . & BPID[shipped]=$!
for e in $EXPS; do
  name=${e%%:*}; flags=${e#*:}; [ "$flags" = "$e" ] && flags=""
  TREES+=("$name")
  build_tree "$name" . ${flags//,/ } & BPID[$name]=$!
done

# 2. ncu while the trees build (GPU counters are not disturbed by the compile load)
NCUF="--clock-control none --set full --import-source no"
export_rep() {  # report-base
  local r=$1
  $NCU -i $r.ncu-rep --page details --csv > $r.details.csv 2> $r.err
  $NCU -i $r.ncu-rep --page raw --csv > $r.raw.csv 2>> $r.err
  $NCU -i $r.ncu-rep --page source --csv --print-source sass > $r.sass.csv 2>> $r.err \
    || $NCU -i $r.ncu-rep --page source --csv > $r.sass.csv 2>> $r.err
  echo "  $(basename $r): details $(wc -l < $r.details.csv) raw $(wc -c < $r.raw.csv) B sass $(wc -l < $r.sass.csv) lines"
}
if [ -n "${FINAL:-}" ]; then  # FlashInfer's kit rows while the trees build (GPU otherwise idle)
  ( while kill -0 $FI_PID 2>/dev/null; do sleep 1; done; PYTHONPATH=/tmp/site timeout 150 python3 $KIT/fi_bench.py --group prefill --variant fi-auto \
      ${FI_BENCH_ARGS:-} --out $LOG/fi_bench.json > $LOG/fi_bench.log 2>&1; echo "fi_bench rc=$?" >> $LOG/fi_bench.log ) &
  FIB_PID=$!
fi
[ "$NCU_ROWS" = - ] && NCU_ROWS="" && NCU_FI=""
if [ -n "${BENCH_BIN:-}" ] && [ -x "$BENCH_BIN" ] && [ -n "$NCU_ROWS" ]; then
  for row in $NCU_ROWS; do
    room "ncu weft $row" || break
    tag=weft_$(echo $row | sed 's#prefill/sm90/##; s#/#_#g')
    timeout 90 $NCU $NCUF -k regex:prefill_sm90_kernel --launch-skip 3 --launch-count 1 -o $LOG/ncu/$tag \
      $BENCH_BIN --group prefill --no-ceilings --warmup-s 0 --reps 2 --filter $row > $LOG/ncu/$tag.log 2>&1
    echo "ncu $tag rc=$?"; grep -E "^==PROF==|==ERROR==|ms " $LOG/ncu/$tag.log | tail -3
    [ -f $LOG/ncu/$tag.ncu-rep ] && export_rep $LOG/ncu/$tag
  done
fi
wait $FI_PID; echo "fi install rc=$? (t=$(el) s)"
export PYTHONPATH=/tmp/site
for shape in $NCU_FI; do
  room "ncu fi $shape" || break
  tag=fi_$(echo $shape | tr ':' '_')
  timeout 120 $NCU $NCUF -k regex:PrefillWithKVCacheKernel --launch-skip 3 --launch-count 1 -o $LOG/ncu/$tag \
    python3 scripts/diag/fi_prefill_probe.py --kit $KIT --ncu 5 $shape > $LOG/ncu/$tag.log 2>&1
  echo "ncu $tag rc=$?"; grep -E "^==PROF==|==ERROR==|launches" $LOG/ncu/$tag.log | tail -3
  [ -f $LOG/ncu/$tag.ncu-rep ] && export_rep $LOG/ncu/$tag
done
if [ -n "$NCU_ROWS$NCU_FI" ]; then
  python3 scripts/diag/ncu_compare.py $LOG/ncu > "$OUT/summary.txt" 2>&1; echo "ncu_compare rc=$?"
  head -c 6000 "$OUT/summary.txt"
  tar -czf "$OUT/ncu.tar.gz" -C $LOG/ncu $(cd $LOG/ncu && ls *.csv *.log 2>/dev/null)
fi

# 3. builds done -> tests per experiments tree (parallel), sanitizers
OK=()
for t in "${TREES[@]}"; do
  if wait ${BPID[$t]}; then OK+=("$t"); echo "build $t ok (t=$(el) s)"
    grep -h "spill" "$LOG/build_$t.log" | grep -i sm90 | sed 's/^.*function //' | sort -u | head -4
  else echo "build $t FAILED"; tail -n 25 "$LOG/build_$t.log"; fi
done
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader
SAN_MEM=${SAN_MEM:-PrefillSm90.WindowSoftcapCustom:PrefillSm90.ChunkedSplitAndEmpty:PrefillSm90.BatchesPagedAndRagged:PrefillFp8Sm90Small.MasksGroupsPagesAndLengths}
SAN_RACE=${SAN_RACE:-PrefillSm90.ChunkedSplitAndEmpty:PrefillSm90.WindowSoftcapCustom}
if room tests; then
  P=()
  for t in "${OK[@]}"; do
    [ $t = shipped ] && [ -z "${TEST_SHIPPED:-}" ] && continue
    ( timeout 150 build-$t/tests/weft_gpu_prefill --gtest_brief=1 > $LOG/test_$t.log 2>&1; echo "rc=$?" >> $LOG/test_$t.log ) &
    P+=($!)
  done
  for p in "${P[@]}"; do wait $p; done
  for t in "${OK[@]}"; do [ $t = shipped ] && [ -z "${TEST_SHIPPED:-}" ] && continue
    echo "$t suite: $(tail -1 $LOG/test_$t.log)"; grep -E "^\[  (FAILED|PASSED|SKIPPED) |tests ran|Failure" $LOG/test_$t.log | head -12
  done
fi
if room sanitizers; then
  P=()
  for t in "${OK[@]}"; do
    [ $t = shipped ] && [ -z "${TEST_SHIPPED:-}" ] && continue
    ( timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 build-$t/tests/weft_gpu_prefill --gtest_filter="$SAN_MEM" > $LOG/memcheck_$t.log 2>&1; echo "rc=$?" >> $LOG/memcheck_$t.log
      timeout 100 compute-sanitizer --tool racecheck --error-exitcode 9 build-$t/tests/weft_gpu_prefill --gtest_filter="$SAN_RACE" > $LOG/racecheck_$t.log 2>&1; echo "rc=$?" >> $LOG/racecheck_$t.log ) &
    P+=($!)
  done
  for p in "${P[@]}"; do wait $p; done
  for t in "${OK[@]}"; do [ $t = shipped ] && [ -z "${TEST_SHIPPED:-}" ] && continue
    for tool in memcheck racecheck; do
      echo "$t $tool: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' $LOG/${tool}_$t.log | head -2 | tr '\n' ' ') $(grep -hE '^\[  (PASSED|FAILED)' $LOG/${tool}_$t.log | tr '\n' ' ') $(tail -1 $LOG/${tool}_$t.log)"
    done
  done
fi

# 4. alternating A/B passes (+ FlashInfer in passes 1 and last)
AB_FILTERS=${AB_FILTERS:-prefill/sm90/causal/ragged/ prefill/sm90/noncausal/ragged/L8192 prefill/sm90/causal/paged/L8192 prefill/sm90/causal/paged/L16384 prefill/sm90/chunked/c512/h4096 prefill/sm90/chunked/c512/h16384}
FI_SHAPES=${FI_SHAPES:-causal:1024 causal:2048 causal:4096 causal:8192 causal:16384 none:8192}
AF=""; for f in $AB_FILTERS; do AF="$AF --filter $f"; done
NP=${AB_PASSES:-3}
nvidia-smi dmon -s pc -d 1 > $LOG/dmon.log 2>&1 &
DMON=$!
if [ -n "${FINAL:-}" ] && room sdpa; then  # torch SDPA cuDNN, the GPU otherwise idle
  SF=""; for f in ${SDPA_FILTERS:-causal/L noncausal/ chunked/ d256/ d64/}; do SF="$SF --filter $f"; done
  timeout 90 python3 bench/sdpa_prefill.py --backend cudnn $SF --budget 60 --out "$OUT/sdpa.json" > $LOG/sdpa.log 2>&1
  echo "sdpa rc=$?"; tail -n 2 $LOG/sdpa.log
fi
ABT=("${OK[@]}"); [ -n "${OLD_BIN:-}" ] && ABT=(old "${OK[@]}")
for pass in $(seq 1 $NP); do
  for t in "${ABT[@]}"; do
    room "ab $t $pass" || break 2
    bin=build-$t/bench/weft-bench; [ $t = old ] && bin=$OLD_BIN
    timeout 60 $bin --group prefill --no-ceilings $AF --commit "${WEFT_COMMIT:-}" \
      --json $LOG/ab_${t}_$pass.json > $LOG/ab_${t}_$pass.log 2>&1
    echo "ab $t $pass rc=$?"
  done
  if [ $pass = 1 ] || [ $pass = $NP ]; then
    room "fi $pass" && { timeout 90 python3 scripts/diag/fi_prefill_probe.py --kit $KIT --out $LOG/fi_$pass.json $FI_SHAPES \
      > $LOG/fi_$pass.log 2>&1; echo "fi $pass rc=$?"; tail -n 6 $LOG/fi_$pass.log; }
  fi
done
kill $DMON 2>/dev/null
python3 scripts/diag/ab_table.py $LOG "$OUT/ab.json" "$OUT/fi_ab.json" ${AB_REF:-shipped}
if [ -n "${FINAL:-}" ]; then
  wait $FIB_PID; tail -n 3 $LOG/fi_bench.log
  python3 - $LOG "$OUT/fi.json" <<'PYEOF'
import json, sys, os
log, out = sys.argv[1:3]
doc = json.load(open(os.path.join(log, "fi_bench.json"))) if os.path.exists(os.path.join(log, "fi_bench.json")) else {"cases": []}
p = os.path.join(log, "fi_1.json")
if os.path.exists(p):  # the probe's rows (ragged, non-causal; timed between the A/B passes) replace the kit's
    probe = json.load(open(p))["cases"]
    names = {c["name"] for c in probe}
    doc["cases"] = [dict(c, variant="fi-auto-kit") if c["name"] in names else c for c in doc["cases"]] + probe
doc["command"] = doc.get("command", "") + " ; + scripts/diag/fi_prefill_probe.py rows (A/B pass 1; the kit's rows of those names kept as variant fi-auto-kit)"
json.dump(doc, open(out, "w"), indent=1)
PYEOF
  last=$(ls $LOG/ab_shipped_*.json | sort -V | tail -1)
  python3 bench/sm90_compare.py --weft $last --fi "$OUT/fi.json" --sdpa "$OUT/sdpa.json" --out "$OUT/final.json" | tail -n 40
fi
echo "done t=$(el) s"
tar -czf "$OUT/logs.tar.gz" -C $LOG $(cd $LOG && ls *.log *.json 2>/dev/null)
