#!/usr/bin/env bash
# device: build the trace bench and run selected decode rows
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
SECONDS=0
cmake -S . -B build-trace -G Ninja -DWEFT_DECODE_TRACE=ON -DWEFT_DISABLE="prefill;norm;comm" -DWEFT_BUILD_TESTS=OFF > /tmp/cfg.log 2>&1 || { tail -30 /tmp/cfg.log; exit 1; }
ninja -C build-trace -j16 weft-bench > /tmp/build.log 2>&1 || { tail -40 /tmp/build.log; exit 1; }
echo "build $SECONDS s"
F=()
for r in llama3-8b/b1/kv1024 llama3-8b/b1/kv32768 llama3-8b/b1/kv131072 llama3-8b/b32/kv4096 llama3-8b/b128/kv4096 llama2-7b/b1/kv32768 llama2-7b/b32/kv4096; do F+=(--filter "decode/$r"); done
F+=(--filter decode/floor/llama3-8b/b1/kv32768 --filter decode/floor/llama3-8b/b32/kv4096 --filter decode/bimodal --filter decode/floor/launch --filter decode/w4s2/llama3-8b/b1/kv32768 --filter decode/w4s2/llama3-8b/b32/kv4096 --filter decode/path/tc/llama2-7b/b1/kv32768 --filter decode/path/tc/llama2-7b/b32/kv4096 --filter decode/path/cc/llama3-8b/b32/kv4096)
build-trace/bench/weft-bench --group decode "${F[@]}" --commit "$WEFT_COMMIT" --json $OUT/trace.json 2>&1 | grep -v "^$"
echo "total $SECONDS s"
