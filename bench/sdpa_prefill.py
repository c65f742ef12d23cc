#!/usr/bin/env python3
"""PyTorch SDPA prefill baselines (cuDNN and FLASH backends) on weft-bench's prefill shapes.

The comparison points of the Hopper prefill (issue 20): torch.nn.functional.scaled_dot_product_attention
with one backend forced (torch.nn.attention.sdpa_kernel(SDPBackend.CUDNN_ATTENTION) or FLASH_ATTENTION),
bf16, 32 query / 8 KV heads, one request, the shapes of weft-bench's prefill/sm90 rows:
  <backend>/causal/L<n>             causal, q = kv = n, head_dim 128 (n = 1K .. 16K)
  <backend>/noncausal/L8192         no mask
  <backend>/chunked/c<c>/h<h>       c new tokens after h keys, causal aligned bottom-right
                                    (torch.nn.attention.bias.causal_lower_right)
  <backend>/d256|d64/causal/L<n>    other head dims
Case names are "sdpa/" + those. Q/K/V are [1, L, H, D] tensors seen as [1, H, L, D] (weft's token-
major layout: the same bytes per head as weft's ragged rows); GQA through enable_gqa=True, else K/V
expanded (params "gqa_mode" says which, as bench/torch_baselines.py). FLOPs are weft-bench's: 4 D Hq per
unmasked (query, key) pair, causal counted once.
Timing: bench/torch_baselines.py's Timer (CUDA events, warm-up, L2 flushed by reading a 2x-L2 buffer
outside the bracket before every run, median). The JSON has weft-bench's schema (gpu, commit from
WEFT_COMMIT, command, cases with ms / flops / tflops / params / error).
Never downloads anything; exits 2 without torch or a GPU.
"""
import argparse
import datetime
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_baselines as tb  # noqa: E402  (Timer, run_sdpa, case, short_error)

HQ, HKV = 32, 8
CAUSAL_L = [1024, 2048, 4096, 8192, 16384]
CHUNKS, HISTS = [512, 1024, 2048], [4096, 8192, 16384]
OTHER_D = {256: [4096, 8192, 16384], 64: [4096, 8192, 16384]}


def shapes():
    """(shape name, head_dim, q_len, kv_len, mask) with mask in causal | none | lower_right."""
    out = [(f"causal/L{L}", 128, L, L, "causal") for L in CAUSAL_L]
    out.append(("noncausal/L8192", 128, 8192, 8192, "none"))
    out += [(f"chunked/c{c}/h{h}", 128, c, h + c, "lower_right") for c in CHUNKS for h in HISTS]
    for d, ls in OTHER_D.items():
        out += [(f"d{d}/causal/L{L}", d, L, L, "causal") for L in ls]
    return out


def pairs_of(q, kv, mask):
    return q * kv if mask == "none" else q * (kv - q) + q * (q + 1) / 2


def run_case(torch, F, backend_name, backend, timer, shape, d, ql, kl, mask):
    name = f"sdpa/{backend_name}/{shape}"
    params = {"q_len": ql, "kv_len": kl, "num_qo_heads": HQ, "num_kv_heads": HKV, "head_dim": d,
              "dtype": "bf16", "mask": mask, "backend": backend_name, "layout": "[1, L, H, D] as [1, H, L, D]"}
    flops = 4.0 * pairs_of(ql, kl, mask) * d * HQ
    nbytes = 2.0 * (2 * ql * HQ * d + 2 * kl * HKV * d)
    q = k = v = None
    try:
        q = torch.empty(1, ql, HQ, d, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1).transpose(1, 2)
        k = torch.empty(1, kl, HKV, d, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1).transpose(1, 2)
        v = torch.empty(1, kl, HKV, d, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1).transpose(1, 2)
        if mask == "lower_right":
            ms, how, note = run_lower_right(torch, F, backend, timer, q, k, v, ql, kl)
        else:
            ms, how, note = tb.run_sdpa(torch, F, backend, timer, q, k, v, mask == "causal", HQ // HKV)
        params["gqa_mode"] = how
        c = tb.case(name, params, ms=ms, nbytes=nbytes, flops=flops, ceiling="gemm")
        if note:
            c["note"] = note
    except Exception as ex:  # noqa: BLE001 - record and go on
        c = tb.case(name, params, error=tb.short_error(ex), ceiling="gemm")
    finally:
        q = k = v = None
        torch.cuda.empty_cache()
    return c


def run_lower_right(torch, F, backend, timer, q, k, v, ql, kl):
    """Bottom-right causal (chunked prefill) through causal_lower_right; GQA as run_sdpa does."""
    from torch.nn.attention import sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right
    bias = causal_lower_right(ql, kl)
    errors = []
    for how in ("gqa", "expanded"):
        try:
            kk, vv = (k, v) if how == "gqa" else (tb.expand_kv(k, HQ // HKV), tb.expand_kv(v, HQ // HKV))
            kw = {"enable_gqa": True} if how == "gqa" else {}

            def fn():
                F.scaled_dot_product_attention(q, kk, vv, attn_mask=bias, **kw)

            with sdpa_kernel(backend):
                fn()
                torch.cuda.synchronize()
                ms = timer.time_ms(fn)
            return ms, how, ("refused before: " + " | ".join(errors)) if errors else None
        except (RuntimeError, TypeError, ValueError) as ex:
            errors.append(f"[{how}] " + tb.short_error(ex))
    raise tb.SdpaRefused(" | ".join(errors))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="sdpa.json")
    p.add_argument("--backend", action="append", default=[], choices=["cudnn", "flash"],
                   help="backends to time (default both)")
    p.add_argument("--filter", action="append", default=[], help="substring of case names (any)")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--budget", type=float, default=0, help="seconds; start no new case after this")
    p.add_argument("--commit", default=os.environ.get("WEFT_COMMIT", ""))
    args = p.parse_args()
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend
    except ImportError as ex:
        print(f"sdpa_prefill: PyTorch not available ({ex})", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("sdpa_prefill: no CUDA GPU visible to PyTorch", file=sys.stderr)
        return 2
    backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
    timer = tb.Timer(torch, args.warmup, args.reps)
    props = torch.cuda.get_device_properties(0)
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}) "
          f"on {props.name}, reps {args.reps}", flush=True)
    results, skipped = [], []
    t0 = time.perf_counter()
    for bname in args.backend or ["cudnn", "flash"]:
        for shape, d, ql, kl, mask in shapes():
            if not tb.wants(f"sdpa/{bname}/{shape}", args.filter):
                continue
            if args.budget and time.perf_counter() - t0 > args.budget:
                skipped.append(f"sdpa/{bname}/{shape}")
                continue
            c = run_case(torch, F, bname, backends[bname], timer, shape, d, ql, kl, mask)
            results.append(c)
            tb.print_row(c)
    doc = {"gpu": props.name, "sm_count": props.multi_processor_count, "runtime": torch.version.cuda,
           "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "commit": args.commit,
           "command": " ".join([sys.executable] + sys.argv),
           "timestamp": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "groups": ["sdpa"], "ceilings": {}, "failures": [], "skipped_for_budget": skipped,
           "cases": results}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=2)
    print(f"sdpa_prefill: {len(results)} cases ({sum('error' in c for c in results)} errors) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
