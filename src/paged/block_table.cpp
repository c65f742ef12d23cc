// vLLM-style block tables -> BSR page table (host only).
#include <climits>
#include <cstdint>

#include "weft/paged_kv.h"
#include "weft/validate.h"

namespace weft {

PageTableHost page_table_from_block_tables(const int32_t* block_tables, int64_t batch,
                                           int64_t max_blocks_per_seq, const int32_t* seq_lens,
                                           int64_t page_size, int64_t num_pages) {
  WEFT_CHECK_ARG(batch >= 0 && batch < INT32_MAX, "batch", "must be in [0, " << INT32_MAX << "), got " << batch);
  WEFT_CHECK_ARG(max_blocks_per_seq >= 0, "max_blocks_per_seq", "must be >= 0, got " << max_blocks_per_seq);
  check::in_range(page_size, "page_size", 1, INT32_MAX);
  WEFT_CHECK_ARG(num_pages >= 0, "num_pages", "must be >= 0, got " << num_pages);
  if (batch > 0) check::not_null(seq_lens, "seq_lens");
  if (batch > 0 && max_blocks_per_seq > 0) check::not_null(block_tables, "block_tables");

  PageTableHost out;
  out.indptr.reserve(batch + 1);
  out.last_page_len.reserve(batch);
  out.indptr.push_back(0);
  int64_t total = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = seq_lens[b];
    WEFT_CHECK_ARG(len >= 0, "seq_lens", "seq_lens[" << b << "] must be >= 0, got " << len);
    const int64_t pages = (len + page_size - 1) / page_size;
    WEFT_CHECK_ARG(pages <= max_blocks_per_seq, "block_tables",
                   "row " << b << " needs " << pages << " blocks for " << len
                          << " tokens but has only max_blocks_per_seq = " << max_blocks_per_seq);
    total += pages;
    WEFT_CHECK_ARG(total <= INT32_MAX, "seq_lens", "total page count exceeds int32 at request " << b);
    const int32_t* row = block_tables + b * max_blocks_per_seq;
    for (int64_t i = 0; i < pages; ++i) {
      WEFT_CHECK_ARG(row[i] >= 0 && row[i] < num_pages, "block_tables",
                     "block_tables[" << b << "][" << i << "] = " << row[i] << " is outside [0, "
                                     << num_pages << ")");
      out.indices.push_back(row[i]);
    }
    out.indptr.push_back(static_cast<int32_t>(total));
    out.last_page_len.push_back(pages == 0 ? 0 : static_cast<int32_t>(len - (pages - 1) * page_size));
  }
  return out;
}

}  // namespace weft
