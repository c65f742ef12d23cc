#!/usr/bin/env bash
# The test command: set-up, build everything (every kernel included), run all tests.
# On a machine without a GPU the GPU suites skip with a reason; host suites must pass.
set -euo pipefail
source "$(dirname "$0")/env.sh"
"$WEFT_ROOT/scripts/setup.sh"
weft_configure
cmake --build "$WEFT_BUILD" -j "$WEFT_JOBS"
cd "$WEFT_BUILD"
ctest --output-on-failure -j "$WEFT_JOBS" "$@"
