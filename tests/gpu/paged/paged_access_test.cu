// paged_access.cuh: a tiny kernel gathers every token's K and V rows through PagedKV and the
// result must equal a host gather (raw 16-bit patterns) for both layouts and strided pools.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include "paged/paged_access.cuh"
#include "paged_scenario.h"

namespace {

using weft::DType;
using weft::KVLayout;
using weft::test::PagedDevice;
using weft::test::PagedScenario;
using weft::test::PagedScenarioSpec;

// One block per (request, token); out rows are [kv_start(b) + t][head][d] for K then V.
__global__ void gather_kernel(weft::paged::PagedKV<uint16_t> kv, const int32_t* row_start, int32_t heads,
                              int32_t head_dim, int64_t total_rows, uint16_t* out_k, uint16_t* out_v) {
  const int32_t b = blockIdx.y;
  const int32_t t = blockIdx.x;
  if (t >= kv.table.kv_len(b)) return;
  const int64_t row = row_start[b] + t;
  for (int32_t i = threadIdx.x; i < heads * head_dim; i += blockDim.x) {
    const int32_t h = i / head_dim, d = i % head_dim;
    out_k[row * heads * head_dim + i] = kv.k_row(b, t, h)[d];
    out_v[row * heads * head_dim + i] = *kv.v.at(kv.table.page_of(b, t), kv.table.slot_of(t), h, d);
  }
  (void)total_rows;
}

TEST(PagedAccess, GatherMatchesHost) {
  WEFT_REQUIRE_GPU();
  int iter = 0;
  for (int64_t ps : {1, 3, 16}) {
    for (KVLayout layout : {KVLayout::kNHD, KVLayout::kHND}) {
      for (bool interleaved : {false, true}) {
        PagedScenarioSpec s;
        s.page_size = ps;
        s.heads = 3;
        s.head_dim = 64;
        s.layout = layout;
        s.interleaved = interleaved;
        s.old_lens = {0, 7, 20, 1};  // the gather reads the whole sequence (old + new)
        s.new_lens = {0, 0, 5, 33};
        auto rng = weft::test::Rng::for_current_test(++iter);
        const PagedScenario sc = weft::test::make_paged_scenario(s, rng);
        PagedDevice dev(sc);
        std::vector<int32_t> row_start{0};
        int32_t max_len = 1;
        for (int32_t b = 0; b < sc.batch(); ++b) {
          row_start.push_back(row_start.back() + static_cast<int32_t>(sc.kv_len(b)));
          max_len = std::max<int32_t>(max_len, static_cast<int32_t>(sc.kv_len(b)));
        }
        const int64_t rows = row_start.back(), row_elems = s.heads * s.head_dim;
        auto d_start = weft::test::DeviceBuffer::from(row_start);
        weft::test::DeviceBuffer out_k(rows * row_elems * 2), out_v(rows * row_elems * 2);
        out_k.poison();
        out_v.poison();
        const auto kv = weft::paged::make_paged_kv<uint16_t>(dev.cache, dev.table);
        gather_kernel<<<dim3(max_len, sc.batch()), 128>>>(kv, d_start.as<int32_t>(), static_cast<int32_t>(s.heads),
                                                          static_cast<int32_t>(s.head_dim), rows,
                                                          out_k.as<uint16_t>(), out_v.as<uint16_t>());
        WEFT_TEST_CUDA(cudaGetLastError());
        WEFT_TEST_CUDA(cudaDeviceSynchronize());
        const auto got_k = out_k.to_vector<uint16_t>(rows * row_elems);
        const auto got_v = out_v.to_vector<uint16_t>(rows * row_elems);
        const std::vector<uint16_t>& v_src = interleaved ? sc.k_pool : sc.v_pool;
        int64_t bad = 0;
        for (int32_t b = 0; b < sc.batch(); ++b)
          for (int64_t t = 0; t < sc.kv_len(b); ++t)
            for (int64_t h = 0; h < s.heads; ++h)
              for (int64_t d = 0; d < s.head_dim; ++d) {
                const int64_t o = (row_start[b] + t) * row_elems + h * s.head_dim + d;
                bad += got_k[o] != sc.k_pool[sc.token_offset(false, b, t, h) + d];
                bad += got_v[o] != v_src[sc.token_offset(true, b, t, h) + d];
              }
        EXPECT_EQ(bad, 0) << "ps " << ps << " " << weft::kv_layout_name(layout) << (interleaved ? " interleaved" : "");
      }
    }
  }
}

}  // namespace
