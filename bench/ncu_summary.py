#!/usr/bin/env python3
"""Condenses `ncu --csv --metrics ...` output (stdin) to one line per profiled launch:
launch id, kernel name (up to its template arguments), metric=value pairs. Lines that are not
ncu CSV rows (the profiled program's own output) are ignored."""
import csv
import sys


def main() -> None:
    rows = [r for r in csv.reader(sys.stdin) if len(r) >= 15 and r[0] != "ID"]
    launches: dict = {}
    for r in rows:
        key = (int(r[0]), r[4].replace("<unnamed>", "anon").replace("void ", "").split("<")[0].split("(")[0])
        launches.setdefault(key, []).append(f"{r[12]}={r[14]}")
    for (lid, name), metrics in sorted(launches.items()):
        print(lid, name, " ".join(metrics))


if __name__ == "__main__":
    main()
