# Sourced by the scripts: CUDA on PATH, build folder, parallelism.
export PATH="/usr/local/cuda/bin:$PATH"
WEFT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WEFT_BUILD="${WEFT_BUILD:-$WEFT_ROOT/build}"
WEFT_JOBS="${WEFT_JOBS:-$(nproc)}"
# Quiet configure; prints only weft's one-line summary (what is built and why). Errors go to stderr.
weft_configure() {
  cmake -S "$WEFT_ROOT" -B "$WEFT_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" \
    | { grep -- '^-- weft: tests' || true; }
  return "${PIPESTATUS[0]}"
}
