#!/usr/bin/env bash
# Diagnostic (device): issue 19's prefill plan cost ("prefill plan <= 30 us for 64 requests") in
# one call:
#   1. builds the new tree (weft-bench, weft-plan-bench, weft_gpu_prefill, weft_gpu_pod; no norm /
#      comm) and, in parallel, weft-bench of the old tree with the prefill component only;
#   2. the whole prefill and POD GPU suites (TESTS_S) and, alongside, compute-sanitizer memcheck
#      on a small filter (MEMCHECK_FILTER, SAN_S) while the old tree may still build;
#   3. on a quiet CPU: weft-plan-bench --copy / --cold 8 for the prefill rows (the planner, the
#      staging copy), then the wrappers' plan-cost rows prefill/plan/ and the opt-in group
#      prefill_plan_ab (the same shapes planned with the KV head classes dealt together and one
#      tile at a time, rows interleaved; extra.plan_us and the GPU time of each plan);
#   4. an old/new A/B of prefill rows (AB_FILTERS), processes interleaved, PAIRS pairs, until
#      DEADLINE (seconds since the start).
# WORK (default /tmp/ppc): logs and build trees; SKIP_BUILD=1 NEW_BUILD=... OLD_BUILD=...: use
# trees built before (a dry run).
# Writes $OUT: cpu.txt, build.log, tests.log, plan_bench.txt, plan_rows.json, ab.json, ab.log.
# Usage (repo root of the new tree; the old tree extracted with git archive and carried):
#   OUT=... WEFT_COMMIT=<new> BASE_COMMIT=<old> scripts/diag/prefill-plan-check.sh <old tree>
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
BASE_SRC=${1:?usage: prefill-plan-check.sh <old source tree>}
OUT="${OUT:-./prefill-plan-check-out}"
mkdir -p "$OUT"
SECONDS=0
DEADLINE=${DEADLINE:-400}
TESTS_S=${TESTS_S:-100}
SAN_S=${SAN_S:-100}
MEMCHECK_FILTER=${MEMCHECK_FILTER:-PrefillSm90.ChunkedSplitAndEmpty:PrefillSmall.SplitKVChunk:PrefillSmall.CausalPagedNHD}
PAIRS=${PAIRS:-2}
AB_FILTERS=${AB_FILTERS:-prefill/plan/b64 prefill/causal/ragged/L8192 prefill/causal/ragged/L16384 prefill/causal/paged/L4096 prefill/mixed prefill/chunked/c1024/h8192 prefill/sm90/chunked-split/c256/h16384 prefill/fa2/causal/ragged/L4096}
W=${WORK:-/tmp/ppc}  # logs; NB / OB: the new / old build trees (SKIP_BUILD=1: already built there)
NB=${NEW_BUILD:-$W/new}
OB=${OLD_BUILD:-$W/old}
mkdir -p "$W"
{
  lscpu | grep -E "Model name|^CPU\(s\)|MHz|L2|L3"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  uptime
} > "$OUT/cpu.txt" 2>&1

if [ -n "${SKIP_BUILD:-}" ]; then
  (true) &
  OLD_PID=$!
  NEW_RC=0
else
(cmake -S "$BASE_SRC" -B $OB -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_DISABLE="norm;comm;decode;pod" \
   -DWEFT_WITH_COMM=OFF -DWEFT_BUILD_TESTS=OFF > $W/build_old.log 2>&1 &&
   ninja -C $OB -j6 weft-bench >> $W/build_old.log 2>&1) &
OLD_PID=$!
cmake -S . -B $NB -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_DISABLE="norm;comm" -DWEFT_WITH_COMM=OFF \
  -DWEFT_BUILD_TESTS=ON > $W/build_new.log 2>&1 &&
  ninja -C $NB -j12 weft-bench weft-plan-bench weft_gpu_prefill weft_gpu_pod >> $W/build_new.log 2>&1
NEW_RC=$?
fi
echo "new build $SECONDS s (rc $NEW_RC)"
{ echo "== new rc $NEW_RC ($SECONDS s)"; tail -12 $W/build_new.log; } > "$OUT/build.log"
[ "$NEW_RC" -eq 0 ] || { tail -30 $W/build_new.log; exit 1; }

# GPU tests: the two suites at once (one GPU, each its own process), then memcheck.
# (memcheck alongside: three processes on the GPU, correctness only, nothing timed)
test_pids=()
for t in weft_gpu_prefill weft_gpu_pod; do
  (timeout "$TESTS_S" $NB/tests/$t --gtest_brief=1 > $W/$t.log 2>&1; echo "rc $?" >> $W/$t.log) &
  test_pids+=($!)
done
(timeout "$SAN_S" compute-sanitizer --tool memcheck --error-exitcode 3 $NB/tests/weft_gpu_prefill \
   --gtest_filter="$MEMCHECK_FILTER" --gtest_brief=1 > $W/memcheck.log 2>&1; echo "rc $?" >> $W/memcheck.log) &
test_pids+=($!)
wait "${test_pids[@]}"
: > "$OUT/tests.log"
for t in weft_gpu_prefill weft_gpu_pod; do
  { echo "=== $t (whole suite, limit ${TESTS_S}s)"; grep -vE "^Running main|^$" $W/$t.log | tail -25; } >> "$OUT/tests.log"
done
{ echo "=== compute-sanitizer memcheck weft_gpu_prefill --gtest_filter=$MEMCHECK_FILTER (limit ${SAN_S}s)";
  grep -vE "^Running main|^$" $W/memcheck.log | tail -15; } >> "$OUT/tests.log"
echo "tests $SECONDS s: $(grep -h -E '^\[  (PASSED|FAILED)|^rc |ERROR SUMMARY' $W/weft_gpu_*.log $W/memcheck.log | tr '\n' ' ')"

wait $OLD_PID
OLD_RC=$?
{ echo "== old rc $OLD_RC ($SECONDS s)"; tail -8 $W/build_old.log; } >> "$OUT/build.log"
echo "old build done $SECONDS s (rc $OLD_RC)"

# Host time on a quiet CPU: the planner + serialize, the copy, then the wrappers' rows.
{
  echo "# weft-plan-bench on $(grep 'Model name' "$OUT/cpu.txt" | sed 's/.*: *//'), commit ${WEFT_COMMIT:-unknown}"
  timeout 30 $NB/bench/weft-plan-bench --copy --min-ms 60 --filter prefill/b64
  timeout 30 $NB/bench/weft-plan-bench --copy --min-ms 30 --filter staging/
  echo "# --cold 8"
  timeout 30 $NB/bench/weft-plan-bench --cold 8 --min-ms 60 --filter prefill/b64
} > "$OUT/plan_bench.txt" 2>&1
echo "plan bench $SECONDS s"
timeout 90 $NB/bench/weft-bench --group prefill --group prefill_plan_ab --filter prefill/plan/ \
  --filter plan_ab --no-ceilings --commit "${WEFT_COMMIT:-unknown}" --json "$OUT/plan_rows.json" > $W/plan_rows.log 2>&1
grep -E "^prefill/plan" $W/plan_rows.log | head -40
echo "plan rows $SECONDS s"

# Old / new A/B of prefill rows, processes interleaved.
[ "$OLD_RC" -eq 0 ] || { echo "old build failed: no A/B"; tail -20 $W/build_old.log; exit 0; }
filters=()
for f in $AB_FILTERS; do filters+=(--filter "$f"); done
runs_left=$((2 * PAIRS))
for i in $(seq 1 "$PAIRS"); do
  for tree in old new; do
    left=$((DEADLINE - SECONDS))
    share=$((left / runs_left))
    runs_left=$((runs_left - 1))
    if [ "$share" -lt 8 ]; then echo "$tree run $i: skipped (deadline)"; continue; fi
    bin=$NB/bench/weft-bench
    [ "$tree" = old ] && bin=$OB/bench/weft-bench
    timeout "$share" stdbuf -oL "$bin" --group prefill "${filters[@]}" --no-ceilings \
      --commit "${WEFT_COMMIT:-unknown}" > "$W/ab_${tree}_$i.log" 2>&1 || tail -2 "$W/ab_${tree}_$i.log"
    echo "$tree run $i: $(grep -cE '^prefill/' "$W/ab_${tree}_$i.log") rows ($SECONDS s)"
  done
done
cat $W/ab_*_*.log > "$OUT/ab.log" 2>/dev/null
python3 - "$OUT" "$PAIRS" "$W" "${BASE_COMMIT:-unknown}" "${WEFT_COMMIT:-unknown}" <<'PY'
import json, os, re, statistics, sys
out, pairs, w, base, new = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
row = re.compile(r"^(prefill/\S+)\s+([0-9.]+)\s")
ms = {"old": {}, "new": {}}
for t in ms:
    for i in range(1, pairs + 1):
        log = f"{w}/ab_{t}_{i}.log"
        if os.path.exists(log):
            for line in open(log):
                m = row.match(line)
                if m and float(m.group(2)) > 0:
                    ms[t].setdefault(m.group(1), []).append(float(m.group(2)))
cases, ratios = [], []
for name in sorted(set(ms["old"]) & set(ms["new"])):
    o, n = statistics.median(ms["old"][name]), statistics.median(ms["new"][name])
    ratios.append(o / n)
    cases.append({"name": "ab/" + name, "ms": n, "extra": {"old_ms": o, "new_ms": n, "speedup_new_vs_old": o / n,
                  "old_runs_ms": ms["old"][name], "new_runs_ms": ms["new"][name]}})
summary = {"rows": len(ratios), "median_speedup_new_vs_old": statistics.median(ratios) if ratios else None,
           "min_speedup_new_vs_old": min(ratios) if ratios else None,
           "rows_more_than_3pct_slower": sum(r < 1 / 1.03 for r in ratios), "base_commit": base, "new_commit": new}
cases.append({"name": "ab/summary", "ms": None, "extra": summary})
json.dump({"command": "scripts/diag/prefill-plan-check.sh (old %s, new %s)" % (base, new), "cases": cases},
          open(f"{out}/ab.json", "w"), indent=1)
print(json.dumps(summary))
for c in cases[:-1]:
    print(f"{c['name']:60s} {c['extra']['speedup_new_vs_old']:.3f}")
PY
echo "done $SECONDS s"
