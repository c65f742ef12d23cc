// Device side of weft::jit (include/weft/jit.h): the base a user's variant derives from, and the
// adapter that turns it into a kernel variant (attention/variant.cuh interface) for the decode
// mainloops and the FA2 prefill kernel. Compiled only by NVRTC, inside the kernel source that
// src/jit/kernel_source.cpp generates (the user's source follows this header).
#pragma once
#include <cuda/std/type_traits>
#include <cuda/std/utility>

#include "attention/variant.cuh"
#include "common/rtc_compat.h"
#include "common/types.cuh"

namespace weft::jit {

// The default per-row state of a user variant: where the query row is.
struct QueryRow {
  int q_pos;    // absolute KV position of the query token
  int qo_head;  // query head
};

// The base of every user variant (contract: include/weft/jit.h). P: its parameter struct.
template <class P>
struct VariantBase {
  using Params = P;
  using Row = QueryRow;
  static constexpr bool kSoftmax = true;
  P params;        // the plan's parameters (by value, from the kernel parameters)
  float sm_scale;  // the AttentionVariant's sm_scale (0 there: 1 / sqrt(head_dim))
  __device__ __forceinline__ Row row(int q_pos, int qo_head) const {
    Row r;
    r.q_pos = q_pos;
    r.qo_head = qo_head;
    return r;
  }
};

// Which optional hooks a user variant U defines (an omitted one keeps the built-in behaviour).
template <class U, class = void>
struct HasLogit : cuda::std::false_type {};
template <class U>
struct HasLogit<U, cuda::std::void_t<decltype(cuda::std::declval<const U&>().logit(
                       0.f, cuda::std::declval<const typename U::Row&>(), 0))>> : cuda::std::true_type {};
template <class U, class = void>
struct HasMask : cuda::std::false_type {};
template <class U>
struct HasMask<U, cuda::std::void_t<decltype(cuda::std::declval<const U&>().mask(
                      cuda::std::declval<const typename U::Row&>(), 0))>> : cuda::std::true_type {};

// The kernels' variant around user variant U. With a logit or mask hook it is a bias variant
// (kHasBias: the kernels compute positions and heads, call row() once per row and logit() per
// element, in log2 units); without hooks it is exactly the built-in DefaultVariant (the same
// kernel code as the ahead-of-time default kernels). Built-in masks (causal, window, custom) and
// the planners' KV trimming are DefaultVariant's, unchanged.
template <class U>
struct Adapter : attn::DefaultVariant {
  static constexpr bool kLogit = HasLogit<U>::value;
  static constexpr bool kMask = HasMask<U>::value;
  static constexpr bool kHasBias = kLogit || kMask;
  static constexpr bool kSoftmax = U::kSoftmax;
  U u;

  __device__ __forceinline__ Adapter(const attn::VariantParams& vp, const typename U::Params& up, float sm_scale)
      : DefaultVariant(vp) {
    u.params = up;
    u.sm_scale = sm_scale;
  }

  struct Row {
    typename U::Row r;
  };
  __device__ __forceinline__ Row row(int q_pos, int qo_head) const {
    Row x;
    x.r = u.row(q_pos, qo_head);
    return x;
  }
  __device__ __forceinline__ bool folds_scale() const { return kHasBias ? false : DefaultVariant::folds_scale(); }
  __device__ __forceinline__ float masked_logit(float l, const Row& x, int k_pos) const {
    if constexpr (kMask) {
      if (!u.mask(x.r, k_pos)) l = -INFINITY;
    }
    return l;
  }
  __device__ __forceinline__ float logit(float raw, const Row& x, int k_pos) const {
    if constexpr (kLogit) return masked_logit(u.logit(raw * u.sm_scale, x.r, k_pos) * attn::kLog2e, x, k_pos);
    else return masked_logit(transform(raw), x, k_pos);
  }
  __device__ __forceinline__ float logit_mul(float raw, const Row& x, int k_pos) const {
    if constexpr (kLogit) return logit(raw, x, k_pos);
    else return masked_logit(transform_mul(raw), x, k_pos);
  }
  __device__ __forceinline__ float logit(float raw, int q_pos, int k_pos, int qo_head) const {
    return logit(raw, row(q_pos, qo_head), k_pos);
  }
};

// A JIT kernel's parameters: the built-in kernel's parameters, then the user's (one struct, so
// the adapter finds them at a fixed offset after the base). B: decode::DecodeParams<T> or
// prefill::PrefillParams. The host builds the same bytes (src/jit/jit.cpp param_bytes()).
template <class B, class P>
struct JitParams {
  B base;
  P user;
};

// Output hook of variants without softmax normalization (U::kSoftmax false): O_i *= exp(LSE_i)
// turns the softmax output sum_j exp(l_ij) v_j / Z_i into sum_j exp(l_ij) v_j (Z_i = exp(LSE_i)).
// One warp per (token, head) row; a row with LSE -inf (nothing attended) stays 0.
template <class T>
__device__ __forceinline__ void scale_rows_by_lse(T* o, long long o_stride_token, long long o_stride_head,
                                                  const float* lse, long long lse_stride_token, int tokens,
                                                  int heads, int head_dim) {
  const int warps = blockDim.x / 32;
  const long long row = static_cast<long long>(blockIdx.x) * warps + threadIdx.x / 32;
  if (row >= static_cast<long long>(tokens) * heads) return;
  const long long t = row / heads, h = row % heads;
  const float z = expf(lse[t * lse_stride_token + h]);
  T* orow = o + t * o_stride_token + h * o_stride_head;
  for (int d = threadIdx.x % 32; d < head_dim; d += 32)
    orow[d] = detail::from_float<T>(detail::to_float(orow[d]) * z);
}

}  // namespace weft::jit

// Decode kernels build their variant from DecodeParams<T> (attention/variant.cuh): the JIT
// kernel's parameter object is a JitParams whose first member is that DecodeParams.
namespace weft::attn {
template <class U>
struct VariantFactory<jit::Adapter<U>> {
  template <class KP>
  static __device__ __forceinline__ jit::Adapter<U> make(const KP& kp) {
    const auto& jp = reinterpret_cast<const jit::JitParams<KP, typename U::Params>&>(kp);
    return jit::Adapter<U>(kp.var, jp.user, kp.var.sm_scale);
  }
};
}  // namespace weft::attn
