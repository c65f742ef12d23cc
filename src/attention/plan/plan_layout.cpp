// The fixed workspace layout of balanced plans (balance.h: WorkspaceLayout): every array at an
// offset computed from the bounds, serialize / deserialize, device pointers.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "attention/plan/balance.h"
#include "weft/error.h"

namespace weft::plan {

// ---------------------------------------------------------------------------------------------
namespace {
constexpr int kItemArrays = 8;
constexpr int kMergeArrays = 4;
std::size_t align_up(std::size_t x, std::size_t a) { return (x + a - 1) / a * a; }
}  // namespace

WorkspaceLayout::WorkspaceLayout(const PlanBounds& b) : bounds_(b) {
  WEFT_CHECK_ARG(b.max_batch >= 1, "max_batch", "must be >= 1, got " << b.max_batch);
  WEFT_CHECK_ARG(b.max_tiles >= 0, "max_tiles", "must be >= 0, got " << b.max_tiles);
  WEFT_CHECK_ARG(b.num_ctas >= 1, "num_ctas", "must be >= 1, got " << b.num_ctas);
  WEFT_CHECK_ARG(b.tile_q >= 1, "tile_q", "must be >= 1, got " << b.tile_q);
  WEFT_CHECK_ARG(b.head_dim >= 1 && b.head_dim % 4 == 0, "head_dim",
                 "must be a positive multiple of 4, got " << b.head_dim);
  WEFT_CHECK_ARG(b.head_fold >= 1 && b.head_fold <= 65536, "head_fold", "must be in [1, 65536], got " << b.head_fold);
  max_items_ = b.max_tiles + b.num_ctas;
  // Per launched CTA (folded plans: num_ctas * head_fold): merge counters and partial slots;
  // CTA records per launched CTA with launch_records (decode), else per plan CTA.
  const std::size_t fold = static_cast<std::size_t>(b.head_fold);
  num_records_ = b.num_ctas * (b.launch_records ? b.head_fold : 1);
  max_merges_ = b.num_ctas;
  max_slots_ = 2 * b.num_ctas;
  std::size_t off = align_up(sizeof(PlanHeader), kAlign);
  off_cta_ = off;
  off = align_up(off + sizeof(int32_t) * (b.num_ctas + 1), kAlign);
  off_first_ = off;
  off = align_up(off + sizeof(CtaRecord) * std::size_t(num_records_), kAlign);
  off_items_ = off;
  off = align_up(off + sizeof(int32_t) * kItemArrays * std::size_t(max_items_), kAlign);
  off_merges_ = off;
  off = align_up(off + sizeof(int32_t) * (kMergeArrays * std::size_t(max_merges_) + max_merges_ + 1), kAlign);
  off_counter_ = off;
  off = align_up(off + sizeof(uint32_t) * std::size_t(max_merges_) * fold, kAlign);
  off_qo_ = off;
  off = align_up(off + sizeof(int32_t) * (b.max_batch + 1), kAlign);
  off_kv_ = off;
  off = align_up(off + sizeof(int32_t) * b.max_batch, kAlign);
  off_tail_ = off;
  off = align_up(off + b.tail_bytes, kAlign);
  metadata_bytes_ = off;
  off_po_ = off;
  off = align_up(off + sizeof(float) * std::size_t(max_slots_) * fold * b.tile_q * b.head_dim, kAlign);
  off_plse_ = off;
  off = align_up(off + sizeof(float) * std::size_t(max_slots_) * fold * b.tile_q, kAlign);
  total_bytes_ = off;
}

PlanPointers WorkspaceLayout::pointers(void* base) const {
  char* p = static_cast<char*>(base);
  auto i32 = [&](std::size_t off, std::size_t k) {
    return reinterpret_cast<const int32_t*>(p + off) + k;
  };
  const std::size_t mi = max_items_, mm = max_merges_;
  PlanPointers v{};
  v.header = reinterpret_cast<const PlanHeader*>(p);
  v.cta_indptr = i32(off_cta_, 0);
  v.cta_first = reinterpret_cast<const CtaRecord*>(p + off_first_);
  v.item_request = i32(off_items_, 0 * mi);
  v.item_kv_head = i32(off_items_, 1 * mi);
  v.item_row_begin = i32(off_items_, 2 * mi);
  v.item_row_end = i32(off_items_, 3 * mi);
  v.item_kv_begin = i32(off_items_, 4 * mi);
  v.item_kv_end = i32(off_items_, 5 * mi);
  v.item_partial_slot = i32(off_items_, 6 * mi);
  v.item_merge = i32(off_items_, 7 * mi);
  v.merge_request = i32(off_merges_, 0 * mm);
  v.merge_kv_head = i32(off_merges_, 1 * mm);
  v.merge_row_begin = i32(off_merges_, 2 * mm);
  v.merge_row_end = i32(off_merges_, 3 * mm);
  v.merge_indptr = i32(off_merges_, 4 * mm);
  v.merge_counter = reinterpret_cast<uint32_t*>(p + off_counter_);
  v.qo_indptr = i32(off_qo_, 0);
  v.kv_len = i32(off_kv_, 0);
  v.partial_o = reinterpret_cast<float*>(p + off_po_);
  v.partial_lse = reinterpret_cast<float*>(p + off_plse_);
  v.num_ctas = bounds_.num_ctas;
  v.head_fold = bounds_.head_fold;
  v.slot_stride = max_slots_;
  return v;
}

// Plan::swap names every field: a new field must be added there (this size check is the reminder).
static_assert(sizeof(Plan) == 10 * sizeof(int32_t) + 16 * sizeof(std::vector<int32_t>),
              "Plan gained or lost a field: update Plan::swap");
void Plan::swap(Plan& o) noexcept {
  using std::swap;
  swap(version, o.version);
  swap(num_ctas, o.num_ctas);
  swap(num_kv_heads, o.num_kv_heads);
  swap(group_size, o.group_size);
  swap(tile_q, o.tile_q);
  swap(batch, o.batch);
  swap(max_chunk, o.max_chunk);
  swap(split, o.split);
  swap(num_tiles, o.num_tiles);
  swap(head_fold, o.head_fold);
  for (auto m : {&Plan::cta_indptr, &Plan::item_request, &Plan::item_kv_head, &Plan::item_row_begin,
                 &Plan::item_row_end, &Plan::item_kv_begin, &Plan::item_kv_end, &Plan::item_partial_slot,
                 &Plan::merge_request, &Plan::merge_kv_head, &Plan::merge_row_begin, &Plan::merge_row_end,
                 &Plan::merge_indptr, &Plan::qo_indptr, &Plan::kv_len})
    (this->*m).swap(o.*m);
  cta_cost.swap(o.cta_cost);
}

void WorkspaceLayout::serialize(const Plan& plan, void* dst) const { serialize(plan, dst, nullptr); }

void WorkspaceLayout::serialize(const Plan& plan, void* dst, Image* image) const {
  WEFT_CHECK_ARG(plan.version == kPlanVersion, "plan", "version " << plan.version << " != " << kPlanVersion);
  WEFT_CHECK_ARG(plan.num_ctas == bounds_.num_ctas, "plan",
                 "num_ctas " << plan.num_ctas << " != workspace bound " << bounds_.num_ctas);
  WEFT_CHECK_ARG(plan.head_fold == bounds_.head_fold, "plan",
                 "head_fold " << plan.head_fold << " != workspace bound " << bounds_.head_fold);
  // A plan may cut shorter query tiles than the bound (decode plans 16-row tiles into a 32-row
  // workspace when that fills the grid better); partial slots keep the bound's row stride.
  WEFT_CHECK_ARG(plan.tile_q >= 1 && plan.tile_q <= bounds_.tile_q, "plan",
                 "tile_q " << plan.tile_q << " exceeds the workspace bound " << bounds_.tile_q);
  WEFT_CHECK_ARG(plan.batch <= bounds_.max_batch, "plan",
                 "batch " << plan.batch << " exceeds max_batch " << bounds_.max_batch);
  WEFT_CHECK_ARG(plan.num_tiles <= bounds_.max_tiles, "plan",
                 "num_tiles " << plan.num_tiles << " exceeds max_tiles " << bounds_.max_tiles);
  WEFT_CHECK_ARG(plan.num_items() <= max_items_ && plan.num_merges() <= max_merges_ &&
                     plan.num_partial_slots() <= max_slots_,
                 "plan", "items/merges/slots " << plan.num_items() << "/" << plan.num_merges() << "/"
                                               << plan.num_partial_slots() << " exceed bounds "
                                               << max_items_ << "/" << max_merges_ << "/" << max_slots_);
  // A buffer this layout wrote before holds zeros everywhere except in the arrays' first
  // image->len[k] entries: clearing their excess is enough (and far less than the whole region).
  const bool incremental = image != nullptr && image->valid;
  if (!incremental) std::memset(dst, 0, metadata_bytes_);
  char* base = static_cast<char*>(dst);
  PlanHeader h{};
  h.version = plan.version;
  h.num_items = plan.num_items();
  h.num_merges = plan.num_merges();
  h.num_ctas = plan.num_ctas;
  h.batch = plan.batch;
  h.tile_q = plan.tile_q;
  h.group_size = plan.group_size;
  h.num_kv_heads = plan.num_kv_heads;
  h.num_partial_slots = plan.num_partial_slots();
  h.split = plan.split ? 1 : 0;
  h.head_fold = plan.head_fold;
  std::memcpy(base, &h, sizeof(h));
  PlanPointers v = pointers(dst);
  // The variable arrays as one table walked by one loop (16 inlined copies of the copy-and-clear
  // were ~2 KiB of code: a cold plan() pays for every instruction line it fetches). Order = the
  // image's len[] index, which only this function interprets.
  struct Array {
    const int32_t* dst;
    const std::vector<int32_t>* src;
  };
  const Array arrays[] = {{v.cta_indptr, &plan.cta_indptr},       {v.item_request, &plan.item_request},
                          {v.item_kv_head, &plan.item_kv_head},   {v.item_row_begin, &plan.item_row_begin},
                          {v.item_row_end, &plan.item_row_end},   {v.item_kv_begin, &plan.item_kv_begin},
                          {v.item_kv_end, &plan.item_kv_end},     {v.item_partial_slot, &plan.item_partial_slot},
                          {v.merge_request, &plan.merge_request}, {v.merge_kv_head, &plan.merge_kv_head},
                          {v.merge_row_begin, &plan.merge_row_begin}, {v.merge_row_end, &plan.merge_row_end},
                          {v.merge_indptr, &plan.merge_indptr},   {v.qo_indptr, &plan.qo_indptr},
                          {v.kv_len, &plan.kv_len},               {v.item_merge, nullptr}};
  static_assert(sizeof(arrays) / sizeof(arrays[0]) <= sizeof(image->len) / sizeof(image->len[0]),
                "Image::len holds every array");
  const std::size_t num_items = static_cast<std::size_t>(plan.num_items());
  for (int k = 0; k < static_cast<int>(sizeof(arrays) / sizeof(arrays[0])); ++k) {
    int32_t* out = const_cast<int32_t*>(arrays[k].dst);
    // item_merge (no source vector) is written below; here only its previous excess is cleared.
    const std::size_t n = arrays[k].src != nullptr ? arrays[k].src->size() : num_items;
    if (n > 0 && arrays[k].src != nullptr) std::memcpy(out, arrays[k].src->data(), n * sizeof(int32_t));
    if (incremental && std::size_t(image->len[k]) > n)
      std::memset(out + n, 0, (std::size_t(image->len[k]) - n) * sizeof(int32_t));
    if (image != nullptr) image->len[k] = static_cast<int32_t>(n);
  }
  // item_merge: the merge entry whose slot range holds the item's partial slot (slots of a merge
  // are consecutive, merge_indptr ascending); -1 for final items. The counters stay 0.
  int32_t* item_merge = const_cast<int32_t*>(v.item_merge);
  const int32_t num_merges = plan.num_merges();
  const int32_t num_slots = plan.merge_indptr.empty() ? 0 : plan.num_partial_slots();
  const int32_t* mi = plan.merge_indptr.data();
  if (num_merges == 0) std::fill(item_merge, item_merge + num_items, -1);  // an unsplit plan
  for (std::size_t i = 0; i < num_items && num_merges > 0; ++i) {
    const int32_t s = plan.item_partial_slot[i];
    int32_t m = -1;
    if (s >= 0 && s < num_slots) {
      m = static_cast<int32_t>(std::upper_bound(mi, mi + num_merges + 1, s) - mi) - 1;
      if (m >= num_merges) m = -1;
    }
    item_merge[i] = m;
  }
  // CTA records: plan CTA c's range and first item, as the plan holds it (the kernels expand it
  // for their sub-head), one per plan CTA, or (launch_records) one per launched CTA in
  // fold_launch_order up to the last busy one (launch_records_used; the rest stay zero: no item).
  CtaRecord* first = const_cast<CtaRecord*>(v.cta_first);
  auto record = [&](int32_t c, int32_t sub_head) {
    CtaRecord r{};
    r.item_begin = plan.cta_indptr[c];
    r.item_end = plan.cta_indptr[c + 1];
    if (r.item_begin < r.item_end) {
      const int32_t i = r.item_begin;
      r.request = plan.item_request[i];
      r.kv_head = plan.item_kv_head[i];
      r.row_begin = plan.item_row_begin[i];
      r.row_end = plan.item_row_end[i];
      r.kv_begin = plan.item_kv_begin[i];
      r.kv_end = plan.item_kv_end[i];
      r.partial_slot = plan.item_partial_slot[i];
      r.token0 = plan.qo_indptr[r.request];
      r.merge = item_merge[i];
    }
    r.fold = fold_word(sub_head, plan.head_fold);
    return r;
  };
  LaunchRecords launch;
  launch.records = plan.num_ctas;
  if (bounds_.launch_records) {
    launch = launch_records_used(plan);
    fold_launch_order(
        plan,
        [&](int32_t c, int32_t p, int32_t j, int32_t c0) {
          if (j == 0) {
            first[c] = record(p, 0);
          } else {  // sub-head j of the same plan CTA: the record of sub-head 0 with its fold word
            first[c] = first[c0];
            first[c].fold = fold_word(j, plan.head_fold);
          }
        },
        launch.busy_end);
  } else {
    for (int32_t c = 0; c < plan.num_ctas; ++c) first[c] = record(c, 0);
  }
  // The previous plan's records past this one's (an incremental image): cleared, so the image is
  // the one a fresh buffer gets.
  if (incremental && image->records > launch.records)
    std::memset(first + launch.records, 0, sizeof(CtaRecord) * std::size_t(image->records - launch.records));
  if (image != nullptr) {
    image->records = launch.records;
    image->valid = true;
  }
}

Plan WorkspaceLayout::deserialize(const void* src) const {
  PlanPointers v = pointers(const_cast<void*>(src));
  const PlanHeader& h = *v.header;
  Plan p;
  p.version = h.version;
  p.num_ctas = h.num_ctas;
  p.num_kv_heads = h.num_kv_heads;
  p.group_size = h.group_size;
  p.tile_q = h.tile_q;
  p.batch = h.batch;
  p.split = h.split != 0;
  p.head_fold = h.head_fold;
  auto get = [](const int32_t* s, int64_t n) { return std::vector<int32_t>(s, s + n); };
  p.cta_indptr = get(v.cta_indptr, h.num_ctas + 1);
  p.item_request = get(v.item_request, h.num_items);
  p.item_kv_head = get(v.item_kv_head, h.num_items);
  p.item_row_begin = get(v.item_row_begin, h.num_items);
  p.item_row_end = get(v.item_row_end, h.num_items);
  p.item_kv_begin = get(v.item_kv_begin, h.num_items);
  p.item_kv_end = get(v.item_kv_end, h.num_items);
  p.item_partial_slot = get(v.item_partial_slot, h.num_items);
  p.merge_request = get(v.merge_request, h.num_merges);
  p.merge_kv_head = get(v.merge_kv_head, h.num_merges);
  p.merge_row_begin = get(v.merge_row_begin, h.num_merges);
  p.merge_row_end = get(v.merge_row_end, h.num_merges);
  p.merge_indptr = get(v.merge_indptr, h.num_merges + 1);
  p.qo_indptr = get(v.qo_indptr, h.batch + 1);
  p.kv_len = get(v.kv_len, h.batch);
  return p;
}

}  // namespace weft::plan
