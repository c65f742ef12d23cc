#!/usr/bin/env bash
# One device call for the decode page-id ring (issue 28: page ids one pipeline depth ahead):
# decode-ab-check.sh (copy it into the carried folder beside the binaries) with the small suites
# and Decode.ManyRequestsGqa (~45 s); not the wide-pack tests (their kernels are the prefill tiles,
# not this mainloop) nor the ~18-s repeat-bitwise one (a timing-only change).
#   OUT=... WEFT_COMMIT=... bash <carry>/pgahead-check.sh [budget_s]
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TESTS='DecodeSmall.*:DecodeAlibiSmall.*:DecodeFp8Small.*:DecodeBlockTableSmall.*:DecodeWorkQueueSmall.*:DecodeRouteSmall.*:DecodeHardeningSmall.*:Decode.ManyRequestsGqa'
TESTS+=':-DecodeSmall.SharePrefixesWidePacks:DecodeSmall.SharePrefixesWideSm90Selection:DecodeSmall.SharePrefixesWideSm90WaveChain'
TAG=pga TESTS="$TESTS" TESTS_TIMEOUT=80 CARRY="${CARRY:-$HERE}" \
  MEMCHECK_FILTER='DecodeSmall.WarpsAndStages:DecodeSmall.SplitKVWithEmptyRequests:DecodeSmall.WorkPlanPacksMatchReference' \
  exec bash "$HERE/decode-ab-check.sh" "${1:-345}"
