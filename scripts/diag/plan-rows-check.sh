#!/usr/bin/env bash
# Diagnostic (device, issue 19 "Planning is cheap"): dev-box binaries carried xz-compressed in one folder
# (no device build): old = main's weft-bench / weft-plan-bench, new = the branch's; new weft_gpu_decode.
#   1. the decode GPU tests that re-plan (staging slots, graphs, empty steps; not the prefix-sharing
#      ones), new build; and, when the folder has gpu_prefill.xz, the prefill GPU tests that re-plan
#      (PREFILL_F, PrefillSmall.* and the graph / empty-step ones; PREFILL_TESTS_S seconds);
#   2. weft-plan-bench old/new interleaved, 3 pairs: prefill b64 and Llama-3-8B decode b1 (+b128)
#      planner + serialize on this CPU; then the new one's --copy rows of b1 (CUDA calls apart),
#      of prefill b64 (plan + copy + event) and the staging/<n>KiB copy-cost sweep;
#   3. weft-bench plan rows (prefill/plan/b64, decode/plan/llama3-8b/b{1,256}/kv4096: extra.plan_us),
#      old/new processes interleaved, 3 pairs.
# Writes $OUT: log.txt (machine, tests, plan bench), rows_{old,new}_{1,2,3}.json.
# Usage (repo root of /work/main's tree): OUT=... WEFT_COMMIT=<new> BASE_COMMIT=<old> <dir>/plan-rows-check.sh <dir>
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
D=${1:?usage: plan-rows-check.sh <carried folder>}
OUT="${OUT:-./plan-rows-out}"
mkdir -p "$OUT" /tmp/pp
LOG="$OUT/log.txt"
SECONDS=0
note() { echo "[$SECONDS s] $*" | tee -a "$LOG"; }
{
  lscpu | grep -E "Model name|^CPU\(s\)|MHz|L2|L3"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  uptime
} >> "$LOG" 2>&1
note "new ${WEFT_COMMIT:-?} old ${BASE_COMMIT:-?}"
unxz() {  # xz, or Python's lzma where the machine has no xz
  xz -dc "$1" 2>/dev/null || python3 -c 'import lzma,sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' "$1"
}
for f in wb_old wb_new gpu_decode; do unxz "$D/$f.xz" > /tmp/pp/$f && chmod +x /tmp/pp/$f; done
cp "$D/pb_old" "$D/pb_new" /tmp/pp/ && chmod +x /tmp/pp/pb_old /tmp/pp/pb_new
note "unpacked: $(ls /tmp/pp | tr '\n' ' ')"

F='DecodeSmall.*:Decode.GraphReplayAfterReplan:Decode.RepeatedRunsBitwiseIdenticalWithSplit:DecodeHardening*:DecodeRouteSmall.*:DecodeBlockTableSmall.*:-DecodeSmall.SharePrefixes*:DecodeSmall.WorkPlanPacksMatchReference:DecodeSmall.CascadeLevelsMatchReference'
timeout "${TESTS_S:-75}" /tmp/pp/gpu_decode --gtest_brief=1 "--gtest_filter=$F" > /tmp/pp/gpu.log 2>&1
note "weft_gpu_decode rc $? $(grep -E '^\[  (PASSED|FAILED)|tests from .* ran' /tmp/pp/gpu.log | tr '\n' ' ')"
grep -E "FAILED|Failure|error" /tmp/pp/gpu.log | head -20 >> "$LOG"
if [ -f "$D/gpu_prefill.xz" ]; then
  unxz "$D/gpu_prefill.xz" > /tmp/pp/gpu_prefill && chmod +x /tmp/pp/gpu_prefill
  PF="${PREFILL_F:-PrefillSmall.*:PrefillHardening*}"
  timeout "${PREFILL_TESTS_S:-60}" /tmp/pp/gpu_prefill --gtest_brief=1 "--gtest_filter=$PF" > /tmp/pp/gpu_prefill.log 2>&1
  note "weft_gpu_prefill rc $? $(grep -E '^\[  (PASSED|FAILED)|tests from .* ran' /tmp/pp/gpu_prefill.log | tr '\n' ' ')"
  grep -E "FAILED|Failure|error" /tmp/pp/gpu_prefill.log | head -20 >> "$LOG"
fi

for i in 1 2 3; do
  for v in old new; do
    note "plan-bench $v $i"
    /tmp/pp/pb_$v --min-ms 300 --filter prefill/b64/q64-448 >> "$LOG" 2>&1
    /tmp/pp/pb_$v --min-ms 300 --filter decode/llama3-8b/uniform/b1 >> "$LOG" 2>&1
  done
done
note "plan-bench new --copy (b1)"
/tmp/pp/pb_new --min-ms 300 --copy --filter decode/llama3-8b/uniform/b1 >> "$LOG" 2>&1
note "plan-bench new --copy (prefill b64, staging sweep)"
/tmp/pp/pb_new --min-ms 300 --copy --filter prefill/b64/q64-448 >> "$LOG" 2>&1
/tmp/pp/pb_new --min-ms 200 --copy --filter staging >> "$LOG" 2>&1

for i in 1 2 3; do
  for v in old new; do
    c=${BASE_COMMIT:-old}; [ "$v" = new ] && c=${WEFT_COMMIT:-new}
    timeout 60 /tmp/pp/wb_$v --group decode,prefill --filter prefill/plan/b64 --filter decode/plan/llama3-8b/b1/kv4096 \
      --filter decode/plan/llama3-8b/b256/kv4096 --no-ceilings --commit "$c" --json "$OUT/rows_${v}_$i.json" > /tmp/pp/wb.log 2>&1
    note "weft-bench $v $i rc $? $(grep -ciE 'error' /tmp/pp/wb.log) error lines"
    grep -iE "error" /tmp/pp/wb.log | head -5 >> "$LOG"
  done
done
note "done"
