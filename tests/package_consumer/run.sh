#!/usr/bin/env bash
# ctest driver: install the built weft into a scratch prefix, then configure, build and run a
# plain C++ consumer against it with find_package(weft).
set -euo pipefail
build_dir=$1; src_dir=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d); trap 'rm -rf "$scratch"' EXIT
cmake --install "$build_dir" --prefix "$scratch/prefix" >/dev/null
cmake -S "$src_dir" -B "$scratch/build" -G Ninja -DCMAKE_PREFIX_PATH="$scratch/prefix" >/dev/null
cmake --build "$scratch/build" >/dev/null
"$scratch/build/weft_consumer"
