#!/usr/bin/env bash
# Diagnostic (device): same-call A/B of decode tuning knobs read from the environment (e.g.
# WEFT_DECODE_STAGES). Builds weft-bench (decode only, no tests) and runs it PAIRS times per
# setting, processes interleaved (A, B, A, B, ...), each writing $OUT/ab_<setting>_<i>.json; then
# merges them into $OUT/ab.json.
#   OUT=... WEFT_COMMIT=<sha> PAIRS=2 scripts/diag/decode-env-ab.sh "WEFT_DECODE_STAGES=3" "WEFT_DECODE_STAGES=2" -- <filters>
# BASE_SRC=<dir> adds the setting "base": weft-bench built from an older source tree in <dir>
# (made locally with `git archive <sha> | tar -x -C build-base-src`, then carried), so a change
# without a knob is compared with its parent in the same call.
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT="${OUT:-./ab-out}"
mkdir -p "$OUT"
SETTINGS=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do SETTINGS+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
F=()
for r in "$@"; do F+=(--filter "$r"); done
SECONDS=0
# build_bench <source dir> <build dir>: decode-only weft-bench, no tests.
build_bench() {
  cmake -S "$1" -B "$2" -G Ninja -DWEFT_DISABLE="prefill;norm;comm" -DWEFT_BUILD_TESTS=OFF > /tmp/cfg.log 2>&1 || { tail -30 /tmp/cfg.log; exit 1; }
  ninja -C "$2" -j16 weft-bench > /tmp/build.log 2>&1 || { tail -40 /tmp/build.log; exit 1; }
}
build_bench . build-ab
if [ -n "${BASE_SRC:-}" ]; then
  build_bench "$BASE_SRC" build-ab-base
  SETTINGS=("base" "${SETTINGS[@]}")
fi
echo "build $SECONDS s"
for i in $(seq 1 "${PAIRS:-2}"); do
  for s in "${SETTINGS[@]}"; do
    tag=$(echo "$s" | tr -c 'A-Za-z0-9_\n' '_')
    bin=build-ab/bench/weft-bench setting=$s
    if [ "$s" = "base" ]; then bin=build-ab-base/bench/weft-bench setting=WEFT_NOOP=1; fi
    env $setting $bin --group decode "${F[@]}" --commit "${WEFT_COMMIT:-unknown}" --json "$OUT/ab_${tag}_$i.json" > /tmp/run.log 2>&1 || tail -5 /tmp/run.log
    echo "$s run $i: $(grep -c '^decode/' /tmp/run.log) rows"
  done
done
python3 - "$OUT" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
merged = {}
for f in sorted(glob.glob(os.path.join(out, "ab_*.json"))):
    merged[os.path.basename(f)[3:-5]] = json.load(open(f))
    os.remove(f)
json.dump(merged, open(os.path.join(out, "ab.json"), "w"))
rows = {}
for k, d in merged.items():
    for c in d["cases"]:
        rows.setdefault(c["name"], {})[k] = c["ms"] * 1e3
keys = sorted(merged)
print("row".ljust(44) + "".join(k[-22:].rjust(24) for k in keys))
for n, v in rows.items():
    print(n.ljust(44) + "".join(("%.1f" % v[k]).rjust(24) if k in v else " " * 24 for k in keys))
PY
echo "total $SECONDS s"
