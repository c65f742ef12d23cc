// Load-balanced split-KV planner (FlashInfer Algorithm 1). Pure C++: no CUDA headers.
// Shared by decode and prefill; the interface below is meant to stay stable.
//
// Vocabulary
//   rows       a request's query rows packed with its GQA group, token-major:
//              row r of request b = (token r / group_size, query head kv_head * group_size +
//              r % group_size). A request with qo_len tokens has qo_len * group_size rows per
//              KV head. Decode: qo_len = 1, rows = the group's query heads.
//   query tile tile_q consecutive rows of one (request, kv_head): [row_begin, row_end).
//   work item  (request, kv_head, row range, KV range [kv_begin, kv_end)) executed by one CTA.
//              partial_slot == -1: the item covers its tile's whole KV range and writes the
//              FINAL output (O in the output dtype, LSE) directly. partial_slot >= 0: it
//              writes an fp32 partial state (O normalised by its own softmax sum, LSE) into
//              slot partial_slot of the workspace; a merge entry combines the slots.
//   merge      one split query tile: its partial slots are merge_indptr[m] ..
//              merge_indptr[m+1] - 1, CONSECUTIVE and in ascending KV order (chunk 0 first),
//              so the merge order is fixed by the plan (deterministic results).
//   kv_len 0   a tile with an empty KV range still gets one item (kv_begin == kv_end) which
//              must write O = 0, LSE = -inf.
//
// Algorithm (deterministic for identical input):
//   1. total = sum over tiles of the tile's KV range length.
//   2. L = max(ceil(total / num_ctas), min_chunk, 1) rounded up to kv_granularity.
//      If no tile's KV range exceeds L (or allow_split is false) nothing is split: every item
//      is final (no partial writes, no merge pass needed). Otherwise steps 3-5 run both with
//      and without splitting, and the split plan is kept only if its makespan (max CTA load)
//      is at least min_gain lower.
//   3. Each tile's KV range longer than L is cut into n = ceil(len / L) near-equal chunks
//      (length ceil(len / n) rounded up to kv_granularity, so <= L; the last may be shorter).
//   4. Chunks are sorted by cost = alpha * rows + beta * kv_length, descending (stable: ties keep
//      generation order request, kv_head, tile, chunk; or request, kv_head, chunk, tile with
//      cfg.row_tiles_together).
//   5. Each chunk goes to the CTA with the lowest load (min-heap; ties: lowest CTA index).
//   Each CTA executes its items in the order assigned. Greedy LPT bounds the imbalance:
//   max load - min load <= cost of the largest chunk.
// Bounds (independent of the lengths, so the workspace layout is fixed for a given max_batch):
//   items <= tiles + num_ctas; split tiles (merges) <= num_ctas; partial slots <= 2 * num_ctas.
#pragma once
#include "common/rtc_compat.h"
#if !WEFT_RTC
#include <vector>
#endif

namespace weft::plan {

inline constexpr int32_t kPlanVersion = 1;

#if !WEFT_RTC  // host only (NVRTC: common/rtc_compat.h)
struct BalanceConfig {
  int32_t num_ctas = 0;        // fixed persistent grid (e.g. num_SMs * ctas_per_SM)
  int32_t num_kv_heads = 0;
  int32_t group_size = 1;      // query heads per KV head (GQA group)
  int32_t tile_q = 16;         // rows per query tile
  int32_t kv_granularity = 1;  // chunk lengths are multiples of this (the kernel's KV tile)
  int32_t min_chunk = 0;       // never cut chunks shorter than this (merge cost vs parallelism)
  double alpha = 1.0;          // cost per query row of a chunk
  double beta = 1.0;           // cost per key of a chunk
  bool allow_split = true;
  // Split only when it lowers the planned makespan (max CTA load) by at least this fraction:
  // splitting costs partial writes and a merge pass that alpha/beta do not model.
  double min_gain = 0.1;
  // Deal order among equal-cost chunks: false = generation order (request, kv_head, tile, chunk);
  // true = (request, kv_head, chunk, tile), i.e. the query tiles of one (request, kv head) that
  // read the same KV chunk are dealt back to back (to consecutive CTAs of one wave), so they
  // stream the same keys at the same time and L2 serves all but the first read. Decode sets it
  // (GQA groups above the 16-row tile); prefill keeps generation order.
  bool row_tiles_together = false;
  // Unsplit plans of one tile per (request, KV head) only (Planner::build_whole_units): deal the
  // num_kv_heads tiles of one request as ONE unit of num_kv_heads x the cost to one CTA (its items
  // back to back in head order), except for the last grouped_tail_units requests of the sorted
  // order, whose tiles are dealt one by one as above. Not the plan above (a coarser deal), but H
  // times fewer queue operations for the bulk of the work, with the fine-grained tail that evens
  // the loads out (issue 19's plan cost; heuristics::grouped_tail_units). false: the plan above.
  bool deal_heads_together = false;
  int32_t grouped_tail_units = 0;
  // Deal order by KV head: every chunk of KV head 0 in step 4's sorted order, then head 1's, ...
  // (a stable partition of the sorted chunks by head; deal_heads_together does not apply). Each
  // CTA then runs its head-0 items before its head-1 items, so the CTAs of one moment stream the
  // K/V of few heads, which L2 can hold across the waves of a long causal prompt (the Hopper
  // prefill, heuristics::prefill_heads_in_turn). false: step 4's order.
  bool heads_in_turn = false;
  // Copied into Plan::head_fold (the planner plans num_kv_heads heads on num_ctas CTAs either way;
  // the caller passes the folded counts).
  int32_t head_fold = 1;
};

// Per-request lengths. kv_start (optional, empty = all 0) is the first key any row of the
// request may attend (e.g. kv_len - 1 - window_left for decode with a sliding window): chunks
// cover [kv_start, kv_len). Keys outside it are never read.
struct BatchShape {
  std::vector<int32_t> qo_len;
  std::vector<int32_t> kv_len;
  std::vector<int32_t> kv_start;
};

// A plan as plain arrays (struct of arrays). Items are flattened by CTA: CTA c executes items
// cta_indptr[c] .. cta_indptr[c+1] - 1 in that order.
struct Plan {
  int32_t version = kPlanVersion;
  int32_t num_ctas = 0;
  int32_t num_kv_heads = 0;
  int32_t group_size = 0;
  int32_t tile_q = 0;
  int32_t batch = 0;
  int32_t max_chunk = 0;      // L (0 when there is no work)
  bool split = false;         // some tile is split (merge pass required)
  int32_t num_tiles = 0;
  // Head folding (set by the caller after planning; the planner itself plans what cfg says): the
  // plan was made for num_kv_heads = H / head_fold heads on num_ctas = grid / head_fold CTAs, and
  // each of its items stands for head_fold items that differ only in the KV head. All KV heads of
  // a request have the same rows and keys, so the plan of one head class, replicated, is a plan
  // of all of them: the planner's work and the metadata a plan() copies shrink head_fold times
  // (issue 19: plan() cost O(batch + splits), not O(batch x heads)). The kernels expand it:
  // a launched CTA runs one plan CTA for one sub-head j (decode: the layout's launch records,
  // fold_launch_order; prefill: plan_cta_of / fold_word_of_cta), i.e. KV head
  // item_kv_head * head_fold + j, partial slot j * S + s (S: the layout's max_slots,
  // PlanPointers::slot_stride; so one merge's slots stay consecutive, fold_slot) and merge
  // counter m * head_fold + j.
  int32_t head_fold = 1;

  std::vector<int32_t> cta_indptr;  // num_ctas + 1
  std::vector<int32_t> item_request, item_kv_head, item_row_begin, item_row_end;
  std::vector<int32_t> item_kv_begin, item_kv_end, item_partial_slot;
  std::vector<int32_t> merge_request, merge_kv_head, merge_row_begin, merge_row_end;
  std::vector<int32_t> merge_indptr;  // num_merges + 1 (slot ranges)
  std::vector<int32_t> qo_indptr;     // batch + 1: first query token of each request
  std::vector<int32_t> kv_len;        // batch
  std::vector<double> cta_cost;       // num_ctas: planned load of each CTA

  int32_t num_items() const { return static_cast<int32_t>(item_request.size()); }
  int32_t num_merges() const { return static_cast<int32_t>(merge_request.size()); }
  int32_t num_partial_slots() const { return merge_indptr.empty() ? 0 : merge_indptr.back(); }
  // Member-wise (the vectors swap their buffers): what a wrapper does after each plan() to make
  // the next plan current; std::swap's three moves of 16 vectors were ~2.8 KiB of code on that path.
  void swap(Plan& o) noexcept;
};

// Query tiles of one (request, kv_head): ceil(qo_len * group_size / tile_q).
int64_t tiles_per_head(int64_t qo_len, int32_t group_size, int32_t tile_q);
double chunk_cost(const BalanceConfig& cfg, int32_t rows, int32_t kv_length);

// Throws weft::Error naming the offending field on bad input ("shape.kv_len[3]", "cfg.tile_q").
// A convenience over Planner (below): a fresh planner and plan per call.
Plan balance(const BatchShape& shape, const BalanceConfig& cfg);

// The planner with its scratch kept between calls: the same plans as the algorithm above, bit for
// bit (tests/host/attention/plan_identity_test.cpp checks it against the straightforward version
// kept in tests/host/attention/plan_reference.h), made cheap for a per-step plan() (issue 19):
//  - every buffer (tiles, chunks, sort keys, the deal's CTA queue, the output plan's vectors when
//    the caller reuses its Plan) keeps its capacity: a warm call with a batch no larger than
//    before allocates nothing;
//  - a makespan (split or not) is computed from the chunk costs alone, as runs of equal cost, without
//    building items; the plan is built once, for the chosen bound (today's balance() dealt twice and
//    plan_decode() re-ran balance() per candidate bound);
//  - step 4 sorts once: the row_tiles_together tie order is built directly, then a stable LSD radix
//    sort on the costs' bit patterns (non-negative doubles order as unsigned integers) skips the
//    bytes every key shares, and no sort runs when the chunks are already in order;
//  - step 5 deals from a queue of CTAs sorted by (load, index): while each CTA's new load is the
//    largest (equal costs, e.g. a uniform batch: round robin) a deal is O(1); the first time one is
//    not, the sorted queue becomes a binary min-heap (a sorted array is one) with the same order.
//    The order (load, index) is total, so every correct min-queue pops the same CTA as the
//    std::priority_queue did, and loads are summed in the same order (identical doubles);
//  - an unsplit one-tile-per-head plan whose costs come in long runs (causal prefill segments)
//    deals each run of equal costs at once on the sorted queue (deal_run_int: the same pops).
// Not thread-safe: one Planner per thread (a wrapper owns one).
class Planner {
 public:
  // = balance(shape, cfg), written into `out` (its vectors are reused).
  void balance(const BatchShape& shape, const BalanceConfig& cfg, Plan& out);

  // Building blocks (plan_decode's bound search, prefill's merge-penalty rule). prepare() runs
  // steps 1-2 (validation, tiles) and returns L; the others use the prepared tiles and cfg.
  int64_t prepare(const BatchShape& shape, const BalanceConfig& cfg);
  int32_t longest_tile() const { return longest_; }
  // Step 2's L for the prepared tiles with cfg.min_chunk replaced by min_chunk.
  int64_t chunk_bound(int64_t min_chunk) const;
  // Planned makespan (max CTA load) of steps 3-5 with chunk bound L (split) or whole tiles
  // (!split; cached per prepare()), without building the plan.
  double makespan(bool split, int64_t L);
  // The largest chunk cost with chunk bound L: a lower bound of makespan(true, L).
  double max_chunk_cost(int64_t L) const;
  // Steps 3-5 for the prepared tiles into `out` (all fields set).
  void build(bool split, int64_t L, Plan& out);
  // balance()'s choice for the prepared tiles: split at L when it lowers the makespan by
  // cfg.min_gain. ms_split / ms_whole receive the makespans compared (ms_split is 0 when no split
  // was possible).
  bool choose_split(int64_t L, double* ms_split = nullptr, double* ms_whole = nullptr);

 private:
  struct Slot {
    double load;
    int32_t cta;
  };
  void reset_deal();
  int32_t deal_one(double cost);
  int32_t deal_slow(double cost);
  void deal_to_heap(const Slot& s);
  double max_load() const;
  // The same queue when every cost is an integer and all loads stay below 2^(63 - shift): one
  // uint64 key per CTA, (load << shift) | cta, whose integer order is the (load, index) order.
  bool use_int_keys(const double* costs, std::size_t n, const std::size_t* counts);
  void reset_deal_int();
  int32_t deal_int(uint64_t cost);
  int32_t deal_int_slow(uint64_t add);
  // k chunks of one cost dealt one by one as deal_int deals them (the same CTAs, the same loads),
  // from the sorted queue (never the heap): out[i] (when not null) receives chunk i's CTA.
  void deal_run_int(uint64_t cost, std::size_t k, int32_t* out);
  void loads_int(double* loads) const;
  double max_load_int() const;  // the largest load in the integer queue
  // Returns the number of distinct costs when its counting sort ran (the non-empty buckets), else 0.
  std::size_t sort_int_desc(const uint64_t* cost, std::size_t n, uint64_t min_cost, uint64_t max_cost);
  bool int_keys_for_total(double total);
  // Tiles in generation order, built on first use (ensure_tiles): a prepare() whose requests each
  // fit one tile per KV head (decode; causal prefill segments) leaves them implicit, and an
  // unsplit build of such a batch (build_whole_units) never materializes them.
  void ensure_tiles() const;
  bool build_whole_units(Plan& out);

  BalanceConfig cfg_{};
  int32_t batch_ = 0;
  int64_t total_kv_ = 0;
  int32_t longest_ = 0;
  bool whole_valid_ = false;
  double whole_ms_ = 0;
  // Integral costs (alpha and beta whole numbers, as decode and the sm90 prefill use): a chunk's
  // cost is computed as the integer icost = ia * rows + ib * keys (the same value as the double
  // formula, exactly: every term is below 2^53), sorted by a counting sort on it and dealt with the
  // integer queue without the per-call scan that checks the doubles.
  bool int_costs_ = false;
  uint64_t ia_ = 0, ib_ = 0;
  std::vector<int32_t> qo_indptr_, kv_len_;
  std::vector<int32_t> kv_start_;  // empty: every request starts at key 0
  // Every request with rows has at most tile_q of them (one tile per KV head; prepare()).
  bool one_tile_ = false;
  int64_t num_tiles_ = 0;
  // Tiles in generation order (request, kv_head, tile), one 24-byte record each (one write stream
  // in ensure_tiles(), one read per chunk in build()). Built on first use (mutable: max_chunk_cost
  // is const).
  struct Tile {
    int32_t request, kv_head, row_begin, row_end, kv_begin, kv_end;
  };
  mutable std::vector<Tile> tiles_;
  mutable bool tiles_valid_ = false;
  // Chunks of a split build() in generation order (an unsplit build reads the tiles directly:
  // chunk t = tile t, whole range, no slot).
  struct Chunk {
    int32_t tile, kv_begin, kv_end, slot;
  };
  std::vector<Chunk> chunks_;
  // build_whole_units: one record per request with rows (its H tiles share it).
  struct Unit {
    int32_t request, rows, kv_begin, kv_end;
  };
  std::vector<Unit> units_;     // prepare(): requests with rows while one_tile_ holds
  std::vector<uint64_t> u_icost_;  // their integral costs (int_costs_)
  std::size_t num_units_ = 0;
  uint64_t u_min_ = 0, u_max_ = 0, u_sum_ = 0;
  std::vector<int32_t> t_chunk0_;  // tile t's chunks: [t_chunk0_[t], t_chunk0_[t + 1])
  std::vector<double> c_cost_;
  std::vector<uint64_t> c_icost_;
  // Step 4/5 scratch.
  std::vector<uint32_t> order_, order_tmp_;
  std::vector<uint64_t> keys_, keys_tmp_;
  std::vector<uint32_t> hist_;
  std::vector<std::pair<double, int64_t>> runs_;  // makespan(): (cost, count)
  std::vector<int32_t> assigned_, cursor_;
  std::vector<Slot> ring_, heap_;
  std::vector<uint64_t> iring_, iheap_;
  std::vector<int32_t> run_ctas_;  // build_whole_units' grouped deal: one CTA per unit of a run
  std::vector<double> tmp_costs_;
  std::vector<std::size_t> tmp_counts_;
  int key_shift_ = 0;
  std::size_t head_ = 0;
  bool heap_mode_ = false;
};
#endif  // !WEFT_RTC

// ---------------------------------------------------------------------------------------------
// Workspace layout: every array at a FIXED offset computed from bounds, so the device pointers a
// kernel (or a captured CUDA graph) reads never change from one plan to the next.
struct PlanBounds {
  int32_t max_batch = 0;
  int32_t max_tiles = 0;     // tiles of the largest batch (decode: max_batch * Hkv * ceil(g/tile_q))
  int32_t num_ctas = 0;
  int32_t tile_q = 16;
  int32_t head_dim = 0;      // partial-state row width (fp32)
  // Plans of this workspace fold this many KV heads into one (Plan::head_fold; 1: none). num_ctas
  // and max_tiles are the FOLDED plan's; the launch has num_ctas * head_fold CTAs, and the CTA
  // records, merge counters and partial slots are sized for all of them.
  int32_t head_fold = 1;
  // One CtaRecord per LAUNCHED CTA (num_ctas * head_fold, in fold_launch_order, each with its
  // sub-head's fold word) instead of one per plan CTA: the decode kernels read record blockIdx.x
  // (decode_common.cuh load_first_item), so the host picks which plan CTA and sub-head each
  // launched CTA runs; serialize writes them up to the last busy one (launch_records_used), the
  // others stay zero (no item). false (prefill): one record per plan CTA, kernels map with plan_cta_of.
  bool launch_records = false;
  // Bytes reserved at the END of the metadata region (inside metadata_bytes(), before the partial
  // states) for a caller's own per-plan arrays (the prefill segment arrays), so that one copy of
  // the metadata carries them too. WorkspaceLayout::tail_offset() is where they start; serialize()
  // never writes there except when it clears a fresh buffer.
  std::size_t tail_bytes = 0;
};

// Header at offset 0 of the workspace (read by kernels: counts of the current plan).
struct PlanHeader {
  int32_t version;
  int32_t num_items;
  int32_t num_merges;
  int32_t num_ctas;
  int32_t batch;
  int32_t tile_q;  // rows per partial slot (the bound's tile_q; a plan's items may have fewer)
  int32_t group_size;
  int32_t num_kv_heads;
  int32_t num_partial_slots;
  int32_t split;
  int32_t head_fold;
  int32_t reserved[5];
};

// Head folding (Plan::head_fold) as seen by a launched CTA: its fold word packs its sub-head j and
// the fold, j | (head_fold - 1) << 16 (0 without folding, where every expansion below is the
// identity). Host and device (constexpr: kernels compile with --expt-relaxed-constexpr).
constexpr int32_t fold_word(int32_t sub_head, int32_t head_fold) { return sub_head | (head_fold - 1) << 16; }
// A folded launch without launch records (prefill) has plan_ctas * head_fold CTAs, sub-head
// major: launched CTA c runs plan CTA c % plan_ctas for sub-head c / plan_ctas. (The
// plan-CTA-major order, c / head_fold, put the 8 heads of one chunk on neighbouring CTAs and
// measured 6-14% slower on single-request 32K-key decodes, H100 A/B at 3342642: b1/kv32768 rows.
// Decode layouts write one record per launched CTA instead: fold_launch_order.)
constexpr int32_t plan_cta_of(int32_t c, int32_t plan_ctas) { return c % plan_ctas; }
constexpr int32_t fold_word_of_cta(int32_t c, int32_t plan_ctas, int32_t head_fold) {
  return fold_word(c / plan_ctas, head_fold);
}
constexpr int32_t fold_count(int32_t word) { return (word >> 16) + 1; }
constexpr int32_t fold_sub_head(int32_t word) { return word & 0xffff; }
// A plan index (KV head, merge counter) expanded for the CTA's sub-head.
constexpr int32_t fold_expand(int32_t index, int32_t word) { return index * fold_count(word) + fold_sub_head(word); }
// A plan partial slot expanded for the CTA's sub-head: sub-head j owns slots [j * S, (j + 1) * S)
// (S = slot_stride, the layout's max_slots), so the slots of one merge stay consecutive as in an
// unfolded plan. (The interleaved s * head_fold + j put one merge's slots head_fold slots apart;
// issue 19's A/B at 88e4a79 left split single-request decodes 1-4% slower, this is its remedy.)
constexpr int32_t fold_slot(int32_t slot, int32_t word, int32_t slot_stride) {
  return fold_sub_head(word) * slot_stride + slot;
}

// Copy of a plan CTA's item range and FIRST item (written by serialize, derived from the arrays
// above): a persistent kernel reads it with one round of independent 16-byte loads instead of the
// dependent chain cta_indptr -> item arrays -> qo_indptr. 48 bytes: three int4. The fields are
// the plan's (not expanded for a sub-head; the kernel expands kv_head and partial_slot with the
// fold word). Layouts with PlanBounds::launch_records hold one record per launched CTA, in
// fold_launch_order (fold: that CTA's sub-head; all zero past launch_records_used: no item); the
// others one per plan CTA (fold: sub-head 0).
struct CtaRecord {
  int32_t item_begin, item_end;  // cta_indptr[c], cta_indptr[c + 1] of the record's plan CTA c
  int32_t request, kv_head, row_begin, row_end, kv_begin, kv_end, partial_slot;  // item item_begin
  int32_t token0;                // qo_indptr[request]: the request's first query token
  int32_t merge;                 // item_merge of item item_begin (the PLAN's merge index)
  int32_t fold;                  // fold_word(j, head_fold) of the CTA's sub-head j (0 without folding)
};
static_assert(sizeof(CtaRecord) == 48, "CtaRecord is read as three 16-byte vectors");

// Device-side view: the same arrays, as pointers into the workspace.
struct PlanPointers {
  const PlanHeader* header;
  const int32_t* cta_indptr;
  const CtaRecord* cta_first;  // num_ctas (* head_fold with launch_records) records, 16-byte
                               // aligned (fields of an empty CTA's first item are 0)
  const int32_t* item_request;
  const int32_t* item_kv_head;
  const int32_t* item_row_begin;
  const int32_t* item_row_end;
  const int32_t* item_kv_begin;
  const int32_t* item_kv_end;
  const int32_t* item_partial_slot;
  const int32_t* item_merge;   // split items: the merge entry of their tile; -1 for final items
  const int32_t* merge_request;
  const int32_t* merge_kv_head;
  const int32_t* merge_row_begin;
  const int32_t* merge_row_end;
  const int32_t* merge_indptr;
  const int32_t* qo_indptr;
  const int32_t* kv_len;
  // One counter per merge entry and sub-head (m * head_fold + j), 0 between runs: a kernel that merges in place (decode) counts
  // the finished slots of each split tile; the CTA that finishes the last one merges the tile and
  // resets the counter to 0. Inside the metadata region, so every plan() copy zeroes them too.
  uint32_t* merge_counter;
  // [max_slots * head_fold, tile_q, head_dim]: slot s row i at (s * tile_q + i) * head_dim
  float* partial_o;
  float* partial_lse;  // [max_slots * head_fold, tile_q], BASE-2 log-sum-exp (kernels work in log2)
  // The layout's constants a folded launch needs (fixed per layout: graph safe): plan CTAs (the
  // launch has num_ctas * head_fold), the fold, and the slots per sub-head (max_slots; fold_slot).
  int32_t num_ctas;
  int32_t head_fold;
  int32_t slot_stride;
};

#if !WEFT_RTC  // host only (NVRTC: common/rtc_compat.h)
// The launch order of a head-folded plan (PlanBounds::launch_records): which plan CTA and sub-head
// each launched CTA runs. The plan CTAs are cut into runs of consecutive CTAs whose first items
// are the same tile (request, KV head class, rows; empty CTAs form runs too); each run is
// launched sub-head major: run [p0, p1) at launched CTA c0 gives CTA c0 + j * (p1 - p0) + (p - p0)
// plan CTA p for sub-head j. This is the unfolded plan's round robin again (its LPT deal of equal
// items put one tile's chunks on consecutive CTAs, the next head's after them): a one-request
// split plan (b1/kv1024: 4 chunks per head) puts its 32 busy CTAs first, where the resident
// CTAs of the first wave sit on distinct SMs (plain sub-head major c % P put them 33 apart, half
// of them in the second wave on the SMs of the first half: b1 rows 3-10% slower in issue 19's
// A/B at 9b9ac8c); a plan of one whole tile per CTA (b128/kv4096) runs a request's heads on
// neighbouring CTAs (plain sub-head major: the d64 tensor-core rows 3-4% slower); a plan whose
// CTAs all start in one tile (b1/kv32768) is sub-head major as before.
// fn(c, p, j, c0) per launched CTA c, in order (c0: the launched CTA of plan CTA p's sub-head 0,
// visited before), for the runs that start before plan CTA p_end (default: all).
template <class Fn>
void fold_launch_order(const Plan& plan, Fn&& fn, int32_t p_end = -1) {
  const int32_t P = plan.num_ctas, F = plan.head_fold;
  if (p_end < 0 || p_end > P) p_end = P;
  auto same_tile = [&](int32_t a, int32_t b) {
    const int32_t ia = plan.cta_indptr[a], ib = plan.cta_indptr[b];
    const bool ea = ia == plan.cta_indptr[a + 1], eb = ib == plan.cta_indptr[b + 1];
    if (ea || eb) return ea && eb;
    return plan.item_request[ia] == plan.item_request[ib] && plan.item_kv_head[ia] == plan.item_kv_head[ib] &&
           plan.item_row_begin[ia] == plan.item_row_begin[ib];
  };
  int32_t c = 0;
  for (int32_t p0 = 0; p0 < p_end;) {
    int32_t p1 = p0 + 1;
    while (p1 < P && same_tile(p1, p0)) ++p1;
    const int32_t c0 = c;
    for (int32_t j = 0; j < F; ++j)
      for (int32_t p = p0; p < p1; ++p) fn(c++, p, j, c0 + (p - p0));
    p0 = p1;
  }
}

// The CtaRecords a decode layout's serialize writes (launch_records): one per launched CTA in
// fold_launch_order up to the last run of plan CTAs with items, i.e. F * busy_end records, busy_end
// = the plan CTA after that run. The launched CTAs after them run the runs of empty plan CTAs at the
// end (b1/kv4096 on 33 plan CTAs x 8: 16 busy, 128 records instead of 264; b1/kv1024 32): their
// records stay zero, which the kernel reads as an empty item range (decode_common.cuh
// load_first_item: item_begin == item_end, the CTA returns), as it read the empty CTAs' records.
// (issue 19's b1 plan cost: 264 records of 48 bytes were 12.4 KiB of the Llama-3-8B b1 image.)
// The last busy run ends at the last plan CTA with items (its CTAs all have items), so busy_end
// is found from the end of cta_indptr (no run scan).
struct LaunchRecords {
  int32_t busy_end = 0, records = 0;
};
inline LaunchRecords launch_records_used(const Plan& plan) {
  LaunchRecords l;
  l.busy_end = plan.num_ctas;
  while (l.busy_end > 0 && plan.cta_indptr[l.busy_end - 1] == plan.cta_indptr[l.busy_end]) --l.busy_end;
  l.records = l.busy_end * plan.head_fold;
  return l;
}
// Bytes of the arrays serialize() writes for a plan with launch records: 8 item arrays, one word
// per plan CTA, the CTA records up to the last busy one, 5 merge arrays and 2 words per request
// (what the decode wrapper's staging rotation looks at; decode/direct_plan.h writes the same).
inline std::size_t launch_plan_array_bytes(int32_t items, int32_t ctas, int32_t records, int32_t merges,
                                           int32_t batch) {
  return sizeof(int32_t) * (8 * std::size_t(items) + std::size_t(ctas) + 5 * std::size_t(merges) +
                            2 * std::size_t(batch)) +
         sizeof(CtaRecord) * std::size_t(records);
}

class WorkspaceLayout {
 public:
  static constexpr std::size_t kAlign = 256;
  WorkspaceLayout() = default;
  explicit WorkspaceLayout(const PlanBounds& bounds);  // throws weft::Error on bad bounds

  const PlanBounds& bounds() const { return bounds_; }
  int32_t max_items() const { return max_items_; }
  int32_t max_merges() const { return max_merges_; }
  int32_t max_slots() const { return max_slots_; }
  // CtaRecords at PlanPointers::cta_first: num_ctas, or num_ctas * head_fold with launch_records
  // (a plan writes launch_records_used(plan).records of those, the rest stay zero).
  int32_t num_records() const { return num_records_; }
  // Bytes of plan metadata (header + index arrays): what plan() copies host -> device.
  std::size_t metadata_bytes() const { return metadata_bytes_; }
  // Offset of the bounds' tail_bytes (the last bytes of the metadata region).
  std::size_t tail_offset() const { return off_tail_; }
  // Total workspace bytes (metadata + fp32 partial states).
  std::size_t total_bytes() const { return total_bytes_; }

  // Writes `plan` into `dst` (metadata_bytes() bytes, host memory) at the fixed offsets.
  // Throws weft::Error("plan", ...) when the plan exceeds the bounds or does not match them.
  void serialize(const Plan& plan, void* dst) const;
  // What one serialize() wrote into a buffer: the length of every variable array. With it, the
  // next serialize() into the SAME buffer (not modified in between) clears only what the previous
  // plan wrote beyond the new lengths instead of the whole region; the image is byte-identical to
  // serialize() into a fresh buffer. `valid` false (a new buffer): the whole region is cleared.
  struct Image {
    bool valid = false;
    int32_t len[16] = {};
    int32_t records = 0;  // CtaRecords written (launch_records_used's count with launch_records)
  };
  void serialize(const Plan& plan, void* dst, Image* image) const;
  // Reads a serialized plan back (tests; header + arrays, no partials).
  Plan deserialize(const void* src) const;
  // Pointers into a workspace at `base` (device or host).
  PlanPointers pointers(void* base) const;

 private:
  PlanBounds bounds_{};
  int32_t max_items_ = 0, max_merges_ = 0, max_slots_ = 0, num_records_ = 0;
  std::size_t off_cta_ = 0, off_first_ = 0, off_items_ = 0, off_merges_ = 0, off_counter_ = 0, off_qo_ = 0, off_kv_ = 0;
  std::size_t off_po_ = 0, off_plse_ = 0, off_tail_ = 0;
  std::size_t metadata_bytes_ = 0, total_bytes_ = 0;
};
#endif  // !WEFT_RTC

}  // namespace weft::plan
