// Bench group "append": append_paged_kv, bf16, 8 KV heads, head_dim 128 (Llama-3-8B-like KV).
// Bytes = new K and V read once + the same bytes written into the pools; ceiling "copy"
// (cudaMemcpyAsync D2D, read + written). Pages come from a random permutation (a fragmented
// cache), requests are 16 prefills of equal length, so the page-table lookups are realistic.
// extra "dense_copy_ms": cudaMemcpyAsync of the same bytes (new K and V into one flat buffer):
// the same-size copy bound, without the ceiling's 2 GiB amortisation.
#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "harness.h"
#include "paged/append_validate.h"  // internal: host validation cost, reported separately
#include "weft/paged_kv.h"

namespace {

using weft::bench::DeviceArray;

struct AppendCase {
  int64_t tokens;
  int64_t page_size;
  weft::KVLayout layout;
  int64_t batch;  // requests; tokens split evenly (prefill-like) or 1 each (decode-like)
};

void run_append_case(weft::bench::Context& ctx, const AppendCase& c) {
  constexpr int64_t kHeads = 8, kHeadDim = 128;
  const weft::DType dtype = weft::DType::kBFloat16;
  weft::bench::Result r;
  r.name = std::string("append/") + weft::kv_layout_name(c.layout) + "/t" + std::to_string(c.tokens) + "/ps" +
           std::to_string(c.page_size) + "/b" + std::to_string(c.batch);
  if (!ctx.wants(r.name)) return;
  r.params = {{"tokens", std::to_string(c.tokens)},  {"page_size", std::to_string(c.page_size)},
              {"layout", weft::kv_layout_name(c.layout)}, {"batch", std::to_string(c.batch)},
              {"kv_heads", std::to_string(kHeads)}, {"head_dim", std::to_string(kHeadDim)},
              {"dtype", "bf16"}};

  // Host table: request b gets tokens [b * per, (b+1) * per) appended to an empty sequence.
  const int64_t per = c.tokens / c.batch;
  std::vector<int32_t> indptr{0}, last, batch_idx, positions;
  int64_t pages = 0;
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t n = (per + c.page_size - 1) / c.page_size;
    pages += n;
    indptr.push_back(static_cast<int32_t>(pages));
    last.push_back(static_cast<int32_t>(per - (n - 1) * c.page_size));
    for (int64_t t = 0; t < per; ++t) {
      batch_idx.push_back(static_cast<int32_t>(b));
      positions.push_back(static_cast<int32_t>(t));
    }
  }
  std::vector<int32_t> indices(pages);
  std::iota(indices.begin(), indices.end(), 0);
  std::shuffle(indices.begin(), indices.end(), std::mt19937_64(42));
  const int64_t nnz = per * c.batch;

  const std::size_t row_bytes = kHeads * kHeadDim * 2;  // one token's K (or V)
  const std::size_t new_bytes = static_cast<std::size_t>(nnz) * row_bytes;
  const std::size_t pool_bytes = static_cast<std::size_t>(pages * c.page_size) * row_bytes;
  DeviceArray new_k(new_bytes), new_v(new_bytes), k_pool(pool_bytes), v_pool(pool_bytes), dense(2 * new_bytes);
  weft::bench::fill_random(new_k.get(), new_bytes / 2, dtype, 1);
  weft::bench::fill_random(new_v.get(), new_bytes / 2, dtype, 2);
  weft::bench::fill_random(k_pool.get(), pool_bytes / 2, dtype, 3);
  weft::bench::fill_random(v_pool.get(), pool_bytes / 2, dtype, 4);
  auto upload = [](const std::vector<int32_t>& v) {
    DeviceArray a(std::max<std::size_t>(v.size(), 1) * sizeof(int32_t));
    WEFT_BENCH_CUDA(cudaMemcpy(a.get(), v.data(), v.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    return a;
  };
  DeviceArray d_indptr = upload(indptr), d_indices = upload(indices), d_last = upload(last),
              d_bi = upload(batch_idx), d_pos = upload(positions);

  const bool nhd = c.layout == weft::KVLayout::kNHD;
  const int64_t d1 = nhd ? c.page_size : kHeads, d2 = nhd ? kHeads : c.page_size;
  weft::PagedKVCache cache;
  cache.layout = c.layout;
  cache.k_pages = weft::TensorView(k_pool.get(), dtype, {pages, d1, d2, kHeadDim});
  cache.v_pages = weft::TensorView(v_pool.get(), dtype, {pages, d1, d2, kHeadDim});
  weft::PageTable table;
  table.batch_size = static_cast<int32_t>(c.batch);
  table.indptr = {d_indptr.as<int32_t>(), indptr.data(), static_cast<int64_t>(indptr.size())};
  table.indices = {d_indices.as<int32_t>(), indices.data(), static_cast<int64_t>(indices.size())};
  table.last_page_len = {d_last.as<int32_t>(), last.data(), static_cast<int64_t>(last.size())};
  const weft::TensorView tk(new_k.get(), dtype, {nnz, kHeads, kHeadDim});
  const weft::TensorView tv(new_v.get(), dtype, {nnz, kHeads, kHeadDim});
  const weft::IndexArray bi{d_bi.as<int32_t>(), batch_idx.data(), nnz};
  const weft::IndexArray pos{d_pos.as<int32_t>(), positions.data(), nnz};

  // r.ms times the kernel alone: the call is captured once into a CUDA graph (validation runs
  // at capture) and the graph is replayed, so host-side validation cannot leave the GPU idle
  // inside the event bracket. eager_ms is the plain call (validation + launch each run) and
  // validate_host_ms the host validation by itself.
  weft::bench::with_graph(
      ctx, [&](cudaStream_t st) { weft::append_paged_kv(tk, tv, bi, pos, cache, table, st); },
      [&](const weft::bench::LaunchFn& launch) { r.ms = ctx.time_ms(launch); });
  const double eager_ms =
      ctx.time_ms([&](cudaStream_t s) { weft::append_paged_kv(tk, tv, bi, pos, cache, table, s); });
  std::vector<double> host_ms;
  for (int i = 0; i < 7; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    weft::paged::validate_append(tk, tv, bi, pos, cache, table);
    host_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(host_ms.begin(), host_ms.end());
  const double dense_ms = ctx.time_ms([&](cudaStream_t s) {
    WEFT_BENCH_CUDA(cudaMemcpyAsync(dense.get(), new_k.get(), new_bytes, cudaMemcpyDeviceToDevice, s));
    WEFT_BENCH_CUDA(cudaMemcpyAsync(dense.as<char>() + new_bytes, new_v.get(), new_bytes, cudaMemcpyDeviceToDevice, s));
  });
  r.bytes = 2.0 * 2.0 * static_cast<double>(new_bytes);  // K and V, read + written
  r.ceiling = "copy";
  r.extra = {{"dense_copy_ms", dense_ms},
             {"vs_dense_copy", dense_ms / r.ms},
             {"eager_ms", eager_ms},
             {"validate_host_ms", host_ms[host_ms.size() / 2]}};
  ctx.report(r);
}

}  // namespace

WEFT_BENCH_GROUP(append) {
  using L = weft::KVLayout;
  std::vector<AppendCase> cases;
  // The target first: 64K tokens, page 16: 256 MiB read + 256 MiB written.
  for (L layout : {L::kNHD, L::kHND}) cases.push_back({65536, 16, layout, 16});
  if (!ctx.quick()) {
    for (L layout : {L::kNHD, L::kHND}) {
      cases.push_back({4096, 16, layout, 16});  // small prefill: launch and tail bound
      cases.push_back({65536, 1, layout, 16});  // page size 1: one page lookup per token
      cases.push_back({256, 16, layout, 256});  // decode step: one token for each of 256 requests
    }
  }
  for (const AppendCase& c : cases) run_append_case(ctx, c);
}
