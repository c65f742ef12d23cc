#!/usr/bin/env bash
# One device call on nvidia-h200-x2 (issue 27, world 2). Two ways to get the binaries
# (weft-bench, weft_gpu_comm, weft_gpu_tp; libweft is linked statically into them):
#   BUILD=1  build them on the device (Release, sm_90a, comm + tp; decode and pod left out),
#            against the device's NCCL. One way to the fused LSA path (the other: default mode
#            with binaries built against 2.28.3's headers, as c777940 did): the first run (ab44618)
#            carried dev-box binaries, built against NCCL 2.28.9 headers, and the device's runtime
#            is 2.28.3, so every Communicator took the NCCL fallback ("NCCL runtime 2.28.3
#            differs from the headers"); the dev box's libnccl (208 MiB, 178 MiB xz) cannot be
#            carried (64 MiB). Budget ~200 s for the build.
#   default  dev-box binaries carried stripped + xz'd in CARRY/bins.tar.xz (fallback path only
#            while the NCCL versions differ: check.log's "path" lines say which path ran). Built
#            against NCCL 2.28.3's own headers (the nvidia-nccl-cu13 2.28.3 wheel's include/, put
#            FIRST with -I: /usr/local/cuda/include holds 2.28.9's nccl.h and comes earlier as
#            -isystem) and linked without a build RPATH to the wheel, they load the device's
#            2.28.3 (c777940: /lib/x86_64-linux-gnu/libnccl.so.2; "libnccl:" in check.log) and
#            take the LSA path.
# Steps, each with its own timeout, ~400 s in all: nvidia-smi topo -m; the comm GPU tests (world 2
# = both GPUs); the TP GPU tests (world 1 + the world-2 TpLayerWorld2.*); weft-bench --group
# tp_world (JSON with WEFT_COMMIT); memcheck on small comm + TP-world filters with the time left;
# then, if time is left, the world-1 tp group's 70b/tp4 rows on GPU 0 (H200 compute for the ledger).
# Multicast stays off (the three variables below are never unset).
#   OUT=... WEFT_COMMIT=... [BUILD=1 PLAN_S=570] [CARRY=.carry-tp2] bash scripts/diag/tp-world-check.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH="/usr/local/cuda/bin:$PATH"
OUT="${OUT:-$PWD/tp-world-out}"
CARRY="${CARRY:-.carry-tp2}"
mkdir -p "$OUT"
LOG="$OUT/check.log"
t0=$SECONDS
note() { echo "[$((SECONDS - t0))s] $*" | tee -a "$LOG"; }
# PLAN_S: seconds the whole script may take (390 fits a 420 s call; with BUILD=1 give it more,
# e.g. PLAN_S=570 in a 600 s call, or the bench and memcheck get squeezed after the build).
left() { echo $((${PLAN_S:-390} - (SECONDS - t0))); }
cap() { local l; l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo $((l > 5 ? l : 5)); }
note "commit ${WEFT_COMMIT:-?}"
D=/tmp/tpw
rm -rf "$D" && mkdir -p "$D"
if [ "${BUILD:-0}" = 1 ]; then
  { cmake -S . -B build-tpw -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a -DWEFT_BUILD_TESTS=ON \
      -DWEFT_BUILD_BENCH=ON -DWEFT_WITH_COMM=ON -DWEFT_DISABLE="decode;pod" &&
    timeout 240 cmake --build build-tpw -j16 --target weft-bench weft_gpu_comm weft_gpu_tp; } > /tmp/build.log 2>&1
  rc=$?
  note "device build rc=$rc"
  [ "$rc" = 0 ] || { grep -E "error|FAILED" /tmp/build.log | head -30 | tee -a "$LOG"; exit 1; }
  cp build-tpw/bench/weft-bench build-tpw/tests/weft_gpu_comm build-tpw/tests/weft_gpu_tp "$D/"
else
  tar -xJf "$CARRY/bins.tar.xz" -C "$D" || { note "no binaries in $CARRY/bins.tar.xz (BUILD=1 builds them)"; exit 1; }
fi
note "binaries: $(ls "$D" | tr '\n' ' ')"
export LD_LIBRARY_PATH="$D:${LD_LIBRARY_PATH:-}"  # harmless today (weft is static); kept for a shared build
# Which libnccl the binaries load (RUNPATH /usr/local/cuda/lib, else the system's: on the device
# /lib/x86_64-linux-gnu, 2.28.3); weft runs LSA only when it equals the headers they were built with.
note "libnccl: $(ldd "$D/weft_gpu_comm" | grep -E 'libnccl' | tr -s ' \t' ' ')"
{ nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader; nvidia-smi topo -m; } >> "$LOG" 2>&1
env | grep -E '^(NCCL_NVLS_ENABLE|TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS)=' >> "$LOG"

run_tests() {  # name binary timeout [gtest args...]
  local name=$1 bin=$2 to=$3; shift 3
  timeout "$(cap "$to")" "$D/$bin" --gtest_brief=1 "$@" > "$OUT/$name.log" 2>&1
  note "$name rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' "$OUT/$name.log" | tr '\n' ' ')"
  grep -E '^\[  (FAILED|SKIPPED) +\]|m1 = |Failure|path|LSA unavailable' "$OUT/$name.log" | sort -u | head -20 >> "$LOG"
}
# The world-2 TP tests first: they are this call's new code.
run_tests tp_tests weft_gpu_tp 90
run_tests comm_tests weft_gpu_comm 110

# The bench: tp_world (world 2, shards tp2 and tp4) in one process.
timeout "$(cap 130)" "$D/weft-bench" --group tp_world --commit "${WEFT_COMMIT:-}" --json "$OUT/tp_world.json" \
  > "$OUT/bench.txt" 2>&1
note "weft-bench tp_world rc=$? rows=$(grep -c '"name"' "$OUT/tp_world.json" 2>/dev/null)"
grep -E "tp_world:|error" "$OUT/bench.txt" | head -5 | tee -a "$LOG"

# memcheck with what is left (small filters, capped).
MF_COMM="${MF_COMM:-CommFusedSmall.*:CommFused.SingleRankSameKernelPath}"
if [ "$(left)" -gt 30 ]; then
  timeout "$(cap 80)" compute-sanitizer --tool memcheck --print-limit 10 "$D/weft_gpu_comm" --gtest_brief=1 \
    "--gtest_filter=$MF_COMM" > "$OUT/memcheck_comm.log" 2>&1
  note "memcheck comm rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_comm.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$OUT/memcheck_comm.log" | tr '\n' ' ')"
fi
if [ "$(left)" -gt 30 ]; then
  timeout "$(cap 60)" compute-sanitizer --tool memcheck --print-limit 10 "$D/weft_gpu_tp" --gtest_brief=1 \
    "--gtest_filter=TpLayerWorld2.UnsplitFusedCallsMatchFloat64Reference" > "$OUT/memcheck_tp.log" 2>&1
  note "memcheck tp world2 rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_tp.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$OUT/memcheck_tp.log" | tr '\n' ' ')"
fi
# With time left: the world-1 group's 70b/tp4 rows on this H200 (the ledger's compute side came
# from H100): same-device compute for the comparison with the prediction.
if [ "$(left)" -gt 50 ]; then
  CUDA_VISIBLE_DEVICES=0 timeout "$(cap 90)" "$D/weft-bench" --group tp --filter llama3-70b/tp4/ --no-ceilings \
    --commit "${WEFT_COMMIT:-}" --json "$OUT/tp_w1_h200.json" > /tmp/tp_w1.txt 2>&1
  note "weft-bench tp (world 1, 70b/tp4) rc=$?"
  grep -E "^ *tp/" /tmp/tp_w1.txt | head -60 >> "$LOG"
fi
note "done"
