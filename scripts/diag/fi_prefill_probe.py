#!/usr/bin/env python3
"""Diagnostic (device): FlashInfer 0.7.2's sm90 prefill (backend "auto" = fa3 on sm90) on single
ragged requests, as a kernel driver for ncu or timed the way the kit's fi_bench.py times its rows
(its Bench class: CUDA graph of run(), L2 flushed before every run, median), including the
non-causal shapes the kit has no row for.

  fi_prefill_probe.py [--kit .baselines] [--ncu N] [--reps R] [--out fi.json] SHAPE...
  SHAPE: causal:L or none:L (one request, q = kv = L, 32 qo / 8 kv heads, d128, bf16, NHD)
  --ncu N: per shape plan once and call run() N times eagerly (no graph, no flush, no timing):
           the launches to profile; otherwise rows "prefill/{causal,noncausal}/ragged/L<L>",
           variant fi-auto, weft-bench's FLOP accounting (causal pairs bottom-right aligned).
Needs the kit's wheels installed on PYTHONPATH (fi_bench.py's README recipe).
"""
import argparse
import importlib.util
import json
import os
import sys
import time


def load_kit(kit):
    spec = importlib.util.spec_from_file_location("fi_bench", os.path.join(kit, "fi_bench.py"))
    fb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fb)
    return fb


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kit", default=".baselines")
    ap.add_argument("--ncu", type=int, default=0)
    ap.add_argument("--reps", type=int, default=0)
    ap.add_argument("--out", default="")
    ap.add_argument("shapes", nargs="+")
    a = ap.parse_args()
    fb = load_kit(a.kit)
    fb.set_env_defaults()
    fb.install_aot(os.path.join(a.kit, "aot"))
    import torch
    import flashinfer
    os.environ.setdefault("FLASHINFER_CUDA_ARCH_LIST", "%d.%d" % torch.cuda.get_device_capability(0))
    b = fb.Bench(argparse.Namespace(reps=a.reps, quick=False))
    hq, hkv = fb.PREFILL_HEADS
    D = fb.D
    rows = []
    for shape in a.shapes:
        mask, L = shape.split(":")
        L = int(L)
        causal = mask == "causal"
        q = torch.empty(L, hq, D, dtype=torch.bfloat16, device=b.dev).uniform_(-1, 1)
        k = torch.empty(L, hkv, D, dtype=torch.bfloat16, device=b.dev).uniform_(-1, 1)
        v = torch.empty_like(k).uniform_(-1, 1)
        out = torch.empty_like(q)
        ind = torch.tensor([0, L], dtype=torch.int32)
        w = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(b.ws, "NHD", backend="auto")
        w.plan(ind.to(b.dev), ind.to(b.dev), hq, hkv, D, causal=causal,
               q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
        torch.cuda.synchronize()
        if a.ncu:
            for _ in range(a.ncu):
                w.run(q, k, v, out=out)
            torch.cuda.synchronize()
            print(f"{shape}: {a.ncu} launches, backend {getattr(w, '_backend', '?')}", flush=True)
            continue
        pairs = L * (L + 1) / 2 if causal else float(L) * L
        flops = 4.0 * pairs * D * hq
        nbytes = 2.0 * L * hq * D * 2 + 2.0 * L * hkv * D * 2
        launch, timing = b.launcher(lambda: w.run(q, k, v, out=out))
        b.warm_up_once(launch)
        s = b.time_samples(launch)
        b.release()
        ms = sorted(s)[len(s) // 2]
        name = f"prefill/{'causal' if causal else 'noncausal'}/ragged/L{L}"
        rows.append(b.row(name, "fi-auto", ms, nbytes, flops,
                          {"backend": str(getattr(w, "_backend", "?")), "timing": timing}, {"mask": mask, "L": str(L)},
                          {"min_ms": min(s), "max_ms": max(s)}))
        print(f"{name:<36} fi-auto {ms:9.4f} ms {flops / ms / 1e9:8.1f} TFLOP/s", flush=True)
        del q, k, v, out
        torch.cuda.empty_cache()
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"impl": "flashinfer", "flashinfer_version": flashinfer.__version__, "gpu": b.props.name,
                       "command": " ".join(sys.argv), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "cases": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
