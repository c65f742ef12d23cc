#!/usr/bin/env bash
# Diagnostic (device, issue 22): where the decode plan()'s host time goes ON THE DEVICE HOST, in the
# serving harness. No device build: dev-box Release sm_90a binaries carried xz-compressed in BIN:
#   weft-serve-sim.xz        built with -DWEFT_PLAN_PHASES=ON (src/common/plan_phases.h: a steady_clock
#                            mark at the end of each plan() phase; per-phase p50 in the JSON)
#   weft-serve-sim-plain.xz  the same sources without the marks (plan_us as the summary reports it)
#   weft-plan-bench.xz       -DWEFT_PLAN_PHASES=ON (route/b256 "phases" rows: the host parts alone,
#                            warm and after 32 MiB of writes; cpu/ calibration rows)
# Steps: the host (CPU, clocksource), weft-plan-bench, then the harness on the held-out seed 20260623
# with the committed table data/router/h100.json: phases b256+shared, plain b256, phases b256 with
# --replan-warm (each balanced plan re-planned at once: the same plan with hot caches), plain b256.
# Writes $OUT: log.txt, cpu.txt, plan_bench.txt, serve_phases.json, serve_plain_1.json,
# serve_replan.json, serve_plain_2.json.
#   OUT=... WEFT_COMMIT=<sha> BIN=.carry-dplan [STEPS=40] scripts/diag/dplan-phases.sh
set -uo pipefail
O="${OUT:?set OUT}"
BIN="${BIN:-.carry-dplan}"
STEPS="${STEPS:-40}"
LOG="$O/log.txt"
t0=$SECONDS
note() { echo "[dplan +$((SECONDS - t0))s] $*" | tee -a "$LOG"; }
mkdir -p /tmp/dplan-bin
for f in "$BIN"/*.xz; do
  xz -dc "$f" > "/tmp/dplan-bin/$(basename "$f" .xz)" && chmod +x "/tmp/dplan-bin/$(basename "$f" .xz)"
done
B=/tmp/dplan-bin
note "commit ${WEFT_COMMIT:-?} binaries: $(ls $B | tr '\n' ' ')"
{
  lscpu | grep -E "Model name|^CPU\(s\)|MHz|L1d|L2|L3|Hypervisor|NUMA node\(s\)"
  echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
  echo "available: $(cat /sys/devices/system/clocksource/clocksource0/available_clocksource 2>/dev/null)"
  grep -m1 -o -E 'constant_tsc|nonstop_tsc' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  uptime
} > "$O/cpu.txt" 2>&1
cat "$O/cpu.txt" >> "$LOG"

{
  echo "# weft-plan-bench (-DWEFT_PLAN_PHASES=ON), commit ${WEFT_COMMIT:-?}: --filter route/b256"
  timeout 40 $B/weft-plan-bench --filter route/b256 --router data/router/h100.json
  echo "# --filter cpu"
  timeout 30 $B/weft-plan-bench --filter cpu
} > "$O/plan_bench.txt" 2>&1
note "plan-bench rc $?"
grep -E "phases|balanced plan|rows check" "$O/plan_bench.txt" | tee -a "$LOG"

serve() {  # serve <binary> <json> <families> [extra args]
  local bin=$1 out=$2 fam=$3
  shift 3
  WEFT_COMMIT="${WEFT_COMMIT:-}" timeout 100 "$B/$bin" --router data/router/h100.json --seed 20260623 \
    --steps "$STEPS" --families "$fam" --out "$O/$out" "$@" > /tmp/serve.log 2>&1
  local rc=$?
  note "$bin $fam $* rc $rc"
  grep -E "^\[phases\]|weft::Error|CUDA error" /tmp/serve.log | tee -a "$LOG"
  python3 - "$O/$out" <<'PY' 2>&1 | tee -a "$LOG"
import json, sys
d = json.load(open(sys.argv[1]))
x = [c for c in d["cases"] if c["name"] == "serve/summary"][0]["extra"]
print("  summary", x, "clock_read_ns", d.get("clock_read_ns"))
for f in d["families"]:
    r = f["routes"]
    print(f"  {f['name']:8s} ratio {f.get('router_vs_best_fixed', 0):.3f} best {f['best_fixed']} "
          f"plan p50 balanced {r['balanced']['plan_us_p50']:.1f} router {r['router']['plan_us_p50']:.1f} "
          f"decide p50 {f.get('router_decide_us_p50')} picks {f.get('picks')} "
          f"ok {all(c['ok'] for c in f['check'].values())}")
PY
}
serve weft-serve-sim serve_phases.json b256,shared
serve weft-serve-sim-plain serve_plain_1.json b256
serve weft-serve-sim serve_replan.json b256 --replan-warm
serve weft-serve-sim-plain serve_plain_2.json b256
note "done"
