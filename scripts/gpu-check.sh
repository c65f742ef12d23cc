#!/usr/bin/env bash
# One call on a GPU machine does everything: environment, build (cached in build-gpu), every
# host and GPU test, compute-sanitizer memcheck + racecheck, weft-bench, PyTorch baselines and a
# summary. Each step is timed and logged; a failing step does not stop the others, but the script
# exits non-zero at the end (1: a step failed; 2: no GPU visible).
#
#   scripts/gpu-check.sh [--skip-build] [--skip-tests] [--skip-sanitizer] [--skip-racecheck]
#                        [--skip-bench] [--no-torch] [--quick] [--bench-args "--group decode"]
#                        [--tests-filter "Decode*"] [--sanitizer-filter "*Small*"]
#                        [--torch-args "--only decode"] [--budget SECONDS]
# Env: OUT (results folder; default ./gpu-check-out), WEFT_GPU_CHECK_FILTER (gtest filter for the
#      test step), WEFT_SANITIZER_FILTER (gtest filter under the sanitizer), WEFT_COMMIT,
#      WEFT_DISABLE (components to leave out of the build, e.g. "prefill;comm"),
#      WEFT_GPU_CHECK_GPU_ONLY=1 (test step: the weft_gpu_* suites only).
# Writes only under $OUT (at most 8 files): gpu-check.log (everything), build.log,
# sanitizer.log, bench.json, torch.json, summary.txt.
set -uo pipefail
# shellcheck disable=SC2317  # step functions are called indirectly through run_step

# The lent machines forbid NVLink multicast: keep it off for NCCL, torch and NVSHMEM alike.
export NCCL_NVLS_ENABLE=0
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export NVSHMEM_DISABLE_NVLS=1

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
BUILD="${WEFT_GPU_BUILD_DIR:-$ROOT/build-gpu}"
OUT="${OUT:-$ROOT/gpu-check-out}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
LOG="$OUT/gpu-check.log"
BUILD_LOG="$OUT/build.log"
SAN_LOG="$OUT/sanitizer.log"
SUMMARY="$OUT/summary.txt"
: >"$LOG"
# Results of an earlier call in the same folder must not pass for this one's.
rm -f "$BUILD_LOG" "$SAN_LOG" "$SUMMARY" "$OUT/bench.json" "$OUT/torch.json"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

SKIP_BUILD=0 SKIP_TESTS=0 SKIP_SAN=0 SKIP_RACE=0 SKIP_BENCH=0 NO_TORCH=0 QUICK=0
BENCH_ARGS="" TORCH_ARGS=""
TESTS_FILTER="${WEFT_GPU_CHECK_FILTER:-}"
SAN_FILTER="${WEFT_SANITIZER_FILTER:-}"
BUDGET=570  # seconds for the whole call (the device tool kills a command at 600)
while [ $# -gt 0 ]; do
  case "$1" in
    --skip-build) SKIP_BUILD=1 ;;
    --skip-tests) SKIP_TESTS=1 ;;
    --skip-sanitizer) SKIP_SAN=1 ;;
    --skip-racecheck) SKIP_RACE=1 ;;
    --skip-bench) SKIP_BENCH=1 ;;
    --no-torch) NO_TORCH=1 ;;
    --quick) QUICK=1 ;;
    --bench-args) BENCH_ARGS="${2-}"; shift ;;
    --torch-args) TORCH_ARGS="${2-}"; shift ;;
    --tests-filter) TESTS_FILTER="${2-}"; shift ;;
    --sanitizer-filter) SAN_FILTER="${2-}"; shift ;;
    --budget) BUDGET="${2-570}"; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1' (see --help)" >&2; exit 1 ;;
  esac
  shift
done

exec 3>>"$LOG"
say() { echo "$*"; echo "$*" >&3; }     # stdout (short) and the log
logonly() { cat >&3; }                   # stdin -> log only
remaining() { echo $((BUDGET - SECONDS)); }
# Timeout for a step: its default, cut to what is left of the budget (minus a margin for the
# summary); 0 when nothing is left.
step_timeout() {
  local want=$1 left
  left=$(( $(remaining) - 15 ))
  [ "$left" -lt 0 ] && left=0
  [ "$want" -lt "$left" ] && echo "$want" || echo "$left"
}

STEP_NAMES=() STEP_STATUS=() STEP_SECS=() STEP_NOTES=()
FAILED=0
NOTE=""
# run_step <name> <function>: the function returns 0 ok, 1 failed, 3 skipped; it may set NOTE.
run_step() {
  local name=$1 fn=$2 t0=$SECONDS rc status
  NOTE=""
  say ""
  say "=== [$name] (t=${SECONDS}s, budget left $(remaining)s) ==="
  "$fn"
  rc=$?
  case $rc in
    0) status=ok ;;
    3) status=skipped ;;
    *) status=FAILED; FAILED=1 ;;
  esac
  STEP_NAMES+=("$name") STEP_STATUS+=("$status") STEP_SECS+=($((SECONDS - t0))) STEP_NOTES+=("$NOTE")
  say "=== [$name] $status in $((SECONDS - t0))s${NOTE:+ ($NOTE)}"
}

print_summary() {
  {
    echo ""
    echo "gpu-check summary ($(date -u +%Y-%m-%dT%H:%M:%SZ), ${SECONDS}s, out: $OUT)"
    printf '%-18s %-8s %6s  %s\n' step status secs notes
    local i
    for i in "${!STEP_NAMES[@]}"; do
      printf '%-18s %-8s %6s  %s\n' "${STEP_NAMES[$i]}" "${STEP_STATUS[$i]}" "${STEP_SECS[$i]}" \
        "${STEP_NOTES[$i]}"
    done
  } | tee -a "$SUMMARY" >&3
  # (tee wrote it to the summary file and the log; show it on stdout last)
  tail -n $((${#STEP_NAMES[@]} + 2)) "$SUMMARY"
}

# Any file over 15 MiB under $OUT is cut to its last 15 MiB (the transfer limit is 16 MiB).
cap_outputs() {
  local f
  for f in "$OUT"/*; do
    [ -f "$f" ] || continue
    if [ "$(stat -c %s "$f")" -gt $((15 << 20)) ]; then
      tail -c $((15 << 20)) "$f" >"$TMP/cap" && cat "$TMP/cap" >"$f"
      echo "gpu-check: $(basename "$f") truncated to its last 15 MiB" >&3
    fi
  done
}

finish() {
  print_summary
  cap_outputs
  exit "$1"
}

# Pass WEFT_COMMIT from the machine that holds the checkout: a lent machine gets a copy of the
# working tree whose git metadata can lag it (one call reported the session's first commit for a
# tree fifteen commits newer), so git there may name the wrong commit.
COMMIT="${WEFT_COMMIT:-}"
[ -z "$COMMIT" ] && COMMIT="$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || true)"
[ -z "$COMMIT" ] && COMMIT="unknown"
export WEFT_COMMIT="$COMMIT"
: >"$SUMMARY"

# ------------------------------------------------------------------------------------------------
NGPU=0
step_env() {
  {
    echo "commit: $COMMIT"
    echo "host: $(hostname) cores: $(nproc)"
    echo "multicast off: NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE TORCH_SYMM_MEM_DISABLE_MULTICAST=$TORCH_SYMM_MEM_DISABLE_MULTICAST NVSHMEM_DISABLE_NVLS=$NVSHMEM_DISABLE_NVLS"
    echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-<unset>}"
    if command -v nvidia-smi >/dev/null; then
      nvidia-smi -L 2>&1
      nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
        --format=csv,noheader 2>&1
    else
      echo "nvidia-smi: not found"
    fi
    command -v nvcc >/dev/null && nvcc --version | tail -n 2 || echo "nvcc: not found"
    local h
    for h in /usr/local/cuda/include/nccl.h /usr/include/nccl.h ${NCCL_HOME:+$NCCL_HOME/include/nccl.h}; do
      if [ -f "$h" ]; then
        echo "NCCL: $(grep -E '^#define NCCL_(MAJOR|MINOR|PATCH) ' "$h" | awk '{print $3}' | paste -sd.) ($h)"
        break
      fi
    done
    command -v cmake >/dev/null && cmake --version | head -n 1 || echo "cmake: not found"
    command -v ninja >/dev/null && echo "ninja $(ninja --version)" || echo "ninja: not found"
    command -v compute-sanitizer >/dev/null && compute-sanitizer --version | tail -n 1 ||
      echo "compute-sanitizer: not found"
    timeout 60 python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "gpus", torch.cuda.device_count())' 2>&1 |
      tail -n 1
  } 2>&1 | tee -a "$LOG"
  if command -v nvidia-smi >/dev/null; then
    NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
  fi
  if [ -n "${CUDA_VISIBLE_DEVICES-}" ] && [ "$NGPU" -gt 0 ]; then
    local vis
    vis=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c . || true)
    [ "$vis" -lt "$NGPU" ] && NGPU=$vis
  fi
  NOTE="$NGPU GPU(s)"
  return 0
}

BUILD_FAILED=0
step_build() {
  if [ "$SKIP_BUILD" = 1 ]; then NOTE="--skip-build"; return 3; fi
  local t
  t=$(step_timeout 480)
  [ "$t" -le 0 ] && { NOTE="no budget left"; BUILD_FAILED=1; return 1; }
  [ -f "$BUILD/CMakeCache.txt" ] && say "reusing $BUILD (incremental build)"
  # The architecture is explicit: project() would otherwise fill in nvcc's default (sm_75).
  if ! cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CUDA_ARCHITECTURES="${WEFT_CUDA_ARCH:-90a}" \
      -DWEFT_BUILD_TESTS=ON -DWEFT_BUILD_BENCH=ON -DWEFT_DISABLE="${WEFT_DISABLE:-}" >>"$BUILD_LOG" 2>&1; then
    tail -n 30 "$BUILD_LOG" | tee -a "$LOG"
    NOTE="cmake configure failed (build.log)"; BUILD_FAILED=1; return 1
  fi
  # -k 0: build every target that can be built, so one broken component leaves the rest testable.
  timeout "$t" ninja -C "$BUILD" -j16 -k 0 >>"$BUILD_LOG" 2>&1
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    BUILD_FAILED=1
    say "build failed (rc=$rc$([ "$rc" = 124 ] && echo ', timeout')); first errors:"
    grep -E 'error|FAILED:' "$BUILD_LOG" | grep -v '^\s*$' | head -n 25 | tee -a "$LOG"
    NOTE="rc=$rc, see build.log"
    return 1
  fi
  NOTE="ok"
  return 0
}

# True when a target is up to date (so its executable reflects the current sources).
target_fresh() {
  [ "$BUILD_FAILED" = 1 ] || return 0
  local dry
  dry=$(ninja -C "$BUILD" -n "$1" 2>/dev/null)
  grep -q 'no work to do' <<<"$dry"
}

# run_gtest <exe> <timeout> [extra args...]: output to the log; a short digest to stdout.
run_gtest() {
  local exe=$1 t=$2 rc
  shift 2
  local out
  out="$TMP/$(basename "$exe").out"
  timeout "$t" "$exe" --gtest_brief=1 "$@" >"$out" 2>&1
  rc=$?
  { echo "--- $(basename "$exe") $* (rc=$rc)"; cat "$out"; } | logonly
  grep -E '^\[  (FAILED|PASSED|SKIPPED) |tests? ran|Failure|what\(\)|Segmentation|Aborted' "$out" |
    grep -v '^\[  FAILED  \] *[0-9]* tests\?, listed below' | head -n 20 |
    sed "s|^|  $(basename "$exe"): |"
  [ "$rc" = 124 ] && echo "  $(basename "$exe"): TIMEOUT after ${t}s"
  return "$rc"
}

test_exes() {  # host and GPU test executables, comm excluded (it needs >= 2 GPUs)
  local f
  for f in "$BUILD"/tests/weft_host_* "$BUILD"/tests/weft_public_header_check "$BUILD"/tests/weft_gpu_*; do
    if [ ! -x "$f" ] || [ ! -f "$f" ]; then continue; fi
    [ "$(basename "$f")" = weft_gpu_comm ] && continue
    # WEFT_GPU_CHECK_GPU_ONLY=1: the GPU suites only (CI runs every host test; on the device host
    # they cost ~75 s of a 600 s call).
    case "$(basename "$f")" in weft_gpu_*) ;; *) [ "${WEFT_GPU_CHECK_GPU_ONLY:-0}" = 1 ] && continue ;; esac
    echo "$f"
  done
}

step_tests() {
  if [ "$SKIP_TESTS" = 1 ]; then NOTE="--skip-tests"; return 3; fi
  local exes fails=0 n=0 stale=0 exe t args=()
  exes=$(test_exes)
  [ -z "$exes" ] && { NOTE="no test executables in $BUILD/tests"; return 1; }
  [ -n "$TESTS_FILTER" ] && args+=("--gtest_filter=$TESTS_FILTER")
  for exe in $exes; do
    if ! target_fresh "$(basename "$exe")"; then
      say "  $(basename "$exe"): NOT RUN (its target failed to build; the binary is stale)"
      stale=$((stale + 1)); fails=$((fails + 1)); continue
    fi
    t=$(step_timeout 240)
    [ "$t" -le 0 ] && { say "  out of budget before $(basename "$exe")"; fails=$((fails + 1)); break; }
    n=$((n + 1))
    run_gtest "$exe" "$t" "${args[@]}" | tee -a "$LOG" || fails=$((fails + 1))
  done
  NOTE="$n executables run, $fails failed"
  [ "$stale" -gt 0 ] && NOTE="$NOTE ($stale stale, not run)"
  [ "$fails" = 0 ]
}

step_comm() {
  if [ "$SKIP_TESTS" = 1 ]; then NOTE="--skip-tests"; return 3; fi
  local exe="$BUILD/tests/weft_gpu_comm" t
  [ -x "$exe" ] || { NOTE="no weft_gpu_comm executable"; return 3; }
  if [ "$NGPU" -lt 2 ]; then
    NOTE="skipped: $NGPU GPU visible, comm tests need >= 2"
    say "$NOTE"
    return 3
  fi
  target_fresh weft_gpu_comm || { NOTE="stale binary (build failed)"; return 1; }
  t=$(step_timeout 240)
  [ "$t" -le 0 ] && { NOTE="no budget left"; return 1; }
  local args=()
  [ -n "$TESTS_FILTER" ] && args+=("--gtest_filter=$TESTS_FILTER")
  run_gtest "$exe" "$t" "${args[@]}" | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  NOTE="$NGPU GPUs, rc=$rc"
  [ "$rc" = 0 ]
}

SAN_ERRORS_MEM=0 SAN_ERRORS_RACE=0
# sanitize <tool>: runs compute-sanitizer --tool <tool> on each GPU test executable.
sanitize() {
  local tool=$1 total=0 fails=0 exe filter t rc errs out exes
  command -v compute-sanitizer >/dev/null || { NOTE="compute-sanitizer not found"; return 1; }
  exes=$(test_exes)
  # The comm suite needs >= 2 GPUs (and only its *Small* tests are sanitizer-sized).
  if [ "$NGPU" -ge 2 ] && [ -x "$BUILD/tests/weft_gpu_comm" ]; then exes="$exes $BUILD/tests/weft_gpu_comm"; fi
  for exe in $exes; do
    case "$(basename "$exe")" in weft_gpu_*) ;; *) continue ;; esac
    target_fresh "$(basename "$exe")" || continue
    filter="$SAN_FILTER"
    local listed
    if [ -z "$filter" ]; then
      # Default: the sanitizer-sized tests when the suite marks some, else all of them.
      # (listed into a variable first: grep -q closing the pipe early would trip pipefail)
      listed=$(timeout 30 "$exe" --gtest_list_tests 2>/dev/null)
      if grep -qE 'Sanitizer|Small' <<<"$listed"; then
        filter='*Sanitizer*:*Small*'
      else
        filter='*'
      fi
    else
      # A filter that selects nothing in this suite (e.g. it names no *Small* tests) would run
      # no kernel at all: sanitize the whole suite instead.
      listed=$(timeout 30 "$exe" --gtest_list_tests "--gtest_filter=$filter" 2>/dev/null | grep -c '^  ')
      [ "${listed:-0}" -gt 0 ] || filter='*'
    fi
    t=$(step_timeout 150)
    [ "$t" -le 0 ] && { say "  out of budget before $tool on $(basename "$exe")"; fails=$((fails + 1)); break; }
    out="$TMP/san.out"
    local san_args=()
    # NCCL's own set-up makes CUDA calls that fail by design and are handled inside NCCL
    # (cudaFuncGetAttributes on kernels built for other architectures, cuMemCreate with a
    # fabric handle type the machine refuses, then a fallback): memcheck counts those as API
    # errors. For the suites that set up NCCL (comm, and tp: its world-1 communicator) only API
    # errors are not reported; memory access errors, leaks and kernel faults still are. (H100 at
    # c7848f5: the tp suite's 12 memcheck "errors" were all cudaErrorNoKernelImageForDevice
    # inside pncclCommInitRank.)
    case "$(basename "$exe")" in weft_gpu_comm|weft_gpu_tp) san_args+=(--report-api-errors no) ;; esac
    timeout "$t" compute-sanitizer --tool "$tool" --print-limit 20 "${san_args[@]}" \
      "$exe" --gtest_brief=1 "--gtest_filter=$filter" >"$out" 2>&1
    rc=$?
    if [ "$tool" = racecheck ] && grep -q 'RACECHECK SUMMARY' "$out"; then
      errs=$(grep -oE 'RACECHECK SUMMARY:.*\(([0-9]+) errors?' "$out" | grep -oE '\(([0-9]+)' | tr -d '(' |
        awk '{s += $1} END {print s + 0}')
    else
      errs=$(grep -oE 'ERROR SUMMARY: [0-9]+ error' "$out" | awk '{s += $3} END {print s + 0}')
    fi
    { echo "--- $tool $(basename "$exe") --gtest_filter=$filter (rc=$rc, errors=$errs)"; cat "$out"; } >>"$SAN_LOG"
    say "  $tool $(basename "$exe") [$filter]: $errs errors, rc=$rc$([ "$rc" = 124 ] && echo ' (TIMEOUT)')"
    total=$((total + errs))
    [ "$rc" != 0 ] || [ "$errs" != 0 ] && fails=$((fails + 1))
  done
  if [ "$tool" = memcheck ]; then SAN_ERRORS_MEM=$total; else SAN_ERRORS_RACE=$total; fi
  NOTE="$total errors"
  [ "$fails" -gt 0 ] && NOTE="$NOTE, $fails runs not clean"
  [ "$fails" = 0 ] && [ "$total" = 0 ]
}
step_memcheck() {
  if [ "$SKIP_SAN" = 1 ]; then NOTE="--skip-sanitizer"; return 3; fi
  sanitize memcheck
}
step_racecheck() {
  if [ "$SKIP_SAN" = 1 ] || [ "$SKIP_RACE" = 1 ]; then NOTE="skipped by flag"; return 3; fi
  sanitize racecheck
}

step_bench() {
  if [ "$SKIP_BENCH" = 1 ]; then NOTE="--skip-bench"; return 3; fi
  local exe="$BUILD/bench/weft-bench" t rc
  [ -x "$exe" ] || { NOTE="no weft-bench executable"; return 1; }
  target_fresh weft-bench || { NOTE="stale weft-bench (build failed)"; return 1; }
  t=$(step_timeout 300)
  [ "$t" -le 0 ] && { NOTE="no budget left"; return 1; }
  local args=(--json "$OUT/bench.json" --commit "$COMMIT")
  [ "$QUICK" = 1 ] && args+=(--quick)
  # shellcheck disable=SC2206  # word splitting of the pass-through flags is intended
  args+=($BENCH_ARGS)
  say "weft-bench ${args[*]}"
  timeout "$t" "$exe" "${args[@]}" >"$TMP/bench.out" 2>&1
  rc=$?
  logonly <"$TMP/bench.out"
  grep -E '^ceilings:|failed|ERROR|cases,|TIMEOUT' "$TMP/bench.out" | head -n 20
  [ "$rc" = 124 ] && say "weft-bench: TIMEOUT after ${t}s"
  NOTE="rc=$rc, $(grep -oE '[0-9]+ cases, [0-9]+ failures' "$TMP/bench.out" | tail -n 1)"
  [ "$rc" = 0 ]
}

step_torch() {
  if [ "$SKIP_BENCH" = 1 ] || [ "$NO_TORCH" = 1 ]; then NOTE="skipped by flag"; return 3; fi
  local t rc
  t=$(step_timeout 240)
  [ "$t" -le 0 ] && { NOTE="no budget left"; return 1; }
  local args=(--out "$OUT/torch.json" --commit "$COMMIT")
  [ "$QUICK" = 1 ] && args+=(--quick)
  # shellcheck disable=SC2206
  args+=($TORCH_ARGS)
  timeout "$t" python3 "$ROOT/bench/torch_baselines.py" "${args[@]}" >"$TMP/torch.out" 2>&1
  rc=$?
  logonly <"$TMP/torch.out"
  tail -n 3 "$TMP/torch.out"
  [ "$rc" = 124 ] && say "torch_baselines: TIMEOUT after ${t}s"
  NOTE="rc=$rc"
  [ "$rc" = 0 ]
}

step_summarize() {
  local inputs=()
  [ -f "$OUT/bench.json" ] && inputs+=("$OUT/bench.json")
  [ -f "$OUT/torch.json" ] && inputs+=("$OUT/torch.json")
  [ ${#inputs[@]} = 0 ] && { NOTE="no result JSON"; return 3; }
  python3 "$ROOT/bench/summarize.py" "${inputs[@]}" >"$SUMMARY" 2>&1
  local rc=$?
  logonly <"$SUMMARY"
  NOTE="summary.txt ($(grep -c '^| ' "$SUMMARY") table rows)"
  return "$rc"
}

# ------------------------------------------------------------------------------------------------
say "gpu-check: $ROOT -> $OUT (budget ${BUDGET}s)"
run_step env step_env
if [ "$NGPU" -lt 1 ]; then
  say ""
  say "gpu-check: no NVIDIA GPU visible on this machine (nvidia-smi -L lists none)."
  say "gpu-check: nothing GPU-side can run here; use scripts/test.sh for the CPU build and host tests."
  STEP_NAMES+=(gpu) STEP_STATUS+=(absent) STEP_SECS+=(0) STEP_NOTES+=("no GPU: build/tests/sanitizer/bench not run")
  finish 2
fi
run_step build step_build
run_step tests step_tests
run_step comm step_comm
run_step memcheck step_memcheck
run_step racecheck step_racecheck
run_step bench step_bench
run_step torch step_torch
run_step summarize step_summarize
say ""
say "sanitizer errors: memcheck $SAN_ERRORS_MEM, racecheck $SAN_ERRORS_RACE"
finish "$FAILED"
