#!/usr/bin/env python3
"""Host-side replay and refit of kAuto's SM-partition bands (issue 28; heuristics.cpp
pod_partition_*) on the pinned partition times of bench group "pod" (WEFT_BENCH_POD_K /
WEFT_BENCH_POD_DECODE rows, scripts/diag/podfit-check.sh).

  bench/pod_refit.py in1.json [in2.json ...] [--fit] [--cv] [--shapes 4x2,8x2]

Per batch: the configurations timed are serial (the interleaved median), the partition pinned at
each k with the default decode shape ("4x2") and with each alt shape ("WxS"). A band table maps
(tensor-core decode?, sm90 tiles per SM, x = the planner's predicted decode / sm90 prefill ratio)
to serial or (shape, k); its replay = serial / time of the configuration it picks, per batch.
Always printed: the measured kAuto, the old bands (83d7db2) replayed, every pinned configuration,
the per-batch oracle, and the current bands (NEW below, kept equal to heuristics.cpp by hand; the
host test pins its rows) replayed. Older files without partition_x get x and tiles from the
planner's formulas (x_tiles).
--fit searches, per (decode path, chunk class), the piecewise-in-x table with at most 4 segments
maximizing the sum of log speedups with a loss penalty (speedup < 1 counted 4x), and prints it.
--cv: the fit's out-of-sample replay, leaving one context length out at a time.
"""
import json
import math
import sys
from collections import defaultdict

SHAPE_DEFAULT = "4x2"
FUSED = ("fused", 0)  # the fused kernel as a configuration (kAuto's fused band)
MIN_ROWS = 4  # batches a fitted band spans at least


def load(paths):
    rows = []
    for p in paths:
        for c in json.load(open(p))["cases"]:
            if not c["name"].startswith("pod/") or c["name"] == "pod/summary" or c.get("error"):
                continue
            e = c["extra"]
            if "partition_x" not in e:  # older files: the planner's formulas (pod_plan.cpp, pod_cost)
                e["partition_x"], e["sm90_tiles_per_sm"] = x_tiles(c["params"], c.get("sm_count", 132))
            t = {"serial": e["serial_ms"]}
            if "fused_ms" in e:  # the fused kernel (PodMode::kFused, proportional), interleaved with serial
                t[FUSED] = e["fused_ms"]
            for key, v in e.items():
                if key.startswith("part_k") and key.endswith("_ms"):
                    t[(SHAPE_DEFAULT, int(key[6:-3]))] = v
            i = 0
            while f"alt{i}_decode_warps" in e:
                sh = f"{int(e[f'alt{i}_decode_warps'])}x{int(e[f'alt{i}_decode_stages'])}"
                for key, v in e.items():
                    pre = f"alt{i}_k"
                    if key.startswith(pre) and key.endswith("_ms"):
                        t[(sh, int(key[len(pre):-3]))] = v
                i += 1
            heads = c["params"]["heads"]
            rows.append({
                "name": c["name"], "model": c["params"]["model"], "ctx": int(c["params"]["context"]),
                "chunk": int(c["params"]["chunk"]), "nb": int(c["params"]["decode_batch"]),
                "tc": heads != "32/32",  # group 1 (Llama-2-7B): the CUDA-core decode
                "x": e["partition_x"], "tiles": e["sm90_tiles_per_sm"],
                "ideal": max(e["prefill_ms"], e["decode_ms"]), "t": t,
                "pod_ms": c["ms"], "pod_fused": bool(e.get("pod_fused", 0)), "pod_k": int(e.get("pod_free_sms", 0)) if e.get("pod_partition") else 0,
                "pod_shape": f"{int(e.get('pod_decode_warps', 0))}x{int(e.get('pod_decode_stages', 0))}",
            })
    return rows


def x_tiles(params, sms):
    hq, hkv = (int(v) for v in params["heads"].split("/"))
    ctx, q, nb, d = int(params["context"]), int(params["chunk"]), int(params["decode_batch"]), 128
    wp = 4.0 * d * hq * (q * (ctx - q) + q * (q + 1) / 2)
    wd = 2.0 * d * hkv * 2.0 * ctx * nb
    x = (wd / 3064e3 + 14.0) / (wp / 554e6 + 31.0)
    tiles = (q * (hq // hkv) + 127) // 128 * hkv
    return x, tiles / sms


def chunk_class(tiles):
    return 0 if tiles < 1.5 else (1 if tiles < 3.0 else 2)


# The bands fitted at 83d7db2 (heuristics.cpp before this refit): serial or (shape, k).
def old_bands(x, tiles, tc):
    if not tc:
        if x < 0.7:
            return "serial"
        return ("4x3", 32) if x < 1.3 else (SHAPE_DEFAULT, 64)
    pays = x >= 1.0 or (tiles >= 1.5 if x >= 0.5 else (x >= 0.3 and tiles >= 3.0))
    if not pays:
        return "serial"
    if x >= 1.35:
        return ("4x3", 64)
    if x >= 1.0:
        return (SHAPE_DEFAULT, 48)
    if x >= 0.7:
        return ("4x3", 32)
    return ("4x3", 16) if (x < 0.5 and tiles >= 3.0) else (SHAPE_DEFAULT, 16)


# Table form: {(tc, chunk class): [(x_lo, config), ...]} ascending x_lo; below the first x_lo: serial.
# The bands refit on h100_podfit_d9292c4 (the --fit tables with 4x2 and 8x2, thresholds rounded;
# kept equal to heuristics.cpp's pod_partition_* table by hand, pinned by the host test's rows),
# chunk 2K's last band fused since h100_podfit2_0e04bc4 (heuristics::pod_band_fuses).
DEEP = "8x2"
NEW = {
    (False, 0): [(0.7, (SHAPE_DEFAULT, 24)), (1.1, (SHAPE_DEFAULT, 64))],
    (False, 1): [(0.7, (SHAPE_DEFAULT, 24)), (1.1, (SHAPE_DEFAULT, 64))],
    (False, 2): [(0.7, (SHAPE_DEFAULT, 24)), (1.1, (SHAPE_DEFAULT, 64))],
    (True, 0): [(0.85, (DEEP, 40)), (1.7, (DEEP, 64))],
    (True, 1): [(0.5, (DEEP, 24)), (1.0, (SHAPE_DEFAULT, 40)), (1.9, (DEEP, 64))],
    (True, 2): [(0.2, (DEEP, 8)), (0.44, (SHAPE_DEFAULT, 24)), (1.1, (SHAPE_DEFAULT, 48)), (2.2, FUSED)],
}

# Before the fused band (h100_podfit2_0e04bc4): chunk 2K's last band ran the partition, 8 x 2 at k 56.
PREV = dict(NEW)
PREV[(True, 2)] = NEW[(True, 2)][:3] + [(2.2, (DEEP, 56))]


def table_bands(table):
    def f(x, tiles, tc):
        segs = table.get((tc, chunk_class(tiles)), [])
        pick = "serial"
        for lo, cfg in segs:
            if x >= lo:
                pick = cfg
        return pick
    return f


def speed(r, cfg):
    t = r["t"].get(cfg)
    return None if t is None else r["t"]["serial"] / t


def replay(rows, fn, label, show_choices=False):
    sp, within, miss = [], 0, 0
    for r in rows:
        cfg = fn(r["x"], r["tiles"], r["tc"])
        t = r["t"].get(cfg)
        if t is None:
            miss += 1
            continue
        sp.append(r["t"]["serial"] / t)
        within += t <= 1.10 * r["ideal"]
    n = len(sp)
    if n == 0:
        print(f"{label}: no rows")
        return
    tcsp = [s for s, r in zip(sp, [r for r in rows if r["t"].get(fn(r["x"], r["tiles"], r["tc"]))]) if r["tc"]]
    print(f"{label}: n {n} mean {sum(sp) / n:.3f} min {min(sp):.3f} within10 {within / n:.1%} "
          f"({within}) tensor-core mean {sum(tcsp) / max(1, len(tcsp)):.3f}" + (f" (missing {miss})" if miss else ""))


def configs(rows):
    s = set()
    for r in rows:
        s |= set(r["t"].keys())
    return sorted(s, key=lambda c: ("", 0) if c == "serial" else c)


def score(rows, cfg):
    tot = 0.0
    for r in rows:
        sp = speed(r, cfg)
        if sp is None:
            return -1e9
        ls = math.log(sp)
        tot += ls if ls >= 0 else 4 * ls
    return tot


def fit_class(rows, cfgs, max_segs=4):
    """Sorted by x, cut into <= max_segs contiguous groups, each one config: DP over cut points."""
    rows = sorted(rows, key=lambda r: r["x"])
    xs = sorted(set(round(r["x"], 4) for r in rows))
    groups = [[r for r in rows if round(r["x"], 4) == x] for x in xs]
    m = len(groups)
    best_seg = {}
    for i in range(m):
        for j in range(i + 1, m + 1):
            rs = [r for g in groups[i:j] for r in g]
            if len(rs) < MIN_ROWS and (i, j) != (0, m):  # no band fitted to a few rows' noise
                best_seg[(i, j)] = (-1e9, "serial")
                continue
            best_seg[(i, j)] = max((score(rs, c), c) for c in cfgs if c == "serial" or
                                   all(c in r["t"] for r in rs))
    # dp[s][j]: best score of groups[:j] in s segments
    INF = -1e18
    dp = [[INF] * (m + 1) for _ in range(max_segs + 1)]
    arg = {}
    dp[0][0] = 0.0
    for s in range(1, max_segs + 1):
        for j in range(1, m + 1):
            for i in range(j):
                if dp[s - 1][i] == INF:
                    continue
                v = dp[s - 1][i] + best_seg[(i, j)][0]
                if v > dp[s][j]:
                    dp[s][j], arg[(s, j)] = v, i
    s = max(range(1, max_segs + 1), key=lambda s: dp[s][m])
    segs, j = [], m
    while j > 0:
        i = arg[(s, j)]
        segs.append((i, j, best_seg[(i, j)][1]))
        j, s = i, s - 1
    segs.reverse()
    out = []
    for i, j, c in segs:
        # Geometric midpoint to the previous x; the first band starts just below its lowest measured
        # x (nothing below it was measured: serial there).
        lo = 0.95 * xs[0] if i == 0 else math.sqrt(xs[i - 1] * xs[i])
        if out and out[-1][1] == c:
            continue
        out.append((round(lo, 3), c))
    if out and out[0][1] == "serial":
        out = out[1:]  # below the first x_lo: serial anyway
    return out


def fit(rows, max_segs=4):
    cfgs = configs(rows)
    table = {}
    for key in sorted(set((r["tc"], chunk_class(r["tiles"])) for r in rows)):
        table[key] = fit_class([r for r in rows if (r["tc"], chunk_class(r["tiles"])) == key], cfgs, max_segs)
    return table


def main(argv):
    do_fit, do_cv = "--fit" in argv, "--cv" in argv
    shapes = None
    if "--shapes" in argv:  # keep only these decode shapes' pinned times (e.g. 4x2,8x2)
        i = argv.index("--shapes")
        shapes = set(argv[i + 1].split(","))
        argv = argv[:i] + argv[i + 2:]
    paths = [a for a in argv if not a.startswith("--")]
    rows = load(paths)
    if shapes:  # the fused kernel stays a candidate unless --no-fused
        for r in rows:
            r["t"] = {c: v for c, v in r["t"].items() if c in ("serial", FUSED) or c[0] in shapes}
    if "--no-fused" in argv:
        for r in rows:
            r["t"].pop(FUSED, None)
    print(f"{len(rows)} batches, configurations: {len(configs(rows))}")
    # The current bands (NEW; PREV before the fused band) against what kAuto picked in the same call
    # (checks the x/tiles mirror).
    def pick(r, table):
        c = table_bands(table)(r["x"], r["tiles"], r["tc"])
        return c if c != "serial" else ("serial", 0)
    def measured(r):
        if r["pod_fused"]:
            return FUSED
        return (r["pod_shape"], r["pod_k"]) if r["pod_k"] else ("serial", 0)
    for label, table in (("current", NEW), ("pre-fused-band", PREV)):
        agree = sum(1 for r in rows if pick(r, table) == measured(r))
        print(f"{label} bands' choice agrees with the measured kAuto's on {agree} of {len(rows)} batches")
    n = len(rows)
    sp = [r["t"]["serial"] / r["pod_ms"] for r in rows]
    print(f"measured kAuto (interleaved with serial): mean {sum(sp) / n:.3f} min {min(sp):.3f} within10 "
          f"{sum(r['pod_ms'] <= 1.1 * r['ideal'] for r in rows) / n:.1%}")
    print(f"ideal bound: mean {sum(r['t']['serial'] / r['ideal'] for r in rows) / n:.3f}")
    replay(rows, old_bands, "old bands replayed")
    orc = [max(speed(r, c) for c in r["t"]) for r in rows]
    print(f"oracle (best pinned config or serial per batch): mean {sum(orc) / n:.3f} min {min(orc):.3f}")
    for c in configs(rows):
        if c == "serial":
            continue
        s = [speed(r, c) for r in rows if c in r["t"]]
        print(f"  pinned {c[0]} k{c[1]:>2}: mean {sum(s) / len(s):.3f} min {min(s):.3f}")
    if NEW:
        replay(rows, table_bands(NEW), "new bands (heuristics.cpp) replayed")
        replay(rows, table_bands(PREV), "the bands before the fused band (d9292c4 fit) replayed")
    if do_fit:
        table = fit(rows)
        print("fitted table (x_lo -> config; serial below the first):")
        for key, segs in table.items():
            print(f"  tc={key[0]} chunk class {key[1]}: {segs}")
        replay(rows, table_bands(table), "fitted table replayed (in-sample)")
    if do_cv:
        ctxs = sorted(set(r["ctx"] for r in rows))
        sp, within = [], 0
        for cx in ctxs:
            train = [r for r in rows if r["ctx"] != cx]
            test = [r for r in rows if r["ctx"] == cx]
            f = table_bands(fit(train))
            for r in test:
                t = r["t"][f(r["x"], r["tiles"], r["tc"])]
                sp.append(r["t"]["serial"] / t)
                within += t <= 1.1 * r["ideal"]
        print(f"fit, leave-one-context-out: mean {sum(sp) / len(sp):.3f} min {min(sp):.3f} "
              f"within10 {within / len(sp):.1%}")


if __name__ == "__main__":
    main(sys.argv[1:])
