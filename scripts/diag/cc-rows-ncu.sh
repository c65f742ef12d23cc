#!/usr/bin/env bash
# Diagnostic (device, one call): where the forced CUDA-core decode rows at GQA groups 2-4 lose
# 3-4% against 5427bc0 (issue 19, perf-notes-decode.md "Forced CUDA-core rows ..."). No device
# build: dev-box Release sm_90a binaries (core-ab.sh's flags), xz-compressed in BIN:
#   weft-bench.old.xz + libweft.so.0.old.xz   5427bc0 (shared libweft)
#   weft-bench.<tag>.xz                        each other tree (static libweft), TAGS="new ..."
# 0. TESTS_FILTER (optional, with weft_gpu_decode.xz in BIN): that tree's decode GPU tests
#    (TESTS_TIMEOUT s), then MEMCHECK_FILTER under compute-sanitizer memcheck -> gpu_tests.txt.
# 1. Nsight Compute (--set full, --clock-control none) on one launch (the 3rd) of the CUDA-core
#    kernel of each NCU_ROWS row, per tree: details / raw / SASS-source CSV pages -> ncu.tar.gz.
# 2. Same-call A/B of AB_ROWS (core-ab.sh's interleaved processes, same rows): old vs each tag.
# NCU_ROWS=- skips step 1.
# Usage (device, folder holding this script): OUT=... BIN=... TAGS="new" scripts/diag/cc-rows-ncu.sh
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/ccrows-out}
BIN=${BIN:?BIN}
TAGS=${TAGS:-new}
DEADLINE=${DEADLINE:-270}
NCU_ROWS=${NCU_ROWS:-decode/path/cc/llama3-8b/b32/kv4096 decode/hdim/path/cc/d64-32x8/b32/kv4096}
AB_ROWS=${AB_ROWS:-decode/path/cc/llama3-8b/b32/kv4096 decode/path/tc/llama3-8b/b32/kv4096 decode/hdim/path/cc/d64-32x8/b128/kv4096 decode/hdim/path/tc/d64-32x8/b128/kv4096}
PAIRS=${PAIRS:-3}
mkdir -p "$OUT" /tmp/cc/ncu /tmp/cc/bin
exec > >(tee "$OUT/console.txt") 2>&1
SECONDS=0
unxz_to() { xz -dc "$1" > "$2" 2>/dev/null || python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],"wb"))' "$1" "$2"; chmod +x "$2"; }
unxz_to "$BIN/weft-bench.old.xz" /tmp/cc/bin/weft-bench.old
unxz_to "$BIN/libweft.so.0.old.xz" /tmp/cc/bin/libweft.so.0
for t in $TAGS; do unxz_to "$BIN/weft-bench.$t.xz" /tmp/cc/bin/weft-bench.$t; done
cuda_libs=$(dirname "$(find /usr/local/cuda* -name 'libcudart.so.*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=/tmp/cc/bin:${cuda_libs}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
ldd /tmp/cc/bin/weft-bench.* | grep "not found" && exit 1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | tail -1)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
echo "ncu: $NCU $($NCU --version | tail -1)"
if [ -n "${TESTS_FILTER:-}" ] && [ -f "$BIN/weft_gpu_decode.xz" ]; then
  unxz_to "$BIN/weft_gpu_decode.xz" /tmp/cc/bin/weft_gpu_decode
  { timeout "${TESTS_TIMEOUT:-80}" /tmp/cc/bin/weft_gpu_decode --gtest_filter="$TESTS_FILTER" 2>&1 |
      grep -E "^\[ +(OK|FAILED|PASSED|SKIPPED) |tests ran|FAILED|Failure"
    echo "gpu tests rc ${PIPESTATUS[0]} ($SECONDS s)"
    if [ -n "${MEMCHECK_FILTER:-}" ]; then
      timeout "${MEMCHECK_TIMEOUT:-60}" compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/cc/bin/weft_gpu_decode \
        --gtest_filter="$MEMCHECK_FILTER" 2>&1 | grep -E "ERROR SUMMARY|tests ran|PASSED|FAILED|OK \]"
      echo "memcheck rc ${PIPESTATUS[0]} ($SECONDS s)"
    fi
  } > "$OUT/gpu_tests.txt" 2>&1
  tail -6 "$OUT/gpu_tests.txt"
fi
room() { [ $((DEADLINE - SECONDS)) -ge "$1" ] || { echo "skip $2: deadline ($SECONDS s)"; return 1; }; }

# 1. ncu, old and each tag per row (old first)
[ "$NCU_ROWS" = - ] && NCU_ROWS=""
for row in $NCU_ROWS; do
  for t in old $TAGS; do
    room 60 "ncu $t $row" || break 2
    tag=${t}_$(echo "$row" | sed 's#decode/##; s#/#_#g')
    timeout 75 "$NCU" --clock-control none --set full --import-source no -k regex:decode_cc_kernel \
      --launch-skip 2 --launch-count 1 -o /tmp/cc/ncu/$tag \
      /tmp/cc/bin/weft-bench.$t --group decode --no-ceilings --reps 2 --filter "$row" > /tmp/cc/ncu/$tag.log 2>&1
    echo "ncu $tag rc=$? ($SECONDS s)"
    if [ -f /tmp/cc/ncu/$tag.ncu-rep ]; then
      r=/tmp/cc/ncu/$tag
      "$NCU" -i $r.ncu-rep --page details --csv > $r.details.csv 2> $r.err
      "$NCU" -i $r.ncu-rep --page raw --csv > $r.raw.csv 2>> $r.err
      "$NCU" -i $r.ncu-rep --page source --csv --print-source sass > $r.sass.csv 2>> $r.err
      grep -E '"Duration"|"Executed Instructions"|"Warp Cycles Per Issued Instruction"|"Registers Per Thread"|"Grid Size"|"Dynamic Shared Memory Per Block"|"Issue Slots Busy"|"Achieved Occupancy"' $r.details.csv | cut -d, -f12- | tr '\n' ' '; echo
    fi
  done
done
[ -n "$NCU_ROWS" ] && tar -czf "$OUT/ncu.tar.gz" -C /tmp/cc/ncu $(cd /tmp/cc/ncu && ls *.csv *.log 2>/dev/null)

# 2. A/B: old, tag1, tag2, ... interleaved, PAIRS rounds, the same rows in every process
filters=()
for r in $AB_ROWS; do filters+=(--filter "$r"); done
for i in $(seq 1 "$PAIRS"); do
  for t in old $TAGS; do
    room 25 "ab $t $i" || break 2
    timeout 60 /tmp/cc/bin/weft-bench.$t --group decode --no-ceilings "${filters[@]}" --commit "$t" \
      --json /tmp/cc/ab_${t}_$i.json > /tmp/cc/ab_${t}_$i.log 2>&1
    echo "ab $t $i rc=$? ($SECONDS s): $(grep -cE '^decode/' /tmp/cc/ab_${t}_$i.log) rows"
  done
done
python3 - "$OUT" $TAGS <<'PY'
import glob, json, re, statistics, sys
out, tags = sys.argv[1], sys.argv[2:]
row = re.compile(r"^(decode/\S+)\s+([0-9.]+)\s")
ms = {}
for t in ["old"] + tags:
    for log in sorted(glob.glob(f"/tmp/cc/ab_{t}_*.log")):
        for line in open(log):
            m = row.match(line)
            if m: ms.setdefault(t, {}).setdefault(m.group(1), []).append(float(m.group(2)))
res = {"tags": tags, "rows": {}}
for r in ms.get("old", {}):
    o = statistics.median(ms["old"][r])
    e = {"old_ms": o, "old_runs_ms": ms["old"][r]}
    line = f"{r:50s} old {o:.4f}"
    for t in tags:
        if r in ms.get(t, {}):
            n = statistics.median(ms[t][r])
            e[f"{t}_ms"], e[f"{t}_runs_ms"], e[f"speedup_{t}_vs_old"] = n, ms[t][r], o / n
            line += f" | {t} {n:.4f} x{o / n:.3f}"
    res["rows"][r] = e
    print(line)
json.dump(res, open(f"{out}/ab.json", "w"), indent=1)
PY
cp /tmp/cc/ab_*_1.json "$OUT"/ 2>/dev/null | head -0
echo "done ($SECONDS s)"
