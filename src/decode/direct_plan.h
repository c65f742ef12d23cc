// Internal, pure C++ (host only): the decode wrapper's direct planner for balanced plans that split
// nothing (issue 22: decode plan() host time at 256 requests). Host-testable.
//
// plan_decode() + WorkspaceLayout::serialize build a plan::Plan (16 arrays) from a BatchShape and
// then copy it into the staging image. For a decode batch whose plan splits no request (every
// request's keys <= the chunk bound L0, the common serving case: 256 requests of 0.5-4K keys on 33
// folded CTAs) the plan is fixed by three things: the requests sorted by cost (stable,
// descending), the LPT deal of their tiles, and each CTA's first item. DirectPlanner computes those
// from the lengths alone (no BatchShape, no unit records, no Plan) and writes the image straight
// into the staging slot: the constant item arrays (row_begin 0, kv_begin 0, rows, partial slot
// -1, merge -1) as fills, the varying ones (request, kv head, kv end) at their CTA's place, the
// launch records of fold_launch_order. The image is byte-identical to serialize(plan_decode(...))
// (host test DecodeDirectPlan.*, random batches); plan() returns false, writing nothing, for the
// batches it does not cover (a split candidate, a window, groups above the tile, empty batches,
// costs too large for the integer queue), which take the general planner.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "attention/plan/balance.h"

namespace weft::decode {

// plan_tile_rows (decode_plan.h) on the lengths directly (kv_start: null for none).
int32_t plan_tile_rows_of(const int32_t* kv_len, const int32_t* kv_start, int32_t batch, int32_t num_kv_heads,
                          int32_t group_size, int32_t grid, int32_t max_rows);

class DirectPlanner {
 public:
  // Step 1 (no image written): whether the plan of these lengths (decode: one query each, no
  // window) for cfg (decode::balance_config) is an unsplit one this planner writes; if so its deal
  // is computed and kept for write(). The lengths must be >= 0 (checked by the caller) and stay
  // unchanged until write().
  bool plan(const int32_t* kv_len, int32_t batch, const plan::BalanceConfig& cfg);
  // The planned plan (after plan() returned true).
  int32_t num_items() const { return n_; }
  int32_t max_chunk() const { return longest_; }
  // CtaRecords written (plan::launch_records_used of the same plan) and the image's array bytes
  // (what the wrapper's staging rotation looks at).
  int32_t records() const { return busy_end_ * cfg_.head_fold; }
  std::size_t image_bytes() const { return plan::launch_plan_array_bytes(n_, cfg_.num_ctas, records(), 0, batch_); }
  // Step 2: the image into dst (layout.metadata_bytes() bytes) as layout.serialize(plan, dst,
  // image) writes it, incremental clears included. layout must be a decode layout (launch records)
  // for cfg's CTAs and fold.
  void write(const plan::WorkspaceLayout& layout, void* dst, plan::WorkspaceLayout::Image* image) const;

 private:
  plan::BalanceConfig cfg_{};
  const int32_t* kv_len_ = nullptr;
  int32_t batch_ = 0, n_ = 0, longest_ = 0, busy_end_ = 0, rows_ = 0;
  // The requests in deal order: (max cost - cost) << 32 | request, sorted ascending.
  std::vector<uint64_t> sorted_, sorted_tmp_;
  std::vector<uint64_t> heap_;
  std::vector<int32_t> assigned_;  // the CTA of each dealt tile, in the deal order
  std::vector<int32_t> indptr_;    // C + 1: items per CTA, then their offsets
  mutable std::vector<int32_t> cursor_;
};

}  // namespace weft::decode
