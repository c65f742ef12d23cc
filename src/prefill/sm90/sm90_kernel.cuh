// Hopper (sm_90a) prefill kernel: warp-specialized, TMA + mbarrier pipeline, wgmma.
//
// CTA = 3 warpgroups (384 threads), one CTA per SM, persistent over the plan's work items
// (cta_indptr, longest first as dealt by attention/plan/balance.h):
//   warpgroup 0  producer: its first warp issues the TMA loads (Q once per item; K and V tiles
//                into a kStages-deep shared-memory ring, full/empty mbarriers per stage and
//                operand; on paged 16-bit pools its second warp issues the V tiles, producer_v);
//                registers lowered to kProducerRegs with setmaxnreg.
//   warpgroups 1, 2  consumers: each owns 64 of the 128 query rows; per KV tile
//                S = Q K^T (wgmma m64n128k16, A and B from shared memory), mask / online softmax
//                in registers (the FA2 path's functions, same register layout), P packed to 16-bit
//                A fragments in registers, O += P V (wgmma m64n64k16 x 2 halves of head_dim, V
//                read MN-major through the descriptor's transpose bit); registers raised to
//                kConsumerRegs.
// Tile 128 x 128 for d64/d128 (FlashAttention-3's choice at d128): per consumer thread S is 64 fp32,
// O 64 fp32, P 32 b16x2 -- it fits 240 registers without spilling while each S GEMM is 8 wgmma
// k-steps of N = 128 (the wide N keeps the tensor core busy per issued instruction); 128 x 128 x
// 2 B = 32 KB per K or V stage, so Q (32 KB) + 3 stages of K and V (192 KB) fit under 227 KB.
// d256: tile 128 x 64 (sm90_launch.h, block_n): S 32 fp32 + O 128 fp32 + P 16 b16x2 per consumer
// thread; Q 64 KB + 2 stages of K and V (32 KB each) = 192 KB, so two stages only.
//
// KV tiles start at multiples of kBlockN keys of the request (the item's key range is rounded
// down), so a paged tile is a whole number of pages (page sizes dividing kBlockN, or multiples of
// it) and ragged tiles are single TMA boxes. Keys outside [kv_lo, kv_hi) are masked; the V rows of a
// partial last tile are zeroed in shared memory (TMA may have brought another request's rows, or
// a page's unused slots, and 0 * NaN would poison O).
//
// fp8 K/V pools (KV = __nv_fp8_e4m3 / e5m2, bf16 Q / O, d128, paged): the producer warp lands
// fp8 tiles in stages of their own and warps 1..3 of its warpgroup widen them into the 16-bit
// stages above (sm90_fp8.cuh); the consumers are unchanged but for the per-item K scale in the
// softmax exponent and the V scale in the output.
//
// Epilogue: the FA2 path's write_item (final O / LSE, or fp32 partial + base-2 LSE into the plan's
// slot for split items); after its items, the CTA merges the split tiles whose last slot it
// counted (sm90_merge.cuh), so no merge kernel follows.
#pragma once
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <type_traits>


#include "common/cuda_check.h"
#include "common/ptx.cuh"
#include "common/ptx_sm90.cuh"
#include "prefill/kernel/epilogue.cuh"
#include "prefill/kernel/load.cuh"
#include "prefill/kernel/mainloop.cuh"
#include "prefill/kernel/mask.cuh"
#include "prefill/kernel/params.h"
#include "prefill/sm90/sm90_launch.h"
#include "prefill/sm90/sm90_params.h"
#include "prefill/sm90/sm90_fp8.cuh"
#include "prefill/sm90/sm90_merge.cuh"
#include "prefill/sm90/sm90_pipeline.cuh"
#include "common/types.cuh"

namespace weft::prefill::sm90 {

// Where the kernel's items come from and where their rows go (the Rows policy, as the FA2
// mainloop's PlanRows in prefill_kernel.cuh). Sm90PlanRows: the prefill plan (cta_items,
// item_geometry, write_item, the in-kernel merge of split tiles), its tensor maps staged per CTA
// with the plan's row extents (stage_maps). The decode wrapper's wide packs pass their own
// (decode/wide_pack_sm90.cuh: a work plan's wide items whose Q rows are contiguous tokens, partial
// states in the work plan's slots, the kernel-parameter maps as they are).
//   kStageMaps           per-CTA copies of the maps with the plan's extents (sm90_launch.h)
//   kTriggerDependents   griddepcontrol.launch_dependents at the kernel's start (a programmatic
//                        dependent launch after it may start at once)
//   kGatherQ             at GQA groups >= 8, the Q tile as 128 / group boxes of one token each
//                        (q_token(p, g, j): the token of tile rows j * group ..), the map's box
//                        one token deep (Shapes::q_box_tokens); smaller groups: the one box of
//                        128 / group consecutive tokens from g.token_abs0
struct Sm90PlanRows {
  static constexpr bool kStageMaps = true;
  static constexpr bool kTriggerDependents = false;
  static constexpr bool kGatherQ = false;
  __device__ __forceinline__ CtaItems items(const PrefillParams& p) const { return cta_items(p); }
  __device__ __forceinline__ ItemGeom geometry(const PrefillParams& p, int w, int fold) const {
    return item_geometry(p, w, fold);
  }
  template <class Tr>
  __device__ __forceinline__ void write(const SoftmaxState<Tr>& st, const PrefillParams& p, const ItemGeom& g,
                                        int warp_row0, int lane, float vq) const {
    write_item<Tr>(st, p, g, warp_row0, lane, vq);
  }
  template <class T, int D>
  __device__ __forceinline__ void merge(const PrefillParams& p, const CtaItems& items, int tid_c) const {
    merge_split_items<T, D>(p, items, tid_c);
  }
};

// A partial tile's V (stage sw): wait for its copy on v_tma, zero the rows >= r0 (TMA may have
// brought another request's rows or a page's unused slots: 0 * NaN would poison O), fence the
// generic-proxy stores for the async proxy (wgmma) and arrive on v_full. One warp: the TMA warp,
// for ragged and paged tiles alike (on paged 16-bit pools the V warp issues the copy on v_tma).
// The loop is not unrolled: it runs once per item's last tile, and unrolled (and inlined in both
// producer warps, as e055435 had it) it cost the whole kernel's register allocation -- ptxas -v
// spill stores / loads, d256 56/60 -> 260/312 bytes, d128 16/16 -> 104/112, the extra spills
// mostly in the consumers' per-item code (d256 ragged 0.94-0.98x, perf notes).
template <class C>
__device__ __forceinline__ void zero_v_tail(const KernelParams& P, Bars<C> b, unsigned char* sv, int sw, int r0,
                                            uint32_t& vtma_phase, int lane) {
  ptx90::mbar_wait(b.v_tma(sw), (vtma_phase >> sw) & 1);
  vtma_phase ^= 1u << sw;
  const int n = (C::kBlockN - r0) * 8;  // 16-byte chunks per half
#pragma unroll 1
  for (int idx = lane; idx < n * C::kHalves; idx += 32) {
    const int h = idx / n, rem = idx - h * n, r = r0 + rem / 8;
    const int off = (r >> P.v_piece_shift) * P.v_piece_bytes + h * P.v_half_bytes + (r & (P.rows_per_copy - 1)) * 128;
    *reinterpret_cast<uint4*>(sv + off + (rem % 8) * 16) = make_uint4(0, 0, 0, 0);
  }
  ptx90::fence_proxy_async_shared();
  __syncwarp();
  if (lane == 0) ptx90::mbar_arrive(b.v_full(sw));
}

// Producer warp. Lane 0 issues ragged boxes; paged tiles are cut into min(page_size, kBlockN)-row
// pieces, lane i issuing piece i (its page id loaded by that lane): K one box per 64-column half
// (the K-major S operand needs each half's keys contiguous across pages), V one box for all halves
// (the V stage layout of KernelParams), issued by the V warp on 16-bit pools (producer_v). Why V
// in one box: the sm90 paged rows ran at the rate of
// ~2M boxes per ms over the GPU whatever the head dim (d128 32 and d256 64 boxes per 128 keys,
// H100 run of 5b2fcc8), and page-128 pools (4 boxes per tile) as fast as ragged; whole-page V
// boxes (page 16, d128: 24 instead of 32 boxes per stage) measured 1.08-1.09x on paged L8192 /
// L16384 and 1.16x on d256 paged L8192 (same-call A/B, H100 run of 2a5f27b, perf notes). Pieces
// entirely past kv_hi are not copied (their rows are masked). For a tile that ends past v_end (kv_hi;
// ragged: the request's end, see v_end below) the V copy (paged 16-bit: the V warp's) completes on
// v_tma; this warp then zeroes the V rows >= v_end - ts (TMA may have brought another request's
// rows or a page's unused slots: 0 * NaN would poison O), fences the generic-proxy stores for the
// async proxy (wgmma) and arrives on v_full.
// fp8 K/V pools (C::kF8Stages > 0, paged only): the same pieces land as ONE box of D bytes per
// key row (no swizzle: [kBlockN][D] bytes, the widening warps' input, sm90_fp8.cuh) in the fp8
// stages (k8_full / v8_full); no zeroing pass: every fp8 code widens to a finite value, so the
// masked keys' P = 0 keeps O exact whatever the rows past kv_hi hold.
// fp8 with C::kWidenWarps == 4 (WEFT_SM90_FP8_TMA_WIDENS): this warp is widening warp 0 as well,
// one tile behind its issues: after tile t's copies it widens tile t - 1 (widen_kv_tile), so the
// copy of tile t + 1, which waits for tile t - 1's fp8 stages to be released by all four warps,
// still goes out two tiles ahead of the consumers; before an item's Q wait it widens its last
// pending tile (the consumers release Q only after the previous item's last tile).
template <int D, class T, class KV, class C, class Rows>
__device__ __forceinline__ void producer(const KernelParams& P, const Rows& rows, unsigned char* smem, Bars<C> b,
                                         int lane) {
  const PrefillParams& p = P.p;
  const CUtensorMap* maps = nullptr;
  if constexpr (Rows::kStageMaps) maps = stage_maps<C>(P, smem, lane);
  const CUtensorMap* tm_q = Rows::kStageMaps ? maps + 0 : &P.tm_q;
  const CUtensorMap* tm_k = Rows::kStageMaps ? maps + 1 : &P.tm_k;
  const CUtensorMap* tm_v = Rows::kStageMaps ? maps + 2 : &P.tm_v;
  const int rows_per_copy = P.rows_per_copy;
  constexpr int kBlockN = C::kBlockN;
  const int copies = kBlockN / rows_per_copy;  // 1 for ragged
  const int gs = p.group_size;
  constexpr bool kF8 = C::kF8Stages > 0;
  constexpr int kRingK = kF8 ? C::kF8Stages : C::kStages;  // the stages TMA lands K / V in
  constexpr int kRingV = kF8 ? C::kF8Stages : C::kVStages;
  // kKvFirst: an item after the first issues its first tiles before it waits for its Q buffer
  // (q_at below says when); 16-bit pools.
  constexpr bool kKvFirst = kSm90KvFirst && !kF8;
  uint32_t tile_cnt = 0, item_cnt = 0;
  uint32_t vtma_phase = 0;  // bit s: parity of the next v_tma[s] phase
  constexpr bool kTmaWidens = kF8 && C::kWidenWarps == 4;
  uint32_t pending = 0;  // kTmaWidens: 1 + the tile this warp has yet to widen (0: none)
  const uint32_t sb = ptx90::smem_addr(smem);
  auto widen_pending = [&]() {
    if constexpr (kTmaWidens) {
      if (pending != 0) widen_kv_tile<D, T, KV, C>(sb, b, pending - 1, 0, lane);
      pending = 0;
    }
  };
  const CtaItems items = rows.items(p);
  for (int w = items.begin; w < items.end; ++w, ++item_cnt) {
    const ItemGeom g = rows.geometry(p, w, items.fold);
    // L2 prefetch of the item's Q boxes before the wait for the Q buffer, so its load after the
    // previous item's last S GEMM hits L2 (start latency: see start_prefetch; 16-bit pools: the
    // first item's was prefetched there).
    if (lane == 0 && (C::kF8Stages > 0 || item_cnt > 0)) {
#pragma unroll
      for (int h = 0; h < C::kHalves; ++h)
        ptx90::tma_prefetch_3d(tm_q, h * 64, g.kv_head * gs, g.token_abs0 + g.row_begin / gs);
    }
    widen_pending();
    // Q: 128 packed rows = 128 / group tokens x group heads, one box per 64-column half, into
    // Q buffer item_cnt % kQBufs.
    const int qb = item_cnt % C::kQBufs;
    const uint32_t qph = (item_cnt / C::kQBufs) & 1;
    bool q_issued = false;
    auto load_q = [&]() {
      ptx90::mbar_wait(b.q_empty(qb), qph ^ 1);
      if constexpr (Rows::kGatherQ) {
        // Rows of several requests (GQA group >= kQGatherMinGroup: the map's box is one token x
        // group heads, >= 1024 bytes per half, whole 128-byte-swizzle atoms): box j = tile
        // rows j * group .. + group - 1 from token rows.q_token(j), one box per lane and half.
        if (gs >= kQGatherMinGroup) {
          if (lane == 0) ptx90::mbar_arrive_expect_tx(b.q_full(qb), C::kQBytes);
          __syncwarp();
          for (int j = lane; j < kBlockM / gs; j += 32) {
            const int tok = rows.q_token(p, g, j);
#pragma unroll
            for (int h = 0; h < C::kHalves; ++h)
              ptx90::tma_load_3d(smem + qb * C::kQBytes + h * C::kQHalfBytes + j * gs * 128, tm_q, b.q_full(qb),
                                 h * 64, g.kv_head * gs, tok);
          }
          q_issued = true;
          return;
        }
      }
      if (lane == 0) {
        ptx90::mbar_arrive_expect_tx(b.q_full(qb), C::kQBytes);
        const int tok = g.token_abs0 + g.row_begin / gs;
#pragma unroll
        for (int h = 0; h < C::kHalves; ++h)
          ptx90::tma_load_3d(smem + qb * C::kQBytes + h * C::kQHalfBytes, tm_q, b.q_full(qb), h * 64,
                             g.kv_head * gs, tok);
      }
      q_issued = true;
    };
    // Whether the Q buffer is free now (lane 0's look, warp-uniform).
    auto q_free = [&]() { return __shfl_sync(0xffffffffu, ptx90::mbar_test(b.q_empty(qb), qph ^ 1) ? 1 : 0, 0) != 0; };
    if constexpr (!kKvFirst) load_q();
    const int n_tiles = tile_count<C::kBlockN>(g);
    const int ts0 = first_tile_key<C::kBlockN>(g);
    // kKvFirst: Q is loaded as soon as its buffer is free, and at the latest after tile q_at - 1:
    // the tiles before it reuse stages of earlier items only, which the consumers release
    // without this item's Q (no wait can deadlock).
    const int q_at = kKvFirst && item_cnt > 0 ? min(n_tiles, min(kRingK, kRingV)) : 0;
    if (kKvFirst && (q_at == 0 || q_free())) load_q();
    // First V row the producer zeroes in a tile: paged kv_hi; ragged the request's end (rows in
    // [kv_hi, real_kv_len) are the request's own keys, finite and masked like the rows before
    // kv_lo that a window's first tile already reads unzeroed; rows past the request's end are
    // another request's or TMA's zero fill). So every causal item but a request's last segment
    // needs no wait for its last V copy and no zeroing pass, and the producer keeps running ahead
    // across items. Measured with the P V k-step table below (same-call A/B, H100 run of 39a91bc,
    // perf notes "Where the tile time went"): causal ragged L1024-8192 1.05-1.17x, d64 1.10x.
    const int v_end = !p.paged ? g.real_kv_len : g.kv_hi;
    int page_next = 0;  // paged: this lane's page id of the next tile
    if (p.paged && n_tiles > 0 && lane < copies && ts0 + lane * rows_per_copy < g.kv_hi)
      page_next = __ldg(p.page_indices + g.kv_base + (ts0 + lane * rows_per_copy) / p.page_size);
    for (int t = 0; t < n_tiles; ++t, ++tile_cnt) {
      const int s = tile_cnt % kRingK, sw = tile_cnt % kRingV;  // K stage, V stage
      const uint32_t ph = (tile_cnt / kRingK) & 1, phv = (tile_cnt / kRingV) & 1;
      const int ts = ts0 + t * kBlockN;
      const bool partial = !kF8 && ts + kBlockN > v_end;
      unsigned char* sk = kF8 ? smem + C::kOffK8 + s * C::kKV8Bytes : smem + C::kOffK + s * C::kKVBytes;
      unsigned char* sv = kF8 ? smem + C::kOffV8 + sw * C::kKV8Bytes : smem + C::kOffV + sw * C::kKVBytes;
      uint64_t* k_bar = kF8 ? b.k8_full(s) : b.k_full(s);
      uint64_t* v_bar = kF8 ? b.v8_full(sw) : partial ? b.v_tma(sw) : b.v_full(sw);
      uint64_t* k_free = kF8 ? b.k8_empty(s) : b.k_empty(s);
      uint64_t* v_free = kF8 ? b.v8_empty(sw) : b.v_empty(sw);
      if (!kF8 && !p.paged) {
        ptx90::mbar_wait(b.k_empty(s), ph ^ 1);
        if (lane == 0) {
          ptx90::mbar_arrive_expect_tx(b.k_full(s), C::kKVBytes);
#pragma unroll
          for (int h = 0; h < C::kHalves; ++h)
            ptx90::tma_load_3d(sk + h * C::kKVHalfBytes, tm_k, b.k_full(s), h * 64, g.kv_head, g.kv_base + ts);
        }
        ptx90::mbar_wait(b.v_empty(sw), phv ^ 1);
        if (lane == 0) {
          ptx90::mbar_arrive_expect_tx(v_bar, C::kKVBytes);
#pragma unroll
          for (int h = 0; h < C::kHalves; ++h)
            ptx90::tma_load_3d(sv + h * C::kKVHalfBytes, tm_v, v_bar, h * 64, g.kv_head, g.kv_base + ts);
        }
      } else {
        const int j = ts + lane * rows_per_copy;
        const bool active = lane < copies && j < g.kv_hi;
        const int page = page_next, slot = active ? j % p.page_size : 0;
        // The next tile's page id, loaded now and used one tile later (latency off the path).
        const int jn = j + kBlockN;
        page_next = t + 1 < n_tiles && lane < copies && jn < g.kv_hi
                        ? __ldg(p.page_indices + g.kv_base + jn / p.page_size) : 0;
        const int n_active = __popc(__ballot_sync(0xffffffffu, active));
        const uint32_t bytes = static_cast<uint32_t>(n_active) * rows_per_copy * (kF8 ? D : 128 * C::kHalves);
        ptx90::mbar_wait(k_free, ph ^ 1);
        if (lane == 0) ptx90::mbar_arrive_expect_tx(k_bar, bytes);
        __syncwarp();
        if constexpr (kF8) {
          if (active) ptx90::tma_load_4d(sk + lane * rows_per_copy * D, tm_k, k_bar, 0, slot, g.kv_head, page);
        } else if (active) {
#pragma unroll
          for (int h = 0; h < C::kHalves; ++h)
            ptx90::tma_load_4d(sk + h * C::kKVHalfBytes + lane * rows_per_copy * 128, tm_k, b.k_full(s),
                               h * 64, slot, g.kv_head, page);
        }
        // 16-bit pools: V is the V warp's (producer_v); a partial tile's zeroing is this warp's
        // (zero_v_tail below, on the v_tma barrier the V warp's copy completes on).
        if constexpr (kF8) {
          ptx90::mbar_wait(v_free, phv ^ 1);
          if (lane == 0) ptx90::mbar_arrive_expect_tx(v_bar, bytes);
          __syncwarp();
          if (active) ptx90::tma_load_4d(sv + lane * rows_per_copy * D, tm_v, v_bar, 0, slot, g.kv_head, page);
        }
        if constexpr (kTmaWidens) {
          widen_pending();
          pending = tile_cnt + 1;
        }
      }
      if (!q_issued && (t + 1 == q_at || q_free())) load_q();
      if (partial) zero_v_tail<C>(P, b, sv, sw, max(v_end - ts, 0), vtma_phase, lane);
    }
  }
  widen_pending();
}

// V warp (warp 1 of the producer warpgroup; paged 16-bit pools): the V boxes of every tile, one
// 5D box per page piece for all halves (KernelParams: the V stage layout), page ids loaded one tile
// ahead; a partial last tile's copy completes on v_tma and the TMA warp zeroes its rows past kv_hi
// (zero_v_tail: one copy of that code in the kernel, see there). The TMA warp
// issues Q and K only, so the two streams of boxes (page 16, d128: 16 K and 8 V boxes per stage)
// go out of two warps on two SM sub-partitions; both walk the same items and tiles, so the stage
// rings and their phases match the consumers' (K: k_full / k_empty, V: v_full / v_empty / v_tma).
// The kernel-parameter V map is used as it is: stage_maps changes no paged K/V extent. Measured
// (same-call A/B against the single TMA warp, H100 run of e055435, perf notes "Paged: V boxes
// from a second producer warp"): causal paged16 L1024-16384 1.07-1.23x, chunked 1.05-1.15x,
// d256 paged 1.11x; d64 and page 128 within the spread; ragged code unchanged.
template <int D, class C, class Rows>
__device__ __forceinline__ void producer_v(const KernelParams& P, const Rows& rows, unsigned char* smem, Bars<C> b,
                                           int lane) {
  const PrefillParams& p = P.p;
  constexpr int kBlockN = C::kBlockN;
  const int rows_per_copy = P.rows_per_copy;
  const int copies = kBlockN / rows_per_copy;
  // The V stage and its phase, stepped per tile (no division by kVStages: the warp runs at
  // kProducerRegs registers).
  int sw = 0;
  uint32_t phv = 0;
  const CtaItems items = rows.items(p);
  for (int w = items.begin; w < items.end; ++w) {
    const ItemGeom g = rows.geometry(p, w, items.fold);
    const int n_tiles = tile_count<kBlockN>(g);
    const int ts0 = first_tile_key<kBlockN>(g);
    int page_next = 0;  // this lane's page id of the next tile
    if (n_tiles > 0 && lane < copies && ts0 + lane * rows_per_copy < g.kv_hi)
      page_next = __ldg(p.page_indices + g.kv_base + (ts0 + lane * rows_per_copy) / p.page_size);
    for (int t = 0; t < n_tiles; ++t, sw = sw + 1 == C::kVStages ? 0 : sw + 1, phv ^= sw == 0 ? 1u : 0u) {
      const int ts = ts0 + t * kBlockN;
      const bool partial = ts + kBlockN > g.kv_hi;
      unsigned char* sv = smem + C::kOffV + sw * C::kKVBytes;
      uint64_t* v_bar = partial ? b.v_tma(sw) : b.v_full(sw);
      const int j = ts + lane * rows_per_copy;
      const bool active = lane < copies && j < g.kv_hi;
      const int page = page_next, slot = active ? j % p.page_size : 0;
      const int jn = j + kBlockN;
      page_next = t + 1 < n_tiles && lane < copies && jn < g.kv_hi ? __ldg(p.page_indices + g.kv_base + jn / p.page_size)
                                                                    : 0;
      const int n_active = __popc(__ballot_sync(0xffffffffu, active));
      ptx90::mbar_wait(b.v_empty(sw), phv ^ 1);
      if (lane == 0)
        ptx90::mbar_arrive_expect_tx(v_bar, static_cast<uint32_t>(n_active) * rows_per_copy * 128 * C::kHalves);
      __syncwarp();
      if (active) ptx90::tma_load_5d(sv + lane * P.v_piece_bytes, &P.tm_v, v_bar, 0, slot, 0, g.kv_head, page);
    }
  }
}

// Start latency. Short causal prompts (L1024-4096) and chunked c512 ran at 0.6-0.86x FlashInfer's
// sm90 backend while long prompts reach ~0.9x: per-launch and per-item latency rather than
// mainloop rate (a plan without the merge launch timed 0.042 against 0.051 ms at L1024). Before
// its first TMA the TMA warp waited for two chains of dependent global loads in turn (the map
// staging's plan extents, then the first item's geometry), then for Q and K from HBM; every later
// item's Q came from HBM only after the previous item released the Q buffer. So: warp 1 of the
// producer warpgroup (idle for 16-bit pools; fp8 pools widen there), while the TMA warp stages the
// maps, loads the first item's geometry (the TMA warp's own loads of it then hit L1) and
// prefetches its Q boxes and, ragged, its first K/V tile into L2 through the kernel-parameter
// maps (boxes past the captured tensors' extents are skipped: a hint only); the TMA warp
// prefetches each later item's Q (producer). (The 2a5f27b change also let the merge grid launch
// at once; split tiles are merged in the kernel now, sm90_merge.cuh.) Same-call A/B (H100 run
// of 2a5f27b, perf notes): causal L1024 1.08x ragged, 1.08-1.12x paged, L2048 1.02-1.09x,
// chunked c512 h4096 / h8192 1.06-1.07x; long rows within the run's spread. (Handing every
// item's geometry to the consumers through a shared-memory ring filled by warp 1 was tried
// first: 260-430 bytes of consumer spills, not pursued.) One lane.
template <class C, class Rows>
__device__ __forceinline__ void start_prefetch(const KernelParams& P, const Rows& rows) {
  const PrefillParams& p = P.p;
  const CtaItems items = rows.items(p);
  if (items.begin >= items.end) return;
  const ItemGeom g = rows.geometry(p, items.begin, items.fold);
  const int gs = p.group_size;
#pragma unroll
  for (int h = 0; h < C::kHalves; ++h)
    ptx90::tma_prefetch_3d(&P.tm_q, h * 64, g.kv_head * gs, g.token_abs0 + g.row_begin / gs);
  if (!p.paged && g.kv_hi > g.kv_lo) {
    const int key = g.kv_base + first_tile_key<C::kBlockN>(g);
#pragma unroll
    for (int h = 0; h < C::kHalves; ++h) {
      ptx90::tma_prefetch_3d(&P.tm_k, h * 64, g.kv_head, key);
      ptx90::tma_prefetch_3d(&P.tm_v, h * 64, g.kv_head, key);
    }
  }
}

// Online softmax of one S tile in place (raw scores -> P = exp2(s * scale - m * scale)), the
// FA2 mainloop's arithmetic (lazy rescale, threshold kLazyRescaleLog2) WITHOUT the O update:
// returns the per-row O factors; `changed` (warp-uniform) says whether any is not 1. The O
// rescale is applied by the caller once the previous P V wgmma has completed.
template <class Tr>
__device__ __forceinline__ bool softmax_tile(float (&s)[1][Tr::kFragS][4], SoftmaxState<Tr>& st, float scale,
                                             float (&fac)[2]) {
  bool changed = false;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = -INFINITY;
#pragma unroll
    for (int n = 0; n < Tr::kFragS; ++n) mx = fmaxf(mx, fmaxf(s[0][n][2 * h], s[0][n][2 * h + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_old = st.m[0][h];
    const bool raise = (mx - m_old) * scale > kLazyRescaleLog2;  // NaN (both -inf) -> false
    const float m_new = raise ? mx : m_old;
    const float base = m_new == -INFINITY ? 0.f : m_new * scale;
    fac[h] = raise ? ptx::exp2_approx(fmaf(m_old, scale, -base)) : 1.f;
    changed |= raise;
    st.m[0][h] = m_new;
    float sum = 0.f;
#pragma unroll
    for (int n = 0; n < Tr::kFragS; ++n) {
      s[0][n][2 * h] = ptx::exp2_approx(fmaf(s[0][n][2 * h], scale, -base));
      s[0][n][2 * h + 1] = ptx::exp2_approx(fmaf(s[0][n][2 * h + 1], scale, -base));
      sum += s[0][n][2 * h] + s[0][n][2 * h + 1];
    }
    st.d[0][h] = st.d[0][h] * fac[h] + sum;
  }
  return __any_sync(0xffffffffu, changed);
}

// Named barriers: 0 = __syncthreads; kPingPongBar + c = "consumer warpgroup c may issue".
inline constexpr int kPingPongBar = 2;

// Consumer warpgroup cwg (0/1): rows 64 cwg .. 64 cwg + 63 of the tile.
// Software pipeline (kOverlap): S_t = Q K_t is issued together with O += P_{t-1} V_{t-1}; the
// softmax of S_t runs while that P V is in flight; O is rescaled after it completes.
// kPingPong: the two warpgroups take turns issuing their GEMMs (named barriers), so one
// warpgroup's softmax overlaps the other's tensor-core work.
template <int D, class T, class C, bool kOverlap, bool kPingPong, bool kPvWide, class Rows>
__device__ __forceinline__ void consumer(const KernelParams& P, const Rows& rows, unsigned char* smem, Bars<C> b,
                                         int cwg, int tid_wg) {
  using Tr = Shim<D, T>;
  constexpr int kBlockN = C::kBlockN;
  const PrefillParams& p = P.p;
  const int lane = tid_wg & 31;
  const int warp = tid_wg >> 5;                  // warp in the warpgroup
  const int warp_row0 = cwg * 64 + warp * 16;    // first tile row of this warp
  const uint32_t sbase = ptx90::smem_addr(smem);
  uint32_t sq = sbase + cwg * 64 * 128;          // this warpgroup's 64 rows of each Q half (per item: its buffer)
  // fp8 K/V pools: the raw scores are q . k8 and the wgmma sums p v8, so the item's KV-head scales
  // fold in per item: K's into the exponent scale (or the soft cap's argument, prepare_logits),
  // V's into the output (write_item).
  constexpr bool kF8 = C::kF8Stages > 0;

  auto my_turn = [&] {
    if constexpr (kPingPong) ptx90::named_bar_sync(kPingPongBar + cwg, 256);
  };
  auto their_turn = [&] {
    if constexpr (kPingPong) ptx90::named_bar_arrive(kPingPongBar + (cwg ^ 1), 256);
  };
  if constexpr (kPingPong) {
    if (cwg == 1) ptx90::named_bar_arrive(kPingPongBar + 0, 256);  // warpgroup 0 goes first
  }
  auto issue_qk = [&](float (&sacc)[1][Tr::kFragS][4], int s) {
    const uint32_t sk = sbase + C::kOffK + s * C::kKVBytes;
    // k-step offsets added to the descriptors' address field (16-byte units; addresses < 256 KB:
    // no carry out of it), not a descriptor encoded per k-step: fewer uniform instructions
    // between the wgmma issues (see mask_softmax).
    const uint64_t qd = ptx90::desc_sw128(sq, 16, 1024), kd = ptx90::desc_sw128(sk, 16, 1024);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t qoff = (kk >> 2) * C::kQHalfBytes + (kk & 3) * 32;
      const uint32_t koff = (kk >> 2) * C::kKVHalfBytes + (kk & 3) * 32;
      ptx90::Wgmma<kBlockN, T>::template ss<0>(&sacc[0][0][0], qd + (qoff >> 4), kd + (koff >> 4), kk > 0);
    }
    ptx90::wgmma_commit();
  };
  // V half h (64 columns of head_dim), keys 16 kk .. 16 kk + 15, MN-major, in the V stage layout
  // of KernelParams (pieces of [half][key][64]): start at the piece of key 16 kk, LBO =
  // v_half_bytes (between halves), SBO = v_sbo_bytes (next 8 keys); the k-step offset is added to
  // the descriptor's address field (addresses < 256 KB: no carry out of it). kPvWide: one
  // m64n128k16 per k-step, the two 64-column halves of V one LBO apart. fp8 pools: the widened
  // stage has the K layout (one piece of kBlockN keys per half, SBO 1024; for N = 64, one MN
  // block, LBO is not used as a stride).
  auto issue_pv = [&](SoftmaxState<Tr>& st, const uint32_t (&pa)[Tr::kKStepsPV][4], int s) {
    const uint32_t sv = sbase + C::kOffV + s * C::kKVBytes;
    if constexpr (kF8) {
      if constexpr (kPvWide && D == 128) {
#pragma unroll
        for (int kk = 0; kk < Tr::kKStepsPV; ++kk)
          ptx90::Wgmma<128, T>::template rs<1>(&st.o[0][0][0], pa[kk],
                                               ptx90::desc_sw128(sv + kk * 2048, C::kKVHalfBytes, 1024), 1);
      } else {
#pragma unroll
        for (int kk = 0; kk < Tr::kKStepsPV; ++kk)
#pragma unroll
          for (int h = 0; h < C::kHalves; ++h)
            ptx90::Wgmma<64, T>::template rs<1>(&st.o[0][8 * h][0], pa[kk],
                                                ptx90::desc_sw128(sv + h * C::kKVHalfBytes + kk * 2048, 1024, 1024), 1);
      }
    } else {
      const uint64_t d0 = ptx90::desc_sw128(sv, P.v_half_bytes, P.v_sbo_bytes);
      // Descriptor offset (16-byte units) of key 16 kk plus `bytes` (a half's offset): the host's
      // table (KernelParams::v_kstep), two uniform instructions per wgmma instead of ~6 deriving it
      // from the piece geometry (see mask_softmax on what uniform instructions cost here).
      auto koff = [&](int kk, uint32_t bytes) { return P.v_kstep[kk] + (bytes >> 4); };
      if constexpr (kPvWide && D == 128) {
#pragma unroll
        for (int kk = 0; kk < Tr::kKStepsPV; ++kk)
          ptx90::Wgmma<128, T>::template rs<1>(&st.o[0][0][0], pa[kk], d0 + koff(kk, 0), 1);
      } else {
#pragma unroll
        for (int kk = 0; kk < Tr::kKStepsPV; ++kk)
#pragma unroll
          for (int h = 0; h < C::kHalves; ++h)
            ptx90::Wgmma<64, T>::template rs<1>(&st.o[0][8 * h][0], pa[kk],
                                                d0 + koff(kk, h * P.v_half_bytes), 1);
      }
    }
    ptx90::wgmma_commit();
  };
  auto fence_s = [&](float (&sacc)[1][Tr::kFragS][4]) {
#pragma unroll
    for (int n = 0; n < Tr::kFragS; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) ptx90::fence_reg(sacc[0][n][e]);
  };
  auto fence_o = [&](SoftmaxState<Tr>& st) {
#pragma unroll
    for (int n = 0; n < Tr::kFragO; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) ptx90::fence_reg(st.o[0][n][e]);
  };
  auto release = [&](uint64_t* bar) {
    __syncwarp();
    if (lane == 0) ptx90::mbar_arrive(bar);
  };
  // Masks: a tile needs one only outside the item's unmasked keys um (unmasked_keys, once per
  // item: tile_needs_mask per tile cost ~60 uniform instructions, two integer divisions among
  // them, in every tile's path); boundary tiles without a custom mask take apply_mask_rows (two
  // limits per row; apply_mask's per-element predicate chain and custom-mask branch cost ~4x a
  // whole unmasked tile's softmax). With the wait below, same-call A/B against the per-tile form
  // (H100 run of ea93edd, perf notes "Where the tile time went"): causal ragged L1024-16384
  // 1.07-1.20x, non-causal L8192 1.06x (Nsight Compute: weft issued 1376 uniform-datapath warp
  // instructions per 128 x 128 tile against FlashInfer's 505; each consumer warp's wgmma issue
  // competes for its sub-partition's issue slot with the other warpgroup's softmax).
  auto mask_softmax = [&](float (&sacc)[1][Tr::kFragS][4], SoftmaxState<Tr>& st, const ItemGeom& g, int ts,
                          float (&fac)[2], float scale, const float* kq_ptr, const attn::KVRange& um) {
    prepare_logits<Tr>(sacc, p, kq_ptr);
    if (ts < um.begin || ts + kBlockN > um.end) {
      if (p.custom_mask == nullptr) apply_mask_rows<Tr>(sacc, p, g, warp_row0, ts, lane);
      else apply_mask<Tr>(sacc, p, g, warp_row0, ts, lane);
    }
    return softmax_tile<Tr>(sacc, st, scale, fac);
  };
  auto rescale_o = [&](SoftmaxState<Tr>& st, const float (&fac)[2]) {
#pragma unroll
    for (int n = 0; n < Tr::kFragO; ++n) {
      st.o[0][n][0] *= fac[0];
      st.o[0][n][1] *= fac[0];
      st.o[0][n][2] *= fac[1];
      st.o[0][n][3] *= fac[1];
    }
  };
  auto pack_p = [&](const float (&sacc)[1][Tr::kFragS][4], uint32_t (&pa)[Tr::kKStepsPV][4]) {
#pragma unroll
    for (int kk = 0; kk < Tr::kKStepsPV; ++kk) {
      pa[kk][0] = ptx::pack2<T>(sacc[0][2 * kk][0], sacc[0][2 * kk][1]);
      pa[kk][1] = ptx::pack2<T>(sacc[0][2 * kk][2], sacc[0][2 * kk][3]);
      pa[kk][2] = ptx::pack2<T>(sacc[0][2 * kk + 1][0], sacc[0][2 * kk + 1][1]);
      pa[kk][3] = ptx::pack2<T>(sacc[0][2 * kk + 1][2], sacc[0][2 * kk + 1][3]);
    }
  };

  uint32_t tile_cnt = 0, item_cnt = 0;
  const CtaItems items = rows.items(p);
  for (int w = items.begin; w < items.end; ++w, ++item_cnt) {
    const ItemGeom g = rows.geometry(p, w, items.fold);
    const int n_tiles = tile_count<C::kBlockN>(g);
    const int ts0 = first_tile_key<C::kBlockN>(g);
    const float* kq_ptr = kF8 ? p.k_scale + g.kv_head * p.k_scale_stride : nullptr;
    const attn::KVRange um = unmasked_keys(p, g);
    // Softmax exponent scale (see the FA2 mainloop): raw scores x sm_scale log2 e (x the K scale),
    // or 1 after soft-cap.
    const float scale = p.softcap_pre == 0.f ? p.scale_log2 * (kF8 ? __ldg(kq_ptr) : 1.f) : 1.f;
    SoftmaxState<Tr> st;
    init_state(st);
    const int qb = item_cnt % C::kQBufs;
    sq = sbase + qb * C::kQBytes + cwg * 64 * 128;
    ptx90::mbar_wait(b.q_full(qb), (item_cnt / C::kQBufs) & 1);
    if (n_tiles == 0) release(b.q_empty(qb));
    float sacc[1][Tr::kFragS][4];
    uint32_t pa[Tr::kKStepsPV][4];
    if constexpr (kOverlap) {
      if (n_tiles > 0) {
        // Prologue: S_0, softmax, P_0.
        {
          const int s = tile_cnt % C::kStages;
          const uint32_t ph = (tile_cnt / C::kStages) & 1;
          ptx90::mbar_wait(b.k_full(s), ph);
          my_turn();
          ptx90::wgmma_fence();
          issue_qk(sacc, s);
          their_turn();
          ptx90::wgmma_wait<0>();
          fence_s(sacc);
          release(b.k_empty(s));
          if (n_tiles == 1) release(b.q_empty(qb));
          float fac[2];
          mask_softmax(sacc, st, g, ts0, fac, scale, kq_ptr, um);  // O is zero: no rescale needed
          pack_p(sacc, pa);
        }
        for (int t = 1; t < n_tiles; ++t) {
          const uint32_t cur = tile_cnt + t, prev = cur - 1;
          const int s = cur % C::kStages, sp = prev % C::kVStages;
          ptx90::mbar_wait(b.k_full(s), (cur / C::kStages) & 1);
          ptx90::mbar_wait(b.v_full(sp), (prev / C::kVStages) & 1);
          my_turn();
          fence_o(st);
          ptx90::wgmma_fence();
          issue_qk(sacc, s);
          issue_pv(st, pa, sp);
          their_turn();
          ptx90::wgmma_wait<1>();  // S_t complete (P_{t-1} V_{t-1} may still run)
          fence_s(sacc);
          release(b.k_empty(s));
          if (t == n_tiles - 1) release(b.q_empty(qb));
          float fac[2];
          const bool changed = mask_softmax(sacc, st, g, ts0 + t * kBlockN, fac, scale, kq_ptr, um);
          // The wait for P_{t-1} V_{t-1} sits in the branches on the softmax's result: in one
          // block with the softmax, ptxas hoisted it to the block's top (SASS of 89392c5: the
          // WARPGROUP.DEPBAR of gsb 0 before the row max), so the softmax of S_t ran after that
          // P V instead of during it and the intra-warpgroup overlap was lost. Both arms wait.
          if (changed) {
            ptx90::wgmma_wait<0>();
            fence_o(st);
            release(b.v_empty(sp));
            rescale_o(st, fac);
          } else {
            ptx90::wgmma_wait<0>();
            fence_o(st);
            release(b.v_empty(sp));
          }
          pack_p(sacc, pa);
        }
        {
          const uint32_t last = tile_cnt + n_tiles - 1;
          const int sp = last % C::kVStages;
          ptx90::mbar_wait(b.v_full(sp), (last / C::kVStages) & 1);
          my_turn();
          fence_o(st);
          ptx90::wgmma_fence();
          issue_pv(st, pa, sp);
          their_turn();
          ptx90::wgmma_wait<0>();
          fence_o(st);
          release(b.v_empty(sp));
        }
        tile_cnt += n_tiles;
      }
    } else {
      for (int t = 0; t < n_tiles; ++t, ++tile_cnt) {
        const int s = tile_cnt % C::kStages;
        const uint32_t ph = (tile_cnt / C::kStages) & 1;
        ptx90::mbar_wait(b.k_full(s), ph);
        my_turn();
        ptx90::wgmma_fence();
        issue_qk(sacc, s);
        their_turn();
        ptx90::wgmma_wait<0>();
        fence_s(sacc);
        release(b.k_empty(s));
        if (t == n_tiles - 1) release(b.q_empty(qb));
        float fac[2];
        if (mask_softmax(sacc, st, g, ts0 + t * kBlockN, fac, scale, kq_ptr, um)) rescale_o(st, fac);
        pack_p(sacc, pa);
        const int sv = tile_cnt % C::kVStages;
        ptx90::mbar_wait(b.v_full(sv), (tile_cnt / C::kVStages) & 1);
        my_turn();
        fence_o(st);
        ptx90::wgmma_fence();
        issue_pv(st, pa, sv);
        their_turn();
        ptx90::wgmma_wait<0>();
        fence_o(st);
        release(b.v_empty(sv));
      }
    }

    finish_state(st, scale);
    reduce_row_sums(st);
    rows.template write<Tr>(st, p, g, warp_row0, lane, kF8 ? __ldg(p.v_scale + g.kv_head * p.v_scale_stride) : 1.f);
  }
  // Split tiles whose last slot this CTA counted: merged here (no merge kernel follows).
  rows.template merge<T, D>(p, items, cwg * 128 + tid_wg);
}

// kVariant bit 0: intra-warpgroup overlap; bit 1: ping-pong between the consumer warpgroups;
// bit 2: three K/V stages instead of two (d64/d128: a third d256 stage does not fit); bit 3: P V
// as one N = 128 wgmma per k-step (d128).
// KV: the K/V pools' element type, T or an fp8 type: then two 16-bit and two fp8 stages (the
// shared memory of Cfg), whatever bit 2 says.
// kSm90QDouble (16-bit pools): two Q buffers where they fit: d64 next to three K and V stages;
// d128 with two K and three V stages (Q 64 KB + K 64 KB + V 96 KB = 224 KB; the producer issues K
// then V per tile, so a third V stage keeps V as far ahead as before while K loses one stage);
// d256 (Q 64 KB) keeps one.
template <int D, class T, class KV, int kVariant>
using CfgOf = std::conditional_t<
    sizeof(KV) == 1, Cfg<D, T, 2, 2>,
    std::conditional_t<kSm90QDouble && D == 64, Cfg<D, T, (kVariant & 4) ? 3 : 2, 0, 2>,
                       std::conditional_t<kSm90QDouble && D == 128, Cfg<D, T, 2, 0, 2, (kVariant & 4) ? 3 : 2>,
                                          Cfg<D, T, (kVariant & 4) && D != 256 ? 3 : 2>>>>;

// Rows: Sm90PlanRows (the prefill plan) or the decode wrapper's wide packs (see Sm90PlanRows).
template <int D, class T, class KV, int kVariant, class Rows = Sm90PlanRows>
__global__ void __launch_bounds__(384, 1) prefill_sm90_kernel(const __grid_constant__ KernelParams P,
                                                              const __grid_constant__ Rows rows) {
#ifdef WEFT_SM90A_ENABLED
  if constexpr (Rows::kTriggerDependents) ptx::grid_launch_dependents();
  using C = CfgOf<D, T, KV, kVariant>;
  constexpr bool kF8 = C::kF8Stages > 0;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~static_cast<uintptr_t>(1023));
  Bars<C> b{reinterpret_cast<uint64_t*>(smem + C::kOffBar)};
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int i = 0; i < C::kQBufs; ++i) {
      ptx90::mbar_init(b.q_full(i), 1);                 // producer arrive + tx
      ptx90::mbar_init(b.q_empty(i), C::kConsumerWarps);
    }
    for (int s = 0; s < C::kMaxStages; ++s) {  // full: TMA (arrive + tx), or fp8: the widening warps
      ptx90::mbar_init(b.k_full(s), kF8 ? C::kWidenWarps : 1);
      ptx90::mbar_init(b.k_empty(s), C::kConsumerWarps);
      ptx90::mbar_init(b.v_full(s), kF8 ? C::kWidenWarps : 1);
      ptx90::mbar_init(b.v_empty(s), C::kConsumerWarps);
      ptx90::mbar_init(b.v_tma(s), 1);
    }
    for (int s = 0; s < C::kF8Stages; ++s) {
      ptx90::mbar_init(b.k8_full(s), 1);
      ptx90::mbar_init(b.k8_empty(s), C::kWidenWarps);
      ptx90::mbar_init(b.v8_full(s), 1);
      ptx90::mbar_init(b.v8_empty(s), C::kWidenWarps);
    }
    ptx90::fence_mbar_init();
  }
  __syncthreads();
  const int wg = tid / 128;
  if (wg == 0) {
    ptx90::setmaxnreg_dec<C::kProducerRegs>();
    if (tid < 32) producer<D, T, KV, C>(P, rows, smem, b, tid);
    else if constexpr (kF8) widen_warps<D, T, KV, C>(P, rows, smem, b, tid / 32 - (C::kWidenWarps == 4 ? 0 : 1), tid & 31);
    else if (tid < 64) {
      if (tid == 32) start_prefetch<C>(P, rows);
      if (P.p.paged) {
        __syncwarp();
        producer_v<D, C>(P, rows, smem, b, tid - 32);
      }
    }
  } else {
    ptx90::setmaxnreg_inc<C::kConsumerRegs>();
    consumer<D, T, C, (kVariant & 1) != 0, (kVariant & 2) != 0, (kVariant & 8) != 0>(P, rows, smem, b, wg - 1,
                                                                                     tid - (wg * 128));
  }
#else
  __trap();  // built without sm_90a code: never selected (occupancy_prefill_sm90 reports 0)
#endif
}

// ---- host side ----
// Pipeline variant (kVariant of prefill_sm90_kernel): 0 (plain: S, softmax, P V in turn), 3
// (overlap + ping-pong, two stages, P V as two N = 64 halves) or 15 (3 + three stages + one
// N = 128 P V per k-step), the shipped one. (Variants 1, 2, 7, 11 were measured and dropped: perf
// notes.) A build compiles ONE variant: 15, or the one an experiments build names with
// -DWEFT_SM90_PIPELINE=0|3 (scripts/diag/sm90-dev.sh builds one tree per variant for its A/B).
// The library reads no environment, and the shipped build carries no kernel it never launches.
#ifndef WEFT_SM90_PIPELINE_VARIANT
#define WEFT_SM90_PIPELINE_VARIANT 15
#endif
inline constexpr int kPipelineVariant = WEFT_SM90_PIPELINE_VARIANT;
static_assert(kPipelineVariant == 0 || kPipelineVariant == 3 || kPipelineVariant == 15,
              "WEFT_SM90_PIPELINE must be 0, 3 or 15");

template <int D, class T, class KV, int V>
void launch_variant(const KernelParams& kp, int num_ctas, cudaStream_t stream) {
  using C = CfgOf<D, T, KV, V>;
  prefill_sm90_kernel<D, T, KV, V><<<num_ctas, C::kThreads, C::kSmemBytes, stream>>>(kp, Sm90PlanRows{});
}

template <int D, class T, class KV>
void launch_prefill_sm90(const PrefillParams& p, const Shapes& s, int num_ctas, cudaStream_t stream) {
  KernelParams kp{};
  kp.p = p;
  make_tensor_maps(kp, s, detail::TypeOf<T>::value, detail::TypeOf<KV>::value, D);
  launch_variant<D, T, KV, kPipelineVariant>(kp, num_ctas, stream);
  WEFT_CUDA_CHECK_LAUNCH();
  note_launch();
}

template <int D, class T, class KV, int V>
int occupancy_variant() {
  const void* k = reinterpret_cast<const void*>(prefill_sm90_kernel<D, T, KV, V>);
  constexpr int kSmem = CfgOf<D, T, KV, V>::kSmemBytes;
  WEFT_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  cudaFuncAttributes attr{};
  WEFT_CUDA_CHECK(cudaFuncGetAttributes(&attr, k));
  if (attr.numRegs < 64) return 0;
  int b = 0;
  WEFT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, k, CfgOf<D, T, KV, V>::kThreads, kSmem));
  return b;
}

// Resident CTAs per SM: 1 by design (the persistent grid is one CTA per SM), 0 when the build has
// no sm_90a code (the trapping stub uses a handful of registers). Also opts the kernel in to its
// dynamic shared memory.
template <int D, class T, class KV>
int occupancy_prefill_sm90() {
  const int blocks = occupancy_variant<D, T, KV, kPipelineVariant>();
  return blocks < 1 ? blocks : 1;
}

}  // namespace weft::prefill::sm90
