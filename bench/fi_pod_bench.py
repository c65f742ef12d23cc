#!/usr/bin/env python3
"""FlashInfer 0.7.2 on bench group "pod"'s hybrid batches, timed the way weft-bench times them (the
FlashInfer kit's fi_bench.Bench: run() captured in a CUDA graph after an untimed plan(), L2 flushed
before every run outside the events, 3 warm-up + 20 timed, median). Rows carry the weft case name
("pod/<model>/ctx<C>/chunk<c>/b<B>"), so bench/pod_merge.py pairs them with weft's rows.

Which batches: the kept ones of a weft "pod" JSON (--weft; each side 20..80% of weft's serial time),
so both libraries are timed on the same batches in one device call. Data as weft's bench: one
prefill chunk = the last `chunk` tokens of a `context`-token sequence (causal, bottom-right
aligned), `B` decodes of `context` keys each, bf16, head_dim 128, page 16, NHD, K and V in two
~6 GB pools, page ids drawn at random over the pool.

Variants per batch (all FlashInfer):
  fi-pod         BatchPODWithPagedKVCacheWrapper: paged prefill + paged decode in one launch
  fi-serial-fa2  BatchPrefillWithPagedKVCacheWrapper(fa2) then BatchDecodeWithPagedKVCacheWrapper
                 (tensor cores), one graph (the issue's "serial prefill (FA2) + decode")
  fi-serial-fa3  same with backend="fa3" (the sm90 prefill)
  (--alone adds fi-prefill-fa2, fi-prefill-fa3, fi-decode: each alone, FlashInfer's own ideal
  overlap bound)
Correctness: on every batch fi-pod's outputs are compared with fi-serial-fa2's (extra.max_abs_diff).

  fi_pod_bench.py --kit .baselines --weft weft_pod.json --out fi_pod.json [--aot DIR ...] [--budget S]
"""
import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
import traceback

D, PAGE = 128, 16
MODELS = {"llama3-8b": (32, 8), "llama2-7b": (32, 32), "yi-6b": (32, 4)}
POOL_BYTES = 6 << 30  # per K and per V pool, as bench/cases_pod.cu


def load_kit(kit):
    spec = importlib.util.spec_from_file_location("fi_bench", os.path.join(kit, "fi_bench.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def kept_batches(weft_json):
    out = []
    for c in json.load(open(weft_json))["cases"]:
        if c["name"] == "pod/summary" or c.get("error"):
            continue
        p = c["params"]
        out.append((c["name"], p["model"], int(p["context"]), int(p["chunk"]), int(p["decode_batch"])))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kit", required=True)
    ap.add_argument("--weft", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--aot", action="append", default=[])
    ap.add_argument("--budget", type=float, default=0)
    ap.add_argument("--reps", type=int, default=0)
    ap.add_argument("--alone", action="store_true")
    # --no-fa3: no fa3 prefill wrapper (no fi-serial-fa3 / fi-prefill-fa3 rows). Its module is not
    # JIT-built then, which takes minutes on the device when no pre-built one is carried (the kit with
    # that module no longer fits the carry next to the tree).
    ap.add_argument("--no-fa3", action="store_true")
    args = ap.parse_args()
    t_start = time.perf_counter()
    fb = load_kit(args.kit)
    fb.set_env_defaults()
    aot = []
    for d in [os.path.join(args.kit, "aot")] + args.aot:
        aot += fb.install_aot(d)
    import torch
    os.environ.setdefault("FLASHINFER_CUDA_ARCH_LIST", "%d.%d" % torch.cuda.get_device_capability(0))
    import flashinfer
    bargs = argparse.Namespace(reps=args.reps, quick=False)
    b = fb.Bench(bargs)
    dev = b.dev
    batches = kept_batches(args.weft)
    doc = {"impl": "flashinfer", "flashinfer_version": flashinfer.__version__, "torch": torch.__version__,
           "gpu": b.props.name, "sm_count": b.props.multi_processor_count, "command": " ".join(sys.argv),
           "method": "fi_bench.Bench: CUDA graph of run() after plan(); L2 flush before every run; 3 warm-up + "
                     "20 timed; median", "aot_modules": aot, "skipped_for_budget": [], "cases": b.results}
    gen = torch.Generator(device="cpu")
    for model in MODELS:
        mine = [x for x in batches if x[1] == model]
        if not mine:
            continue
        hq, hkv = MODELS[model]
        pool_pages = POOL_BYTES // (PAGE * hkv * D * 2)
        torch.cuda.empty_cache()
        k = torch.empty(pool_pages, PAGE, hkv, D, dtype=torch.bfloat16, device=dev).uniform_(-1, 1)
        v = torch.empty_like(k).uniform_(-1, 1)
        gen.manual_seed(hash(model) & 0xFFFF)
        for name, _, context, chunk, nb in mine:
            if args.budget and time.perf_counter() - t_start > args.budget:
                doc["skipped_for_budget"].append(name)
                continue
            params = {"model": model, "context": str(context), "chunk": str(chunk), "decode_batch": str(nb)}
            try:
                pages = (context + PAGE - 1) // PAGE
                last = context - (pages - 1) * PAGE

                def table(n):
                    indptr = torch.arange(n + 1, dtype=torch.int32) * pages
                    idx = torch.randint(0, pool_pages, (n * pages,), generator=gen, dtype=torch.int32)
                    return indptr.to(dev), idx.to(dev), torch.full((n,), last, dtype=torch.int32).to(dev)

                ip_p, ix_p, la_p = table(1)
                ip_d, ix_d, la_d = table(nb)
                qo_p = torch.tensor([0, chunk], dtype=torch.int32, device=dev)
                qo_d = torch.arange(nb + 1, dtype=torch.int32, device=dev)
                q_p = torch.empty(chunk, hq, D, dtype=torch.bfloat16, device=dev).uniform_(-1, 1)
                q_d = torch.empty(nb, hq, D, dtype=torch.bfloat16, device=dev).uniform_(-1, 1)
                o_p, o_d = torch.empty_like(q_p), torch.empty_like(q_d)
                bf = torch.bfloat16
                pod = flashinfer.BatchPODWithPagedKVCacheWrapper(b.ws, "NHD")
                pod.plan(qo_p, ip_p, ix_p, la_p, qo_d, ip_d, ix_d, la_d, hq, hkv, D, PAGE,
                         q_data_type=bf, kv_data_type=bf)
                pres = {}
                for be in ("fa2",) if args.no_fa3 else ("fa2", "fa3"):
                    w = flashinfer.BatchPrefillWithPagedKVCacheWrapper(b.ws, "NHD", backend=be)
                    w.plan(qo_p, ip_p, ix_p, la_p, hq, hkv, D, PAGE, causal=True, q_data_type=bf, kv_data_type=bf)
                    pres[be] = w
                dec = b.make_decode_wrapper("fi-tc", nb, nb * pages)
                dec.plan(ip_d, ix_d, la_d, hq, hkv, D, PAGE, pos_encoding_mode="NONE", q_data_type=bf, kv_data_type=bf)
                alone = {
                    "fi-prefill-fa2": lambda: pres["fa2"].run(q_p, (k, v), out=o_p),
                    "fi-prefill-fa3": lambda: pres["fa3"].run(q_p, (k, v), out=o_p),
                    "fi-decode": lambda: dec.run(q_d, (k, v), out=o_d),
                }
                if args.no_fa3:
                    del alone["fi-prefill-fa3"]
                fns = {
                    "fi-pod": lambda: pod.run(q_p, (k, v), q_d, (k, v), causal_p=True),
                    "fi-serial-fa2": lambda: (alone["fi-prefill-fa2"](), alone["fi-decode"]()),
                    "fi-serial-fa3": lambda: (alone["fi-prefill-fa3"](), alone["fi-decode"]()),
                }
                if args.no_fa3:
                    del fns["fi-serial-fa3"]
                if args.alone:
                    fns.update(alone)
                # Correctness: the fused outputs against the serial (FA2 + decode) ones.
                rp, rd = pod.run(q_p, (k, v), q_d, (k, v), causal_p=True)
                fns["fi-serial-fa2"]()
                torch.cuda.synchronize()
                diff = max((rp.float() - o_p.float()).abs().max().item(), (rd.float() - o_d.float()).abs().max().item())
                del rp, rd
                for var, fn in fns.items():
                    launch, timing = b.launcher(fn)
                    b.warm_up_once(launch)
                    s = b.time_samples(launch)
                    b.release()
                    b.add(b.row(name, var, statistics.median(s), 0.0, 0.0, {"timing": timing}, params,
                                {"max_abs_diff_pod_vs_serial": diff}))
            except Exception as e:  # noqa: BLE001
                b.release()
                fb.log(traceback.format_exc(limit=4))
                b.add(b.row(name, "fi-pod", 0, 0, 0, {}, params, error=f"{type(e).__name__}: {e}"))
            doc["wall_s"] = time.perf_counter() - t_start
            fb.write_json(args.out, doc)
        del k, v
    doc["jit_built_modules"] = fb.jit_built_modules()
    doc["wall_s"] = time.perf_counter() - t_start
    fb.write_json(args.out, doc)
    errors = sum("error" in r for r in b.results)
    fb.log(f"wrote {args.out}: {len(b.results)} rows, {errors} errors, {doc['wall_s']:.1f}s, "
           f"skipped for budget {len(doc['skipped_for_budget'])}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
