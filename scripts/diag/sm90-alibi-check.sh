#!/usr/bin/env bash
# One device call for ALiBi on the sm90 prefill mainloop (issue 20), with binaries built on the dev
# box (Release, CMAKE_CUDA_ARCHITECTURES=90a; no device build). BIN holds them xz-compressed:
#   weft_gpu_prefill.xz   the new tree's prefill GPU tests
#   weft-bench.new.xz     the new tree's weft-bench
#   weft-bench.old.xz     main's weft-bench (the commit before the change; BASE_COMMIT)
# Steps (in the order below: 1, 3, 4, then the sm90 regression tests PrefillSm90* and 2), each
# capped by or skipped for the budget left:
#   1. GPU tests PrefillAlibi* (TESTS_FILTER; then PrefillSm90*: SM90_FILTER) -> gpu_tests.txt
#   2. compute-sanitizer memcheck on a small ALiBi sm90 filter (MEMCHECK_FILTER) -> gpu_tests.txt
#   3. weft-bench new: the prefill/alibi/ rows (FA2 pinned, then sm90 asserted, same process:
#      extra.speedup_vs_fa2) -> bench_alibi.json
#   4. old vs new, interleaved processes (PAIRS pairs, old first then new, then new first): the
#      plain sm90 causal rows (AB_FILTERS) -> ab_all.json (every process), summarized in ab.txt
# Usage (repo root): OUT=... WEFT_COMMIT=<new> BASE_COMMIT=<old> BIN=<dir> BUDGET=280 \
#   scripts/diag/sm90-alibi-check.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=/usr/local/cuda/bin:$PATH
BIN=${BIN:?BIN: folder of the compressed binaries}
OUT="${OUT:-./alibi-out}"
BUDGET="${BUDGET:-280}"
PAIRS="${PAIRS:-2}"
MEMCHECK_FILTER="${MEMCHECK_FILTER:-PrefillAlibiSm90Small.CustomMask:PrefillAlibiSm90Small.ZeroSlopesMatchNoAlibiBitwise}"
AB_FILTERS="${AB_FILTERS:---filter prefill/sm90/causal/ragged/L8192 --filter prefill/sm90/causal/ragged/L16384 --filter prefill/sm90/causal/paged/L16384 --filter prefill/sm90/d256/causal/ragged/L8192}"
T0=$SECONDS
say() { echo "=== [$((SECONDS - T0))s] $*" | tee -a "$OUT/steps.log"; }
left() { echo $((BUDGET - (SECONDS - T0))); }
mkdir -p "$OUT" /tmp/alibi-bin
unxz_to() {  # <file.xz> <destination>: xz if present, else Python's lzma
  if command -v xz > /dev/null; then xz -dc "$1" > "$2"; else
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"
  fi && chmod +x "$2"
}
for b in weft_gpu_prefill weft-bench.new weft-bench.old; do
  unxz_to "$BIN/$b.xz" "/tmp/alibi-bin/$b" || { say "unpack $b failed"; exit 1; }
done
cuda_libs=$(dirname "$(find /usr/local/cuda* -name 'libcudart.so.*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=${cuda_libs}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
ldd /tmp/alibi-bin/* | grep "not found" && exit 1
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  echo "new ${WEFT_COMMIT:-?} old ${BASE_COMMIT:-?}"; } | tee "$OUT/env.txt"

# Order: the ALiBi tests, the ALiBi rows, the old/new A/B, the sm90 regression tests, memcheck
# (each capped by the budget left).
cap() { local t=$(( $(left) - $2 )); [ $t -gt $1 ] && t=$1; [ $t -lt 10 ] && t=10; echo $t; }  # min(cap, left - reserve)
run_tests() {  # <filter> <timeout>
  { echo "## $1"
    timeout "$2" /tmp/alibi-bin/weft_gpu_prefill --gtest_filter="$1" 2>&1 |
      grep -E "^\[ +(OK|FAILED|PASSED|SKIPPED) |tests ran|FAILED|Failure|error|Expected|Which is|actual|max" | head -300
    echo "gpu tests rc ${PIPESTATUS[0]}"; } >> "$OUT/gpu_tests.txt" 2>&1
  tail -3 "$OUT/gpu_tests.txt"
}
say "tests alibi"
run_tests "${TESTS_FILTER:-PrefillAlibi*}" "$(cap 90 150)"
if [ "$(left)" -gt 120 ]; then
  say "bench alibi"
  timeout 45 /tmp/alibi-bin/weft-bench.new --group prefill --filter prefill/alibi/ --no-ceilings \
    --commit "${WEFT_COMMIT:-?}" --json "$OUT/bench_alibi.json" > "$OUT/bench_alibi.log" 2>&1
  echo "rc $?" >> "$OUT/bench_alibi.log"
  tail -10 "$OUT/bench_alibi.log"
fi
i=0
while [ "$i" -lt "$PAIRS" ] && [ "$(left)" -gt 110 ]; do
  order="old new"; [ $((i % 2)) -eq 1 ] && order="new old"
  for which in $order; do
    c=${WEFT_COMMIT:-?}; [ "$which" = old ] && c=${BASE_COMMIT:-?}
    # shellcheck disable=SC2086
    timeout 40 /tmp/alibi-bin/weft-bench.$which --group prefill $AB_FILTERS --no-ceilings --commit "$c" \
      --json "$OUT/ab_${which}_$i.json" > /dev/null 2>&1 || say "ab $which $i rc $?"
  done
  say "ab pair $i"
  i=$((i + 1))
done
python3 - "$OUT" > "$OUT/ab.txt" <<'EOF'
import glob, json, statistics, sys, os
out = sys.argv[1]
rows = {}
for f in sorted(glob.glob(os.path.join(out, "ab_*.json"))):
    which = os.path.basename(f).split("_")[1]
    d = json.load(open(f))
    for r in d.get("cases", []):
        if r.get("ms"):
            rows.setdefault(r["name"], {}).setdefault(which, []).append(r["ms"])
print("row  old_ms(median, runs)  new_ms(median, runs)  new/old")
for name, v in sorted(rows.items()):
    o, n = v.get("old", []), v.get("new", [])
    if o and n:
        mo, mn = statistics.median(o), statistics.median(n)
        print(f"{name}  {mo:.4f} {['%.4f' % x for x in o]}  {mn:.4f} {['%.4f' % x for x in n]}  {mn / mo:.4f}")
EOF
cat "$OUT/ab.txt"
# One JSON of all A/B processes (the call brings back at most 8 files).
python3 -c 'import glob, json, os, sys
o = sys.argv[1]
json.dump({os.path.basename(f): json.load(open(f)) for f in sorted(glob.glob(os.path.join(o, "ab_*_*.json")))},
          open(os.path.join(o, "ab_all.json"), "w"))' "$OUT" && rm -f "$OUT"/ab_old_*.json "$OUT"/ab_new_*.json
say "tests sm90 regression"
[ "$(left)" -gt 30 ] && run_tests "${SM90_FILTER:-PrefillSm90*}" "$(cap 100 25)"
if [ "$(left)" -gt 25 ]; then
  say memcheck
  { echo "## memcheck $MEMCHECK_FILTER"
    timeout "$(cap 60 5)" compute-sanitizer --tool memcheck /tmp/alibi-bin/weft_gpu_prefill \
      --gtest_filter="$MEMCHECK_FILTER" 2>&1 | grep -E "ERROR SUMMARY|tests ran|PASSED|FAILED|SKIPPED \]"
    echo "memcheck rc ${PIPESTATUS[0]}"; } >> "$OUT/gpu_tests.txt" 2>&1
  tail -3 "$OUT/gpu_tests.txt"
fi
say done
