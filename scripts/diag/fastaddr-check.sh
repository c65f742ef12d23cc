#!/usr/bin/env bash
# One device call for the one-page warp-tile copy path (kv_issue_page: one page-id load and a
# fixed pointer step per warp tile when page_size is a power of two >= 16 and the item's keys
# start 16-aligned): decode-ab-check.sh (copy it into the carried folder beside the binaries) with
# the small suites (wide packs included: their narrow items run this pipeline), Decode.ManyRequestsGqa,
# the long block-table and ALiBi split-KV tests (~75 s); not the ~18-s repeat-bitwise one.
#   OUT=... WEFT_COMMIT=... bash <carry>/fastaddr-check.sh [budget_s]
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TESTS='DecodeSmall.*:DecodeAlibiSmall.*:DecodeFp8Small.*:DecodeBlockTableSmall.*:DecodeWorkQueueSmall.*:DecodeRouteSmall.*:DecodeHardeningSmall.*'
TESTS+=':Decode.ManyRequestsGqa:Decode.ManyRequestsSmallGroups:Decode.LongUniformAndZipfLengths:DecodeBlockTable.LongRaggedEqualsCsrBitwise:DecodeAlibi.SplitKvLongHistories'
TAG=fa TESTS="$TESTS" TESTS_TIMEOUT=110 CARRY="${CARRY:-$HERE}" \
  MEMCHECK_FILTER='DecodeSmall.WarpsAndStages:DecodeSmall.SplitKVWithEmptyRequests:DecodeSmall.WorkPlanPacksMatchReference:DecodeSmall.SharePrefixesWrapper:DecodeBlockTableSmall.PrefixShareEqualsCsrBitwise' \
  exec bash "$HERE/decode-ab-check.sh" "${1:-270}"
