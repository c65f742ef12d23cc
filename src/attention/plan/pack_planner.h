// PackPlanner: prefix-sharing decode plans (prefix forest + make_pack_plan) with LAZY UPDATE
// (pure C++, no CUDA). A decode step usually only appends tokens to the requests' private
// suffixes; the prefix structure, and with it every pack, is then unchanged. The planner keeps
// the last full plan and a structural key of it, and when the key still matches it only rewrites
// what appending changes: the private items' key ranges and the items' page bases. Cost: one
// pass over the requests that compares each one's shared page ids (memcmp against its deepest
// node's ids, kept once per node) and rewrites the ends of its private items, plus copies of the
// arrays that moved into the head-fold copies; against a full plan's forest, pack plan and
// longest-first deal. Reading the table's shared ids is most of it (181 KB at 256 requests x 3
// levels, bench pack/b256/levels3/lazy) and cannot be skipped: any of them may have changed.
//
// Structural key (why it is exact): let s_b be request b's shared pages in the cached forest and
// t_b = min(full_pages_b, s_b + 1) (its shared pages plus the first private page, which is what
// makes b diverge from every other request). The forest (nodes, order, shared_pages) is a
// function of the lists truncated to t_b: any two requests' common prefix is at most s_b pages,
// so truncation keeps every common prefix and every node boundary, and what lies past t_b is in
// the request's own subtree (a tree node holding one request), which no node with >= 2 requests
// reaches. So if the current table's lists truncated to the CACHED t_b equal the cached ones
// (same lengths, same page ids), the current forest is the cached forest.
// With the same forest and config, make_pack_plan emits the same packs (ranges from page
// positions; page bases re-read from indptr) and, per request, private items over [start,
// kv_len) cut by chunk_keys(); when each request keeps its number of private chunks (and
// whether it has any), the items differ only in key ranges and page bases. The lazily updated
// plan then holds the same items as a fresh plan (same rows, KV source, ranges, slot/final
// roles, merges in key order), only their CTA deal and slot numbers differ, which changes no
// output bit (each item's math depends on its fields only; merges sum in key order).
//
// With PackPlanConfig::auto_chunk_min the chunk bound is part of the key too: recomputed from the
// batch's keys and the cached forest's pack_duplicate_keys, it must equal the cached plan's
// (pack_max_chunk's coarse rounding keeps it over most steps; a change plans fully).
//
// The deal was balanced for the lengths of the last full plan, so a lazy update is refused once
// the batch's keys moved by more than 1/8 of that plan's keys (a full plan then re-deals).
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "attention/plan/prefix_forest.h"
#include "attention/plan/work_plan.h"

namespace weft::plan {

// pack_max_chunk, pack_work_chunk: work_plan.h.

class PackPlanner {
 public:
  enum class Update { kFull, kLazy };
  // The plan of a page table's host arrays (indptr[batch + 1], indices, kv_len[batch]): a lazy
  // update of the previous plan when the structural key matches, else a full plan. Throws
  // weft::Error on bad input (as build_prefix_forest / make_pack_plan); the previous plan is
  // then dropped (the next call plans fully).
  // prepared: the same table's prepare() came just before (the same pointers, batch and page
  // size; else it is ignored): its walk over the ids is not repeated.
  Update plan(const int32_t* indptr, const int32_t* indices, const int32_t* kv_len, int32_t batch,
              const PackPlanConfig& cfg, bool prepared = false);
  // The decode router's sharing feature of the table (decode::shared_prefix_keys of the rows
  // indices + indptr[b]: the same value), read with the one walk over the ids that the following
  // plan(..., prepared = true) then does not repeat (BatchDecodeWrapper's kAuto route with
  // share_prefixes: the feature decides, and where it picks prefix_share this planner plans).
  // - The structural key of the last full plan holds: the forest is that plan's, and so is the
  //   feature (a function of the lists truncated to t_b as well: every two requests' common full
  //   pages are at most min(t_a, t_b), and a request has a full page iff t_b >= 1), so the value
  //   cached at that plan; plan() then skips the key's id comparisons (the rest of the lazy checks
  //   stay).
  // - Else, with build_forest, the forest, built now with the feature read off its insertions
  //   (PrefixForestBuilder::build's lead_keys); plan() then plans fully from it. Without, -1
  //   (nothing read: the caller computes the feature; a forest costs more than the feature's
  //   hash pass on a table that shares nothing, where the router rarely picks this planner).
  // Nothing of the current plan changes here. Throws as build_prefix_forest.
  int64_t prepare(const int32_t* indptr, const int32_t* indices, const int32_t* kv_len, int32_t batch,
                  int32_t page_size, bool build_forest);
  // A full plan of an explicitly given forest (cascade levels, make_cascade_forest); never
  // updated lazily (the next plan() plans fully).
  void plan_forest(const PrefixForest& forest, const int32_t* indptr, const int32_t* kv_len, const PackPlanConfig& cfg);
  const WorkPlan& current() const { return plan_; }
  // Plans made (full or lazy; a call that throws makes none): an image of plan version v - 1
  // that a lazy update (version v) changes is updated by serialize_moved.
  uint64_t version() const { return version_; }
  // The key arrays (item_page_base, item_kv_begin, item_kv_end) the last plan() wrote: all three
  // after a full plan, those whose values moved after a lazy update. Writes into dst, an image
  // (WorkPlanLayout::serialize) of the previous version of this plan, the span of them in the
  // image's order from the first moved array to the last (at least item_kv_end), and returns
  // that span (offset, bytes) for the copy: after it, dst and a device image of the previous
  // version that receives the span equal serialize() of the current plan.
  std::pair<std::size_t, std::size_t> serialize_moved(const WorkPlanLayout& layout, void* dst) const;
  const PrefixForest& forest() const { return forest_; }
  // The keys per item at most of the current plan (cfg.max_chunk, or the bound derived from the
  // packed work with PackPlanConfig::auto_chunk_min).
  int32_t max_chunk() const { return chunk_; }
  void reset() { lazy_ok_ = false; }

 private:
  bool try_lazy(const int32_t* indptr, const int32_t* indices, const int32_t* kv_len, int32_t batch,
                const PackPlanConfig& cfg, bool ids_checked);
  bool key_ids_hold(const int32_t* indptr, const int32_t* indices, const int32_t* kv_len, int32_t batch,
                    int32_t page_size) const;
  void index_private_items();
  void build_key(const int32_t* indptr, const int32_t* indices, const int32_t* kv_len, int32_t batch);

  WorkPlan plan_;
  PackPlanScratch scratch_;
  PrefixForest forest_;
  PrefixForestBuilder forest_builder_;
  int64_t shared_keys_ = 0;  // the sharing feature of the last full plan's table (prepare)
  // What the last prepare() left for the next plan(): kProbed, the key's ids checked; kForest,
  // the table's forest in pending_ with its feature; of the table (indptr, indices, kv_len, batch,
  // page size) in prep_*.
  enum class Prep { kNone, kProbed, kForest };
  Prep prep_ = Prep::kNone;
  const int32_t *prep_indptr_ = nullptr, *prep_indices_ = nullptr, *prep_kv_len_ = nullptr;
  int32_t prep_batch_ = 0, prep_page_size_ = 0;
  int64_t prep_keys_ = 0;
  PrefixForest pending_;
  PackPlanConfig cfg_{};
  bool lazy_ok_ = false;
  uint64_t version_ = 0;
  uint32_t moved_ = 7;  // bits 0, 1, 2: item_page_base, item_kv_begin, item_kv_end moved (serialize_moved)
  int64_t keys_at_full_ = 0;
  int32_t chunk_ = 0;      // the current plan's max_chunk (PackPlanScratch::max_chunk)
  int64_t dup_keys_ = 0;   // pack_duplicate_keys of forest_ (with auto_chunk_min)
  // The structural key, per request b: its first s_b (shared) page ids are those of its deepest
  // node's path (path_ids_ from key_[b].path; one copy per deepest node, not per request: the
  // lazy check reads the table's ids once and compares them with a few L1-resident paths), and
  // when t_b = s_b + 1 its first private page id; t_b itself holds while kv_len stays in
  // [lo, hi]. With what the rewrite needs, so that one pass over the requests checks and
  // rewrites (ReqKey is all it reads besides the table and the plan's key arrays).
  struct ReqKey {
    // kv_len range (inclusive; lo > hi: never lazy) in which the key holds: the same t_b =
    // min(kv_len / page_size, s_b + 1), at least its private start, and whether it has private
    // keys where that decides its items.
    int32_t lo, hi;
    int32_t path, shared;        // offset of its s_b shared page ids in path_ids_, s_b
    int32_t first_priv;          // page id at position s_b (compared when has_priv)
    int32_t has_priv;            // t_b == s_b + 1
    int32_t priv_start;          // key where its private suffix starts
    int32_t chunks;              // its private chunks (0: no private item)
    int32_t item_begin, item_end;  // its private items: priv_items_[item_begin .. item_end)
    int32_t len, base;           // kv_len and indptr entry of the current plan
  };
  std::vector<ReqKey> key_;
  std::vector<int32_t> path_ids_, path_of_node_;
  std::vector<int32_t> fold_req_;               // per folded item its first request (page base)
  std::vector<int32_t> priv_chunks_;            // private chunks per (request, kv head, row tile)
  std::vector<int32_t> priv_ptr_, priv_items_;  // per request its private items, (head, row tile, key) order
};

}  // namespace weft::plan
