#!/usr/bin/env python3
"""PNG plots of a weft-serve-sim JSON (needs matplotlib; the harness itself does not).

  bench/serve/plot.py serve_heldout.json OUT_PREFIX

Writes OUT_PREFIX_steps.png (per family: wall time per step of every route option and of the
router) and OUT_PREFIX_summary.png (per family: mean wall time of each option relative to the
best fixed option, the router marked).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    src, prefix = sys.argv[1], sys.argv[2]
    d = json.load(open(src))
    fams = [f for f in d["families"] if "per_step" in f]
    cols = 4
    rows = (len(fams) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax, f in zip(axes.flat, fams):
        ps = f["per_step"]
        for k in sorted(ps):
            if k == "no_split" and f["name"] != "b256" and f["name"] != "shared":
                continue  # 3-10x slower on long rows: it would flatten the plot
            style = dict(lw=2.2, color="black") if k == "router" else dict(lw=1.0)
            ax.plot(ps[k]["wall_us"], label=k.replace("work_queue/", "wq "), **style)
        ax.set_title(f"{f['name']} (B{f['max_active']})", fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.set_ylabel("wall us", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(fams):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=6)
    fig.suptitle(f"{d['gpu']} {d['commit']} seed {d['seed']}: wall time per decode step", fontsize=10)
    fig.tight_layout()
    fig.savefig(prefix + "_steps.png", dpi=80)

    fig, ax = plt.subplots(figsize=(10, 4))
    names = [f["name"] for f in fams]
    opts = sorted({k for f in fams for k in f["routes"]})
    width = 0.8 / len(opts)
    for i, k in enumerate(opts):
        vals = []
        for f in fams:
            best = min(v["wall_us_mean"] for kk, v in f["routes"].items() if kk != "router")
            vals.append(f["routes"][k]["wall_us_mean"] / best if k in f["routes"] else 0)
        kw = dict(color="black") if k == "router" else {}
        ax.bar([x + i * width for x in range(len(fams))], [min(v, 2.0) for v in vals], width,
               label=k.replace("work_queue/", "wq "), **kw)
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(fams))])
    ax.set_xticklabels(names, fontsize=8)
    ax.set_ylabel("mean wall / best fixed (capped at 2)")
    ax.set_ylim(0.9, 2.0)
    ax.legend(fontsize=7, ncol=4)
    ax.set_title(f"{d['gpu']} {d['commit']} seed {d['seed']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(prefix + "_summary.png", dpi=110)


if __name__ == "__main__":
    main()
