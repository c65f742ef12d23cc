#!/usr/bin/env bash
# Diagnostic (device): a three-way same-rows A/B of dev-box weft-bench binaries (xz-compressed in
# BIN, as core-ab-prebuilt.sh takes them): weft-bench.old (+ libweft.so.0.old), weft-bench.new and
# one variant weft-bench.$VARIANT (e.g. "subhead": the new tree with another launch order).
# The old binary's first run picks the rows (FILTERS: its --filter substrings); every later run
# is limited to exactly those row names. REPS rounds, the tree order alternating per round.
# Writes $OUT/<tree>.<round>.log. Usage (repo root):
#   OUT=... BIN=<dir> VARIANT=subhead REPS=4 FILTERS="decode/path/ decode/hdim/" scripts/diag/order-ab3.sh --no-ceilings
set -uo pipefail
BIN=${BIN:?}
VARIANT=${VARIANT:?}
OUT="${OUT:-./ab3-out}"
mkdir -p "$OUT" /tmp/ab3
for f in weft-bench.old libweft.so.0.old weft-bench.new "weft-bench.$VARIANT"; do
  if command -v xz > /dev/null; then xz -dc "$BIN/$f.xz" > "/tmp/ab3/$f"; else
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$BIN/$f.xz" "/tmp/ab3/$f"
  fi || exit 1
  chmod +x "/tmp/ab3/$f"
done
ln -sf /tmp/ab3/libweft.so.0.old /tmp/ab3/libweft.so.0
cuda_libs=$(dirname "$(find /usr/local/cuda* -name 'libcudart.so.*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=/tmp/ab3:${cuda_libs}:/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
args=()
for f in ${FILTERS:?}; do args+=(--filter "$f"); done
for i in $(seq 1 "${REPS:-3}"); do
  order="old new $VARIANT"
  [ $((i % 2)) = 0 ] && order="old $VARIANT new"
  for t in $order; do
    timeout "${RUN_TIMEOUT:-60}" /tmp/ab3/weft-bench.$t --group decode --group prefill "$@" "${args[@]}" > "$OUT/$t.$i.log" 2>&1
    echo "$t $i: $(grep -cE '^(decode|prefill)/' "$OUT/$t.$i.log") rows ($SECONDS s)"
    if [ "$t" = old ] && [ "$i" = 1 ]; then  # exact rows of the old tree from here on
      args=()
      while read -r r; do args+=(--filter "$r"); done < <(grep -oE '^(decode|prefill)/\S+' "$OUT/old.1.log")
    fi
  done
done
