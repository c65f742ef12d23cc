// weft._weft: nanobind bindings of weft's public C++ API (include/weft/).
//
// Tensors arrive as nb::ndarray (DLPack: PyTorch, CuPy, JAX, NumPy) and become weft::TensorView
// without copies. Streams are passed in as integers (cudaStream_t); the Python layer
// (python/weft/*.py) picks the caller's current stream. weft::Error becomes weft.WeftError
// (a ValueError) carrying .argument.
//
// Units: ext_common.h (DLPack views, index mirrors, workspaces, checks), ext_decode.cpp (decode
// wrappers), ext_prefill.cpp (prefill and POD), ext_merge.cpp (merge of attention states), this
// file (append, norms, block tables, the module).
// The wrapper classes own what a FlashInfer-style Python wrapper must keep between plan()
// and run(): the C++ plan object, the device workspace (or a caller's buffer), and the page-table
// / indptr arrays in both copies (host mirror for validation and planning, device copy at a
// FIXED address for the kernels). plan() copies the caller's index arrays into them, so a CUDA
// graph captured around run() replays correctly after a later plan() (same buffers, contents
// updated) as long as the capacities given at construction are not exceeded.
#include "ext_common.h"

namespace weft_py {
namespace {

PyObject* g_error_class = nullptr;  // weft.WeftError, set by weft/__init__.py (never released)

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
}  // namespace weft_py

using namespace weft_py;

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
  bind_decode(m);
  bind_prefill(m);
  bind_merge(m);

  m.def("append_paged_kv", &append_paged_kv, "append_key"_a, "append_value"_a, "batch_indices_dev"_a.none(),
        "batch_indices_host"_a.none(), "positions_dev"_a.none(), "positions_host"_a.none(), "k_cache"_a,
        "v_cache"_a.none(), "indices_dev"_a.none(), "indices_host"_a.none(), "indptr_dev"_a.none(),
        "indptr_host"_a.none(), "last_dev"_a.none(), "last_host"_a.none(), "layout"_a, "stream"_a);
  m.def("rmsnorm", &rmsnorm, "input"_a, "weight"_a, "out"_a, "eps"_a, "stream"_a);
  m.def("fused_add_rmsnorm", &fused_add_rmsnorm, "input"_a, "residual"_a, "weight"_a, "eps"_a, "stream"_a);
  m.def("page_table_from_block_tables", &page_table_from_block_tables, "block_tables"_a, "seq_lens"_a,
        "page_size"_a, "num_pages"_a);
}

