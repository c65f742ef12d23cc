// Work-queue schedule (work_queue.h).
#include "attention/plan/work_queue.h"

#include <algorithm>
#include <cstring>

#include "weft/error.h"

namespace weft::plan {

namespace {

void check_config(const WorkQueueConfig& c) {
  WEFT_CHECK_ARG(c.num_kv_heads >= 1, "cfg.num_kv_heads", "must be >= 1, got " << c.num_kv_heads);
  WEFT_CHECK_ARG(c.group_size >= 1 && c.group_size <= c.tile_rows, "cfg.group_size",
                 "must be in [1, tile_rows = " << c.tile_rows << "], got " << c.group_size);
  WEFT_CHECK_ARG(c.kv_granularity >= 1, "cfg.kv_granularity", "must be >= 1, got " << c.kv_granularity);
  WEFT_CHECK_ARG(c.chunk >= 0 && c.chunk % c.kv_granularity == 0, "cfg.chunk",
                 "must be 0 or a positive multiple of " << c.kv_granularity << ", got " << c.chunk);
}

int64_t splits_of(int32_t len, int32_t chunk) {
  return chunk == 0 || len <= chunk ? 1 : (int64_t(len) + chunk - 1) / chunk;
}

}  // namespace

WorkQueueShape work_queue_shape(const int32_t* kv_len, int32_t batch, const WorkQueueConfig& cfg) {
  WorkQueueShape s;
  const int64_t h = cfg.num_kv_heads;
  for (int32_t b = 0; b < batch; ++b) {
    const int32_t len = kv_len[b];
    const int64_t n = splits_of(len, cfg.chunk);
    s.tasks += n * h;
    if (n >= 2) {
      s.merges += h;
      s.sources += n * h;
    }
    s.longest = std::max(s.longest, cfg.chunk == 0 ? len : std::min(len, cfg.chunk));
  }
  return s;
}

void make_work_queue(const int32_t* kv_len, const int32_t* page_base, int32_t batch, const WorkQueueConfig& cfg,
                     WorkPlan& p) {
  check_config(cfg);
  WEFT_CHECK_ARG(batch >= 0, "batch", "must be >= 0, got " << batch);
  WEFT_CHECK_ARG(batch == 0 || (kv_len != nullptr && page_base != nullptr), "kv_len",
                 "host arrays required for batch " << batch);
  const int32_t H = cfg.num_kv_heads, g = cfg.group_size;
  int64_t tasks = 0, merges = 0, sources = 0;
  for (int32_t b = 0; b < batch; ++b) {
    WEFT_CHECK_ARG(kv_len[b] >= 0, "kv_len", "entry " << b << " is negative: " << kv_len[b]);
    const int64_t n = splits_of(kv_len[b], cfg.chunk);
    tasks += n * H;
    if (n >= 2) merges += H, sources += n * H;
  }
  WEFT_CHECK_ARG(tasks <= INT32_MAX / 2, "kv_len", "the schedule has too many tasks: " << tasks);

  p.version = kWorkPlanVersion;
  p.num_ctas = static_cast<int32_t>(tasks);  // 1-D grid: one task per CTA
  p.num_kv_heads = H;
  p.group_size = g;
  p.tile_rows = cfg.tile_rows;
  p.batch = batch;
  p.cta_indptr.clear();
  auto size_items = [&](std::vector<int32_t>& v) { v.resize(size_t(tasks)); };
  for (auto* v : {&p.item_req_begin, &p.item_num_reqs, &p.item_kv_head, &p.item_row_begin, &p.item_row_end,
                  &p.item_page_base, &p.item_kv_begin, &p.item_kv_end, &p.item_slot})
    size_items(*v);
  p.req_list.resize(size_t(batch));
  for (int32_t b = 0; b < batch; ++b) p.req_list[b] = b;
  for (auto* v : {&p.merge_request, &p.merge_kv_head, &p.merge_row_begin, &p.merge_row_end}) v->resize(size_t(merges));
  p.merge_src_indptr.resize(size_t(merges) + 1);
  p.src_slot.resize(size_t(sources));
  p.src_row.assign(size_t(sources), 0);  // a task's rows start at its slot's row 0
  p.kv_len.assign(kv_len, kv_len + batch);

  // Slots and merges in (row, head) order; tasks emitted in two passes (full chunks, then the
  // shorter last splits) that both walk the rows in order, so each pass is a plain loop.
  int32_t item = 0, slot = 0, m = 0;
  p.merge_src_indptr[0] = 0;
  auto emit = [&](int32_t b, int32_t h, int32_t k0, int32_t k1, int32_t s) {
    p.item_req_begin[item] = b;
    p.item_num_reqs[item] = 1;
    p.item_kv_head[item] = h;
    p.item_row_begin[item] = 0;
    p.item_row_end[item] = g;
    p.item_page_base[item] = page_base[b];
    p.item_kv_begin[item] = k0;
    p.item_kv_end[item] = k1;
    p.item_slot[item] = s;
    ++item;
  };
  // Pass 0: slot and merge numbering; full-chunk tasks (every split but the last of a split row,
  // and the last when it is full) are emitted here, the rest in pass 1.
  for (int32_t b = 0; b < batch; ++b) {
    const int32_t len = kv_len[b];
    const int64_t n = splits_of(len, cfg.chunk);
    for (int32_t h = 0; h < H; ++h) {
      if (n == 1) continue;  // pass 1
      p.merge_request[m] = b;
      p.merge_kv_head[m] = h;
      p.merge_row_begin[m] = 0;
      p.merge_row_end[m] = g;
      for (int64_t s = 0; s < n; ++s) {
        const int32_t k0 = static_cast<int32_t>(s * cfg.chunk);
        const int32_t k1 = static_cast<int32_t>(std::min<int64_t>(len, (s + 1) * int64_t(cfg.chunk)));
        p.src_slot[slot] = slot;
        if (k1 - k0 == cfg.chunk) emit(b, h, k0, k1, slot);
        ++slot;
      }
      p.merge_src_indptr[m + 1] = slot;
      ++m;
    }
  }
  // Pass 1: unsplit rows (final output) and the short last splits, in row order.
  m = 0;
  for (int32_t b = 0; b < batch; ++b) {
    const int32_t len = kv_len[b];
    const int64_t n = splits_of(len, cfg.chunk);
    for (int32_t h = 0; h < H; ++h) {
      if (n == 1) {
        emit(b, h, 0, len, -1);
        continue;
      }
      const int32_t k0 = static_cast<int32_t>((n - 1) * cfg.chunk);
      if (len - k0 != cfg.chunk) emit(b, h, k0, len, p.merge_src_indptr[m + 1] - 1);
      ++m;
    }
  }
}

namespace {

// The work plan's int32 arrays in serialization order, each with its offset field in the
// compact image and its pointer in WorkPlanPointers (one table for packing and pointers).
struct ArrayField {
  const std::vector<int32_t> WorkPlan::*vec;
  std::size_t CompactWorkPlan::*off;
  const int32_t* WorkPlanPointers::*ptr;
};
constexpr ArrayField kFields[] = {
    {&WorkPlan::item_req_begin, &CompactWorkPlan::item_req_begin, &WorkPlanPointers::item_req_begin},
    {&WorkPlan::item_num_reqs, &CompactWorkPlan::item_num_reqs, &WorkPlanPointers::item_num_reqs},
    {&WorkPlan::item_kv_head, &CompactWorkPlan::item_kv_head, &WorkPlanPointers::item_kv_head},
    {&WorkPlan::item_row_begin, &CompactWorkPlan::item_row_begin, &WorkPlanPointers::item_row_begin},
    {&WorkPlan::item_row_end, &CompactWorkPlan::item_row_end, &WorkPlanPointers::item_row_end},
    {&WorkPlan::item_page_base, &CompactWorkPlan::item_page_base, &WorkPlanPointers::item_page_base},
    {&WorkPlan::item_kv_begin, &CompactWorkPlan::item_kv_begin, &WorkPlanPointers::item_kv_begin},
    {&WorkPlan::item_kv_end, &CompactWorkPlan::item_kv_end, &WorkPlanPointers::item_kv_end},
    {&WorkPlan::item_slot, &CompactWorkPlan::item_slot, &WorkPlanPointers::item_slot},
    {&WorkPlan::req_list, &CompactWorkPlan::req_list, &WorkPlanPointers::req_list},
    {&WorkPlan::merge_request, &CompactWorkPlan::merge_request, &WorkPlanPointers::merge_request},
    {&WorkPlan::merge_kv_head, &CompactWorkPlan::merge_kv_head, &WorkPlanPointers::merge_kv_head},
    {&WorkPlan::merge_row_begin, &CompactWorkPlan::merge_row_begin, &WorkPlanPointers::merge_row_begin},
    {&WorkPlan::merge_row_end, &CompactWorkPlan::merge_row_end, &WorkPlanPointers::merge_row_end},
    {&WorkPlan::merge_src_indptr, &CompactWorkPlan::merge_src_indptr, &WorkPlanPointers::merge_src_indptr},
    {&WorkPlan::src_slot, &CompactWorkPlan::src_slot, &WorkPlanPointers::src_slot},
    {&WorkPlan::src_row, &CompactWorkPlan::src_row, &WorkPlanPointers::src_row},
};

}  // namespace

void pack_compact(const WorkPlan& p, int32_t slot_rows, CompactWorkPlan& c) {
  // Header, then each array at the next 16-byte boundary (only the entries the plan has).
  std::size_t off = (sizeof(WorkPlanHeader) + 15) / 16 * 16;
  for (const ArrayField& f : kFields) {
    c.*f.off = off;
    off = (off + (p.*f.vec).size() * sizeof(int32_t) + 15) / 16 * 16;
  }
  c.bytes.resize(off);
  unsigned char* d = c.bytes.data();
  WorkPlanHeader h{};
  h.version = p.version;
  h.num_items = p.num_items();
  h.num_merges = p.num_merges();
  h.num_ctas = p.num_ctas;
  h.batch = p.batch;
  h.tile_rows = slot_rows;
  h.group_size = p.group_size;
  h.num_kv_heads = p.num_kv_heads;
  h.num_slots = static_cast<int32_t>(p.src_slot.size());
  std::memcpy(d, &h, sizeof h);
  for (const ArrayField& f : kFields) {
    const std::vector<int32_t>& v = p.*f.vec;
    if (!v.empty()) std::memcpy(d + c.*f.off, v.data(), v.size() * sizeof(int32_t));
  }
}

WorkPlanPointers compact_pointers(const CompactWorkPlan& c, void* base, float* partial_o, float* partial_lse) {
  unsigned char* d = static_cast<unsigned char*>(base);
  WorkPlanPointers v;
  v.header = reinterpret_cast<const WorkPlanHeader*>(d);
  v.cta_indptr = nullptr;
  for (const ArrayField& f : kFields) v.*f.ptr = reinterpret_cast<const int32_t*>(d + c.*f.off);
  v.partial_o = partial_o;
  v.partial_lse = partial_lse;
  return v;
}

}  // namespace weft::plan
