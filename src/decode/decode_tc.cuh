// Internal: tensor-core GQA-fused decode path (mma.sync m16n8k16), the Mainloop policy of
// decode_items (decode_pipeline.cuh: persistent CTAs, warp-owned 16-key tiles, per-warp
// cp.async pipelines).
//
// Per item the group's query heads (<= 16 rows, zero-padded) form the M = 16 dimension, so
// every K/V row is read from HBM once per KV head and reused by all heads of the group. Per
// warp tile: S = Q K^T as two n8 mma tiles per 16-wide K step of head_dim, online softmax in
// the accumulator layout (rows lane/4 and lane/4 + 8), O += P V with P packed to 16 bits and V
// through ldmatrix.trans. Each warp keeps O (16 x D fp32) in registers.
#pragma once
#include "decode/decode_pipeline.cuh"

namespace weft::decode {

template <class T, int D>
struct TcMainloop {
  static constexpr int kK = D / 16;           // mma K steps over head_dim
  static constexpr int kN = D / 8;            // n8 tiles of O
  static constexpr bool kQInRegs = D <= 128;  // D=256 would need 64 extra registers: reload instead
  float acc[kN][4];
  float m[2], l[2];                          // rows lane/4 and lane/4 + 8, log2 units
  uint32_t qf[kQInRegs ? kK : 1][4];

  __device__ __forceinline__ TcMainloop(const T* sQ, int lane) {
#pragma unroll
    for (int n = 0; n < kN; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.f;
    if constexpr (kQInRegs) {
#pragma unroll
      for (int kk = 0; kk < kK; ++kk) {
        const int i = lane / 8;
        ptx::ldmatrix_x4(qf[kk], sQ + swz<D>((lane % 8) + (i % 2) * 8, kk * 2 + i / 2));
      }
    }
  }

  __device__ __forceinline__ void tile(const DecodeParams<T>& p, const T* sQ, const T* sK, const T* sV, int k0,
                                       int kv_end, int /*nrows*/, int lane) {
    // S = Q K^T for the 16 keys of the tile: two n8 tiles.
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
      ptx::ldmatrix_x4(b, sK + swz<D>((lane % 8) + (i / 2) * 8, kk * 2 + (i % 2)));
      ptx::mma_16816<T>(s[0], a, b);
      ptx::mma_16816<T>(s[1], a, b + 2);
    }

    // Logits (scale, soft cap, mask) and online softmax, rows lane/4 (rr=0) and lane/4+8 (rr=1).
    const int key0 = k0 + (lane % 4) * 2;
#pragma unroll
    for (int nt8 = 0; nt8 < 2; ++nt8)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + nt8 * 8 + (e & 1);
        s[nt8][e] = key < kv_end ? logit_log2(p, s[nt8][e]) : -INFINITY;
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
      for (int nt8 = 0; nt8 < 2; ++nt8)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pv = ptx::exp2_approx(s[nt8][2 * rr + e] - m_use);
          s[nt8][2 * rr + e] = pv;
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
      ptx::ldmatrix_x4_trans(b, sV + swz<D>((lane % 8) + (i % 2) * 8, np * 2 + i / 2));
      ptx::mma_16816<T>(acc[2 * np], pa, b);
      ptx::mma_16816<T>(acc[2 * np + 1], pa, b + 2);
    }
  }

  // Per-warp state -> shared memory (red_o [W][16][D], red_m / red_l [W][16]).
  __device__ __forceinline__ void store(float* red_o, float* red_m, float* red_l, int warp, int lane,
                                        int /*nrows*/) {
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
  }
};

template <class T, int D>
__global__ void __launch_bounds__(kMaxThreads) decode_tc_kernel(const DecodeParams<T> p) {
  decode_items<T, D, TcMainloop<T, D>>(p);
}

}  // namespace weft::decode
