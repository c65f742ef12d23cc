#!/usr/bin/env bash
# The main job: set-up, build, then a quick benchmark of every kernel against the ceilings
# measured in the same process. Without a GPU it says so and exits non-zero.
set -euo pipefail
source "$(dirname "$0")/env.sh"
"$WEFT_ROOT/scripts/setup.sh"
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "weft: no NVIDIA GPU on this machine; the benchmark needs one (sm_90a: H100/H200)." >&2
  exit 2
fi
weft_configure -DWEFT_BUILD_TESTS=OFF
cmake --build "$WEFT_BUILD" -j "$WEFT_JOBS" --target weft-bench
"$WEFT_BUILD/bench/weft-bench" --quick "$@"
