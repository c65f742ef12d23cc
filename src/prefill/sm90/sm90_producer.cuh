// Hopper (sm_90a) prefill kernel, producer warpgroup (warpgroup 0 of prefill_sm90_kernel,
// sm90_kernel.cuh): the TMA warp (producer: Q per item, K and V tiles into the stage ring, the
// zeroing of a partial tile's V rows, zero_v_tail), the V warp of paged 16-bit pools (producer_v)
// and the first item's prefetch (start_prefetch). fp8 pools' widening warps: sm90_fp8.cuh.
#pragma once
#include <cuda.h>

#include "common/ptx_sm90.cuh"
#include "prefill/kernel/load.cuh"
#include "prefill/kernel/mask.cuh"
#include "prefill/kernel/params.h"
#include "prefill/sm90/sm90_fp8.cuh"
#include "prefill/sm90/sm90_launch.h"
#include "prefill/sm90/sm90_params.h"
#include "prefill/sm90/sm90_pipeline.cuh"

namespace weft::prefill::sm90 {

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

}  // namespace weft::prefill::sm90
