#!/usr/bin/env bash
# Diagnostic (device, one call; issue 28 / 21, perf-notes-decode.md "What holds a decode warp on
# few SMs"): the decode kernel on k SMs through a green context (scripts/diag/warpbound.cu), no
# device build: BIN holds warpbound and libweft.so.0.xz built on the dev box (sm_90a Release).
# 1. Timing (no profiler), b16/ctx16K Llama-3-8B heads: k 16 at 4x2, 4x3, 2x6, 4x4, 8x2, 2x2, 4x2
#    with each mainloop forced, k 32 at 4x2, the whole GPU at 4x2 and 2x6 -> timing.txt (checks the green context against bench group pod_decode).
# 2. Nsight Compute --set full --clock-control none, one launch (the 3rd) of the decode kernel:
#    k16 4x2, k16 2x6, whole GPU 4x2 -> ncu_summary.txt (warpbound_ncu.py) + ncu.tar.gz (CSVs).
# Usage: OUT=... BIN=... scripts/diag/warpbound.sh
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/wb-out}
BIN=${BIN:?BIN}
DEADLINE=${DEADLINE:-225}
B=${B:-16} CTX=${CTX:-16384}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT" /tmp/wb/ncu /tmp/wb/bin
exec > >(tee "$OUT/console.txt") 2>&1
SECONDS=0
xz -dc "$BIN/libweft.so.0.xz" > /tmp/wb/bin/libweft.so.0 2>/dev/null ||
  python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],"wb"))' "$BIN/libweft.so.0.xz" /tmp/wb/bin/libweft.so.0
cp "$BIN/warpbound" /tmp/wb/bin/ && chmod +x /tmp/wb/bin/warpbound
cuda_libs=$(dirname "$(find /usr/local/cuda* -name 'libcudart.so.*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=/tmp/wb/bin:${cuda_libs}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
ldd /tmp/wb/bin/warpbound | grep "not found" && exit 1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | tail -1)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
echo "ncu: $NCU $($NCU --version | tail -1)"
room() { [ $((DEADLINE - SECONDS)) -ge "$1" ] || { echo "skip $2: deadline ($SECONDS s)"; return 1; }; }

# 1. timing
{
  for sh in "4 2" "4 3" "2 6" "4 4" "8 2"; do
    timeout 20 /tmp/wb/bin/warpbound 16 $sh $B $CTX 7
  done
  timeout 20 /tmp/wb/bin/warpbound 16 4 2 $B $CTX 7 1   # forced CUDA-core mainloop
  timeout 20 /tmp/wb/bin/warpbound 16 4 2 $B $CTX 7 2   # forced tensor-core mainloop
  timeout 20 /tmp/wb/bin/warpbound 16 2 2 $B $CTX 7     # 4 warps/SM at 2 stages
  timeout 20 /tmp/wb/bin/warpbound 32 4 2 $B $CTX 7
  timeout 20 /tmp/wb/bin/warpbound 0 4 2 $B $CTX 7
  timeout 20 /tmp/wb/bin/warpbound 0 2 6 $B $CTX 7
} > "$OUT/timing.txt" 2>&1
cat "$OUT/timing.txt"; echo "timing done ($SECONDS s)"

# 2. ncu
for cfg in "16 4 2" "16 2 6" "0 4 2"; do
  set -- $cfg
  room 45 "ncu $cfg" || break
  tag=k$1_w$2s$3
  timeout 70 "$NCU" --clock-control none --set full --import-source no -k regex:'decode_(tc|cc)_kernel' \
    --launch-skip 2 --launch-count 1 -o /tmp/wb/ncu/$tag /tmp/wb/bin/warpbound $1 $2 $3 $B $CTX 3 > /tmp/wb/ncu/$tag.log 2>&1
  echo "ncu $tag rc=$? ($SECONDS s)"; tail -3 /tmp/wb/ncu/$tag.log
  if [ -f /tmp/wb/ncu/$tag.ncu-rep ]; then
    r=/tmp/wb/ncu/$tag
    "$NCU" -i $r.ncu-rep --page details --csv > $r.details.csv 2> $r.err
    "$NCU" -i $r.ncu-rep --page raw --csv > $r.raw.csv 2>> $r.err
    "$NCU" -i $r.ncu-rep --page source --csv --print-source sass > $r.sass.csv 2>> $r.err
  fi
done
python3 "$HERE/warpbound_ncu.py" /tmp/wb/ncu $((B * 8 * CTX / 16)) > "$OUT/ncu_summary.txt" 2>&1
echo "summary rc=$? $(wc -l < "$OUT/ncu_summary.txt") lines"
tar -czf "$OUT/ncu.tar.gz" -C /tmp/wb/ncu $(cd /tmp/wb/ncu && ls *.csv *.log 2>/dev/null)
ls -la "$OUT"
echo "done ($SECONDS s)"
