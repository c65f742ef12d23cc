// weft._weft: the decode wrapper classes (BatchDecodeWrapper over a page table or a block table).
#include "ext_common.h"

namespace weft_py {
namespace {

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
  d["num_packs"] = i.num_packs;
  d["prefix_sharing"] = i.prefix_sharing;
  d["prefix_fallback"] = i.prefix_fallback;
  d["predicted_share_us"] = i.predicted_share_us;
  d["predicted_decode_us"] = i.predicted_decode_us;
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
  Decode(int32_t max_batch, int32_t max_num_pages, int32_t path, bool share_prefixes, OptArray workspace,
         bool prefix_cost_model)
      : DecodeCommon(max_batch, workspace), max_pages_hint_(max_num_pages) {
    WEFT_CHECK_ARG(path >= 0 && path <= 2, "backend", "unknown decode path " << path);
    opt_.path = static_cast<weft::DecodePath>(path);
    opt_.share_prefixes = share_prefixes;
    opt_.prefix_cost_model = prefix_cost_model;
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
  weft::PageTable table() const { return page_table(indptr_, indices_, last_); }
  int32_t max_pages_hint_;
  weft::DecodeOptions opt_;
  Mirror indptr_, indices_, last_;
};
}  // namespace

void bind_decode(nb::module_& m) {
  m.def("decode_workspace_size", [](int32_t b, int32_t hq, int32_t hkv, int32_t d) {
    return weft::BatchDecodeWrapper::workspace_size(b, hq, hkv, d);
  });

  nb::class_<Decode>(m, "Decode")
      .def(nb::init<int32_t, int32_t, int32_t, bool, OptArray, bool>(), "max_batch"_a, "max_num_pages"_a, "path"_a,
           "share_prefixes"_a, "workspace"_a.none(), "prefix_cost_model"_a = true)
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
}

}  // namespace weft_py
