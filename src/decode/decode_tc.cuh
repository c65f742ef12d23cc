// Internal: tensor-core GQA-fused decode path (mma.sync m16n8k16), the Mainloop policy of
// decode_items (decode_pipeline.cuh: persistent CTAs, warp-owned 16-key tiles, per-warp
// cp.async pipelines).
//
// Operands are swapped against prefill ("S^T = K Q^T", "O^T = V^T P^T"): the tile's 16 keys are
// the mma M dimension and the group's query heads the N dimension, NT n8 tiles of them
// (NT = 1 for GQA groups <= 8, 2 for 9..16, 4 for the 32-row items of larger groups). Decode has at most 16 query rows per KV head and
// usually 1..8, so putting them in M (16 rows, as the first version did) padded a group of 4 to
// 16 rows; in N a group of <= 8 needs one n8 tile. Per warp tile (D = 128, NT = 1) that is 8 mma
// for K Q^T + 8 for V^T P^T (was 16 + 16), and O^T is D x 8 fp32 = 32 registers per lane (was 64).
// Each K/V row is still read from HBM once per KV head and shared by all heads of the group.
//   S^T = K Q^T:   A = K tile [16 keys][16 dims] (ldmatrix), B = Q^T (Q rows via ldmatrix,
//                  kept in registers); two accumulator chains (even / odd k steps) halve the
//                  dependent mma chain.
//   softmax:       per query column; lane holds keys lane/4 and lane/4 + 8 of queries
//                  nt*8 + 2*(lane%4) + {0,1}; max over keys by 3 xor shuffles (4, 8, 16); the
//                  running sum l stays per lane (its two keys) and is reduced once in store().
//   O^T += V^T P^T: A = V^T via ldmatrix.trans of V rows, B = P^T: the S^T accumulators packed
//                  to 16 bits and transposed in registers by movmatrix (no shared memory).
// fp8 pools (KV = __nv_fp8_e4m3 / e5m2, head_dim 128): the A fragments come straight from the fp8
// tile (kv_issue's swizzled [16][D] bytes), widened in registers (fp8_bits.h), half the ldmatrix
// of the 16-bit tiles and no shared-memory pass. ldmatrix moves 16-bit units = PAIRS of fp8
// values, so two index maps change (both exact: a sum over head dims may take them in any order
// that Q and K share, and an output row may be stored wherever its dim is):
//   K Q^T: lane (g, c) = (lane / 4, lane % 4) gets bytes 4c .. 4c + 3 of a 16-dim chunk of row g;
//          k positions {2c, 2c + 1} <- dims 4c, 4c + 1 and {2c + 8, 2c + 9} <- dims 4c + 2, 4c + 3,
//          and Q's B fragments are loaded with the same map (load_q_fp8);
//   V^T P^T: ldmatrix.trans of 8 keys x 16 dims gives lane (g, c) keys 2c, 2c + 1 at dims 2g,
//          2g + 1: M row g of m-tile md <- dim 16 md + 2g, M row g + 8 <- dim 16 md + 2g + 1
//          (store() writes O^T rows to those dims); keys keep their order (P^T unchanged).
#pragma once
#include "decode/decode_pipeline.cuh"

namespace weft::decode {

// Whether variant v's logits take the soft cap (variants with attn::VariantParams p: soft_cap > 0;
// others, such as JIT variants: assumed, so tile() keeps one copy of their logit code).
template <class V, class = void>
struct HasSoftCapParam : cuda::std::false_type {};
template <class V>
struct HasSoftCapParam<V, cuda::std::void_t<decltype(cuda::std::declval<const V&>().p.soft_cap)>>
    : cuda::std::true_type {};
template <class V>
__device__ __forceinline__ bool soft_cap_on(const V& v) {
  if constexpr (HasSoftCapParam<V>::value)
    return v.p.soft_cap > 0.f;
  else
    return true;
}

template <class T, int D, int NT, class V, class KV = T>
struct TcMainloop {
  using Variant = V;  // logits: V::logit (attention/variant.cuh)
  // fp8 tiles are read as fp8 (see the header comment); decode_items then skips dequant_tile.
  static constexpr bool kReadsFp8 = !cuda::std::is_same<T, KV>::value;
  static_assert(!kReadsFp8 || D == 128, "fp8 fragments: the 128-byte swizzled rows of head_dim 128");
  static_assert(NT == 1 || NT == 2 || NT == 4, "query columns: 1, 2 or 4 n8 tiles (items of <= 32 rows)");
  static constexpr int kK = D / 16;  // k16 steps of K Q^T over head_dim
  static constexpr int kM = D / 16;  // m16 tiles of O^T over head_dim
  // Q^T fragments in registers when they cost <= 32 registers (D <= 128, or D 256 with NT 1);
  // otherwise re-read from shared memory each tile (D 256, NT 2 already holds 128 for O^T).
  static constexpr bool kQInRegs = kK * NT * 2 <= 32;
  float acc[kM][NT][4];  // O^T: dim m*16 + lane/4 (+8 for e >= 2), query nt*8 + 2*(lane%4) + (e & 1)
  float m[NT][2];        // running max of query nt*8 + 2*(lane%4) + j, log2 units (same on its 8 lanes)
  float l[NT][2];        // running sum over this lane's two keys (reduced in store())
  uint32_t qf[kQInRegs ? kK : 1][kQInRegs ? NT : 1][2];
  RowSpan rs;            // the item's rows (used only by variants with a bias)

  // B fragments of Q^T for k steps kk and kk + 1 (kK is even): one ldmatrix.x4 over query rows
  // nt*8 .. nt*8 + 7, 16-byte chunks 2kk .. 2kk + 3.
  static __device__ __forceinline__ void load_q_pair(const T* sQ, int kk, int nt, int lane, uint32_t (&b0)[2],
                                                     uint32_t (&b1)[2]) {
    uint32_t r[4];
    ptx::ldmatrix_x4(r, sQ + swz<D>(nt * 8 + lane % 8, kk * 2 + lane / 8));
    b0[0] = r[0]; b0[1] = r[1]; b1[0] = r[2]; b1[1] = r[3];
  }

  // fp8: B fragments of Q^T for k step kk in the permuted dim order (header comment): dims
  // 16 kk + 4c .. + 3 of query row nt*8 + g, one 8-byte load.
  static __device__ __forceinline__ void load_q_fp8(const T* sQ, int kk, int nt, int lane, uint32_t (&b)[2]) {
    const int c = lane % 4;
    const uint2 u = *reinterpret_cast<const uint2*>(sQ + swz<D>(nt * 8 + lane / 4, 2 * kk + (c >> 1)) + 4 * (c & 1));
    b[0] = u.x;
    b[1] = u.y;
  }

  __device__ __forceinline__ TcMainloop(const T* sQ, int lane, RowSpan rows) : rs(rows) {
#pragma unroll
    for (int md = 0; md < kM; ++md)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) acc[md][nt][0] = acc[md][nt][1] = acc[md][nt][2] = acc[md][nt][3] = 0.f;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      m[nt][0] = m[nt][1] = -INFINITY;
      l[nt][0] = l[nt][1] = 0.f;
    }
    if constexpr (kQInRegs) {
#pragma unroll
      for (int kk = 0; kk < kK; kk += 2)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          if constexpr (kReadsFp8) {
            load_q_fp8(sQ, kk, nt, lane, qf[kk][nt]);
            load_q_fp8(sQ, kk + 1, nt, lane, qf[kk + 1][nt]);
          } else {
            load_q_pair(sQ, kk, nt, lane, qf[kk][nt], qf[kk + 1][nt]);
          }
        }
    }
  }

  template <class P>
  __device__ __forceinline__ void tile(const P& p, const T* sQ, const T* sK, const T* sV, int k0,
                                       int kv_end, int nrows, int lane) {
    // S^T = K Q^T: [16 keys][NT * 8 queries], accumulated in two chains (even / odd kk) for
    // NT <= 2; at NT = 4 the four n8 tiles are already independent mma chains, and a second
    // chain's 16 registers would spill (the 32-row kernel sits at the 255-register cap).
    constexpr int kChains = NT >= 4 ? 1 : 2;
    float s[kChains][NT][4];
#pragma unroll
    for (int c = 0; c < kChains; ++c)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) s[c][nt][0] = s[c][nt][1] = s[c][nt][2] = s[c][nt][3] = 0.f;
    // This lane's ldmatrix row: row lane%8 of matrix j = lane / 8 of the x4. Its offsets for the
    // k step pair kk from the first pair's by a constant XOR (swz_add: chunks kk*2 = 0 ^ kk*2).
    const int j = lane / 8;
    const int k_off0 = kReadsFp8 ? fp8_swz<D>(lane % 8 + (j % 2) * 8, j / 2) : swz<D>(lane % 8 + (j % 2) * 8, j / 2);
#pragma unroll
    for (int kk = 0; kk < kK; kk += 2) {
      uint32_t a0[4], a1[4];
      if constexpr (kReadsFp8) {
        // Matrices (rows 0-7 | 8-15) x (chunks kk | kk + 1): both k steps in one ldmatrix.
        uint32_t r[4];
        ptx::ldmatrix_x4(r, fp8_tile<D>(sK) + fp8_swz_add<D>(k_off0, 0, kk));
        a0[0] = widen_fp8_pair<T, KV>(__byte_perm(r[0], 0u, 0x1404));
        a0[1] = widen_fp8_pair<T, KV>(__byte_perm(r[1], 0u, 0x1404));
        a0[2] = widen_fp8_pair<T, KV>(__byte_perm(r[0], 0u, 0x3424));
        a0[3] = widen_fp8_pair<T, KV>(__byte_perm(r[1], 0u, 0x3424));
        a1[0] = widen_fp8_pair<T, KV>(__byte_perm(r[2], 0u, 0x1404));
        a1[1] = widen_fp8_pair<T, KV>(__byte_perm(r[3], 0u, 0x1404));
        a1[2] = widen_fp8_pair<T, KV>(__byte_perm(r[2], 0u, 0x3424));
        a1[3] = widen_fp8_pair<T, KV>(__byte_perm(r[3], 0u, 0x3424));
      } else {
        ptx::ldmatrix_x4(a0, sK + swz_add<D>(k_off0, 0, kk * 2));
        ptx::ldmatrix_x4(a1, sK + swz_add<D>(k_off0, 0, kk * 2 + 2));
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        if constexpr (kQInRegs) {
          ptx::mma_16816<T>(s[0][nt], a0, qf[kk][nt]);
          ptx::mma_16816<T>(s[kChains - 1][nt], a1, qf[kk + 1][nt]);
        } else {
          uint32_t b0[2], b1[2];
          if constexpr (kReadsFp8) {
            load_q_fp8(sQ, kk, nt, lane, b0);
            load_q_fp8(sQ, kk + 1, nt, lane, b1);
          } else {
            load_q_pair(sQ, kk, nt, lane, b0, b1);
          }
          ptx::mma_16816<T>(s[0][nt], a0, b0);
          ptx::mma_16816<T>(s[kChains - 1][nt], a1, b1);
        }
      }
    }

    // Logits (the variant: scale, soft cap, bias; keys past kv_end masked) and online softmax
    // per query column.
    const V v = make_variant<V>(p, rs);
    const int key_lo = k0 + lane / 4;  // accumulator elements 0, 1; elements 2, 3 are key_lo + 8
    uint32_t pb[NT][2];                // B fragments of P^T for the PV mma
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      // Per-column constants of the logit (ALiBi: the head's slope), for query columns
      // nt*8 + 2*(lane%4) + {0, 1}; padding columns (>= nrows) take the last real row's head.
      typename V::Row vr[2];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        if constexpr (V::kHasBias) {
          const int q = min(nt * 8 + 2 * (lane % 4) + j, nrows - 1);
          vr[j] = v.row(rs.q_pos, rs.head0 + q);
        } else {
          vr[j] = v.row(0, 0);
        }
      }
      float pr[4];
      auto logits = [&] {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key_lo + (e >> 1) * 8;
          const float qk = kChains == 2 ? s[0][nt][e] + s[kChains - 1][nt][e] : s[0][nt][e];
          pr[e] = key < kv_end ? v.logit(qk, vr[e & 1], key) : -INFINITY;
        }
      };
      // The variant's soft-cap test taken once for the 4 logits: inside each branch the compiler
      // folds the logit's own test, where it was a uniform branch (and a constant load of the
      // scale) per element. The same function of the same values: the same bits.
      if (soft_cap_on(v))
        logits();
      else
        logits();
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        float mx = fmaxf(pr[j], pr[2 + j]);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
        const float m_new = fmaxf(m[nt][j], mx);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;  // all masked so far: keep 0s
        const float scale = ptx::exp2_approx(m[nt][j] - m_use);
        m[nt][j] = m_new;
        pr[j] = ptx::exp2_approx(pr[j] - m_use);
        pr[2 + j] = ptx::exp2_approx(pr[2 + j] - m_use);
        l[nt][j] = l[nt][j] * scale + pr[j] + pr[2 + j];
#pragma unroll
        for (int md = 0; md < kM; ++md) {
          acc[md][nt][j] *= scale;
          acc[md][nt][2 + j] *= scale;
        }
      }
      // P^T as the k16 x n8 B operand: keys 0-7 (elements 0, 1) and 8-15 (2, 3), each an 8x8
      // [key][query] block in the accumulator layout; B wants [query][key] blocks: transpose.
      pb[nt][0] = ptx::movmatrix_trans(ptx::pack2<T>(pr[0], pr[1]));
      pb[nt][1] = ptx::movmatrix_trans(ptx::pack2<T>(pr[2], pr[3]));
    }

    // O^T += V^T P^T: A = V^T (m16 dims x k16 keys) by ldmatrix.trans of the V rows.
    if constexpr (kReadsFp8) {
      // Matrices (keys 0-7 | 8-15) x (chunks md | md + 1): two m16 tiles per ldmatrix.trans;
      // lane (g, c) holds keys 2c, 2c + 1 (+8) at dims 2g (bytes 0, 2) and 2g + 1 (bytes 1, 3).
      const int v_off0 = fp8_swz<D>(lane % 8 + (j % 2) * 8, j / 2);  // chunk md + j/2 = j/2 ^ md (md even)
#pragma unroll
      for (int md = 0; md < kM; md += 2) {
        uint32_t r[4];
        ptx::ldmatrix_x4_trans(r, fp8_tile<D>(sV) + fp8_swz_add<D>(v_off0, 0, md));
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          uint32_t a[4];
          a[0] = widen_fp8_pair<T, KV>(__byte_perm(r[2 * h], 0u, 0x2404));      // M row g: dim 2g
          a[1] = widen_fp8_pair<T, KV>(__byte_perm(r[2 * h], 0u, 0x3414));      // M row g + 8: dim 2g + 1
          a[2] = widen_fp8_pair<T, KV>(__byte_perm(r[2 * h + 1], 0u, 0x2404));  // keys 8-15
          a[3] = widen_fp8_pair<T, KV>(__byte_perm(r[2 * h + 1], 0u, 0x3414));
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) ptx::mma_16816<T>(acc[md + h][nt], a, pb[nt]);
        }
      }
    } else {
      const int v_off0 = swz<D>(lane % 8 + (j / 2) * 8, j % 2);  // chunk md*2 + j%2 = j%2 ^ md*2
#pragma unroll
      for (int md = 0; md < kM; ++md) {
        uint32_t a[4];
        ptx::ldmatrix_x4_trans(a, sV + swz_add<D>(v_off0, 0, md * 2));
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) ptx::mma_16816<T>(acc[md][nt], a, pb[nt]);
      }
    }
  }

  // Per-warp state of query rows round * 16 .. + 15 (n8 tiles 2 * round and 2 * round + 1), rows
  // < nrows -> shared memory (red_o [W][16][D], red_m / red_l [W][16], at row q - 16 * round).
  __device__ __forceinline__ void store(float* red_o, float* red_m, float* red_l, int warp, int lane, int nrows,
                                        int round) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        if (nt / 2 != round) continue;
        float lq = l[nt][j];  // the 8 lanes of this query column hold two keys each
        lq += __shfl_xor_sync(0xffffffffu, lq, 4);
        lq += __shfl_xor_sync(0xffffffffu, lq, 8);
        lq += __shfl_xor_sync(0xffffffffu, lq, 16);
        const int q = nt * 8 + (lane % 4) * 2 + j;
        if (q >= nrows) continue;
        const int qr = q - round * kTileQ;
        // M rows g and g + 8 of m-tile md: dims 16 md + g and + 8 (fp8: 16 md + 2g and + 1).
        float* dst = red_o + (warp * kTileQ + qr) * D + (kReadsFp8 ? 2 * (lane / 4) : lane / 4);
        constexpr int kHi = kReadsFp8 ? 1 : 8;
#pragma unroll
        for (int md = 0; md < kM; ++md) {
          dst[md * 16] = acc[md][nt][j];
          dst[md * 16 + kHi] = acc[md][nt][2 + j];
        }
        if (lane < 4) {
          red_m[warp * kTileQ + qr] = m[nt][j];
          red_l[warp * kTileQ + qr] = lq;
        }
      }
  }
};

// NT: query n8 tiles: 1 for GQA groups <= 8, 2 for 9..16 (and the 16-row tiles of larger groups
// at head_dim 256), 4 for the 32-row items of groups > 16 at head_dim <= 128 (decode_tile_rows).
// V: the attention variant (attention/variant.cuh; DefaultVariant or AlibiVariant).
// kPacked: the generic item path (decode_items); its rows may come from several requests, so a
// variant whose logit depends on the query position (ALiBi) is not supported there yet.
// KV: the pools' element type (T, or an fp8 type: DecodeParams).
template <class T, int D, int NT, class V = attn::DefaultVariant, bool kPacked = false, class KV = T>
__global__ void __launch_bounds__(kMaxThreads, 1) decode_tc_kernel(const DecodeParams<T, KV> p) {
  static_assert(!kPacked || !V::kHasBias, "generic items: one query position per item row is not tracked");
  decode_items<T, D, NT == 4 ? 2 * kTileQ : kTileQ, TcMainloop<T, D, NT, V, KV>, kPacked>(p);
  // Launched programmatically (LaunchArgs::programmatic): the grid completes only after the one
  // before it (the last CTA, dispatched last, waits for it; a no-op in any other launch).
  if (blockIdx.x == gridDim.x - 1) ptx::grid_dependency_wait();
}

}  // namespace weft::decode
