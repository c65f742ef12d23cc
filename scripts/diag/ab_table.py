#!/usr/bin/env python3
"""A/B table of scripts/diag/sm90-ncu.sh step 4: LOGDIR/ab_<tree>_<pass>.json (weft-bench) and
LOGDIR/fi_<pass>.json (fi_prefill_probe.py) -> printed table and two merged JSON files (rows
named <tree>/<pass>/<row>; FlashInfer rows <pass>/<row>).

    ab_table.py LOGDIR AB_OUT.json FI_OUT.json [REF_TREE]

Per row and tree: the ms of every pass, the median; x <tree> = median over passes of the paired
ratio REF ms / tree ms (same pass, REF_TREE default shipped; > 1: the tree is faster); x FI = FlashInfer median ms /
the tree's median ms (> 1: weft faster). Also the nvidia-smi dmon log (LOGDIR/dmon.log): SM
clock and power percentiles during the passes."""
import glob
import json
import os
import re
import statistics
import sys


def fi_name(weft_name):
    return weft_name.replace("prefill/sm90/", "prefill/")


def main():
    log, ab_out, fi_out = sys.argv[1:4]
    ref = sys.argv[4] if len(sys.argv) > 4 else "shipped"
    merged, rows, order = None, {}, []
    for p in sorted(glob.glob(os.path.join(log, "ab_*_*.json"))):
        tree, ps = re.match(r"ab_(.+)_(\d+)\.json", os.path.basename(p)).groups()
        d = json.load(open(p))
        if merged is None:
            merged = {k: v for k, v in d.items() if k != "cases"}
            merged["cases"] = []
        for c in d["cases"]:
            if not c.get("ms"):
                continue
            if c["name"] not in order:
                order.append(c["name"])
            rows.setdefault(c["name"], {}).setdefault(tree, {})[int(ps)] = c["ms"]
            merged["cases"].append(dict(c, name=f"{tree}/{ps}/{c['name']}"))
    if merged:
        merged["command"] = "scripts/diag/sm90-ncu.sh step 4: alternating passes, rows named <tree>/<pass>/<row>"
        json.dump(merged, open(ab_out, "w"), indent=1)
    fi, fidoc = {}, None
    for p in sorted(glob.glob(os.path.join(log, "fi_*.json"))):
        ps = re.match(r"fi_(\d+)\.json", os.path.basename(p))
        if not ps:
            continue
        d = json.load(open(p))
        if fidoc is None:
            fidoc = {k: v for k, v in d.items() if k != "cases"}
            fidoc["cases"] = []
        for c in d["cases"]:
            if c.get("ms"):
                fi.setdefault(c["name"], []).append(c["ms"])
                fidoc["cases"].append(dict(c, name=f"{ps.group(1)}/{c['name']}"))
    if fidoc:
        json.dump(fidoc, open(fi_out, "w"), indent=1)
    trees = sorted({t for r in rows.values() for t in r}, key=lambda t: (t != ref, t != "shipped", t))
    print(f"A/B: ms per pass | median; x = median paired {ref}/tree; xFI = FlashInfer median / tree median")
    for name in order:
        r = rows[name]
        f = fi.get(fi_name(name))
        fm = statistics.median(f) if f else None
        line = f"{name.replace('prefill/sm90/', ''):<28}"
        base = r.get(ref, {})
        for t in trees:
            v = r.get(t, {})
            if not v:
                line += f" | {t}: -"
                continue
            med = statistics.median(v.values())
            s = f" | {t} " + "/".join(f"{v[k]:.4f}" for k in sorted(v)) + f" [{med:.4f}]"
            if t != ref:
                pr = [base[k] / v[k] for k in v if k in base]
                if pr:
                    s += f" x{statistics.median(pr):.3f}"
            if fm:
                s += f" xFI {fm / med:.2f}"
            line += s
        if f:
            line += " | FI " + "/".join(f"{x:.4f}" for x in f)
        print(line)
    dm = os.path.join(log, "dmon.log")
    if os.path.exists(dm):
        hdr, pw, clk = None, [], []
        for l in open(dm):
            if l.startswith("#") and hdr is None:
                hdr = l[1:].split()
                continue
            if l.startswith("#") or not hdr:
                continue
            f = l.split()
            if len(f) != len(hdr):
                continue
            d = dict(zip(hdr, f))
            if d.get("pwr", "-").isdigit():
                pw.append(int(d["pwr"]))
            if d.get("pclk", "-").isdigit():
                clk.append(int(d["pclk"]))
        q = lambda a, x: sorted(a)[min(len(a) - 1, int(x * len(a)))] if a else None
        print(f"dmon: {len(pw)} samples; power W p10/p50/p90 {q(pw, .1)}/{q(pw, .5)}/{q(pw, .9)}; "
              f"SM clock MHz p10/p50/p90 {q(clk, .1)}/{q(clk, .5)}/{q(clk, .9)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
