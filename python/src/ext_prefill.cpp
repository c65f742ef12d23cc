// weft._weft: the prefill wrapper class (paged and ragged) and POD (hybrid batches).
#include "ext_common.h"

namespace weft_py {
namespace {

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
  weft::PageTable table() const { return page_table(kv_indptr_, indices_, last_); }
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
    WEFT_CHECK_ARG(mode >= 0 && mode <= 3, "mode", "must be \"auto\", \"fused\", \"serial\" or \"partition\"");
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
    d["partition"] = i.partition;
    d["free_sms"] = i.free_sms;
    d["prefill_grid"] = i.prefill_grid;
    d["predicted_partition_us"] = i.predicted_partition_us;
    return d;
  }
  size_t workspace_bytes() const { return ws_.bytes; }

 private:
  weft::PageTable prefill_table() const { return page_table(p_indptr_, p_indices_, p_last_); }
  weft::PageTable decode_table() const { return page_table(d_indptr_, d_indices_, d_last_); }
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
}  // namespace

void bind_prefill(nb::module_& m) {
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
}

}  // namespace weft_py
