// WorkPlanLayout: fixed named offsets of a WorkPlan in a workspace (work_plan.h).
#include <cstring>

#include "attention/plan/work_plan.h"
#include "weft/error.h"

namespace weft::plan {

namespace {
std::size_t align_up(std::size_t x, std::size_t a) { return (x + a - 1) / a * a; }
}  // namespace

WorkPlanLayout::WorkPlanLayout(const WorkPlanBounds& b) : bounds_(b) {
  WEFT_CHECK_ARG(b.max_batch >= 0 && b.max_items >= 0 && b.max_merges >= 0 && b.max_sources >= 0 &&
                     b.max_slots >= 0,
                 "bounds", "counts must be >= 0");
  WEFT_CHECK_ARG(b.num_ctas >= 1, "bounds.num_ctas", "must be >= 1, got " << b.num_ctas);
  WEFT_CHECK_ARG(b.tile_rows >= 1 && b.head_dim >= 1, "bounds", "tile_rows and head_dim must be >= 1");
  std::size_t off = align_up(sizeof(WorkPlanHeader), kAlign);
  auto arr = [&](std::size_t count, std::size_t elem = sizeof(int32_t)) {
    const std::size_t at = off;
    off = align_up(off + count * elem, kAlign);
    return at;
  };
  const std::size_t I = b.max_items, M = b.max_merges;
  off_.cta_indptr = arr(std::size_t(b.num_ctas) + 1);
  off_.wide_cta_indptr = arr(std::size_t(b.num_ctas) + 1);
  off_.item_req_begin = arr(I);
  off_.item_num_reqs = arr(I);
  off_.item_kv_head = arr(I);
  off_.item_row_begin = arr(I);
  off_.item_row_end = arr(I);
  off_.item_page_base = arr(I);
  off_.item_kv_begin = arr(I);
  off_.item_kv_end = arr(I);
  off_.item_slot = arr(I);
  off_.req_list = arr(b.max_batch);
  off_.merge_request = arr(M);
  off_.merge_kv_head = arr(M);
  off_.merge_row_begin = arr(M);
  off_.merge_row_end = arr(M);
  off_.merge_src_indptr = arr(M + 1);
  off_.src_slot = arr(b.max_sources);
  off_.src_row = arr(b.max_sources);
  metadata_bytes_ = off;
  off_.partial_o = arr(std::size_t(b.max_slots) * b.tile_rows * b.head_dim, sizeof(float));
  off_.partial_lse = arr(std::size_t(b.max_slots) * b.tile_rows, sizeof(float));
  total_bytes_ = off;
}

void WorkPlanLayout::serialize(const WorkPlan& p, void* dst) const {
  const WorkPlanBounds& b = bounds_;
  const int32_t slots = p.num_slots();  // once: a scan of every item (~1 us for 2304 items)
  WEFT_CHECK_ARG(p.version == kWorkPlanVersion, "plan", "version " << p.version << " != " << kWorkPlanVersion);
  WEFT_CHECK_ARG(p.num_ctas == b.num_ctas, "plan", "num_ctas " << p.num_ctas << " != bound " << b.num_ctas);
  WEFT_CHECK_ARG(p.tile_rows <= b.tile_rows, "plan", "tile_rows " << p.tile_rows << " > bound " << b.tile_rows);
  WEFT_CHECK_ARG(p.batch <= b.max_batch && p.num_items() <= b.max_items && p.num_merges() <= b.max_merges &&
                     static_cast<int64_t>(p.src_slot.size()) <= b.max_sources && slots <= b.max_slots,
                 "plan",
                 "batch/items/merges/sources/slots " << p.batch << "/" << p.num_items() << "/" << p.num_merges() << "/"
                                                     << p.src_slot.size() << "/" << slots
                                                     << " exceed the workspace bounds");
  unsigned char* d = static_cast<unsigned char*>(dst);
  WorkPlanHeader h{};
  h.version = p.version;
  h.num_items = p.num_items();
  h.num_merges = p.num_merges();
  h.num_ctas = p.num_ctas;
  h.batch = p.batch;
  h.tile_rows = b.tile_rows;  // the partial slots' row stride
  h.group_size = p.group_size;
  h.num_kv_heads = p.num_kv_heads;
  h.num_slots = slots;
  h.num_wide_items = p.num_wide_items;
  std::memcpy(d, &h, sizeof h);
  auto put = [&](std::size_t at, const std::vector<int32_t>& v) {
    if (!v.empty()) std::memcpy(d + at, v.data(), v.size() * sizeof(int32_t));
  };
  put(off_.cta_indptr, p.cta_indptr);
  WEFT_CHECK_ARG(p.wide_cta_indptr.empty() ? p.num_wide_items == 0 : p.wide_cta_indptr.size() == p.cta_indptr.size(),
                 "plan", "wide_cta_indptr needs num_ctas + 1 entries when there are wide items");
  if (p.wide_cta_indptr.empty())  // no wide items: every wide CTA's range is empty
    std::memset(d + off_.wide_cta_indptr, 0, (std::size_t(b.num_ctas) + 1) * sizeof(int32_t));
  else
    put(off_.wide_cta_indptr, p.wide_cta_indptr);
  put(off_.item_req_begin, p.item_req_begin);
  put(off_.item_num_reqs, p.item_num_reqs);
  put(off_.item_kv_head, p.item_kv_head);
  put(off_.item_row_begin, p.item_row_begin);
  put(off_.item_row_end, p.item_row_end);
  put(off_.item_page_base, p.item_page_base);
  put(off_.item_kv_begin, p.item_kv_begin);
  put(off_.item_kv_end, p.item_kv_end);
  put(off_.item_slot, p.item_slot);
  put(off_.req_list, p.req_list);
  put(off_.merge_request, p.merge_request);
  put(off_.merge_kv_head, p.merge_kv_head);
  put(off_.merge_row_begin, p.merge_row_begin);
  put(off_.merge_row_end, p.merge_row_end);
  put(off_.merge_src_indptr, p.merge_src_indptr);
  put(off_.src_slot, p.src_slot);
  put(off_.src_row, p.src_row);
}

WorkPlanPointers WorkPlanLayout::pointers(void* base) const {
  unsigned char* d = static_cast<unsigned char*>(base);
  auto i32 = [&](std::size_t at) { return reinterpret_cast<const int32_t*>(d + at); };
  WorkPlanPointers v;
  v.header = reinterpret_cast<const WorkPlanHeader*>(d);
  v.cta_indptr = i32(off_.cta_indptr);
  v.wide_cta_indptr = i32(off_.wide_cta_indptr);
  v.item_req_begin = i32(off_.item_req_begin);
  v.item_num_reqs = i32(off_.item_num_reqs);
  v.item_kv_head = i32(off_.item_kv_head);
  v.item_row_begin = i32(off_.item_row_begin);
  v.item_row_end = i32(off_.item_row_end);
  v.item_page_base = i32(off_.item_page_base);
  v.item_kv_begin = i32(off_.item_kv_begin);
  v.item_kv_end = i32(off_.item_kv_end);
  v.item_slot = i32(off_.item_slot);
  v.req_list = i32(off_.req_list);
  v.merge_request = i32(off_.merge_request);
  v.merge_kv_head = i32(off_.merge_kv_head);
  v.merge_row_begin = i32(off_.merge_row_begin);
  v.merge_row_end = i32(off_.merge_row_end);
  v.merge_src_indptr = i32(off_.merge_src_indptr);
  v.src_slot = i32(off_.src_slot);
  v.src_row = i32(off_.src_row);
  v.partial_o = reinterpret_cast<float*>(d + off_.partial_o);
  v.partial_lse = reinterpret_cast<float*>(d + off_.partial_lse);
  return v;
}

}  // namespace weft::plan
