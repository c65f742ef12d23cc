# Sourced (not run) by the prefix-sharing device calls, scripts/diag/pat_*.sh: their preamble and
# the steps they share. Every step logs "<step> rc=N" to $OUT/steps.log; the caller sets B (a
# build folder), JOBS and BUDGET where a step uses them.

# The decode GPU tests of the prefix-sharing path (packs, wide packs, cascades).
PAT_TESTS='DecodeSmall.WorkPlanPacksMatchReference:DecodeSmall.SharePrefixes*:DecodeSmall.CascadeLevels*'

# Multicast off, the repo root as working folder, CUDA on PATH, OUT (default <root>/pat-out) made,
# the step clock (T0) started.
pat_init() {
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  cd "$ROOT" || exit 1
  export PATH="/usr/local/cuda/bin:$PATH"
  OUT="${OUT:-$ROOT/pat-out}"
  mkdir -p "$OUT"
  T0=$SECONDS
}
say() { echo "=== [$((SECONDS - T0))s] $*" | tee -a "$OUT/steps.log"; }
left() { echo $((BUDGET - (SECONDS - T0))); }

# The GPU and the commit, to $OUT/env.txt.
pat_env() {
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUT/env.txt"
  echo "commit ${WEFT_COMMIT:-?}" | tee -a "$OUT/env.txt"
}

# pat_unpack <name>...: binaries built on the dev box and carried xz-compressed ($BIN/<name>.xz),
# unpacked into X (a new temporary folder).
pat_unpack() {
  X="$(mktemp -d)"
  local b
  for b in "$@"; do xz -dc "$BIN/$b.xz" > "$X/$b" && chmod +x "$X/$b"; done
}

# pat_build <seconds>: weft_gpu_decode and weft-bench in $B (Release, 90a; comm, prefill, tp, pod,
# norm left out), log in $OUT/build.log.
pat_build() {
  say build
  cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a -DWEFT_BUILD_TESTS=ON \
    -DWEFT_BUILD_BENCH=ON -DWEFT_WITH_COMM=OFF -DWEFT_DISABLE="comm;prefill;tp;pod;norm" > "$OUT/build.log" 2>&1 || { say "configure failed"; tail -30 "$OUT/build.log"; }
  timeout "$1" ninja -C "$B" -j"$JOBS" weft_gpu_decode weft-bench >> "$OUT/build.log" 2>&1
  local rc=$?
  say "build rc=$rc"
  if [ $rc -ne 0 ]; then grep -E "error|FAILED" "$OUT/build.log" | head -30; fi
}

# pat_tests <seconds> <weft_gpu_decode> [log]: the PAT_TESTS (log default $OUT/tests_pat.log).
pat_tests() {
  local log="${3:-$OUT/tests_pat.log}"
  say tests
  timeout "$1" "$2" --gtest_brief=1 --gtest_filter="$PAT_TESTS" > "$log" 2>&1
  echo "pat tests rc=$?" | tee -a "$OUT/steps.log"
  grep -E "PASSED|FAILED|Failure|tests ran" "$log" | head -20
}

# pat_memcheck <seconds> <weft_gpu_decode> <gtest filter>
pat_memcheck() {
  say memcheck
  timeout "$1" compute-sanitizer --tool memcheck --error-exitcode 9 "$2" --gtest_brief=1 \
    --gtest_filter="$3" > "$OUT/memcheck.log" 2>&1
  echo "memcheck rc=$?" | tee -a "$OUT/steps.log"
  grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/memcheck.log" | tail -4
}

# pat_racecheck <seconds kept back> <most seconds> <weft_gpu_decode> <gtest filter>: with what is
# left of BUDGET but the seconds kept back (skipped below 20 s).
pat_racecheck() {
  local t=$(( $(left) - $1 ))
  if [ $t -gt 20 ]; then
    say racecheck
    timeout "$((t < $2 ? t : $2))" compute-sanitizer --tool racecheck --error-exitcode 9 "$3" \
      --gtest_brief=1 --gtest_filter="$4" > "$OUT/racecheck.log" 2>&1
    echo "racecheck rc=$? (124: out of time)" | tee -a "$OUT/steps.log"
    grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED" "$OUT/racecheck.log" | tail -4
  else
    say "racecheck skipped: budget"
  fi
}

# pat_decode_suite <seconds kept back> <fewest seconds to run> <weft_gpu_decode>: the whole suite
# with what is left of BUDGET.
pat_decode_suite() {
  local t=$(( $(left) - $1 ))
  if [ $t -gt "$2" ]; then
    say "decode suite"
    timeout "$t" "$3" --gtest_brief=1 > "$OUT/tests_decode.log" 2>&1
    echo "decode suite rc=$? (124: out of time)" | tee -a "$OUT/steps.log"
  else
    say "decode suite skipped: budget"
  fi
}

# pat_bench <tag> [weft-bench args]: $B's weft-bench --group pat (40 s) to $OUT/pat_<tag>.json, its
# log $OUT/bench_<tag>.log; no args: the shipped selector.
pat_bench() {
  local tag=$1
  shift
  if [ $# -eq 0 ]; then say "bench default selector"; else say "bench $*"; fi
  timeout 40 "$B/bench/weft-bench" --group pat "$@" --commit "${WEFT_COMMIT:-?}" \
    --json "$OUT/pat_$tag.json" > "$OUT/bench_$tag.log" 2>&1
  echo "bench $tag rc=$?" | tee -a "$OUT/steps.log"
}

# pat_finish <log name>...: $OUT/check.txt (env, steps, the named logs filtered, every bench_*.log's
# summary); then the logs are dropped (at most 8 files come back from a device call).
pat_finish() {
  say "all done"
  local f
  {
    cat "$OUT/env.txt" "$OUT/steps.log"
    for f in "$@"; do
      [ -f "$OUT/$f.log" ] || continue
      echo "----- $f.log (filtered)"
      grep -E "error|FAILED|Failure|PASSED|SUMMARY|rc=|tests ran|Expected|Which is|actual|OK \]" "$OUT/$f.log" | head -60
    done
    for f in "$OUT"/bench_*.log; do
      [ -f "$f" ] || continue
      echo "----- $(basename "$f") (summary)"
      grep -E "summary|nosharing|FAIL|error|group pat" "$f" | head -10
    done
  } > "$OUT/check.txt"
  rm -f "$OUT"/*.log "$OUT/env.txt"
}
