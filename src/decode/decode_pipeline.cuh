// Internal: the persistent item loop shared by both decode paths (load/scheduler role).
//
// One persistent CTA (W warps, DecodeParams::warps, default 4) executes the plan's items of
// blockIdx.x. Per-warp ownership of keys: the item's KV range is cut into 16-key warp tiles and
// warp w takes tiles w, w + W, w + 2W, ... Each warp runs its OWN cp.async pipeline (`stages`
// buffers of K+V in shared memory, `stages` - 1 tiles in flight while it computes, `stages`
// when it waits) with its own online-softmax state; there is no CTA barrier inside the KV
// loop, only __syncwarp. The warps' states are combined once per item in the epilogue
// (decode_common.cuh), in warp order (deterministic).
// Page ids are fetched one warp tile before their copies are issued (kv_lookup_page), so the
// page-table load latency overlaps a whole tile of compute instead of stalling the copies.
// A CTA's range and first item come from its plan::CtaRecord (one round of loads; the page-table
// base and the first page ids follow). Items back to back: the next item's metadata and first
// page ids are requested when an item starts, and each warp issues the next item's Q and first
// S-1 tiles as soon as it leaves the KV loop, so they load during the epilogue (stage S-1 doubles
// as the epilogue buffer; Q is double-buffered). The pipeline never drains between the items of
// a CTA. A split item's CTA then counts the slot; the last one of a tile merges it
// (merge_tile_if_last, decode_common.cuh).
//
// The per-tile math is the Mainloop policy (one per path, constructed per item per warp):
//   Mainloop ml(sQ, lane, rs);             // zero state; may load Q fragments from sQ;
//                                          // rs = row_span<Variant>(p, item) (positions, heads)
//   ml.tile(p, sQ, sK, sV, k0, kv_end, nrows, lane);   // 16 keys [k0, k0 + 16) of sK / sV
// Mainloop::Variant is the attention variant (attention/variant.cuh) whose logits it computes.
//   ml.store(red_o, red_m, red_l, warp, lane, nrows, round);  // rows round*16.. +15: O, m, l -> smem
// decode_tc.cuh (mma.sync, GQA group in M) and decode_cc.cuh (fp32 FMA) provide them.
#pragma once
#include "decode/decode_common.cuh"

namespace weft::decode {

// Copies of warp tile k0 (page ids pg, from kv_lookup_page a tile ago) into sK / sV, and the
// lookup of the warp's next tile k0n (when has_next) into pg. Generic tiles: the row offsets
// from pg BEFORE the next lookup is issued, which then loads into pg's own register (issued
// first, both values were live at once and ptxas copied the new page id into the loop-carried
// register right after the load, waiting for it in the same iteration: the KV loop's lookahead
// lost, 2-3x the long-scoreboard stalls in the CUDA-core kernel, 3-4% slower forced CUDA-core
// rows; perf-notes-decode.md "Page lookahead and the register copy"). One-page tiles
// (kv_one_page): kv_issue_page, the page id read before the lookup in the same way.
template <class T, int D, class P, class I>
__device__ __forceinline__ void issue_tile(const P& p, const I& it, const int32_t* pages, int32_t& pg, int k0,
                                           bool has_next, int k0n, int lane, T* sK, T* sV) {
  if (kv_one_page(p, it)) {
    kv_issue_page<T, D>(p, pg, k0, it.kv_end, it.kv_head, lane, sK, sV);
    pg = has_next ? kv_lookup_page(p, pages, k0n, it.kv_end, 0) : -1;
  } else {
    const int64_t off = kv_row_offset(p, pg, k0, it.kv_head, lane);
    pg = has_next ? kv_lookup_page(p, pages, k0n, it.kv_end, lane) : -1;
    kv_issue<T, D>(p, off, lane, sK, sV);
  }
}

// Per-warp prologue of an item: this thread's share of the item's Q rows -> sQ (one commit
// group), then the warp's first S-1 tiles -> stages 0 .. S-2 (one group each, empty past the
// warp's last tile); returns the page ids of the warp's tile S-1 (lookup issued, not awaited).
// pg0: kv_lookup_page of the warp's first tile (requested early by the caller).
template <class T, int D, int QR, bool kPacked = false, class P>
__device__ __forceinline__ int32_t start_item(const P& p, const Item& it, const int32_t* pages,
                                              int32_t pg0, T* sQ, T* sPipe, int S, int W, int warp, int lane) {
  using L = SmemLayout<T, D, QR>;
  load_q<T, D, QR, kPacked>(p, it, sQ);
  ptx::cp_async_commit();
  const int total_tiles = (it.kv_end - it.kv_begin + kWarpKeys - 1) / kWarpKeys;
  const int nt = total_tiles > warp ? (total_tiles - warp + W - 1) / W : 0;
  int32_t pg_next = pg0;
  for (int s = 0; s < S - 1; ++s) {
    if (s < nt) {
      const int k0 = it.kv_begin + (warp + s * W) * kWarpKeys;
      // Tile s's copies, then the lookup of tile s + 1 into pg_next (issue_tile: register reuse).
      T* st = sPipe + (s * W + warp) * 2 * L::kTileElems;
      issue_tile<T, D>(p, it, pages, pg_next, k0, s + 1 < nt, k0 + W * kWarpKeys, lane, st, st + L::kTileElems);
    }
    ptx::cp_async_commit();
  }
  return pg_next;
}

// QR: query rows per item (16, or 32 for the 4-tile tensor-core mainloop of GQA groups > 16).
// kPacked: the generic item path: items of a work plan (p.work, attention/plan/work_plan.h) whose
// rows may come from several requests and whose keys start at a page-list base; partial states
// go to the work plan's slots and are merged by its own merge kernel (no in-kernel merge).
// cta: which CTA's item list of the plan to run (blockIdx.x for the decode kernels; a fused
// kernel passes the virtual CTA id its scheduler bound it to, attention/scheduler.cuh).
// P: DecodeParams<T, KV>. fp8 pools (P::kQuantizedKV): a mainloop with kReadsFp8 (tensor cores)
// reads the fp8 tiles itself; otherwise (CUDA cores) each warp tile is widened to 16 bits in
// shared memory (dequant_tile) between its arrival and the mainloop.
// Small: the mainloop of items of <= 16 rows when it differs from Mainloop (the multi-tile
// generic kernel: 32-row packs and 16-row items in one persistent launch, each item running the
// narrower tile it fits -- PAT's round-up rule for m, decided per item at run time).
template <class M>
struct MainloopTag {
  using type = M;
};
template <class A, class B>
struct SameMainloop {
  static constexpr bool value = false;
};
template <class A>
struct SameMainloop<A, A> {
  static constexpr bool value = true;
};
// kStages: the stage count when the caller knows it at compile time (the fused POD kernel, whose
// launch sets p.stages = pod::decode_stages(D)); 0: p.stages. A compile-time count makes every
// cp.async wait an immediate and the stage offsets constants (fewer registers and spills in the
// fused kernel); the decode kernels keep one instance for every stage count (cp_async_wait_dyn).
template <int kStages>
__device__ __forceinline__ void wait_stages(int S) {
  if constexpr (kStages > 0)
    ptx::cp_async_wait<kStages - 1>();
  else
    cp_async_wait_dyn(S - 1);
}
template <class T, int D, int QR, class Mainloop, bool kPacked = false, class P, class Small = Mainloop,
          int kStages = 0>
__device__ __forceinline__ void decode_items(const P& p, int cta) {
  using L = SmemLayout<T, D, QR>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const int S = kStages > 0 ? kStages : p.stages;
  const int W = p.warps;  // = blockDim.x / 32
  T* sPipe = reinterpret_cast<T*>(smem_raw);
  float* red_o = reinterpret_cast<float*>(smem_raw + (S - 1) * L::stage_all_warps(W));  // aliases stage S-1
  float* red_m = reinterpret_cast<float*>(smem_raw + L::pipe_bytes(S, W));
  float* red_l = red_m + W * kTileQ;
  T* sQ0 = reinterpret_cast<T*>(smem_raw + L::pipe_bytes(S, W) + L::red_ml_bytes(W));
  int* s_flag = reinterpret_cast<int*>(smem_raw + L::flag_offset(S, W));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  WEFT_DECODE_TRACE_ENTRY();
  int i0, i1;
  int fold = 0;  // head-folded plans: this CTA's sub-head (load_first_item; 0: not folded)
  Item it;
  if constexpr (kPacked) {
    if (p.work.cta_indptr == nullptr) {
      // Work queue (attention/plan/work_queue.h): a 1-D grid, one task per CTA. A task without
      // keys (a kv_len-0 row) stores its neutral state and returns before loading anything.
      i0 = cta;
      i1 = i0 + 1;
      it = load_work_item(p.work, i0);
      if (it.kv_begin >= it.kv_end) {
        store_neutral<T, D, QR, kPacked>(p, it);
        return;
      }
    } else {
      i0 = p.work.cta_indptr[cta];
      i1 = p.work.cta_indptr[cta + 1];
      if (i0 < i1) it = load_work_item(p.work, i0);
    }
  } else {
    it = load_first_item(p.plan, cta, &i0, &i1, &fold);
  }
  // The page list an item's keys index: its request's (balanced plans: BSR or block-table row,
  // PageTableView::pages) or its own base (generic items; a block-table row's base is
  // row * row_stride, set by the planner).
  auto pages_of = [&](const Item& x) {
    return kPacked ? p.kv.table.indices + x.page_base : p.kv.table.pages(x.req);
  };
  if (i0 >= i1) {
    WEFT_DECODE_TRACE_EXIT(0);
    return;
  }
  WEFT_DECODE_TRACE_POINT(kTraceRecord);
  const int32_t* pages = pages_of(it);
  WEFT_DECODE_TRACE_AFTER(reinterpret_cast<intptr_t>(pages), kTraceIndptr);
  const int32_t pg0 = kv_lookup_page(p, pages, it.kv_begin + warp * kWarpKeys, it.kv_end,
                                     kv_lookup_lane(kv_one_page(p, it), lane));
  WEFT_DECODE_TRACE_AFTER(pg0, kTracePage0);
  int32_t pg_next = start_item<T, D, QR, kPacked>(p, it, pages, pg0, sQ0, sPipe, S, W, warp, lane);
  WEFT_DECODE_TRACE_POINT(kTraceIssued);

  for (int ii = i0; ii < i1; ++ii) {
    T* sQ = sQ0 + ((ii - i0) & 1) * (L::kQBytes / sizeof(T));
    // Metadata of the next item, requested now and used after this item's KV loop.
    const bool has_next = ii + 1 < i1;
    Item nx = it;
    const int32_t* nx_pages = pages;
    int32_t nx_pg0 = -1;
    if (has_next) {
      nx = kPacked ? load_work_item(p.work, ii + 1) : load_item(p.plan, ii + 1, fold);
      nx_pages = pages_of(nx);
      nx_pg0 = kv_lookup_page(p, nx_pages, nx.kv_begin + warp * kWarpKeys, nx.kv_end,
                              kv_lookup_lane(kv_one_page(p, nx), lane));
    }
    wait_stages<kStages>(S);   // this item's Q group (the oldest pending) has landed here ...
    __syncthreads();           // ... and everywhere; the previous epilogue is done with smem
    WEFT_DECODE_TRACE_FIRST_ITEM_POINT(ii == i0, kTraceItemReady);

    // Warp tiles of this warp: global tile index w + W * t, t < nt.
    const int total_tiles = (it.kv_end - it.kv_begin + kWarpKeys - 1) / kWarpKeys;
    const int nt = total_tiles > warp ? (total_tiles - warp + W - 1) / W : 0;
    auto tile_k0 = [&](int t) { return it.kv_begin + (warp + t * W) * kWarpKeys; };
    auto stage = [&](int st) { return sPipe + (st * W + warp) * 2 * L::kTileElems; };

    // The item's KV loop and epilogue with mainloop ML (one of two for the multi-tile kernel).
    auto run_item = [&](auto tag) {
      using ML = typename decltype(tag)::type;
      ML ml(sQ, lane, row_span<typename ML::Variant>(p, it));
      int rd = 0, wr = S - 1;  // stage buffers read (tile t) and written (tile t + S - 1)
      for (int t = 0; t < nt; ++t) {
        // Refill the buffer tile t - 1 used (every lane is past its reads of it).
        __syncwarp();
        {
          const int tn = t + S - 1;
          if (tn < nt) {
            // Tile tn's copies from its page ids (requested a tile ago), THEN the lookup of tile
            // tn + 1 into the same variable (issue_tile: register reuse, no copy).
            T* st = stage(wr);
            issue_tile<T, D>(p, it, pages, pg_next, tile_k0(tn), tn + 1 < nt, tile_k0(tn + 1), lane, st,
                             st + L::kTileElems);
          }
          ptx::cp_async_commit();
          wr = wr + 1 == S ? 0 : wr + 1;
        }
        wait_stages<kStages>(S);   // tile t has landed (this lane's copies) ...
        __syncwarp();              // ... and every lane's
        WEFT_DECODE_TRACE_FIRST_ITEM_POINT(ii == i0 && t == 0, kTraceFirstTile);
        T* sK = stage(rd);
        rd = rd + 1 == S ? 0 : rd + 1;
        if constexpr (P::kQuantizedKV && !ML::kReadsFp8) {
          dequant_tile<T, typename P::KVElem, D>(sK, sK + L::kTileElems, lane);
          __syncwarp();  // every lane's 16-bit rows are written
        }
        ml.tile(p, sQ, sK, sK + L::kTileElems, tile_k0(t), it.kv_end, it.nrows, lane);
      }
      // This warp is done with the item's tiles (none pending: tiles past nt were never issued).
      // Start the next item now, so its Q and first S-1 tiles (stages 0 .. S-2, this warp's own)
      // load during the epilogue; the epilogue only touches stage S-1 (red_o), red_m/l and sQ.
      __syncwarp();
      WEFT_DECODE_TRACE_FIRST_ITEM_POINT(ii == i0, kTraceLoopEnd);
      const MergeRange mr = kPacked ? MergeRange{} : load_merge_range(p.plan, it, fold);  // used after the epilogue
      if (has_next)
        pg_next = start_item<T, D, QR, kPacked>(p, nx, nx_pages, nx_pg0, sQ0 + ((ii + 1 - i0) & 1) * (L::kQBytes / sizeof(T)), sPipe,
                                   S, W, warp, lane);
      // Epilogue in rounds of 16 rows (one for QR = 16): the states of rows round * 16 .. + 15
      // go through red_o / red_m / red_l, which hold 16 rows.
#pragma unroll
      for (int round = 0; round < QR / kTileQ; ++round) {
        if (round * kTileQ >= it.nrows) break;  // uniform across the CTA
        __syncthreads();  // every warp is done with stage S-1 (reused as red_o) / the last round
        ml.store(red_o, red_m, red_l, warp, lane, it.nrows, round);
        __syncthreads();
        WEFT_DECODE_TRACE_FIRST_ITEM_POINT(ii == i0 && round == 0, kTraceStatesStored);
        combine_and_store<T, D, QR, kPacked>(p, it, red_o, red_m, red_l, round);
      }
      return mr;
    };
    MergeRange mr;
    if constexpr (SameMainloop<Small, Mainloop>::value)
      mr = run_item(MainloopTag<Mainloop>{});
    else
      mr = it.nrows <= kTileQ ? run_item(MainloopTag<Small>{}) : run_item(MainloopTag<Mainloop>{});
    WEFT_DECODE_TRACE_FIRST_ITEM_POINT(ii == i0, kTraceItemStored);
    WEFT_DECODE_TRACE_FIRST_ITEM_POINT(ii == i0, kTraceMergeDecided);  // a split item records it again
    if constexpr (!kPacked)
      if (it.slot >= 0) merge_tile_if_last<T, D, QR>(p, it, mr, s_flag, fold);
    it = nx;
    pages = nx_pages;
  }
  ptx::cp_async_wait<0>();
  WEFT_DECODE_TRACE_EXIT(i1 - i0);
}

// The decode kernels' form: CTA blockIdx.x's items.
template <class T, int D, int QR, class Mainloop, bool kPacked = false, class P, class Small = Mainloop>
__device__ __forceinline__ void decode_items(const P& p) {
  decode_items<T, D, QR, Mainloop, kPacked, P, Small>(p, static_cast<int>(blockIdx.x));
}

}  // namespace weft::decode
