#!/usr/bin/env bash
# Diagnostic (device): the end-of-session A/B of main against an older main in one call:
#   1. builds weft-bench and weft-serve-sim of both trees in parallel (no tests, no comm / norm / tp);
#   2. the AB_ARGS weft-bench rows with core-ab.sh's interleaved old/new processes (PAIRS), until
#      AB_DEADLINE seconds from the start (GPU time of rows whose workspace layout or plan changed);
#   3. the serving harness's b256 family old, new, old, new with the committed router table
#      (decode_plan_us_p50_256: the balanced plan(BlockTable) at 256 requests, caches cold).
# Writes $OUT: core_ab.json, ab.log, serve_{old,new}_{1,2}.json, log.txt.
# Usage (repo root of the new tree; the old tree made with `git archive <sha> | tar -x -C DIR`, carried):
#   OUT=... WEFT_COMMIT=<new> BASE_COMMIT=<old> [PAIRS=3] [AB_DEADLINE=300] [DEADLINE=420] \
#     AB_ARGS="--group prefill --filter prefill/chunked/" scripts/diag/final-ab.sh <old tree>
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib-ab.sh"
ab_init final-ab 420 "$@"
build() {  # <source dir> <build dir> <log>
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_DISABLE="norm;comm;tp" -DWEFT_WITH_COMM=OFF \
    -DWEFT_BUILD_TESTS=OFF > "$3" 2>&1 && ninja -C "$2" -j8 weft-bench weft-serve-sim >> "$3" 2>&1
}
build "$BASE_SRC" /tmp/ab-old /tmp/build_old.log &
OLD_PID=$!
build . /tmp/ab-new /tmp/build_new.log || { tail -30 /tmp/build_new.log | tee -a "$LOG"; exit 1; }
wait $OLD_PID || { tail -30 /tmp/build_old.log | tee -a "$LOG"; exit 1; }
note "built old ($BASE_SRC, ${BASE_COMMIT:-?}) and new (${WEFT_COMMIT:-?})"
# shellcheck disable=SC2086
SKIP_BUILD=1 DEADLINE=$(( ${AB_DEADLINE:-300} - SECONDS )) PAIRS="${PAIRS:-3}" OUT="$OUT" \
  bash scripts/diag/core-ab.sh "$BASE_SRC" --no-ceilings ${AB_ARGS:---group prefill --filter prefill/chunked/} 2>&1 |
  tee "$OUT/ab.log" | tail -6
note "A/B done"
ab_serve 30 "
import json, sys
d=json.load(open(sys.argv[1]))
r=d['families'][0]['routes']
print('decode_plan_us_p50_256', [c for c in d['cases'] if c['name']=='serve/summary'][0]['extra'].get('decode_plan_us_p50_256'),
      ' '.join('%s %.1f/%.1f/%.1f' % (k, v['plan_us_p50'], v['wall_us_mean'], v['gpu_us_mean']) for k, v in sorted(r.items())))
"
note "done"
