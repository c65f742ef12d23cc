// Diagnostic (issue 28 / 21, perf-notes-decode.md "What holds a decode warp on few SMs"): the
// decode kernel (BatchDecodeWrapper, bf16 d128 page 16, Llama-3-8B heads 32/8) restricted to k
// SMs by a CUDA green context instead of bench group pod_decode's occupier kernel, so that Nsight
// Compute (which serializes kernels) can profile the same situation: the plan is the full-device
// plan (grid = CTA slots of all SMs), its CTAs run on the k SMs of the green context in waves,
// as in pod_decode. k = 0: no green context (the whole GPU).
// Prints the median time of REPS runs (L2 flushed before each, CUDA events) and GB/s per SM.
//   warpbound K WARPS STAGES BATCH CTX REPS [PATH: 0 auto, 1 CUDA cores, 2 tensor cores]
// Build (dev box): nvcc -O2 -std=c++17 -arch=sm_90a -Iinclude scripts/diag/warpbound.cu \
//   -L<build> -lweft -lcuda -o warpbound
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "weft/weft.h"

#define CK(x)                                                                   \
  do {                                                                          \
    auto e_ = (x);                                                              \
    if (e_ != 0) {                                                              \
      std::fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, int(e_)); \
      std::exit(2);                                                             \
    }                                                                           \
  } while (0)

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: warpbound K WARPS STAGES BATCH CTX REPS\n");
    return 1;
  }
  const int k = std::atoi(argv[1]), w = std::atoi(argv[2]), st = std::atoi(argv[3]);
  const int b = std::atoi(argv[4]), ctx = std::atoi(argv[5]), reps = std::atoi(argv[6]);
  const int path = argc > 7 ? std::atoi(argv[7]) : 0;
  const int hq = 32, hkv = 8, d = 128, page = 16;
  CK(cuInit(0));
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  CK(cudaFree(nullptr));  // the primary context
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaStream_t s = nullptr;
  int used_sms = sms;
  if (k > 0) {
    CUdevResource all, part, rest;
    CK(cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
    unsigned n = 1;
    CK(cuDevSmResourceSplitByCount(&part, &n, &all, &rest, 0, k));
    CUdevResourceDesc desc;
    CK(cuDevResourceGenerateDesc(&desc, &part, 1));
    CUgreenCtx g;
    CK(cuGreenCtxCreate(&g, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
    CUcontext gc;
    CK(cuCtxFromGreenCtx(&gc, g));
    CK(cuCtxSetCurrent(gc));  // every allocation, attribute and launch below in the green context
    CUstream gs;
    CK(cuGreenCtxStreamCreate(&gs, g, CU_STREAM_NON_BLOCKING, 0));
    s = reinterpret_cast<cudaStream_t>(gs);
    used_sms = static_cast<int>(part.sm.smCount);
  } else {
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  }
  // Pool: 3 GB per K / V as in pod_decode; pages picked at random.
  const int64_t page_elems = int64_t(page) * hkv * d;
  const int32_t pool_pages = static_cast<int32_t>((3LL << 30) / (page_elems * 2));
  void *kp, *vp, *q, *o, *flush;
  CK(cudaMalloc(&kp, size_t(pool_pages) * page_elems * 2));
  CK(cudaMalloc(&vp, size_t(pool_pages) * page_elems * 2));
  CK(cudaMemset(kp, 0x3c, size_t(pool_pages) * page_elems * 2));  // finite bf16 values
  CK(cudaMemset(vp, 0x3c, size_t(pool_pages) * page_elems * 2));
  CK(cudaMalloc(&q, size_t(b) * hq * d * 2));
  CK(cudaMalloc(&o, size_t(b) * hq * d * 2));
  CK(cudaMemset(q, 0x3c, size_t(b) * hq * d * 2));
  const size_t flush_bytes = size_t(200) << 20;
  CK(cudaMalloc(&flush, flush_bytes));
  std::mt19937_64 rng(28);
  std::uniform_int_distribution<int32_t> pick(0, pool_pages - 1);
  std::vector<int32_t> indptr{0}, indices, last;
  for (int r = 0; r < b; ++r) {
    const int pages = (ctx + page - 1) / page;
    for (int p = 0; p < pages; ++p) indices.push_back(pick(rng));
    indptr.push_back(static_cast<int32_t>(indices.size()));
    last.push_back(ctx - (pages - 1) * page);
  }
  int32_t *di, *dx, *dl;
  CK(cudaMalloc(&di, indptr.size() * 4));
  CK(cudaMalloc(&dx, indices.size() * 4));
  CK(cudaMalloc(&dl, last.size() * 4));
  CK(cudaMemcpy(di, indptr.data(), indptr.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dx, indices.data(), indices.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dl, last.data(), last.size() * 4, cudaMemcpyHostToDevice));
  weft::PageTable t;
  t.batch_size = b;
  t.indptr = {di, indptr.data(), int64_t(indptr.size())};
  t.indices = {dx, indices.data(), int64_t(indices.size())};
  t.last_page_len = {dl, last.data(), int64_t(last.size())};
  const weft::DType bf = weft::DType::kBFloat16;
  weft::PagedKVCache cache;
  cache.layout = weft::KVLayout::kNHD;
  cache.k_pages = weft::TensorView(kp, bf, {pool_pages, page, hkv, d});
  cache.v_pages = weft::TensorView(vp, bf, {pool_pages, page, hkv, d});
  const weft::TensorView dq(q, bf, {b, hq, d}), dout(o, bf, {b, hq, d});
  weft::DecodeOptions opt;
  opt.warps_per_cta = w;
  opt.pipeline_stages = st;
  opt.path = static_cast<weft::DecodePath>(path);
  weft::AttentionVariant var;
  weft::BatchDecodeWrapper dec(b, hq, hkv, d, opt);
  void* ws;
  const size_t wsb = weft::BatchDecodeWrapper::workspace_size(b, hq, hkv, d, opt);
  CK(cudaMalloc(&ws, wsb));
  dec.plan(t, hq, hkv, d, page, bf, weft::KVLayout::kNHD, var, ws, wsb, s);
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int r = 0; r < reps + 2; ++r) {
    CK(cudaMemsetAsync(flush, r, flush_bytes, s));
    CK(cudaEventRecord(e0, s));
    dec.run(dq, cache, t, dout, nullptr, s);
    CK(cudaEventRecord(e1, s));
    CK(cudaStreamSynchronize(s));
    float x = 0;
    CK(cudaEventElapsedTime(&x, e0, e1));
    if (r >= 2) ms.push_back(x);
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  const double bytes = 2.0 * d * hkv * 2.0 * double(ctx) * b;
  std::printf("warpbound k=%d(sms %d of %d) path%d w%ds%d b%d ctx%d grid=%d: %.4f ms, %.1f GB/s, %.2f GB/s per SM (%.2f per warp at 2 CTAs/SM)\n",
              k, used_sms, sms, path, w, st, b, ctx, dec.num_ctas(), med, bytes / med / 1e6,
              bytes / med / 1e6 / used_sms, bytes / med / 1e6 / used_sms / (2.0 * w));
  return 0;
}
