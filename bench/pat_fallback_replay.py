#!/usr/bin/env python3
"""Replay of the prefix-sharing cost model (heuristics::prefix_share_pays) over measured "pat" rows.

For each batch of the bench's "pat" group (tree x heads x dtype) in the given weft-bench JSON files,
the model's choice (from `weft-plan-bench --filter pat-cost`, which plans every batch as the decode
wrapper does and prints the model's inputs, times and choice) picks the measured time of standard
decode ("decode" row) or of the sharing plan (the "share_forced" row where the file has one: the
sharing plan with the cost model off; else the "share" row where it did not fall back). Reports,
per file and over all, the mean and worst of chosen / min(decode, share) and every miss (chosen
slower than the better of the two). Rows whose measured plan differs from the replayed one (items
or wide items: older planners) are left out and counted.

  --fit FILE: also refit the model's constants on FILE's rows by least squares of the relative
  error (what heuristics.cpp holds) and print them with the fit's mean / worst relative error, and
  cross-validate (fit on three head configs, choose on the fourth).

  python3 bench/pat_fallback_replay.py --plan-bench build/bench/weft-plan-bench \\
      [--fit bench/results/h100_all_049f043.json] bench/results/h100_*.json
"""
import argparse
import json
import subprocess
import sys


def cost_lines(args):
    if args.cost_file:
        text = open(args.cost_file).read()
    else:
        text = subprocess.run([args.plan_bench, "--filter", "pat-cost"], check=True, capture_output=True,
                              text=True).stdout
    model = {}
    for line in text.splitlines():
        if not line.startswith("pat-cost "):
            continue
        f = line.split()
        heads, fan, lens = f[1], f[2][1:], f[3][1:]
        kv = dict(x.split("=", 1) for x in f[4:])
        model[(heads, fan, lens)] = kv
    return model


def pat_rows(path):
    d = json.load(open(path))
    rows = {}
    for c in d.get("cases", []):
        if c.get("group") != "pat" or "ms" not in c or c["name"].endswith("/summary"):
            continue
        p = c.get("params", {})
        if "wide_min_rows" in p or "wide_min_keys" in p:  # selector sweeps: not the shipped plan
            continue
        key = (p["heads"], p["B"], p["L"], p["dtype"])
        rows.setdefault(key, {})[c["name"].rsplit("/", 1)[1]] = (c["ms"] * 1e3, c.get("extra", {}))
    return d.get("commit", "?"), rows


def measured_pair(model_kv, r):
    """(decode_us, share_us) of a batch, or None when the rows lack one or the plan differs."""
    if "decode" not in r:
        return None
    share = r.get("share_forced") or r.get("share")
    if share is None or share[1].get("prefix_fallback", 0):
        return None
    ex = share[1]
    if int(ex.get("items", -1)) != int(model_kv["items"]) or int(ex.get("wide_items", 0)) != int(
            model_kv["wide_items"]):
        return None
    return r["decode"][0], share[0]


FEATS_D = ["unique", "repeat_cc", "repeat_tc"]
FEATS_S = ["private", "pack", "max_cta", "max_wide"]


def features(kv):
    cc = int(kv["cc"])
    rep = float(kv["repeat"])
    d = [1.0, float(kv["unique"]), rep if cc else 0.0, 0.0 if cc else rep]
    s = [1.0] + [float(kv[k]) for k in FEATS_S]
    return d, s


def fit(model, path, keep=lambda key: True, coefs=False):
    import numpy as np
    _, rows = pat_rows(path)
    xd, xs, yd, ys = [], [], [], []
    for key, r in sorted(rows.items()):
        if not keep(key):
            continue
        kv = model.get(key[:3])
        if kv is None or int(kv["packs"]) == 0:
            continue
        pair = measured_pair(kv, r)
        if pair is None:
            continue
        d, s = features(kv)
        xd.append(d), xs.append(s), yd.append(pair[0]), ys.append(pair[1])
    out = []
    for x, y, names in ((xd, yd, ["us"] + FEATS_D), (xs, ys, ["us"] + FEATS_S)):
        x, y = np.array(x), np.array(y)
        w = 1.0 / y
        c, *_ = np.linalg.lstsq(x * w[:, None], y * w, rcond=None)
        e = np.abs(x @ c / y - 1)
        out.append((c if coefs else dict(zip(names, c)), len(y), e.mean(), e.max()))
    return out


MARGIN = 0.98  # heuristics::kPrefixShareMargin


def cross_validate(model, path):
    """Fit on three head configs, choose on the fourth (the model refitted here, margin MARGIN)."""
    _, rows = pat_rows(path)
    heads = sorted({k[0] for k in rows})
    ratios, miss = [], []
    for h in heads:
        (cd, *_), (cs, *_) = fit(model, path, keep=lambda key: key[0] != h, coefs=True)
        for key, r in sorted(rows.items()):
            kv = model.get(key[:3])
            if key[0] != h or kv is None or int(kv["packs"]) == 0:
                continue
            pair = measured_pair(kv, r)
            if pair is None:
                continue
            d, s = features(kv)
            pd, ps = sum(a * b for a, b in zip(cd, d)), sum(a * b for a, b in zip(cs, s))
            t = pair[1] if ps < MARGIN * pd else pair[0]
            ratios.append(t / min(pair))
            if ratios[-1] > 1.0005:
                miss.append(f"  cv miss {'/'.join(key)}: predicted {ps / pd:.3f}, measured {pair[1] / pair[0]:.3f}")
    print(f"cross-validation on {path} (fit without one head config, choose on it): {len(ratios)} batches, "
          f"chosen / best mean {sum(ratios) / len(ratios):.4f} worst {max(ratios):.3f}, {len(miss)} misses")
    for m in miss:
        print(m)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plan-bench", default="build/bench/weft-plan-bench")
    ap.add_argument("--cost-file", help="saved `weft-plan-bench --filter pat-cost` output instead")
    ap.add_argument("--fit", help="refit the constants on this file's rows")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    model = cost_lines(args)
    print(f"cost model lines: {len(model)} batches (tree x heads)")
    if args.fit:
        for name, (c, n, em, ex) in zip(("decode", "share"), fit(model, args.fit)):
            coef = " ".join(f"{k}={v:.5g}" for k, v in c.items())
            print(f"fit {name} on {args.fit} ({n} rows): {coef}  mean|rel err| {em:.3f} worst {ex:.3f}")
        cross_validate(model, args.fit)
    allr, allmiss, fell, allvs = [], [], 0, []
    for path in args.files:
        commit, rows = pat_rows(path)
        ratios, miss, skipped, nopack, vs_share = [], [], 0, 0, []
        for key, r in sorted(rows.items()):
            kv = model.get(key[:3])
            if kv is None:
                skipped += 1
                continue
            if int(kv["packs"]) == 0:
                nopack += 1  # the no-pack fallback (prefix_fallback): not the model's choice
                continue
            pair = measured_pair(kv, r)
            if pair is None:
                skipped += 1
                continue
            dec, share = pair
            choose_share = kv["choice"] == "share"
            fell += not choose_share
            t = share if choose_share else dec
            ratio = t / min(dec, share)
            ratios.append(ratio)
            vs_share.append(t / share)
            if ratio > 1.0005:
                miss.append(f"  miss {'/'.join(key)}: decode {dec:.1f} share {share:.1f} us, chose "
                            f"{'share' if choose_share else 'decode'} (predicted share/decode {float(kv['ratio']):.3f}, "
                            f"measured {share / dec:.3f}) -> {ratio:.3f}x the better")
        if ratios:
            print(f"{path} ({commit}): {len(ratios)} batches, chosen / best mean {sum(ratios) / len(ratios):.4f} "
                  f"worst {max(ratios):.3f} min {min(ratios):.3f}, {len(miss)} misses; chosen / share (always sharing) "
                  f"mean {sum(vs_share) / len(vs_share):.4f} min {min(vs_share):.3f}; left out {skipped} (plan differs "
                  f"or rows missing), {nopack} without packs")
        else:
            print(f"{path} ({commit}): no comparable batch (left out {skipped})")
        for m in miss:
            print(m)
        allr += ratios
        allmiss += miss
        allvs += vs_share
    if allr:
        print(f"ALL: {len(allr)} batch rows, chosen / best mean {sum(allr) / len(allr):.4f} worst {max(allr):.3f} "
              f"(1.0 = always the faster of the two), {len(allmiss)} misses, decode chosen on {fell}; chosen / "
              f"share mean {sum(allvs) / len(allvs):.4f} min {min(allvs):.3f}")
    # The model's choices per batch (one line each).
    print("choices (predicted share/decode, choice):")
    for key in sorted(model):
        kv = model[key]
        print(f"  {key[0]:6s} B{key[1]:12s} L{key[2]:18s} {float(kv['ratio']):.3f} {kv['choice']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
