// In-kernel merge of split tiles for the Hopper prefill kernel (issue 20), so run() is one launch
// whatever the plan. The pattern of decode (design.md "decode merges inside its kernel"): thread
// 0 of the consumers counts each finished partial slot in its tile's merge counter (plan
// metadata, zeroed by every plan() copy, so graph replays after any re-plan start from 0); the
// CTA that counts a tile's LAST slot merges the tile's rows with the merge kernel's device
// function (attn::merge_row_warp: slots in KV order, the same bits whichever CTA merges) and
// resets the counter. Why: the separate merge grid, launched after every sm90 run for graph
// safety, cost ~5 us even for plans without a split (causal ragged L1024 0.047 vs 0.042 ms
// without it, H100 run of 2a5f27b, perf notes).
//
// When: after the CTA's LAST item, not after each split item. Merging inside the item loop made
// ptxas spill the consumers' loop state (d128 bf16: 128 / 236 bytes of spill stores / loads in
// the mainloop instead of 16 / 16, also with the merge as a non-inlined call); after the loop
// it costs no spill. A tile's merge then waits for its contributors' whole item lists, which
// ends no later than the separate merge grid started (after the whole grid).
#pragma once
#include "attention/merge_row.cuh"
#include "common/ptx_sm90.cuh"
#include "prefill/kernel/mask.cuh"
#include "prefill/kernel/params.h"

namespace weft::prefill::sm90 {

// Named barrier of the 256 consumer threads around each merge decision (0 = __syncthreads;
// 2, 3: the ping-pong turns of sm90_consumer.cuh).
inline constexpr int kMergeBar = 4;
inline constexpr int kConsumerThreads = 256;

// Called by all 256 consumer threads (tid_c = 0..255 over both warpgroups) once the CTA's items
// are written (write_item). For each split item of the CTA, in item order: between two named
// barriers thread 0 counts its slot (attn::count_slot_is_last: the first barrier orders every
// consumer's partial stores before its release; the second passes the acquired partials and
// the decision on); the CTA that counted the last slot merges the tile, its rows spread over the
// 8 consumer warps, from the merge entry's metadata as the merge kernel reads it (merge.cu
// load_entry: rows, first token, KV head expanded for the sub-head).
template <class T, int D>
__device__ __forceinline__ void merge_split_items(const PrefillParams& p, const CtaItems& items, int tid_c) {
  const plan::PlanPointers& pl = p.plan;
  const int warp = tid_c / 32, lane = tid_c % 32;
  for (int w = items.begin; w < items.end; ++w) {
    const int merge = pl.item_merge[w];  // -1: final item (no slot)
    if (merge < 0) continue;
    const attn::MergeRange mr = attn::load_merge_range(pl, merge, items.fold);
    ptx90::named_bar_sync(kMergeBar, kConsumerThreads);
    const bool mine =
        tid_c == 0 && attn::count_slot_is_last(&pl.merge_counter[plan::fold_expand(merge, items.fold)], mr.n);
    if (!ptx90::named_bar_or(kMergeBar, kConsumerThreads, mine)) continue;
    const int tile_q = pl.header->tile_q;  // the slots' row stride (write_item)
    const int r0 = pl.merge_row_begin[merge], r1 = pl.merge_row_end[merge];
    const int token0 = pl.qo_indptr[pl.merge_request[merge]];
    const int kv_head = plan::fold_expand(pl.merge_kv_head[merge], items.fold);
    for (int r = r0 + warp; r < r1; r += kConsumerThreads / 32) {
      const int i = r - r0;
      const int token = token0 + r / p.group_size;
      const int head = kv_head * p.group_size + r % p.group_size;
      attn::merge_row_warp<T>(pl.partial_lse + static_cast<int64_t>(mr.s0) * tile_q + i,
                              pl.partial_o + (static_cast<int64_t>(mr.s0) * tile_q + i) * D, mr.n,
                              tile_q * mr.step, D, static_cast<T*>(p.o) + token * p.o_stride_token + head * p.o_stride_head,
                              p.lse != nullptr ? p.lse + token * p.lse_stride_token + head : nullptr, lane);
    }
  }
}

}  // namespace weft::prefill::sm90
