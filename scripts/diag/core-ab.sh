#!/usr/bin/env bash
# Diagnostic (device): same-call A/B of a whole source tree against an older one over the
# decode and prefill bench groups (issue 19's "no speed lost" check). Builds weft-bench from
# both trees (decode + prefill only, no tests, no comm) in parallel, runs them PAIRS times each,
# processes interleaved (old, new, old, new, ...), and writes $OUT/core_ab.json:
#   cases "ab/<row>" for every row both benches produced, ms = the new tree's median over its
#   runs, extra.old_ms / new_ms / speedup_new_vs_old (old ms / new ms) and each run's ms;
#   a case "ab/summary" with the median ratio, the slowest row and how many rows are > 3% slower.
# Usage (repo root of the NEW tree on the device; the old tree made locally with
#   `git archive <sha> | tar -x -C .ab-base` and carried):
#   OUT=... WEFT_COMMIT=<new sha> BASE_COMMIT=<old sha> PAIRS=2 scripts/diag/core-ab.sh .ab-base [bench args]
# SKIP_BUILD=1: use weft-bench already built in /tmp/ab-old and /tmp/ab-new (plan-check.sh builds
# them together with the tests; or binaries built on the dev box and unpacked there).
# SAME_ROWS=1 (default): the new tree's runs are limited (--filter per row name) to the rows the
# old tree's first run printed, so both processes run the same rows in the same order (the new
# bench has ~2x the rows; a row's place in the process -- clock and power history -- moved
# ratios by up to 17% in the 9b9ac8c A/B, e.g. decode/marginal/llama3-8b/b1/kv32768 0.825 there
# and 0.987 in a same-rows run of the same call). SAME_ROWS=0: every row of both benches. Each process gets an equal share of the time left before
# DEADLINE (so an early process cannot starve the later ones of their rows). Rows whose new (and
# old) JSON cases carry extra.plan_us get extra.plan_us_new / plan_us_old (median over processes).
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
BASE_SRC=${1:?usage: core-ab.sh <old source tree> [weft-bench args]}
shift
OUT="${OUT:-./ab-out}"
mkdir -p "$OUT"
SECONDS=0
build_bench() {  # <source dir> <build dir> <log>
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_DISABLE="norm;comm" -DWEFT_WITH_COMM=OFF \
    -DWEFT_BUILD_TESTS=OFF > "$3" 2>&1 && ninja -C "$2" -j8 weft-bench >> "$3" 2>&1
}
if [ -z "${SKIP_BUILD:-}" ]; then
  build_bench "$BASE_SRC" /tmp/ab-old "$OUT/build_old.log" &
  OLD_PID=$!
  build_bench . /tmp/ab-new "$OUT/build_new.log" || { tail -30 "$OUT/build_new.log"; exit 1; }
  wait $OLD_PID || { tail -30 "$OUT/build_old.log"; exit 1; }
  echo "build $SECONDS s"
fi
# DEADLINE (seconds since the start, default 540): no run starts after it, and each run is cut
# at it (timeout), so one device call (600 s) always ends with a summary of the rows measured.
# Rows are read from the logs (printed as each row ends), so a cut run still counts its rows.
DEADLINE=${DEADLINE:-540}
runs_left=$((2 * ${PAIRS:-2}))
for i in $(seq 1 "${PAIRS:-2}"); do
  for tree in old new; do
    left=$((DEADLINE - SECONDS))
    share=$((left / runs_left))
    runs_left=$((runs_left - 1))
    if [ "$share" -lt 10 ]; then echo "$tree run $i: skipped (deadline)"; continue; fi
    rows=()
    if [ "$tree" = new ] && [ "${SAME_ROWS:-1}" = 1 ] && [ -s /tmp/ab_old_1.log ]; then
      while read -r r; do rows+=(--filter "$r"); done < <(grep -oE '^(decode|prefill)/\S+' /tmp/ab_old_1.log)
    fi
    timeout "$share" stdbuf -oL /tmp/ab-$tree/bench/weft-bench --group decode --group prefill "$@" "${rows[@]}" \
      --commit "${WEFT_COMMIT:-unknown}" --json "/tmp/ab_${tree}_$i.json" > "/tmp/ab_${tree}_$i.log" 2>&1 ||
      tail -3 "/tmp/ab_${tree}_$i.log"
    echo "$tree run $i: $(grep -cE '^(decode|prefill)/' "/tmp/ab_${tree}_$i.log") rows ($SECONDS s)"
  done
done
python3 - "$OUT" "${PAIRS:-2}" "${BASE_COMMIT:-unknown}" "${WEFT_COMMIT:-unknown}" <<'PY'
import json, statistics, sys
out, pairs, base, new = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
import glob, os, re
row = re.compile(r"^((?:decode|prefill)/\S+)\s+([0-9.]+)\s")
ms = {t: {} for t in ("old", "new")}
order = []
for t in ms:
    for i in range(1, pairs + 1):
        log = f"/tmp/ab_{t}_{i}.log"
        if not os.path.exists(log):
            continue
        for line in open(log):
            m = row.match(line)
            if m and float(m.group(2)) > 0:
                ms[t].setdefault(m.group(1), []).append(float(m.group(2)))
                if t == "new" and m.group(1) not in order:
                    order.append(m.group(1))
jsons = sorted(glob.glob("/tmp/ab_new_*.json")) + sorted(glob.glob("/tmp/ab_old_*.json"))
first = json.load(open(jsons[0])) if jsons else {"command": "weft-bench --group decode --group prefill"}
plan_us = {t: {} for t in ("old", "new")}
for t in plan_us:
    for js in sorted(glob.glob(f"/tmp/ab_{t}_*.json")):
        try:
            for c in json.load(open(js)).get("cases", []):
                if "plan_us" in c.get("extra", {}):
                    plan_us[t].setdefault(c["name"], []).append(c["extra"]["plan_us"])
        except Exception:
            pass  # a process cut at the deadline leaves no JSON: its rows come from the log
cases, ratios = [], []
for name in order:
    if name not in ms["old"] or name not in ms["new"]:
        continue
    o, n = statistics.median(ms["old"][name]), statistics.median(ms["new"][name])
    r = o / n
    ratios.append((r, name))
    extra = {"old_ms": o, "new_ms": n, "speedup_new_vs_old": r,
             "old_runs_ms": ms["old"][name], "new_runs_ms": ms["new"][name]}
    for t in ("old", "new"):
        if name in plan_us[t]:
            extra["plan_us_" + t] = statistics.median(plan_us[t][name])
    cases.append({"name": "ab/" + name, "ms": n, "extra": extra})
# Rows only the new tree has (e.g. the plan-cost rows): their plan_us, no ratio.
for name in order:
    if name in ms["old"] or name not in plan_us["new"]:
        continue
    cases.append({"name": "new/" + name, "ms": statistics.median(ms["new"][name]),
                  "extra": {"plan_us": statistics.median(plan_us["new"][name]), "plan_us_runs": plan_us["new"][name]}})
rs = sorted(r for r, _ in ratios)
summary = {"name": "ab/summary", "ms": None, "extra": {
    "rows": len(rs), "median_speedup_new_vs_old": statistics.median(rs) if rs else None,
    "min_speedup_new_vs_old": rs[0] if rs else None, "slowest_row": min(ratios)[1] if ratios else None,
    "rows_more_than_3pct_slower": sum(r < 1 / 1.03 for r in rs), "base_commit": base, "new_commit": new}}
doc = {k: first[k] for k in first if k != "cases"}
doc["command"] = "scripts/diag/core-ab.sh (old " + base + ", new " + new + "), " + doc.get("command", "")
doc["cases"] = cases + [summary]
json.dump(doc, open(f"{out}/core_ab.json", "w"), indent=1)
print(json.dumps(summary["extra"]))
for r, n in sorted(ratios)[:12]:
    print(f"{n:60s} {r:.3f}")
PY
echo "total $SECONDS s"
