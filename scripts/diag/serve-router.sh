#!/usr/bin/env bash
# The serving harness's router measurement on an existing build (shared by main-check.sh and
# followup-check.sh): calibrate a table on seed 20260622, report the held-out seed 20260623
# through the kAuto wrapper (STEPS per family, default 40), print one line per family and the summary,
# then FlashInfer's decode wrapper on the same held-out steps when its wheels were installed into
# /tmp/fisite (rc=0 in FI_LOG, default /tmp/fi_install.log). Writes router_h100.json, serve_calibration.json,
# serve_heldout.json and serve_flashinfer.json under OUTDIR; prints everything else.
#   [B=build-gpu/bench/weft-serve-sim] [KIT=<FlashInfer kit>] [STEPS=40] scripts/diag/serve-router.sh OUTDIR
set -uo pipefail
B="${B:-build-gpu/bench/weft-serve-sim}"
O="${1:?usage: serve-router.sh OUTDIR}"
t0=$SECONDS
note() { echo "[serve +$((SECONDS - t0))s] $*"; }
[ -x "$B" ] || { note "no $B"; exit 2; }
timeout 60 "$B" --calibrate "$O/router_h100.json" --seed 20260622 --steps "${STEPS:-40}" --out "$O/serve_calibration.json" \
  > /tmp/cal.log 2>&1
note "calibration rc=$?"
timeout 60 "$B" --router "$O/router_h100.json" --seed 20260623 --steps "${STEPS:-40}" --out "$O/serve_heldout.json" \
  > /tmp/held.log 2>&1
note "held-out rc=$?"
python3 - "$O/serve_heldout.json" <<'PY' 2>&1
import json, sys
d = json.load(open(sys.argv[1]))
for f in d["families"]:
    r = f["routes"]
    print(f"{f['name']:12s} best {f['best_fixed']:18s} {f['best_fixed_wall_us_mean']:8.1f} us"
          f"  router {f.get('router_wall_us_mean', 0):8.1f} us  ratio {f.get('router_vs_best_fixed', 0):.3f}"
          f"  decide p50 {f.get('router_decide_us_p50')}  router plan p50 {r['router']['plan_us_p50']:.1f}"
          f"  picks {f.get('picks')}  ok {all(c['ok'] for c in f['check'].values())}")
print([c for c in d["cases"] if c["name"] == "serve/summary"])
PY
"$B" --dump-steps /tmp/steps.json --seed 20260623 --steps "${STEPS:-40}" > /dev/null 2>&1
if grep -q "rc=0" "${FI_LOG:-/tmp/fi_install.log}" 2>/dev/null && [ -n "${KIT:-}" ]; then
  PYTHONPATH=/tmp/fisite timeout 100 python3 bench/serve/fi_serve.py /tmp/steps.json "$O/serve_heldout.json" \
    --out "$O/serve_flashinfer.json" --kit "$KIT" > /tmp/fi_serve.log 2>&1
  note "flashinfer serve rc=$? $(tail -1 /tmp/fi_serve.log)"
  grep -E "^\[" /tmp/fi_serve.log
fi
