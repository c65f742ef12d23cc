#!/usr/bin/env bash
# ctest driver: install the built weft into a scratch prefix, then configure, build and run a
# plain C++ consumer against it with find_package(weft). GoogleTest is made unfindable in the
# consumer's configure (CMAKE_DISABLE_FIND_PACKAGE_GTest): the installed package must not need it.
set -euo pipefail
build_dir=$1; src_dir=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d); trap 'rm -rf "$scratch"' EXIT
# Quiet unless a step fails; then its output explains why.
step() { "$@" >"$scratch/log" 2>&1 || { cat "$scratch/log"; echo "FAIL: $*"; exit 1; }; }
step cmake --install "$build_dir" --prefix "$scratch/prefix"
step cmake -S "$src_dir" -B "$scratch/build" -G Ninja -DCMAKE_PREFIX_PATH="$scratch/prefix" \
  -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON
step cmake --build "$scratch/build"
"$scratch/build/weft_consumer" "$(cd "$scratch/prefix" && pwd -P)"
