// Internal, pure C++: how a CTA covers rows of a [tokens, hidden] f16/bf16 tensor with 16-byte
// vectors. Shared by the norm kernels and the fused all-reduce + RMSNorm kernel.
//
// A row has vecs = hidden / 8 vectors. It is handled by a group of `threads_per_row` threads
// (a power of two, multiple of 32); thread g of the group holds vectors g, g + T, g + 2T, ...
// (`vecs_per_thread` of them, coalesced per step). A CTA of `block_threads` threads holds
// rows_per_cta = block_threads / threads_per_row rows at once.
#pragma once
#include <cstdint>

namespace weft::norm_detail {

struct RowLayout {
  int vecs = 0;             // hidden / 8
  int threads_per_row = 0;  // T: power of two in [32, block_threads]
  int vecs_per_thread = 0;  // ceil(vecs / T) <= max_vecs_per_thread
  int rows_per_cta = 0;     // block_threads / T
};

// Smallest power-of-two T >= 32 with ceil(vecs / T) <= target_vpt, capped at block_threads;
// then vecs_per_thread = ceil(vecs / T). `target_vpt` vectors per thread: enough independent
// 16-byte loads in flight per thread to cover DRAM / NVLink latency (4 is the knee on H100/H200
// for a streaming kernel), without wasting threads on short rows.
// Returns vecs_per_thread > max_vpt when the row does not fit (caller rejects the shape).
inline RowLayout make_row_layout(int64_t hidden, int block_threads, int target_vpt, int max_vpt) {
  RowLayout l;
  l.vecs = static_cast<int>(hidden / 8);
  int t = 32;
  while (t < block_threads && (l.vecs + t - 1) / t > target_vpt) t *= 2;
  l.threads_per_row = t;
  l.vecs_per_thread = (l.vecs + t - 1) / t;
  l.rows_per_cta = block_threads / t;
  (void)max_vpt;
  return l;
}

}  // namespace weft::norm_detail
