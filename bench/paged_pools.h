// Paged K/V pools for bench cases: `lens` keys per request, each request's pages taken from a random
// permutation of the pool (std::shuffle with mt19937_64(7), the order the FlashInfer kit reproduces
// bit-exactly), K and V filled with fill_random seeds 1 and 2, NHD pools
// [num_pages, page, num_kv_heads, head_dim], the page table with host mirrors. fp8 pools (dtype
// e4m3 / e5m2): random finite codes and per-head K and V scales of 1/64 (as the decode/fp8 rows). The table and cache
// point into this object's storage: keep it alive (and in place) while they are used.
#pragma once
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "harness.h"
#include "weft/paged_kv.h"

namespace weft::bench {

struct PagedPools {
  std::vector<int32_t> indptr{0}, last, indices;
  DeviceArray k, v, d_indptr, d_indices, d_last, d_scales;
  std::vector<float> scales;  // fp8: host mirror of d_scales
  weft::PageTable table;
  weft::PagedKVCache cache;

  // shuffled = false: pool order (each request's pages consecutive), for diagnostics.
  PagedPools(const std::vector<int32_t>& lens, int32_t page, int64_t num_kv_heads, int64_t head_dim,
             weft::DType dtype = weft::DType::kBFloat16, bool shuffled = true) {
    for (int32_t l : lens) {
      const int32_t pages = (l + page - 1) / page;
      indptr.push_back(indptr.back() + pages);
      last.push_back(l == 0 ? 0 : l - (pages - 1) * page);
    }
    const int64_t num_pages = indptr.back();
    indices.resize(num_pages);
    std::iota(indices.begin(), indices.end(), 0);
    if (shuffled) std::shuffle(indices.begin(), indices.end(), std::mt19937_64(7));
    const size_t pool = size_t(num_pages) * page * num_kv_heads * head_dim;
    k = DeviceArray(pool * weft::dtype_size(dtype));
    v = DeviceArray(pool * weft::dtype_size(dtype));
    fill_random(k.get(), pool, dtype, 1);
    fill_random(v.get(), pool, dtype, 2);
    d_indptr = DeviceArray(indptr.size() * 4);
    d_indices = DeviceArray(std::max<size_t>(indices.size(), 1) * 4);
    d_last = DeviceArray(last.size() * 4);
    WEFT_BENCH_CUDA(cudaMemcpy(d_indptr.get(), indptr.data(), indptr.size() * 4, cudaMemcpyHostToDevice));
    WEFT_BENCH_CUDA(cudaMemcpy(d_indices.get(), indices.data(), indices.size() * 4, cudaMemcpyHostToDevice));
    WEFT_BENCH_CUDA(cudaMemcpy(d_last.get(), last.data(), last.size() * 4, cudaMemcpyHostToDevice));
    const int32_t batch = static_cast<int32_t>(lens.size());
    table.batch_size = batch;
    table.indptr = {d_indptr.as<int32_t>(), indptr.data(), batch + 1};
    table.indices = {d_indices.as<int32_t>(), indices.data(), num_pages};
    table.last_page_len = {d_last.as<int32_t>(), last.data(), batch};
    cache.layout = weft::KVLayout::kNHD;
    cache.k_pages = weft::TensorView(k.get(), dtype, {num_pages, page, num_kv_heads, head_dim});
    cache.v_pages = weft::TensorView(v.get(), dtype, {num_pages, page, num_kv_heads, head_dim});
    if (dtype == weft::DType::kFloat8E4M3 || dtype == weft::DType::kFloat8E5M2) {
      scales.assign(size_t(num_kv_heads), 1.f / 64);
      d_scales = DeviceArray(scales.size() * 4);
      WEFT_BENCH_CUDA(cudaMemcpy(d_scales.get(), scales.data(), scales.size() * 4, cudaMemcpyHostToDevice));
      cache.k_scale = {d_scales.as<float>(), scales.data(), num_kv_heads};
      cache.v_scale = {d_scales.as<float>(), scales.data(), num_kv_heads};
    }
  }
  PagedPools(const PagedPools&) = delete;
  PagedPools& operator=(const PagedPools&) = delete;
};

}  // namespace weft::bench
