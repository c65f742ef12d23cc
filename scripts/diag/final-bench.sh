#!/usr/bin/env bash
# Second device call of a session's final check, on the machine that main-check.sh has just built
# (its build-gpu is kept between calls of one warm machine): issue 19's whole-bench A/B (the old
# tree's prebuilt weft-bench + libweft.so.0 from OLD_BIN, xz-compressed, against this build's
# weft-bench; core-ab.sh with SKIP_BUILD, PAIRS processes each, interleaved), then the full
# weft-bench run of this build (every group it has) as the GPU's newest full run.
#   OUT=... WEFT_COMMIT=<new> BASE_COMMIT=<old> OLD_BIN=.carry-old [PAIRS=3] [AB_DEADLINE=300]
#   [FULL_TIMEOUT=240] [AB=0: no A/B] [FULL=0: no full run] scripts/diag/final-bench.sh
# BENCH_GROUPS (optional): the groups of the full run. Writes $OUT/core_ab.json (+ core-ab.sh's logs),
# $OUT/all.json and all.log.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT="${OUT:?OUT}"
NEW=build-gpu/bench/weft-bench
[ -x "$NEW" ] || { echo "no $NEW (run main-check.sh first on this machine)"; exit 2; }
mkdir -p "$OUT"
t0=$SECONDS
if [ "${AB:-1}" = 1 ]; then
OLD_BIN="${OLD_BIN:?OLD_BIN: folder with weft-bench.old.xz and libweft.so.0.old.xz}"
mkdir -p /tmp/ab-old/bench /tmp/ab-new/bench
unxz_to() {  # <file.xz> <destination>
  if command -v xz > /dev/null; then xz -dc "$1" > "$2"; else
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"
  fi && chmod +x "$2"
}
unxz_to "$OLD_BIN/weft-bench.old.xz" /tmp/ab-old/bench/weft-bench || exit 1
unxz_to "$OLD_BIN/libweft.so.0.old.xz" /tmp/ab-old/libweft.so.0 || exit 1
cp "$NEW" /tmp/ab-new/bench/weft-bench
cuda_libs=$(dirname "$(find /usr/local/cuda* -name 'libcudart.so.*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=/tmp/ab-old:${cuda_libs}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
ldd /tmp/ab-old/bench/weft-bench /tmp/ab-new/bench/weft-bench | grep "not found" && exit 1
PAIRS="${PAIRS:-3}" DEADLINE="${AB_DEADLINE:-300}" SKIP_BUILD=1 scripts/diag/core-ab.sh /dev/null --no-ceilings
echo "[final-bench] A/B done at $((SECONDS - t0)) s"
fi
# The full run, one process per group (weft-bench writes its JSON at exit: a group cut by the
# time limit loses only itself), merged into one JSON (the first process's header; cases,
# failures and groups of all; "command" names each process).
[ "${FULL:-1}" = 1 ] || exit 0
end=$((SECONDS + ${FULL_TIMEOUT:-240}))
mkdir -p /tmp/full
: > "$OUT/all.log"
for g in ${BENCH_GROUPS:-ceiling_check decode prefill append jit pat pod prefill_plan_ab}; do
  left=$((end - SECONDS))
  [ "$left" -gt 10 ] || { echo "[final-bench] no time left for group $g" | tee -a "$OUT/all.log"; continue; }
  timeout "$left" "$NEW" --group "$g" --json "/tmp/full/$g.json" --commit "${WEFT_COMMIT:-unknown}" >> "$OUT/all.log" 2>&1
  echo "[final-bench] group $g rc=$? at $((SECONDS - t0)) s" | tee -a "$OUT/all.log"
done
python3 - "$OUT/all.json" /tmp/full/*.json <<'PY'
import json, sys
parts = [json.load(open(f)) for f in sys.argv[2:]]
if parts:
    out = dict(parts[0])
    out["cases"] = [c for p in parts for c in p.get("cases", [])]
    out["failures"] = [f for p in parts for f in p.get("failures", [])]
    out["groups"] = [g for p in parts for g in p.get("groups", [])]
    out["command"] = " ; ".join(p.get("command", "") for p in parts)
    json.dump(out, open(sys.argv[1], "w"), indent=1)
    print(f"[final-bench] all.json: {len(out['cases'])} cases, {len(out['failures'])} failures, groups {out['groups']}")
PY
