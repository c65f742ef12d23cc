#!/usr/bin/env python3
"""FlashInfer's decode wrapper on weft-serve-sim's serving traces (the same steps, pages and shape).

  fi_serve.py STEPS.json HELDOUT.json --out fi.json [--reps 7] [--kit .baselines]

STEPS.json: `weft-serve-sim --dump-steps STEPS.json --seed S --steps N` (the traces of the held-out
seed: every request's page ids, per step the running requests and their KV lengths). HELDOUT.json:
the weft run on the same seed (`weft-serve-sim --router ... --seed S`), whose router wall times the
ratios use. Shape as weft-serve-sim: 32 query heads, 8 KV heads, head_dim 128, bf16, pages of 16,
NHD, K and V in two pools of the trace's page universe (holes and scattered ids included).

Per step and variant the synchronized wall time of what a serving step does with FlashInfer:
plan() from pinned host index arrays (FlashInfer uploads them) + run(), host clock around a
stream sync, as weft-serve-sim's wall time (block-table upload + plan + run), the L2 flushed
before each; the GPU time of run() with CUDA events and the host time of plan(). Variants: fi-cc (use_tensor_cores=False) and fi-tc (use_tensor_cores=True,
the fa2 kernel), eager (plans change every step); repeats interleaved over the variants, median
per step; the first step of each family warms both up for ~50 ms. FlashInfer's best decode path
per family is the variant with the lower mean wall time. One check per family: the first step's
shortest row of both variants against a float64 reference.

Ratios: FlashInfer's best mean wall time / weft's router mean wall time (> 1: weft faster). The
issue-22 target's set, the long-context ragged traces of batch 1-8 (bucketed B1 and B4, bimodal,
uniform, Zipf), gives `vs_flashinfer_geomean` and `vs_flashinfer_min`; every family is listed.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

HQ, HKV, D, PAGE = 32, 8, 128, 16
TARGET_SET = ["bucketed_b1", "bucketed", "bimodal", "uniform", "zipf"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("steps")
    ap.add_argument("heldout")
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--kit", default=".baselines", help="the FlashInfer kit folder (fi_bench.py, aot/)")
    ap.add_argument("--families", default="all")
    args = ap.parse_args()

    # The kit's helpers: FlashInfer's JIT settings and its pre-built modules (before the import).
    sys.path.insert(0, os.path.abspath(args.kit))
    import fi_bench  # noqa: E402
    fi_bench.set_env_defaults()
    aot = fi_bench.install_aot(os.path.join(args.kit, "aot"))
    import torch  # noqa: E402
    import flashinfer  # noqa: E402

    trace = json.load(open(args.steps))
    held = json.load(open(args.heldout))
    weft_router = {f["name"]: f.get("router_wall_us_mean") for f in held["families"]}
    weft_best = {f["name"]: (f.get("best_fixed"), f.get("best_fixed_wall_us_mean")) for f in held["families"]}
    dev = torch.device("cuda")
    ws = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    variants = {"fi-cc": False, "fi-tc": True}
    wrappers = {v: flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=tc)
                for v, tc in variants.items()}
    flush = torch.empty(2 * max(torch.cuda.get_device_properties(0).L2_cache_size, 1 << 20), dtype=torch.uint8,
                        device=dev)
    g = torch.Generator(device=dev).manual_seed(5)
    q_all = (torch.rand(256, HQ, D, generator=g, device=dev) * 2 - 1).to(torch.bfloat16)
    start, e0, e1 = time.time(), torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fams = list(trace["families"]) if args.families == "all" else args.families.split(",")
    out = {"gpu": torch.cuda.get_device_name(), "flashinfer": flashinfer.__version__, "torch": torch.__version__,
           "commit": os.environ.get("WEFT_COMMIT", ""), "command": " ".join(sys.argv), "seed": trace["seed"],
           "reps": args.reps, "aot_modules": aot, "families": []}

    for fam in fams:
        t = trace["families"][fam]
        shape = (t["num_pages"], PAGE, HKV, D)
        k = (torch.rand(shape, generator=g, device=dev) * 2 - 1).to(torch.bfloat16)
        v = (torch.rand(shape, generator=g, device=dev) * 2 - 1).to(torch.bfloat16)
        reqs = t["requests"]
        walls = {x: [] for x in variants}
        gpus = {x: [] for x in variants}
        plans = {x: [] for x in variants}
        check = {}

        def tables(st):
            indptr, indices, last = [0], [], []
            for r, n in zip(st["req"], st["kv_len"]):
                p = (n + PAGE - 1) // PAGE
                indices += reqs[r][:p]
                indptr.append(indptr[-1] + p)
                last.append(n - (p - 1) * PAGE)
            pin = lambda a: torch.tensor(a, dtype=torch.int32).pin_memory()
            return pin(indptr), pin(indices), pin(last)

        def step(x, tb, q):
            flush.zero_()  # 2x the L2, outside the timing (as weft-serve-sim)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            wrappers[x].plan(tb[0], tb[1], tb[2], HQ, HKV, D, PAGE, pos_encoding_mode="NONE",
                             q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
            tp = time.perf_counter()
            e0.record()
            o = wrappers[x].run(q, (k, v))
            e1.record()
            torch.cuda.synchronize()
            return (time.perf_counter() - t0) * 1e6, e0.elapsed_time(e1) * 1e3, o, (tp - t0) * 1e6

        for si, st in enumerate(t["steps"]):
            if not st["req"]:
                continue
            tb = tables(st)
            q = q_all[:len(st["req"])]
            if si == 0:
                w0 = time.perf_counter()
                while time.perf_counter() - w0 < 0.05:
                    for x in variants:
                        step(x, tb, q)
                # the shortest row against float64
                b = min(range(len(st["kv_len"])), key=lambda i: st["kv_len"][i])
                n = st["kv_len"][b]
                ids = torch.tensor(reqs[st["req"][b]][:(n + PAGE - 1) // PAGE], device=dev, dtype=torch.long)
                kk = k[ids].reshape(-1, HKV, D)[:n].double().repeat_interleave(HQ // HKV, 1)
                vv = v[ids].reshape(-1, HKV, D)[:n].double().repeat_interleave(HQ // HKV, 1)
                s = torch.einsum("hd,khd->hk", q[b].double(), kk) / math.sqrt(D)
                ref = torch.einsum("hk,khd->hd", torch.softmax(s, -1), vv)
                for x in variants:
                    o = step(x, tb, q)[2]
                    check[x] = float((o[b].double() - ref).abs().max())
            samples = {x: [] for x in variants}
            for r in range(args.reps):
                order = list(variants)
                if (si + r) % 2:
                    order.reverse()
                for x in order:
                    w_, g_, _, p_ = step(x, tb, q)
                    samples[x].append((w_, g_, p_))
            for x in variants:
                walls[x].append(statistics.median(s[0] for s in samples[x]))
                gpus[x].append(statistics.median(s[1] for s in samples[x]))
                plans[x].append(statistics.median(s[2] for s in samples[x]))
        means = {x: statistics.mean(walls[x]) for x in variants}
        best = min(means, key=means.get)
        rec = {"name": fam, "steps": len(walls[best]),
               "variants": {x: {"wall_us_mean": means[x], "gpu_us_mean": statistics.mean(gpus[x]),
                                "plan_us_mean": statistics.mean(plans[x]),
                                "wall_us_p50": statistics.median(walls[x]), "max_abs_err_vs_f64": check.get(x)}
                            for x in variants},
               "fi_best": best, "fi_best_wall_us_mean": means[best],
               "weft_router_wall_us_mean": weft_router.get(fam),
               "weft_best_fixed": weft_best.get(fam, (None, None))[0],
               "weft_best_fixed_wall_us_mean": weft_best.get(fam, (None, None))[1],
               "check_ok": all(c is not None and c < 2e-2 for c in check.values())}
        if weft_router.get(fam):
            rec["weft_router_vs_fi_best"] = means[best] / weft_router[fam]
        out["families"].append(rec)
        gm = {x: statistics.mean(gpus[x]) for x in variants}
        pm = {x: statistics.mean(plans[x]) for x in variants}
        print(f"[{time.time() - start:5.1f}s] {fam:12s} wall (plan, gpu) fi-cc {means['fi-cc']:7.1f} ({pm['fi-cc']:6.1f}, "
              f"{gm['fi-cc']:6.1f})  fi-tc {means['fi-tc']:7.1f} ({pm['fi-tc']:6.1f}, {gm['fi-tc']:6.1f})  "
              f"weft router {weft_router.get(fam) or 0:8.1f} us  ratio {rec.get('weft_router_vs_fi_best', 0):.3f}  "
              f"check {check}", flush=True)
        del k, v
        torch.cuda.empty_cache()

    rs = [f["weft_router_vs_fi_best"] for f in out["families"] if f["name"] in TARGET_SET and "weft_router_vs_fi_best" in f]
    extra = {"target_set": TARGET_SET, "correct": all(f["check_ok"] for f in out["families"])}
    if rs:
        extra["vs_flashinfer_geomean"] = math.exp(sum(math.log(r) for r in rs) / len(rs))
        extra["vs_flashinfer_min"] = min(rs)
    out["cases"] = [{"name": "serve/flashinfer", "group": "serve", "extra": extra}]
    json.dump(out, open(args.out, "w"), indent=1)
    print(json.dumps(out["cases"][0]))


if __name__ == "__main__":
    main()
