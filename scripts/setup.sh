#!/usr/bin/env bash
# Installs what weft needs to build and test on a fresh Debian machine (CPU-only is fine).
# Idempotent; installs only what is missing. The CUDA 13 toolkit (nvcc, cuBLAS, NCCL) must
# already be present: it is not a Debian package of that version.
set -euo pipefail
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v g++ >/dev/null || need+=(g++)
[ -f /usr/include/gtest/gtest.h ] || need+=(libgtest-dev)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO=sudo; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi
if ! command -v nvcc >/dev/null; then
  for d in /usr/local/cuda/bin /usr/local/cuda-13*/bin; do
    [ -x "$d/nvcc" ] && { echo "nvcc found at $d (add it to PATH)"; break; }
  done
  command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || {
    echo "error: CUDA 13 toolkit (nvcc) not found; install it first" >&2; exit 1; }
fi
echo "setup: ok"
