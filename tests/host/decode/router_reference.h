// The router's host parts as they were before the routed path's cost cut (issue 22, session of
// 2026-11-24), kept verbatim as the reference of the property tests (router_test.cpp) and of
// weft-plan-bench's "route/" rows: the fast paths must return exactly what these return.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace weft::decode::reference {

// shared_prefix_keys (decode/router.h) by sorting the rows on (first page id, row): O(batch log
// batch) and one vector allocation per call.
inline int64_t shared_prefix_keys(const int32_t* ids, int64_t row_stride, const int32_t* kv_len, int32_t batch,
                                  int32_t page_size) {
  if (batch < 2 || page_size < 1) return 0;
  std::vector<uint64_t> rows;
  rows.reserve(size_t(batch));
  for (int32_t b = 0; b < batch; ++b)
    if (kv_len[b] >= page_size)
      rows.push_back(uint64_t(uint32_t(ids[b * row_stride]) ^ 0x80000000u) << 32 | uint32_t(b));
  std::sort(rows.begin(), rows.end());
  int64_t keys = 0;
  for (size_t i = 0; i < rows.size();) {
    size_t j = i + 1;
    const int32_t lead = int32_t(uint32_t(rows[i]));
    const int32_t* lp = ids + lead * row_stride;
    while (j < rows.size() && (rows[j] >> 32) == (rows[i] >> 32)) {
      const int32_t m = int32_t(uint32_t(rows[j]));
      const int32_t* mp = ids + m * row_stride;
      const int32_t full = std::min(kv_len[lead], kv_len[m]) / page_size;
      int32_t p = 0;
      constexpr int32_t kBlock = 64;
      while (p + kBlock <= full && std::memcmp(mp + p, lp + p, kBlock * sizeof(int32_t)) == 0) p += kBlock;
      while (p < full && mp[p] == lp[p]) ++p;
      keys += int64_t(p) * page_size;
      ++j;
    }
    i = j;
  }
  return keys;
}

}  // namespace weft::decode::reference
