// Work plan with packs (pure C++, no CUDA): the plan vocabulary in which an item's query rows may
// come from SEVERAL requests that read the same keys (a shared prefix), so the keys are read
// once for all of them. The balanced planner's plans (balance.h) are the special case of one
// request per item; prefix-sharing plans (make_pack_plan) are built from a PrefixForest.
//
// Decode (one query token per request). Vocabulary:
//   request list  an item's requests are req_list[req_begin .. req_begin + num_reqs); its rows
//                 are those requests' GQA groups one after another: row r (in [row_begin,
//                 row_end)) is request req_list[req_begin + r / group], query head
//                 kv_head * group + r % group. An item of one request is the balanced planner's
//                 item; a pack has num_reqs >= 2 (num_reqs * group <= tile rows, or, for a WIDE
//                 item, <= PackPlanConfig::wide_rows).
//   wide items    items of more than tile_rows rows (packs of a wide node, pack_item_requests)
//                 are stored after every other item (the last num_wide_items) and dealt to the
//                 CTAs on their own (wide_cta_indptr): they run in a second kernel, the wide-pack
//                 mainloop (a prefill FA2 tile with its Q rows gathered from the pack's requests,
//                 src/decode/kernels_wide.cu), the others in the decode kernel (cta_indptr).
//   KV source     key positions [kv_begin, kv_end) of the page list that starts at
//                 kv_indices[page_base] (position p lives in page kv_indices[page_base + p /
//                 page_size]). A pack reads its first request's list: the shared pages are the
//                 same ids in every sharer's list.
//   output        slot == -1: the item holds every key of its rows and writes the final output;
//                 else it writes an fp32 partial state (O normalised, base-2 LSE) of its rows
//                 into partial slot `slot` (row r at slot * tile_rows + r - row_begin; a wide item
//                 fills ceil(rows / tile_rows) consecutive slots from `slot` on).
//   merge         one output row group (request, kv_head, rows [row_begin, row_end) of that
//                 request's group) whose keys came in pieces: its sources are (slot, row) pairs
//                 src_slot/src_row[merge_src_indptr[m] .. [m+1]), in ascending key order (the
//                 merge order is fixed by the plan: deterministic results); src_row is the row of
//                 the source's partial SLOT (item row - item row_begin) that holds the merge's
//                 first row (row_begin), the next rows follow it.
// Every (request, query head, key) of the batch is covered exactly once: by one item row that
// writes it finally, or by the sources of exactly one merge (tests/host/attention/pack_plan_test).
#pragma once
#include "common/rtc_compat.h"
#if !WEFT_RTC  // host only (NVRTC: common/rtc_compat.h)
#include <vector>

#include "attention/plan/prefix_forest.h"

namespace weft::plan {

inline constexpr int32_t kWorkPlanVersion = 3;  // 3: wide items (wide_cta_indptr)

struct WorkPlan {
  int32_t version = kWorkPlanVersion;
  int32_t num_ctas = 0, num_kv_heads = 0, group_size = 0, tile_rows = 0, batch = 0;
  std::vector<int32_t> cta_indptr;  // num_ctas + 1: CTA c runs items cta_indptr[c] .. [c+1]-1
  // Wide items (rows > tile_rows): the last num_wide_items items; CTA c of the wide kernel runs
  // items wide_cta_indptr[c] .. [c+1]-1 (num_ctas + 1 entries; empty when there are none).
  int32_t num_wide_items = 0;
  std::vector<int32_t> wide_cta_indptr;
  // With PackPlanConfig::wide_overlap: 1 when the CTAs were split between the kinds (narrow items
  // on each copy's first CTAs, wide items on its last ones): the wrapper then starts the decode
  // kernel beside the wide kernel; 0: each kind dealt over every CTA (run one after the other).
  int32_t wide_split = 0;
  // The wide kernel's launched CTAs when the plan was cut for one wave of its tile
  // (PackPlanConfig::wide_wave_ctas; CTAs >= wide_grid hold no wide item); 0: num_ctas.
  int32_t wide_grid = 0;
  // Items (struct of arrays).
  std::vector<int32_t> item_req_begin, item_num_reqs, item_kv_head, item_row_begin, item_row_end;
  std::vector<int32_t> item_page_base, item_kv_begin, item_kv_end, item_slot;
  std::vector<int32_t> req_list;
  // Merges.
  std::vector<int32_t> merge_request, merge_kv_head, merge_row_begin, merge_row_end;
  std::vector<int32_t> merge_src_indptr, src_slot, src_row;
  std::vector<int32_t> kv_len;  // batch

  int32_t num_items() const { return static_cast<int32_t>(item_kv_head.size()); }
  int32_t num_merges() const { return static_cast<int32_t>(merge_request.size()); }
  int32_t num_slots() const;  // max over items of slot + ceil(rows / tile_rows)
  // The slot count as its producer knew it (make_pack_plan: every slot it numbered); -1: unknown,
  // num_slots() scans the items (a scan of three arrays was ~1.5 us of a 256-request plan).
  int32_t known_slots = -1;
};

struct PackPlanConfig {
  int32_t num_ctas = 0, num_kv_heads = 0, group_size = 1;
  int32_t tile_rows = 16;   // rows per item (packs hold tile_rows / group_size requests at most)
  int32_t page_size = 16;
  int32_t max_chunk = 0;    // keys per item at most (0: no limit); a multiple of kv_granularity
  int32_t kv_granularity = 16;
  int32_t min_sharers = 2;  // a forest node with fewer sharers is read by each request alone
  // Memory-centric profit model (pack_schedule.cpp): the bytes one key costs per KV head (K + V:
  // 2 * head_dim * element size) and one partial-state row costs (its fp32 O + LSE written by the
  // item and read by the merge: 2 * (head_dim + 1) * 4). 0: no model, every forest node with
  // >= min_sharers sharers is packed over its own pages (the first planner).
  int32_t kv_bytes_per_key = 0;
  int32_t partial_bytes_per_row = 0;
  // Head folding (as decode::decode_head_fold for the balanced plans): every KV head sees the
  // same rows, keys and packs, so the plan is made for num_kv_heads / head_fold heads on
  // num_ctas / head_fold CTAs and replicated head_fold times when written out (1: none; it must
  // divide num_kv_heads and num_ctas). The written plan holds exactly the items and merges of the
  // unfolded plan (same fields; only the deal and the slot numbers differ), dealt as evenly: the
  // generation, sort and deal handle 1 / head_fold of the items (8x fewer for Llama-3-8B on 264
  // CTAs). Copy k (0 .. head_fold - 1) of the folded plan (H0 = num_kv_heads / head_fold heads,
  // C0 CTAs, n0 items, M0 merges, S0 slots) is its CTAs k C0 + c, items k n0 + i, KV heads
  // k H0 + h, slots k S0 + s, merges k M0 + m: every array is the folded one plus a constant per
  // copy, written by copies (a 256-request plan's 2304 items were ~10 us as per-item records).
  int32_t head_fold = 1;
  // Chunks sized from the work AFTER packing (> 0; the decode wrapper's prefix-sharing plans):
  // make_pack_plan then ignores max_chunk and cuts at pack_work_chunk(), the keys per CTA of
  // the packed plan's reads (each forest node's keys once per pack that would read it, plus the
  // private suffixes: pack_duplicate_keys), at least this many keys, rounded as pack_max_chunk.
  // Sizing from every request's keys instead (sharers' copies counted) left a long root shared
  // by few packs unsplit: 32 requests on a 4096-key root, heads 32x8, ran 32 items of 4096 keys
  // on 32 of 264 CTAs (189.7 vs 94.6 us for standard decode, bench/results/h100_pat_4c99f6c.json).
  // 0: max_chunk as given.
  int32_t auto_chunk_min = 0;
  // Wide packs (the decode wrapper sets them where the wide-pack kernel exists: d128, 16-bit):
  // a forest node of s sharers with s * group_size >= wide_min_rows gets items of up to
  // wide_rows rows (wide_rows / group_size requests) instead of tile_rows (pack_item_requests:
  // the tile selector, its reason in heuristics::pack_wide_min_rows). 0: no wide items.
  int32_t wide_rows = 0;
  int32_t wide_min_rows = 0;
  // ... and whose own keys (its shared segment, page_end - page_begin pages) reach wide_min_keys
  // (0: any length; heuristics::kPackWideMinKeys, DecodeOptions::prefix_wide_min_keys).
  int32_t wide_min_keys = 0;
  // Overlapped wide launch (the decode wrapper when its wide and decode kernels may run side by
  // side: DecodeOptions::prefix_wide_overlap): the planner may SPLIT each folded copy's C CTAs,
  // narrow items dealt to the first C - W (decode kernel), wide items to the last W (wide
  // kernel), so both kernels are resident at once (a wide CTA takes the registers and about the
  // shared memory of one decode CTA) and each CTA slot runs one kind. It splits when
  // wide_split_margin x its split estimate is below its serial one (make_pack_plan; costs in
  // narrow-key units, a wide key = wide_key_cost narrow keys; WorkPlan::wide_split says which
  // it chose): heuristics::kPackWideKeyCost / kPackWideSplitMargin. 0: never split.
  int32_t wide_overlap = 0;
  float wide_key_cost = 0.f;
  float wide_split_margin = 0.f;
  // With auto_chunk_min, wide items are cut at their own bound (PackPlanScratch::wide_chunk:
  // the wide items' keys per CTA, the wide kernel being its own launch) instead of max_chunk;
  // when that plan's slots exceed max_slots (> 0: the workspace's WorkPlanBounds::max_slots)
  // they are cut at max_chunk instead. 0: no bound.
  int32_t max_slots = 0;
  // One wave of a wide tile that takes a whole SM (the decode wrapper's Hopper mainloop,
  // DecodeOptions::prefix_wide_sm90_wave: its SM count): > 0 and the plan runs its two kinds
  // one after the other (not split, or wide_overlap 0), the wide items are cut and dealt for
  // wide_wave_ctas CTAs (rounded down to a multiple of head_fold; WorkPlan::wide_grid) at the
  // chunk the wave cost model picks (make_pack_plan: wide_item_keys = an item's fixed cost in
  // keys, heuristics::kPackWideSm90ItemKeys), instead of over num_ctas at the keys-per-CTA bound.
  // Needs auto_chunk_min > 0. 0: off.
  int32_t wide_wave_ctas = 0;
  int32_t wide_item_keys = 0;
};

// The tile selector of the pack planner: requests per item of a pack over a forest node with
// `sharers` sharers (P of the profit model; the planner cuts the node's pack into items of at
// most P requests): wide_rows / group_size when wide packs are on and the node's rows
// (sharers x group_size) reach wide_min_rows (and its keys wide_min_keys), else tile_rows / group_size. Used by the profit
// model (schedule_packs), the chunk bound (pack_duplicate_keys) and the items (make_pack_plan).
// An item of more than tile_rows rows runs in the wide kernel (its rows decide, so a node's last,
// smaller item may run in the decode kernel: PAT's round-up rule for m).
// node_keys: the node's own keys (its segment); wide only when >= wide_min_keys too.
int32_t pack_item_requests(int64_t sharers, int64_t node_keys, const PackPlanConfig& cfg);
// The same for a whole forest node: all its sharers over its own keys.
inline int32_t pack_item_requests(const PrefixNode& n, const PackPlanConfig& cfg) {
  return pack_item_requests(n.req_end - n.req_begin, int64_t(n.page_end - n.page_begin) * cfg.page_size, cfg);
}

// Where the keys of each forest node are read (schedule_packs, the memory-centric profit model):
// node u's pack holds its first pack_reqs[u] requests in `order` (from req_begin[u]), over the
// pages [pack_page_begin[u], nodes[u].page_end); its other sharers read u's pages in the pack of
// the child subtree they belong to, or, for a request whose path ends at u, in its private item
// (which then starts at pack_page_begin[u]). pack_reqs[u] == 0: no pack for u.
struct PackSchedule {
  std::vector<int32_t> order;            // requests; each node's range reordered: pack members first
  std::vector<int32_t> req_begin;        // per node: its range's first position in `order`
  std::vector<int32_t> pack_reqs;        // per node
  std::vector<int32_t> pack_page_begin;  // per node
  // Scratch.
  std::vector<int32_t> child_ptr, child_list, members, merged;
};
// The profit model's byte counts for a head dimension and a KV element size (bytes).
inline void set_pack_traffic(PackPlanConfig& c, int32_t head_dim, int32_t kv_elem_bytes) {
  c.kv_bytes_per_key = 2 * head_dim * kv_elem_bytes;
  c.partial_bytes_per_row = 2 * (head_dim + 1) * 4;
}

// Keys per KV head that packing can save at best: each node u of >= min_sharers sharers s_u read
// by ceil(s_u / P) packs (P = pack_item_requests(s_u) >= 2) instead of s_u times, summed as
// len_u * (s_u - ceil(s_u / P)); 0 when P < 2 (no packs). Any plan of the forest reads node u's
// keys at least ceil(s_u / P) times (an item holds <= P of its sharers), so keys - this is a
// LOWER bound on the packed plan's reads. Depends on the forest and cfg only (not kv_len).
int64_t pack_duplicate_keys(const PrefixForest& forest, const PackPlanConfig& cfg);
// max_chunk of a plan with PackPlanConfig::auto_chunk_min: pack_max_chunk of the packed reads
// (keys = the batch's keys, every request's copy; dup = pack_duplicate_keys).
int32_t pack_work_chunk(int64_t keys, int64_t dup, const PackPlanConfig& cfg);
// Keys per item at most in the decode wrapper's prefix-sharing plans: max(min_chunk, keys per
// CTA), as the balanced planner cuts, so the items stay within the unsplit items + the grid;
// rounded UP to a coarse step (1/8 of its power of two, at least kv_tile): appending tokens moves
// the keys per CTA a little every step, and an unchanged max_chunk is what lets a plan be updated
// lazily (chunks at most 12.5% longer than the exact split). `keys`: the keys the plan reads per
// KV head (pack_work_chunk passes the packed reads).
int32_t pack_max_chunk(int64_t keys, int32_t num_kv_heads, int32_t num_ctas, int32_t min_chunk, int32_t kv_tile);

// Decides the packs of a forest (PAT's TreeHeuristic, Alg. 1, with the profit measured in bytes
// for weft's items): for each node u top-down and each member c of it (a child node with s_c
// sharers, or a request whose path ends at u, s_c = 1), merging c into its own pack (c reads
// u's pages itself) is chosen when the partial-state traffic it saves exceeds the KV traffic it
// adds. Deterministic; depends on the forest and cfg only (not on kv_len: lazy updates keep it).
void schedule_packs(const PrefixForest& forest, const PackPlanConfig& cfg, PackSchedule& s);

// Decode plan of a paged batch with prefix sharing: one pack per (forest node, kv head, group of
// at most tile_rows / group_size sharers) over the node's keys, one item per (request, kv head,
// row tile) over its private suffix (keys past its shared pages), long ranges cut into chunks of
// at most max_chunk keys, items dealt longest first to the CTA with the least load (ties: lower
// CTA; the deal of balance.h). indptr: the page table's host array (page bases).
WorkPlan make_pack_plan(const PrefixForest& forest, const int32_t* indptr, const int32_t* kv_len,
                        const PackPlanConfig& cfg);

// The same plan written into `out` (its vectors keep their capacity), with the planner's
// temporaries in `scratch`: a warm call allocates nothing (PackPlanner keeps both).
struct PackPlanScratch {
  struct Item {  // a generated item (the plan's arrays are written from these in CTA order)
    int32_t req_begin, num_reqs, kv_head, row_begin, row_end, page_base, kv_begin, kv_end, slot;
  };
  std::vector<Item> items;  // the first (plan's item count) are this plan's; the arrays only grow
  std::vector<int32_t> pos_of, src_group, src_slot, src_row, group_sources, priv_start, group_begin, fill;
  std::vector<int32_t> order, tmp, count, cta_of, cta_count;
  // Also an output: request b's private items, in generation order (kv head, row tile, key), are
  // items dest[i] of the plan for i in [priv_items[b], priv_items[b + 1]).
  std::vector<int32_t> priv_items, dest;
  std::vector<uint32_t> cost;
  std::vector<uint64_t> heap, ring;
  PackSchedule sched;
  std::vector<int32_t> cta0_indptr;  // the folded plan's CTA ranges
  // Also outputs: the max_chunk the plan was cut at (cfg.max_chunk, or pack_work_chunk with
  // auto_chunk_min) and pack_duplicate_keys of the forest (set with auto_chunk_min, else 0).
  int32_t max_chunk = 0;
  int64_t dup_keys = 0;
  // The keys per WIDE item at most (PackPlanConfig::max_slots; max_chunk when not cut apart).
  int32_t wide_chunk = 0;
  // With PackPlanConfig::wide_wave_ctas: (wide items per folded copy, keys) of each node with wide items.
  struct WideNode {
    int64_t items, keys;
  };
  std::vector<WideNode> wide_nodes;
};
void make_pack_plan(const PrefixForest& forest, const int32_t* indptr, const int32_t* kv_len,
                    const PackPlanConfig& cfg, WorkPlan& out, PackPlanScratch& scratch);

// A folded plan's items are two blocks of out (make_pack_plan): its narrow items, out's first
// (num_items - num_wide_items) / head_fold, and its wide items, the first num_wide_items /
// head_fold after all narrow copies. Copies their page bases and key ranges into the other
// copies: what a lazy update (PackPlanner) rewrites.
void expand_item_kv(int32_t head_fold, WorkPlan& out);
// The folded plan's items (the two blocks above), f(i) for each, in index order.
template <class F>
void for_folded_items(const WorkPlan& p, int32_t head_fold, F&& f) {
  const int32_t n = p.num_items() - p.num_wide_items, n0 = n / head_fold, w0 = p.num_wide_items / head_fold;
  for (int32_t i = 0; i < n0; ++i) f(i);
  for (int32_t i = n; i < n + w0; ++i) f(i);
}

// Whether the Hopper mainloop's Q boxes can load every wide item's rows (decode wrapper,
// DecodeOptions::prefix_wide_sm90; decode/kernels_wide_sm90.cu): its rows start at a whole GQA
// group (row_begin a multiple of group_size: one box of group heads per request) and, with
// `consecutive` (GQA groups < 8, whose Q tile is one box of 128 / group tokens), its requests are
// consecutive (request req_list[req_begin + j] = first + j over the requests of its rows
// [row_begin, row_end)): a decode batch's rows of such an item are then consecutive tokens of a
// [batch, heads, head_dim] Q. False when the plan has no wide item. head_fold: the folded plan's
// items are checked (for_folded_items: the copies share their rows).
bool wide_rows_loadable(const WorkPlan& p, int32_t group_size, int32_t head_fold, bool consecutive);

// Keys per chunk when a range of `len` keys is cut for max_chunk (make_pack_plan's rule: near-equal
// chunks, a multiple of gran except the last); len itself when it is not cut (max_chunk 0 or
// len <= max_chunk). The range then has ceil(len / chunk_keys) chunks (one when len is 0).
int64_t chunk_keys(int64_t len, int32_t max_chunk, int32_t gran);

}  // namespace weft::plan
#endif  // !WEFT_RTC

namespace weft::plan {

// ---------------------------------------------------------------------------------------------
// Workspace layout of a WorkPlan: every array at a FIXED, NAMED offset computed from the bounds
// (CUDA-graph safe: the pointers a kernel reads never move from one plan to the next), the
// partial states after the metadata. A plan that exceeds the bounds is rejected (weft::Error).
struct WorkPlanBounds {
  int32_t max_batch = 0;
  int32_t max_items = 0;
  int32_t max_merges = 0;
  int32_t max_sources = 0;
  int32_t max_slots = 0;
  int32_t num_ctas = 0;
  int32_t tile_rows = 16;  // partial slot rows
  int32_t head_dim = 0;    // partial row width (fp32)
};

// Offset 0 of the workspace: the counts of the current plan (read by kernels).
struct WorkPlanHeader {
  int32_t version, num_items, num_merges, num_ctas, batch, tile_rows, group_size, num_kv_heads;
  int32_t num_slots, num_wide_items, reserved[6];
};

struct WorkPlanPointers {
  const WorkPlanHeader* header = nullptr;
  const int32_t* cta_indptr = nullptr;
  const int32_t* wide_cta_indptr = nullptr;  // the wide kernel's CTAs (WorkPlan::wide_cta_indptr)
  const int32_t *item_req_begin = nullptr, *item_num_reqs = nullptr, *item_kv_head = nullptr;
  const int32_t *item_row_begin = nullptr, *item_row_end = nullptr, *item_page_base = nullptr;
  const int32_t *item_kv_begin = nullptr, *item_kv_end = nullptr, *item_slot = nullptr;
  const int32_t* req_list = nullptr;
  const int32_t *merge_request = nullptr, *merge_kv_head = nullptr, *merge_row_begin = nullptr;
  const int32_t *merge_row_end = nullptr, *merge_src_indptr = nullptr, *src_slot = nullptr, *src_row = nullptr;
  float* partial_o = nullptr;    // [max_slots, tile_rows, head_dim]
  float* partial_lse = nullptr;  // [max_slots, tile_rows], base-2
};

#if !WEFT_RTC  // host only (NVRTC: common/rtc_compat.h)
class WorkPlanLayout {
 public:
  static constexpr std::size_t kAlign = 256;
  WorkPlanLayout() = default;
  explicit WorkPlanLayout(const WorkPlanBounds& bounds);  // throws weft::Error on bad bounds
  const WorkPlanBounds& bounds() const { return bounds_; }
  std::size_t metadata_bytes() const { return metadata_bytes_; }
  std::size_t total_bytes() const { return total_bytes_; }
  // Writes the plan's header and arrays at their offsets into dst (metadata_bytes(), host).
  void serialize(const WorkPlan& plan, void* dst) const;
  // A lazy update (PackPlanner) changes only the items' page bases and key ranges, three arrays
  // back to back in the image from byte item_kv_offset() on, over item_kv_bytes() bytes
  // (PackPlanner::serialize_moved writes the part of them an update moved).
  std::size_t item_kv_offset() const { return off_.item_page_base; }
  std::size_t item_kv_bytes() const { return off_.item_slot - off_.item_page_base; }
  WorkPlanPointers pointers(void* base) const;

 private:
  struct Offsets {
    std::size_t cta_indptr, wide_cta_indptr, item_req_begin, item_num_reqs, item_kv_head, item_row_begin, item_row_end,
        item_page_base, item_kv_begin, item_kv_end, item_slot, req_list, merge_request, merge_kv_head,
        merge_row_begin, merge_row_end, merge_src_indptr, src_slot, src_row, partial_o, partial_lse;
  };
  WorkPlanBounds bounds_{};
  Offsets off_{};
  std::size_t metadata_bytes_ = 0, total_bytes_ = 0;
};
#endif  // !WEFT_RTC

}  // namespace weft::plan
