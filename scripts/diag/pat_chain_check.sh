#!/usr/bin/env bash
# One device call for the programmatic launch chain of the sm90 wave plans (issue 21; wrapper.cpp
# after_wide, the work plan's merge launched programmatically), dev-box binaries carried
# xz-compressed (BIN=<dir with weft-bench.xz, weft-bench-old.xz (the base commit's), weft_gpu_decode.xz>):
# the prefix-sharing GPU tests, weft-bench --group pat old / new / old / new on the rows of ROWS
# (the changed trees, the no-sharing controls, pat/summary; the new binary's rows include the
# share_timeline / share_serial_timeline launch timelines), memcheck and racecheck on SAN_FILTER
# with what is left of BUDGET.
#   OUT=<dir> BIN=<dir> WEFT_COMMIT=<sha> OLD_COMMIT=<sha> [BUDGET=seconds] scripts/diag/pat_chain_check.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib-pat.sh"
BIN="${BIN:?BIN: folder with weft-bench.xz, weft-bench-old.xz and weft_gpu_decode.xz}"
pat_init
BUDGET="${BUDGET:-225}"
ROWS=(pat/64x8/bf16/B1-32/L4096-128/ pat/64x8/bf16/B1-256/L4096-128/ pat/32x8/bf16/B1-32/L4096-128/
      pat/16x8/bf16/B1-4-16/L128-256-1024/ /nosharing/ pat/summary)
SAN_FILTER="${SAN_FILTER:-DecodeSmall.SharePrefixesWideSm90WaveChain}"
pat_env
say unpack
pat_unpack weft-bench weft-bench-old weft_gpu_decode

PAT_TESTS='DecodeSmall.WorkPlanPacksMatchReference:DecodeSmall.SharePrefixes*:DecodeSmall.Cascade*'
pat_tests 80 "$X/weft_gpu_decode"

FARGS=()
for r in "${ROWS[@]}"; do FARGS+=(--filter "$r"); done
for round in 1 2; do
  for which in old new; do
    bin="$X/weft-bench"; sha="${WEFT_COMMIT:-?}"
    [ "$which" = old ] && bin="$X/weft-bench-old" && sha="${OLD_COMMIT:-?}"
    say "bench $which $round"
    timeout 35 "$bin" --group pat "${FARGS[@]}" --commit "$sha" --json "$OUT/pat_${which}_$round.json" \
      > "$OUT/bench_${which}_$round.log" 2>&1
    echo "bench $which $round rc=$?" | tee -a "$OUT/steps.log"
  done
done

t=$(( $(left) - 45 ))
if [ $t -gt 20 ]; then pat_memcheck "$((t < 50 ? t : 50))" "$X/weft_gpu_decode" "$SAN_FILTER"; else say "memcheck skipped: budget"; fi
pat_racecheck 5 45 "$X/weft_gpu_decode" "$SAN_FILTER"
pat_finish tests_pat memcheck racecheck
rm -rf "$X"
