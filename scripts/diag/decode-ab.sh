#!/usr/bin/env bash
# Diagnostic (device): same-call A/B of this tree's weft-bench against one built from an older
# source tree. Builds weft-bench (decode only, no tests) from both and runs each PAIRS times,
# processes interleaved (base, new, base, new, ...), each writing $OUT/ab_<setting>_<i>.json;
# then merges them into $OUT/ab.json and prints the rows side by side.
#   OUT=... WEFT_COMMIT=<sha> PAIRS=2 BASE_SRC=<dir> scripts/diag/decode-ab.sh -- <filters>
# BASE_SRC: the older tree, made locally with `git archive <sha> | tar -x -C build-base-src` and
# carried. Without BASE_SRC only this tree runs (PAIRS processes: run-to-run spread).
# Tuning knobs are not compared here: the library reads no environment variables; the bench rows
# "decode/w<W>s<S>/..." build wrappers with other weft::DecodeOptions in the same process.
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT="${OUT:-./ab-out}"
mkdir -p "$OUT"
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
SETTINGS=(new)
if [ -n "${BASE_SRC:-}" ]; then
  build_bench "$BASE_SRC" build-ab-base
  SETTINGS=(base new)
fi
echo "build $SECONDS s"
for i in $(seq 1 "${PAIRS:-2}"); do
  for s in "${SETTINGS[@]}"; do
    bin=build-ab/bench/weft-bench
    [ "$s" = "base" ] && bin=build-ab-base/bench/weft-bench
    $bin --group decode "${F[@]}" --commit "${WEFT_COMMIT:-unknown}" --json "$OUT/ab_${s}_$i.json" > /tmp/run.log 2>&1 || tail -5 /tmp/run.log
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
