#!/usr/bin/env python3
"""Summarize weft-bench / torch_baselines JSON results.

  python3 bench/summarize.py bench.json torch.json [--out combined.json]

Prints one markdown table of every case (name, ms, GB/s, TFLOP/s, fraction of ceiling) and, where
a torch case "torch/<suffix>" and a weft case named <suffix> (or ending in "/<suffix>") both ran,
a side-by-side table with speedup = torch_ms / weft_ms (> 1: weft is faster).
Torch cases get fractions against the ceilings measured by weft-bench when a file carries them.
"""
import argparse
import json
import math
import sys


def load(paths):
    docs = []
    for p in paths:
        try:
            with open(p) as f:
                d = json.load(f)
        except (OSError, ValueError) as ex:
            print(f"summarize: skipping {p}: {ex}", file=sys.stderr)
            continue
        d["_path"] = p
        docs.append(d)
    return docs


def first_ceilings(docs):
    for d in docs:
        c = d.get("ceilings") or {}
        if any(isinstance(c.get(k), (int, float)) and c.get(k) for k in
               ("copy_gbps", "read_gbps", "gemm_tflops")):
            return c
    return {}


def fraction(case, ceilings):
    f = case.get("fraction_of_ceiling")
    if isinstance(f, (int, float)) and not math.isnan(f):
        return f
    if "error" in case:
        return None
    key = {"read": ("gb_per_s", "read_gbps"), "copy": ("gb_per_s", "copy_gbps"),
           "gemm": ("tflops", "gemm_tflops")}.get(case.get("ceiling") or "")
    if not key:
        return None
    got, ceil = case.get(key[0]) or 0, ceilings.get(key[1]) or 0
    return got / ceil if got and ceil else None


def fmt(x, spec):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x, spec)


def table(headers, rows):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h))
              for i, h in enumerate(headers)]
    out = ["| " + " | ".join(str(h).ljust(w) for h, w in zip(headers, widths)) + " |",
           "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    for r in rows:
        out.append("| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |")
    return "\n".join(out)


def match_pairs(cases):
    weft = [c for c in cases if c.get("group") != "torch" and "error" not in c]
    torch = [c for c in cases if c.get("group") == "torch"]
    by_name = {c["name"]: c for c in weft}
    pairs = []
    for t in torch:
        suffix = t["name"][len("torch/"):] if t["name"].startswith("torch/") else t["name"]
        w = by_name.get(suffix)
        if w is None:
            cands = [c for c in weft if c["name"].endswith("/" + suffix)]
            w = cands[0] if len(cands) == 1 else None
        if w is not None:
            pairs.append((suffix, w, t))
    return pairs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", help="result JSON files")
    ap.add_argument("--out", help="write a combined JSON here")
    args = ap.parse_args()
    docs = load(args.inputs)
    if not docs:
        print("summarize: no readable inputs", file=sys.stderr)
        return 1
    ceilings = first_ceilings(docs)
    cases = []
    for d in docs:
        for c in d.get("cases", []):
            c = dict(c)
            c.setdefault("group", "?")
            c["fraction_of_ceiling"] = fraction(c, ceilings)
            c["_source"] = d["_path"]
            cases.append(c)

    for d in docs:
        print(f"# {d['_path']}: gpu {d.get('gpu', '?')}, commit {d.get('commit') or '?'}, "
              f"{d.get('timestamp', '?')}")
    if ceilings:
        print(f"ceilings: copy {fmt(ceilings.get('copy_gbps'), '.1f')} GB/s, read "
              f"{fmt(ceilings.get('read_gbps'), '.1f')} GB/s, gemm "
              f"{fmt(ceilings.get('gemm_tflops'), '.1f')} TFLOP/s")
    failures = [(d["_path"], f) for d in docs for f in d.get("failures", [])]
    for path, f in failures:
        print(f"FAILED group {f.get('group')} ({path}): {f.get('error')}")
    print()

    rows = []
    for c in cases:
        if "error" in c:
            rows.append([c["name"], "ERROR", c["error"][:70], "", ""])
        else:
            frac = c["fraction_of_ceiling"]
            rows.append([c["name"], fmt(c.get("ms"), ".4f"), fmt(c.get("gb_per_s"), ".1f"),
                         fmt(c.get("tflops"), ".2f"),
                         (fmt(frac, ".3f") + f" {c.get('ceiling')}") if frac is not None else "-"])
    print(table(["case", "ms", "GB/s", "TFLOP/s", "frac"], rows))

    pairs = match_pairs(cases)
    comparisons = []
    if pairs:
        print()
        prow = []
        for suffix, w, t in pairs:
            if "error" in t:
                prow.append([suffix, fmt(w.get("ms"), ".4f"), "ERROR", "-", "-", "-"])
                comparisons.append({"case": suffix, "weft_ms": w.get("ms"), "torch_error": t["error"]})
                continue
            speed = t["ms"] / w["ms"] if w.get("ms") and t.get("ms") else None
            rate_key = "tflops" if w.get("ceiling") == "gemm" else "gb_per_s"
            prow.append([suffix, fmt(w.get("ms"), ".4f"), fmt(t.get("ms"), ".4f"),
                         fmt(speed, ".2f") + "x" if speed else "-",
                         fmt(w.get(rate_key), ".1f"), fmt(t.get(rate_key), ".1f")])
            comparisons.append({"case": suffix, "weft_ms": w.get("ms"), "torch_ms": t.get("ms"),
                                "speedup": speed, "metric": rate_key,
                                "weft": w.get(rate_key), "torch": t.get(rate_key)})
        print(table(["case", "weft ms", "torch ms", "speedup", "weft rate", "torch rate"], prow))
        print("(rate: GB/s, or TFLOP/s for gemm-bound cases; speedup = torch_ms / weft_ms)")

    if args.out:
        meta = [{k: v for k, v in d.items() if k != "cases"} for d in docs]
        with open(args.out, "w") as f:
            json.dump({"sources": meta, "ceilings": ceilings,
                       "cases": [{k: v for k, v in c.items()} for c in cases],
                       "comparisons": comparisons}, f, indent=2)
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
