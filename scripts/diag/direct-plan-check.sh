#!/usr/bin/env bash
# Diagnostic (device, issue 22): decode plan() host time at 256 requests in the serving harness with
# the direct planner (src/decode/direct_plan.h) against the tree before it, in one call, plus the
# decode GPU tests that re-plan (a wrong image fails their float64 reference checks). No device
# build: dev-box Release sm_90a binaries, stripped and xz-compressed, in BIN:
#   weft-serve-sim-old.xz   the old tree (main before the direct planner)
#   weft-serve-sim-new.xz   the new tree
#   weft-plan-bench.xz      the new tree, -DWEFT_PLAN_PHASES=ON (route/b256: the general planner vs the
#                           direct one, warm and after 32 MiB of writes; the host parts by phase)
#   weft_gpu_decode.xz      the new tree's decode GPU tests
# Steps: the host (CPU), weft-plan-bench, then the harness's b256 family (held-out seed 20260623, the
# committed table data/router/h100.json, STEPS steps) old / new interleaved PAIRS times, then the
# decode GPU suite (TESTS filter) and memcheck on MEMCHECK.
# Writes $OUT: log.txt, cpu.txt, plan_bench.txt, ab.json, serve_new_1.json, gpu_tests.txt, memcheck.txt.
#   OUT=... WEFT_COMMIT=<new sha> BASE_COMMIT=<old sha> BIN=.snap-planfast [STEPS=40] [PAIRS=4]
#   scripts/diag/direct-plan-check.sh
set -uo pipefail
O="${OUT:?set OUT}"
BIN="${BIN:-.snap-planfast}"
STEPS="${STEPS:-40}"
PAIRS="${PAIRS:-4}"
TESTS="${TESTS:-DecodeSmall.*:Decode.*:DecodeBlockTableSmall.*:DecodeBlockTable.*:DecodeRouteSmall.*:DecodeWorkQueueSmall.*:DecodeHardeningSmall.*:DecodeHardening.*:DecodeAlibiSmall.*:DecodeFp8Small.*}"
MEMCHECK="${MEMCHECK:-DecodeSmall.PlanLengthsMatchesPlan:DecodeSmall.SplitKVWithEmptyRequests:Decode.GraphReplayAfterReplan}"
LOG="$O/log.txt"
t0=$SECONDS
note() { echo "[direct-plan +$((SECONDS - t0))s] $*" | tee -a "$LOG"; }
B=/tmp/direct-plan-bin
mkdir -p $B /tmp/direct-plan
for f in "$BIN"/*.xz; do
  xz -dc "$f" > "$B/$(basename "$f" .xz)" && chmod +x "$B/$(basename "$f" .xz)"
done
note "new ${WEFT_COMMIT:-?} old ${BASE_COMMIT:-?} binaries: $(ls $B | tr '\n' ' ')"
{
  lscpu | grep -E "Model name|^CPU\(s\)|MHz|L2|L3|Hypervisor"
  echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  uptime
} > "$O/cpu.txt" 2>&1
cat "$O/cpu.txt" >> "$LOG"
{
  echo "# weft-plan-bench (new, -DWEFT_PLAN_PHASES=ON), commit ${WEFT_COMMIT:-?}: --filter route/b256"
  timeout 60 $B/weft-plan-bench --filter route/b256 --router data/router/h100.json
} > "$O/plan_bench.txt" 2>&1
note "plan-bench rc $?"
grep -E "phases|plan" "$O/plan_bench.txt" | tee -a "$LOG"

serve() {  # serve <variant> <json> <families>
  local v=$1 out=$2 fam=$3
  WEFT_COMMIT="$([ "$v" = old ] && echo "${BASE_COMMIT:-}" || echo "${WEFT_COMMIT:-}")" timeout 100 \
    "$B/weft-serve-sim-$v" --router data/router/h100.json --seed 20260623 --steps "$STEPS" --families "$fam" \
    --out "$out" > /tmp/direct-plan/serve.log 2>&1
  local rc=$?
  note "$v $fam rc $rc"
  grep -E "weft::Error|CUDA error" /tmp/direct-plan/serve.log | tee -a "$LOG"
}
runs=()
for p in $(seq 1 "$PAIRS"); do
  for v in old new; do
    serve "$v" "/tmp/direct-plan/ab_${v}_$p.json" b256
    runs+=("/tmp/direct-plan/ab_${v}_$p.json")
  done
done
cp /tmp/direct-plan/ab_new_1.json "$O/serve_new_1.json" 2>/dev/null
STEPS="$STEPS" python3 - "$O/ab.json" "${runs[@]}" <<'PY' 2>&1 | tee -a "$LOG"
import json, os, sys, statistics
out = {"what": "weft-serve-sim --families b256 --seed 20260623 --steps %s, the committed table; old/new "
               "processes interleaved" % os.environ["STEPS"], "runs": []}
for p in sys.argv[2:]:
    try:
        d = json.load(open(p))
    except Exception as e:  # a run that failed: listed, not counted
        out["runs"].append({"file": p.split("/")[-1], "error": str(e)})
        continue
    x = [c for c in d["cases"] if c["name"] == "serve/summary"][0]["extra"]
    f = d["families"][0]
    r = f["routes"]
    out["runs"].append({"variant": p.split("ab_")[1].split("_")[0], "file": p.split("/")[-1], "commit": d["commit"],
                        "gpu": d.get("gpu"), "command": d.get("command"),
                        "decode_plan_us_p50_256": x.get("decode_plan_us_p50_256"),
                        "balanced_plan_us_p50": r["balanced"]["plan_us_p50"],
                        "router_plan_us_p50": r["router"]["plan_us_p50"],
                        "balanced_gpu_us_mean": r["balanced"]["gpu_us_mean"],
                        "balanced_wall_us_mean": r["balanced"]["wall_us_mean"],
                        "router_vs_best_fixed": f.get("router_vs_best_fixed"), "correct": d["correct"]})
for v in ("old", "new"):
    xs = [r["decode_plan_us_p50_256"] for r in out["runs"] if r.get("variant") == v]
    out[v + "_decode_plan_us_p50_256"] = xs
    out[v + "_median"] = statistics.median(xs) if xs else None
    print(v, [round(a, 2) for a in xs], "median", out[v + "_median"])
for r in out["runs"]:
    print(" ", r)
json.dump(out, open(sys.argv[1], "w"), indent=1)
PY
left=$((280 - (SECONDS - t0)))
note "GPU tests (filter $TESTS), ${left}s left"
timeout $((left > 40 ? left - 30 : 10)) $B/weft_gpu_decode --gtest_filter="$TESTS" > "$O/gpu_tests.txt" 2>&1
note "gpu tests rc $?"
grep -E "^\[  (PASSED|FAILED) |tests ran|SKIPPED \]" "$O/gpu_tests.txt" | tail -n 12 | tee -a "$LOG"
left=$((285 - (SECONDS - t0)))
export PATH="$PATH:/usr/local/cuda/bin"
if [ "$left" -gt 25 ] && command -v compute-sanitizer > /dev/null; then
  timeout $((left - 5)) compute-sanitizer --tool memcheck --error-exitcode 3 $B/weft_gpu_decode \
    --gtest_filter="$MEMCHECK" > "$O/memcheck.txt" 2>&1
  note "memcheck rc $? ($MEMCHECK)"
  grep -E "ERROR SUMMARY|PASSED|FAILED" "$O/memcheck.txt" | tail -n 4 | tee -a "$LOG"
else
  note "memcheck skipped (${left}s left)"
fi
note "done"
