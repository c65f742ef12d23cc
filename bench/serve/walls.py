#!/usr/bin/env python3
"""Per-step wall times of a weft-serve-sim JSON as text for `weft-serve-sim --refit`: one line per
(family, option), "family option w0 w1 ...", the medians of the run's non-empty steps in order.

  bench/serve/walls.py CALIBRATION.json > walls.txt
"""
import json
import sys

d = json.load(open(sys.argv[1]))
for f in d["families"]:
    for opt, v in f.get("per_step", {}).items():
        if opt != "router":
            print(f["name"], opt, " ".join(repr(x) for x in v["wall_us"]))
