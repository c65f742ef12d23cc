// Mainloop role: S = Q.K^T (mma.sync m16n8k16, ldmatrix), online softmax in registers (exp2 with
// the scale folded into one FFMA), O += P.V with P converted in registers from the S accumulators into A
// fragments (no shared-memory round trip) and V read with ldmatrix.trans.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 .f16/.bf16; g = lane / 4, t = lane % 4):
//   A (16x16, row):  a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 2t+8..)  a3 (g+8, 2t+8..)
//   B (16x8, col):   b0 (k 2t..2t+1, n g)  b1 (k 2t+8.., n g)
//   C (16x8, f32):   c0,c1 (g, 2t..2t+1)   c2,c3 (g+8, 2t..2t+1)
// ldmatrix.x4: lanes 8i..8i+7 give the row addresses of 8x8 matrix i; register i receives
// matrix i with lane holding (row lane/4, cols 2(lane%4)..+1) (.trans: of the transpose).
#pragma once
#include "common/rtc_compat.h"  // <cmath>, <cstdint> (CCCL under NVRTC)

#include "common/ptx.cuh"
#include "prefill/kernel/traits.cuh"

namespace weft::prefill {

// Swizzled chunk of logical chunk 2*k + hi in a row whose low 3 bits are r7: swz() XORs the chunk
// with r7, and since 2k and hi (0/1) share no bits, (2k + hi) ^ r7 = 2k ^ (hi ^ r7). Per-lane
// x = hi ^ r7 is computed once; each k-step then costs one XOR with a constant.
__device__ __forceinline__ int swz_chunk(int k2, int x) { return k2 ^ x; }

// S[mb][n] (row block mb of the warp, n8 block n of the warp's kKVPerWarp keys starting at tile
// row key_row0) = Q.K^T.
//   Q ldmatrix: lane -> row lane % 16 of the block, chunk 2kk + lane / 16: matrices (rows 0-7,
//   k 0-7) (rows 8-15, k 0-7) (rows 0-7, k 8-15) (rows 8-15, k 8-15) = a0..a3.
//   K ldmatrix (non-trans): lane -> key row (lane % 8) + 8 (lane / 16), chunk 2kk + (lane / 8) % 2:
//   matrices (keys 0-7, d 0-7) (keys 0-7, d 8-15) (keys 8-15, d 0-7) (keys 8-15, d 8-15), i.e.
//   {b0, b1} of n-block 2i and {b0, b1} of n-block 2i+1 (K rows are B's columns: "col" layout).
// Each K fragment feeds kMB row blocks (2 MMAs each).
template <class Tr>
__device__ __forceinline__ void compute_qk(float (&s)[Tr::kMB][Tr::kFragS][4],
                                           const uint32_t (&qf)[Tr::kQInRegs ? Tr::kKStepsQK : 1][4],
                                           const typename Tr::Elem* sq, int warp_row0,
                                           const typename Tr::Elem* sk, int key_row0, int lane) {
  using T = typename Tr::Elem;
  constexpr int D = Tr::kHeadDim;
#pragma unroll
  for (int mb = 0; mb < Tr::kMB; ++mb)
#pragma unroll
    for (int n = 0; n < Tr::kFragS; ++n) s[mb][n][0] = s[mb][n][1] = s[mb][n][2] = s[mb][n][3] = 0.f;
  const T* q_row = sq + (warp_row0 + (lane & 15)) * D;
  const int xq = (lane >> 4) ^ (lane & 7);
  const T* k_row = sk + (key_row0 + (lane & 7) + ((lane >> 4) << 3)) * D;
  const int xk = ((lane >> 3) & 1) ^ (lane & 7);
#pragma unroll
  for (int kk = 0; kk < Tr::kKStepsQK; ++kk) {
    uint32_t a[Tr::kMB][4];
    if constexpr (Tr::kQInRegs) {
      a[0][0] = qf[kk][0]; a[0][1] = qf[kk][1]; a[0][2] = qf[kk][2]; a[0][3] = qf[kk][3];
    } else {
#pragma unroll
      for (int mb = 0; mb < Tr::kMB; ++mb)
        ptx::ldmatrix_x4(a[mb], q_row + mb * 16 * D + (swz_chunk(2 * kk, xq) << 3));
    }
#pragma unroll
    for (int n2 = 0; n2 < Tr::kFragS / 2; ++n2) {
      uint32_t b[4];
      ptx::ldmatrix_x4(b, k_row + n2 * 16 * D + (swz_chunk(2 * kk, xk) << 3));
#pragma unroll
      for (int mb = 0; mb < Tr::kMB; ++mb) {
        ptx::mma_16816<T>(s[mb][2 * n2], a[mb], b);
        ptx::mma_16816<T>(s[mb][2 * n2 + 1], a[mb], b + 2);
      }
    }
  }
}

// Running softmax state of the thread's 2 * kMB rows (g, g + 8 of each row block).
// m is kept in RAW logit units (the max of the un-scaled scores) during the main loop, so
// p = exp2(s * scale - m * scale) is one FFMA + one ex2 per score; finish_state() converts it to
// the log2 domain for the epilogue.
template <class Tr>
struct SoftmaxState {
  float o[Tr::kMB][Tr::kFragO][4];
  float m[Tr::kMB][2];  // running max; -inf until a key is seen
  float d[Tr::kMB][2];  // running sum of p, THIS thread's columns only (quad-reduced at the end)
};

template <class Tr>
__device__ __forceinline__ void init_state(SoftmaxState<Tr>& st) {
#pragma unroll
  for (int mb = 0; mb < Tr::kMB; ++mb) {
#pragma unroll
    for (int n = 0; n < Tr::kFragO; ++n)
      st.o[mb][n][0] = st.o[mb][n][1] = st.o[mb][n][2] = st.o[mb][n][3] = 0.f;
    st.m[mb][0] = st.m[mb][1] = -INFINITY;
    st.d[mb][0] = st.d[mb][1] = 0.f;
  }
}

// m -> log2 domain (scale > 0 keeps -inf as -inf).
template <class Tr>
__device__ __forceinline__ void finish_state(SoftmaxState<Tr>& st, float scale) {
#pragma unroll
  for (int mb = 0; mb < Tr::kMB; ++mb) {
    st.m[mb][0] *= scale;
    st.m[mb][1] *= scale;
  }
}

// Lazy rescale threshold (log2 units): the running max m of a row is only raised when a tile's
// max exceeds it by more than this, so p = exp2(s * scale - m * scale) <= 2^8 = 256 (exact math:
// d and O use the same m, O / d and LSE = m + log2 d are unchanged; fp32 sums and bf16/f16 P
// hold 256 easily). Most tiles after the first few then skip the O rescale and its dependency.
inline constexpr float kLazyRescaleLog2 = 8.f;

// s holds raw scores (masked = -inf); log2-domain logit = s * scale (scale > 0: sm_scale *
// log2 e, or 1 when the soft-cap already produced log2-domain logits). Updates m, rescales d and
// O, replaces s by P = exp2(s * scale - m * scale). A row with nothing unmasked yet keeps
// m = -inf and uses 0 as the exponent base, so every p is exp2(-inf) = 0 (no -inf - -inf NaN).
// The O rescale (kMB * D / 2 FMULs per thread) runs only when some row of the warp raised its
// max (see kLazyRescaleLog2); the skip is warp-uniform.
template <class Tr>
__device__ __forceinline__ void online_softmax(float (&s)[Tr::kMB][Tr::kFragS][4],
                                               SoftmaxState<Tr>& st, float scale) {
  float fac[Tr::kMB][2];
  bool changed = false;
#pragma unroll
  for (int mb = 0; mb < Tr::kMB; ++mb) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < Tr::kFragS; ++n) mx = fmaxf(mx, fmaxf(s[mb][n][2 * h], s[mb][n][2 * h + 1]));
      // the 4 threads of a quad share the row
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_old = st.m[mb][h];
      // -inf - -inf = NaN compares false: a row that has seen nothing stays at -inf.
      const bool raise = (mx - m_old) * scale > kLazyRescaleLog2;
      const float m_new = raise ? mx : m_old;
      const float base = m_new == -INFINITY ? 0.f : m_new * scale;
      fac[mb][h] = raise ? ptx::exp2_approx(fmaf(m_old, scale, -base)) : 1.f;  // m_old = -inf -> 0
      changed |= raise;
      st.m[mb][h] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int n = 0; n < Tr::kFragS; ++n) {
        s[mb][n][2 * h] = ptx::exp2_approx(fmaf(s[mb][n][2 * h], scale, -base));
        s[mb][n][2 * h + 1] = ptx::exp2_approx(fmaf(s[mb][n][2 * h + 1], scale, -base));
        const float pair = s[mb][n][2 * h] + s[mb][n][2 * h + 1];
        sum = n == 0 ? pair : sum + pair;
      }
      st.d[mb][h] = st.d[mb][h] * fac[mb][h] + sum;
    }
  }
  if (__any_sync(0xffffffffu, changed)) {
#pragma unroll
    for (int mb = 0; mb < Tr::kMB; ++mb)
#pragma unroll
      for (int n = 0; n < Tr::kFragO; ++n) {
        st.o[mb][n][0] *= fac[mb][0];
        st.o[mb][n][1] *= fac[mb][0];
        st.o[mb][n][2] *= fac[mb][1];
        st.o[mb][n][3] *= fac[mb][1];
      }
  }
}

// O += P.V. P is first packed to 16-bit A fragments (so the fp32 S registers die before the
// loop). A fragment of k16 step kk = S blocks 2kk (keys 0-7) and 2kk+1 (keys 8-15):
//   a0 = (g, 2t..) from S[2kk][0,1], a1 = (g+8) from S[2kk][2,3], a2 = S[2kk+1][0,1],
//   a3 = S[2kk+1][2,3]. V ldmatrix.trans: lane -> key row (lane % 8) + 8 ((lane / 8) % 2), chunk
//   2*d2 + lane / 16: matrices (keys 0-7, d 0-7) (keys 8-15, d 0-7) (keys 0-7, d 8-15)
//   (keys 8-15, d 8-15), transposed = {b0, b1} of d-block 2*d2 and of 2*d2 + 1.
// Each V fragment feeds kMB row blocks (2 MMAs each).
template <class Tr>
__device__ __forceinline__ void compute_pv(const float (&s)[Tr::kMB][Tr::kFragS][4],
                                           SoftmaxState<Tr>& st, const typename Tr::Elem* sv,
                                           int key_row0, int lane) {
  using T = typename Tr::Elem;
  constexpr int D = Tr::kHeadDim;
  uint32_t pa[Tr::kMB][Tr::kKStepsPV][4];
#pragma unroll
  for (int mb = 0; mb < Tr::kMB; ++mb)
#pragma unroll
    for (int kk = 0; kk < Tr::kKStepsPV; ++kk) {
      pa[mb][kk][0] = ptx::pack2<T>(s[mb][2 * kk][0], s[mb][2 * kk][1]);
      pa[mb][kk][1] = ptx::pack2<T>(s[mb][2 * kk][2], s[mb][2 * kk][3]);
      pa[mb][kk][2] = ptx::pack2<T>(s[mb][2 * kk + 1][0], s[mb][2 * kk + 1][1]);
      pa[mb][kk][3] = ptx::pack2<T>(s[mb][2 * kk + 1][2], s[mb][2 * kk + 1][3]);
    }
  const T* v_row = sv + (key_row0 + (lane & 7) + (((lane >> 3) & 1) << 3)) * D;
  const int xv = (lane >> 4) ^ (lane & 7);
#pragma unroll
  for (int kk = 0; kk < Tr::kKStepsPV; ++kk) {
#pragma unroll
    for (int d2 = 0; d2 < Tr::kFragO / 2; ++d2) {
      uint32_t b[4];
      ptx::ldmatrix_x4_trans(b, v_row + kk * 16 * D + (swz_chunk(2 * d2, xv) << 3));
#pragma unroll
      for (int mb = 0; mb < Tr::kMB; ++mb) {
        ptx::mma_16816<T>(st.o[mb][2 * d2], pa[mb][kk], b);
        ptx::mma_16816<T>(st.o[mb][2 * d2 + 1], pa[mb][kk], b + 2);
      }
    }
  }
}

}  // namespace weft::prefill
