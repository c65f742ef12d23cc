#!/usr/bin/env python3
"""Markdown performance tables for docs/performance.md, generated from committed result JSON
(never typed by hand): weft-bench single-GPU results, the PyTorch baselines of the same device
call, and a multi-GPU comm result.

  python3 bench/perf_tables.py --single R.json --torch T.json --comm C4.json [--comm C2.json] > tables.md
"""
import argparse
import json


def load(path):
    with open(path) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--single", required=True)
    ap.add_argument("--torch", required=True)
    ap.add_argument("--comm", required=True, action="append", help="multi-GPU comm results (repeatable)")
    a = ap.parse_args()
    w, t = load(a.single), load(a.torch)
    tc = {c["name"].replace("torch/", ""): c for c in t["cases"] if c.get("ms")}
    ce = w["ceilings"]
    print(f"Single-GPU rows: `{w['command']}` on {w['gpu']}, commit {w['commit']} "
          f"(`{a.single}`); PyTorch rows from `bench/torch_baselines.py` in the same device call "
          f"(`{a.torch}`).\n")
    print(f"Ceilings measured in that run: device-to-device copy {ce['copy_gbps']:.0f} GB/s, "
          f"streaming read {ce['read_gbps']:.0f} GB/s, cuBLAS bf16 GEMM {ce['gemm_tflops']:.0f} TFLOP/s.\n")

    def rows(prefix):
        return [c for c in w["cases"] if c["name"].startswith(prefix) and c.get("ms")]

    print("### Append (bf16, 8 KV heads, head_dim 128; bytes = K+V read + written)\n")
    print("| case | ms | GB/s | fraction of copy |\n|---|---|---|---|")
    for c in rows("append/"):
        print(f"| {c['name']} | {c['ms']:.4f} | {c['gb_per_s']:.0f} | {c['fraction_of_ceiling']:.2f} |")

    print("\n### Decode (bf16, page 16, head_dim 128; GB/s of KV read; torch = SDPA cuDNN backend "
          "on contiguous KV)\n")
    print("Rows are the median over fresh pool allocations (extra `allocations`); the range column "
          "is the fraction at the slowest and the fastest allocation. `seqpages` rows keep each "
          "request's pages in pool order, the others use a random permutation of the pool; `hnd` rows "
          "use the HND page layout, the others NHD.\n")
    print("| case | weft ms | weft GB/s | fraction of read | range over allocations | torch ms | torch GB/s | "
          "torch/weft time |")
    print("|---|---|---|---|---|---|---|---|")
    for c in rows("decode/"):
        n = c["name"]
        if not n.startswith(("decode/llama", "decode/bimodal64", "decode/seqpages/", "decode/hnd/")):
            continue
        tt = tc.get(n)
        ts = (f"{tt['ms']:.4f} | {tt['gb_per_s']:.0f} | {tt['ms'] / c['ms']:.2f}" if tt else "– | – | –")
        e = c.get("extra", {})
        lo, hi = e.get("one_run_ms_max"), e.get("one_run_ms_min")
        frac = c["fraction_of_ceiling"]
        rng = f"{frac * c['ms'] / lo:.3f}–{frac * c['ms'] / hi:.3f}" if lo and hi else "–"
        print(f"| {n} | {c['ms']:.4f} | {c['gb_per_s']:.0f} | {frac:.3f} | {rng} | {ts} |")

    steady = rows("decode/steady/")
    if steady:
        print("\n### Decode, steady state (8 runs back to back in one graph on rotated KV copies)\n")
        print("The rows above time one run after an L2 flush, so each carries the ~4 µs launch and "
              "completion of a single graph (`decode/floor/launch`). These rows time 8 runs in one "
              "graph after one flush, run i on copy i mod `copies` of the pools (copies sized so that "
              "each run reads its KV from DRAM), as a serving step replays layer after layer; ms is "
              "per run. The one-run column is the same process's one-run time of the first copy. The "
              "torch rows run 8 cuDNN calls the same way; `floor` is a plain read of the same bytes.\n")
        print("| case | copies | weft ms/run | fraction of read | one-run fraction | torch ms/call | "
              "torch fraction | floor fraction |")
        print("|---|---|---|---|---|---|---|---|")
        floors = {c["name"].replace("decode/floor/steady/", "decode/steady/"): c for c in rows("decode/floor/steady/")}
        for c in steady:
            n, e = c["name"], c.get("extra", {})
            tt, fl = tc.get(n), floors.get(n)
            one = e.get("one_run_ms")
            one_frac = f"{c['fraction_of_ceiling'] * c['ms'] / one:.3f}" if one else "–"
            ts = f"{tt['ms']:.4f} | {tt['gb_per_s'] / ce['read_gbps']:.3f}" if tt else "– | –"
            fs = f"{fl['fraction_of_ceiling']:.3f}" if fl else "–"
            print(f"| {n} | {e.get('copies', 0):.0f} | {c['ms']:.4f} | {c['fraction_of_ceiling']:.3f} | "
                  f"{one_frac} | {ts} | {fs} |")

    forced = rows("decode/path/")
    if forced:
        print("\n### Decode with the path forced (fraction of the read ceiling)\n")
        print("| case | fraction |\n|---|---|")
        for c in forced:
            print(f"| {c['name']} | {c['fraction_of_ceiling']:.3f} |")

    print("\n### Prefill (bf16, head_dim 128, 32 q / 8 kv heads; causal FLOPs counted once; "
          "torch = SDPA FLASH backend)\n")
    print("| case | ms | TFLOP/s | fraction of GEMM | torch TFLOP/s |\n|---|---|---|---|---|")
    for c in rows("prefill/"):
        n = c["name"]
        tt = None
        if n.startswith(("prefill/causal/ragged/", "prefill/causal/paged/")):
            tt = tc.get("prefill/causal/" + n.split("/")[-1])
        tts = f"{tt['tflops']:.0f}" if tt else "–"
        print(f"| {n} | {c['ms']:.4f} | {c['tflops']:.0f} | {c['fraction_of_ceiling']:.3f} | {tts} |")

    print("\n### RMSNorm (bf16, hidden 8192; bytes = reads + writes)\n")
    print("| case | ms | GB/s | fraction of copy |\n|---|---|---|---|")
    for c in rows("norm/"):
        print(f"| {c['name']} | {c['ms']:.4f} | {c['gb_per_s']:.0f} | {c['fraction_of_ceiling']:.3f} |")

    for comm_path in a.comm:
        c4 = load(comm_path)
        print(f"\n### Fused AllReduce + residual + RMSNorm (hidden 8192 bf16; {c4['gpu']}; `{comm_path}`)\n")
        # Names: comm/w<W>/nccl_baseline/t<T> and comm/w<W>/<variant...>/ctas<C>/t<T>.
        base, runs = {}, {}
        for c in c4["cases"]:
            if not c.get("ms"):
                continue
            parts = c["name"].split("/")
            wsz, tok = int(parts[1][1:]), int(parts[-1][1:])
            if parts[2] == "nccl_baseline":
                base[(wsz, tok)] = c
            elif parts[-2].startswith("ctas"):
                runs[("/".join(parts[2:-2]), wsz, tok, int(parts[-2][4:]))] = c
        for kind in sorted({k[0] for k in runs}):
            ctas = sorted({k[3] for k in runs if k[0] == kind})
            print(f"\n`{kind}` (time per call in µs; speedup = NCCL baseline / weft at 8 CTAs)\n")
            print("| world | tokens | NCCL all-reduce + fused_add_rmsnorm | "
                  + " | ".join(f"{n} CTAs" for n in ctas) + " | speedup at 8 CTAs |")
            print("|---|---|---|" + "---|" * len(ctas) + "---|")
            for wsz in (8, 4, 2):
                for tok in (128, 512, 1024, 2048, 4096, 8192):
                    b = base.get((wsz, tok))
                    if not b:
                        continue
                    v = [runs.get((kind, wsz, tok, n)) for n in ctas]
                    vs = " | ".join(f"{x['ms'] * 1000:.1f}" if x else "–" for x in v)
                    r8 = runs.get((kind, wsz, tok, 8))
                    sp = f"{b['ms'] / r8['ms']:.2f}x" if r8 else "–"
                    print(f"| {wsz} | {tok} | {b['ms'] * 1000:.1f} | {vs} | {sp} |")

if __name__ == "__main__":
    main()
