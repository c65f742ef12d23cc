// Internal: the checks behind validate_block_table (weft/paged_kv.h), shared with the planners.
#pragma once
#include <cstdint>

#include "weft/paged_kv.h"

namespace weft::paged {

// validate_block_table's checks; num_pages < 0 skips the per-entry id range check (a planner
// that has no cache yet: ids are checked by run(), which has it). Throws weft::Error naming the
// argument ("table.row_stride", "table.block_ids", "table.seq_lens", ...).
void check_block_table_rows(const BlockTable& table, int64_t page_size, int64_t num_pages);

}  // namespace weft::paged
