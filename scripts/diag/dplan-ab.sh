#!/usr/bin/env bash
# Diagnostic (device, issue 22): the decode plan() host time in the serving harness after the
# planner cuts, against the old tree, in one call. No device build: dev-box Release sm_90a binaries
# carried xz-compressed in BIN:
#   weft-serve-sim-old.xz     the old tree (main before the cuts)
#   weft-serve-sim-new.xz     the new tree
#   weft-serve-sim-rot.xz     the new tree built with -DWEFT_EXP_ROTATE_STAGING_BYTES=32768 (experiments
#                             only: the b256 image, ~23 KiB, takes the staging slots in turn)
#   weft-serve-sim-phases.xz  (optional) the new tree with -DWEFT_PLAN_PHASES=ON (per-phase p50)
#   weft-plan-bench.xz        the new tree, -DWEFT_PLAN_PHASES=ON (route/b256 rows)
# Steps: held-out seed 20260623, the committed table data/router/h100.json, STEPS steps:
#   1. (when carried) phases (new): b256,shared,uniform -> serve_phases.json
#   2. b256 alone: old, new, rot, old, new, rot, old, new, rot (PAIRS rounds) -> ab.json (per run:
#      decode_plan_us_p50_256, balanced / router plan p50, GPU and wall means)
#   3. new and old: b256,shared,uniform (router ratio per family) -> serve_new.json, serve_old.json
# Writes $OUT: log.txt, cpu.txt, plan_bench.txt, serve_phases.json, ab.json, serve_new.json, serve_old.json.
#   OUT=... WEFT_COMMIT=<new sha> BASE_COMMIT=<old sha> BIN=.carry-dplan [STEPS=40] [PAIRS=3] scripts/diag/dplan-ab.sh
set -uo pipefail
O="${OUT:?set OUT}"
BIN="${BIN:-.carry-dplan}"
STEPS="${STEPS:-40}"
PAIRS="${PAIRS:-3}"
LOG="$O/log.txt"
t0=$SECONDS
note() { echo "[dplan-ab +$((SECONDS - t0))s] $*" | tee -a "$LOG"; }
B=/tmp/dplan-bin
mkdir -p $B /tmp/dplan-ab
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
  echo "# weft-plan-bench (new, -DWEFT_PLAN_PHASES=ON): --filter route/b256"
  timeout 40 $B/weft-plan-bench --filter route/b256 --router data/router/h100.json
} > "$O/plan_bench.txt" 2>&1
grep -E "phases|balanced plan" "$O/plan_bench.txt" | tee -a "$LOG"

serve() {  # serve <variant> <json> <families>
  local v=$1 out=$2 fam=$3
  WEFT_COMMIT="$([ "$v" = old ] && echo "${BASE_COMMIT:-}" || echo "${WEFT_COMMIT:-}")" timeout 100 \
    "$B/weft-serve-sim-$v" --router data/router/h100.json --seed 20260623 --steps "$STEPS" --families "$fam" \
    --out "$out" > /tmp/dplan-ab/serve.log 2>&1
  local rc=$?
  note "$v $fam rc $rc"
  grep -E "^\[phases\]|weft::Error|CUDA error" /tmp/dplan-ab/serve.log | tee -a "$LOG"
}
summary() {  # summary <json>...
  python3 - "$@" <<'PY' 2>&1 | tee -a "$LOG"
import json, sys
for p in sys.argv[1:]:
    d = json.load(open(p))
    x = [c for c in d["cases"] if c["name"] == "serve/summary"][0]["extra"]
    print(f"  {p.split('/')[-1]}: {x}")
    for f in d["families"]:
        r = f["routes"]
        print(f"    {f['name']:8s} ratio {f.get('router_vs_best_fixed', 0):.3f} best {f['best_fixed']} "
              f"plan p50 balanced {r['balanced']['plan_us_p50']:.1f} router {r['router']['plan_us_p50']:.1f} "
              f"decide p50 {f.get('router_decide_us_p50')} picks {f.get('picks')} "
              f"ok {all(c['ok'] for c in f['check'].values())}")
PY
}

if [ -x "$B/weft-serve-sim-phases" ]; then  # (optional: tree + carry stay under 64 MiB with three)
  serve phases "$O/serve_phases.json" b256,shared,uniform
  summary "$O/serve_phases.json"
fi
runs=()
for p in $(seq 1 "$PAIRS"); do
  for v in old new rot; do
    serve "$v" "/tmp/dplan-ab/ab_${v}_$p.json" b256
    runs+=("/tmp/dplan-ab/ab_${v}_$p.json")
  done
done
python3 - "$O/ab.json" "${runs[@]}" <<'PY' 2>&1 | tee -a "$LOG"
import json, sys, statistics
out = {"what": "weft-serve-sim --families b256 --seed 20260623, the committed table; old/new/rot interleaved",
       "runs": []}
for p in sys.argv[2:]:
    d = json.load(open(p))
    x = [c for c in d["cases"] if c["name"] == "serve/summary"][0]["extra"]
    f = d["families"][0]
    r = f["routes"]
    out["runs"].append({"variant": p.split("ab_")[1].split("_")[0], "file": p.split("/")[-1], "commit": d["commit"],
                        "decode_plan_us_p50_256": x.get("decode_plan_us_p50_256"),
                        "balanced_plan_us_p50": r["balanced"]["plan_us_p50"],
                        "router_plan_us_p50": r["router"]["plan_us_p50"],
                        "balanced_gpu_us_mean": r["balanced"]["gpu_us_mean"],
                        "balanced_wall_us_mean": r["balanced"]["wall_us_mean"],
                        "router_vs_best_fixed": f.get("router_vs_best_fixed"), "correct": d["correct"]})
for v in ("old", "new", "rot"):
    xs = [r["decode_plan_us_p50_256"] for r in out["runs"] if r["variant"] == v]
    out[v + "_decode_plan_us_p50_256"] = xs
    out[v + "_median"] = statistics.median(xs) if xs else None
    print(v, [round(a, 2) for a in xs], "median", out[v + "_median"])
json.dump(out, open(sys.argv[1], "w"), indent=1)
PY
serve new "$O/serve_new.json" b256,shared,uniform
serve old "$O/serve_old.json" b256,shared,uniform
summary "$O/serve_new.json" "$O/serve_old.json"
note "done"
