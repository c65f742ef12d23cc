#!/usr/bin/env bash
# Diagnostic (device): build weft-bench with the decode timeline (-DWEFT_DECODE_TRACE=ON, see
# src/decode/trace.h) and run decode rows; every row gets trace_* / trace_warm_* extras and the raw
# per-CTA records go to $OUT/raw.csv (WEFT_TRACE_DUMP). Rows: the filters given as arguments, or
# the target rows by default.
#   OUT=... WEFT_COMMIT=<sha> scripts/diag/decode-trace.sh [filter ...]
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT="${OUT:-./trace-out}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
SECONDS=0
cmake -S . -B build-trace -G Ninja -DWEFT_DECODE_TRACE=ON -DWEFT_DISABLE="prefill;norm;comm" -DWEFT_BUILD_TESTS=OFF > /tmp/cfg.log 2>&1 || { tail -30 /tmp/cfg.log; exit 1; }
ninja -C build-trace -j16 weft-bench > /tmp/build.log 2>&1 || { tail -40 /tmp/build.log; exit 1; }
echo "build $SECONDS s"
F=()
if [ $# -gt 0 ]; then
  for r in "$@"; do F+=(--filter "$r"); done
else
  for r in llama3-8b/b1/kv1024 llama3-8b/b1/kv32768 llama3-8b/b1/kv131072 llama3-8b/b32/kv4096 llama2-7b/b1/kv32768 floor/llama3-8b/b1/kv32768 floor/llama3-8b/b32/kv4096 floor/launch bimodal64; do
    F+=(--filter "decode/$r")
  done
fi
rm -f "$OUT/raw.csv"
WEFT_TRACE_DUMP="$OUT/raw.csv" build-trace/bench/weft-bench --group decode "${F[@]}" --commit "${WEFT_COMMIT:-unknown}" --json "$OUT/trace.json" 2>&1 | grep -v "^$"
echo "total $SECONDS s"
