#!/usr/bin/env python3
"""Side-by-side Nsight Compute summary of weft's sm90 prefill kernel and FlashInfer's fa3 kernel
(scripts/diag/sm90-ncu.sh step 2). DIR holds, per profiled launch, <tag>.details.csv /
<tag>.raw.csv / <tag>.sass.csv (ncu --page details|raw|source --csv); tags weft_<row> and
fi_<mask>_<L> (row causal_ragged_L<L> / noncausal_ragged_L<L>).

    ncu_compare.py DIR

Per pair (same shape): every details-page metric of the two, the raw metrics about pipes, stall
sampling, SM activity, L2 / DRAM and bank conflicts, and from the SASS source page the executed
warp instructions per 128 x 128 tile (by opcode class) and the sampled stall reasons of the
hottest instructions. Tiles: 128 x 128 (q, k) blocks of the unmasked pairs (causal: n (n + 1) / 2
per head, n = L / 128, diagonal blocks counted whole; both kernels run exactly these at d128).
"""
import collections
import csv
import glob
import os
import re
import sys

HQ = 32


def tiles(mask, L):
    n = L // 128
    return HQ * (n * (n + 1) // 2 if mask == "causal" else n * n)


def read_csv(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    return list(csv.reader(lines))


def details(path):
    rows = read_csv(path)
    if not rows:
        return {}
    h = rows[0]
    ix = {k: i for i, k in enumerate(h)}
    out = {}
    for r in rows[1:]:
        try:
            key = (r[ix["Section Name"]], r[ix["Metric Name"]])
            out[key] = (r[ix["Metric Value"]], r[ix.get("Metric Unit", ix["Metric Value"])])
        except (KeyError, IndexError):
            continue
    return out


def raw(path):
    rows = read_csv(path)
    if len(rows) < 3:
        return {}
    h, units, vals = rows[0], rows[1], rows[2]
    return {h[i]: (vals[i], units[i]) for i in range(min(len(h), len(vals)))}


def num(s):
    try:
        return float(str(s).replace(",", ""))
    except ValueError:
        return None


def opclass(op):
    o = op.split(".")[0]
    if o in ("HGMMA",):
        return "HGMMA"
    if o in ("MUFU",):
        return op[:8]
    if o in ("FFMA", "FMUL", "FADD", "FMNMX", "FSEL", "FSETP", "F2FP", "SHFL", "VOTE", "BAR", "SYNCS", "WARPGROUP",
             "BRA", "LDG", "STG", "LDS", "STS", "UTMALDG", "UTMASTG", "STSM", "LDSM", "ISETP", "IMAD", "IADD3",
             "LOP3", "SHF", "SEL", "PLOP3", "MOV", "R2UR", "NOP", "LEA", "VIADD", "CS2R", "S2R"):
        return o
    if o.startswith("U"):
        return "U*"
    return "other"


def sass(path):
    rows = read_csv(path)
    while rows and (not rows[0] or rows[0][0] != "Address"):  # a "Kernel Name" line precedes the header
        rows = rows[1:]
    if not rows:
        return None
    h = rows[0]
    ix = {k: i for i, k in enumerate(h)}
    src = next((ix[k] for k in ("Source", "SASS", "Instruction") if k in ix), None)
    ex = next((ix[k] for k in h if k.startswith("Instructions Executed") or k == "inst_executed"), None)
    samp = next((ix[k] for k in h if k.startswith("Warp Stall Sampling (All")), None)
    stall_cols = [k for k in h if k.startswith("stall_") and "(Not Issued)" not in k]
    res = {"header": h, "ops": collections.Counter(), "stalls": collections.Counter(), "hot": [], "total_samples": 0}
    for r in rows[1:]:
        if src is None or len(r) <= src:
            continue
        text = r[src].strip()
        m = re.match(r"(@!?U?P\w+\s+)?([A-Z0-9_.]+)", text)
        if not m:
            continue
        op = m.group(2)
        e = num(r[ex]) if ex is not None else None
        if e:
            res["ops"][opclass(op)] += e
        s = num(r[samp]) if samp is not None else None
        if s:
            res["total_samples"] += s
            res["hot"].append((s, r[ix.get("Address", 0)] if "Address" in ix else "", text[:70],
                               {k: num(r[ix[k]]) for k in stall_cols if num(r[ix[k]])}))
        for k in stall_cols:
            v = num(r[ix[k]])
            if v:
                res["stalls"][k] += v
    res["hot"].sort(key=lambda x: -x[0])
    return res


def shape_of(tag):
    m = re.search(r"(causal|noncausal|none)_(?:ragged_)?L?(\d+)", tag)
    if not m:
        return None
    return ("causal" if m.group(1) == "causal" else "none", int(m.group(2)))


RAW_PAT = re.compile(r"pipe_tensor|gmma|inst_executed_pipe|pcsamp_warps_issue_stalled|sm__cycles_active|"
                     r"sm__cycles_elapsed\.avg\.per_second|gpc__cycles_elapsed\.max|data_bank_conflicts|lts__t_sector_hit_rate|"
                     r"dram__bytes_read\.sum$|lts__t_bytes\.sum\.per_second|smsp__issue_active|sm__inst_executed\.sum$|"
                     r"smsp__warps_active|launch__registers|launch__grid|launch__block|gpu__time_duration\.sum")


RAW_SKIP = re.compile(r"\.(min|max)\b|\.sum\.pct|_elapsed|peak_sustained$|per_second$|bgmma|igmma|src_fp16|src_tf32|"
                      r"src_fp8|_realtime|\.peak_s")


def main():
    d = sys.argv[1]
    tags = sorted(os.path.basename(p)[:-len(".details.csv")] for p in glob.glob(os.path.join(d, "*.details.csv")))
    by_shape = collections.defaultdict(dict)
    for t in tags:
        s = shape_of(t)
        if s:
            by_shape[s]["weft" if t.startswith("weft") else "fi"] = t
    for s, pair in sorted(by_shape.items()):
        n_t = tiles(*s)
        print("=" * 100)
        print(f"shape {s[0]} L{s[1]}: {n_t} tiles of 128x128; reports {pair}")
        names = [k for k in ("weft", "fi") if k in pair]
        D = {k: details(os.path.join(d, pair[k] + ".details.csv")) for k in names}
        keys = []
        for k in names:
            for key in D[k]:
                if key not in keys:
                    keys.append(key)
        print("-- details (%s)" % " | ".join(names))
        for key in keys:
            vals = [D[k].get(key, ("-", ""))[0] for k in names]
            unit = next((D[k][key][1] for k in names if key in D[k]), "")
            print(f"  {key[0][:22]:<22} {key[1][:44]:<44} " + " | ".join(f"{v:>14}" for v in vals) + f"  {unit}")
        R = {k: raw(os.path.join(d, pair[k] + ".raw.csv")) for k in names}
        rk = sorted({m for k in names for m in R[k] if RAW_PAT.search(m) and not RAW_SKIP.search(m)})
        print("-- raw (%s)" % " | ".join(names))
        for m in rk:
            vals = [R[k].get(m, ("-", ""))[0] for k in names]
            print(f"  {m[:70]:<70} " + " | ".join(f"{v:>16}" for v in vals))
        for k in names:
            S = sass(os.path.join(d, pair[k] + ".sass.csv"))
            if S is None:
                print(f"-- {k}: no SASS source page")
                continue
            tot = sum(S["ops"].values())
            print(f"-- {k} SASS: executed warp instructions {tot:.4g} = {tot / n_t:.0f} per tile; by class (per tile):")
            print("   " + "  ".join(f"{o} {v / n_t:.0f}" for o, v in S["ops"].most_common(30)))
            st = S["stalls"]
            if st:
                totst = sum(st.values())
                print("   sampled stall reasons (share): " + "  ".join(
                    f"{k2.replace('stall_', '')} {v / totst:.2f}" for k2, v in st.most_common(14)))
            print(f"   samples {S['total_samples']:.0f}; hottest instructions:")
            for smp, addr, text, reasons in S["hot"][:20]:
                rs = " ".join(f"{a.replace('stall_', '')[:14]}={b:.0f}" for a, b in sorted(reasons.items(), key=lambda x: -x[1])[:3])
                print(f"   {smp / max(S['total_samples'], 1):6.3f} {addr:>6} {text:<70} {rs}")
            if k == names[0] and s == sorted(by_shape)[0]:
                print("   source columns: " + ", ".join(S["header"][:60]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
