// Internal: tensor-core GQA-fused decode kernel (mma.sync m16n8k16).
//
// One persistent CTA (4 warps) executes the plan's items of blockIdx.x. Per item the group's
// query heads (<= 16 rows, zero-padded) form the M = 16 dimension, so every K/V tile is read
// from HBM once per KV head and reused by all heads of the group. Each 64-key tile is split
// across the warps (16 keys each): warp w computes S = Q K^T for its keys (D/16 mma K-steps x 2
// n8 tiles), keeps its own online-softmax state (m, l in log2 units) and O accumulator
// (16 x D fp32 in registers), and the warps' states are combined once per item in the
// epilogue (decode_common.cuh). Loads: multi-stage cp.async pipeline (StageCount).
#pragma once
#include "decode/decode_common.cuh"

namespace weft::decode {

template <class T, int D>
__global__ void __launch_bounds__(kThreads) decode_tc_kernel(const DecodeParams<T> p) {
  using L = SmemLayout<T, D>;
  constexpr int S = L::kStages;
  constexpr int kK = D / 16;              // mma K steps over head_dim
  constexpr int kN = D / 8;               // n8 tiles of O
  constexpr bool kQInRegs = D <= 128;     // D=256 would need 64 extra registers: reload instead
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* sPipe = reinterpret_cast<T*>(smem_raw);
  T* sQ = reinterpret_cast<T*>(smem_raw + L::kPipeBytes);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  const int i0 = p.plan.cta_indptr[blockIdx.x], i1 = p.plan.cta_indptr[blockIdx.x + 1];
  for (int ii = i0; ii < i1; ++ii) {
    const Item it = load_item(p.plan, ii);
    __syncthreads();  // previous item's epilogue is done with shared memory
    load_q<T, D>(p, it, sQ);
    ptx::cp_async_commit();
    const int ntiles = (it.kv_end - it.kv_begin + kTileKV - 1) / kTileKV;
#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
      if (s < ntiles)
        load_kv_tile<T, D>(p, it, it.kv_begin + s * kTileKV, sPipe + s * 2 * L::kTileElems,
                           sPipe + s * 2 * L::kTileElems + L::kTileElems);
      ptx::cp_async_commit();
    }

    float acc[kN][4];
#pragma unroll
    for (int n = 0; n < kN; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    uint32_t qf[kQInRegs ? kK : 1][4];

    for (int t = 0; t < ntiles; ++t) {
      ptx::cp_async_wait<S - 2>();
      __syncthreads();
      if (kQInRegs && t == 0) {
#pragma unroll
        for (int kk = 0; kk < (kQInRegs ? kK : 0); ++kk) {
          const int i = lane / 8;
          ptx::ldmatrix_x4(qf[kk], sQ + swz<D>((lane % 8) + (i % 2) * 8, kk * 2 + i / 2));
        }
      }
      {
        const int tn = t + S - 1;
        if (tn < ntiles) {
          T* st = sPipe + (tn % S) * 2 * L::kTileElems;
          load_kv_tile<T, D>(p, it, it.kv_begin + tn * kTileKV, st, st + L::kTileElems);
        }
        ptx::cp_async_commit();
      }
      const T* sK = sPipe + (t % S) * 2 * L::kTileElems;
      const T* sV = sK + L::kTileElems;

      // S = Q K^T for keys [warp*16, warp*16 + 16) of the tile: two n8 tiles.
      float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
      for (int kk = 0; kk < kK; ++kk) {
        const int i = lane / 8;
        uint32_t a[4], b[4];
        if constexpr (kQInRegs) {
          a[0] = qf[kk][0]; a[1] = qf[kk][1]; a[2] = qf[kk][2]; a[3] = qf[kk][3];
        } else {
          ptx::ldmatrix_x4(a, sQ + swz<D>((lane % 8) + (i % 2) * 8, kk * 2 + i / 2));
        }
        ptx::ldmatrix_x4(b, sK + swz<D>(warp * 16 + (lane % 8) + (i / 2) * 8, kk * 2 + (i % 2)));
        ptx::mma_16816<T>(s[0], a, b);
        ptx::mma_16816<T>(s[1], a, b + 2);
      }

      // Logits (scale, soft cap, mask) and online softmax, rows lane/4 (rr=0) and lane/4+8 (rr=1).
      const int key0 = it.kv_begin + t * kTileKV + warp * 16 + (lane % 4) * 2;
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key0 + nt * 8 + (e & 1);
          s[nt][e] = key < it.kv_end ? logit_log2(p, s[nt][e]) : -INFINITY;
        }
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        float mx = fmaxf(fmaxf(s[0][2 * rr], s[0][2 * rr + 1]), fmaxf(s[1][2 * rr], s[1][2 * rr + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[rr], mx);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;  // all masked so far: keep 0s
        const float scale = ptx::exp2_approx(m[rr] - m_use);
        m[rr] = m_new;
        float rs = 0.f;
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float pv = ptx::exp2_approx(s[nt][2 * rr + e] - m_use);
            s[nt][2 * rr + e] = pv;
            rs += pv;
          }
        l[rr] = l[rr] * scale + rs;
#pragma unroll
        for (int n = 0; n < kN; ++n) {
          acc[n][2 * rr] *= scale;
          acc[n][2 * rr + 1] *= scale;
        }
      }

      // O += P V: P (16 x 16 keys) from the S accumulators, V via ldmatrix.trans.
      uint32_t pa[4];
      pa[0] = ptx::pack2<T>(s[0][0], s[0][1]);
      pa[1] = ptx::pack2<T>(s[0][2], s[0][3]);
      pa[2] = ptx::pack2<T>(s[1][0], s[1][1]);
      pa[3] = ptx::pack2<T>(s[1][2], s[1][3]);
#pragma unroll
      for (int np = 0; np < kN / 2; ++np) {
        const int i = lane / 8;
        uint32_t b[4];
        ptx::ldmatrix_x4_trans(b, sV + swz<D>(warp * 16 + (lane % 8) + (i % 2) * 8, np * 2 + i / 2));
        ptx::mma_16816<T>(acc[2 * np], pa, b);
        ptx::mma_16816<T>(acc[2 * np + 1], pa, b + 2);
      }
    }
    ptx::cp_async_wait<0>();
    __syncthreads();

    // Epilogue: per-warp states -> shared memory (pipeline buffers are free now).
    float* red_o = reinterpret_cast<float*>(smem_raw);
    float* red_m = red_o + kWarps * kTileQ * D;
    float* red_l = red_m + kWarps * kTileQ;
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 1);
      l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 2);
      const int row = lane / 4 + rr * 8;
      float* dst = red_o + (warp * kTileQ + row) * D + (lane % 4) * 2;
#pragma unroll
      for (int n = 0; n < kN; ++n)
        *reinterpret_cast<float2*>(dst + n * 8) = make_float2(acc[n][2 * rr], acc[n][2 * rr + 1]);
      if (lane % 4 == 0) {
        red_m[warp * kTileQ + row] = m[rr];
        red_l[warp * kTileQ + row] = l[rr];
      }
    }
    __syncthreads();
    combine_and_store<T, D>(p, it, red_o, red_m, red_l);
  }
}

}  // namespace weft::decode
