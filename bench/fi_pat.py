#!/usr/bin/env python3
"""FlashInfer on weft-bench's "pat" batches (bench/cases_decode_pat.cu, issue 21), timed as
weft-bench times them, with the FlashInfer kit's own harness (fi_bench.Bench: CUDA graph, L2
flush before every run, 3 warm-up + 20 timed runs, median), imported from the kit folder (the
carried .baselines/, never edited):

  pat/<hq>x<hkv>/bf16/B<fan>/L<keys>/decode  variants fi-tc, fi-cc: BatchDecodeWithPagedKVCacheWrapper
                                              over every request's full page list (shared pages
                                              listed once per request, as weft's standard decode);
  pat/<hq>x<hkv>/bf16/B<fan>/L<keys>/share   variant fi-cascade: MultiLevelCascadeAttentionWrapper
                                              with one level per tree level (level l: one group of
                                              queries per node, that node's pages), use_cuda_graph.

Same trees (fan = nodes per level, keys per node; leaves are the requests), same page ids (the
pool shuffled with std::mt19937_64(7), bit-exact through fi_bench.std_shuffle), same byte
accounting (UNIQUE KV bytes + q + out). bf16 only (the kit's pre-built modules are bf16).

  python3 bench/fi_pat.py --kit ../.baselines --out $OUT/fi_pat.json [--budget S] [--heads 32x8]
"""
import argparse
import json
import os
import sys
import time


def trees():
    t = []
    for fan in ([1, 4, 16], [1, 8, 64]):
        for keys in ([128, 256, 1024], [512, 512, 512]):
            t.append((fan, keys))
    for fan in ([1, 32], [1, 256], [4, 64]):
        for keys in ([2048, 512], [4096, 128]):
            t.append((fan, keys))
    for keys in ([128, 256, 1024, 128], [512, 512, 512, 512]):
        t.append(([1, 4, 16, 64], keys))
    t.append(([64], [2560]))  # the no-sharing control
    return t


def tree_batch(fb, fan, keys, page):
    """make_prefix_tree_batch (bench/prefix_tree.h): per level the page runs of its nodes, pages
    numbered level by level, then the pool shuffled; request = its ancestors' runs + its leaf's."""
    runs, nxt, unique = [], 0, 0
    for f, k in zip(fan, keys):
        pages = (k + page - 1) // page
        runs.append([list(range(nxt + i * pages, nxt + (i + 1) * pages)) for i in range(f)])
        nxt += f * pages
        unique += f * k
    perm = fb.std_shuffle(list(range(nxt)), 7)
    L = len(fan)
    indptr, indices, lens, last = [0], [], [], []
    for leaf in range(fan[-1]):
        ln = 0
        for l in range(L):
            node = leaf
            for up in range(L - 1, l, -1):
                node //= fan[up] // fan[up - 1]
            indices += [perm[p] for p in runs[l][node]]
            ln += keys[l]
        indptr.append(len(indices))
        lens.append(ln)
        last.append(ln - (indptr[-1] - indptr[-2] - 1) * page)
    # Cascade levels: level l has fan[l] groups; group n holds the leaves below node n.
    levels = []
    for l in range(L):
        per = fan[-1] // fan[l]
        qo = [n * per for n in range(fan[l] + 1)]
        kv_indptr, kv_idx, kv_last = [0], [], []
        for n in range(fan[l]):
            kv_idx += [perm[p] for p in runs[l][n]]
            kv_indptr.append(len(kv_idx))
            kv_last.append(keys[l] - (len(runs[l][n]) - 1) * page)
        levels.append((qo, kv_indptr, kv_idx, kv_last))
    return dict(indptr=indptr, indices=indices, lens=lens, last=last, num_pages=nxt, unique=unique, levels=levels)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kit", required=True, help="the FlashInfer kit folder (.baselines) with fi_bench.py")
    p.add_argument("--out", required=True)
    p.add_argument("--budget", type=float, default=150.0, help="seconds; cases past it are skipped")
    p.add_argument("--heads", default="32x32,16x8,32x8,64x8")
    a = p.parse_args()
    sys.path.insert(0, os.path.abspath(a.kit))
    import fi_bench as fb  # noqa: E402

    fb.set_env_defaults()
    aot = fb.install_aot(os.path.join(os.path.abspath(a.kit), "aot"))
    import torch  # noqa: E402
    import flashinfer  # noqa: E402

    args = fb.parse_args([])  # the kit's defaults (reps, allocations, quick off)
    b = fb.Bench(args)
    dev, PAGE, D = b.dev, fb.PAGE, fb.D
    t_start = time.perf_counter()
    skipped = []
    for hs in a.heads.split(","):
        hq, hkv = (int(x) for x in hs.split("x"))
        for fan, keys in trees():
            name = f"pat/{hs}/bf16/" + ("nosharing/b64/kv2560" if len(fan) == 1 else
                                        f"B{'-'.join(map(str, fan))}/L{'-'.join(map(str, keys))}")
            if time.perf_counter() - t_start > a.budget:
                skipped.append(name)
                continue
            t = tree_batch(fb, fan, keys, PAGE)
            batch = len(t["lens"])
            nbytes = t["unique"] * hkv * D * 2 * 2 + 2.0 * batch * hq * D * 2
            flops = 4.0 * sum(t["lens"]) * hq * D
            params = {"heads": hs, "dtype": "bf16", "B": "-".join(map(str, fan)), "L": "-".join(map(str, keys)),
                      "batch": str(batch)}
            torch.cuda.empty_cache()
            q = torch.empty(batch, hq, D, dtype=torch.bfloat16, device=dev).uniform_(-1, 1)
            out = torch.empty_like(q)
            k = torch.empty(t["num_pages"], PAGE, hkv, D, dtype=torch.bfloat16, device=dev).uniform_(-1, 1)
            v = torch.empty_like(k).uniform_(-1, 1)
            i32 = lambda x: torch.tensor(x, dtype=torch.int32, device=dev)  # noqa: E731
            ms = {}
            # Standard decode over the full lists.
            for var, tc in (("fi-tc", True), ("fi-cc", False)):
                cfg = {"use_tensor_cores": tc, "use_cuda_graph": True}
                try:
                    w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
                        b.ws, "NHD", use_cuda_graph=True, use_tensor_cores=tc,
                        paged_kv_indptr_buffer=torch.empty(batch + 1, dtype=torch.int32, device=dev),
                        paged_kv_indices_buffer=torch.empty(len(t["indices"]), dtype=torch.int32, device=dev),
                        paged_kv_last_page_len_buffer=torch.empty(batch, dtype=torch.int32, device=dev))
                    w.plan(i32(t["indptr"]), i32(t["indices"]), i32(t["last"]), hq, hkv, D, PAGE,
                           pos_encoding_mode="NONE", q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
                    launch, timing = b.launcher(lambda: w.run(q, (k, v), out=out))
                    cfg["timing"] = timing
                    b.warm_up_once(launch)
                    ms[var] = b.time_ms(launch)
                    b.release()
                    b.add(b.row(name + "/decode", var, ms[var], nbytes, flops, cfg, params))
                except Exception as e:  # noqa: BLE001
                    b.release()
                    b.add(b.row(name + "/decode", var, 0, nbytes, flops, cfg, params,
                                error=f"{type(e).__name__}: {str(e)[:300]}"))
            # Multi-level cascade.
            if len(fan) > 1:
                cfg = {"use_cuda_graph": True, "levels": len(fan)}
                try:
                    lv = t["levels"]
                    w = flashinfer.MultiLevelCascadeAttentionWrapper(
                        len(lv), b.ws, "NHD", use_cuda_graph=True,
                        qo_indptr_buf_arr=[torch.empty(len(x[0]), dtype=torch.int32, device=dev) for x in lv],
                        paged_kv_indptr_buf_arr=[torch.empty(len(x[1]), dtype=torch.int32, device=dev) for x in lv],
                        paged_kv_indices_buf_arr=[torch.empty(len(x[2]), dtype=torch.int32, device=dev) for x in lv],
                        paged_kv_last_page_len_buf_arr=[torch.empty(len(x[3]), dtype=torch.int32, device=dev)
                                                        for x in lv])
                    w.plan([i32(x[0]) for x in lv], [i32(x[1]) for x in lv], [i32(x[2]) for x in lv],
                           [i32(x[3]) for x in lv], hq, hkv, D, PAGE, causal=False,
                           q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
                    launch, timing = b.launcher(lambda: w.run(q, (k, v)))
                    cfg["timing"] = timing
                    b.warm_up_once(launch)
                    m = b.time_ms(launch)
                    b.release()
                    extra = {}
                    if "fi-tc" in ms:
                        extra["speedup_vs_fi_tc"] = ms["fi-tc"] / m
                    b.add(b.row(name + "/share", "fi-cascade", m, nbytes, flops, cfg, params, extra))
                except Exception as e:  # noqa: BLE001
                    b.release()
                    b.add(b.row(name + "/share", "fi-cascade", 0, nbytes, flops, cfg, params,
                                error=f"{type(e).__name__}: {str(e)[:300]}"))
            del q, out, k, v
    doc = {"tool": "bench/fi_pat.py", "flashinfer": getattr(flashinfer, "__version__", "?"),
           "gpu": torch.cuda.get_device_name(0), "commit": os.environ.get("WEFT_COMMIT", ""),
           "command": " ".join(sys.argv), "aot_modules": aot, "jit_built_modules": fb.jit_built_modules(),
           "skipped_for_budget": skipped, "wall_s": time.perf_counter() - t_start, "cases": b.results}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    fb.log(f"wrote {a.out}: {len(b.results)} rows, {len(skipped)} skipped, {doc['wall_s']:.1f}s")


if __name__ == "__main__":
    main()
