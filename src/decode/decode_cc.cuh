// Internal: CUDA-core decode path (fp32 FMA dot products), the Mainloop policy of decode_items
// (decode_pipeline.cuh: same persistent CTAs, warp-owned 16-key tiles, per-warp cp.async
// pipelines, page lookup, planner, workspace, epilogue and merge as the tensor-core path).
//
// For small GQA groups the 16-row mma tile of the tensor-core path computes 16 rows of which
// only g are real (group 1: 15/16 of the QK^T and PV work is padding, P is rounded to 16 bits).
// Here a warp does exactly g rows' work per 16-key tile, in fp32:
//   - lane l owns head dims [l*E, l*E + E), E = D/32 (2/4/8): Q, K, V and O elements of a row
//     are read from the swizzled [16][D] tiles with one 4/8/16-byte shared load per lane
//     (a warp reads one whole row: conflict-free);
//   - QK^T: per row, 16 partial dots (one per key) per lane, summed across the warp by a
//     transposing butterfly (8+4+2+1 shuffles + 1) that leaves key lane/2's dot on lane l;
//   - online softmax on those per-lane logits (max by 4 xor shuffles; the running sum l is
//     kept per lane for its own key and summed once in store());
//   - PV: for each key, P broadcast from lane 2*key, O[row][dims] += p * V[key][dims].
// Rows are a runtime count (nrows = the item's rows, <= 16): fully unrolled loops over 16 rows
// with a uniform guard, so every state array is indexed at compile time (registers). Rows go
// in pairs that share each K / V shared-memory read (group 2 costs ~1.5x group 1, not 2x).
// Per lane: O 16 x E fp32 (16/64/... the same as the tensor-core path's D/2) + m, l 2 x 16.
#pragma once
#include "decode/decode_pipeline.cuh"

namespace weft::decode {

// Two 16-bit values (element 0 in the low half) -> float2.
template <class T>
__device__ __forceinline__ float2 unpack2(uint32_t u);
template <>
__device__ __forceinline__ float2 unpack2<__nv_bfloat16>(uint32_t u) {
  return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
}
template <>
__device__ __forceinline__ float2 unpack2<half>(uint32_t u) {
  __half2 h;
  *reinterpret_cast<uint32_t*>(&h) = u;
  return __half22float2(h);
}

template <class T, int D, class V>
struct CcMainloop {
  using Variant = V;  // logits: V::logit (attention/variant.cuh)
  static constexpr bool kReadsFp8 = false;  // fp8 tiles are widened first (decode_items)
  static constexpr int E = D / 32;  // head dims per lane
  static_assert(E == 2 || E == 4 || E == 8, "head_dim must be 64, 128 or 256");
  float acc[kTileQ][E];             // unnormalised O of row r, dims [lane*E, lane*E + E)
  float m[kTileQ];                  // running max per row (log2 units), same on every lane
  float l[kTileQ];                  // running sum per row over this lane's key (lane / 2)
  RowSpan rs;                       // the item's rows (used only by variants with a bias)

  __device__ __forceinline__ CcMainloop(const T* /*sQ*/, int /*lane*/, RowSpan rows) : rs(rows) {
#pragma unroll
    for (int r = 0; r < kTileQ; ++r) {
      m[r] = -INFINITY;
      l[r] = 0.f;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[r][e] = 0.f;
    }
  }

  // This lane's E elements of row `row` of a swizzled [16][D] tile, as floats.
  static __device__ __forceinline__ void load_row(const T* tile, int row, int lane, float (&v)[E]) {
    const int d0 = lane * E;
    const T* src = tile + swz<D>(row, d0 / 8) + d0 % 8;
    if constexpr (E == 8) {
      const uint4 u = *reinterpret_cast<const uint4*>(src);
      const float2 a = unpack2<T>(u.x), b = unpack2<T>(u.y), c = unpack2<T>(u.z), d = unpack2<T>(u.w);
      v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y; v[4] = c.x; v[5] = c.y; v[6] = d.x; v[7] = d.y;
    } else if constexpr (E == 4) {
      const uint2 u = *reinterpret_cast<const uint2*>(src);
      const float2 a = unpack2<T>(u.x), b = unpack2<T>(u.y);
      v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y;
    } else {
      const float2 a = unpack2<T>(*reinterpret_cast<const uint32_t*>(src));
      v[0] = a.x; v[1] = a.y;
    }
  }

  // One butterfly step: keep v[0..w) or v[w..2w) (lane bit `off` selects the upper half),
  // send the other half to the partner lane ^ off and add what it sends.
  template <int w, int off>
  static __device__ __forceinline__ void reduce_step(float (&v)[kWarpKeys], int lane) {
    const bool upper = (lane & off) != 0;
#pragma unroll
    for (int i = 0; i < w; ++i) {
      const float send = upper ? v[i] : v[i + w];
      const float keep = upper ? v[i + w] : v[i];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, off);
    }
  }
  // v[k]: this lane's partial dot for key k (k < 16). Returns the warp-wide sum for key
  // lane / 2: steps xor 16, 8, 4, 2 keep the keys selected by lane bits 4, 3, 2, 1 (15
  // shuffles), then lanes 2k and 2k+1 add (1 shuffle), instead of 16 x 5 for 16 reductions.
  static __device__ __forceinline__ float transpose_reduce(float (&v)[kWarpKeys], int lane) {
    static_assert(kWarpKeys == 16, "the butterfly below is written for 16 keys on 32 lanes");
    reduce_step<8, 16>(v, lane);
    reduce_step<4, 8>(v, lane);
    reduce_step<2, 4>(v, lane);
    reduce_step<1, 2>(v, lane);
    return v[0] + __shfl_xor_sync(0xffffffffu, v[0], 1);
  }

  // Online-softmax update of row r with this lane's logit s (key lane / 2); returns P.
  __device__ __forceinline__ float softmax_row(int r, float s) {
    float mx = fmaxf(s, __shfl_xor_sync(0xffffffffu, s, 2));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
    const float m_new = fmaxf(m[r], mx);
    const float m_use = m_new == -INFINITY ? 0.f : m_new;  // all masked so far: keep 0s
    const float scale = ptx::exp2_approx(m[r] - m_use);
    m[r] = m_new;
    const float pv = ptx::exp2_approx(s - m_use);  // 0 for masked keys (zero-filled V)
    l[r] = l[r] * scale + pv;
#pragma unroll
    for (int e = 0; e < E; ++e) acc[r][e] *= scale;
    return pv;
  }

  // Rows r .. r + NR - 1 (NR = 1 or 2) of one 16-key tile: each K / V row read from shared
  // memory (and converted) once for NR query rows.
  template <int NR, class P>
  __device__ __forceinline__ void rows(const P& p, const T* sQ, const T* sK, const T* sV, int r,
                                       int key, bool key_valid, int lane) {
    float q[NR][E];
#pragma unroll
    for (int j = 0; j < NR; ++j) load_row(sQ, r + j, lane, q[j]);
    float part[NR][kWarpKeys];
#pragma unroll
    for (int k = 0; k < kWarpKeys; ++k) {
      float kv[E];
      load_row(sK, k, lane, kv);
#pragma unroll
      for (int j = 0; j < NR; ++j) {
        float s = 0.f;
#pragma unroll
        for (int e = 0; e < E; ++e) s = fmaf(q[j][e], kv[e], s);
        part[j][k] = s;
      }
    }
    // Logits from the variant (scale, soft cap, bias) of key k0 + lane / 2; the row's constants
    // (ALiBi: its head's slope) are looked up per tile, not held across the KV loop (this
    // kernel's per-row state is already at the register limit).
    const V v = make_variant<V>(p, rs);
    float pv[NR];
#pragma unroll
    for (int j = 0; j < NR; ++j) {
      const float qk = transpose_reduce(part[j], lane);
      const typename V::Row vr = v.row(rs.q_pos, rs.head0 + r + j);
      pv[j] = softmax_row(r + j, key_valid ? v.logit(qk, vr, key) : -INFINITY);
    }
#pragma unroll
    for (int k = 0; k < kWarpKeys; ++k) {
      float vv[E];
      load_row(sV, k, lane, vv);
#pragma unroll
      for (int j = 0; j < NR; ++j) {
        const float pk = __shfl_sync(0xffffffffu, pv[j], 2 * k);
#pragma unroll
        for (int e = 0; e < E; ++e) acc[r + j][e] = fmaf(pk, vv[e], acc[r + j][e]);
      }
    }
  }

  template <class P>
  __device__ __forceinline__ void tile(const P& p, const T* sQ, const T* sK, const T* sV, int k0,
                                       int kv_end, int nrows, int lane) {
    const int key = k0 + (lane >> 1);
    const bool key_valid = key < kv_end;
    // Rows in pairs (an odd last row alone); the guards are uniform across the warp.
#pragma unroll
    for (int r = 0; r < kTileQ; r += 2) {
      if (r >= nrows) break;
      if (r + 1 < nrows)
        rows<2>(p, sQ, sK, sV, r, key, key_valid, lane);
      else
        rows<1>(p, sQ, sK, sV, r, key, key_valid, lane);
    }
  }

  // Per-warp state -> shared memory (red_o [W][16][D], red_m / red_l [W][16]), rows < nrows.
  // Items have <= 16 rows here (QR = 16): one epilogue round.
  __device__ __forceinline__ void store(float* red_o, float* red_m, float* red_l, int warp, int lane, int nrows,
                                        int /*round*/) {
#pragma unroll
    for (int r = 0; r < kTileQ; ++r) {
      if (r >= nrows) break;
      float lr = l[r];  // lanes 2k and 2k+1 hold key k's share: sum over lane bits 1..4
      lr += __shfl_xor_sync(0xffffffffu, lr, 2);
      lr += __shfl_xor_sync(0xffffffffu, lr, 4);
      lr += __shfl_xor_sync(0xffffffffu, lr, 8);
      lr += __shfl_xor_sync(0xffffffffu, lr, 16);
      float* dst = red_o + (warp * kTileQ + r) * D + lane * E;
      if constexpr (E == 8) {
        reinterpret_cast<float4*>(dst)[0] = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
        reinterpret_cast<float4*>(dst)[1] = make_float4(acc[r][4], acc[r][5], acc[r][6], acc[r][7]);
      } else if constexpr (E == 4) {
        *reinterpret_cast<float4*>(dst) = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
      } else {
        *reinterpret_cast<float2*>(dst) = make_float2(acc[r][0], acc[r][1]);
      }
      if (lane == 0) {
        red_m[warp * kTileQ + r] = m[r];
        red_l[warp * kTileQ + r] = lr;
      }
    }
  }
};

// V: the attention variant (attention/variant.cuh; DefaultVariant or AlibiVariant).
// KV: the pools' element type (T, or an fp8 type: DecodeParams).
template <class T, int D, class V = attn::DefaultVariant, class KV = T>
__global__ void __launch_bounds__(kMaxThreads, 1) decode_cc_kernel(const DecodeParams<T, KV> p) {
  decode_items<T, D, kTileQ, CcMainloop<T, D, V>>(p);
  if (blockIdx.x == gridDim.x - 1) ptx::grid_dependency_wait();  // as decode_tc_kernel
}

}  // namespace weft::decode
