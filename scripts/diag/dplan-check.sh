#!/usr/bin/env bash
# Diagnostic (device): decode plan() host time (issues 19 and 22) of a new tree against an old one
# in one call, decode only (WEFT_DISABLE prefill, pod, norm, comm, tp):
#   1. builds the new tree (weft-bench, weft-plan-bench, weft-serve-sim, weft_gpu_decode), then the
#      old tree's weft-bench and weft-serve-sim in the background while
#   2. the whole decode GPU suite runs (TESTS_S limit), then memcheck on the plan tests (MEMCHECK_S);
#   3. weft-plan-bench --copy (the CUDA calls plan() makes, apart, warm and after 8 MiB of other
#      writes: --cold 8) and the planner rows on this machine's CPU;
#   4. the plan-cost bench rows (decode/plan/: extra.plan_us of the wrappers' whole plan()), old and
#      new weft-bench processes interleaved (PAIRS);
#   5. the serving harness's b256 family (decode_plan_us_p50_256: balanced plan(BlockTable) at 256
#      requests, caches cold between steps), old, new, old, new, with the committed router table.
# Writes $OUT: cpu.txt, log.txt (build, tests, every step), plan_bench.txt, plan_rows.json,
# serve_{old,new}_{1,2}.json (at most 8 files).
# Usage (repo root of the new tree; the old tree extracted with git archive and carried):
#   OUT=... WEFT_COMMIT=<new> BASE_COMMIT=<old> [DEADLINE=400] scripts/diag/dplan-check.sh <old tree>
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib-ab.sh"
ab_init dplan-check 400 "$@"
DIS="prefill;pod;norm;comm;tp"
{
  lscpu | grep -E "Model name|^CPU\(s\)|MHz|L2|L3"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  uptime
} > "$OUT/cpu.txt" 2>&1
note "new ${WEFT_COMMIT:-?} old ${BASE_COMMIT:-?}"

cmake -S . -B /tmp/ab-new -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_DISABLE="$DIS" -DWEFT_WITH_COMM=OFF \
  -DWEFT_BUILD_TESTS=ON > /tmp/build_new.log 2>&1 &&
  ninja -C /tmp/ab-new -j16 weft-bench weft-plan-bench weft-serve-sim weft_gpu_decode >> /tmp/build_new.log 2>&1
NEW_RC=$?
note "new build rc $NEW_RC"
if [ "$NEW_RC" -ne 0 ]; then tail -40 /tmp/build_new.log | tee -a "$LOG"; exit 1; fi
(cmake -S "$BASE_SRC" -B /tmp/ab-old -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_DISABLE="$DIS" -DWEFT_WITH_COMM=OFF \
   -DWEFT_BUILD_TESTS=OFF > /tmp/build_old.log 2>&1 &&
   ninja -C /tmp/ab-old -j12 weft-bench weft-serve-sim >> /tmp/build_old.log 2>&1; echo "rc $?" >> /tmp/build_old.log) &
OLD_PID=$!

# The whole decode suite (the old build shares the CPU meanwhile: test time only, no timings).
timeout "${TESTS_S:-130}" /tmp/ab-new/tests/weft_gpu_decode --gtest_brief=1 > /tmp/gpu_decode.log 2>&1
note "weft_gpu_decode rc $? $(grep -E '^\[  (PASSED|FAILED)|tests from .* ran' /tmp/gpu_decode.log | tr '\n' ' ')"
grep -E "FAILED|Failure|error" /tmp/gpu_decode.log | head -20 >> "$LOG"
if [ "$(left)" -gt 250 ]; then
  timeout "${MEMCHECK_S:-40}" compute-sanitizer --tool memcheck --print-limit 10 /tmp/ab-new/tests/weft_gpu_decode \
    --gtest_brief=1 "--gtest_filter=DecodeSmall.PlanLengthsMatchesPlan:DecodeSmall.SplitKVWithEmptyRequests:Decode.GraphReplayAfterReplan" \
    > /tmp/memcheck.log 2>&1
  note "memcheck rc $? $(grep -E 'ERROR SUMMARY' /tmp/memcheck.log | tail -1) $(grep -E '^\[  (PASSED|FAILED)' /tmp/memcheck.log | tr '\n' ' ')"
fi
wait $OLD_PID
note "old build $(tail -1 /tmp/build_old.log)"

# The CUDA calls of plan() apart and the planner, on this CPU (nothing else running now).
{
  echo "# weft-plan-bench on $(grep 'Model name' "$OUT/cpu.txt" | sed 's/.*: *//'), commit ${WEFT_COMMIT:-unknown}"
  echo "# --copy --min-ms 40 --filter llama3-8b/uniform"
  timeout 40 /tmp/ab-new/bench/weft-plan-bench --copy --min-ms 40 --filter llama3-8b/uniform
  echo "# --copy --min-ms 40 --filter llama3-8b/bimodal/b256"
  timeout 20 /tmp/ab-new/bench/weft-plan-bench --copy --min-ms 40 --filter llama3-8b/bimodal/b256
  echo "# --copy --min-ms 20 --filter staging"
  timeout 40 /tmp/ab-new/bench/weft-plan-bench --copy --min-ms 20 --filter staging
  echo "# --copy --cold 8 --min-ms 40 --filter llama3-8b/bimodal/b256"
  timeout 30 /tmp/ab-new/bench/weft-plan-bench --copy --cold 8 --min-ms 40 --filter llama3-8b/bimodal/b256
  echo "# --cold 8 --min-ms 40 --filter llama3-8b"
  timeout 30 /tmp/ab-new/bench/weft-plan-bench --cold 8 --min-ms 40 --filter llama3-8b
} > "$OUT/plan_bench.txt" 2>&1
note "plan bench done"

# The wrappers' plan() rows, old and new processes interleaved (PAIRS each; core-ab.sh asks for the
# prefill group, which this decode-only build does not have).
for i in $(seq 1 "${PAIRS:-3}"); do
  for tree in old new; do
    timeout 30 /tmp/ab-$tree/bench/weft-bench --group decode --filter decode/plan/ --no-ceilings \
      --commit "${WEFT_COMMIT:-unknown}" --json "/tmp/rows_${tree}_$i.json" > "/tmp/rows_${tree}_$i.log" 2>&1
    note "plan rows $tree $i rc $?"
  done
done
python3 - "$OUT/plan_rows.json" "${PAIRS:-3}" "${BASE_COMMIT:-unknown}" "${WEFT_COMMIT:-unknown}" <<'PY' 2>&1 | tee -a "$LOG"
import json, statistics, sys, os
out, pairs, base, new = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
runs = {t: [] for t in ("old", "new")}
for t in runs:
    for i in range(1, pairs + 1):
        f = f"/tmp/rows_{t}_{i}.json"
        if os.path.exists(f):
            runs[t].append({c["name"]: c.get("extra", {}) for c in json.load(open(f)).get("cases", [])})
cases = []
names = sorted({n for r in runs["new"] for n in r if "plan_us" in r[n]})
for n in names:
    e = {}
    for t in ("old", "new"):
        for k in ("plan_us", "plan_b2b_us", "plan_b2b_busy"):
            v = [r[n][k] for r in runs[t] if n in r and k in r[n]]
            if v:
                e[f"{k}_{t}"] = statistics.median(v)
                e[f"{k}_{t}_runs"] = v
    if "plan_us_old" in e and e["plan_us_new"] > 0:
        e["speedup_new_vs_old"] = e["plan_us_old"] / e["plan_us_new"]
    cases.append({"name": "planab/" + n, "extra": e})
    print(n, {k: (round(v, 3) if isinstance(v, float) else v) for k, v in e.items() if not k.endswith("_runs")})
json.dump({"base_commit": base, "commit": new,
           "command": "weft-bench --group decode --filter decode/plan/ --no-ceilings (old, new interleaved)",
           "cases": cases}, open(out, "w"), indent=1)
PY

# The harness's b256 family: decode_plan_us_p50_256, old / new / old / new.
ab_serve 25 "
import json,sys
d=json.load(open(sys.argv[1]))
s=[c for c in d['cases'] if c['name']=='serve/summary']
print({k:v for k,v in s[0]['extra'].items() if 'plan' in k} if s else 'no summary')"
note "done"
