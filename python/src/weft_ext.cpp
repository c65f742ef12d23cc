// weft._weft: nanobind bindings of weft's public C++ API (include/weft/).
//
// Tensors arrive as nb::ndarray (DLPack: PyTorch, CuPy, JAX, NumPy) and become weft::TensorView
// without copies. Streams are passed in as integers (cudaStream_t); the Python layer
// (python/weft/*.py) picks the caller's current stream. weft::Error becomes weft.WeftError
// (a ValueError) carrying .argument.
//
// The wrapper classes here own what a FlashInfer-style Python wrapper must keep between plan()
// and run(): the C++ plan object, the device workspace (or a caller's buffer), and the page-table
// / indptr arrays in both copies (host mirror for validation and planning, device copy at a
// FIXED address for the kernels). plan() copies the caller's index arrays into them, so a CUDA
// graph captured around run() replays correctly after a later plan() (same buffers, contents
// updated) as long as the capacities given at construction are not exceeded.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weft/attention.h"
#include "weft/decode.h"
#include "weft/dtype.h"
#include "weft/error.h"
#include "weft/norm.h"
#include "weft/paged_kv.h"
#include "weft/pod.h"
#include "weft/prefill.h"
#include "weft/tensor.h"
#include "weft/validate.h"
#include "weft/version.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using Array = nb::ndarray<>;
using OptArray = std::optional<nb::ndarray<>>;

PyObject* g_error_class = nullptr;  // weft.WeftError, set by weft/__init__.py (never released)

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw weft::Error("CUDA", std::string(what) + ": " + cudaGetErrorString(e));
  }
}

cudaStream_t as_stream(uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }

// ---- DLPack -> TensorView ------------------------------------------------------------------

weft::DType dtype_of(const Array& a, const char* name) {
  const nb::dlpack::dtype t = a.dtype();
  if (t.lanes == 1) {
    if (t.code == (uint8_t)nb::dlpack::dtype_code::Float && t.bits == 16) return weft::DType::kFloat16;
    if (t.code == (uint8_t)nb::dlpack::dtype_code::Bfloat && t.bits == 16) return weft::DType::kBFloat16;
    if (t.code == (uint8_t)nb::dlpack::dtype_code::Float && t.bits == 32) return weft::DType::kFloat32;
    if (t.code == (uint8_t)nb::dlpack::dtype_code::Int && t.bits == 32) return weft::DType::kInt32;
    if (t.code == (uint8_t)nb::dlpack::dtype_code::UInt && t.bits == 8) return weft::DType::kUInt8;
  }
  throw weft::Error(name, "unsupported dtype (DLPack code " + std::to_string(t.code) + ", " +
                              std::to_string(t.bits) + " bits, " + std::to_string(t.lanes) +
                              " lanes): expected float16, bfloat16, float32, int32 or uint8");
}

bool on_cuda(const Array& a) {
  return a.device_type() == nb::device::cuda::value || a.device_type() == nb::device::cuda_managed::value;
}

weft::TensorView view(const Array& a, const char* name) {
  weft::TensorView t;
  WEFT_CHECK_ARG(a.ndim() <= (size_t)weft::TensorView::kMaxDims, name,
                 "at most " << weft::TensorView::kMaxDims << " dimensions, got " << a.ndim());
  t.data = a.data();
  t.dtype = dtype_of(a, name);
  t.ndim = static_cast<int32_t>(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) {
    t.shape[i] = static_cast<int64_t>(a.shape(i));
    t.strides[i] = static_cast<int64_t>(a.stride(i));
  }
  if (on_cuda(a)) {
    t.device = weft::Device::kCUDA;
  } else if (a.device_type() == nb::device::cpu::value || a.device_type() == nb::device::cuda_host::value) {
    t.device = weft::Device::kCPU;
  } else {
    throw weft::Error(name, "unsupported DLPack device type " + std::to_string(a.device_type()) +
                                " (expected CUDA or CPU)");
  }
  t.device_id = a.device_id();
  return t;
}

// A 5-D FlashInfer-style cache [num_pages, 2, ...] -> (K pool, V pool) views of one allocation.
std::pair<weft::TensorView, weft::TensorView> kv_views(const Array& k, const OptArray& v, const char* name) {
  if (v) return {view(k, "k_cache"), view(*v, "v_cache")};
  weft::TensorView t = view(k, name);
  WEFT_CHECK_ARG(t.ndim == 5 && t.shape[1] == 2, name,
                 "a single cache tensor must be [num_pages, 2, ...] (5-D, K then V), got " << t.describe());
  weft::TensorView kv[2];
  for (int i = 0; i < 2; ++i) {
    weft::TensorView& o = kv[i];
    o.dtype = t.dtype;
    o.ndim = 4;
    o.device = t.device;
    o.device_id = t.device_id;
    o.data = static_cast<char*>(t.data) + i * t.strides[1] * static_cast<int64_t>(t.element_size());
    const int src[4] = {0, 2, 3, 4};
    for (int d = 0; d < 4; ++d) {
      o.shape[d] = t.shape[src[d]];
      o.strides[d] = t.strides[src[d]];
    }
  }
  return {kv[0], kv[1]};
}

// ---- index arrays ----------------------------------------------------------------------------

// int32, 1-D, unit stride (or <= 1 entry), on CPU or CUDA. Returns the host copy; a device array
// is copied to the host on `stream` and waited for (a sync: plan() only).
std::vector<int32_t> host_i32(const Array& a, const char* name, cudaStream_t stream) {
  WEFT_CHECK_ARG(a.ndim() == 1, name, "must be 1-D, got " << a.ndim() << " dimensions");
  WEFT_CHECK_ARG(dtype_of(a, name) == weft::DType::kInt32, name, "must be int32");
  const size_t n = a.shape(0);
  WEFT_CHECK_ARG(n <= 1 || a.stride(0) == 1, name, "must be contiguous (stride 1), got " << a.stride(0));
  std::vector<int32_t> h(n);
  if (n == 0) return h;
  if (on_cuda(a)) {
    cuda_check(cudaMemcpyAsync(h.data(), a.data(), n * 4, cudaMemcpyDeviceToHost, stream), name);
    cuda_check(cudaStreamSynchronize(stream), name);
  } else {
    std::memcpy(h.data(), a.data(), n * 4);
  }
  return h;
}

// Device memory owned by a wrapper; grows (and moves) only when asked for more than it has.
struct DevBuf {
  void* p = nullptr;
  size_t cap = 0;
  DevBuf() = default;
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  ~DevBuf() { release(); }
  void release() {
    if (p) (void)cudaFree(p);
    p = nullptr;
    cap = 0;
  }
  void reserve(size_t bytes, const char* what) {
    bytes = std::max<size_t>(bytes, 256);
    if (bytes <= cap) return;
    release();
    cuda_check(cudaMalloc(&p, bytes), what);
    cap = bytes;
  }
};

// Host mirror + device copy of one int32 array (weft::IndexArray), device copy at a fixed address.
struct Mirror {
  std::vector<int32_t> host;
  DevBuf dev;
  void set(std::vector<int32_t> h, size_t capacity, const char* what, cudaStream_t stream) {
    host = std::move(h);
    dev.reserve(std::max(capacity, host.size()) * sizeof(int32_t), what);
    // From pageable memory: returns once the source is staged, so `host` may change afterwards.
    if (!host.empty())
      cuda_check(cudaMemcpyAsync(dev.p, host.data(), host.size() * 4, cudaMemcpyHostToDevice, stream), what);
  }
  weft::IndexArray array() const {
    return {static_cast<const int32_t*>(dev.p), host.data(), static_cast<int64_t>(host.size())};
  }
};

// Caller-provided workspace (a device buffer) or one the wrapper allocates.
struct Workspace {
  OptArray user;  // keeps the caller's buffer alive
  DevBuf own;
  void* ptr = nullptr;
  size_t bytes = 0;
  void ensure(size_t needed) {
    if (user) {
      weft::check::workspace(ptr, bytes, needed, "workspace_buffer");
      return;
    }
    own.reserve(needed, "workspace allocation");
    ptr = own.p;
    bytes = own.cap;
  }
  void set_user(const OptArray& buf) {
    if (!buf) return;
    WEFT_CHECK_ARG(on_cuda(*buf), "workspace_buffer", "must be a CUDA buffer");
    const weft::TensorView t = view(*buf, "workspace_buffer");
    WEFT_CHECK_ARG(t.is_contiguous(), "workspace_buffer", "must be contiguous");
    user = buf;
    ptr = t.data;
    bytes = static_cast<size_t>(t.numel()) * t.element_size();
  }
};

weft::AttentionVariant make_variant(double sm_scale, int32_t mask, int32_t window_left, double soft_cap,
                                    bool return_lse) {
  weft::AttentionVariant v;
  v.sm_scale = sm_scale;
  v.mask = static_cast<weft::MaskMode>(mask);
  v.window_left = window_left;
  v.logits_soft_cap = static_cast<float>(soft_cap);
  v.return_lse = return_lse;
  return v;
}

weft::DType dtype_from_int(int32_t d, const char* name) {
  WEFT_CHECK_ARG(d == (int32_t)weft::DType::kFloat16 || d == (int32_t)weft::DType::kBFloat16, name,
                 "must be float16 or bfloat16");
  return static_cast<weft::DType>(d);
}

weft::KVLayout layout_from_int(int32_t l) {
  WEFT_CHECK_ARG(l == 0 || l == 1, "kv_layout", "must be \"NHD\" or \"HND\"");
  return static_cast<weft::KVLayout>(l);
}

// Host checks of a page table before any CUDA call (so bad inputs fail the same way on a machine
// without a GPU): sizes, indptr monotonic, last_page_len in range.
void check_table(const std::vector<int32_t>& indptr, const std::vector<int32_t>& indices,
                 const std::vector<int32_t>& last, int64_t page_size) {
  WEFT_CHECK_ARG(!indptr.empty(), "indptr", "must have batch + 1 >= 1 entries");
  const int64_t batch = static_cast<int64_t>(indptr.size()) - 1;
  weft::check::indptr(indptr.data(), batch, "indptr", static_cast<int64_t>(indices.size()));
  WEFT_CHECK_ARG(indptr[batch] == static_cast<int64_t>(indices.size()), "indices",
                 "expected indptr[-1] = " << indptr[batch] << " entries, got " << indices.size());
  WEFT_CHECK_ARG(static_cast<int64_t>(last.size()) == batch, "last_page_len",
                 "expected one entry per request (" << batch << "), got " << last.size());
  WEFT_CHECK_ARG(page_size >= 1, "page_size", "must be >= 1, got " << page_size);
  for (int64_t b = 0; b < batch; ++b) {
    const bool has_pages = indptr[b + 1] > indptr[b];
    WEFT_CHECK_ARG(has_pages ? (last[b] >= 1 && last[b] <= page_size) : last[b] == 0, "last_page_len",
                   "last_page_len[" << b << "] = " << last[b] << " must be in [1, page_size=" << page_size
                                    << "] for a request with pages, 0 without");
  }
}

// ---- decode ---------------------------------------------------------------------------------

nb::dict decode_plan_info(const weft::DecodePlanInfo& i) {
  nb::dict d;
  d["batch"] = i.batch;
  d["num_ctas"] = i.num_ctas;
  d["num_items"] = i.num_items;
  d["num_merges"] = i.num_merges;
  d["max_chunk"] = i.max_chunk;
  d["tile_rows"] = i.tile_rows;
  d["split"] = i.split;
  d["path"] = std::string(weft::decode_path_name(i.path));
  d["route"] = std::string(weft::decode_route_name(static_cast<weft::DecodeRoute>(i.route)));
  d["route_chunk"] = i.route_chunk;
  return d;
}

// fp8 pools cross DLPack as uint8 bytes (the Python layer views torch's float8 tensors so: DLPack
// has no fp8 code every framework exports); kv_fp8 (1: e4m3, 2: e5m2) names their element type.
// The scales (weft::KVScale) are 1-D float32 CUDA arrays of num_kv_heads or 1 entries.
void apply_fp8(weft::PagedKVCache& cache, int32_t kv_fp8, const OptArray& k_scale, const OptArray& v_scale) {
  if (kv_fp8 == 0) {
    WEFT_CHECK_ARG(!k_scale && !v_scale, "k_scale", "scales are for fp8 KV pools only");
    return;
  }
  WEFT_CHECK_ARG(kv_fp8 == 1 || kv_fp8 == 2, "kv_data_type", "unknown fp8 format code " << kv_fp8);
  const weft::DType t = kv_fp8 == 1 ? weft::DType::kFloat8E4M3 : weft::DType::kFloat8E5M2;
  for (weft::TensorView* p : {&cache.k_pages, &cache.v_pages}) {
    WEFT_CHECK_ARG(p->dtype == weft::DType::kUInt8, "paged_kv_cache",
                   "an fp8 pool crosses as its uint8 bytes, got " << p->describe());
    p->dtype = t;
  }
  auto scale = [](const OptArray& a, const char* name) {
    WEFT_CHECK_ARG(a.has_value(), name, "required for an fp8 KV pool");
    const weft::TensorView s = view(*a, name);
    WEFT_CHECK_ARG(s.dtype == weft::DType::kFloat32 && s.ndim == 1 && s.device == weft::Device::kCUDA &&
                       (s.shape[0] <= 1 || s.strides[0] == 1),
                   name, "must be a contiguous 1-D float32 CUDA array, got " << s.describe());
    return weft::KVScale{static_cast<const float*>(s.data), nullptr, s.shape[0]};
  };
  cache.k_scale = scale(k_scale, "k_scale");
  cache.v_scale = scale(v_scale, "v_scale");
}

// What both decode classes share: the wrapper (rebuilt when the heads change or a batch exceeds
// it), its workspace and the planned layout.
class DecodeCommon {
 public:
  nb::dict plan_info() const { return w_ ? decode_plan_info(w_->plan_info()) : nb::dict(); }
  size_t workspace_bytes() const { return ws_.bytes; }

 protected:
  explicit DecodeCommon(int32_t max_batch_hint, const OptArray& workspace) : max_batch_hint_(max_batch_hint) {
    ws_.set_user(workspace);
  }
  // Checks the head counts, (re)builds the wrapper when needed.
  void ensure(int32_t batch, int32_t hq, int32_t hkv, int32_t head_dim, const weft::DecodeOptions& opt) {
    WEFT_CHECK_ARG(hq > 0 && hkv > 0 && hq % hkv == 0, "num_qo_heads",
                   "must be a positive multiple of num_kv_heads (" << hkv << "), got " << hq);
    weft::check::head_dim_supported(head_dim, "head_dim");
    if (w_ && hq == hq_ && hkv == hkv_ && head_dim == d_ && batch <= max_batch_) return;
    w_.reset();
    max_batch_ = std::max({batch, max_batch_hint_, max_batch_, 1});
    hq_ = hq;
    hkv_ = hkv;
    d_ = head_dim;
    ws_.ensure(weft::BatchDecodeWrapper::workspace_size(max_batch_, hq, hkv, head_dim, opt));
    w_ = std::make_unique<weft::BatchDecodeWrapper>(max_batch_, hq, hkv, head_dim, opt);
  }
  template <class Table>
  void run_with(const Table& table, const Array& q, const Array& k_cache, const OptArray& v_cache, const Array& out,
                const OptArray& lse, uintptr_t stream, int32_t kv_fp8 = 0, const OptArray& k_scale = {},
                const OptArray& v_scale = {}) {
    WEFT_CHECK_ARG(w_ != nullptr, "plan", "run() before plan()");
    auto [k, v] = kv_views(k_cache, v_cache, "paged_kv_cache");
    weft::PagedKVCache cache{k, v, layout_};
    apply_fp8(cache, kv_fp8, k_scale, v_scale);
    weft::TensorView tl;
    if (lse) tl = view(*lse, "lse");
    w_->run(view(q, "q"), cache, table, view(out, "out"), lse ? &tl : nullptr, as_stream(stream));
  }
  int32_t max_batch_hint_;
  std::unique_ptr<weft::BatchDecodeWrapper> w_;
  Workspace ws_;
  int32_t max_batch_ = 0, hq_ = 0, hkv_ = 0, d_ = 0;
  weft::KVLayout layout_ = weft::KVLayout::kNHD;
};

// BatchDecodeWrapper over a native (vLLM-style) block table, with DecodeOptions::route: the
// block table arrives flattened ([batch * row_stride] int32) with its row stride.
class DecodeBlocks : public DecodeCommon {
 public:
  DecodeBlocks(int32_t max_batch, int32_t route, int32_t chunk, int32_t max_tasks, std::string router_table,
               bool share_prefixes, OptArray workspace)
      : DecodeCommon(max_batch, workspace) {
    opt_.share_prefixes = share_prefixes;
    WEFT_CHECK_ARG(route >= 0 && route <= 3, "route", "unknown decode route " << route);
    opt_.route = static_cast<weft::DecodeRoute>(route);
    opt_.work_queue_chunk = chunk;
    opt_.max_tasks = max_tasks;
    opt_.router_table = std::move(router_table);
  }

  void plan(const Array& block_ids, int32_t row_stride, const Array& seq_lens, int32_t hq, int32_t hkv,
            int32_t head_dim, int32_t page_size, int32_t dtype, int32_t layout, double sm_scale, int32_t window_left,
            double soft_cap, bool return_lse, uintptr_t stream_i) {
    const cudaStream_t stream = as_stream(stream_i);
    std::vector<int32_t> h_ids = host_i32(block_ids, "block_tables", stream);
    std::vector<int32_t> h_lens = host_i32(seq_lens, "seq_lens", stream);
    WEFT_CHECK_ARG(row_stride >= 0, "block_tables", "row stride must be >= 0, got " << row_stride);
    const weft::DType dt = dtype_from_int(dtype, "q_data_type");
    const weft::KVLayout lay = layout_from_int(layout);
    ensure(static_cast<int32_t>(h_lens.size()), hq, hkv, head_dim, opt_);
    ids_.set(std::move(h_ids), 1, "block_tables", stream);
    lens_.set(std::move(h_lens), std::max(max_batch_, 1), "seq_lens", stream);
    row_stride_ = row_stride;
    layout_ = lay;
    w_->plan(table(), hq, hkv, head_dim, page_size, dt, lay,
             make_variant(sm_scale, 0, window_left, soft_cap, return_lse), ws_.ptr, ws_.bytes, stream);
  }
  void run(const Array& q, const Array& k_cache, const OptArray& v_cache, const Array& out, const OptArray& lse,
           uintptr_t stream, int32_t kv_fp8, const OptArray& k_scale, const OptArray& v_scale) {
    run_with(table(), q, k_cache, v_cache, out, lse, stream, kv_fp8, k_scale, v_scale);
  }

 private:
  weft::BlockTable table() const {
    weft::BlockTable t;
    t.batch_size = static_cast<int32_t>(lens_.host.size());
    t.row_stride = row_stride_;
    t.max_blocks = row_stride_;
    t.block_ids = ids_.array();
    t.seq_lens = lens_.array();
    return t;
  }
  weft::DecodeOptions opt_;
  Mirror ids_, lens_;
  int32_t row_stride_ = 0;
};

class Decode : public DecodeCommon {
 public:
  Decode(int32_t max_batch, int32_t max_num_pages, int32_t path, bool share_prefixes, OptArray workspace)
      : DecodeCommon(max_batch, workspace), max_pages_hint_(max_num_pages) {
    WEFT_CHECK_ARG(path >= 0 && path <= 2, "backend", "unknown decode path " << path);
    opt_.path = static_cast<weft::DecodePath>(path);
    opt_.share_prefixes = share_prefixes;
  }

  // levels_req_indptr / levels_num_pages: BatchDecodeWrapper::plan_cascade's levels (one entry
  // per level; empty: plan(), which finds shared pages itself under share_prefixes).
  void plan(const Array& indptr, const Array& indices, const Array& last_page_len, int32_t hq, int32_t hkv,
            int32_t head_dim, int32_t page_size, int32_t dtype, int32_t layout, double sm_scale,
            int32_t window_left, double soft_cap, bool return_lse, uintptr_t stream_i,
            const std::vector<std::vector<int32_t>>& levels_req_indptr,
            const std::vector<std::vector<int32_t>>& levels_num_pages) {
    const cudaStream_t stream = as_stream(stream_i);
    std::vector<int32_t> h_indptr = host_i32(indptr, "indptr", stream);
    std::vector<int32_t> h_indices = host_i32(indices, "indices", stream);
    std::vector<int32_t> h_last = host_i32(last_page_len, "last_page_len", stream);
    check_table(h_indptr, h_indices, h_last, page_size);
    const weft::DType dt = dtype_from_int(dtype, "q_data_type");
    const weft::KVLayout lay = layout_from_int(layout);
    ensure(static_cast<int32_t>(h_indptr.size()) - 1, hq, hkv, head_dim, opt_);
    indptr_.set(std::move(h_indptr), max_batch_ + 1, "indptr", stream);
    indices_.set(std::move(h_indices), std::max(max_pages_hint_, 1), "indices", stream);
    last_.set(std::move(h_last), max_batch_, "last_page_len", stream);
    layout_ = lay;
    const weft::AttentionVariant var = make_variant(sm_scale, 0, window_left, soft_cap, return_lse);
    if (levels_req_indptr.empty() && levels_num_pages.empty()) {
      w_->plan(table(), hq, hkv, head_dim, page_size, dt, lay, var, ws_.ptr, ws_.bytes, stream);
      return;
    }
    WEFT_CHECK_ARG(levels_req_indptr.size() == levels_num_pages.size(), "levels",
                   "every level needs (req_indptr, num_pages): got " << levels_req_indptr.size() << " and "
                                                                      << levels_num_pages.size());
    std::vector<weft::CascadeLevel> levels(levels_req_indptr.size());
    for (size_t i = 0; i < levels.size(); ++i) levels[i] = {levels_req_indptr[i], levels_num_pages[i]};
    w_->plan_cascade(table(), levels, hq, hkv, head_dim, page_size, dt, lay, var, ws_.ptr, ws_.bytes, stream);
  }
  void run(const Array& q, const Array& k_cache, const OptArray& v_cache, const Array& out, const OptArray& lse,
           uintptr_t stream, int32_t kv_fp8, const OptArray& k_scale, const OptArray& v_scale) {
    run_with(table(), q, k_cache, v_cache, out, lse, stream, kv_fp8, k_scale, v_scale);
  }
  int32_t max_batch() const { return max_batch_; }

 private:
  weft::PageTable table() const {
    weft::PageTable t;
    t.batch_size = static_cast<int32_t>(last_.host.size());
    t.indptr = indptr_.array();
    t.indices = indices_.array();
    t.last_page_len = last_.array();
    return t;
  }
  int32_t max_pages_hint_;
  weft::DecodeOptions opt_;
  Mirror indptr_, indices_, last_;
};

// ---- prefill (paged and ragged) --------------------------------------------------------------

class Prefill {
 public:
  Prefill(bool paged, int32_t max_batch, int64_t max_total_q, int32_t max_num_pages, int32_t cta_q,
          OptArray workspace)
      : paged_(paged), max_batch_hint_(max_batch), max_total_q_hint_(max_total_q),
        max_pages_hint_(max_num_pages) {
    opt_.cta_q = cta_q;
    ws_.set_user(workspace);
  }

  // Paged: kv = (indptr, indices, last_page_len); ragged: kv = (kv_indptr,).
  void plan(const Array& qo_indptr, const Array& kv_indptr, const OptArray& indices, const OptArray& last_page_len,
            int32_t hq, int32_t hkv, int32_t head_dim, int32_t page_size, int32_t dtype, int32_t layout,
            double sm_scale, bool causal, int32_t window_left, double soft_cap, bool return_lse,
            uintptr_t stream_i) {
    const cudaStream_t stream = as_stream(stream_i);
    std::vector<int32_t> h_qo = host_i32(qo_indptr, "qo_indptr", stream);
    std::vector<int32_t> h_kv = host_i32(kv_indptr, paged_ ? "indptr" : "kv_indptr", stream);
    std::vector<int32_t> h_indices, h_last;
    WEFT_CHECK_ARG(!h_qo.empty(), "qo_indptr", "must have batch + 1 >= 1 entries");
    const int32_t batch = static_cast<int32_t>(h_qo.size()) - 1;
    weft::check::indptr(h_qo.data(), batch, "qo_indptr");
    if (paged_) {
      h_indices = host_i32(*indices, "indices", stream);
      h_last = host_i32(*last_page_len, "last_page_len", stream);
      check_table(h_kv, h_indices, h_last, page_size);
      WEFT_CHECK_ARG(static_cast<int32_t>(h_kv.size()) - 1 == batch, "indptr",
                     "expected batch + 1 = " << batch + 1 << " entries (from qo_indptr), got " << h_kv.size());
    } else {
      WEFT_CHECK_ARG(h_kv.size() == h_qo.size(), "kv_indptr",
                     "expected batch + 1 = " << batch + 1 << " entries (from qo_indptr), got " << h_kv.size());
      weft::check::indptr(h_kv.data(), batch, "kv_indptr");
    }
    WEFT_CHECK_ARG(hq > 0 && hkv > 0 && hq % hkv == 0, "num_qo_heads",
                   "must be a positive multiple of num_kv_heads (" << hkv << "), got " << hq);
    weft::check::head_dim_supported(head_dim, "head_dim");
    const weft::DType dt = dtype_from_int(dtype, "q_data_type");
    layout_ = layout_from_int(layout);
    const int64_t total_q = h_qo[batch];

    if (bounds_.num_qo_heads != hq || bounds_.num_kv_heads != hkv || bounds_.head_dim != head_dim ||
        batch > bounds_.max_batch || total_q > bounds_.max_total_q) {
      weft::PrefillBounds b;
      b.max_batch = std::max({batch, max_batch_hint_, bounds_.max_batch, 1});
      b.max_total_q = std::max<int64_t>({total_q, max_total_q_hint_, bounds_.max_total_q, 1});
      b.num_qo_heads = hq;
      b.num_kv_heads = hkv;
      b.head_dim = head_dim;
      ws_.ensure(weft::BatchPrefillWrapper::workspace_size(b));
      bounds_ = b;
    }
    const size_t cap_b = static_cast<size_t>(bounds_.max_batch);
    kv_indptr_.set(std::move(h_kv), cap_b + 1, "kv_indptr", stream);
    const weft::AttentionVariant var =
        make_variant(sm_scale, causal ? 1 : 0, window_left, soft_cap, return_lse);
    if (paged_) {
      indices_.set(std::move(h_indices), std::max(max_pages_hint_, 1), "indices", stream);
      last_.set(std::move(h_last), cap_b, "last_page_len", stream);
      w_.plan_paged(h_qo.data(), table(), page_size, hq, hkv, head_dim, dt, var, ws_.ptr, ws_.bytes, bounds_,
                    stream, nullptr, opt_);
    } else {
      w_.plan_ragged(h_qo.data(), kv_indptr_.host.data(), batch, hq, hkv, head_dim, dt, var, ws_.ptr, ws_.bytes,
                     bounds_, stream, nullptr, opt_);
    }
    batch_ = batch;
  }

  void run_paged(const Array& q, const Array& k_cache, const OptArray& v_cache, const Array& out,
                 const OptArray& lse, uintptr_t stream) {
    WEFT_CHECK_ARG(w_.planned(), "plan", "run() before plan()");
    auto [k, v] = kv_views(k_cache, v_cache, "paged_kv_cache");
    weft::PagedKVCache cache{k, v, layout_};
    weft::TensorView tl;
    if (lse) tl = view(*lse, "lse");
    w_.run_paged(view(q, "q"), cache, table(), view(out, "out"), lse ? &tl : nullptr, as_stream(stream));
  }

  void run_ragged(const Array& q, const Array& k, const Array& v, const Array& out, const OptArray& lse,
                  uintptr_t stream) {
    WEFT_CHECK_ARG(w_.planned(), "plan", "run() before plan()");
    weft::TensorView tl;
    if (lse) tl = view(*lse, "lse");
    w_.run_ragged(view(q, "q"), view(k, "k"), view(v, "v"), static_cast<const int32_t*>(kv_indptr_.dev.p),
                  view(out, "out"), lse ? &tl : nullptr, as_stream(stream));
  }

  nb::dict plan_info() const {
    nb::dict d;
    const weft::PrefillPlanInfo& i = w_.plan_info();
    d["cta_q"] = i.cta_q;
    d["cta_kv"] = i.cta_kv;
    d["num_ctas"] = i.num_ctas;
    d["num_items"] = i.num_items;
    d["num_merges"] = i.num_merges;
    d["split"] = i.split;
    d["sm90"] = i.sm90;
    return d;
  }
  size_t workspace_bytes() const { return ws_.bytes; }

 private:
  weft::PageTable table() const {
    weft::PageTable t;
    t.batch_size = static_cast<int32_t>(last_.host.size());
    t.indptr = kv_indptr_.array();
    t.indices = indices_.array();
    t.last_page_len = last_.array();
    return t;
  }
  bool paged_;
  int32_t max_batch_hint_;
  int64_t max_total_q_hint_;
  int32_t max_pages_hint_;
  weft::PrefillPlanOptions opt_;
  weft::PrefillBounds bounds_;
  weft::BatchPrefillWrapper w_;
  Workspace ws_;
  Mirror kv_indptr_, indices_, last_;
  int32_t batch_ = 0;
  weft::KVLayout layout_ = weft::KVLayout::kNHD;
};

// ---- POD: hybrid batches (prefill chunks + decodes in one launch) ------------------------------

// weft::BatchPODAttention over two page tables of one cache. The attention object (its bounds fix
// heads, head_dim, layout and batch sizes) is rebuilt when a plan exceeds or changes them.
class Pod {
 public:
  Pod(int32_t max_prefill_batch, int64_t max_prefill_tokens, int32_t max_decode_batch, int32_t max_num_pages,
      int32_t mode, OptArray workspace)
      : max_prefill_batch_hint_(max_prefill_batch), max_prefill_tokens_hint_(max_prefill_tokens),
        max_decode_batch_hint_(max_decode_batch), max_pages_hint_(max_num_pages) {
    WEFT_CHECK_ARG(mode >= 0 && mode <= 2, "mode", "must be \"auto\", \"fused\" or \"serial\"");
    opt_.mode = static_cast<weft::PodMode>(mode);
    ws_.set_user(workspace);
  }

  // Prefill requests: qo_indptr + (p_indptr, p_indices, p_last); decode requests: (d_indptr,
  // d_indices, d_last). Host checks of both tables before any CUDA call.
  void plan(const Array& qo_indptr, const Array& p_indptr, const Array& p_indices, const Array& p_last,
            const Array& d_indptr, const Array& d_indices, const Array& d_last, int32_t hq, int32_t hkv,
            int32_t head_dim, int32_t page_size, int32_t dtype, int32_t layout, double sm_scale, bool causal,
            int32_t window_left, double soft_cap, bool return_lse, uintptr_t stream_i) {
    const cudaStream_t stream = as_stream(stream_i);
    std::vector<int32_t> h_qo = host_i32(qo_indptr, "qo_indptr", stream);
    std::vector<int32_t> h_pi = host_i32(p_indptr, "prefill_kv_indptr", stream);
    std::vector<int32_t> h_px = host_i32(p_indices, "prefill_kv_indices", stream);
    std::vector<int32_t> h_pl = host_i32(p_last, "prefill_kv_last_page_len", stream);
    std::vector<int32_t> h_di = host_i32(d_indptr, "decode_kv_indptr", stream);
    std::vector<int32_t> h_dx = host_i32(d_indices, "decode_kv_indices", stream);
    std::vector<int32_t> h_dl = host_i32(d_last, "decode_kv_last_page_len", stream);
    WEFT_CHECK_ARG(!h_qo.empty(), "qo_indptr", "must have prefill batch + 1 >= 1 entries");
    const int32_t pb = static_cast<int32_t>(h_qo.size()) - 1;
    weft::check::indptr(h_qo.data(), pb, "qo_indptr");
    WEFT_CHECK_ARG(static_cast<int32_t>(h_pi.size()) == pb + 1, "prefill_kv_indptr",
                   "expected prefill batch + 1 = " << pb + 1 << " entries (from qo_indptr), got " << h_pi.size());
    check_table(h_pi, h_px, h_pl, page_size);
    check_table(h_di, h_dx, h_dl, page_size);
    WEFT_CHECK_ARG(hq > 0 && hkv > 0 && hq % hkv == 0, "num_qo_heads",
                   "must be a positive multiple of num_kv_heads (" << hkv << "), got " << hq);
    WEFT_CHECK_ARG(head_dim == 64 || head_dim == 128, "head_dim", "must be 64 or 128 (fused kernels), got " << head_dim);
    const weft::DType dt = dtype_from_int(dtype, "q_data_type");
    const weft::KVLayout lay = layout_from_int(layout);
    const int32_t db = static_cast<int32_t>(h_di.size()) - 1;
    const int64_t tokens = h_qo[pb];
    if (!w_ || b_.num_qo_heads != hq || b_.num_kv_heads != hkv || b_.head_dim != head_dim || b_.kv_layout != lay ||
        pb > b_.max_prefill_batch || tokens > b_.max_prefill_tokens || db > b_.max_decode_batch) {
      weft::PodBounds b;
      b.max_prefill_batch = std::max({pb, max_prefill_batch_hint_, b_.max_prefill_batch, 1});
      b.max_prefill_tokens = std::max<int64_t>({tokens, max_prefill_tokens_hint_, b_.max_prefill_tokens, 1});
      b.max_decode_batch = std::max({db, max_decode_batch_hint_, b_.max_decode_batch, 1});
      b.num_qo_heads = hq;
      b.num_kv_heads = hkv;
      b.head_dim = head_dim;
      b.kv_layout = lay;
      w_.reset();
      ws_.ensure(weft::BatchPODAttention::workspace_size(b));
      w_ = std::make_unique<weft::BatchPODAttention>(b, opt_);
      b_ = b;
    }
    const size_t pages = static_cast<size_t>(std::max(max_pages_hint_, 1));
    qo_.set(std::move(h_qo), b_.max_prefill_batch + 1, "qo_indptr", stream);
    p_indptr_.set(std::move(h_pi), b_.max_prefill_batch + 1, "prefill_kv_indptr", stream);
    p_indices_.set(std::move(h_px), pages, "prefill_kv_indices", stream);
    p_last_.set(std::move(h_pl), b_.max_prefill_batch, "prefill_kv_last_page_len", stream);
    d_indptr_.set(std::move(h_di), b_.max_decode_batch + 1, "decode_kv_indptr", stream);
    d_indices_.set(std::move(h_dx), pages, "decode_kv_indices", stream);
    d_last_.set(std::move(h_dl), b_.max_decode_batch, "decode_kv_last_page_len", stream);
    w_->plan(qo_.host.data(), prefill_table(), decode_table(), page_size, dt,
             make_variant(sm_scale, causal ? 1 : 0, window_left, soft_cap, return_lse), ws_.ptr, ws_.bytes, stream);
  }

  void run(const Array& q_p, const Array& q_d, const Array& k_cache, const OptArray& v_cache, const Array& out_p,
           const Array& out_d, const OptArray& lse_p, const OptArray& lse_d, uintptr_t stream) {
    WEFT_CHECK_ARG(w_ != nullptr, "plan", "run() before plan()");
    auto [k, v] = kv_views(k_cache, v_cache, "paged_kv_cache");
    weft::PagedKVCache cache{k, v, b_.kv_layout};
    weft::TensorView lp, ld;
    if (lse_p) lp = view(*lse_p, "lse_p");
    if (lse_d) ld = view(*lse_d, "lse_d");
    w_->run(view(q_p, "q_p"), view(q_d, "q_d"), cache, prefill_table(), decode_table(), view(out_p, "out_p"),
            view(out_d, "out_d"), lse_p ? &lp : nullptr, lse_d ? &ld : nullptr, as_stream(stream));
  }

  nb::dict plan_info() const {
    nb::dict d;
    if (!w_) return d;
    const weft::PodPlanInfo& i = w_->plan_info();
    d["fused"] = i.fused;
    d["grid"] = i.grid;
    d["ctas_per_sm"] = i.ctas_per_sm;
    d["prefill_ctas"] = i.prefill_ctas;
    d["decode_ctas"] = i.decode_ctas;
    d["prefill_items"] = i.prefill_items;
    d["decode_items"] = i.decode_items;
    d["predicted_serial_us"] = i.predicted_serial_us;
    d["predicted_fused_us"] = i.predicted_fused_us;
    return d;
  }
  size_t workspace_bytes() const { return ws_.bytes; }

 private:
  static weft::PageTable table_of(const Mirror& indptr, const Mirror& indices, const Mirror& last) {
    weft::PageTable t;
    t.batch_size = static_cast<int32_t>(last.host.size());
    t.indptr = indptr.array();
    t.indices = indices.array();
    t.last_page_len = last.array();
    return t;
  }
  weft::PageTable prefill_table() const { return table_of(p_indptr_, p_indices_, p_last_); }
  weft::PageTable decode_table() const { return table_of(d_indptr_, d_indices_, d_last_); }
  int32_t max_prefill_batch_hint_;
  int64_t max_prefill_tokens_hint_;
  int32_t max_decode_batch_hint_;
  int32_t max_pages_hint_;
  weft::PodOptions opt_;
  weft::PodBounds b_;
  std::unique_ptr<weft::BatchPODAttention> w_;
  Workspace ws_;
  Mirror qo_, p_indptr_, p_indices_, p_last_, d_indptr_, d_indices_, d_last_;
};

// ---- append, norm, block tables -----------------------------------------------------------------

// One index argument given as (device array or None, host array or None). A missing device copy
// is made from the host one (a temporary, freed in stream order); a missing host copy is read back
// from the device one (a sync: not capturable).
struct IndexArg {
  std::vector<int32_t> host_copy;
  void* dev_tmp = nullptr;
  cudaStream_t stream = nullptr;
  weft::IndexArray arr;
  IndexArg(const OptArray& dev, const OptArray& host, const char* name, cudaStream_t s) : stream(s) {
    WEFT_CHECK_ARG(dev || host, name, "missing");
    if (host) {
      WEFT_CHECK_ARG(!on_cuda(*host), name, "host mirror must be in host memory");
      host_copy = host_i32(*host, name, stream);
    } else {
      host_copy = host_i32(*dev, name, stream);
    }
    arr.host = host_copy.data();
    arr.size = static_cast<int64_t>(host_copy.size());
    if (dev) {
      WEFT_CHECK_ARG(on_cuda(*dev), name, "device copy must be a CUDA array");
      WEFT_CHECK_ARG(dtype_of(*dev, name) == weft::DType::kInt32 && dev->ndim() == 1 &&
                         (dev->shape(0) <= 1 || dev->stride(0) == 1),
                     name, "must be a contiguous 1-D int32 array");
      WEFT_CHECK_ARG(static_cast<int64_t>(dev->shape(0)) == arr.size, name,
                     "device copy has " << dev->shape(0) << " entries, host mirror " << arr.size);
      arr.device = static_cast<const int32_t*>(dev->data());
    }
  }
  IndexArg(const IndexArg&) = delete;
  IndexArg& operator=(const IndexArg&) = delete;
  // Device copy of a host-only argument: stream-ordered temporary (cudaMallocAsync), freed in
  // stream order after the kernel that reads it, so no host sync.
  void upload(const char* name) {
    if (arr.device) return;
    cuda_check(cudaMallocAsync(&dev_tmp, std::max<size_t>(host_copy.size(), 1) * 4, stream), name);
    if (!host_copy.empty())
      cuda_check(cudaMemcpyAsync(dev_tmp, host_copy.data(), host_copy.size() * 4, cudaMemcpyHostToDevice, stream),
                 name);
    arr.device = static_cast<const int32_t*>(dev_tmp);
  }
  ~IndexArg() {
    if (dev_tmp) (void)cudaFreeAsync(dev_tmp, stream);
  }
};

void append_paged_kv(const Array& new_k, const Array& new_v, const OptArray& bi_dev, const OptArray& bi_host,
                     const OptArray& pos_dev, const OptArray& pos_host, const Array& k_cache, const OptArray& v_cache,
                     const OptArray& indices_dev, const OptArray& indices_host, const OptArray& indptr_dev,
                     const OptArray& indptr_host, const OptArray& last_dev, const OptArray& last_host, int32_t layout,
                     uintptr_t stream_i) {
  const cudaStream_t stream = as_stream(stream_i);
  IndexArg bi(bi_dev, bi_host, "batch_indices", stream);
  IndexArg pos(pos_dev, pos_host, "positions", stream);
  IndexArg indices(indices_dev, indices_host, "kv_indices", stream);
  IndexArg indptr(indptr_dev, indptr_host, "kv_indptr", stream);
  IndexArg last(last_dev, last_host, "kv_last_page_len", stream);
  auto [k, v] = kv_views(k_cache, v_cache, "paged_kv_cache");
  weft::PagedKVCache cache{k, v, layout_from_int(layout)};
  const weft::TensorView tk = view(new_k, "append_key"), tv = view(new_v, "append_value");
  // Host checks before any CUDA call (uploads below): pools and new tokens on the GPU, the table.
  weft::check::on_device(cache.k_pages, "k_cache");
  weft::check::on_device(cache.v_pages, "v_cache");
  weft::check::on_device(tk, "append_key");
  weft::check::on_device(tv, "append_value");
  WEFT_CHECK_ARG(cache.k_pages.ndim == 4, "k_cache", "must be 4-D, got " << cache.k_pages.describe());
  check_table(indptr.host_copy, indices.host_copy, last.host_copy, cache.page_size());
  weft::PageTable table;
  table.batch_size = static_cast<int32_t>(last.arr.size);
  // weft::append_paged_kv validates everything else before its launch.
  for (IndexArg* a : {&bi, &pos, &indices, &indptr, &last}) {
    if (!a->arr.device) a->upload("index upload");
  }
  table.indptr = indptr.arr;
  table.indices = indices.arr;
  table.last_page_len = last.arr;
  weft::append_paged_kv(tk, tv, bi.arr, pos.arr, cache, table, stream);
}

void rmsnorm(const Array& x, const Array& weight, const Array& out, double eps, uintptr_t stream) {
  weft::rmsnorm(view(x, "input"), view(weight, "weight"), view(out, "out"), eps, as_stream(stream));
}

void fused_add_rmsnorm(const Array& x, const Array& residual, const Array& weight, double eps, uintptr_t stream) {
  weft::fused_add_rmsnorm(view(x, "input"), view(residual, "residual"), view(weight, "weight"), eps,
                          as_stream(stream));
}

nb::tuple page_table_from_block_tables(const Array& block_tables, const Array& seq_lens, int64_t page_size,
                                       int64_t num_pages) {
  WEFT_CHECK_ARG(block_tables.ndim() == 2, "block_tables", "must be 2-D [batch, max_blocks_per_seq]");
  WEFT_CHECK_ARG(!on_cuda(block_tables), "block_tables", "must be in host memory");
  WEFT_CHECK_ARG(dtype_of(block_tables, "block_tables") == weft::DType::kInt32, "block_tables", "must be int32");
  const int64_t batch = block_tables.shape(0), width = block_tables.shape(1);
  WEFT_CHECK_ARG(batch == 0 || width <= 1 || block_tables.stride(1) == 1, "block_tables", "rows must be contiguous");
  std::vector<int32_t> bt(static_cast<size_t>(batch * width));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j = 0; j < width; ++j)
      bt[b * width + j] = static_cast<const int32_t*>(block_tables.data())[b * block_tables.stride(0) +
                                                                           j * (width > 1 ? block_tables.stride(1) : 1)];
  WEFT_CHECK_ARG(!on_cuda(seq_lens), "seq_lens", "must be in host memory");
  std::vector<int32_t> lens = host_i32(seq_lens, "seq_lens", nullptr);
  WEFT_CHECK_ARG(static_cast<int64_t>(lens.size()) == batch, "seq_lens",
                 "expected " << batch << " entries (rows of block_tables), got " << lens.size());
  weft::PageTableHost t =
      weft::page_table_from_block_tables(bt.data(), batch, width, lens.data(), page_size, num_pages);
  return nb::make_tuple(t.indptr, t.indices, t.last_page_len);
}

}  // namespace

NB_MODULE(_weft, m) {
  m.doc() = "weft C++/CUDA bindings (use the `weft` package, not this module directly)";

  m.def("_set_error_class", [](nb::handle cls) {
    Py_XINCREF(cls.ptr());
    g_error_class = cls.ptr();
  });
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const weft::Error& e) {
      if (!g_error_class) {
        PyErr_SetString(PyExc_ValueError, e.what());
        return;
      }
      nb::object exc = nb::borrow(g_error_class)(nb::str(e.what()), nb::str(e.argument().c_str()));
      PyErr_SetObject(g_error_class, exc.ptr());
    }
  });

  m.def("version", [] { return std::string(weft::version()); });
  m.def("cuda_device_count", [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return n;
  });
  m.def("decode_workspace_size", [](int32_t b, int32_t hq, int32_t hkv, int32_t d) {
    return weft::BatchDecodeWrapper::workspace_size(b, hq, hkv, d);
  });

  nb::class_<Decode>(m, "Decode")
      .def(nb::init<int32_t, int32_t, int32_t, bool, OptArray>(), "max_batch"_a, "max_num_pages"_a, "path"_a,
           "share_prefixes"_a, "workspace"_a.none())
      .def("plan", &Decode::plan, "indptr"_a, "indices"_a, "last_page_len"_a, "num_qo_heads"_a, "num_kv_heads"_a,
           "head_dim"_a, "page_size"_a, "dtype"_a, "layout"_a, "sm_scale"_a, "window_left"_a, "logits_soft_cap"_a,
           "return_lse"_a, "stream"_a, "levels_req_indptr"_a = std::vector<std::vector<int32_t>>(),
           "levels_num_pages"_a = std::vector<std::vector<int32_t>>())
      .def("run", &Decode::run, "q"_a, "k_cache"_a, "v_cache"_a.none(), "out"_a, "lse"_a.none(), "stream"_a,
           "kv_fp8"_a = 0, "k_scale"_a.none() = nb::none(), "v_scale"_a.none() = nb::none())
      .def("plan_info", [](const Decode& d) { return d.plan_info(); })
      .def_prop_ro("workspace_bytes", [](const Decode& d) { return d.workspace_bytes(); })
      .def_prop_ro("max_batch", &Decode::max_batch);

  nb::class_<DecodeBlocks>(m, "DecodeBlocks")
      .def(nb::init<int32_t, int32_t, int32_t, int32_t, std::string, bool, OptArray>(), "max_batch"_a, "route"_a,
           "work_queue_chunk"_a, "max_tasks"_a, "router_table"_a, "share_prefixes"_a, "workspace"_a.none())
      .def("plan", &DecodeBlocks::plan, "block_ids"_a, "row_stride"_a, "seq_lens"_a, "num_qo_heads"_a,
           "num_kv_heads"_a, "head_dim"_a, "page_size"_a, "dtype"_a, "layout"_a, "sm_scale"_a, "window_left"_a,
           "soft_cap"_a, "return_lse"_a, "stream"_a)
      .def("run", &DecodeBlocks::run, "q"_a, "k_cache"_a, "v_cache"_a.none(), "out"_a, "lse"_a.none(), "stream"_a,
           "kv_fp8"_a = 0, "k_scale"_a.none() = nb::none(), "v_scale"_a.none() = nb::none())
      .def("plan_info", [](const DecodeBlocks& d) { return d.plan_info(); })
      .def_prop_ro("workspace_bytes", [](const DecodeBlocks& d) { return d.workspace_bytes(); });
  nb::class_<Prefill>(m, "Prefill")
      .def(nb::init<bool, int32_t, int64_t, int32_t, int32_t, OptArray>(), "paged"_a, "max_batch"_a,
           "max_total_q"_a, "max_num_pages"_a, "cta_q"_a, "workspace"_a.none())
      .def("plan", &Prefill::plan, "qo_indptr"_a, "kv_indptr"_a, "indices"_a.none(), "last_page_len"_a.none(),
           "num_qo_heads"_a, "num_kv_heads"_a, "head_dim"_a, "page_size"_a, "dtype"_a, "layout"_a, "sm_scale"_a,
           "causal"_a, "window_left"_a, "logits_soft_cap"_a, "return_lse"_a, "stream"_a)
      .def("run_paged", &Prefill::run_paged, "q"_a, "k_cache"_a, "v_cache"_a.none(), "out"_a, "lse"_a.none(),
           "stream"_a)
      .def("run_ragged", &Prefill::run_ragged, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a.none(), "stream"_a)
      .def("plan_info", &Prefill::plan_info)
      .def_prop_ro("workspace_bytes", &Prefill::workspace_bytes);

  nb::class_<Pod>(m, "Pod")
      .def(nb::init<int32_t, int64_t, int32_t, int32_t, int32_t, OptArray>(), "max_prefill_batch"_a,
           "max_prefill_tokens"_a, "max_decode_batch"_a, "max_num_pages"_a, "mode"_a, "workspace"_a.none())
      .def("plan", &Pod::plan, "qo_indptr"_a, "prefill_kv_indptr"_a, "prefill_kv_indices"_a,
           "prefill_kv_last_page_len"_a, "decode_kv_indptr"_a, "decode_kv_indices"_a, "decode_kv_last_page_len"_a,
           "num_qo_heads"_a, "num_kv_heads"_a, "head_dim"_a, "page_size"_a, "dtype"_a, "layout"_a, "sm_scale"_a,
           "causal"_a, "window_left"_a, "soft_cap"_a, "return_lse"_a, "stream"_a)
      .def("run", &Pod::run, "q_p"_a, "q_d"_a, "k_cache"_a, "v_cache"_a.none(), "out_p"_a, "out_d"_a,
           "lse_p"_a.none(), "lse_d"_a.none(), "stream"_a)
      .def("plan_info", &Pod::plan_info)
      .def_prop_ro("workspace_bytes", &Pod::workspace_bytes);

  m.def("append_paged_kv", &append_paged_kv, "append_key"_a, "append_value"_a, "batch_indices_dev"_a.none(),
        "batch_indices_host"_a.none(), "positions_dev"_a.none(), "positions_host"_a.none(), "k_cache"_a,
        "v_cache"_a.none(), "indices_dev"_a.none(), "indices_host"_a.none(), "indptr_dev"_a.none(),
        "indptr_host"_a.none(), "last_dev"_a.none(), "last_host"_a.none(), "layout"_a, "stream"_a);
  m.def("rmsnorm", &rmsnorm, "input"_a, "weight"_a, "out"_a, "eps"_a, "stream"_a);
  m.def("fused_add_rmsnorm", &fused_add_rmsnorm, "input"_a, "residual"_a, "weight"_a, "eps"_a, "stream"_a);
  m.def("page_table_from_block_tables", &page_table_from_block_tables, "block_tables"_a, "seq_lens"_a,
        "page_size"_a, "num_pages"_a);
}
