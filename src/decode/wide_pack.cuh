// Wide packs: the rows of a work-plan item of more than tile_rows rows (a pack over a forest node
// shared by many requests; attention/plan/work_plan.h, pack_item_requests) run through the
// prefill FA2 mainloop (prefill/kernel/prefill_kernel.cuh, prefill_item_range) with this Rows
// policy in place of the prefill plan's:
//   geometry  item w of the work plan: KV head, key range [kv_begin, kv_end) of the page list at
//             kv_indices[page_base] (ItemGeom::kv_base, read by the mainloop's paged copies),
//             rows [0, row_end - row_begin) of the tile, its partial slot;
//   load_q    a GATHER: tile row r is work row row_begin + r = request req_list[req_begin +
//             row / group], query head kv_head * group + row % group (cp.async per 16-byte chunk,
//             rows past the item zero-filled);
//   write     fp32 O (normalised) and base-2 LSE of tile row r at work-plan partial row
//             slot * tile_rows + r (a wide item owns ceil(rows / tile_rows) consecutive slots),
//             merged with the item's other sources by the work plan's deterministic merge (a pack
//             always writes partial states: make_pack_plan gives every pack item a slot).
// ItemGeom fields reused (the FA2 mainloop's masks only read rows and key bounds when the
// variant has no causal, window or custom mask, which prefix sharing never has): `seg` = the
// item's first req_list position, `token0` = its row_begin, pos0 / token_abs0 = 0.
#pragma once
#include "attention/plan/work_plan.h"
#include "common/ptx.cuh"
#include "decode/decode_params.cuh"
#include "decode/launch.h"
#include "prefill/kernel/prefill_kernel.cuh"

namespace weft::decode {

// The prefill parameters both wide-pack mainloops read (host side): pools, page table (item page
// bases index it: BSR indices or block-table rows), strides, the GQA group, the variant's scale
// and soft cap, Q (the sm90 mainloop's tensor map; the FA2 one gathers through WidePackRows).
// Decode: the query is the last position, every key is visible (no causal / window / custom
// mask: prefix sharing refuses windows).
template <class T>
prefill::PrefillParams wide_pack_params(const DecodeParams<T, T>& d, const LaunchArgs& a) {
  prefill::PrefillParams p;
  p.q = d.q;
  p.q_stride_token = d.q_stride_token;
  p.q_stride_head = d.q_stride_head;
  p.k = d.kv.k.data;
  p.v = d.kv.v.data;
  p.k_page_stride = d.kv.k.page_stride;
  p.k_slot_stride = d.kv.k.slot_stride;
  p.k_head_stride = d.kv.k.head_stride;
  p.v_page_stride = d.kv.v.page_stride;
  p.v_slot_stride = d.kv.v.slot_stride;
  p.v_head_stride = d.kv.v.head_stride;
  p.paged = 1;
  p.page_size = d.kv.table.page_size;
  p.page_shift = d.page_shift;
  p.page_indices = d.kv.table.indices;
  p.group_size = a.group_size;
  p.causal = 0;
  p.window_left = -1;
  p.scale_log2 = a.var.scale_log2;
  p.softcap_pre = a.var.softcap_pre;
  p.softcap_post = a.var.softcap_post;
  return p;
}

struct WidePackRows {
  plan::WorkPlanPointers work;
  const void* q = nullptr;  // [batch, num_qo_heads, head_dim]
  int64_t q_stride_token = 0, q_stride_head = 0;

  __device__ __forceinline__ prefill::ItemGeom geometry(const prefill::PrefillParams&, int w, int) const {
    prefill::ItemGeom g;
    g.seg = work.item_req_begin[w];
    g.token0 = work.item_row_begin[w];
    g.request = 0;
    g.kv_head = work.item_kv_head[w];
    g.row_begin = 0;
    g.row_end = work.item_row_end[w] - g.token0;
    g.token_abs0 = 0;
    g.pos0 = 0;
    g.kv_lo = work.item_kv_begin[w];
    g.kv_hi = max(work.item_kv_end[w], g.kv_lo);
    g.kv_base = work.item_page_base[w];
    g.real_kv_len = g.kv_hi;
    g.slot = work.item_slot[w];
    return g;
  }

  // Tile row r -> (request, query head) of the work plan's row vocabulary.
  __device__ __forceinline__ void row_of(const prefill::PrefillParams& p, const prefill::ItemGeom& g, int r,
                                         int& req, int& head) const {
    const int row = g.token0 + r;
    const int j = row / p.group_size;
    req = __ldg(work.req_list + g.seg + j);
    head = g.kv_head * p.group_size + (row - j * p.group_size);
  }

  template <class Tr>
  __device__ __forceinline__ void load_q(typename Tr::Elem* sq, const prefill::PrefillParams& p,
                                         const prefill::ItemGeom& g, int tid) const {
    using T = typename Tr::Elem;
    constexpr int kRowsPerPass = Tr::kThreads / Tr::kChunks;
    static_assert(Tr::kCtaQ % kRowsPerPass == 0, "Q tile rows must split evenly over threads");
    const int col = tid % Tr::kChunks;
    const int r_first = tid / Tr::kChunks;
    const T* qb = static_cast<const T*>(q) + col * 8;
#pragma unroll
    for (int i = 0; i < Tr::kCtaQ / kRowsPerPass; ++i) {
      const int r = r_first + i * kRowsPerPass;
      const bool valid = r < g.row_end;
      const T* src = qb;
      if (valid) {
        int req, head;
        row_of(p, g, r, req, head);
        src = qb + static_cast<int64_t>(req) * q_stride_token + static_cast<int64_t>(head) * q_stride_head;
      }
      ptx::cp_async_16(sq + prefill::swz<Tr::kHeadDim>(r, col), src, valid ? 16 : 0);
    }
  }

  // The thread's 2 * kMB rows (write_item's fragment layout: row warp_row0 + mb * 16 + lane / 4
  // + 8 h, columns n * 8 + 2 (lane % 4) + {0, 1}).
  template <class Tr>
  __device__ __forceinline__ void write(const prefill::SoftmaxState<Tr>& st, const prefill::PrefillParams& p,
                                        const prefill::ItemGeom& g, int warp_row0, int lane, float) const {
    const int t = lane & 3;
    const int tile_rows = work.header->tile_rows;
#pragma unroll
    for (int mb = 0; mb < Tr::kMB; ++mb) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = warp_row0 + mb * 16 + (lane >> 2) + 8 * h;
        if (r >= g.row_end) continue;
        const float dsum = st.d[mb][h];
        const bool empty = !(dsum > 0.f);
        const float inv = empty ? 0.f : 1.f / dsum;
        const float lse2 = empty ? -INFINITY : st.m[mb][h] + log2f(dsum);
        const int64_t at = static_cast<int64_t>(g.slot) * tile_rows + r;
        float* dst = work.partial_o + at * Tr::kHeadDim;
#pragma unroll
        for (int n = 0; n < Tr::kFragO; ++n)
          *reinterpret_cast<float2*>(dst + n * 8 + 2 * t) =
              make_float2(st.o[mb][n][2 * h] * inv, st.o[mb][n][2 * h + 1] * inv);
        if (t == 0) work.partial_lse[at] = lse2;
      }
    }
  }
};

// The wide-pack kernel: launched CTA c runs the work plan's wide items wide_cta_indptr[c] ..
// [c + 1] - 1 (the planner's own deal of them, make_pack_plan) with the FA2 tile Tr.
template <class Tr>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kMinCtasPerSM)
    decode_wide_pack_kernel(const prefill::PrefillParams p, const WidePackRows rows) {
  // Overlapped launch (DecodeOptions::prefix_wide_overlap): the decode kernel after this one may
  // be scheduled at once (it reads nothing this grid writes; its last CTA waits for this grid
  // before exiting). A no-op when the next launch has no programmatic dependency.
  ptx::grid_launch_dependents();
  const int c = static_cast<int>(blockIdx.x);
  prefill::prefill_item_range<Tr>(p, rows.work.wide_cta_indptr[c], rows.work.wide_cta_indptr[c + 1],
                                  prefill::NoJitVariant{}, /*fold=*/0, rows);
}

}  // namespace weft::decode
