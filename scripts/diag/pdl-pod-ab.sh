#!/usr/bin/env bash
# One device call (issue 28): the POD partition's programmatic launch order (new tree) against the
# two graph branches of the tree before it (old = this tree with AB_PATCH reversed), in one call:
# build both (new: every GPU suite + weft-bench; old: weft-bench only, in parallel), the GPU suites
# the change touches that an earlier call did not run (GPU_SUITES), then bench group "pod" per model
# interleaved old, new, old, new, ... and bench/pod_merge.py for each tree.
#   OUT=... WEFT_COMMIT=<new> AB_PATCH=<git diff old new -- src include> [GPU_SUITES="jit_run paged attention prefill"]
#   scripts/diag/pdl-pod-ab.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PATH=/usr/local/cuda/bin:$PATH
OUT="${OUT:?OUT}"; PATCH="$(cd "$(dirname "${AB_PATCH:?AB_PATCH}")" && pwd)/$(basename "$AB_PATCH")"
t0=$SECONDS
note() { echo "[ab +$((SECONDS - t0))s] $*" | tee -a "$OUT/log.txt"; }
cfg() { cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a -DWEFT_WITH_COMM=OFF \
          -DWEFT_DISABLE="comm;tp;norm" -DWEFT_BUILD_TESTS="$3" > "/tmp/cfg_$(basename "$2").log" 2>&1; }
mkdir -p /tmp/old
tar -cf - --exclude=./build-gpu --exclude=./build-pod --exclude=./.pysite-final . | tar -xf - -C /tmp/old
(cd /tmp/old && patch -R -p1 -s < "$PATCH") || { note "patch -R failed"; exit 1; }
note "old tree ready"
( cfg /tmp/old /tmp/old/build-pod OFF && ninja -C /tmp/old/build-pod -j16 weft-bench > /tmp/old_build.log 2>&1; echo "rc=$?" >> /tmp/old_build.log ) &
OLD_PID=$!
cfg . build-gpu ON && ninja -C build-gpu -j16 > /tmp/new_build.log 2>&1
note "new build rc=$? $(grep -c 'spill' /tmp/new_build.log) spill lines"
wait "$OLD_PID"; note "old build $(tail -1 /tmp/old_build.log)"
for s in ${GPU_SUITES:-jit_run paged attention prefill}; do
  timeout 120 "build-gpu/tests/weft_gpu_$s" --gtest_brief=1 > "/tmp/t_$s.log" 2>&1
  note "weft_gpu_$s rc=$? $(grep -E '^\[  (PASSED|FAILED)' "/tmp/t_$s.log" | tr '\n' ' ')"
done
mkdir -p /tmp/ab/old /tmp/ab/new
for m in llama3-8b yi-6b llama2-7b; do
  for v in old new; do
    b=build-gpu/bench/weft-bench; [ "$v" = old ] && b=/tmp/old/build-pod/bench/weft-bench
    timeout 90 "$b" --group pod --filter "pod/$m/" --no-ceilings --commit "${WEFT_COMMIT:-?}-$v" \
      --json "/tmp/ab/$v/bench_$m.json" > "/tmp/ab/${v}_$m.log" 2>&1
    note "pod $m $v rc=$?"
  done
done
for v in old new; do
  note "merge $v"
  python3 bench/pod_merge.py "$OUT/pod_$v.json" /tmp/ab/$v/bench_*.json 2>&1 | grep -E "^(mean_speedup|min_speedup|share_within|mean_partition_speedup|mean_ideal|batches_kept|share_auto)" | tee -a "$OUT/log.txt"
done
note "done"
