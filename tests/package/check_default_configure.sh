#!/usr/bin/env bash
# ctest: weft configures with nothing but defaults on a machine without GoogleTest and without
# NCCL, leaving tests and comm out; asking for them explicitly then fails with a clear message.
#   check_default_configure.sh <weft source dir> [<nvcc>]
# Configure only (no build: CI's 2 cores cannot afford a second build of every kernel).
# Absence is simulated with CMake's own switch, CMAKE_DISABLE_FIND_PACKAGE_<Pkg>=ON, which makes
# find_package(GTest) and find_package(NCCL) (cmake/FindNCCL.cmake) find nothing.
set -euo pipefail
src=$1
[ $# -ge 2 ] && export CUDACXX=$2  # the compiler the outer build uses (PATH may lack nvcc)
scratch=$(mktemp -d); trap 'rm -rf "$scratch"' EXIT
absent=(-DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON -DCMAKE_DISABLE_FIND_PACKAGE_NCCL=ON)
fail() { echo "FAIL: $*"; echo "--- configure output:"; cat "$scratch/log"; exit 1; }

# 1. Defaults only: succeeds, tests and comm OFF, the library and the bench still configured.
cmake -S "$src" -B "$scratch/b" -G Ninja "${absent[@]}" >"$scratch/log" 2>&1 \
  || fail "default configure failed without GoogleTest and NCCL"
summary=$(grep -- '-- weft: tests' "$scratch/log") || fail "no 'weft:' summary line"
echo "$summary"
[[ $summary == *"tests OFF (GoogleTest not found)"* ]] || fail "tests not OFF by default"
[[ $summary == *"comm OFF ("*"not found)"* ]] || fail "comm not OFF by default"
grep -q '^#define WEFT_HAS_COMM 0$' "$scratch/b/include/weft/config.h" || fail "config.h: WEFT_HAS_COMM not 0"
grep -q 'libweft\.so' "$scratch/b/build.ninja" || fail "libweft.so not in the build"
grep -q 'weft-bench' "$scratch/b/build.ninja" || fail "weft-bench not in the build"
! grep -q 'weft_host_\|weft_comm\|gtest' "$scratch/b/build.ninja" || fail "tests or comm in the build"

# 2. Explicit requests for what is missing fail, naming it (reconfigures of the same tree:
#    the compiler checks are cached, so these take a second or two).
for opt in WEFT_BUILD_TESTS:GoogleTest WEFT_WITH_COMM:NCCL; do
  if cmake -S "$src" -B "$scratch/b" "${absent[@]}" -D"${opt%%:*}"=ON >"$scratch/log" 2>&1; then
    fail "-D${opt%%:*}=ON configured without ${opt#*:}"
  fi
  grep -q "${opt%%:*}=ON but ${opt#*:}" "$scratch/log" || fail "-D${opt%%:*}=ON: no clear message"
  cmake -S "$src" -B "$scratch/b" "${absent[@]}" -D"${opt%%:*}"=AUTO >/dev/null 2>&1  # reset
done
echo "default configure OK (no GoogleTest, no NCCL); explicit ON without them fails clearly"
