// Helpers shared by weft-serve-sim's translation units (serve_sim.cu: the decode families,
// hybrid.cu: the hybrid family through POD): the step shape, error checks, the pool fill, the
// float64 reference's K/V gathered back from the pages, statistics.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "reference/attention.h"

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(3);                                                                            \
    }                                                                                          \
  } while (0)

namespace weft::serve::sim {

using Clock = std::chrono::steady_clock;

// Decode shape of Llama-3-8B: 32 query heads, 8 KV heads, head_dim 128, bf16, pages of 16.
constexpr int32_t kHq = 32, kHkv = 8, kD = 128, kPage = 16;
constexpr double kHole = 0.25;  // a quarter of the physical page ids unassigned

inline double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// Deterministic values in [-1, 1] (a hash of the index and the seed).
static __global__ void fill_kernel(__nv_bfloat16* p, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint64_t x = (uint64_t(i) + seed) * 0x9E3779B97F4A7C15ull;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    p[i] = __float2bfloat16(float(int64_t(x % 2001) - 1000) * 1e-3f);  // [-1, 1]
  }
}

inline float bf16_to_float(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double idx = p * (v.size() - 1);
  const size_t lo = size_t(idx);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (idx - lo);
}
inline double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / v.size();
}

// The first `len` tokens of a request (its page ids `pages`, in logical order) copied back from
// the bf16 NHD pools k / v [num_pages, kPage, kHkv, kD], as the reference's one-request KV.
inline weft::ref::OwnedKV gather_request_kv(const void* k, const void* v, const std::vector<int32_t>& pages,
                                            int32_t len) {
  const size_t page_elems = size_t(kPage) * kHkv * kD;
  const int32_t np = (len + kPage - 1) / kPage;
  std::vector<uint16_t> kb(size_t(np) * page_elems), vb(size_t(np) * page_elems);
  for (int32_t p = 0; p < np; ++p) {
    CK(cudaMemcpy(kb.data() + p * page_elems, static_cast<const uint16_t*>(k) + size_t(pages[p]) * page_elems,
                  page_elems * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(vb.data() + p * page_elems, static_cast<const uint16_t*>(v) + size_t(pages[p]) * page_elems,
                  page_elems * 2, cudaMemcpyDeviceToHost));
  }
  weft::ref::OwnedKV kv;
  kv.num_kv_heads = kHkv;
  kv.head_dim = kD;
  kv.kv_indptr = {0, len};
  kv.k.resize(size_t(len) * kHkv * kD);
  kv.v.resize(kv.k.size());
  for (size_t i = 0; i < kv.k.size(); ++i) {  // NHD pages are token-major: the first len tokens
    kv.k[i] = bf16_to_float(kb[i]);
    kv.v[i] = bf16_to_float(vb[i]);
  }
  return kv;
}

// The tolerance of every check of the harness: bf16 output, |O| <= 1, so half an ulp is <= 2^-9;
// the bound allows a few ulps of the accumulated rounding of P (bf16 in the P.V product) over long
// rows. LSE is fp32.
inline bool within_tolerance(double max_o_err, double max_lse_err) {
  return max_o_err <= 1.5e-2 && max_lse_err <= 2e-3;
}

}  // namespace weft::serve::sim
