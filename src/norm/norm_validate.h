// Internal, host-only: argument checks shared by the norm entry points and the fused
// all-reduce + RMSNorm (comm). Each throws weft::Error naming the argument.
#pragma once
#include <cstdint>

#include "weft/tensor.h"

namespace weft::norm_detail {

// hidden: multiple of 8 (16-byte vectors of f16/bf16) in [8, kNormMaxHidden].
void check_hidden(int64_t hidden, const char* name);
// eps: finite and > 0.
void check_eps(double eps, const char* name);
// A [tokens, hidden] f16/bf16 CUDA tensor with stride 1 inside rows and 16-byte aligned rows.
void check_rows(const TensorView& t, const char* name);
// weight: [hidden], contiguous, same dtype as `like`.
void check_weight(const TensorView& w, const char* name, const TensorView& like, const char* like_name);
// Byte ranges of the two tensors' elements (first to last byte) do not intersect (check::disjoint).
void check_disjoint(const TensorView& a, const char* a_name, const TensorView& b, const char* b_name);

}  // namespace weft::norm_detail
