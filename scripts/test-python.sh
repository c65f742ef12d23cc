#!/usr/bin/env bash
# The Python package's tests (scripts/test.sh runs this after the C++ suites).
# Builds the extension against the libweft of the C++ build in $WEFT_BUILD (installed into a
# prefix there: no kernel is compiled twice), installs the package into $WEFT_BUILD/py-site and
# runs pytest on python/tests. Without a GPU or PyTorch the GPU tests skip with a reason; the
# CPU tests (import, validation, error mapping) need only NumPy. scikit-build-core, nanobind,
# pytest and NumPy come from the package index into a venv in $WEFT_BUILD/py-venv.
set -euo pipefail
source "$(dirname "$0")/env.sh"
PY="${PYTHON:-python3}"
prefix="$WEFT_BUILD/py-prefix"
site="$WEFT_BUILD/py-site"
venv="$WEFT_BUILD/py-venv"
rm -rf "$prefix" "$site"
# The library, headers and CMake package only (LOCAL_ONLY: not the bench binary).
cmake -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LOCAL_ONLY=1 -P "$WEFT_BUILD/cmake_install.cmake" >/dev/null
[ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check "scikit-build-core>=0.10" "nanobind>=2.0" pytest numpy
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation --target "$site" \
  -C cmake.define.WEFT_PYTHON_USE_INSTALLED="$prefix" -C build-dir="$WEFT_BUILD/py-build" "$WEFT_ROOT"
cd "$WEFT_ROOT/python/tests"
set +e
PYTHONPATH="$site" PYTHONDONTWRITEBYTECODE=1 "$venv/bin/python" -m pytest -q -rs -p no:cacheprovider
rc=$?
set -e
# pytest exits 5 when it collected no test: the CPU tests always exist, so that is a broken suite.
if [ "$rc" -eq 5 ]; then
  echo "test-python: pytest collected no tests (exit 5)" >&2
  exit 1
fi
exit "$rc"
