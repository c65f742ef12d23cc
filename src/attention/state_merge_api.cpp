// weft::merge_state / merge_state_in_place / merge_states (weft/merge.h): argument checks, all
// before the one launch (attention/state_merge.cu), so a rejected call writes nothing.
#include <cstdint>

#include "attention/state_merge.h"
#include "weft/merge.h"
#include "weft/validate.h"

namespace weft {
namespace {

using attn::StateMergeArgs;
using attn::StateSource;

// v: `ndim`-D f16 / bf16 / f32 CUDA view, head_dim (last dim) in [8, kMergeMaxHeadDim] and rows
// of whole 16-byte vectors, 16-byte aligned (check::inner_contiguous), non-negative strides.
void check_v(const TensorView& t, const char* name, int ndim) {
  check::ndim_is(t, name, ndim);
  check::dtype_in(t, name, {DType::kFloat16, DType::kBFloat16, DType::kFloat32});
  check::on_device(t, name);
  const int64_t d = t.shape[ndim - 1];
  WEFT_CHECK_ARG(d >= 8 && d <= kMergeMaxHeadDim, name,
                 "head_dim (last dim) must be in [8, " << kMergeMaxHeadDim << "], got " << t.describe());
  WEFT_CHECK_ARG(d * static_cast<int64_t>(t.element_size()) % 16 == 0, name,
                 "head_dim must fill whole 16-byte vectors (a multiple of " << 16 / t.element_size()
                                                                            << " for " << dtype_name(t.dtype)
                                                                            << "), got " << t.describe());
  for (int i = 0; i < ndim; ++i)
    WEFT_CHECK_ARG(t.strides[i] >= 0, name, "negative stride in dim " << i << " of " << t.describe());
  if (t.numel() > 0) check::inner_contiguous(t, name, 16);
}

// s: float32 CUDA view of `shape`, 4-byte aligned, non-negative strides.
void check_s(const TensorView& t, const char* name, std::initializer_list<int64_t> shape) {
  check::shape_is(t, name, shape);
  check::dtype_is(t, name, DType::kFloat32);
  check::on_device(t, name);
  check::aligned(t.data, name, 4);
  for (int i = 0; i < t.ndim; ++i)
    WEFT_CHECK_ARG(t.strides[i] >= 0, name, "negative stride in dim " << i << " of " << t.describe());
}

StateSource source(const TensorView& v, const TensorView& s) {
  StateSource x;
  x.v = v.data;
  x.s = static_cast<const float*>(s.data);
  x.v_seq = v.strides[0];
  x.v_head = v.strides[v.ndim - 2];
  x.s_seq = s.strides[0];
  x.s_head = s.strides[s.ndim - 1];
  return x;
}

void set_out(StateMergeArgs& a, const TensorView& v_out, const TensorView* s_out) {
  a.v_out = v_out.data;
  a.vo_seq = v_out.strides[0];
  a.vo_head = v_out.strides[1];
  if (s_out != nullptr) {
    a.s_out = static_cast<float*>(s_out->data);
    a.so_seq = s_out->strides[0];
    a.so_head = s_out->strides[1];
  }
}

// Outputs of the out-of-place forms: shapes as given, writable, disjoint from every input.
void check_outputs(const TensorView& v_out, const TensorView* s_out, int64_t seq, int64_t heads,
                   int64_t head_dim, const TensorView& like, const char* like_name,
                   std::initializer_list<const TensorView*> inputs,
                   std::initializer_list<const char*> input_names) {
  check_v(v_out, "v_out", 3);
  check::same_dtype(like, like_name, v_out, "v_out");
  check::shape_is(v_out, "v_out", {seq, heads, head_dim});
  check::writable(v_out, "v_out");
  if (s_out != nullptr) {
    check_s(*s_out, "s_out", {seq, heads});
    check::writable(*s_out, "s_out");
    check::disjoint(v_out, "v_out", *s_out, "s_out");
  }
  auto name = input_names.begin();
  for (const TensorView* in : inputs) {
    check::disjoint(*in, *name, v_out, "v_out");
    if (s_out != nullptr) check::disjoint(*in, *name, *s_out, "s_out");
    ++name;
  }
}

}  // namespace

void merge_state(const TensorView& v_a, const TensorView& s_a, const TensorView& v_b, const TensorView& s_b,
                 const TensorView& v_out, const TensorView* s_out, cudaStream_t stream) {
  check_v(v_a, "v_a", 3);
  const int64_t seq = v_a.shape[0], heads = v_a.shape[1], d = v_a.shape[2];
  check_s(s_a, "s_a", {seq, heads});
  check_v(v_b, "v_b", 3);
  check::same_dtype(v_a, "v_a", v_b, "v_b");
  check::same_shape(v_a, "v_a", v_b, "v_b");
  check_s(s_b, "s_b", {seq, heads});
  check_outputs(v_out, s_out, seq, heads, d, v_a, "v_a", {&v_a, &s_a, &v_b, &s_b}, {"v_a", "s_a", "v_b", "s_b"});
  StateMergeArgs a;
  a.src[0] = source(v_a, s_a);
  a.src[1] = source(v_b, s_b);
  set_out(a, v_out, s_out);
  a.seq = seq;
  a.heads = heads;
  a.head_dim = static_cast<int32_t>(d);
  a.num_states = 2;
  attn::launch_state_merge(a, v_a.dtype, stream);
}

void merge_state_in_place(const TensorView& v, const TensorView& s, const TensorView& v_other,
                          const TensorView& s_other, const TensorView* mask, cudaStream_t stream) {
  check_v(v, "v", 3);
  const int64_t seq = v.shape[0], heads = v.shape[1], d = v.shape[2];
  check::writable(v, "v");
  check_s(s, "s", {seq, heads});
  check::writable(s, "s");
  check::disjoint(v, "v", s, "s");
  check_v(v_other, "v_other", 3);
  check::same_dtype(v, "v", v_other, "v_other");
  check::same_shape(v, "v", v_other, "v_other");
  check_s(s_other, "s_other", {seq, heads});
  for (const TensorView* out : {&v, &s}) {
    check::disjoint(*out, out == &v ? "v" : "s", v_other, "v_other");
    check::disjoint(*out, out == &v ? "v" : "s", s_other, "s_other");
  }
  if (mask != nullptr) {
    check::shape_is(*mask, "mask", {seq});
    check::dtype_is(*mask, "mask", DType::kUInt8);
    check::on_device(*mask, "mask");
    WEFT_CHECK_ARG(seq <= 1 || mask->strides[0] == 1, "mask", "must be contiguous, got " << mask->describe());
    check::disjoint(v, "v", *mask, "mask");
    check::disjoint(s, "s", *mask, "mask");
  }
  StateMergeArgs a;
  a.src[0] = source(v, s);
  a.src[1] = source(v_other, s_other);
  set_out(a, v, &s);
  a.mask = mask != nullptr ? static_cast<const uint8_t*>(mask->data) : nullptr;
  a.seq = seq;
  a.heads = heads;
  a.head_dim = static_cast<int32_t>(d);
  a.num_states = 2;
  attn::launch_state_merge(a, v.dtype, stream);
}

void merge_states(const TensorView& v, const TensorView& s, const TensorView& v_out, const TensorView* s_out,
                  cudaStream_t stream) {
  check_v(v, "v", 4);
  const int64_t seq = v.shape[0], n = v.shape[1], heads = v.shape[2], d = v.shape[3];
  WEFT_CHECK_ARG(n >= 1 && n <= 0x7fffffff, "v",
                 "num_states (dim 1) must be in [1, 2^31), got " << v.describe());
  check_s(s, "s", {seq, n, heads});
  check_outputs(v_out, s_out, seq, heads, d, v, "v", {&v, &s}, {"v", "s"});
  StateMergeArgs a;
  a.src[0] = source(v, s);
  a.src[1] = a.src[0];
  if (n > 1 && seq > 0 && heads > 0) {  // state 1 of the same tensor
    a.src[1].v = static_cast<const char*>(v.data) + v.strides[1] * static_cast<int64_t>(v.element_size());
    a.src[1].s = static_cast<const float*>(s.data) + s.strides[1];
  }
  a.v_state = v.strides[1];
  a.s_state = s.strides[1];
  set_out(a, v_out, s_out);
  a.seq = seq;
  a.heads = heads;
  a.head_dim = static_cast<int32_t>(d);
  a.num_states = static_cast<int32_t>(n);
  attn::launch_state_merge(a, v.dtype, stream);
}

}  // namespace weft
