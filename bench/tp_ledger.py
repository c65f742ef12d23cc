#!/usr/bin/env python3
"""TokenWeave ledger for the TP layer (docs/perf-notes-tp.md): the single-GPU overhead side
(bench group tp) against the multi-GPU comm side (bench group comm, 2x/4xH200), per layer.

    bench/tp_ledger.py TP_JSON... --comm-w2 H200X2_JSON --comm-w4 H200X4_JSON

Model (per layer, T tokens, k comm CTAs, world N; every term a measured row except where said):
  overhead_k  = hold/k<k> - unsplit       split wave cost + GEMM slowdown from k SMs reserved
  nccl        = 2 x comm/wN/nccl_baseline(T)           the non-overlapped baseline's two calls
  fused_half  = comm/wN/two_shot/auto/ctas<k>(T/2)     one fused call of one half
  segments    = the compute each call overlaps (B.attn, A.mlp, B.mlp, next layer's A.attn), the
                split row's time cut by FLOPs (attention part: QKV + attention + O; MLP part)
  exposed     = sum over the 4 calls of max(0, fused_half - segment)
  saved       = nccl - overhead_k - exposed            (ms per layer)
  speedup_min = (unsplit + nccl) / (unsplit + nccl - saved)
The world-1 rows contain the local add + norm calls (8 CTAs) in both unsplit and hold, so they
cancel in overhead_k; unsplit is an upper bound of the compute (speedup_min is conservative).
Hidden 4096 (Llama-3-8B): the comm rows of hidden 8192 at T/2 tokens (same bytes). TP 8: the
world-4 comm rows (world 8 was not measured); --world 2: the 2xH200 rows for every shard (what a
2-GPU run of these shards would show). A world that differs from the shard's TP is marked '*'.
"""
import argparse
import json


def load_cases(paths):
    rows = {}
    for p in paths:
        for c in json.load(open(p))["cases"]:
            if c.get("ms"):
                rows[c["name"]] = c
    return rows


def comm_ms(comm, world, kind, tokens):
    """Interpolates a comm row (hidden 8192) linearly in tokens between measured points."""
    pts = sorted((int(n.rsplit("/t", 1)[1]), c["ms"]) for n, c in comm.items()
                 if n.startswith(f"comm/w{world}/{kind}/t"))
    if not pts:
        return None
    if tokens <= pts[0][0]:
        return pts[0][1] * tokens / pts[0][0] if tokens < pts[0][0] else pts[0][1]
    for (t0, m0), (t1, m1) in zip(pts, pts[1:]):
        if tokens <= t1:
            return m0 + (m1 - m0) * (tokens - t0) / (t1 - t0)
    t1, m1 = pts[-1]
    return m1 * tokens / t1  # beyond 8K: linear in bytes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tp_json", nargs="+")
    ap.add_argument("--comm-w2", required=True)
    ap.add_argument("--comm-w4", required=True)
    ap.add_argument("--ks", default="2,4,8,16")
    ap.add_argument("--world", type=int, default=0,
                    help="comm rows of this world size for every shard (0: 4, the TP-4 world, also for TP 8)")
    a = ap.parse_args()
    tp = load_cases(a.tp_json)
    comm = {2: load_cases([a.comm_w2]), 4: load_cases([a.comm_w4])}
    ks = [int(k) for k in a.ks.split(",")]
    print("| shape | T | unsplit | split ovh | k | overhead_k | world | 2 x NCCL | fused/half | exposed | saved | speedup >= |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in sorted(tp, key=lambda n: (n.split("/")[1], n.split("/")[2], int(n.split("/")[3][1:]))):
        if not name.endswith("/unsplit"):
            continue
        base = name[: -len("unsplit")]
        u = tp[name]["ms"]
        s = tp[base + "split"]
        p = tp[name]["params"]
        T, H = int(p["tokens"]), int(p["hidden"])
        qw = int(p["q_heads"]) * 128
        nqkv = (int(p["q_heads"]) + 2 * int(p["kv_heads"])) * 128
        inter = int(p["intermediate"])
        # FLOPs per token of the two compute parts (causal attention at its mean key length).
        attn_f = H * nqkv + qw * H + 2 * qw * (T + 1)  # 2 x 2 x qw x (T + 1) / 2 per query
        mlp_f = 3 * H * inter
        frac_attn = attn_f / (attn_f + mlp_f)
        tp_n = int(p["tp"])
        world = a.world if a.world else 4
        eq_tokens = T * H // 8192  # same bytes at hidden 8192
        nccl = 2 * comm_ms(comm[world], world, "nccl_baseline", eq_tokens)
        for k in ks:
            h = tp.get(base + f"hold/k{k}")
            if not h:
                continue
            ovh = h["ms"] - u
            seg_total = s["ms"]
            half_attn = seg_total * frac_attn / 2
            half_mlp = seg_total * (1 - frac_attn) / 2
            f = comm_ms(comm[world], world, f"two_shot/auto/ctas{k}", eq_tokens // 2)
            exposed = sum(max(0.0, f - seg) for seg in (half_attn, half_mlp, half_mlp, half_attn))
            saved = nccl - ovh - exposed
            speedup = (u + nccl) / (u + nccl - saved)
            wtag = f"w{world}" + ("*" if tp_n != world else "")
            print(f"| {p['model']}/tp{tp_n} | {T} | {u:.3f} | {100 * (s['ms'] / u - 1):+.1f}% | {k} | "
                  f"{ovh:+.3f} | {wtag} | {nccl:.3f} | {f:.3f} | {exposed:.3f} | {saved:+.3f} | {speedup:.2f}x |")


if __name__ == "__main__":
    main()
