#!/usr/bin/env python3
"""Offline replay of the decode router on weft-serve-sim's per-step measurements (pure Python).

Fits route-option coefficients on a calibration run's per-step (features, wall time) samples,
then replays a held-out run: at every step the option with the lowest predicted time is
"chosen" and the MEASURED wall time of that option at that step (plus the router's decision
time) is charged. This evaluates a model on held-out measurements without a device; it is not
a live run (a live run executes the pick and measures it again).

  bench/serve/replay.py CAL.json HELDOUT.json [--pool]

This replays the LINEAR model only. Tables since the session of 2026-11-24 decide by a vote of the
nearest calibration steps (src/decode/router.h); their replay is the C++ one, with the kAuto
wrapper's filter and decision time:
  bench/serve/walls.py CAL.json > cal.txt; bench/serve/walls.py HELDOUT.json > held.txt
  weft-serve-sim --refit cal.txt --seed 20260622 --gpu NAME --slots 264 --calibration TEXT \
      --out table.json --replay held.txt --replay-seed 20260623      [--neighbours 0: linear only]

--pool: one coefficient vector shared by every 1-D-grid option (work queue chunks and no split:
the same kernel and plan code, so the same costs per feature), fitted on all their samples;
balanced and prefix_share keep their own fits. Relative least squares, non-negative (the
projected coordinate descent of src/decode/router.cpp).
"""
import json
import math
import sys

F = 5


def nnls_relative(xs, ts):
    xs = [[v / t for v in x] for x, t in zip(xs, ts)]
    ts = [1.0] * len(xs)
    norm = [math.sqrt(sum(x[i] ** 2 for x in xs)) for i in range(F)]
    A = [[0.0] * F for _ in range(F)]
    b = [0.0] * F
    for x, t in zip(xs, ts):
        for i in range(F):
            if norm[i] == 0:
                continue
            xi = x[i] / norm[i]
            b[i] += xi * t
            for j in range(F):
                if norm[j]:
                    A[i][j] += xi * x[j] / norm[j]
    c = [0.0] * F
    for _ in range(5000):
        moved = 0.0
        for i in range(F):
            if A[i][i] <= 0:
                continue
            g = b[i] - sum(A[i][j] * c[j] for j in range(F) if j != i)
            ci = max(0.0, g / A[i][i])
            moved = max(moved, abs(ci - c[i]))
            c[i] = ci
        if moved < 1e-12:
            break
    return [c[i] / norm[i] if norm[i] else 0.0 for i in range(F)]


def samples(run):
    out = {}  # option -> (features, walls)
    for f in run["families"]:
        for k, v in f["per_step"].items():
            if "features" not in v:
                continue
            xs, ts = out.setdefault(k, ([], []))
            xs.extend(v["features"])
            ts.extend(v["wall_us"])
    return out


def one_d(name):
    return name.startswith("work_queue/") or name == "no_split"


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    pool = "--pool" in sys.argv
    cal, held = (json.load(open(p)) for p in args[:2])
    s = samples(cal)
    coef = {}
    if pool:
        xs, ts = [], []
        for k, (x, t) in s.items():
            if one_d(k):
                xs += x
                ts += t
        shared = nnls_relative(xs, ts)
    for k, (x, t) in s.items():
        coef[k] = shared if pool and one_d(k) else nnls_relative(x, t)
    router_us = 0.3
    worst = 9.0
    for f in held["families"]:
        ps = f["per_step"]
        opts = [k for k in ps if k != "router" and k in coef]
        n = len(ps[opts[0]]["wall_us"])
        means = {k: sum(ps[k]["wall_us"]) / n for k in opts}
        best = min(opts, key=lambda k: means[k])
        tot, picks = 0.0, {}
        for st in range(n):
            pred = {k: sum(c * v for c, v in zip(coef[k], ps[k]["features"][st])) for k in opts}
            k = min(opts, key=lambda o: pred[o])
            picks[k] = picks.get(k, 0) + 1
            tot += ps[k]["wall_us"][st] + router_us
        r = tot / n
        worst = min(worst, means[best] / r)
        live = f.get("router_vs_best_fixed")
        live_s = f"  (live {live:.3f})" if live is not None else ""
        print(f"{f['name']:12s} best {best:17s} {means[best]:8.1f}  replay {r:8.1f}  ratio {means[best] / r:.3f}"
              f"{live_s}  picks {picks}")
    print(f"replay router_vs_best_fixed_min {worst:.3f} ({'pooled 1-D-grid fit' if pool else 'per-option fits'})")


if __name__ == "__main__":
    main()
