#!/usr/bin/env python3
"""Same-call ratios of weft's prefill rows to their peers (issue 20's results format).

Reads a weft-bench JSON (--weft), FlashInfer's .baselines/fi_bench.py JSON (--fi, variant fi-auto: its
sm90 backend) and bench/sdpa_prefill.py's JSON (--sdpa); writes the weft JSON with, on every prefill
row that has a peer of the same shape,
  extra.speedup_vs_flashinfer   FlashInfer ms / weft ms (FlashInfer row of the same name without the
                                sm90/ or fa2/ part: same kv layout, page size 16, shuffled pages)
  extra.speedup_vs_cudnn        torch SDPA cuDNN ms / weft ms (dense tensors: torch has no paged
                                KV, so paged rows are compared with the dense shape)
  extra.speedup_vs_torch_flash  torch SDPA FLASH ms / weft ms
and prints a table. Ratios > 1: weft is faster. Only ratios of rows timed in ONE device call mean
anything (docs/perf-notes-prefill.md: run-to-run spread).
"""
import argparse
import json
import re
import sys

LAYOUTS = ("ragged/", "paged/", "paged-pool-order/", "paged128/")


def load(path):
    if not path:
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as ex:
        print(f"sm90_compare: cannot read {path}: {ex}", file=sys.stderr)
        return None


def peer_names(name):
    """weft row -> (FlashInfer row name, SDPA shape) or None for non-prefill rows."""
    if not name.startswith("prefill/"):
        return None
    rest = re.sub(r"^(sm90|fa2)/", "", name[len("prefill/"):])
    shape = rest
    for lay in LAYOUTS:
        shape = shape.replace(lay, "")
    return "prefill/" + rest, shape


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--weft", required=True, help="weft-bench JSON; several: comma separated (cases joined)")
    p.add_argument("--fi")
    p.add_argument("--sdpa")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    docs = [d for d in (load(x) for x in args.weft.split(",")) if d]
    if not docs:
        return 1
    w = docs[0]
    for d in docs[1:]:
        w["cases"] = w.get("cases", []) + d.get("cases", [])
    fi = {c["name"]: c["ms"] for c in (load(args.fi) or {}).get("cases", [])
          if c.get("variant") == "fi-auto" and c.get("ms")}
    sd = {c["name"]: c["ms"] for c in (load(args.sdpa) or {}).get("cases", []) if c.get("ms")}
    gemm = w.get("ceilings", {}).get("gemm_tflops")
    ragged_ms = {}
    print(f"gemm ceiling {gemm} TFLOP/s" if gemm else "gemm ceiling: not measured")
    print(f"| {'row':44s} | {'ms':>7s} | {'TFLOP/s':>7s} | {'x FI':>5s} | {'x cuDNN':>7s} | {'x FLASH':>7s} |")
    print(f"|{'-' * 46}|{'-' * 9}|{'-' * 9}|{'-' * 7}|{'-' * 9}|{'-' * 9}|")
    for c in w.get("cases", []):
        names = peer_names(c["name"])
        if not names or not c.get("ms"):
            continue
        fi_name, shape = names
        ex = c.setdefault("extra", {})
        ratios = {"speedup_vs_flashinfer": fi.get(fi_name),
                  "speedup_vs_cudnn": sd.get("sdpa/cudnn/" + shape),
                  "speedup_vs_torch_flash": sd.get("sdpa/flash/" + shape)}
        for k, peer in ratios.items():
            if peer:
                ex[k] = peer / c["ms"]
        if "/ragged/" in c["name"]:
            ragged_ms[c["name"].replace("/ragged/", "/")] = c["ms"]
        tf = c.get("flops", 0) / c["ms"] / 1e9

        def fmt(k, width):
            return f"{ex[k]:{width}.2f}" if k in ex else " " * (width - 1) + "-"
        print(f"| {c['name']:44s} | {c['ms']:7.3f} | {tf:7.1f} | {fmt('speedup_vs_flashinfer', 5)} | "
              f"{fmt('speedup_vs_cudnn', 7)} | {fmt('speedup_vs_torch_flash', 7)} |")
    # Paged / ragged of the same mainloop and shape (weft-bench rows of this call).
    print("\npaged vs ragged (ragged ms / paged ms, same call):")
    for c in w.get("cases", []):
        m = re.match(r"(.*)/(paged|paged-pool-order|paged128)/(.*)", c["name"])
        if m and c.get("ms"):
            r = ragged_ms.get(f"{m.group(1)}/{m.group(3)}")
            if r:
                c.setdefault("extra", {})["ragged_over_paged"] = r / c["ms"]
                print(f"  {c['name']:48s} {r / c['ms']:.3f}")
    with open(args.out, "w") as f:
        json.dump(w, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
