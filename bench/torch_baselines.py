#!/usr/bin/env python3
"""PyTorch attention baselines for weft-bench, with the same timing method and JSON case schema.

Timing: torch.cuda.Event pairs, warm-up runs, an L2 flush (reading a 2x-L2 tensor) before every
run outside the event bracket, median of the timed runs.

  decode : F.scaled_dot_product_attention with the cuDNN backend forced, bf16, q [B, Hq, 1, 128],
           K/V contiguous [B, Hkv, L, 128]; GQA through enable_gqa=True, else K/V expanded to Hq
           heads (params "kv_expanded": "1"); params "gqa_mode" says which: gqa | folded | expanded | plain
           (folded: the query heads of one KV head as the query-length axis, no K/V copy). GB/s counts the logical KV (Hkv heads) + q + o.
           Names: torch/decode/<model>/b<B>/kv<L>. Steady-state rows torch/decode/steady/...
           (target shapes): 8 calls back to back in one CUDA graph on rotated K/V copies, per call.
  prefill: FLASH backend, causal, bf16, head_dim 128, 32 q / 8 kv heads, one sequence of L tokens.
           TFLOP/s counts causal FLOPs once: 4 * L * L * D * H / 2. Names: torch/prefill/causal/L<L>.

Never downloads anything. Exits 2 without torch or a CUDA GPU.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys

GiB = 1 << 30
HEAD_DIM = 128
# name -> (q heads, kv heads)
MODELS = {"llama3-8b": (32, 8), "llama2-7b": (32, 32)}
DECODE_BATCHES = [1, 8, 32, 128, 256]
DECODE_KV = [1024, 4096, 16384, 32768, 131072]
QUICK_BATCHES = [1, 32, 128]
QUICK_KV = [1024, 4096, 32768]
PREFILL_L = [1024, 2048, 4096, 8192, 16384]
QUICK_PREFILL_L = [1024, 4096, 8192]
PREFILL_HEADS = (32, 8)
KV_CAP_BYTES = 60 * GiB  # skip decode shapes whose allocated K+V exceed this
# Steady-state rows (torch/decode/steady/...), timed as weft-bench's decode/steady rows: STEADY_RUNS
# calls back to back (one CUDA graph) on rotated K/V copies after one flush, ms = time / calls.
STEADY_RUNS = 8
STEADY_CAP_BYTES = 40 * GiB  # all copies of one steady row


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="torch.json", help="JSON output path")
    p.add_argument("--quick", action="store_true", help="fewer shapes and reps")
    p.add_argument("--reps", type=int, default=0, help="timed runs per case (default 20, quick 10)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--only", choices=["decode", "prefill"], help="run one family only")
    p.add_argument("--filter", action="append", default=[], help="substring of case names (any)")
    p.add_argument("--decode-backend", default="cudnn", choices=["cudnn", "flash", "efficient"],
                   help="SDPA backend forced for decode (default cudnn)")
    p.add_argument("--commit", default=os.environ.get("WEFT_COMMIT", ""))
    return p.parse_args()


def git_commit():
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except Exception:  # noqa: BLE001 - best effort only
        return ""


class Timer:
    def __init__(self, torch, warmup, reps):
        self.torch = torch
        self.warmup = warmup
        self.reps = reps
        props = torch.cuda.get_device_properties(0)
        l2 = int(getattr(props, "L2_cache_size", 0) or 0) or (50 << 20)
        self.l2_bytes = l2
        self.flush = torch.full((2 * l2,), 0x5A, dtype=torch.uint8, device="cuda")
        self.n = 0

    def flush_l2(self):
        # Reads every byte of a 2x-L2 buffer (same method as weft-bench): a write-based flush
        # would leave dirty lines whose write-back is charged to the next timed run.
        self.sink = self.flush.view(self.torch.int32).sum()

    def time_ms(self, fn):
        torch = self.torch
        for _ in range(self.warmup):
            self.flush_l2()
            fn()
        torch.cuda.synchronize()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(self.reps)]
        for s, e in ev:
            self.flush_l2()  # outside the bracket
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in ev)


def case(name, params, ms=None, nbytes=0.0, flops=0.0, ceiling="", error=None, extra=None):
    c = {"name": name, "group": "torch", "params": {k: str(v) for k, v in params.items()},
         "ceiling": ceiling, "fraction_of_ceiling": None, "extra": extra or {}}
    if error is not None:
        c["error"] = error
    else:
        c.update({"ms": ms, "bytes": nbytes, "flops": flops,
                  "gb_per_s": nbytes / ms / 1e6 if ms and nbytes else 0.0,
                  "tflops": flops / ms / 1e9 if ms and flops else 0.0})
    return c


def print_row(c):
    if "error" in c:
        print(f"{c['name']:<48}  ERROR: {c['error'][:160]}", flush=True)
    else:
        print(f"{c['name']:<48} {c['ms']:10.4f} {c['gb_per_s']:10.1f} {c['tflops']:10.2f}",
              flush=True)


def expand_kv(t, groups):
    """[B, Hkv, L, D] -> contiguous [B, Hkv*groups, L, D] (head h uses kv head h // groups)."""
    b, h, l, d = t.shape
    return t[:, :, None].expand(b, h, groups, l, d).reshape(b, h * groups, l, d).contiguous()


class SdpaRefused(RuntimeError):
    """Every way of running one SDPA case was refused; the message lists each reason."""


def short_error(ex):
    if isinstance(ex, SdpaRefused):
        return str(ex)[:600]
    msg = str(ex).strip().splitlines()
    return (type(ex).__name__ + ": " + (msg[0] if msg else "")).strip()[:400]


def steady_runner(torch, calls, runs):
    """One callable that runs calls[i % len(calls)] for i < runs back to back: a CUDA graph of them
    when capture works (so the host's launch rate never shows in the time), else an eager loop.
    Returns (fn, timing) with timing "graph" or "eager: <why capture failed>"."""
    def eager():
        for i in range(runs):
            calls[i % len(calls)]()
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the capture, as torch.cuda.graph advises
            eager()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            eager()
        return graph.replay, "graph"
    except Exception as ex:  # noqa: BLE001 - fall back and say why
        torch.cuda.synchronize()
        return eager, "eager: " + short_error(ex)


def run_sdpa(torch, F, backend, timer, q, k, v, causal, groups, allow_expand=True, copies=None,
             runs=1):
    """Returns (ms, how, note). GQA (groups > 1) tries, in order: enable_gqa=True; for decode
    (q_len 1, not causal) the `groups` query heads sharing a KV head folded into the query-length
    axis (q [B, Hkv, groups, D]: the same math, no K/V copy); then, if allow_expand, K/V expanded
    to the q heads. Raises SdpaRefused listing every refusal.
    Steady state (runs > 1): `runs` calls back to back after one flush, call i on the K/V pair
    copies[i % len(copies)] (k, v first); ms is the time per call (steady_runner says how they
    were launched, in the note). Expanded K/V is not tried then."""
    pairs = [(k, v)] + list(copies or [])
    if runs > 1:
        allow_expand = False
    from torch.nn.attention import sdpa_kernel
    if groups == 1:
        attempts = ["plain"]
    else:
        attempts = ["gqa"]
        if q.shape[2] == 1 and not causal:
            attempts.append("folded")
        if allow_expand:
            attempts.append("expanded")
    errors = []
    for how in attempts:
        qq = kk = vv = None
        try:
            qq = q
            if how == "expanded":
                kk, vv = expand_kv(k, groups), expand_kv(v, groups)
            else:
                kk, vv = k, v
            if how == "folded":  # q head h = kv_head * groups + i  ->  [B, Hkv, groups, D]
                b, hq, _, d = q.shape
                qq = q.reshape(b, hq // groups, groups, d)
            kw = {"enable_gqa": True} if how == "gqa" else {}

            def fn():
                F.scaled_dot_product_attention(qq, kk, vv, is_causal=causal, **kw)

            # The backend is forced around the whole timing loop, so its context manager's host
            # cost never sits between the start event and the kernel.
            timing = None
            with sdpa_kernel(backend):
                fn()  # surfaces "no available kernel" before timing
                torch.cuda.synchronize()
                if runs == 1:
                    ms = timer.time_ms(fn)
                else:
                    calls = [(lambda k_=k_, v_=v_: F.scaled_dot_product_attention(
                        qq, k_, v_, is_causal=causal, **kw)) for k_, v_ in pairs]
                    steady_fn, timing = steady_runner(torch, calls, runs)
                    ms = timer.time_ms(steady_fn) / runs
            notes = (["refused before: " + " | ".join(errors)] if errors else []) + \
                ([f"{runs} calls on {len(pairs)} K/V copies, launched as {timing}"] if timing else [])
            return ms, how, ("; ".join(notes) or None)
        except (RuntimeError, TypeError, ValueError) as ex:
            errors.append(f"[{how}] " + short_error(ex))
        finally:
            qq = kk = vv = None
            torch.cuda.empty_cache()
    if groups > 1 and not allow_expand:
        errors.append("[expanded] not tried: expanded K/V would exceed the memory cap")
    raise SdpaRefused(" | ".join(errors) or "no attempt ran")


def wants(name, filters):
    return not filters or any(f in name for f in filters)


def steady_copies(kv_bytes, l2_bytes):
    """K/V copies of a steady-state row (weft-bench's steady_copies): between two reads of one
    copy the others move at least 2x the L2 capacity, so every call reads its K/V from DRAM."""
    others = -(-2 * l2_bytes // kv_bytes)
    return max(2, min(STEADY_RUNS, others + 1))


def is_steady_shape(b, L):
    """The issue's target shapes: batch >= 32 at kv >= 4K, batch 1 at kv >= 32K."""
    return (b >= 32 and L >= 4096) or (b == 1 and L >= 32768)


def decode_case(torch, F, backend, args, timer, model, b, L, steady):
    """One decode row; steady: STEADY_RUNS calls on rotated K/V copies (run_sdpa). Returns the
    case dict, or None when the shape is skipped."""
    hq, hkv = MODELS[model]
    groups = hq // hkv
    name = f"torch/decode/{'steady/' if steady else ''}{model}/b{b}/kv{L}"
    if not wants(name, args.filter):
        return None
    params = {"model": model, "batch": b, "kv_len": L, "num_qo_heads": hq,
              "num_kv_heads": hkv, "head_dim": HEAD_DIM, "dtype": "bf16",
              "backend": args.decode_backend}
    kv_bytes = 2 * b * hkv * L * HEAD_DIM * 2  # K and V, bf16, logical heads
    copies = steady_copies(kv_bytes, timer.l2_bytes) if steady else 1
    cap = STEADY_CAP_BYTES if steady else KV_CAP_BYTES
    if copies * kv_bytes > cap:
        print(f"{name:<48}  skipped: K+V {copies * kv_bytes / GiB:.1f} GiB > {cap / GiB:.0f} GiB",
              flush=True)
        return None
    if steady:
        params.update({"copies": copies, "runs_per_graph": STEADY_RUNS})
    free, _ = torch.cuda.mem_get_info()
    if copies * kv_bytes * 1.1 > free:
        return case(name, params, error=f"skipped: K+V {copies * kv_bytes / GiB:.1f} GiB > free "
                                        f"{free / GiB:.1f} GiB", ceiling="read")
    q = None
    pairs = []
    try:
        q = torch.empty(b, hq, 1, HEAD_DIM, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)
        for _ in range(copies):
            pairs.append(tuple(torch.empty(b, hkv, L, HEAD_DIM, dtype=torch.bfloat16,
                                           device="cuda").uniform_(-1, 1) for _ in range(2)))
        # Expanded K/V (GQA fallback) is allocated next to the originals: cap both.
        allow_expand = (kv_bytes * (1 + groups) <= KV_CAP_BYTES
                        and kv_bytes * (1 + groups) * 1.1 < free)
        ms, how, note = run_sdpa(torch, F, backend, timer, q, *pairs[0], False, groups, allow_expand,
                                 copies=pairs[1:], runs=STEADY_RUNS if steady else 1)
        params["gqa_mode"] = how
        if how == "expanded":
            params["kv_expanded"] = "1"
        qo_bytes = 2 * b * hq * HEAD_DIM * 2
        flops = 4.0 * b * hq * L * HEAD_DIM
        c = case(name, params, ms=ms, nbytes=float(kv_bytes + qo_bytes), flops=flops,
                 ceiling="read")
        if note:
            c["note"] = note
    except Exception as ex:  # noqa: BLE001 - record and go on
        c = case(name, params, error=short_error(ex), ceiling="read")
    finally:
        q = None
        pairs = []
        torch.cuda.empty_cache()
    return c


def bench_decode(torch, F, args, timer, results):
    from torch.nn.attention import SDPBackend
    backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
               "efficient": SDPBackend.EFFICIENT_ATTENTION}[args.decode_backend]
    batches = QUICK_BATCHES if args.quick else DECODE_BATCHES
    kvs = QUICK_KV if args.quick else DECODE_KV
    for steady in (False, True):
        for model in MODELS:
            for b in batches:
                for L in kvs:
                    if steady and not is_steady_shape(b, L):
                        continue
                    c = decode_case(torch, F, backend, args, timer, model, b, L, steady)
                    if c is not None:
                        results.append(c)
                        print_row(c)


def bench_prefill(torch, F, args, timer, results):
    from torch.nn.attention import SDPBackend
    hq, hkv = PREFILL_HEADS
    groups = hq // hkv
    for L in (QUICK_PREFILL_L if args.quick else PREFILL_L):
        name = f"torch/prefill/causal/L{L}"
        if not wants(name, args.filter):
            continue
        params = {"seq_len": L, "num_qo_heads": hq, "num_kv_heads": hkv, "head_dim": HEAD_DIM,
                  "dtype": "bf16", "causal": 1, "backend": "flash"}
        q = k = v = None
        try:
            q = torch.empty(1, hq, L, HEAD_DIM, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)
            k = torch.empty(1, hkv, L, HEAD_DIM, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)
            v = torch.empty(1, hkv, L, HEAD_DIM, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)
            ms, how, note = run_sdpa(torch, F, SDPBackend.FLASH_ATTENTION, timer, q, k, v, True,
                                     groups)
            params["gqa_mode"] = how
            if how == "expanded":
                params["kv_expanded"] = "1"
            flops = 4.0 * L * L * HEAD_DIM * hq / 2  # causal: counted once
            nbytes = 2.0 * (2 * L * hq * HEAD_DIM + 2 * L * hkv * HEAD_DIM)  # q, o, k, v
            c = case(name, params, ms=ms, nbytes=nbytes, flops=flops, ceiling="gemm")
            if note:
                c["note"] = note
        except Exception as ex:  # noqa: BLE001
            c = case(name, params, error=short_error(ex), ceiling="gemm")
        finally:
            q = k = v = None
            torch.cuda.empty_cache()
        results.append(c)
        print_row(c)


def main():
    args = parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # belt and braces: nothing here downloads
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as ex:
        print(f"torch_baselines: PyTorch not available ({ex})", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("torch_baselines: no CUDA GPU visible to PyTorch; nothing to measure", file=sys.stderr)
        return 2
    reps = args.reps or (10 if args.quick else 20)
    timer = Timer(torch, args.warmup, reps)
    props = torch.cuda.get_device_properties(0)
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN "
          f"{torch.backends.cudnn.version()}) on {props.name}, reps {reps}", flush=True)
    print(f"{'case':<48} {'ms':>10} {'GB/s':>10} {'TFLOP/s':>10}", flush=True)
    results = []
    if args.only in (None, "decode"):
        bench_decode(torch, F, args, timer, results)
    if args.only in (None, "prefill"):
        bench_prefill(torch, F, args, timer, results)
    doc = {
        "gpu": props.name,
        "sm_count": props.multi_processor_count,
        "runtime": torch.version.cuda,
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "commit": args.commit or git_commit(),
        "command": " ".join([sys.executable] + sys.argv),
        "timestamp": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "quick": args.quick,
        "groups": ["torch"],
        "ceilings": {},
        "failures": [],
        "cases": results,
    }
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=2)
    n_err = sum("error" in c for c in results)
    print(f"torch_baselines: {len(results)} cases ({n_err} errors) -> {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
