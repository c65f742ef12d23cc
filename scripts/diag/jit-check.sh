#!/usr/bin/env bash
# One device call for weft::jit (issue 25): build the JIT tests and weft-bench (comm off), run the
# JIT GPU suite, the bench group "jit" (jit/summary: cold compile, warm load, speed vs AOT), the
# JIT suite under compute-sanitizer memcheck, and the decode / prefill suites (the wrappers'
# built-in paths after the JIT hooks). Logs and JSON to $OUT. Every step has a timeout so the
# whole call stays under ${JIT_CHECK_BUDGET:-380} s.
#   WEFT_COMMIT=<sha> scripts/diag/jit-check.sh
set -u
OUT=${OUT:-$PWD/jit-check-out}
mkdir -p "$OUT"
COMMIT=${WEFT_COMMIT:-unknown}
B=${JIT_CHECK_BUILD:-build-jit}
BUDGET=${JIT_CHECK_BUDGET:-380}
t0=$SECONDS
say() { echo "=== $* (t=$((SECONDS - t0))s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
say "configure"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_BUILD_TESTS=ON -DWEFT_WITH_COMM=OFF \
  -DWEFT_BUILD_BENCH=ON > "$OUT/configure.log" 2>&1 || { tail -20 "$OUT/configure.log"; exit 1; }
say "build"
timeout 240 ninja -C $B -j16 ${JIT_CHECK_TARGETS:-weft_gpu_jit_run weft-bench weft_gpu_decode weft_gpu_prefill weft_host_jit} \
  > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; say "build FAILED"; }
say "jit GPU suite"
timeout 90 $B/tests/weft_gpu_jit_run > "$OUT/test_jit_gpu.txt" 2>&1; echo "rc $?" >> "$OUT/test_jit_gpu.txt"
tail -4 "$OUT/test_jit_gpu.txt" | tee -a "$OUT/summary.txt"
say "bench jit"
timeout 120 $B/bench/weft-bench --group jit --no-ceilings --json "$OUT/bench_jit.json" --commit "$COMMIT" \
  > "$OUT/bench_jit.txt" 2>&1; echo "rc $?" >> "$OUT/bench_jit.txt"
tail -12 "$OUT/bench_jit.txt" | tee -a "$OUT/summary.txt"
say "host jit suite (on the device machine)"
timeout 60 $B/tests/weft_host_jit > "$OUT/test_jit_host.txt" 2>&1; echo "rc $?" >> "$OUT/test_jit_host.txt"
tail -2 "$OUT/test_jit_host.txt" | tee -a "$OUT/summary.txt"
left=$((BUDGET - 60 - (SECONDS - t0)))
if [ $left -gt 60 ]; then
  say "memcheck jit GPU suite"
  timeout $((left - 20)) compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/weft_gpu_jit_run \
    --gtest_filter='*Decode*:*SourceError*' > "$OUT/memcheck_jit.txt" 2>&1; echo "rc $?" >> "$OUT/memcheck_jit.txt"
  tail -3 "$OUT/memcheck_jit.txt" | tee -a "$OUT/summary.txt"
fi
for s in decode prefill; do
  left=$((BUDGET - (SECONDS - t0)))
  [ $left -gt 20 ] || break
  say "weft_gpu_$s"
  timeout $((left - 10)) $B/tests/weft_gpu_$s --gtest_brief=1 > "$OUT/test_$s.txt" 2>&1; echo "rc $?" >> "$OUT/test_$s.txt"
  tail -3 "$OUT/test_$s.txt" | tee -a "$OUT/summary.txt"
done
say "done"
