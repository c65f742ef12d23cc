#!/usr/bin/env bash
# The test command: set-up, build everything (every kernel included), run all tests.
# On a machine without a GPU the GPU suites skip with a reason; host suites must pass.
set -euo pipefail
source "$(dirname "$0")/env.sh"
"$WEFT_ROOT/scripts/setup.sh"
# Explicit ON: a CI machine that lacks GoogleTest or NCCL fails here instead of silently building
# fewer tests (a plain configure would turn tests and comm off; see README).
weft_configure -DWEFT_BUILD_TESTS=ON -DWEFT_WITH_COMM=ON
cmake --build "$WEFT_BUILD" -j "$WEFT_JOBS"
cd "$WEFT_BUILD"
ctest --output-on-failure -j "$WEFT_JOBS" "$@"
# The Python package (pip install against this build's libweft, then pytest).
"$WEFT_ROOT/scripts/test-python.sh"
