#!/usr/bin/env python3
"""Compact Nsight Compute summary of decode-kernel profiles (scripts/diag/warpbound.sh, issue 28):
DIR holds <tag>.details.csv / .raw.csv / .sass.csv per profiled launch; TILES = warp tiles of
the batch (b * num_kv_heads * ctx / 16). Per tag: the details page, the stall-sampling and
memory raw metrics, and from the SASS page the executed warp instructions per warp tile (by
class), the sampled stall reasons, the hottest instructions, and the KV loop body: every
instruction executed between 0.8 and 1.25 times per warp tile, with its samples and top reasons.

    warpbound_ncu.py DIR TILES
"""
import glob
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncu_compare import details, num, raw, read_csv, sass  # noqa: E402

RAW = re.compile(r"pcsamp_warps_issue_stalled|smsp__average_warp|smsp__warps_active|smsp__issue_active|"
                 r"sm__cycles_active\.avg$|dram__bytes_read\.sum$|dram__throughput|lts__t_sector_hit_rate\.pct$|"
                 r"l1tex__throughput|lts__throughput|smsp__inst_executed\.sum$|launch__|gpu__time_duration\.sum$|"
                 r"l1tex__data_pipe_lsu_wavefronts_mem_shared|smsp__thread_inst_executed_per_inst|"
                 r"l1tex__m_xbar2l1tex_read_bytes|l1tex__t_requests_pipe_lsu_mem_global_op_ldgsts|"
                 r"smsp__inst_executed_op_ldgsts|sm__warps_active")


def main():
    d, n_t = sys.argv[1], float(sys.argv[2])
    for p in sorted(glob.glob(os.path.join(d, "*.details.csv"))):
        tag = os.path.basename(p)[:-len(".details.csv")]
        print("=" * 100)
        print(f"{tag}: {n_t:.0f} warp tiles")
        for (sec, m), (v, u) in details(p).items():
            print(f"  {sec[:24]:<24} {m[:52]:<52} {v:>14} {u}")
        R = raw(os.path.join(d, tag + ".raw.csv"))
        print("-- raw")
        for m in sorted(R):
            if RAW.search(m) and not re.search(r"\.(min|max)$|peak_sustained", m):
                print(f"  {m[:78]:<78} {R[m][0]:>16} {R[m][1]}")
        S = sass(os.path.join(d, tag + ".sass.csv"))
        if S is None:
            print("-- no SASS page")
            continue
        tot = sum(S["ops"].values())
        print(f"-- SASS: executed warp instructions {tot:.4g} = {tot / n_t:.1f} per warp tile; by class (per tile):")
        print("   " + "  ".join(f"{o} {v / n_t:.1f}" for o, v in S["ops"].most_common(40)))
        st = S["stalls"]
        if st:
            totst = sum(st.values())
            print("   sampled stall reasons (share of samples): " + "  ".join(
                f"{k.replace('stall_', '')} {v / totst:.3f}" for k, v in st.most_common(20)))
        print(f"   samples {S['total_samples']:.0f}; hottest instructions:")
        for smp, addr, text, reasons in S["hot"][:25]:
            rs = " ".join(f"{a.replace('stall_', '')[:16]}={b:.0f}" for a, b in sorted(reasons.items(), key=lambda x: -x[1])[:3])
            print(f"   {smp / max(S['total_samples'], 1):6.3f} {addr:>6} {text:<64} {rs}")
        # The KV loop body: instructions executed ~once per warp tile.
        rows = read_csv(os.path.join(d, tag + ".sass.csv"))
        while rows and (not rows[0] or rows[0][0] != "Address"):
            rows = rows[1:]
        h = rows[0]
        ix = {k: i for i, k in enumerate(h)}
        src = next(ix[k] for k in ("Source", "SASS", "Instruction") if k in ix)
        ex = next(ix[k] for k in h if k.startswith("Instructions Executed") or k == "inst_executed")
        samp = next((ix[k] for k in h if k.startswith("Warp Stall Sampling (All")), None)
        scols = [k for k in h if k.startswith("stall_") and "(Not Issued)" not in k]
        body, bsamp = [], 0.0
        for r in rows[1:]:
            if len(r) <= max(src, ex):
                continue
            e = num(r[ex]) or 0
            if 0.8 * n_t <= e <= 1.25 * n_t:
                s = (num(r[samp]) or 0) if samp is not None else 0
                bsamp += s
                top = sorted(((k, num(r[ix[k]]) or 0) for k in scols), key=lambda x: -x[1])[:2]
                body.append((r[ix["Address"]], r[src].strip()[:60], e / n_t, s, top))
        print(f"-- KV loop body: {len(body)} instructions executed 0.8-1.25x per tile, "
              f"{bsamp / max(S['total_samples'], 1):.3f} of the samples")
        for a, t, e, s, top in body:
            ts = " ".join(f"{k.replace('stall_', '')[:14]}={v:.0f}" for k, v in top if v)
            print(f"   {a:>6} {t:<60} x{e:.2f} s={s:.0f} {ts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
