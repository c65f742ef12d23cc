// float64 reference for attention with a caller-defined logit (weft::jit variants, weft/jit.h):
// for query i of request b (absolute position p = kv_len - q_len + i) and key j,
//   score = sm_scale * <q_i, k_j>,  l_ij = logit(score, p, j, qo_head)  (natural log; -inf masks),
// the causal / window masks of `opt` applied on top, then
//   normalize:  O_i = sum_j exp(l_ij) v_j / sum_j exp(l_ij)   (softmax)
//   otherwise:  O_i = sum_j exp(l_ij) v_j                     (e.g. sigmoid attention)
// and LSE_i = log sum_j exp(l_ij) in both cases (-inf and O = 0 when nothing is attended).
#pragma once
#include <cstdint>
#include <functional>

#include "reference/attention.h"

namespace weft::ref {

using LogitFn = std::function<double(double score, int64_t q_pos, int64_t k_pos, int64_t qo_head)>;
Result attention_custom_logits(const RaggedQ& q, const RaggedKV& kv, const Options& opt, const LogitFn& logit,
                               bool normalize);

}  // namespace weft::ref
