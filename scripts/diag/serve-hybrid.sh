#!/usr/bin/env bash
# The serving harness's hybrid family (chunked prefill + decodes through POD's modes, kAuto as its
# router; docs/perf-notes-serve.md) on an existing build, for a device call that already built
# weft-serve-sim with the pod component (e.g. after scripts/diag/main-check.sh, whose build is
# build-gpu). Writes the JSON and prints one summary line per option, the picks, the checks and
# the summary's ratio (append them to a log when the call's 8 returned files are taken).
#   [B=build-gpu/bench/weft-serve-sim] [SEED=20260623] [STEPS=40] scripts/diag/serve-hybrid.sh OUT.json
set -uo pipefail
B="${B:-build-gpu/bench/weft-serve-sim}"
J="${1:?usage: serve-hybrid.sh OUT.json}"
[ -x "$B" ] || { echo "serve-hybrid: no $B"; exit 2; }
timeout 60 "$B" --families hybrid --seed "${SEED:-20260623}" --steps "${STEPS:-40}" --out "$J" \
  > /tmp/serve_hybrid.log 2>&1
rc=$?
echo "serve-hybrid rc=$rc $(tr '\r' '\n' < /tmp/serve_hybrid.log | grep -v '^\[hybrid\] step' | tail -3 | tr '\n' ' ')"
[ -f "$J" ] || exit "$rc"
python3 - "$J" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for f in d["families"]:
    if f["name"] != "hybrid":
        continue
    for k, s in f.get("routes", {}).items():
        print(f"hybrid {k:10s} wall_us_mean {s['wall_us_mean']:9.1f} gpu_us_mean {s['gpu_us_mean']:9.1f}",
              f"plan_us_p50 {s['plan_us_p50']:7.1f}")
    print("hybrid best_fixed", f.get("best_fixed"), "router_vs_best_fixed", f.get("router_vs_best_fixed"),
          "picks", f.get("picks"), "partition_k", f.get("partition_k"))
    print("hybrid check", f.get("check"))
print("summary", [c["extra"] for c in d["cases"] if c["name"] == "serve/summary"],
      "gpu", d["gpu"], "commit", d["commit"])
PY
exit "$rc"
