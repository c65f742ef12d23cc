// Host validation of prefill plan inputs (pure C++, unit-tested on the host). Each check throws
// weft::Error naming the offending argument.
#pragma once
#include <cstdint>
#include <vector>

#include "weft/attention.h"
#include "weft/paged_kv.h"
#include "weft/prefill.h"

namespace weft::prefill {

void check_bounds(const PrefillBounds& b);
// Host mirrors of a page table: indptr monotonic from 0, last_page_len consistent, kv_len < 2^31.
// Batch 0 (an empty step): indptr {0} or none (size 0, null), last_page_len size 0 (may be null).
void check_table_host(const PageTable& table, int64_t page_size);
// sm_scale >= 0 and finite, window_left >= -1, soft-cap >= 0 and finite, known mask mode.
void check_variant(const AttentionVariant& v);
// mask_indptr[b+1] - mask_indptr[b] == ceil(q_len(b) * kv_len(b) / 8), starting at 0. An empty
// batch (kv_len empty) may pass null.
void check_mask_indptr(const int32_t* mask_indptr_host, const int32_t* qo_indptr_host,
                       const std::vector<int32_t>& kv_len);

}  // namespace weft::prefill
