// Public merge of attention states computed over disjoint KV segments (cascade by hand, a shared
// prefix + a private suffix, weft's outputs combined with another library's). Host-only header.
//
// A state of one (token, head) is (v[head_dim], s): v the softmax-weighted values over the keys
// of one segment, s the LOG-SUM-EXP of that segment's logits in NATURAL log (weft's convention,
// weft/attention.h: what every weft kernel returns with return_lse). Merging n states:
//   m = max_k s_k;  w_k = exp(s_k - m);  v = sum_k w_k v_k / sum_k w_k;  s = m + log(sum_k w_k)
// A state with s = -inf covers no key and contributes nothing (its v is never read into the sum,
// NaN included); all n at -inf: v = 0, s = -inf. Note: FlashInfer's merge functions and the LSE
// its kernels return use base-2 logarithms; multiply such values by ln 2 before passing them here
// (and weft's results by log2(e) before handing them back).
//
// Numerics: v is widened to fp32, the weights and sums are fp32, states are accumulated in index
// order (a fixed order: same inputs -> same bits), and the result is rounded once to v's dtype.
//
// Shapes (strided views; the innermost dimension has stride 1 and every row starts 16-byte
// aligned, since rows are read and written in 16-byte vectors):
//   merge_state / merge_state_in_place:  v_* [seq, heads, head_dim], s_* [seq, heads] float32
//   merge_states:  v [seq, num_states, heads, head_dim], s [seq, num_states, heads] float32
//                  -> v_out [seq, heads, head_dim], s_out [seq, heads]
// v dtype float16, bfloat16 or float32, the same for every v argument. head_dim a multiple of 16
// bytes' worth of elements (8 for 16-bit types, 4 for float32) in [8, 1024]; num_states >= 1
// (1 copies the state, with -inf rows zeroed). seq may be 0 (nothing is launched). LSE views need
// 4-byte aligned data and any strides. Outputs must not overlap inputs (merge_state_in_place is
// the in-place form). s_out may be nullptr (v only). Every check runs before a launch and throws
// weft::Error naming the argument; a rejected call writes nothing. Launches one kernel on
// `stream` (CUDA-graph capturable: no allocation, no sync).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "weft/export.h"
#include "weft/tensor.h"

namespace weft WEFT_API {

// Largest head_dim the merge accepts (a row is spread over one warp, 16 bytes per lane per step).
constexpr int64_t kMergeMaxHeadDim = 1024;

// (v_out, s_out) = merge of (v_a, s_a) and (v_b, s_b).
void merge_state(const TensorView& v_a, const TensorView& s_a, const TensorView& v_b, const TensorView& s_b,
                 const TensorView& v_out, const TensorView* s_out, cudaStream_t stream);

// (v, s) = merge of (v, s) and (v_other, s_other), in place. mask (optional, [seq] uint8 in device
// memory): tokens whose mask byte is 0 are left untouched (fixed-shape batches, CUDA graphs).
void merge_state_in_place(const TensorView& v, const TensorView& s, const TensorView& v_other,
                          const TensorView& s_other, const TensorView* mask, cudaStream_t stream);

// (v_out, s_out) = merge of the num_states states of each (token, head), in state order.
void merge_states(const TensorView& v, const TensorView& s, const TensorView& v_out, const TensorView* s_out,
                  cudaStream_t stream);

}  // namespace weft
