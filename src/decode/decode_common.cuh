// Internal: roles shared by the decode kernel.
//   load:     Q tile -> shared memory; per-warp paged K/V tiles -> swizzled shared memory with
//             16-byte cp.async, page ids looked up one tile ahead (kv_lookup / kv_issue)
//   epilogue: cross-warp combine of online-softmax states, final or partial store
#pragma once
#include <cuda/atomic>
#include <cuda/std/type_traits>
#include <cuda_fp8.h>

#include "common/rtc_compat.h"

#include "attention/merge_row.cuh"
#include "attention/variant.cuh"
#include "common/fp8_bits.h"
#include "common/fp8_widen.cuh"
#include "common/ptx.cuh"
#include "common/types.cuh"
#include "decode/decode_params.cuh"
#include "decode/decode_plan.h"
#include "decode/trace.cuh"

namespace weft::decode {

// Query rows: an item has QR rows (the kernel's template parameter: 16, or 32 for GQA groups
// above 16 at head_dim <= 128, decode_tile_rows in decode_plan.h). The epilogue combines the
// warps' states in rounds of kTileQ = 16 rows through a [W][16][D] fp32 buffer that aliases one
// pipeline stage (a 32-row item takes two rounds), so every layout below is sized by 16 rows
// except the Q buffers.
constexpr int kTileQ = 16;
constexpr int kMaxWarps = 8;   // warps per CTA are a launch argument (DecodeParams::warps)
constexpr int kWarpKeys = 16;  // keys per warp tile: one mma K step of P.V; the plan's granularity
static_assert(kTileQ == kPlanTileQ && 2 * kTileQ == kPlanTileQWide && kWarpKeys == kPlanKVTile,
              "planner and kernel tiles must agree");
constexpr int kMaxThreads = kMaxWarps * 32;
constexpr int kMaxStages = 8;

// Shared memory of one CTA for `stages` per-warp pipeline stages (runtime: the stage count is a
// launch argument, not a template parameter), in this order:
//   pipeline  [stage][warp] buffers of K+V for 16 keys (2 * 16 * D * 2 bytes: 4/8/16 KB for
//             D = 64/128/256). The epilogue's fp32 cross-warp O [warps][16][D] (= the same
//             256 * D bytes as one stage of all warps) reuses stage S-1, so the next item's
//             first S-1 tiles (stages 0 .. S-2) can be in flight during the epilogue.
//   m, l      [warps][16] fp32 each (epilogue)
//   Q         two [QR][D] buffers: the next item's Q loads while the current item runs.
//   flag      16 bytes: whether this CTA merges the tile it just finished (merge_tile_if_last).
//             In the dynamic layout, not a static __shared__ variable: the kernels' dynamic
//             limit is raised to the device's opt-in maximum, which leaves no static room.
template <class T, int D, int QR = kTileQ>
struct SmemLayout {
  static constexpr int kTileElems = kWarpKeys * D;                     // one K (or V) warp tile
  static constexpr size_t kStageBytes = 2 * kTileElems * sizeof(T);    // K + V of one warp
  static constexpr size_t kQBytes = QR * D * sizeof(T);
  // One stage of all W warps (W * 64 * D bytes) = the epilogue's fp32 O [W][16][D].
  static_assert(kTileQ * D * 4 == kStageBytes, "the epilogue's O must fit in one stage of all warps");
  __host__ __device__ static constexpr size_t stage_all_warps(int warps) { return warps * kStageBytes; }
  __host__ __device__ static constexpr size_t pipe_bytes(int stages, int warps) {
    return stages * stage_all_warps(warps);
  }
  __host__ __device__ static constexpr size_t red_ml_bytes(int warps) { return 2 * warps * kTileQ * 4; }
  __host__ __device__ static constexpr size_t flag_offset(int stages, int warps) {
    return pipe_bytes(stages, warps) + red_ml_bytes(warps) + 2 * kQBytes;
  }
  __host__ __device__ static constexpr size_t bytes(int stages, int warps) { return flag_offset(stages, warps) + 16; }
};

// Row-major [rows][D] tile of 16-bit elements with its 16-byte chunks XOR-swizzled by row % 8,
// so the 8 row addresses of one ldmatrix (same logical chunk) hit 8 distinct bank groups.
template <int D>
__device__ __forceinline__ int swz(int row, int chunk) {
  return row * D + ((chunk ^ (row & 7)) << 3);
}

// swz<D>(row0 + dr, chunk0 ^ dc) from off0 = swz<D>(row0, chunk0), for compile-time dr and dc,
// when row0 % 8 and dr % 8 share no bit and add without a carry (row0 % 8 < the lowest set bit
// of dr % 8: a lane's first row r0 < R and steps of R rows, R a power of two), and chunk0 < 8 when
// dc >= 8. Then (row0 + dr) % 8 = row0 % 8 ^ dr % 8, so the new offset is off0 with its chunk
// bits XORed by a constant plus a constant: one LOP3 per distinct (dr ^ dc) % 8 of a warp tile
// and immediate address offsets for the rest, where swz of per-copy rows and chunks recomputed
// the row, the XOR and the multiply-add for every copy and ldmatrix of every tile (~130 of the
// ~456 instructions of a d128 one-page tile; perf-notes-decode.md "Swizzle offsets ...").
template <int D>
__device__ __forceinline__ int swz_add(int off0, int dr, int dc) {
  return (off0 ^ (((dr ^ dc) & 7) << 3)) + dr * D + ((dc & ~7) << 3);
}

// cp.async.wait_group takes an immediate: dispatch a runtime count (stage count - 1). Counts 1
// and 2 are tested first (S = 2: heuristics::decode_default_stages and the POD partition's 8 x 2
// deep shape; S = 3: the 4 x 3 shapes), a uniform compare and branch each, where the switch
// compiled to an indexed constant load and a BRX jump table in every warp tile
// (perf-notes-decode.md "Warp-tile addresses once, the wait without a jump table").
__device__ __forceinline__ void cp_async_wait_dyn(int n) {
  if (n == 1) {
    ptx::cp_async_wait<1>();
    return;
  }
  if (n == 2) {
    ptx::cp_async_wait<2>();
    return;
  }
  switch (n) {
    case 0: ptx::cp_async_wait<0>(); break;
    case 1: ptx::cp_async_wait<1>(); break;
    case 2: ptx::cp_async_wait<2>(); break;
    case 3: ptx::cp_async_wait<3>(); break;
    case 4: ptx::cp_async_wait<4>(); break;
    case 5: ptx::cp_async_wait<5>(); break;
    default: ptx::cp_async_wait<6>(); break;
  }
}

struct Item {
  int req, kv_head, row_begin, nrows, kv_begin, kv_end, slot;
  int token0;  // qo_indptr[req]
  int merge;   // split items: the merge entry of the tile (slot >= 0); else -1
  // Generic items (work plan v2, kernels with kPacked; unused otherwise): the item's requests
  // start at work.req_list[req_list], its keys at kv_indices[page_base].
  int req_list, page_base;
};

// Item i of a work plan (attention/plan/work_plan.h): rows from one or several requests (a
// pack), keys from the page list at page_base. It has no merge entry: partial states are merged
// by the work plan's merge kernel (attn::launch_work_plan_merge).
__device__ __forceinline__ Item load_work_item(const plan::WorkPlanPointers& w, int i) {
  Item it;
  it.req = -1;
  it.req_list = w.item_req_begin[i];
  it.kv_head = w.item_kv_head[i];
  it.row_begin = w.item_row_begin[i];
  it.nrows = w.item_row_end[i] - it.row_begin;
  it.kv_begin = w.item_kv_begin[i];
  it.kv_end = w.item_kv_end[i];
  it.slot = w.item_slot[i];
  it.token0 = 0;
  it.merge = -1;
  it.page_base = w.item_page_base[i];
  return it;
}

// Head-folded plans (plan::Plan::head_fold): launched CTA c runs the items of the plan CTA its
// CtaRecord (one per launched CTA, in plan::fold_launch_order) names, for the sub-head j of the
// record's fold word (plan::fold_word; 0 without folding: every mapping below is then the
// identity). An item's KV head is
// item_kv_head * head_fold + j, its partial slot j * S + s (S = PlanPointers::slot_stride, so one
// merge's slots stay consecutive), its merge counter m * head_fold + j.
using plan::fold_count;
using plan::fold_expand;
using plan::fold_slot;

// A split item's tile (attn::MergeRange: first partial slot expanded for the CTA's sub-head,
// slot count, distance between slots). Loaded when the item's KV loop ends, so the loads overlap
// the epilogue (not held in registers through the KV loop, where the CUDA-core kernel is at its
// register peak).
using attn::MergeRange;
__device__ __forceinline__ MergeRange load_merge_range(const plan::PlanPointers& p, const Item& it, int fold) {
  return attn::load_merge_range(p, it.merge, fold);
}

// Item i from the plan's arrays (the qo_indptr load depends on the request: two load rounds),
// expanded for the CTA's sub-head (fold). Used for a CTA's later items, which are requested one
// item ahead. it.merge stays the plan's merge index (merge_indptr); its counter is expanded.
__device__ __forceinline__ Item load_item(const plan::PlanPointers& p, int i, int fold) {
  Item it;
  it.req = p.item_request[i];
  it.kv_head = fold_expand(p.item_kv_head[i], fold);
  it.row_begin = p.item_row_begin[i];
  it.nrows = p.item_row_end[i] - it.row_begin;
  it.kv_begin = p.item_kv_begin[i];
  it.kv_end = p.item_kv_end[i];
  const int slot = p.item_partial_slot[i];
  it.slot = slot < 0 ? -1 : fold_slot(slot, fold, p.slot_stride);
  it.token0 = p.qo_indptr[it.req];
  it.merge = p.item_merge[i];
  return it;
}

// Launched CTA c's item range and first item from its CtaRecord (decode layouts: one per launched
// CTA, PlanBounds::launch_records), expanded for its sub-head (*fold receives the record's fold
// word): three independent 16-byte loads, one load round, where cta_indptr -> item arrays ->
// qo_indptr took three dependent rounds at the start of every CTA (each a DRAM round trip after
// the plan's lines left L2).
__device__ __forceinline__ Item load_first_item(const plan::PlanPointers& p, int c, int* i0, int* i1, int* fold) {
  const int4* rec = reinterpret_cast<const int4*>(p.cta_first + c);
  const int4 a = __ldg(rec), b = __ldg(rec + 1), d = __ldg(rec + 2);
  const int word = d.w;
  *i0 = a.x;
  *i1 = a.y;
  *fold = word;
  Item it;
  it.req = a.z;
  it.kv_head = fold_expand(a.w, word);
  it.row_begin = b.x;
  it.nrows = b.y - b.x;
  it.kv_begin = b.z;
  it.kv_end = b.w;
  it.slot = d.x < 0 ? -1 : fold_slot(d.x, word, p.slot_stride);
  it.token0 = d.y;
  it.merge = d.z;
  return it;
}

// Where row ra of an item's (request, kv head) lives: row ra is token token0 + ra / g, query head
// kv_head * g + ra % g (g = the GQA group). Used for Q, the output and the LSE.
struct RowPos {
  int64_t token, head;
};
// kPacked (generic items): row ra belongs to request work.req_list[req_list + ra / g], whose one
// query token (decode) is token `request`.
template <bool kPacked = false, class P>
__device__ __forceinline__ RowPos row_pos(const P& p, const Item& it, int ra) {
  if constexpr (kPacked) {
    const int req = __ldg(p.work.req_list + it.req_list + ra / p.group_size);
    return {req, int64_t(it.kv_head) * p.group_size + ra % p.group_size};
  }
  return {it.token0 + ra / p.group_size, int64_t(it.kv_head) * p.group_size + ra % p.group_size};
}

// Q rows of the item -> sQ ([QR][D]; rows >= nrows zero-filled).
template <class T, int D, int QR, bool kPacked = false, class P>
__device__ __forceinline__ void load_q(const P& p, const Item& it, T* sQ) {
  constexpr int kChunks = D / 8;
  for (int idx = threadIdx.x; idx < QR * kChunks; idx += blockDim.x) {
    const int r = idx / kChunks, c = idx % kChunks;
    const int ra = it.row_begin + r;
    const bool valid = r < it.nrows;
    const T* src = p.q;
    if (valid) {
      const RowPos rp = row_pos<kPacked>(p, it, ra);
      src = p.q + rp.token * p.q_stride_token + rp.head * p.q_stride_head + c * 8;
    }
    ptx::cp_async_16(sQ + swz<D>(r, c), src, valid ? 16 : 0);
  }
}

// Page lookup for the warp tile of keys [k0, k0 + 16), issued one tile before its copies so
// the dependent global load (page id) is off the copy path. Lane l handles key k0 + l % 16:
// lanes 0-15 return the element offset of the key's K row, lanes 16-31 of its V row (pools
// may have different strides); -1 for keys >= kv_end (zero-filled, masked later).
// `pages` = indices + indptr[request]; page_shift >= 0 when page_size is a power of two.
template <class P>
__device__ __forceinline__ int32_t kv_lookup_page(const P& p, const int32_t* pages, int k0,
                                                  int kv_end, int lane) {
  const int j = k0 + (lane & 15);
  if (j >= kv_end) return -1;
  const uint32_t q = p.page_shift >= 0 ? uint32_t(j) >> p.page_shift : uint32_t(j) / uint32_t(p.kv.table.page_size);
  return __ldg(pages + q);
}
template <class P>
__device__ __forceinline__ int64_t kv_row_offset(const P& p, int32_t page, int k0, int kv_head,
                                                 int lane) {
  if (page < 0) return -1;
  const int j = k0 + (lane & 15);
  const int ps = p.kv.table.page_size;
  const int slot = p.page_shift >= 0 ? (j & (ps - 1)) : j - int(uint32_t(j) / uint32_t(ps)) * ps;
  const bool v = lane >= 16;
  const int64_t page_stride = v ? p.kv.v.page_stride : p.kv.k.page_stride;
  const int64_t slot_stride = v ? p.kv.v.slot_stride : p.kv.k.slot_stride;
  const int64_t head_stride = v ? p.kv.v.head_stride : p.kv.k.head_stride;
  return int64_t(page) * page_stride + int64_t(slot) * slot_stride + int64_t(kv_head) * head_stride;
}

// Page-contiguous warp tiles: when the page size is a power of two >= 16 and the item's keys
// start on a 16-key boundary (every balanced-plan chunk does: chunk lengths are multiples of
// the 16-key tile), each warp tile [k0, k0 + 16) lies in ONE page at consecutive slots. Its page
// id is then one broadcast load (kv_lookup_page with lane 0 on every lane) and kv_issue_page
// walks the rows with a fixed pointer step, instead of per-lane page/slot/stride math, 32
// offset shuffles and per-copy selects (kv_row_offset + kv_issue: ~425 of the 692 warp
// instructions of a d128 bf16 tile, perf-notes-decode.md "What holds a decode warp on few SMs").
// Uniform per item; the same bytes land in the same shared-memory places (rows >= kv_end are
// zero-filled through src-size 0, their addresses stay inside the tile's page).
// kv_issue_page's 32-bit row steps: slot strides (elements) below 2^27, i.e. below 2^28 bytes
// (16-bit) and 2^32 bytes for 16 rows; any pool layout of real head dims has far smaller ones
// (NHD: heads x D, HND: D), the generic path takes the others.
template <class P, class I>
__device__ __forceinline__ bool kv_one_page(const P& p, const I& it) {
  constexpr uint64_t kMaxSlotStride = uint64_t(1) << 27;
  return p.page_shift >= 4 && (it.kv_begin & (kWarpKeys - 1)) == 0 &&
         uint64_t(p.kv.k.slot_stride) < kMaxSlotStride && uint64_t(p.kv.v.slot_stride) < kMaxSlotStride;
}
// The lane kv_lookup_page uses for lane `lane` of an item: 0 on one-page items (k0's page).
__device__ __forceinline__ int kv_lookup_lane(bool one_page, int lane) { return one_page ? 0 : lane; }

// Copies of the warp tile (16 keys) into sK / sV ([16][D], swizzled) from the per-lane offsets
// of kv_row_offset: row r's K offset is on lane r, its V offset on lane 16 + r.
// L2 policy: the KV stream is read once per run, so its lines are marked evict_first. The
// plan, the page table and the split partials, which every layer of a step reads again, then
// keep their L2 lines from one run to the next. Same-call A/B against the parent tree on H200
// (experiment 20, perf-notes-decode.md): one-run rows (after an L2 flush) within -1.0 .. +0.7%,
// 8 runs back to back in one graph 3.4% (llama3 b1/kv32K) and 1.3% (b32/kv4K) faster. An
// explicit evict_normal policy made most rows 6-13% slower, and the 256-byte prefetch-size
// hint 3-8% slower; neither is used.
// fp8 tiles: [16][D] bytes in the UPPER half of a warp's sK / sV buffer (fp8_tile), 16-byte
// chunks XOR-swizzled by row % 8 as the 16-bit tiles (fp8_swz: D = 128 has 8 chunks per row, so
// the 8 rows of one ldmatrix hit 8 distinct bank groups).
template <int D, class T>
__device__ __forceinline__ const unsigned char* fp8_tile(const T* s) {
  static_assert(sizeof(T) == 2, "the 16-bit tile's upper half");
  return reinterpret_cast<const unsigned char*>(s) + kWarpKeys * D;
}
template <int D>
__device__ __forceinline__ int fp8_swz(int row, int chunk) {
  constexpr int kChunks = D / 16;
  return row * D + ((chunk ^ (row & (kChunks < 8 ? kChunks - 1 : 7))) << 4);
}
// fp8_swz<D>(row0 + dr, chunk0 ^ dc) from off0 = fp8_swz<D>(row0, chunk0): swz_add's rule with
// fp8_swz's row mask M (7, or kChunks - 1 below 8 chunks) and 16-byte chunks of bytes.
template <int D>
__device__ __forceinline__ int fp8_swz_add(int off0, int dr, int dc) {
  constexpr int kChunks = D / 16, M = kChunks < 8 ? kChunks - 1 : 7;
  return (off0 ^ (((dr ^ dc) & M) << 4)) + dr * D + ((dc & ~M) << 4);
}

// fp8 pools (P::kQuantizedKV): a row is D bytes (D / 16 chunks); the tile lands in fp8_tile's
// layout, and either the mainloop reads it as fp8 (the tensor-core path) or dequant_tile widens
// it in place to the swizzled 16-bit tile (the CUDA-core path).
template <class T, int D, class P>
__device__ __forceinline__ void kv_issue(const P& p, int64_t off, int lane, T* sK, T* sV) {
  using KV = typename P::KVElem;
  constexpr int kElemsPerChunk = 16 / sizeof(KV);
  constexpr int kChunks = D / kElemsPerChunk;     // 16-byte chunks per row
  constexpr int kRowsPerInstr = 32 / kChunks;     // rows one warp-wide copy covers (4/2/1; fp8: 8/4/2)
  const int c = lane % kChunks, r0 = lane / kChunks;
  const uint64_t pol = ptx::l2_policy_evict_first();
  const int d0 = P::kQuantizedKV ? fp8_swz<D>(r0, c) : swz<D>(r0, c);  // row r0's chunk c (swz_add)
#pragma unroll
  for (int i = 0; i < kWarpKeys / kRowsPerInstr; ++i) {
    const int r = i * kRowsPerInstr + r0;
    const int64_t ko = __shfl_sync(0xffffffffu, off, r);
    const int64_t vo = __shfl_sync(0xffffffffu, off, 16 + r);
    const bool valid = ko >= 0;
    const KV* ks = valid ? p.kv.k.data + ko + c * kElemsPerChunk : p.kv.k.data;
    const KV* vs = valid ? p.kv.v.data + vo + c * kElemsPerChunk : p.kv.v.data;
    if constexpr (P::kQuantizedKV) {
      const int d = fp8_swz_add<D>(d0, i * kRowsPerInstr, 0);
      ptx::cp_async_16_policy(const_cast<unsigned char*>(fp8_tile<D>(sK)) + d, ks, valid ? 16 : 0, pol);
      ptx::cp_async_16_policy(const_cast<unsigned char*>(fp8_tile<D>(sV)) + d, vs, valid ? 16 : 0, pol);
    } else {
      const int d = swz_add<D>(d0, i * kRowsPerInstr, 0);
      ptx::cp_async_16_policy(sK + d, ks, valid ? 16 : 0, pol);
      ptx::cp_async_16_policy(sV + d, vs, valid ? 16 : 0, pol);
    }
  }
}

// c + a * b with a 32 x 32 -> 64-bit product (one IMAD.WIDE.U32): kv_issue_page's address steps.
__device__ __forceinline__ const char* mad_wide(uint32_t a, uint32_t b, const char* c) {
  uint64_t r;
  asm("mad.wide.u32 %0, %1, %2, %3;" : "=l"(r) : "r"(a), "r"(b), "l"(reinterpret_cast<uint64_t>(c)));
  return reinterpret_cast<const char*>(r);
}

// kv_issue for a one-page tile (kv_one_page): keys [k0, k0 + 16) at slots k0 % page_size + r of
// page `page`; lane l copies chunk l % kChunks of rows l / kChunks + i * kRowsPerInstr, rows
// >= kv_end - k0 zero-filled. Same destinations and bytes as kv_issue. Addresses, cheapest first:
//   source: the lane's head / row / chunk part per item (kv_head and lane are fixed through the
//           KV loop, so it is computed before the loop), then per tile + page * page stride and
//           one 32 x 32 -> 64-bit multiply-add for the slot, and per copy a 64-bit add of a
//           32-bit row step (slot strides below 2^27 elements: kv_one_page), instead of 64-bit
//           products of every term in every tile;
//   destination: the lane's first row's offset, then per copy a constant XOR and offset
//           (swz_add / fp8_swz_add) instead of swz of every copy's row and chunk.
template <class T, int D, class P>
__device__ __forceinline__ void kv_issue_page(const P& p, int32_t page, int k0, int kv_end, int kv_head,
                                              int lane, T* sK, T* sV) {
  using KV = typename P::KVElem;
  constexpr int kElemsPerChunk = 16 / sizeof(KV);
  constexpr int kChunks = D / kElemsPerChunk;
  constexpr int kRowsPerInstr = 32 / kChunks;
  const int c = lane % kChunks, r0 = lane / kChunks;
  const char* kh = reinterpret_cast<const char*>(
      p.kv.k.data + (int64_t(kv_head) * p.kv.k.head_stride + int64_t(r0) * p.kv.k.slot_stride + c * kElemsPerChunk));
  const char* vh = reinterpret_cast<const char*>(
      p.kv.v.data + (int64_t(kv_head) * p.kv.v.head_stride + int64_t(r0) * p.kv.v.slot_stride + c * kElemsPerChunk));
  const uint32_t kslot = uint32_t(p.kv.k.slot_stride) * uint32_t(sizeof(KV));  // bytes (< 2^28)
  const uint32_t vslot = uint32_t(p.kv.v.slot_stride) * uint32_t(sizeof(KV));
  const uint32_t slot0 = uint32_t(k0) & uint32_t(p.kv.table.page_size - 1);
  const uint64_t kpage = uint64_t(p.kv.k.page_stride) * sizeof(KV), vpage = uint64_t(p.kv.v.page_stride) * sizeof(KV);
  const char* ks = mad_wide(slot0, kslot, kh + uint64_t(uint32_t(page)) * kpage);  // page >= 0: issued
  const char* vs = mad_wide(slot0, vslot, vh + uint64_t(uint32_t(page)) * vpage);
  const uint32_t kstep = uint32_t(kRowsPerInstr) * kslot, vstep = uint32_t(kRowsPerInstr) * vslot;
  const int nvalid = kv_end - k0;  // >= 1: the tile was issued
  const uint64_t pol = ptx::l2_policy_evict_first();
  const int d0 = P::kQuantizedKV ? fp8_swz<D>(r0, c) : swz<D>(r0, c);  // row r0's chunk c
#pragma unroll
  for (int i = 0; i < kWarpKeys / kRowsPerInstr; ++i) {
    const int r = i * kRowsPerInstr + r0;
    const int bytes = r < nvalid ? 16 : 0;
    const char* ksi = ks + uint64_t(kstep) * uint32_t(i);  // compiled as a 64-bit add chain of
    const char* vsi = vs + uint64_t(vstep) * uint32_t(i);  // the 32-bit step: 2 instructions each
    if constexpr (P::kQuantizedKV) {
      const int d = fp8_swz_add<D>(d0, i * kRowsPerInstr, 0);
      ptx::cp_async_16_policy(const_cast<unsigned char*>(fp8_tile<D>(sK)) + d, ksi, bytes, pol);
      ptx::cp_async_16_policy(const_cast<unsigned char*>(fp8_tile<D>(sV)) + d, vsi, bytes, pol);
    } else {
      const int d = swz_add<D>(d0, i * kRowsPerInstr, 0);
      ptx::cp_async_16_policy(sK + d, ksi, bytes, pol);
      ptx::cp_async_16_policy(sV + d, vsi, bytes, pol);
    }
  }
}

// fp8 codes -> 16-bit values in registers: common/fp8_widen.cuh (shared with the prefill kernel).
using fp8bits::widen16;
using fp8bits::widen_fp8_pair;

// One warp widens its landed fp8 K and V tiles (kv_issue's upper halves) into the swizzled
// [16][D] 16-bit tiles of the same buffers. Every lane reads its D / 32 16-byte chunks of each
// (512 contiguous bytes per warp-wide load: conflict-free) before any lane writes (the writes
// cover the bytes being read), then writes each chunk as two 16-bit chunks 2c, 2c + 1 of its row,
// in the order that puts the 8 lanes of a store phase on 8 distinct bank groups (c >= 4 first
// writes 2c + 1). Rows past kv_end were zero-filled: they widen to zeros.
template <class T, class KV, int D>
__device__ __forceinline__ void dequant_tile(T* sK, T* sV, int lane) {
  constexpr int kChunks8 = D / 16;                  // 16-byte fp8 chunks per row
  constexpr int kPerLane = kWarpKeys * kChunks8 / 32;  // 2 / 4 / 8 for D = 64 / 128 / 256
  uint4 k8[kPerLane], v8[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {  // chunk c of row r; a warp-wide load covers whole rows
    const int idx = lane + 32 * i, r = idx / kChunks8, c = idx % kChunks8;
    k8[i] = *reinterpret_cast<const uint4*>(fp8_tile<D>(sK) + fp8_swz<D>(r, c));
    v8[i] = *reinterpret_cast<const uint4*>(fp8_tile<D>(sV) + fp8_swz<D>(r, c));
  }
  __syncwarp();
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int idx = lane + 32 * i;
    const int r = idx / kChunks8, c = idx % kChunks8;
    const int flip = (c >> 2) & 1;
    uint4 lo, hi;
    widen16<T, KV>(k8[i], lo, hi);
    *reinterpret_cast<uint4*>(sK + swz<D>(r, 2 * c + flip)) = flip ? hi : lo;
    *reinterpret_cast<uint4*>(sK + swz<D>(r, 2 * c + 1 - flip)) = flip ? lo : hi;
    widen16<T, KV>(v8[i], lo, hi);
    *reinterpret_cast<uint4*>(sV + swz<D>(r, 2 * c + flip)) = flip ? hi : lo;
    *reinterpret_cast<uint4*>(sV + swz<D>(r, 2 * c + 1 - flip)) = flip ? lo : hi;
  }
}

// Combine the W (= blockDim.x / 32) per-warp states (unnormalised O, running max m in log2 units, sum l) in
// warp order (deterministic) and store the item's rows round * 16 + r (r < 16, row < nrows) held
// in red_* at r: final output (+ natural-log LSE) when it.slot < 0, else the fp32 partial state
// (O normalised, base-2 LSE) of slot it.slot, whose rows are QR apart.
template <class T, int D, int QR, bool kPacked = false, class P>
__device__ __forceinline__ void combine_and_store(const P& p, const Item& it,
                                                  const float* red_o, const float* red_m,
                                                  const float* red_l, int round) {
  constexpr int kGroups = D / 8;  // 8 outputs per thread step: one 16-byte store of T
  const int W = blockDim.x / 32;
  const int rows = min(kTileQ, it.nrows - round * kTileQ);
  for (int idx = threadIdx.x; idx < rows * kGroups; idx += blockDim.x) {
    const int r = idx / kGroups, c8 = idx % kGroups;
    const int ri = round * kTileQ + r;  // row of the item
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < W; ++w) mx = fmaxf(mx, red_m[w * kTileQ + r]);
    float o[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) o[e] = 0.f;
    float lse2 = -INFINITY;
    if (mx != -INFINITY) {
      float sum = 0.f;
#pragma unroll
      for (int w = 0; w < W; ++w) {
        const float sc = ptx::exp2_approx(red_m[w * kTileQ + r] - mx);
        sum += red_l[w * kTileQ + r] * sc;
        const float4* src = reinterpret_cast<const float4*>(red_o + (w * kTileQ + r) * D + c8 * 8);
        const float4 a = src[0], b = src[1];
        o[0] += a.x * sc; o[1] += a.y * sc; o[2] += a.z * sc; o[3] += a.w * sc;
        o[4] += b.x * sc; o[5] += b.y * sc; o[6] += b.z * sc; o[7] += b.w * sc;
      }
      // fp8 pools: O = v_scale * sum p v8 / sum p (the V scale folded into the normalisation).
      float inv = 1.f / sum;
      if constexpr (P::kQuantizedKV) inv *= __ldg(p.v_scale + it.kv_head * p.v_scale_stride);
#pragma unroll
      for (int e = 0; e < 8; ++e) o[e] *= inv;
      lse2 = mx + log2f(sum);
    }
    const int ra = it.row_begin + ri;
    if (it.slot < 0) {
      const RowPos rp = row_pos<kPacked>(p, it, ra);
      union { T h[8]; uint4 u; } pk;
#pragma unroll
      for (int e = 0; e < 8; ++e) pk.h[e] = detail::from_float<T>(o[e]);
      *reinterpret_cast<uint4*>(p.o + rp.token * p.o_stride_token + rp.head * p.o_stride_head + c8 * 8) = pk.u;
      if (p.lse != nullptr && c8 == 0)
        p.lse[rp.token * p.lse_stride_token + rp.head] = lse2 * 0.69314718055994531f;  // log2 -> ln
    } else {
      float* const po = kPacked ? p.work.partial_o : p.plan.partial_o;
      float* const plse = kPacked ? p.work.partial_lse : p.plan.partial_lse;
      float* dst = po + (int64_t(it.slot) * QR + ri) * D + c8 * 8;
      reinterpret_cast<float4*>(dst)[0] = make_float4(o[0], o[1], o[2], o[3]);
      reinterpret_cast<float4*>(dst)[1] = make_float4(o[4], o[5], o[6], o[7]);
      if (c8 == 0) plse[it.slot * QR + ri] = lse2;
    }
  }
}

// The neutral state of an item without keys: final rows O = 0, LSE = -inf (natural log); a
// partial slot O = 0, base-2 LSE = -inf (the merge gives such a source weight 0).
template <class T, int D, int QR, bool kPacked = false, class P>
__device__ __forceinline__ void store_neutral(const P& p, const Item& it) {
  constexpr int kGroups = D / 8;
  for (int idx = threadIdx.x; idx < it.nrows * kGroups; idx += blockDim.x) {
    const int r = idx / kGroups, c8 = idx % kGroups;
    if (it.slot < 0) {
      const RowPos rp = row_pos<kPacked>(p, it, it.row_begin + r);
      *reinterpret_cast<uint4*>(p.o + rp.token * p.o_stride_token + rp.head * p.o_stride_head + c8 * 8) =
          make_uint4(0u, 0u, 0u, 0u);  // +0 in f16 and bf16
      if (p.lse != nullptr && c8 == 0) p.lse[rp.token * p.lse_stride_token + rp.head] = -INFINITY;
    } else {
      float* const po = kPacked ? p.work.partial_o : p.plan.partial_o;
      float* const plse = kPacked ? p.work.partial_lse : p.plan.partial_lse;
      float4* dst = reinterpret_cast<float4*>(po + (int64_t(it.slot) * QR + r) * D + c8 * 8);
      dst[0] = dst[1] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (c8 == 0) plse[it.slot * QR + r] = -INFINITY;
    }
  }
}

// Where an item's query rows sit, for a variant whose logit depends on positions and heads
// (V::kHasBias, attention/variant.cuh): row r of the item is query head head0 + r at position
// q_pos = kv_len - 1 (decode: one token per request, so rows < the GQA group). The logits
// themselves come from the variant (V::logit); masks need no per-element work in decode: for a
// single query position the variant's kv_range() is exactly its unmasked keys, and the planner
// (decode_plan.cpp batch_shape) already trimmed every item to it.
// k_scale: fp8 pools only, the item's KV head's K scale (make_variant folds it into the logit scale).
struct RowSpan {
  int q_pos = 0, head0 = 0;
  float k_scale = 1.f;
};
template <class V, class P>
__device__ __forceinline__ RowSpan row_span(const P& p, const Item& it) {
  RowSpan s;
  if constexpr (P::kQuantizedKV) s.k_scale = __ldg(p.k_scale + it.kv_head * p.k_scale_stride);
  if constexpr (V::kHasBias) {
    s.q_pos = __ldg(p.plan.kv_len + it.req) - 1;
    s.head0 = it.kv_head * p.group_size + it.row_begin;
  }
  return s;
}

// The variant a mainloop computes logits with: the launch's (attn::VariantFactory), and for fp8
// pools (the default variant only) with the K scale
// folded into the logit scale (sm_scale * k_scale: q . (k_scale k8) = k_scale (q . k8)), so the
// dequantized tile needs no per-element multiply. The 16-bit kernels get p.var unchanged.
template <class V, class P>
__device__ __forceinline__ V make_variant(const P& p, const RowSpan& rs) {
  V v = attn::VariantFactory<V>::make(p);
  if constexpr (P::kQuantizedKV) {
    v.p.scale_log2 *= rs.k_scale;
    v.p.sm_scale *= rs.k_scale;
    v.p.softcap_pre *= rs.k_scale;
  }
  return v;
}

// In-kernel merge of split tiles (replaces a separate merge kernel for decode). Called by the
// whole CTA after it stored the partial state of a split item (it.slot >= 0): the CTA counts
// the finished slot in the tile's merge counter; the CTA that finishes the LAST slot merges
// the tile's rows (attn::merge_row_warp, the merge kernel's code, so the bits are the same:
// slots in KV order, whichever CTA merges) and resets the counter to 0 for the next run
// (attn::count_slot_is_last: the memory order between the two barriers).
// s_flag: the layout's 16-byte flag area (shared memory): s_flag[0] = 1 when this CTA merges
// the tile (every thread already holds the tile's slot range, mr).
template <class T, int D, int QR, class P>
__device__ __forceinline__ void merge_tile_if_last(const P& p, const Item& it, MergeRange mr,
                                                   int* s_flag, int fold) {
  __syncthreads();
  if (threadIdx.x == 0)
    s_flag[0] = attn::count_slot_is_last(&p.plan.merge_counter[fold_expand(it.merge, fold)], mr.n) ? 1 : 0;
  __syncthreads();
  WEFT_DECODE_TRACE_POINT(kTraceMergeDecided);  // of the CTA's last split item
  if (s_flag[0] == 0) return;
  WEFT_DECODE_TRACE_MERGED();
  const int W = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = warp; i < it.nrows; i += W) {
    const RowPos rp = row_pos(p, it, it.row_begin + i);
    // The merge's slots are mr.step slots (mr.step * QR rows) apart (consecutive: 1).
    attn::merge_row_warp<T>(p.plan.partial_lse + int64_t(mr.s0) * QR + i,
                            p.plan.partial_o + (int64_t(mr.s0) * QR + i) * D, mr.n, QR * mr.step, D,
                            p.o + rp.token * p.o_stride_token + rp.head * p.o_stride_head,
                            p.lse != nullptr ? p.lse + rp.token * p.lse_stride_token + rp.head : nullptr, lane);
  }
}

}  // namespace weft::decode
