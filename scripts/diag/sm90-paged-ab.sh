#!/usr/bin/env bash
# Diagnostic (device): same-call A/B of two dev-box builds of the Hopper prefill kernel (issue 20,
# paged rows) with correctness of the new one, no device build. BIN holds (xz, stripped; Release,
# CMAKE_CUDA_ARCHITECTURES=90a, static libweft):
#   weft-bench.old.xz weft-bench.new.xz   the two trees' weft-bench
#   weft_gpu_prefill.new.xz               the new tree's prefill GPU suite (all of it)
#   weft_gpu_decode.new.xz                the new tree's decode GPU tests (DECODE_FILTER; step skipped without it)
# Order: the prefill suite, the decode filter, memcheck and racecheck on SAN_FILTER, then PASSES
# alternating A/B passes (old, new, new, old, ...) over AB_FILTERS (weft-bench rows), then the
# peers when asked: KIT (FlashInfer kit folder: whl/, aot/, fi_bench.py; its wheels install in the
# background from the start) runs fi_bench.py --variant fi-auto (its sm90 backend) on FI_ARGS,
# SDPA_FILTERS runs bench/sdpa_prefill.py --backend cudnn (torch SDPA) on those rows, and
# bench/sm90_compare.py writes the new tree's last pass with the peer ratios. Every step starts
# only before DEADLINE seconds (from the start). $OUT: ab.json (ab_table.py: every pass, rows
# named <tree>/<pass>/<row>), fi.json, sdpa.json, compare.json, console.txt, logs.tar.gz.
# Tree labels in ab.json: OLD_NAME (main), NEW_NAME (vwarp).
# Usage (repo root of the device copy): OUT=... WEFT_COMMIT=<new> BASE_COMMIT=<old> BIN=<dir> \
#   PASSES=3 DEADLINE=330 [KIT=.baselines FI_ARGS='--filter causal/' SDPA_FILTERS='causal/L'] \
#   scripts/diag/sm90-paged-ab.sh
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
BIN=${BIN:?BIN: folder of the compressed binaries}
OUT=${OUT:-./ab-out}
LOG=/tmp/pab-logs
D=/tmp/pab-bin
mkdir -p "$OUT" "$LOG" "$D"
exec > >(tee "$OUT/console.txt") 2>&1
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
DEADLINE=${DEADLINE:-330}
room() { local left=$(( DEADLINE - $(el) )); if [ "$left" -lt 10 ]; then echo "skip $1: deadline (t=$(el) s)"; return 1; fi; echo "== $1 (t=$(el) s)"; }
cap() { local left=$(( DEADLINE + 20 - $(el) )); [ "$1" -lt "$left" ] && echo "$1" || echo "$left"; }
echo "new ${WEFT_COMMIT:-?} old ${BASE_COMMIT:-?}"
OLD_NAME=${OLD_NAME:-main}
NEW_NAME=${NEW_NAME:-vwarp}
if [ -n "${KIT:-}" ]; then
  ( python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      "$KIT"/whl/*.whl > "$LOG/fi_install.log" 2>&1; echo "rc=$?" >> "$LOG/fi_install.log" ) &
  FI_PID=$!
fi
for f in weft-bench.old weft-bench.new weft_gpu_prefill.new weft_gpu_decode.new; do
  if [ -f "$BIN/$f.xz" ]; then
    if command -v xz > /dev/null; then xz -dc "$BIN/$f.xz" > "$D/$f"; else
      python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$BIN/$f.xz" "$D/$f"
    fi
    chmod +x "$D/$f"
  fi
done
echo "unpacked (t=$(el) s)"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
if room "prefill suite"; then
  timeout "$(cap ${SUITE_CAP:-130})" "$D/weft_gpu_prefill.new" --gtest_filter="${PREFILL_FILTER:-*}" > "$LOG/prefill_suite.log" 2>&1
  echo "prefill suite rc=$?"
  grep -E "^\[ +(OK|FAILED|SKIPPED) |tests ran|PASSED|FAILED" "$LOG/prefill_suite.log" | tail -70
fi
if [ -x "$D/weft_gpu_decode.new" ] && room "decode filter"; then
  timeout "$(cap 60)" "$D/weft_gpu_decode.new" --gtest_filter="${DECODE_FILTER:-DecodeSmall.SharePrefixes*}" > "$LOG/decode.log" 2>&1
  echo "decode rc=$?"
  grep -E "^\[ +(OK|FAILED|SKIPPED) |tests ran|PASSED|FAILED" "$LOG/decode.log" | tail -20
fi
SAN=${SAN_FILTER:-PrefillSm90.BatchesPagedAndRagged:PrefillSm90.ChunkedSplitAndEmpty}
for tool in memcheck racecheck; do
  room "$tool" || continue
  timeout "$(cap ${SAN_CAP:-70})" compute-sanitizer --tool $tool "$D/weft_gpu_prefill.new" --gtest_filter="$SAN" > "$LOG/$tool.log" 2>&1
  echo "$tool rc=$?"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Race reported|tests ran|PASSED|FAILED" "$LOG/$tool.log" | tail -6
done
AB_FILTERS=${AB_FILTERS:-prefill/sm90/causal/ragged/ prefill/sm90/causal/paged/ prefill/sm90/causal/paged128/ prefill/sm90/chunked/ prefill/mixed prefill/sm90/d256/causal/paged/L8192 prefill/sm90/d64/causal/paged/L8192}
AF=""; for f in $AB_FILTERS; do AF="$AF --filter $f"; done
nvidia-smi dmon -s pc -d 1 > "$LOG/dmon.log" 2>&1 &
DMON=$!
for pass in $(seq 1 "${PASSES:-3}"); do
  order="old new"; [ $((pass % 2)) -eq 0 ] && order="new old"
  for b in $order; do
    room "ab $b $pass" || break 2
    tree=$OLD_NAME; [ $b = new ] && tree=$NEW_NAME
    timeout "$(cap 75)" "$D/weft-bench.$b" --group prefill --no-ceilings $AF ${AB_ARGS:-} \
      --commit "$([ $b = new ] && echo "${WEFT_COMMIT:-}" || echo "${BASE_COMMIT:-}")" \
      --json "$LOG/ab_${tree}_$pass.json" > "$LOG/ab_${tree}_$pass.log" 2>&1
    echo "ab $tree $pass rc=$? (t=$(el) s)"
  done
done
kill "$DMON" 2>/dev/null
if [ -n "${KIT:-}" ]; then
  wait "$FI_PID"; echo "fi install: $(tail -1 "$LOG/fi_install.log") (t=$(el) s)"
  if room "flashinfer"; then
    PYTHONPATH=/tmp/site timeout "$(cap ${FI_CAP:-120})" python3 "$KIT/fi_bench.py" --group prefill --variant fi-auto \
      --aot "$KIT/aot" ${FI_ARGS:-} --out "$LOG/fi_1.json" > "$LOG/fi_bench.log" 2>&1
    echo "fi_bench rc=$? (t=$(el) s)"; grep -E "smoke|AOT|error|Error" "$LOG/fi_bench.log" | head -8
  fi
fi
if [ -n "${SDPA_FILTERS:-}" ] && room "sdpa cudnn"; then
  SF=""; for f in $SDPA_FILTERS; do SF="$SF --filter $f"; done
  timeout "$(cap ${SDPA_CAP:-90})" python3 bench/sdpa_prefill.py --backend cudnn $SF --budget "${SDPA_BUDGET:-60}" \
    --out "$OUT/sdpa.json" > "$LOG/sdpa.log" 2>&1
  echo "sdpa rc=$? (t=$(el) s)"; tail -3 "$LOG/sdpa.log"
fi
python3 scripts/diag/ab_table.py "$LOG" "$OUT/ab.json" "$OUT/fi.json" "$OLD_NAME"
last=$(ls "$LOG"/ab_"$NEW_NAME"_*.json 2>/dev/null | sort -t_ -k3 -n | tail -1)
if [ -n "$last" ] && { [ -f "$LOG/fi_1.json" ] || [ -f "$OUT/sdpa.json" ]; }; then
  python3 bench/sm90_compare.py --weft "$last" --fi "$LOG/fi_1.json" --sdpa "$OUT/sdpa.json" --out "$OUT/compare.json"
fi
echo "done (t=$(el) s)"
tar -czf "$OUT/logs.tar.gz" -C "$LOG" . 2>/dev/null
