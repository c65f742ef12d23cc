// Mainloop role: S = Q.K^T (mma.sync m16n8k16, ldmatrix), online softmax in registers (exp2,
// log2-domain logits), O += P.V with P converted in registers from the S accumulators into A
// fragments (no shared-memory round trip) and V read with ldmatrix.trans.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 .f16/.bf16; g = lane / 4, t = lane % 4):
//   A (16x16, row):  a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 2t+8..)  a3 (g+8, 2t+8..)
//   B (16x8, col):   b0 (k 2t..2t+1, n g)  b1 (k 2t+8.., n g)
//   C (16x8, f32):   c0,c1 (g, 2t..2t+1)   c2,c3 (g+8, 2t..2t+1)
// ldmatrix.x4: lanes 8i..8i+7 give the row addresses of 8x8 matrix i; register i receives
// matrix i with lane holding (row lane/4, cols 2(lane%4)..+1) (.trans: of the transpose).
#pragma once
#include <cmath>
#include <cstdint>

#include "common/ptx.cuh"
#include "prefill/kernel/traits.cuh"

namespace weft::prefill {

// A fragments of the warp's 16 Q rows for k16 step kk (from the swizzled Q tile).
//   lane -> row lane % 16, chunk 2kk + lane / 16: matrices (rows 0-7, k 0-7) (rows 8-15, k 0-7)
//   (rows 0-7, k 8-15) (rows 8-15, k 8-15) = a0..a3.
template <class Tr>
__device__ __forceinline__ void load_q_frag(uint32_t (&a)[4], const typename Tr::Elem* sq,
                                            int warp_row0, int kk, int lane) {
  ptx::ldmatrix_x4(a, sq + swz<Tr::kHeadDim>(warp_row0 + (lane & 15), 2 * kk + (lane >> 4)));
}

// S[n] (n8 block n of the warp's kKVPerWarp keys starting at tile row key_row0) = Q.K^T.
//   K ldmatrix (non-trans): lane -> key row (lane % 8) + 8 (lane / 16), chunk 2kk + (lane / 8) % 2:
//   matrices (keys 0-7, d 0-7) (keys 0-7, d 8-15) (keys 8-15, d 0-7) (keys 8-15, d 8-15), i.e.
//   {b0, b1} of n-block 2i and {b0, b1} of n-block 2i+1 (K rows are B's columns: "col" layout).
template <class Tr>
__device__ __forceinline__ void compute_qk(float (&s)[Tr::kFragS][4],
                                           const uint32_t (&qf)[Tr::kQInRegs ? Tr::kKStepsQK : 1][4],
                                           const typename Tr::Elem* sq, int warp_row0,
                                           const typename Tr::Elem* sk, int key_row0, int lane) {
  using T = typename Tr::Elem;
#pragma unroll
  for (int n = 0; n < Tr::kFragS; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < Tr::kKStepsQK; ++kk) {
    uint32_t a[4];
    if constexpr (Tr::kQInRegs) {
      a[0] = qf[kk][0]; a[1] = qf[kk][1]; a[2] = qf[kk][2]; a[3] = qf[kk][3];
    } else {
      ptx::ldmatrix_x4(a, sq + swz<Tr::kHeadDim>(warp_row0 + (lane & 15), 2 * kk + (lane >> 4)));
    }
#pragma unroll
    for (int n2 = 0; n2 < Tr::kFragS / 2; ++n2) {
      uint32_t b[4];
      const int row = key_row0 + n2 * 16 + (lane & 7) + ((lane >> 4) << 3);
      ptx::ldmatrix_x4(b, sk + swz<Tr::kHeadDim>(row, 2 * kk + ((lane >> 3) & 1)));
      ptx::mma_16816<T>(s[2 * n2], a, b);
      ptx::mma_16816<T>(s[2 * n2 + 1], a, b + 2);
    }
  }
}

// Running softmax state of the thread's two rows (g, g + 8), log2 domain.
template <class Tr>
struct SoftmaxState {
  float o[Tr::kFragO][4];
  float m[2];  // running max (log2 domain); -inf until a key is seen
  float d[2];  // running sum of exp2(x - m), THIS thread's columns only (quad-reduced at the end)
};

template <class Tr>
__device__ __forceinline__ void init_state(SoftmaxState<Tr>& st) {
#pragma unroll
  for (int n = 0; n < Tr::kFragO; ++n) st.o[n][0] = st.o[n][1] = st.o[n][2] = st.o[n][3] = 0.f;
  st.m[0] = st.m[1] = -INFINITY;
  st.d[0] = st.d[1] = 0.f;
}

// s holds log2-domain logits (masked = -inf). Updates m, rescales d and O, replaces s by
// P = exp2(x - m). A row with nothing unmasked yet keeps m = -inf and uses 0 as the exponent
// base, so every p is exp2(-inf) = 0 and no -inf - -inf NaN appears.
template <class Tr>
__device__ __forceinline__ void online_softmax(float (&s)[Tr::kFragS][4], SoftmaxState<Tr>& st) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = st.m[h];
#pragma unroll
    for (int n = 0; n < Tr::kFragS; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * h], s[n][2 * h + 1]));
    // the 4 threads of a quad share the row
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float base = mx == -INFINITY ? 0.f : mx;
    const float scale = ptx::exp2_approx(st.m[h] - base);  // m = -inf -> 0
    st.m[h] = mx;
    float sum = 0.f;
#pragma unroll
    for (int n = 0; n < Tr::kFragS; ++n) {
      s[n][2 * h] = ptx::exp2_approx(s[n][2 * h] - base);
      s[n][2 * h + 1] = ptx::exp2_approx(s[n][2 * h + 1] - base);
      sum += s[n][2 * h] + s[n][2 * h + 1];
    }
    st.d[h] = st.d[h] * scale + sum;
#pragma unroll
    for (int n = 0; n < Tr::kFragO; ++n) {
      st.o[n][2 * h] *= scale;
      st.o[n][2 * h + 1] *= scale;
    }
  }
}

// O += P.V. P A-fragment of k16 step kk = S blocks 2kk (keys 0-7) and 2kk+1 (keys 8-15):
//   a0 = (g, 2t..) from S[2kk][0,1], a1 = (g+8) from S[2kk][2,3], a2 = S[2kk+1][0,1],
//   a3 = S[2kk+1][2,3]. V ldmatrix.trans: lane -> key row (lane % 8) + 8 ((lane / 8) % 2), chunk
//   2*d2 + lane / 16: matrices (keys 0-7, d 0-7) (keys 8-15, d 0-7) (keys 0-7, d 8-15)
//   (keys 8-15, d 8-15), transposed = {b0, b1} of d-block 2*d2 and of 2*d2 + 1.
template <class Tr>
__device__ __forceinline__ void compute_pv(const float (&s)[Tr::kFragS][4], SoftmaxState<Tr>& st,
                                           const typename Tr::Elem* sv, int key_row0, int lane) {
  using T = typename Tr::Elem;
#pragma unroll
  for (int kk = 0; kk < Tr::kKStepsPV; ++kk) {
    uint32_t a[4];
    a[0] = ptx::pack2<T>(s[2 * kk][0], s[2 * kk][1]);
    a[1] = ptx::pack2<T>(s[2 * kk][2], s[2 * kk][3]);
    a[2] = ptx::pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[3] = ptx::pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    const int row = key_row0 + kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
#pragma unroll
    for (int d2 = 0; d2 < Tr::kFragO / 2; ++d2) {
      uint32_t b[4];
      ptx::ldmatrix_x4_trans(b, sv + swz<Tr::kHeadDim>(row, 2 * d2 + (lane >> 4)));
      ptx::mma_16816<T>(st.o[2 * d2], a, b);
      ptx::mma_16816<T>(st.o[2 * d2 + 1], a, b + 2);
    }
  }
}

}  // namespace weft::prefill
