#!/usr/bin/env python3
"""Merge the per-model JSON files of bench group "pod" (scripts/diag/pod-check.sh runs one model
per weft-bench process) into one file whose "pod/summary" case is recomputed over every kept batch
of every model (the per-process summaries are dropped), and optionally plot the speedup
distribution (matplotlib).

  bench/pod_merge.py out.json in1.json [in2.json ...] [--plot docs/pod_speedup.png] [--fi fi_pod.json]

--fi: FlashInfer's rows of the same batches (bench/fi_pod_bench.py, same device call): each weft
case gains extra.fi_{pod,serial_fa2,serial_fa3,prefill_fa2,prefill_fa3,decode}_ms and
extra.speedup_vs_flashinfer_pod (FlashInfer POD ms / weft POD ms); the summary gains their means.
"""
import json
import os
import sys


def main(argv):
    def opt(flag):
        nonlocal argv
        if flag not in argv:
            return None
        i = argv.index(flag)
        v = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
        return v
    plot, fi_path = opt("--plot"), opt("--fi")
    out, inputs = argv[0], argv[1:]
    merged, cases = None, []
    for path in inputs:
        d = json.load(open(path))
        if merged is None:
            merged = d
        cases += [c for c in d["cases"] if c["name"].startswith("pod/") and c["name"] != "pod/summary"]
    kept = [c for c in cases if not c.get("error")]
    fi = {}
    if fi_path:
        fdoc = json.load(open(fi_path))
        for r in fdoc["cases"]:
            if not r.get("error"):
                fi.setdefault(r["name"], {})[r["variant"]] = r["ms"]
        for c in kept:
            f = fi.get(c["name"], {})
            for v, ms in f.items():
                c["extra"][v.replace("-", "_") + "_ms"] = ms
            if "fi-pod" in f:
                c["extra"]["speedup_vs_flashinfer_pod"] = f["fi-pod"] / c["ms"]
    skipped = 0
    for path in inputs:
        for c in json.load(open(path))["cases"]:
            if c["name"] == "pod/summary":
                skipped += int(c["extra"].get("batches_skipped", 0))
    n = max(1, len(kept))
    e = lambda k: [c["extra"][k] for c in kept]
    sp = e("speedup_vs_serial")
    summary = {
        "name": "pod/summary", "group": "pod", "params": {"batches_kept": str(len(kept)),
                                                           "batches_skipped": str(skipped),
                                                           "merged_from": ",".join(os.path.basename(i) for i in inputs)},
        "ms": 0, "bytes": 0, "flops": 0, "ceiling": "",
        "extra": {
            "mean_speedup_vs_serial": sum(sp) / n,
            "min_speedup_vs_serial": min(sp) if sp else 0.0,
            "share_within_10pct_of_ideal": sum(1 for r in e("ideal_bound_ratio") if r <= 1.10) / n,
            "mean_ideal_speedup": sum(e("ideal_speedup")) / n,
            "share_fused": sum(e("pod_fused")) / n,
            "mean_fused_speedup_vs_serial": sum(e("fused_speedup_vs_serial")) / n,
            "mean_two_stream_speedup_vs_serial": sum(c["extra"]["serial_ms"] / c["extra"]["two_stream_ms"] for c in kept) / n,
            "mean_batched_speedup_vs_serial": sum(c["extra"]["serial_ms"] / c["extra"]["batched_ms"] for c in kept) / n,
            "batches_kept": float(len(kept)), "batches_skipped": float(skipped),
        },
    }
    ex = summary["extra"]
    mean = lambda xs: sum(xs) / len(xs) if xs else 0.0
    has = lambda k: [c for c in kept if k in c["extra"]]
    # Ablation rows (each variant's mean speedup over serial), where this run timed them: the
    # fused bindings and splits (6d33c1b / 76f083f), the SM partition and its k sweep (later runs).
    # The pinned k of the run: part_k<k>_ms (16, 32, 48, 64 by default; WEFT_BENCH_POD_K's otherwise).
    part_ks = sorted((k for k in (kept[0]["extra"] if kept else {}) if k.startswith("part_k") and k.endswith("_ms")),
                     key=lambda k: int(k[6:-3]))
    for k in ("fused_5050_ms", "fused_static_ms", "partition_ms", *part_ks):
        if kept and k in kept[0]["extra"]:
            ex["mean_" + k[:-3] + "_speedup_vs_serial"] = mean([c["extra"]["serial_ms"] / c["extra"][k] for c in kept])
    if kept and "partition_ms" in kept[0]["extra"]:
        ks = ("partition_ms", *part_ks)
        best = [c["extra"]["serial_ms"] / min(c["extra"][k] for k in ks) for c in kept]
        ex["mean_partition_best_of_sweep_speedup_vs_serial"] = mean(best)
        ex["min_partition_best_of_sweep_speedup_vs_serial"] = min(best)
        ex["share_partition"] = sum(c["extra"].get("pod_partition", 0) for c in kept) / n
        ex["min_partition_speedup_vs_serial"] = min(c["extra"]["partition_speedup_vs_serial"] for c in kept)
        ex["share_partition_within_10pct_of_ideal"] = sum(
            1 for c in kept if c["extra"]["partition_ms"] <= 1.10 * max(c["extra"]["prefill_ms"], c["extra"]["decode_ms"])) / n
    for k in ("fused_nosplit_ms", "fused_split_ms"):
        if kept and k in kept[0]["extra"]:
            ex["mean_" + k[:-3] + "_speedup_vs_serial"] = mean([c["extra"]["serial_ms"] / c["extra"][k] for c in kept])
    if kept and "fused_prefill_only_ms" in kept[0]["extra"]:
        ex["mean_fused_prefill_only_vs_prefill_alone"] = mean([c["extra"]["fused_prefill_only_ms"] / c["extra"]["prefill_ms"] for c in kept])
        ex["mean_fused_decode_only_vs_decode_alone"] = mean([c["extra"]["fused_decode_only_ms"] / c["extra"]["decode_ms"] for c in kept])
    # The product's floor: kAuto never slower than serial, within timing noise (share of batches
    # where POD auto is > 3% slower than serial).
    ex["share_auto_slower_than_serial_3pct"] = sum(1 for x in sp if x < 0.97) / n
    w = has("speedup_vs_flashinfer_pod")
    if w:
        ex["mean_speedup_vs_flashinfer_pod"] = mean([c["extra"]["speedup_vs_flashinfer_pod"] for c in w])
        ex["min_speedup_vs_flashinfer_pod"] = min(c["extra"]["speedup_vs_flashinfer_pod"] for c in w)
        ex["batches_with_flashinfer"] = float(len(w))
        ex["mean_fused_speedup_vs_flashinfer_pod"] = mean([c["extra"]["fi_pod_ms"] / c["extra"]["fused_ms"] for c in w])
        for v in ("fa2", "fa3"):
            k = f"fi_serial_{v}_ms"
            ww = [c for c in w if k in c["extra"]]
            if ww:
                # FlashInfer's own POD against its own serial (the anchor: 1.22x with FA2)
                ex[f"flashinfer_pod_speedup_vs_its_serial_{v}"] = mean([c["extra"][k] / c["extra"]["fi_pod_ms"] for c in ww])
                ex[f"mean_speedup_vs_flashinfer_serial_{v}"] = mean([c["extra"][k] / c["ms"] for c in ww])
    merged["cases"] = cases + [summary]
    merged["command"] = "bench/pod_merge.py " + " ".join(os.path.basename(i) for i in inputs) + " (per model: " + merged.get("command", "") + ")"
    json.dump(merged, open(out, "w"), indent=1)
    for k, v in summary["extra"].items():
        print(f"{k}: {v:.4f}")
    if plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(1, 2, figsize=(11, 4))
        other = "partition_ms" if "partition_ms" in kept[0]["extra"] else "fused_5050_ms"
        other_label = "SM partition (planner's k)" if other == "partition_ms" else "fused kernel, 50:50"
        s_other = [c["extra"]["serial_ms"] / c["extra"][other] for c in kept]
        series = [sp, e("fused_speedup_vs_serial"), e("ideal_speedup")]
        labels = ["POD wrapper (auto)", "fused kernel, proportional", "ideal overlap bound"]
        if other == "partition_ms":
            series.insert(1, s_other)
            labels.insert(1, other_label)
        if w:
            series.append([c["extra"]["serial_ms"] / c["extra"]["fi_pod_ms"] for c in w])
            labels.append("FlashInfer POD wrapper")
        ax[0].hist(series, bins=20, label=labels)
        ax[0].axvline(1.0, color="k", lw=0.8)
        ax[0].set_xlabel("speedup over weft serial (fastest prefill, then decode)")
        ax[0].set_ylabel("batches")
        ax[0].legend(fontsize=8)
        share = e("prefill_share")
        ax[1].scatter(share, s_other, s=10, label=other_label)
        ax[1].scatter(share, sp, s=10, label="POD wrapper (auto)")
        ax[1].scatter(share, e("ideal_speedup"), s=6, marker="x", label="ideal")
        ax[1].axhline(1.0, color="k", lw=0.8)
        ax[1].set_xlabel("prefill share of serial time")
        ax[1].set_ylabel("speedup over serial")
        ax[1].legend(fontsize=8)
        models = sorted({c["params"]["model"] for c in kept})
        fig.suptitle(f"bench pod, {merged.get('gpu', '')}, commit {merged.get('commit', '')}: {len(kept)} hybrid "
                     f"batches ({', '.join(models)} heads, d128 bf16)", fontsize=9)
        fig.tight_layout()
        fig.savefig(plot, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1:])
