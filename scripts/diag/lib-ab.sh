# Sourced (not run) by the device A/B calls of a new tree (the repo root, the working folder)
# against an old one (a carried `git archive` extract): final-ab.sh, dplan-check.sh. Builds live in
# /tmp/ab-old and /tmp/ab-new.

# ab_init <script name> <default DEADLINE> <old tree>: multicast off, CUDA on PATH, BASE_SRC (the old
# tree), OUT (default ./<name>-out) made, the clock (SECONDS) at 0, DEADLINE, LOG ($OUT/log.txt).
ab_init() {
  export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  BASE_SRC=${3:?usage: $1.sh <old source tree>}
  OUT="${OUT:-./$1-out}"
  mkdir -p "$OUT"
  SECONDS=0
  DEADLINE=${DEADLINE:-$2}
  LOG="$OUT/log.txt"
}
note() { echo "[$SECONDS s] $*" | tee -a "$LOG"; }
left() { echo $((DEADLINE - SECONDS)); }

# ab_serve <fewest seconds left> <python program>: the serving harness's b256 family
# (decode_plan_us_p50_256: the balanced plan(BlockTable) at 256 requests, caches cold between
# steps), old, new, old, new, with the committed router table, to $OUT/serve_{old,new}_{1,2}.json;
# each run's log line ends with the program's last line (its argument: the run's JSON).
ab_serve() {
  local run tree rc
  for run in 1 2; do
    for tree in old new; do
      [ "$(left)" -gt "$1" ] || { note "no time left for serve $tree $run"; continue; }
      timeout $(( $(left) - 5 )) /tmp/ab-$tree/bench/weft-serve-sim --router data/router/h100.json --seed 20260623 \
        --steps 40 --families b256 --out "$OUT/serve_${tree}_$run.json" > /tmp/serve_${tree}_$run.log 2>&1
      rc=$?
      note "serve $tree $run rc $rc: $(python3 -c "$2" "$OUT/serve_${tree}_$run.json" 2>&1 | tail -1)"
    done
  done
}
