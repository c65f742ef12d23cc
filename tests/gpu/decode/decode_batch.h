// Test fixture shared by the decode GPU suites: a random paged batch (Case -> Batch: host data
// rounded to the dtype, device copies, page table, views), for the float64 reference.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "reference/attention.h"
#include "tests/common/gpu_util.h"
#include "tests/common/test_util.h"
#include "weft/decode.h"

namespace weft::test_decode {

using test::DeviceBuffer;
using test::Rng;

struct Case {
  std::vector<int32_t> lens;
  int32_t hq = 8, hkv = 2, d = 128;
  DType dtype = DType::kBFloat16;
  int32_t page_size = 16;
  KVLayout layout = KVLayout::kNHD;
  DecodePath path = DecodePath::kAuto;
  AttentionVariant var;
  bool with_lse = true;
  std::vector<float> slopes;  // host copy of ALiBi slopes, hq entries; empty: no ALiBi
  std::string describe() const {
    std::ostringstream os;
    os << "batch " << lens.size() << " Hq " << hq << " Hkv " << hkv << " D " << d << " " << dtype_name(dtype)
       << " page " << page_size << " " << kv_layout_name(layout) << " path " << decode_path_name(path)
       << " window " << var.window_left << " cap " << var.logits_soft_cap;
    if (!slopes.empty()) os << " alibi h0 " << slopes[0];
    return os.str();
  }
};

// Host data (already rounded to the dtype) + device copies of one paged batch; ALiBi slopes (if
// the case has them) on the device, wired into c.var.
struct Batch {
  Case c;
  int64_t num_pages = 0;
  std::vector<int32_t> indptr, indices, last;
  std::vector<float> k, v, q;  // pools in the case's layout; q [batch, hq, d]
  DeviceBuffer dk, dv, dq, dout, dlse, d_indptr, d_indices, d_last, d_slopes;
  PageTable table;
  PagedKVCache cache;
  TensorView tq, tout, tlse;

  Batch(const Case& cs, Rng& rng, int64_t extra_pages = 3) : c(cs) {
    const int64_t b = c.lens.size();
    indptr.assign(b + 1, 0);
    for (int64_t i = 0; i < b; ++i) {
      const int64_t pages = (c.lens[i] + c.page_size - 1) / c.page_size;
      indptr[i + 1] = static_cast<int32_t>(indptr[i] + pages);
      last.push_back(c.lens[i] == 0 ? 0 : c.lens[i] - (pages - 1) * c.page_size);
    }
    num_pages = indptr[b] + extra_pages;
    indices.resize(indptr[b]);
    std::vector<int32_t> perm(num_pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng.engine());
    std::copy(perm.begin(), perm.begin() + indices.size(), indices.begin());
    const size_t pool = size_t(num_pages) * c.page_size * c.hkv * c.d;
    k = rng.uniform_vec(pool, -1, 1);
    v = rng.uniform_vec(pool, -1, 1);
    q = rng.uniform_vec(size_t(b) * c.hq * c.d, -2, 2);
    test::round_inplace(c.dtype, k);
    test::round_inplace(c.dtype, v);
    test::round_inplace(c.dtype, q);
    dk = DeviceBuffer::from(test::to_half_bits(c.dtype, k));
    dv = DeviceBuffer::from(test::to_half_bits(c.dtype, v));
    dq = DeviceBuffer::from(test::to_half_bits(c.dtype, q));
    dout = DeviceBuffer(std::max<size_t>(2, size_t(b) * c.hq * c.d * 2));
    dlse = DeviceBuffer(std::max<size_t>(4, size_t(b) * c.hq * 4));
    d_indptr = DeviceBuffer::from(indptr);
    d_indices = DeviceBuffer::from(indices.empty() ? std::vector<int32_t>{0} : indices);
    d_last = DeviceBuffer::from(last.empty() ? std::vector<int32_t>{0} : last);
    if (!c.slopes.empty()) {
      d_slopes = DeviceBuffer::from(c.slopes);
      c.var.alibi_slopes = d_slopes.as<float>();
    }
    table.batch_size = static_cast<int32_t>(b);
    table.indptr = {d_indptr.as<int32_t>(), indptr.data(), b + 1};
    table.indices = {d_indices.as<int32_t>(), indices.data(), int64_t(indices.size())};
    table.last_page_len = {d_last.as<int32_t>(), last.data(), b};
    const bool nhd = c.layout == KVLayout::kNHD;
    cache.layout = c.layout;
    cache.k_pages = nhd ? TensorView(dk.get(), c.dtype, {num_pages, c.page_size, c.hkv, c.d})
                        : TensorView(dk.get(), c.dtype, {num_pages, c.hkv, c.page_size, c.d});
    cache.v_pages = nhd ? TensorView(dv.get(), c.dtype, {num_pages, c.page_size, c.hkv, c.d})
                        : TensorView(dv.get(), c.dtype, {num_pages, c.hkv, c.page_size, c.d});
    tq = TensorView(dq.get(), c.dtype, {b, c.hq, c.d});
    tout = TensorView(dout.get(), c.dtype, {b, c.hq, c.d});
    tlse = TensorView(dlse.get(), DType::kFloat32, {b, c.hq});
  }

  ref::PagedKV ref_kv() const {
    ref::PagedKV r;
    r.k_pages = k.data();
    r.v_pages = v.data();
    r.hnd = c.layout == KVLayout::kHND;
    r.num_pages = num_pages;
    r.page_size = c.page_size;
    r.num_kv_heads = c.hkv;
    r.head_dim = c.d;
    r.indptr = indptr;
    r.indices = indices;
    r.last_page_len = last;
    return r;
  }
  std::vector<float> out() const {
    return test::from_half_bits(c.dtype, dout.to_vector<uint16_t>(c.lens.size() * c.hq * c.d));
  }
  std::vector<float> lse() const { return dlse.to_vector<float>(c.lens.size() * c.hq); }
};

// Request dst's first `pages` page ids become request src's (the two then share that prefix), in
// host page lists `indices` indexed by `indptr`.
inline void share_pages(std::vector<int32_t>& indices, const std::vector<int32_t>& indptr, int dst, int src,
                        int pages) {
  for (int i = 0; i < pages; ++i) indices[indptr[dst] + i] = indices[indptr[src] + i];
}

struct Workspace {
  DeviceBuffer buf;
  size_t bytes = 0;
  Workspace(int32_t max_batch, const Case& c, const DecodeOptions& opt = {})
      : bytes(BatchDecodeWrapper::workspace_size(max_batch, c.hq, c.hkv, c.d, opt)) {
    buf = DeviceBuffer(bytes);
  }
};

inline void plan_for(BatchDecodeWrapper& w, Batch& bt, Workspace& ws, cudaStream_t s = nullptr) {
  const Case& c = bt.c;
  w.plan(bt.table, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws.buf.get(), ws.bytes, s);
}

inline void run_for(BatchDecodeWrapper& w, Batch& bt, cudaStream_t s = nullptr) {
  w.run(bt.tq, bt.cache, bt.table, bt.tout, bt.c.with_lse ? &bt.tlse : nullptr, s);
}

// A stream of its own and, after capture(w, bt), run_for(w, bt) captured on it into an
// instantiated CUDA graph; all destroyed with the object. replay(): one launch, synchronized.
class CapturedRun {
 public:
  CapturedRun() { EXPECT_EQ(cudaStreamCreate(&st_), cudaSuccess); }
  ~CapturedRun() {
    if (exec_) {
      EXPECT_EQ(cudaGraphExecDestroy(exec_), cudaSuccess);
    }
    if (graph_) {
      EXPECT_EQ(cudaGraphDestroy(graph_), cudaSuccess);
    }
    if (st_) {
      EXPECT_EQ(cudaStreamDestroy(st_), cudaSuccess);
    }
  }
  CapturedRun(const CapturedRun&) = delete;
  CapturedRun& operator=(const CapturedRun&) = delete;
  cudaStream_t stream() const { return st_; }
  void capture(BatchDecodeWrapper& w, Batch& bt) {
    WEFT_TEST_CUDA(cudaStreamBeginCapture(st_, cudaStreamCaptureModeThreadLocal));
    run_for(w, bt, st_);
    WEFT_TEST_CUDA(cudaStreamEndCapture(st_, &graph_));
    WEFT_TEST_CUDA(cudaGraphInstantiate(&exec_, graph_, 0));
  }
  void replay() {
    WEFT_TEST_CUDA(cudaGraphLaunch(exec_, st_));
    WEFT_TEST_CUDA(cudaStreamSynchronize(st_));
  }

 private:
  cudaStream_t st_ = nullptr;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// Compare the batch's outputs with the float64 reference; tolerance from the low-precision
// emulation of the same computation.
inline void check_against_reference(const Batch& bt) {
  const Case& c = bt.c;
  ref::RaggedQ rq{bt.q.data(), c.hq, c.d, ref::iota_indptr(int64_t(c.lens.size()))};
  const ref::PagedKV rkv = bt.ref_kv();
  const ref::Options opt = ref::options_from(c.var);
  const ref::Result exact = ref::attention(rq, rkv, opt);
  const ref::Result low = ref::attention_low_precision(rq, rkv, opt, c.dtype, /*round_p=*/true);
  const test::Comparison base = test::compare(ref::to_float(low.o), exact.o);
  const test::Tolerance tol = test::tolerance_from_baseline(base, 4.0, 1e-5, 2e-3);
  const test::Comparison got = test::compare(bt.out(), exact.o);
  EXPECT_TRUE(test::within(got, tol)) << c.describe() << "\n got " << got.summary() << "\n baseline "
                                      << base.summary();
  if (c.with_lse) {
    const test::Comparison gl = test::compare(bt.lse(), exact.lse);
    EXPECT_TRUE(test::within(gl, test::Tolerance{1e-5, 2e-3})) << c.describe() << " lse " << gl.summary();
  }
  // kv_len 0 rows: exactly O = 0 and LSE = -inf.
  const std::vector<float> o = bt.out(), l = bt.lse();
  for (size_t b = 0; b < c.lens.size(); ++b) {
    if (c.lens[b] != 0) continue;
    for (int64_t i = 0; i < int64_t(c.hq) * c.d; ++i) ASSERT_EQ(o[b * c.hq * c.d + i], 0.f) << "request " << b;
    if (c.with_lse)
      for (int h = 0; h < c.hq; ++h) ASSERT_TRUE(std::isinf(l[b * c.hq + h]) && l[b * c.hq + h] < 0);
  }
}

}  // namespace weft::test_decode
