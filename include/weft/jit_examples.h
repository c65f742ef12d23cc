// Built-in example variants for weft::jit (weft/jit.h), written against the user contract: each
// returns the VariantSource and has a host parameter struct laid out like the source's `Params`.
// Tested against float64 references in decode and prefill (tests/gpu/jit/).
#pragma once
#include <cstdint>

#include "weft/jit.h"

namespace weft WEFT_API {
namespace jit {
namespace examples {

// The default variant (no hooks): the built-in kernels' code, compiled by NVRTC.
inline VariantSource default_variant() {
  VariantSource s;
  s.source = "struct Params {};\nstruct Variant : weft::jit::VariantBase<Params> {};\n";
  s.name = "default_variant.cu";
  return s;
}

// Sigmoid attention: O_i = sum_j sigmoid(scale * score_ij + bias) v_j, no softmax normalization
// (score = sm_scale * <q_i, k_j>). The logit hook returns log(sigmoid(x)) (kSoftmax = false: run()
// needs an lse output).
struct SigmoidParams {
  float scale;
  float bias;
};
inline VariantSource sigmoid() {
  VariantSource s;
  s.source = R"(struct Params {
  float scale;
  float bias;
};
struct Variant : weft::jit::VariantBase<Params> {
  static constexpr bool kSoftmax = false;
  __device__ float logit(float score, const Row&, int) const {
    const float x = params.scale * score + params.bias;
    // log(sigmoid(x)) = -log(1 + exp(-x)), in the form that neither overflows nor cancels
    return x < 0.f ? x - log1pf(expf(x)) : -log1pf(expf(-x));
  }
};
)";
  s.params_size = sizeof(SigmoidParams);
  s.params_align = alignof(SigmoidParams);
  s.name = "sigmoid.cu";
  return s;
}

// Distance bias (ALiBi-like, from a table): logit = score + table[h][min(|q - k|, max_distance - 1)],
// table: DEVICE pointer to num_qo_heads * max_distance floats (natural-log units). The query hook
// resolves the head's table row once per row.
struct DistanceBiasParams {
  const float* table;
  int32_t max_distance;
  int32_t pad;
};
inline VariantSource distance_bias() {
  VariantSource s;
  s.source = R"(struct Params {
  const float* table;
  int max_distance;
  int pad;
};
struct Variant : weft::jit::VariantBase<Params> {
  struct Row {
    const float* bias;  // this head's row of the table
    int q_pos;
  };
  __device__ Row row(int q_pos, int qo_head) const {
    Row r;
    r.bias = params.table + static_cast<long long>(qo_head) * params.max_distance;
    r.q_pos = q_pos;
    return r;
  }
  __device__ float logit(float score, const Row& r, int k_pos) const {
    int d = r.q_pos - k_pos;
    d = d < 0 ? -d : d;
    d = d < params.max_distance ? d : params.max_distance - 1;
    return score + __ldg(r.bias + d);
  }
};
)";
  s.params_size = sizeof(DistanceBiasParams);
  s.params_align = alignof(DistanceBiasParams);
  s.name = "distance_bias.cu";
  return s;
}

// Soft cap as a user variant: logit = cap * tanh(score / cap).
struct SoftCapParams {
  float cap;
};
inline VariantSource soft_cap() {
  VariantSource s;
  s.source = R"(struct Params {
  float cap;
};
struct Variant : weft::jit::VariantBase<Params> {
  __device__ float logit(float score, const Row&, int) const { return params.cap * tanhf(score / params.cap); }
};
)";
  s.params_size = sizeof(SoftCapParams);
  s.params_align = alignof(SoftCapParams);
  s.name = "soft_cap.cu";
  return s;
}

}  // namespace examples
}  // namespace jit
}  // namespace weft
