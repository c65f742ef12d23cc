#!/usr/bin/env bash
# One device call that checks main after a session's branches land: gpu-check (build, every host
# and GPU test) without its sanitizer and bench steps, then memcheck on the small tests of the
# suites that changed and racecheck on the decode work-plan tests, the Python package's pytest from
# a wheel built on the 2-core machine (in parallel with the build), and the serving harness
# (router calibrated on seed 20260622, reported on the held-out seed 20260623, FlashInfer's decode
# wrapper on the same steps). At most 8 files come back: gpu-check.log, summary.txt, python.log,
# san.log and the four serve JSONs.
#   OUT=... WEFT_COMMIT=... [PYSITE_TAR=pysite.tar.xz] [KIT=../.baselines] [BUDGET=440] scripts/diag/main-check.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH="/usr/local/cuda/bin:$PATH"
OUT="${OUT:-$PWD/main-check-out}"
mkdir -p "$OUT"
KIT="$(cd "${KIT:-../.baselines}" 2>/dev/null && pwd)"
export WEFT_DISABLE="${WEFT_DISABLE:-comm;tp;norm}"
t0=$SECONDS
note() { echo "[$((SECONDS - t0))s] $*" | tee -a "$OUT/san.log"; }
if [ -n "$KIT" ]; then
  ( python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/fisite \
      "$KIT"/whl/*.whl > /tmp/fi_install.log 2>&1; echo "rc=$?" >> /tmp/fi_install.log ) &
fi
if [ -f "${PYSITE_TAR:-pysite.tar.xz}" ]; then
  ( mkdir -p /tmp/ps && tar -xJf "${PYSITE_TAR:-pysite.tar.xz}" -C /tmp/ps && site=$(find /tmp/ps -mindepth 1 -maxdepth 1 -type d | head -1) &&
    cd python/tests && PYTHONPATH="$site" PYTHONDONTWRITEBYTECODE=1 timeout 150 python3 -m pytest -q -rs \
      -p no:cacheprovider > "$OUT/python.log" 2>&1; echo "pytest rc=$?" >> "$OUT/python.log" ) &
fi
OUT=/tmp/gc bash scripts/gpu-check.sh --no-torch --skip-sanitizer --skip-bench --budget "${BUDGET:-440}"
cp /tmp/gc/gpu-check.log /tmp/gc/summary.txt "$OUT"/ 2>/dev/null
T=build-gpu/tests
F='DecodeSmall.SplitKVWithEmptyRequests:DecodeSmall.SharePrefixesRandomForests:DecodeSmall.SharePrefixesNoSharingFallsBack:DecodeWorkQueueSmall.MatchesReference:DecodeRouteSmall.*:PrefillSmall.SplitKVChunk:PrefillSm90.ChunkedSplitAndEmpty:PrefillFp8Sm90Small.*:PrefillFp8Small.EdgeShapesAndVariants:PodEdges.*'
for s in decode prefill pod; do
  timeout 60 compute-sanitizer --tool memcheck --print-limit 10 "$T/weft_gpu_$s" --gtest_brief=1 "--gtest_filter=$F" > /tmp/san_$s.log 2>&1
  note "memcheck weft_gpu_$s rc=$? $(grep -E 'ERROR SUMMARY' /tmp/san_$s.log | tail -1) $(grep -E '^\[  (PASSED|FAILED)' /tmp/san_$s.log | tr '\n' ' ')"
done
timeout 60 compute-sanitizer --tool racecheck --print-limit 10 "$T/weft_gpu_decode" --gtest_brief=1 \
  '--gtest_filter=DecodeSmall.SplitKVWithEmptyRequests:DecodeWorkQueueSmall.MatchesReference:DecodeSmall.SharePrefixesNoSharingFallsBack' > /tmp/race.log 2>&1
note "racecheck weft_gpu_decode rc=$? $(grep -E 'RACECHECK SUMMARY' /tmp/race.log | tail -1)"
B=build-gpu/bench/weft-serve-sim
if [ -x "$B" ]; then
  timeout 60 "$B" --calibrate "$OUT/router_h100.json" --seed 20260622 --steps 40 --out "$OUT/serve_calibration.json" > /tmp/cal.log 2>&1
  note "calibration rc=$?"
  timeout 60 "$B" --router "$OUT/router_h100.json" --seed 20260623 --steps 40 --out "$OUT/serve_heldout.json" > /tmp/held.log 2>&1
  note "held-out rc=$?"
  python3 - "$OUT/serve_heldout.json" <<'PY' 2>&1 | tee -a "$OUT/san.log"
import json, sys
d = json.load(open(sys.argv[1]))
for f in d["families"]:
    print(f"{f['name']:12s} best {f['best_fixed']:18s} {f['best_fixed_wall_us_mean']:8.1f} us  router {f.get('router_wall_us_mean', 0):8.1f} us"
          f"  ratio {f.get('router_vs_best_fixed', 0):.3f}  decide p50 {f.get('router_decide_us_p50')}  picks {f.get('picks')}  ok {all(c['ok'] for c in f['check'].values())}")
print([c for c in d["cases"] if c["name"] == "serve/summary"])
PY
  "$B" --dump-steps /tmp/steps.json --seed 20260623 --steps 40 > /dev/null 2>&1
  if grep -q "rc=0" /tmp/fi_install.log 2>/dev/null; then
    PYTHONPATH=/tmp/fisite timeout 100 python3 bench/serve/fi_serve.py /tmp/steps.json "$OUT/serve_heldout.json" \
      --out "$OUT/serve_flashinfer.json" --kit "$KIT" > /tmp/fi_serve.log 2>&1
    note "flashinfer serve rc=$? $(tail -1 /tmp/fi_serve.log)"
    grep -E "^\[" /tmp/fi_serve.log >> "$OUT/san.log"
  fi
fi
wait
note "done"
