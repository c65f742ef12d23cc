// append_paged_kv into fp8 pools (e4m3 / e5m2) from bf16 / f16 input: the whole pools are
// compared byte for byte with a host model (untouched bytes keep their random contents; written
// ones are fp8_from_float(x / scale), weft/fp8.h), so the round trip is exact to the quantization
// grid. Saturation: inputs far beyond scale * fp8_max (and the 16-bit formats' largest values)
// store +-max, never NaN / inf. Per-head and per-tensor scales, NHD and HND.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <vector>

#include "paged_scenario.h"
#include "weft/fp8.h"

namespace {

using weft::DType;
using weft::KVLayout;
using weft::test::DeviceBuffer;
using weft::test::PagedDevice;
using weft::test::PagedScenario;
using weft::test::PagedScenarioSpec;

std::vector<uint8_t> random_bytes(weft::test::Rng& rng, size_t n, DType fmt) {
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = weft::fp8_from_float(static_cast<float>(rng.uniform(-300, 300)), fmt);
  return b;
}

void run_fp8_append(DType in, DType fmt, KVLayout layout, bool per_head, uint64_t salt) {
  SCOPED_TRACE(std::string(weft::dtype_name(in)) + " -> " + weft::dtype_name(fmt) + " " +
               weft::kv_layout_name(layout) + (per_head ? " per-head" : " per-tensor"));
  auto rng = weft::test::Rng::for_current_test(salt);
  PagedScenarioSpec spec;
  spec.dtype = in;
  spec.layout = layout;
  spec.heads = 4;
  spec.page_size = 16;
  spec.old_lens = {0, 5, 16, 40, 0};
  spec.new_lens = {3, 30, 1, 0, 17};
  spec.shuffle_tokens = true;
  PagedScenario sc = weft::test::make_paged_scenario(spec, rng);
  // Saturation probes: every 7th input is huge (the 16-bit format's largest finite value or
  // +-1e4), every 13th sits just above scale * fp8_max.
  const float big = in == DType::kFloat16 ? 65504.f : 3.0e38f;
  const std::vector<float> scales_all = {0.002f, 0.01f, 0.5f, 0.0007f};
  std::vector<float> ks = per_head ? scales_all : std::vector<float>{0.004f};
  std::vector<float> vs = per_head ? std::vector<float>{0.02f, 0.003f, 0.001f, 0.3f} : std::vector<float>{0.01f};
  std::vector<float> vals = weft::test::from_half_bits(in, sc.new_buf);
  for (size_t i = 0; i < vals.size(); ++i) {
    if (i % 7 == 0) vals[i] = (i % 2 ? -1.f : 1.f) * (i % 3 ? big : 1e4f);
    if (i % 13 == 0) vals[i] = (i % 2 ? -1.f : 1.f) * 1.01f * weft::fp8_max(fmt) * 0.5f;  // x / 0.5-scale > max
  }
  sc.new_buf = weft::test::to_half_bits(in, vals);
  vals = weft::test::from_half_bits(in, sc.new_buf);
  PagedDevice dev(sc);
  // fp8 pools with the same element strides as the scenario's (contiguous, not interleaved).
  const std::vector<uint8_t> k0 = random_bytes(rng, size_t(sc.pool_alloc_elems), fmt);
  const std::vector<uint8_t> v0 = random_bytes(rng, size_t(sc.pool_alloc_elems), fmt);
  DeviceBuffer dk = DeviceBuffer::from(k0), dv = DeviceBuffer::from(v0);
  DeviceBuffer dks = DeviceBuffer::from(ks), dvs = DeviceBuffer::from(vs);
  weft::PagedKVCache cache = dev.cache;
  cache.k_pages.data = dk.get();
  cache.v_pages.data = dv.get();
  cache.k_pages.dtype = cache.v_pages.dtype = fmt;
  cache.k_scale = {dks.as<float>(), ks.data(), int64_t(ks.size())};
  cache.v_scale = {dvs.as<float>(), vs.data(), int64_t(vs.size())};
  weft::append_paged_kv(dev.new_k, dev.new_v, dev.bi, dev.pos, cache, dev.table, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  std::vector<uint8_t> k = k0, v = v0;
  for (int64_t i = 0; i < sc.nnz(); ++i)
    for (int64_t h = 0; h < spec.heads; ++h)
      for (int64_t d = 0; d < spec.head_dim; ++d) {
        const float xk = vals[sc.new_offset(false, i, h) + d], xv = vals[sc.new_offset(true, i, h) + d];
        const float sk = ks[per_head ? h : 0], sv = vs[per_head ? h : 0];
        k[sc.token_offset(false, sc.batch_idx[i], sc.positions[i], h) + d] = weft::fp8_from_float(xk / sk, fmt);
        v[sc.token_offset(true, sc.batch_idx[i], sc.positions[i], h) + d] = weft::fp8_from_float(xv / sv, fmt);
      }
  const std::vector<uint8_t> gk = dk.to_vector<uint8_t>(k.size()), gv = dv.to_vector<uint8_t>(v.size());
  int64_t bad = 0, first = -1, saturated = 0, nonfinite = 0;
  for (size_t i = 0; i < k.size(); ++i) {
    for (auto [g, w] : {std::pair{gk[i], k[i]}, std::pair{gv[i], v[i]}}) {
      if (g != w && first < 0) first = int64_t(i);
      bad += g != w;
      const float x = weft::fp8_to_float(g, fmt);
      nonfinite += !std::isfinite(x);
      saturated += std::fabs(x) == weft::fp8_max(fmt);
    }
  }
  EXPECT_EQ(bad, 0) << "first differing byte " << first << ": got 0x" << std::hex << int(gk[first < 0 ? 0 : first])
                    << " want 0x" << int(k[first < 0 ? 0 : first]);
  EXPECT_EQ(nonfinite, 0);
  EXPECT_GT(saturated, 0) << "the saturation probes did not reach the format's max";
}

TEST(AppendFp8Small, ExactToTheGridAndSaturating) {
  WEFT_REQUIRE_GPU();
  uint64_t salt = 0;
  for (DType in : {DType::kBFloat16, DType::kFloat16})
    for (DType fmt : {DType::kFloat8E4M3, DType::kFloat8E5M2})
      for (KVLayout layout : {KVLayout::kNHD, KVLayout::kHND})
        run_fp8_append(in, fmt, layout, /*per_head=*/layout == KVLayout::kNHD || fmt == DType::kFloat8E5M2, ++salt);
}

}  // namespace
