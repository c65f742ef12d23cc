// float64 CPU reference for ragged / paged attention (decode and prefill), plus an emulation of
// the same computation in the kernels' precision (used to derive test tolerances).
//
// Semantics are exactly those of include/weft/attention.h:
//   GQA: query head h reads KV head h / (num_qo_heads / num_kv_heads).
//   Query i of a request with q_len queries and kv_len keys sits at absolute position
//   p = kv_len - q_len + i (bottom-right alignment). For key j:
//     s = sm_scale * <q_i, k_j>                       (sm_scale 0 -> 1/sqrt(head_dim))
//     if logits_soft_cap > 0: s = cap * tanh(s / cap)
//     if alibi:               s += alibi_slopes[h] * (j - p)
//     excluded when: causal and j > p; window_left >= 0 and j < p - window_left;
//                    custom mask bit (i, j) == 0.
//   O = softmax(s) . V over the unexcluded keys, LSE = log(sum_j exp(s_j)) (NATURAL log).
//   A row with no unexcluded key (kv_len 0 or fully masked): O = 0, LSE = -inf, never NaN.
//
// Custom mask format (FlashInfer-compatible "packed custom mask", little bit order):
//   for request b (q_len x kv_len), the segment starts at BYTE offset mask_indptr[b] of
//   custom_mask; bit k = i * kv_len + j of that segment is
//       (custom_mask[mask_indptr[b] + (k >> 3)] >> (k & 7)) & 1,     1 = attend, 0 = masked.
//   Each request's segment is padded to a whole byte: mask_indptr[b+1] - mask_indptr[b] =
//   ceil(q_len * kv_len / 8). pack_custom_mask() below builds exactly this layout.
//   The custom mask combines with causal / window (all must allow a key).
//
// All inputs are float arrays whose values the test has already rounded to the kernel's storage
// dtype (tests/common/test_util.h round_inplace); the reference computes in double from them.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "weft/attention.h"
#include "weft/dtype.h"

namespace weft::ref {

// Q (and O): [total_q, num_qo_heads, head_dim] row-major, request b owns rows
// qo_indptr[b] .. qo_indptr[b+1]. Decode: qo_indptr = {0, 1, ..., batch} (see iota_indptr).
struct RaggedQ {
  const float* data = nullptr;
  int64_t num_qo_heads = 0;
  int64_t head_dim = 0;
  std::vector<int32_t> qo_indptr;  // batch + 1 entries, starts at 0
};

// Contiguous ragged K/V: [total_kv, num_kv_heads, head_dim] row-major each, request b owns rows
// kv_indptr[b] .. kv_indptr[b+1].
struct RaggedKV {
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  std::vector<int32_t> kv_indptr;  // batch + 1 entries, starts at 0
};

// Paged K/V following include/weft/paged_kv.h exactly:
//   hnd == false (NHD): page pool [num_pages, page_size, num_kv_heads, head_dim]
//   hnd == true  (HND): page pool [num_pages, num_kv_heads, page_size, head_dim]
//   request b owns pages indices[indptr[b] .. indptr[b+1]); last_page_len[b] in [1, page_size]
//   when it has pages, 0 when it has none; kv_len(b) = (pages - 1) * page_size + last_page_len[b].
//   Token t lives in page indices[indptr[b] + t / page_size], slot t % page_size.
// page_stride: elements between consecutive pages (0 -> page_size * num_kv_heads * head_dim,
// i.e. a dense pool); set it for a K/V pool interleaved in one allocation.
struct PagedKV {
  const float* k_pages = nullptr;
  const float* v_pages = nullptr;
  bool hnd = false;
  int64_t num_pages = 0;
  int64_t page_size = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  std::vector<int32_t> indptr;         // batch + 1
  std::vector<int32_t> indices;        // indptr[batch]
  std::vector<int32_t> last_page_len;  // batch
  int64_t page_stride = 0;
};

// A RaggedKV that owns its storage (the result of gathering a PagedKV).
struct OwnedKV {
  std::vector<float> k;  // [total_kv, num_kv_heads, head_dim]
  std::vector<float> v;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  std::vector<int32_t> kv_indptr;
  RaggedKV view() const { return RaggedKV{k.data(), v.data(), num_kv_heads, head_dim, kv_indptr}; }
};

// Copies each request's tokens out of the pages, in sequence order. Throws std::invalid_argument
// on an inconsistent table (index out of range, bad last_page_len).
OwnedKV gather_paged(const PagedKV& kv);
// kv_len of request b of a paged table (0 when it has no pages).
int64_t paged_kv_len(const PagedKV& kv, int64_t b);

struct Options {
  double sm_scale = 0;                // 0 -> 1 / sqrt(head_dim)
  bool causal = false;                // bottom-right aligned
  int64_t window_left = -1;           // keys j >= p - window_left; < 0 disables
  double logits_soft_cap = 0;         // <= 0 disables
  std::vector<double> alibi_slopes;   // empty: off; else one slope per qo head
  const uint8_t* custom_mask = nullptr;  // nullptr: off; format above
  std::vector<int64_t> mask_indptr;   // batch + 1 byte offsets into custom_mask
};

// sm_scale, causal, window_left and logits_soft_cap from a public AttentionVariant
// (MaskMode::kCustom still needs custom_mask / mask_indptr filled in by the caller).
Options options_from(const AttentionVariant& variant);

struct Result {
  std::vector<double> o;    // [total_q, num_qo_heads, head_dim]
  std::vector<double> lse;  // [total_q, num_qo_heads], natural log; -inf for empty rows
};

// Exact float64 reference. Throws std::invalid_argument on inconsistent shapes
// (batch mismatch, head_dim mismatch, num_qo_heads not a multiple of num_kv_heads, ...).
Result attention(const RaggedQ& q, const RaggedKV& kv, const Options& opt);
Result attention(const RaggedQ& q, const PagedKV& kv, const Options& opt);

// The same computation as a kernel computing in `dtype` (kFloat16 or kBFloat16; kFloat32 = no
// 16-bit rounding at all):
//   scores, softcap, alibi, max and exp in float32 (one pass with the row's global max);
//   probabilities P = exp(s - m) rounded to `dtype` before P.V when round_p (tensor-core
//   kernels feed P to mma in the input dtype; CUDA-core decode kernels may keep it fp32);
//   row sum l accumulated in float32 from the UNROUNDED P; P.V accumulated in float32;
//   O = acc / l rounded to `dtype`; LSE = m + log(l) in float32.
// Used only for tolerances: baseline = compare(to_float(low.o), exact.o).
Result attention_low_precision(const RaggedQ& q, const RaggedKV& kv, const Options& opt, DType dtype,
                               bool round_p = true);
Result attention_low_precision(const RaggedQ& q, const PagedKV& kv, const Options& opt, DType dtype,
                               bool round_p = true);
// Alias named in tests/common/test_util.h.
inline Result emulate_low_precision(const RaggedQ& q, const RaggedKV& kv, const Options& opt, DType dtype,
                                    bool round_p = true) {
  return attention_low_precision(q, kv, opt, dtype, round_p);
}
inline Result emulate_low_precision(const RaggedQ& q, const PagedKV& kv, const Options& opt, DType dtype,
                                    bool round_p = true) {
  return attention_low_precision(q, kv, opt, dtype, round_p);
}

// Attention restricted to keys [kv_begin, kv_end) of request `request` (positions, causal,
// window, alibi and custom-mask bits are those of the FULL request: only the set of keys shrinks).
// Returns that request's rows only: o [q_len, Hq, D], lse [q_len, Hq]. Merging the states of
// chunks that partition [0, kv_len) (merge.h) gives attention() of the request.
Result attention_kv_range(const RaggedQ& q, const RaggedKV& kv, const Options& opt, int64_t request,
                          int64_t kv_begin, int64_t kv_end);

// {0, step, 2*step, ..., n*step}: decode qo_indptr (step 1) or uniform kv_indptr.
std::vector<int32_t> iota_indptr(int64_t n, int32_t step = 1);

// Packed custom mask for requests with the given q/kv lengths, bit (i, j) of request b =
// attend(b, i, j). Layout as documented above.
struct PackedMask {
  std::vector<uint8_t> bits;
  std::vector<int64_t> indptr;  // batch + 1 byte offsets
};
PackedMask pack_custom_mask(const std::vector<int32_t>& qo_indptr, const std::vector<int32_t>& kv_indptr,
                            const std::function<bool(int64_t b, int64_t i, int64_t j)>& attend);
// Same, with kv lengths given directly (e.g. from a paged table).
PackedMask pack_custom_mask_lens(const std::vector<int64_t>& q_lens, const std::vector<int64_t>& kv_lens,
                                 const std::function<bool(int64_t b, int64_t i, int64_t j)>& attend);

std::vector<float> to_float(const std::vector<double>& v);

// The references run on reference/parallel.h's threads (WEFT_REF_THREADS, set_num_threads) and use
// the widest SIMD the CPU has (AVX-512 / AVX2 / baseline, never FMA). Results are bit-identical for
// every thread count and SIMD width; this test hook caps the SIMD level (0: baseline SSE2,
// 1: up to AVX2, 2: up to AVX-512 = the default; levels the CPU lacks fall back) so that tests
// can check exactly that.
void set_reference_simd_limit(int level);

}  // namespace weft::ref
