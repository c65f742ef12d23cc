#!/usr/bin/env python3
"""Per-step wall times of a weft-serve-sim JSON as text for `weft-serve-sim --refit`: one line per
(family, option), "family option w0 w1 ...", the medians of the run's non-empty steps in order, and one
"family option@gpu g0 g1 ..." with their GPU times (the refit fits each option's host time).

  bench/serve/walls.py CALIBRATION.json > walls.txt
"""
import json
import sys

d = json.load(open(sys.argv[1]))
for f in d["families"]:
    for opt, v in f.get("per_step", {}).items():
        if opt != "router":
            print(f["name"], opt, " ".join(repr(x) for x in v["wall_us"]))
            if "gpu_us" in v:  # the GPU times: the refit models each option's host time from both
                print(f["name"], opt + "@gpu", " ".join(repr(x) for x in v["gpu_us"]))
