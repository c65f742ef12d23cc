#!/usr/bin/env python3
"""Plot of weft-bench's "pat" group (bench/cases_decode_pat.cu) with FlashInfer's rows of the
same batches (bench/fi_pat.py), one panel per head configuration (bf16): per tree, time of weft's
standard decode, weft share_prefixes, FlashInfer decode (fi-tc) and FlashInfer's multi-level
cascade (fi-cascade), log scale, and the unique-bytes fraction of the read ceiling of
share_prefixes above each group of bars.

  python3 bench/pat_plot.py WEFT_JSON [FI_JSON] --out plot.png
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("weft")
    p.add_argument("fi", nargs="?")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    w = json.load(open(a.weft))
    fi = json.load(open(a.fi))["cases"] if a.fi else []
    us = {}  # (name, series) -> us
    frac = {}
    for c in w["cases"]:
        n = c["name"]
        if "/bf16/" not in n or n.endswith("summary"):
            continue
        base, kind = n.rsplit("/", 1)
        us[(base, "weft " + kind)] = c["ms"] * 1e3
        if kind == "share":
            frac[base] = c.get("extra", {}).get("unique_fraction_of_ceiling", 0)
    for c in fi:
        if "error" in c or c.get("ms", 0) <= 0:
            continue
        base, _ = c["name"].rsplit("/", 1)
        us[(base, c["variant"])] = c["ms"] * 1e3
    heads = sorted({b.split("/")[1] for b, _ in us})
    series = ["weft decode", "weft share", "fi-tc", "fi-cascade"]
    colors = ["#999999", "#1f77b4", "#ff7f0e", "#d62728"]
    fig, axes = plt.subplots(len(heads), 1, figsize=(14, 3.2 * len(heads)), squeeze=False)
    for ax, h in zip(axes[:, 0], heads):
        bases = sorted({b for b, _ in us if b.split("/")[1] == h})
        x = range(len(bases))
        for k, (s, col) in enumerate(zip(series, colors)):
            ys = [us.get((b, s), 0) for b in bases]
            ax.bar([i + (k - 1.5) * 0.2 for i in x], ys, 0.2, label=s, color=col)
        for i, b in enumerate(bases):
            if b in frac:
                top = max(us.get((b, s), 0) for s in series)
                ax.text(i, top * 1.1, f"{frac[b]:.2f}", ha="center", fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel("us")
        ax.set_title(f"heads {h} (q x kv), bf16, d128, page 16; label: share_prefixes' unique-bytes fraction of the read ceiling",
                     fontsize=9)
        ax.set_xticks(list(x))
        ax.set_xticklabels([b.split("/", 3)[3] for b in bases], rotation=20, fontsize=7, ha="right")
    axes[0, 0].legend(fontsize=8, ncol=4)
    fig.suptitle(f"PAT trees on {w.get('gpu', '?')} at {w.get('commit', '?')}", fontsize=10)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
