// vLLM-style block tables -> BSR page table (host only).
#include <climits>
#include <cstdint>

#include "paged/block_table.h"
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

namespace weft {

void validate_block_table(const BlockTable& t, int64_t page_size, int64_t num_pages) {
  WEFT_CHECK_ARG(num_pages >= 0, "num_pages", "must be >= 0, got " << num_pages);
  paged::check_block_table_rows(t, page_size, num_pages);
}

void paged::check_block_table_rows(const BlockTable& t, int64_t page_size, int64_t num_pages) {
  WEFT_CHECK_ARG(t.batch_size >= 0, "table.batch_size", "must be >= 0, got " << t.batch_size);
  check::in_range(page_size, "page_size", 1, INT32_MAX);
  WEFT_CHECK_ARG(t.max_blocks >= 0, "table.max_blocks", "must be >= 0, got " << t.max_blocks);
  WEFT_CHECK_ARG(t.row_stride >= t.max_blocks, "table.row_stride",
                 "must be >= max_blocks = " << t.max_blocks << ", got " << t.row_stride);
  const int64_t b = t.batch_size;
  // Kernels address row r at r * row_stride (int32 page bases): the last used entry must fit.
  const int64_t needed = b == 0 ? 0 : (b - 1) * t.row_stride + t.max_blocks;
  WEFT_CHECK_ARG(needed <= INT32_MAX, "table.row_stride",
                 "(batch_size - 1) * row_stride + max_blocks = " << needed << " exceeds int32");
  WEFT_CHECK_ARG(t.block_ids.size >= needed, "table.block_ids",
                 "has " << t.block_ids.size << " entries, " << b << " rows of stride " << t.row_stride
                        << " with max_blocks " << t.max_blocks << " need " << needed);
  WEFT_CHECK_ARG(t.seq_lens.size == b, "table.seq_lens", "expected " << b << " entries, got " << t.seq_lens.size);
  check::device_index_array(t.block_ids.device, t.block_ids.size, "table.block_ids.device");
  check::device_index_array(t.seq_lens.device, t.seq_lens.size, "table.seq_lens.device");
  if (b == 0) return;
  check::not_null(t.seq_lens.host, "table.seq_lens.host");
  if (needed > 0) check::not_null(t.block_ids.host, "table.block_ids.host");
  // A row fits iff 0 <= len <= max_blocks x page_size (ceil(len / page_size) <= max_blocks): one
  // unsigned compare per row, no division (every plan(BlockTable) calls this; 256 rows: 0.42 ->
  // 0.14 us on the dev box, weft-plan-bench route/ "rows check"); the messages are worked out only
  // on a failure.
  const uint64_t max_len = uint64_t(t.max_blocks) * uint64_t(page_size);  // < 2^62
  for (int64_t r = 0; r < b; ++r) {
    const int64_t len = t.seq_lens.host[r];
    if (uint64_t(len) > max_len) {  // negative lengths wrap past max_len
      WEFT_CHECK_ARG(len >= 0, "table.seq_lens", "seq_lens[" << r << "] must be >= 0, got " << len);
      const int64_t pages = (len + page_size - 1) / page_size;
      WEFT_CHECK_ARG(pages <= t.max_blocks, "table.seq_lens",
                     "row " << r << " needs " << pages << " blocks for " << len << " tokens (page_size " << page_size
                            << ") but max_blocks is " << t.max_blocks);
    }
    if (num_pages < 0) continue;
    const int64_t pages = (len + page_size - 1) / page_size;
    const int32_t* row = t.block_ids.host + r * t.row_stride;
    for (int64_t i = 0; i < pages; ++i)
      WEFT_CHECK_ARG(row[i] >= 0 && row[i] < num_pages, "table.block_ids",
                     "block_ids[" << r << "][" << i << "] = " << row[i] << " is outside [0, " << num_pages << ")");
  }
}

}  // namespace weft
