// Hopper (sm_90a) prefill kernel, consumer warpgroups (warpgroups 1 and 2 of prefill_sm90_kernel,
// sm90_kernel.cuh): the mainloop (S = Q K^T and O += P V with wgmma, the overlap inside a
// warpgroup and the ping-pong between the two), the online softmax of a tile (softmax_tile) and
// the item's epilogue call (Rows::write, then Rows::merge after the CTA's items).
#pragma once
#include <cuda_runtime_api.h>

#include "common/ptx.cuh"
#include "common/ptx_sm90.cuh"
#include "prefill/kernel/epilogue.cuh"
#include "prefill/kernel/mainloop.cuh"
#include "prefill/kernel/mask.cuh"
#include "prefill/kernel/params.h"
#include "prefill/sm90/sm90_alibi.cuh"
#include "prefill/sm90/sm90_params.h"
#include "prefill/sm90/sm90_pipeline.cuh"

namespace weft::prefill::sm90 {

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
  // ALiBi (Rows::kBias: the prefill plan's ALiBi kernels, 16-bit pools; sm90_kernel.cuh):
  // apply_alibi_rows (sm90_alibi.cuh) replaces prepare_logits in EVERY tile, the unmasked ones of
  // um included (the bias depends on the key), and leaves log2-domain logits (softmax scale 1).
  constexpr bool kBias = Rows::kBias && !kF8;
  auto mask_softmax = [&](float (&sacc)[1][Tr::kFragS][4], SoftmaxState<Tr>& st, const ItemGeom& g, int ts,
                          float (&fac)[2], float scale, const float* kq_ptr, const attn::KVRange& um) {
    if constexpr (kBias) apply_alibi_rows<Tr>(sacc, p, g, warp_row0, ts, lane);
    else prepare_logits<Tr>(sacc, p, kq_ptr);
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
    // or 1 after soft-cap or ALiBi (log2-domain logits).
    const float scale = p.softcap_pre == 0.f && !kBias ? p.scale_log2 * (kF8 ? __ldg(kq_ptr) : 1.f) : 1.f;
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

}  // namespace weft::prefill::sm90
