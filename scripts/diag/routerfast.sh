#!/usr/bin/env bash
# Router host-cost A/B (issue 22, routerfast): two dev-box-built binaries of weft-serve-sim (old =
# main before the change, new = after) run interleaved on the held-out seed with the committed
# H100 table, N processes each (old, new, old, new, ...), then weft-plan-bench's route/ rows of
# both on the device host. Binaries come xz-compressed in BIN (carried; xz or python3's lzma).
#   BIN=<dir with serve-sim-{old,new}.xz, plan-bench-{old,new}> [N=3] [STEPS=40] routerfast.sh OUTDIR
set -uo pipefail
BIN="${BIN:?}"; O="${1:?usage: routerfast.sh OUTDIR}"; N="${N:-3}"; T=/tmp/rfbin
t0=$SECONDS
note() { echo "[rf +$((SECONDS - t0))s] $*"; }
mkdir -p "$T" "$O"
for v in old new; do
  if command -v xz > /dev/null; then xz -dc "$BIN/serve-sim-$v.xz" > "$T/serve-sim-$v"
  else python3 -c "import lzma,sys,shutil; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" "$BIN/serve-sim-$v.xz" "$T/serve-sim-$v"; fi
  cp "$BIN/plan-bench-$v" "$T/plan-bench-$v"
  chmod +x "$T/serve-sim-$v" "$T/plan-bench-$v"
done
note "unpacked $(ls -la $T | wc -l) files"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader 2>&1 | head -1
for i in $(seq 1 "$N"); do
  for v in old new; do
    [ $SECONDS -gt "${LIMIT:-150}" ] && { note "time limit: skip $v $i"; continue; }
    timeout 60 "$T/serve-sim-$v" --router data/router/h100.json --seed 20260623 --steps "${STEPS:-40}" \
      --out "$O/${v}_$i.json" > "/tmp/rf_${v}_$i.log" 2>&1
    note "$v $i rc=$?"
  done
done
python3 - "$O" <<'PY' 2>&1
import json, sys, glob, os, statistics as st
o = sys.argv[1]
rows = {}
for fn in sorted(glob.glob(os.path.join(o, "*_*.json"))):
    v = os.path.basename(fn).split("_")[0]
    try: d = json.load(open(fn))
    except Exception as e: print("bad", fn, e); continue
    for f in d["families"]:
        r = f["routes"]
        rows.setdefault(f["name"], {}).setdefault(v, []).append(
            (f.get("router_vs_best_fixed", 0), f.get("router_decide_us_p50", 0), r["router"]["plan_us_p50"],
             f["best_fixed"], r[f["best_fixed"]]["plan_us_p50"] if f["best_fixed"] in r else 0, f.get("picks")))
        print(f"{os.path.basename(fn):10s} {f['name']:12s} best {f['best_fixed']:16s} ratio {f.get('router_vs_best_fixed', 0):.4f}"
              f" decide p50 {f.get('router_decide_us_p50', 0):.2f} router plan p50 {r['router']['plan_us_p50']:.2f}"
              f" best plan p50 {rows[f['name']][v][-1][4]:.2f} picks {f.get('picks')}"
              f" ok {all(c['ok'] for c in f['check'].values())}")
print("family        old ratio (mean of runs)  new ratio   old decide/plan p50   new decide/plan p50")
for fam, vs in rows.items():
    def m(v, k): return st.mean(x[k] for x in vs.get(v, [(0,)*6])) if vs.get(v) else float("nan")
    print(f"{fam:12s}  {m('old',0):.4f}  {m('new',0):.4f}   {m('old',1):5.2f} / {m('old',2):6.2f}   {m('new',1):5.2f} / {m('new',2):6.2f}")
PY
for v in old new; do
  note "plan-bench $v route rows"
  timeout 40 "$T/plan-bench-$v" --filter route --router data/router/h100.json 2>&1 | grep -E "shared keys|choose_route|decide"
done
note "end"
