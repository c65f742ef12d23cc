// Compact work-queue schedule for decode (pure C++, no CUDA), after PersistentKV's work queue:
// one task per NON-EMPTY (row, KV head, split), split bounds from each row's true length, a
// 1-D grid with one task per CTA (no persistent deal), and a segmented merge of the rows that
// have several splits. It is a producer of the generic work plan (work_plan.h): each task is an
// item of one request (num_reqs 1, rows = the GQA group), and the decode kernel's generic item
// path runs it (launch_decode_work_plan with a null cta_indptr selects the 1-D grid).
//
//   row b, kv head h:  splits = max(1, ceil(kv_len[b] / chunk)) (chunk 0: one split, "no-split");
//                      split s covers keys [s * chunk, min((s + 1) * chunk, kv_len[b])).
//   kv_len 0:          one task per head with no keys: it stores O = 0, LSE = -inf and returns
//                      before loading anything (the kernel's neutral-state exit).
//   order:             full-length tasks first, then the shorter last splits (longest first
//                      within neither: both passes go row by row), so the block scheduler
//                      starts the long tasks in the first waves.
//   page lists:        row b's keys index the page list starting at page_base[b]: indptr[b] of
//                      a BSR table, or b * row_stride of a native block table.
// Slots: every task of a split row gets its own partial slot; one merge per split (row, head)
// with its sources in key order (deterministic).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "attention/plan/work_plan.h"

namespace weft::plan {

struct WorkQueueConfig {
  int32_t num_kv_heads = 1, group_size = 1;
  int32_t tile_rows = 16;      // rows of a task (= the partial slots' row stride); group <= tile_rows
  int32_t chunk = 0;           // keys per split, a multiple of kv_granularity; 0: no split
  int32_t kv_granularity = 16;
};

// Counts of a work-queue schedule, computed without building it (the router's features).
struct WorkQueueShape {
  int64_t tasks = 0;       // tasks = CTAs of the 1-D grid
  int64_t merges = 0;      // (row, head) pairs with >= 2 splits
  int64_t sources = 0;     // partial slots
  int32_t longest = 0;     // keys of the longest task
};
WorkQueueShape work_queue_shape(const int32_t* kv_len, int32_t batch, const WorkQueueConfig& cfg);

// Builds the schedule into `out` (vectors reused: no allocation when warm). Throws weft::Error
// on bad config or negative lengths.
void make_work_queue(const int32_t* kv_len, const int32_t* page_base, int32_t batch, const WorkQueueConfig& cfg,
                     WorkPlan& out);

// A work plan packed contiguously for one host->device copy of only the bytes it uses: header
// and arrays at 16-byte aligned offsets from the start. The pointers are recomputed per plan
// (the work queue's grid changes with the plan anyway, so it is not a graph-replay path).
struct CompactWorkPlan {
  std::vector<unsigned char> bytes;  // host image (copy bytes.size() bytes)
  // Offsets of each array in `bytes`.
  std::size_t item_req_begin = 0, item_num_reqs = 0, item_kv_head = 0, item_row_begin = 0, item_row_end = 0;
  std::size_t item_page_base = 0, item_kv_begin = 0, item_kv_end = 0, item_slot = 0, req_list = 0;
  std::size_t merge_request = 0, merge_kv_head = 0, merge_row_begin = 0, merge_row_end = 0;
  std::size_t merge_src_indptr = 0, src_slot = 0, src_row = 0;
};
void pack_compact(const WorkPlan& plan, int32_t slot_rows, CompactWorkPlan& out);
// Device pointers of a compact image copied to `base`; partial states at the given buffers.
// cta_indptr is null: the 1-D grid of the work queue.
WorkPlanPointers compact_pointers(const CompactWorkPlan& c, void* base, float* partial_o, float* partial_lse);

}  // namespace weft::plan
