#!/usr/bin/env python3
"""Compare the KV loops of two builds' kernels from `cuobjdump -sass` text (dev box: cuobjdump
needs nvdisasm on PATH). A loop is a backward BRA; the KV loop of a decode kernel is the loop with
the fewest instructions among the loops with at least half the most HMMA (tensor-core
kernels) or FFMA (CUDA-core kernels) of any loop (the innermost loop holding the tile math; the
persistent item loop around it holds the same math plus the item code). Prints per kernel pair: function and KV-loop
instruction counts, LDC (constant-bank loads into registers) and ULDC in the loop, and the
opcodes whose counts differ.

    sass_loops.py OLD.sass NEW.sass OLD_REGEX NEW_REGEX [OLD_REGEX NEW_REGEX ...]

Each regex must match exactly one function name in its file (issue 19, perf-notes-decode.md
"Launch order of folded plans ...": decode_cc / decode_tc KV loops of 5427bc0 vs main)."""
import collections
import re
import sys


def function(path, pat):
    out, cur, buf = {}, None, []
    with open(path) as f:
        for line in f:
            m = re.match(r"\s*Function : (\S+)", line)
            if m:
                if cur:
                    out[cur] = buf
                cur, buf = m.group(1), []
                continue
            m = re.match(r"\s*/\*([0-9a-f]+)\*/\s+(.*?);", line) if cur else None
            if m:
                buf.append((int(m.group(1), 16), m.group(2).strip()))
    if cur:
        out[cur] = buf
    names = [k for k in out if re.search(pat, k)]
    if len(names) != 1:
        sys.exit(f"{pat}: {len(names)} matches in {path}: {names[:3]}")
    return names[0], out[names[0]]


def opcode(ins):
    t = ins.split()
    return t[1] if t[0].startswith("@") else t[0]


def kv_loop(fn):
    loops = []
    for pc, ins in fn:
        m = re.search(r"BRA.*?(0x[0-9a-f]+)", ins)
        if not m or not opcode(ins).startswith("BRA"):
            continue
        target = int(m.group(1), 16)
        if target >= pc:
            continue
        body = [i for p, i in fn if target <= p <= pc]
        c = collections.Counter(opcode(i) for i in body)
        work = sum(v for o, v in c.items() if o.startswith("HMMA")) or c["FFMA"]
        loops.append((work, body, c))
    most = max(w for w, _, _ in loops)
    _, body, c = min((l for l in loops if 2 * l[0] >= most), key=lambda l: len(l[1]))
    return body, c


def count(c, prefix):
    return sum(v for o, v in c.items() if o.startswith(prefix))


def main(argv):
    old_path, new_path, pats = argv[1], argv[2], argv[3:]
    for po, pn in zip(pats[::2], pats[1::2]):
        rows = []
        for path, pat in ((old_path, po), (new_path, pn)):
            name, fn = function(path, pat)
            body, c = kv_loop(fn)
            rows.append((name, len(fn), len(body), count(c, "LDC"), count(c, "ULDC"), c))
        (no, fo, lo, co, uo, ko), (nn, fn_, ln, cn, un, kn) = rows
        print(f"{nn}\n  old: function {fo}, KV loop {lo} instructions, LDC {co}, ULDC {uo}"
              f"\n  new: function {fn_}, KV loop {ln} instructions, LDC {cn}, ULDC {un}")
        diff = [f"{o} {ko[o]}->{kn[o]}" for o in sorted(set(ko) | set(kn)) if ko[o] != kn[o]]
        print("  loop opcodes that differ:", " ".join(diff) if diff else "none")


if __name__ == "__main__":
    main(sys.argv)
