// Internal to reference/attention*.cpp: shared definitions of the attention reference and the
// blocked, multi-threaded row engine (attention_blocks.cpp). Not for tests or kernels.
#pragma once
#include <cstdint>

#include "reference/attention.h"
#include "reference/round.h"

namespace weft::ref::detail {

struct Dims {
  int64_t batch, hq, hkv, d, group;
  double scale;
};

// Precision policy of one computation.
struct Policy {
  bool low = false;  // float32 arithmetic (else double)
  Rounding p_round = Rounding::kNone;
  Rounding o_round = Rounding::kNone;
};

// Whether key j is visible to query i (absolute position p) of request b.
inline bool visible(const Options& opt, int64_t b, int64_t i, int64_t j, int64_t p, int64_t kv_len) {
  if (opt.causal && j > p) return false;
  if (opt.window_left >= 0 && j < p - opt.window_left) return false;
  if (opt.custom_mask != nullptr) {
    const int64_t k = i * kv_len + j;
    const uint8_t byte = opt.custom_mask[opt.mask_indptr[b] + (k >> 3)];
    if (((byte >> (k & 7)) & 1) == 0) return false;
  }
  return true;
}

// Keys [kv_begin, kv_end) of request b; its q_len rows go to o (row i, head h at
// o[(i * hq + h) * d]) and lse (lse[i * hq + h]).
struct RequestJob {
  int64_t b = 0, kv_begin = 0, kv_end = 0;
  double* o = nullptr;
  double* lse = nullptr;
};

// Computes every (row, head) of every job, multi-threaded (reference/parallel.h). For each output
// element the arithmetic is exactly that of the plain per-row loop:
//   dot = sum_d q[d] * k[d] in d order (T accumulator, starting at 0), x = scale * dot, soft-cap,
//   alibi; m = running max over visible keys in key order; then over visible keys in key order:
//   w = exp(x - m), l += w, acc[d] += round(p_round, w) * v[d]; o = round(o_round, acc / l),
//   lse = m + log(l). T = float when pol.low, else double.
// The result therefore does not depend on the thread count or the blocking.
void run_jobs(const RaggedQ& q, const RaggedKV& kv, const Options& opt, const Dims& dm, const Policy& pol,
              const RequestJob* jobs, int64_t n_jobs);

}  // namespace weft::ref::detail
