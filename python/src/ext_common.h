// Shared by the binding units of weft._weft (weft_ext.cpp, ext_decode.cpp, ext_prefill.cpp,
// ext_merge.cpp): DLPack arrays -> weft::TensorView, index arrays in two copies (Mirror: host mirror for
// validation and planning, device copy at a fixed address for the kernels), workspaces, variant
// and table checks. See weft_ext.cpp for what the wrapper classes keep between plan() and run().
#pragma once
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

namespace weft_py {

using Array = nb::ndarray<>;
using OptArray = std::optional<nb::ndarray<>>;

inline void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw weft::Error("CUDA", std::string(what) + ": " + cudaGetErrorString(e));
  }
}

inline cudaStream_t as_stream(uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }

// ---- DLPack -> TensorView ------------------------------------------------------------------

inline weft::DType dtype_of(const Array& a, const char* name) {
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

inline bool on_cuda(const Array& a) {
  return a.device_type() == nb::device::cuda::value || a.device_type() == nb::device::cuda_managed::value;
}

inline weft::TensorView view(const Array& a, const char* name) {
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
inline std::pair<weft::TensorView, weft::TensorView> kv_views(const Array& k, const OptArray& v, const char* name) {
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
inline std::vector<int32_t> host_i32(const Array& a, const char* name, cudaStream_t stream) {
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

// The weft::PageTable over three mirrors (host arrays for planning, device copies for the kernels).
inline weft::PageTable page_table(const Mirror& indptr, const Mirror& indices, const Mirror& last_page_len) {
  weft::PageTable t;
  t.batch_size = static_cast<int32_t>(last_page_len.host.size());
  t.indptr = indptr.array();
  t.indices = indices.array();
  t.last_page_len = last_page_len.array();
  return t;
}

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

inline weft::AttentionVariant make_variant(double sm_scale, int32_t mask, int32_t window_left, double soft_cap,
                                    bool return_lse) {
  weft::AttentionVariant v;
  v.sm_scale = sm_scale;
  v.mask = static_cast<weft::MaskMode>(mask);
  v.window_left = window_left;
  v.logits_soft_cap = static_cast<float>(soft_cap);
  v.return_lse = return_lse;
  return v;
}

inline weft::DType dtype_from_int(int32_t d, const char* name) {
  WEFT_CHECK_ARG(d == (int32_t)weft::DType::kFloat16 || d == (int32_t)weft::DType::kBFloat16, name,
                 "must be float16 or bfloat16");
  return static_cast<weft::DType>(d);
}

inline weft::KVLayout layout_from_int(int32_t l) {
  WEFT_CHECK_ARG(l == 0 || l == 1, "kv_layout", "must be \"NHD\" or \"HND\"");
  return static_cast<weft::KVLayout>(l);
}

// Host checks of a page table before any CUDA call (so bad inputs fail the same way on a machine
// without a GPU): sizes, indptr monotonic, last_page_len in range.
inline void check_table(const std::vector<int32_t>& indptr, const std::vector<int32_t>& indices,
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

// Binding registration of the attention wrapper classes (ext_decode.cpp, ext_prefill.cpp) and of
// the merge of attention states (ext_merge.cpp).
void bind_decode(nb::module_& m);
void bind_prefill(nb::module_& m);
void bind_merge(nb::module_& m);

}  // namespace weft_py
