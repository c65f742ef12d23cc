// GPU-test scenario for the paged cache: random requests (some empty, some starting mid-page),
// page ids from a random permutation with spare pages, pools filled with random values, and
// an independent host model of where each (page, slot, head, d) lives. Host only.
#pragma once
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "common/gpu_util.h"
#include "common/test_util.h"
#include "weft/paged_kv.h"

namespace weft::test {

struct PagedScenarioSpec {
  int64_t page_size = 16;
  int64_t heads = 2;
  int64_t head_dim = 128;
  KVLayout layout = KVLayout::kNHD;
  DType dtype = DType::kBFloat16;
  bool interleaved = false;  // K and V pages interleaved in one allocation (free strides)
  bool fused_new = false;    // new_k / new_v are strided views of one [nnz, 2*heads+2, D] buffer
  bool shuffle_tokens = false;
  std::vector<int32_t> old_lens;  // per request, before the append
  std::vector<int32_t> new_lens;  // per request, appended
  int64_t spare_pages = 3;        // pages no request owns (must stay untouched)
};

struct PagedScenario {
  PagedScenarioSpec s;
  int64_t num_pages = 0;
  int64_t page_stride = 0, slot_stride = 0, head_stride = 0;  // pool strides (elements)
  int64_t pool_alloc_elems = 0;   // one allocation (interleaved) or each of two
  int64_t new_token_stride = 0;   // elements
  std::vector<int32_t> indptr, indices, last;   // table after the append
  std::vector<int32_t> batch_idx, positions;    // per new token
  std::vector<uint16_t> k_pool, v_pool;         // initial contents, pool_alloc_elems each (K: all of it if interleaved)
  std::vector<uint16_t> new_buf;                // [nnz, new_token_stride]
  int64_t v_new_offset = 0;                     // elements from new_buf start to new_v
  int64_t v_pool_offset = 0;                    // elements from the allocation start to v page 0

  int64_t nnz() const { return static_cast<int64_t>(batch_idx.size()); }
  int32_t batch() const { return static_cast<int32_t>(last.size()); }
  int64_t offset(int64_t page, int64_t slot, int64_t head) const {
    return page * page_stride + slot * slot_stride + head * head_stride;
  }
  int64_t kv_len(int32_t b) const {
    const int64_t pages = indptr[b + 1] - indptr[b];
    return pages ? (pages - 1) * s.page_size + last[b] : 0;
  }
  // Element offset (in its allocation) of token t of request b, head h, for K (v=false) or V.
  int64_t token_offset(bool v, int32_t b, int64_t t, int64_t h) const {
    const int64_t page = indices[indptr[b] + t / s.page_size];
    return (v ? v_pool_offset : 0) + offset(page, t % s.page_size, h);
  }
  int64_t new_offset(bool v, int64_t i, int64_t h) const {
    return (v ? v_new_offset : 0) + i * new_token_stride + h * s.head_dim;
  }
};

inline std::vector<uint16_t> random_half_bits(Rng& rng, DType dtype, std::size_t n) {
  std::vector<float> v = rng.uniform_vec(n, -2.0, 2.0);
  return to_half_bits(dtype, v);
}

inline PagedScenario make_paged_scenario(const PagedScenarioSpec& spec, Rng& rng) {
  PagedScenario sc;
  sc.s = spec;
  const int64_t ps = spec.page_size, H = spec.heads, D = spec.head_dim;
  const size_t batch = spec.old_lens.size();
  int64_t used = 0;
  std::vector<int64_t> pages_of(batch);
  for (size_t b = 0; b < batch; ++b) {
    const int64_t len = spec.old_lens[b] + spec.new_lens[b];
    pages_of[b] = (len + ps - 1) / ps;
    used += pages_of[b];
  }
  sc.num_pages = used + spec.spare_pages;
  std::vector<int32_t> perm(sc.num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng.engine());
  sc.indptr = {0};
  for (size_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < pages_of[b]; ++i) sc.indices.push_back(perm[sc.indices.size()]);
    sc.indptr.push_back(static_cast<int32_t>(sc.indices.size()));
    const int64_t len = spec.old_lens[b] + spec.new_lens[b];
    sc.last.push_back(pages_of[b] ? static_cast<int32_t>(len - (pages_of[b] - 1) * ps) : 0);
    for (int32_t t = spec.old_lens[b]; t < len; ++t) {
      sc.batch_idx.push_back(static_cast<int32_t>(b));
      sc.positions.push_back(t);
    }
  }
  if (spec.shuffle_tokens) {
    std::vector<size_t> order(sc.batch_idx.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng.engine());
    std::vector<int32_t> bi, pos;
    for (size_t i : order) {
      bi.push_back(sc.batch_idx[i]);
      pos.push_back(sc.positions[i]);
    }
    sc.batch_idx = bi;
    sc.positions = pos;
  }
  const int64_t page_elems = ps * H * D;
  const bool nhd = spec.layout == KVLayout::kNHD;
  sc.slot_stride = nhd ? H * D : D;
  sc.head_stride = nhd ? D : ps * D;
  sc.page_stride = spec.interleaved ? 2 * page_elems : page_elems;
  sc.v_pool_offset = spec.interleaved ? page_elems : 0;
  sc.pool_alloc_elems = spec.interleaved ? 2 * page_elems * sc.num_pages : page_elems * sc.num_pages;
  sc.k_pool = random_half_bits(rng, spec.dtype, sc.pool_alloc_elems);
  if (!spec.interleaved) sc.v_pool = random_half_bits(rng, spec.dtype, sc.pool_alloc_elems);
  sc.new_token_stride = spec.fused_new ? (2 * H + 2) * D : H * D;
  sc.v_new_offset = spec.fused_new ? H * D : sc.nnz() * H * D;
  const int64_t new_elems = spec.fused_new ? sc.nnz() * sc.new_token_stride : 2 * sc.nnz() * H * D;
  sc.new_buf = random_half_bits(rng, spec.dtype, new_elems);
  return sc;
}

// Device copies of a scenario and the views over them.
struct PagedDevice {
  DeviceBuffer k_alloc, v_alloc, new_buf, indptr, indices, last, batch_idx, positions;
  PagedKVCache cache;
  PageTable table;
  TensorView new_k, new_v;
  IndexArray bi, pos;

  explicit PagedDevice(const PagedScenario& sc) {
    const PagedScenarioSpec& s = sc.s;
    k_alloc = DeviceBuffer::from(sc.k_pool);
    if (!s.interleaved) v_alloc = DeviceBuffer::from(sc.v_pool);
    new_buf = DeviceBuffer::from(sc.new_buf);
    indptr = DeviceBuffer::from(sc.indptr);
    indices = DeviceBuffer::from(sc.indices);
    last = DeviceBuffer::from(sc.last);
    batch_idx = DeviceBuffer::from(sc.batch_idx);
    positions = DeviceBuffer::from(sc.positions);
    const bool nhd = s.layout == KVLayout::kNHD;
    const int64_t d1 = nhd ? s.page_size : s.heads, d2 = nhd ? s.heads : s.page_size;
    const int64_t st1 = nhd ? sc.slot_stride : sc.head_stride, st2 = nhd ? sc.head_stride : sc.slot_stride;
    uint16_t* k_base = k_alloc.as<uint16_t>();
    uint16_t* v_base = s.interleaved ? k_base + sc.v_pool_offset : v_alloc.as<uint16_t>();
    cache.layout = s.layout;
    cache.k_pages = TensorView(k_base, s.dtype, {sc.num_pages, d1, d2, s.head_dim}, {sc.page_stride, st1, st2, 1});
    cache.v_pages = TensorView(v_base, s.dtype, {sc.num_pages, d1, d2, s.head_dim}, {sc.page_stride, st1, st2, 1});
    table.batch_size = sc.batch();
    table.indptr = {indptr.as<int32_t>(), sc.indptr.data(), static_cast<int64_t>(sc.indptr.size())};
    table.indices = {indices.as<int32_t>(), sc.indices.data(), static_cast<int64_t>(sc.indices.size())};
    table.last_page_len = {last.as<int32_t>(), sc.last.data(), static_cast<int64_t>(sc.last.size())};
    uint16_t* nb = new_buf.as<uint16_t>();
    new_k = TensorView(nb, s.dtype, {sc.nnz(), s.heads, s.head_dim}, {sc.new_token_stride, s.head_dim, 1});
    new_v = TensorView(nb + sc.v_new_offset, s.dtype, {sc.nnz(), s.heads, s.head_dim},
                       {sc.new_token_stride, s.head_dim, 1});
    bi = {batch_idx.as<int32_t>(), sc.batch_idx.data(), sc.nnz()};
    pos = {positions.as<int32_t>(), sc.positions.data(), sc.nnz()};
  }
  std::vector<uint16_t> k_now(const PagedScenario& sc) const {
    return k_alloc.to_vector<uint16_t>(sc.pool_alloc_elems);
  }
  std::vector<uint16_t> v_now(const PagedScenario& sc) const {
    return sc.s.interleaved ? std::vector<uint16_t>() : v_alloc.to_vector<uint16_t>(sc.pool_alloc_elems);
  }
};

}  // namespace weft::test
