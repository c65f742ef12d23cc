#!/usr/bin/env bash
# One device call for the Hopper prefill mainloop (src/prefill/sm90/): build the prefill tests and
# weft-bench, run the sm90 tests (and optionally the whole prefill suite), a compute-sanitizer
# memcheck of small sm90 cases, and the prefill bench rows (sm90, FA2 pinned, default), then
# FlashInfer's sm90 backend (fi-auto) on the same shapes when .baselines/ was carried.
# Usage (device machine, repo root): scripts/diag/sm90-dev.sh [steps], steps a comma list of
#   test, suite, sanitize, bench, variants, fi (default: test,sanitize,bench)
# Writes logs and JSON to $OUT; prints a short table last.
set -uo pipefail
OUT=${OUT:-/tmp/sm90-out}
mkdir -p "$OUT"
STEPS=",${1:-test,sanitize,bench},"
has() { [[ "$STEPS" == *",$1,"* ]]; }
source scripts/env.sh
BUILD=build-gpu
t0=$(date +%s)

if has fi && [ -d .baselines/whl ]; then
  ( python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      .baselines/whl/*.whl > "$OUT/fi_install.log" 2>&1 ) &
  FI_PID=$!
fi
cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_DISABLE=comm -DWEFT_BUILD_TESTS=ON \
  > "$OUT/build.log" 2>&1
targets="weft_gpu_prefill"
if has bench || has variants; then targets="$targets weft-bench"; fi
# The variant A/B: one more tree per experimental pipeline variant (-DWEFT_SM90_PIPELINE=<v>: a
# build compiles one variant), weft-bench only, built next to the main one.
if has variants; then
  for v in ${SM90_VARIANTS:-0 3}; do
    [ "$v" = 15 ] && continue
    ( cmake -S . -B $BUILD-v$v -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_DISABLE="comm;norm" \
        -DWEFT_BUILD_TESTS=OFF -DWEFT_SM90_PIPELINE=$v && cmake --build $BUILD-v$v -j8 --target weft-bench ) \
      > "$OUT/build_v$v.log" 2>&1 &
  done
fi
if ! cmake --build $BUILD -j16 --target $targets >> "$OUT/build.log" 2>&1; then
  tail -n 40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1
fi
echo "build: $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader

if has test; then
  timeout 240 $BUILD/tests/weft_gpu_prefill --gtest_filter='PrefillSm90*' > "$OUT/test_sm90.log" 2>&1
  echo "sm90 tests rc=$?"; grep -E "^\[  (FAILED|PASSED|  OK) |Failure|expected|O:|LSE:|sm90 mainloop not" "$OUT/test_sm90.log" | head -40
fi
if has suite; then
  timeout 300 $BUILD/tests/weft_gpu_prefill --gtest_brief=1 > "$OUT/test_suite.log" 2>&1
  echo "prefill suite rc=$?"; grep -E "^\[  (FAILED|PASSED) |tests ran" "$OUT/test_suite.log" | head -20
fi
if has sanitize; then
  timeout 180 compute-sanitizer --tool memcheck --error-exitcode 9 $BUILD/tests/weft_gpu_prefill \
    --gtest_filter='PrefillSm90.WindowSoftcapCustom:PrefillSm90.ChunkedSplitAndEmpty' > "$OUT/memcheck.log" 2>&1
  echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/memcheck.log" | head -5
  timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 $BUILD/tests/weft_gpu_prefill \
    --gtest_filter='PrefillSm90.WindowSoftcapCustom' > "$OUT/racecheck.log" 2>&1
  echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY|PASSED|FAILED" "$OUT/racecheck.log" | head -5
fi
if has bench; then
  timeout 240 $BUILD/bench/weft-bench --group prefill ${BENCH_ARGS:-} --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1
  echo "bench rc=$?"
fi
# Same-call A/B of the sm90 pipeline variants (bit 0 overlap, bit 1 ping-pong, 15 = shipped): the
# shipped build's weft-bench and one per experimental variant.
if has variants; then
  wait  # the variant builds
  for v in 15 ${SM90_VARIANTS:-0 3}; do
    bin=$BUILD/bench/weft-bench
    [ "$v" = 15 ] || bin=$BUILD-v$v/bench/weft-bench
    [ -x "$bin" ] || { echo "variant $v: build failed (see build_v$v.log)"; continue; }
    timeout 120 "$bin" --group prefill --no-ceilings \
      ${VARIANT_ARGS:---filter prefill/sm90/causal/ragged/L4096 --filter prefill/sm90/causal/ragged/L16384} \
      --json "/tmp/variant$v.json" > "/tmp/variant$v.log" 2>&1
    python3 -c "import json,sys; d=json.load(open('/tmp/variant$v.json')); print('variant $v', ' '.join('%s=%.1f' % (c['name'].split('sm90/')[-1], c['flops']/c['ms']/1e9) for c in d['cases'] if c.get('ms')))"
  done
fi
if has fi && [ -n "${FI_PID:-}" ]; then
  wait $FI_PID
  export PYTHONPATH=/tmp/site NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  timeout 200 python3 .baselines/fi_bench.py --group prefill --variant fi-auto --budget 120 ${FI_ARGS:-} \
    --out "$OUT/fi.json" > "$OUT/fi.log" 2>&1
  echo "fi rc=$?"; tail -n 3 "$OUT/fi.log"
fi
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
def load(p):
    try: return json.load(open(p))
    except Exception: return None
b = load(os.path.join(out, "bench.json"))
fi = load(os.path.join(out, "fi.json"))
rows = {}
if b:
    gemm = b.get("ceilings", {}).get("gemm_tflops", float("nan"))
    print(f"gemm ceiling {gemm:.0f} TFLOP/s")
    for c in b.get("cases", []):
        if "ms" in c and c.get("ms"):
            tf = c.get("flops", 0) / c["ms"] / 1e9
            rows[c["name"]] = (c["ms"], tf)
fim = {}
if fi:
    for c in fi.get("cases", []):
        if c.get("ms"): fim[(c["name"], c.get("variant"))] = c["ms"]
# bench_fi.json: bench.json with extra.speedup_vs_flashinfer (FlashInfer fi-auto ms / weft ms, same
# call; the FlashInfer row of the same shape is named without the sm90/ or fa2/ part).
if b and fi:
    for c in b.get("cases", []):
        base = c["name"].replace("prefill/sm90/", "prefill/").replace("prefill/fa2/", "prefill/")
        f = fim.get((base, "fi-auto"))
        if f and c.get("ms"):
            c.setdefault("extra", {})["speedup_vs_flashinfer"] = f / c["ms"]
    json.dump(b, open(os.path.join(out, "bench_fi.json"), "w"), indent=1)
print(f"{'row':44s} {'ms':>8s} {'TFLOP/s':>8s} {'fi-auto ms':>10s} {'x fi':>6s}")
for n, (ms, tf) in rows.items():
    base = n.replace("prefill/sm90/", "prefill/").replace("prefill/fa2/", "prefill/")
    f = fim.get((base, "fi-auto"))
    print(f"{n:44s} {ms:8.3f} {tf:8.1f} {f if f else float('nan'):10.3f} {(f/ms if f else float('nan')):6.2f}")
PY
echo "total: $(( $(date +%s) - t0 )) s"
