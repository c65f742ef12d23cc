#!/usr/bin/env bash
# Diagnostic (device, issue 19 "Planning is cheap", the decode launch modes): dev-box binaries carried
# xz-compressed in one folder (no device build): old = main's weft-bench / weft-plan-bench, new = the
# branch's (+ weft_gpu_decode). One call, in this order (the timed parts first):
#   1. the host: CPU model, clocks as /proc/cpuinfo reports them, cgroup CPU limit, steal time;
#   2. weft-plan-bench old/new interleaved, 3 pairs: decode b1/b128/b256 plan + serialize and prefill
#      b64 (plan + serialize and its parts); the new one's cpu/ calibration rows, unpinned and pinned
#      to one CPU (taskset), under /usr/bin/time -v (page faults, context switches);
#   3. weft-bench old/new interleaved, 3 pairs: the plan rows (extra.plan_us, plan_allocs) and the
#      decode GPU-time rows of each launch mode (b1 kv1024/4096/32768, Llama-2-7B b1, b128);
#   4. compute-sanitizer memcheck on a small decode filter (new);
#   5. the whole weft_gpu_decode suite (new), until DEADLINE seconds.
# PLANBENCH=0 skips step 2; ALLOC_TRACE=1 first prints the call stacks of the allocations in the new
# weft-bench's warm decode plan() calls (WEFT_BENCH_ALLOC_TRACE, stderr -> log.txt); PAIRS (3).
# Writes $OUT: log.txt, rows_{old,new}_<i>.json, gpu_decode.txt.
# Usage (repo root): OUT=... WEFT_COMMIT=<new> BASE_COMMIT=<old> DEADLINE=280 <dir>/recs-check.sh <dir>
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=/usr/local/cuda/bin:$PATH
D=${1:?usage: recs-check.sh <carried folder>}
OUT="${OUT:-./recs-out}"
DEADLINE=${DEADLINE:-280}
mkdir -p "$OUT" /tmp/rc
LOG="$OUT/log.txt"
SECONDS=0
note() { echo "[$SECONDS s] $*" | tee -a "$LOG"; }
unxz_to() {  # xz, or Python's lzma where the machine has no xz
  { xz -dc "$1" 2>/dev/null || python3 -c 'import lzma,sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' "$1"; } > "$2" &&
    chmod +x "$2"
}
cuda_libs=$(dirname "$(find /usr/local/cuda* -name 'libcudart.so.*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=${cuda_libs}:/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for f in wb_old wb_new pb_old pb_new gpu_decode; do unxz_to "$D/$f.xz" /tmp/rc/$f || note "unpack $f failed"; done
note "new ${WEFT_COMMIT:-?} old ${BASE_COMMIT:-?}; unpacked: $(ls /tmp/rc | tr '\n' ' ')"
ldd /tmp/rc/wb_new /tmp/rc/gpu_decode | grep "not found" >> "$LOG"
{
  echo "## host"
  lscpu | grep -E "Model name|^CPU\(s\)|MHz|L1d|L2|L3|Hypervisor|Thread|Socket|NUMA node\(s\)"
  grep -m4 MHz /proc/cpuinfo
  cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>&1 | head -2
  echo "cgroup cpu.max: $(cat /sys/fs/cgroup/cpu.max 2>&1)"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  uptime
  echo "stat before: $(head -1 /proc/stat)"
} >> "$LOG" 2>&1

if [ "${PLANBENCH:-1}" = 1 ]; then
note "plan-bench, old/new interleaved"
for i in 1 2 3; do
  for v in old new; do
    echo "### plan-bench $v $i" >> "$LOG"
    /tmp/rc/pb_$v --min-ms 250 --filter decode/llama3-8b/uniform/b >> "$LOG" 2>&1
    /tmp/rc/pb_$v --min-ms 250 --filter prefill/b64/q64-448 >> "$LOG" 2>&1
  done
done
note "cpu rows (new), unpinned under time -v, then pinned to CPU 1"
/usr/bin/time -v /tmp/rc/pb_new --min-ms 250 --filter cpu > /tmp/rc/cpu.txt 2> /tmp/rc/time.txt
cat /tmp/rc/cpu.txt >> "$LOG"
grep -E "Maximum resident|page faults|context switches|Elapsed|Percent of CPU" /tmp/rc/time.txt >> "$LOG"
taskset -c 1 /tmp/rc/pb_new --min-ms 250 --filter cpu >> "$LOG" 2>&1
note "prefill b64 pinned (new)"
taskset -c 1 /tmp/rc/pb_new --min-ms 250 --filter prefill/b64/q64-448 >> "$LOG" 2>&1
echo "stat after: $(head -1 /proc/stat)" >> "$LOG"
fi

ROWS=(--filter prefill/plan/b64 --filter decode/plan/llama3-8b/b1/kv4096 --filter decode/plan/llama3-8b/b256/kv4096
  --filter decode/llama3-8b/b1/kv1024 --filter decode/llama3-8b/b1/kv4096 --filter decode/llama3-8b/b1/kv32768
  --filter decode/llama2-7b/b1/kv4096 --filter decode/llama3-8b/b128/kv4096)
if [ "${ALLOC_TRACE:-0}" = 1 ]; then
  note "allocation call stacks (new weft-bench, warm decode plan() calls)"
  WEFT_BENCH_ALLOC_TRACE=1 timeout 60 /tmp/rc/wb_new --group decode --filter decode/plan/llama3-8b/b1/kv4096 \
    --filter decode/plan/llama3-8b/b256/kv4096 --filter decode/llama2-7b/b1/kv4096 --no-ceilings > /tmp/rc/trace.log 2>&1
  grep alloc-trace /tmp/rc/trace.log >> "$LOG"
fi
for i in $(seq 1 "${PAIRS:-3}"); do
  for v in old new; do
    c=${BASE_COMMIT:-old}; [ "$v" = new ] && c=${WEFT_COMMIT:-new}
    timeout 60 /tmp/rc/wb_$v --group decode,prefill "${ROWS[@]}" --no-ceilings --commit "$c" \
      --json "$OUT/rows_${v}_$i.json" > /tmp/rc/wb.log 2>&1
    note "weft-bench $v $i rc $? ($(grep -ciE 'error' /tmp/rc/wb.log) error lines)"
    grep -iE "error" /tmp/rc/wb.log | head -5 >> "$LOG"
  done
done

MF='DecodeSmall.SplitKVWithEmptyRequests:DecodeSmall.BackToBackPlansOnABusyStream'
timeout 60 compute-sanitizer --tool memcheck /tmp/rc/gpu_decode --gtest_brief=1 "--gtest_filter=$MF" > /tmp/rc/mc.txt 2>&1
note "memcheck rc $? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' /tmp/rc/mc.txt | tr '\n' ' ')"
left=$((DEADLINE - SECONDS))
note "weft_gpu_decode (all), ${left} s left"
timeout "$left" /tmp/rc/gpu_decode > "$OUT/gpu_decode.txt" 2>&1
note "weft_gpu_decode rc $? $(grep -E '^\[  (PASSED|FAILED)|tests ran' "$OUT/gpu_decode.txt" | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" "$OUT/gpu_decode.txt" | head -20 >> "$LOG"
note "done"
