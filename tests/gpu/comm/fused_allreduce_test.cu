// GPU tests (>= 2 GPUs, one thread per GPU): fused all-reduce + residual add + RMSNorm against
// the float64 reference (ref::allreduce_add_rmsnorm, residual rounded to the storage dtype),
// the two LSA kernels (push, copy engine: their outputs must be bit-identical), both
// variants, CTA counts 1/4/8/32, token counts not divisible by the world size, world = all
// visible GPUs and 2 (sub-communicator of the first two); copy-engine chunk counts 1..8; CUDA
// graph capture and replay; 10,000 back-to-back calls; rank-disagreement detection; the NCCL
// fallback.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/comm/rank_group.h"
#include "common/gpu_util.h"
#include "common/test_util.h"
#include "reference/rmsnorm.h"
#include "weft/comm.h"
#include "weft/error.h"

namespace {

using weft::AllReduceVariant;
using weft::CommKernel;
using weft::CommOptions;
using weft::CommPath;
using weft::DType;
using weft::TensorView;
using weft::test::DeviceBuffer;
using weft::test::RankGroup;

#define WEFT_REQUIRE_GPUS(n)                                                              \
  do {                                                                                    \
    WEFT_REQUIRE_GPU();                                                                   \
    if (weft::test::visible_gpus() < (n))                                                 \
      GTEST_SKIP() << "needs " << (n) << " GPUs, " << weft::test::visible_gpus() << " visible"; \
  } while (0)

// World sizes to test: all visible GPUs, and 2 when more are visible.
std::vector<std::vector<int>> device_sets() {
  const int n = weft::test::visible_gpus();
  std::vector<std::vector<int>> sets;
  std::vector<int> all;
  for (int i = 0; i < n; ++i) all.push_back(i);
  sets.push_back(all);
  if (n > 2) sets.push_back({0, 1});
  return sets;
}

struct HostRows {
  std::vector<float> v;
  std::vector<uint16_t> bits;
};
HostRows make_rows(weft::test::Rng& rng, DType dt, std::size_t n, double lo, double hi) {
  HostRows h;
  h.v = rng.uniform_vec(n, lo, hi);
  weft::test::round_inplace(dt, h.v);
  h.bits = weft::test::to_half_bits(dt, h.v);
  return h;
}

struct Problem {
  DType dt = DType::kBFloat16;
  int64_t T = 0, H = 0;
  double eps = 1e-6;
  std::vector<HostRows> x;  // per rank
  HostRows res, w;
  weft::ref::FusedNormResult ref;
  weft::test::Tolerance tol;
};

Problem make_problem(weft::test::Rng& rng, DType dt, int64_t T, int64_t H, int world) {
  Problem p;
  p.dt = dt;
  p.T = T;
  p.H = H;
  std::vector<const float*> ptrs;
  for (int r = 0; r < world; ++r) p.x.push_back(make_rows(rng, dt, T * H, -1.0, 1.0));
  for (auto& x : p.x) ptrs.push_back(x.v.data());
  p.res = make_rows(rng, dt, T * H, -1.0, 1.0);
  p.w = make_rows(rng, dt, H, 0.5, 1.5);
  p.ref = weft::ref::allreduce_add_rmsnorm(ptrs, p.res.v.data(), p.w.v.data(), T, H, p.eps,
                                           weft::ref::rounding_of(dt));
  std::vector<float> rounded(p.ref.out.size());
  for (std::size_t i = 0; i < rounded.size(); ++i)
    rounded[i] = static_cast<float>(weft::ref::round_value(weft::ref::rounding_of(dt), p.ref.out[i]));
  p.tol = weft::test::tolerance_from_baseline(weft::test::compare(rounded, p.ref.out), 4.0, 1e-5, 1e-3);
  return p;
}

enum class Mode { kOutOfPlace, kInPlace, kZeroCopy };

struct RunResult {
  std::vector<std::vector<uint16_t>> out, res;  // per rank
};

RunResult run(RankGroup& g, const Problem& p, AllReduceVariant v, int ctas, Mode mode = Mode::kOutOfPlace) {
  RunResult rr;
  rr.out.resize(g.size());
  rr.res.resize(g.size());
  const std::size_t bytes = static_cast<std::size_t>(p.T * p.H) * 2;
  g.parallel([&](int r) {
    weft::Communicator& c = g.comm(r);
    cudaStream_t s = g.stream(r);
    DeviceBuffer dx(bytes), dres(bytes), dw(p.H * 2), dout(bytes);
    void* xptr = mode == Mode::kZeroCopy ? c.input_buffer() : dx.get();
    void* optr = mode == Mode::kZeroCopy ? c.output_buffer() : mode == Mode::kInPlace ? xptr : dout.get();
    if (cudaMemcpy(xptr, p.x[r].bits.data(), bytes, cudaMemcpyHostToDevice) != cudaSuccess)
      throw std::runtime_error("upload x");
    dres.upload(p.res.bits.data(), bytes);
    dw.upload(p.w.bits.data(), p.H * 2);
    if (optr != xptr && cudaMemset(optr, 0xFF, bytes) != cudaSuccess) throw std::runtime_error("poison");
    if (cudaDeviceSynchronize() != cudaSuccess) throw std::runtime_error("sync");
    TensorView tx(xptr, p.dt, {p.T, p.H}, weft::Device::kCUDA, g.device(r));
    TensorView tres(dres.get(), p.dt, {p.T, p.H}, weft::Device::kCUDA, g.device(r));
    TensorView tw(dw.get(), p.dt, {p.H}, weft::Device::kCUDA, g.device(r));
    TensorView tout = mode == Mode::kInPlace ? TensorView()
                                             : TensorView(optr, p.dt, {p.T, p.H}, weft::Device::kCUDA, g.device(r));
    weft::fused_allreduce_add_rmsnorm(c, tx, tres, tw, p.eps, tout, ctas, s, v);
    c.check_remote_errors(s);  // synchronizes
    rr.out[r].resize(p.T * p.H);
    rr.res[r].resize(p.T * p.H);
    if (cudaMemcpy(rr.out[r].data(), optr, bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
      throw std::runtime_error("download out");
    dres.download(rr.res[r].data(), bytes);
  });
  return rr;
}

// Checks every rank's output and residual. `canonical`: the LSA paths must all produce the same
// bits (any variant, any CTA count); the first checked run sets it.
void check(RankGroup& g, const Problem& p, const RunResult& rr, AllReduceVariant v, bool lsa,
           std::vector<uint16_t>* canonical, const std::string& what) {
  const int world = g.size();
  for (int r = 0; r < world; ++r) {
    const std::string tag = what + " rank " + std::to_string(r);
    const auto out = weft::test::from_half_bits(p.dt, rr.out[r]);
    const auto cmp = weft::test::compare(out, p.ref.out);
    weft::test::Tolerance tol = p.tol;
    if (!lsa) {  // NCCL rounds the sum to the storage type before the residual add
      tol.rel_l2 *= 4;
      tol.max_abs *= 4;
    }
    EXPECT_TRUE(weft::test::within(cmp, tol)) << tag << " out: " << cmp.summary();
    EXPECT_EQ(rr.out[r], rr.out[0]) << tag << ": outputs differ between ranks";
    const auto [ob, oc] = g.comm(r).owned_tokens(p.T);
    const auto resf = weft::test::from_half_bits(p.dt, rr.res[r]);
    const bool all_rows = !lsa || v == AllReduceVariant::kOneShot;
    int64_t bad_owned = 0, bad_other = 0;
    for (int64_t t = 0; t < p.T; ++t) {
      const bool owned = all_rows || (t >= ob && t < ob + oc);
      for (int64_t h = 0; h < p.H; ++h) {
        const std::size_t i = static_cast<std::size_t>(t * p.H + h);
        if (owned && lsa) {
          if (!(resf[i] == static_cast<float>(p.ref.residual[i]))) ++bad_owned;
        } else if (!owned) {
          if (rr.res[r][i] != p.res.bits[i]) ++bad_other;
        }
      }
    }
    EXPECT_EQ(bad_owned, 0) << tag << ": updated residual differs from the reference (bit-exact expected)";
    EXPECT_EQ(bad_other, 0) << tag << ": residual rows owned by other ranks were modified";
    if (!lsa) {
      const auto rc = weft::test::compare(resf, p.ref.residual);
      EXPECT_TRUE(weft::test::within(rc, {p.dt == DType::kBFloat16 ? 1e-2 : 2e-3, 0.1})) << tag << " residual: "
                                                                                       << rc.summary();
    }
  }
  if (lsa && canonical) {
    if (canonical->empty())
      *canonical = rr.out[0];
    else
      EXPECT_EQ(rr.out[0], *canonical) << what << ": output bits depend on the variant / CTA count";
  }
}

const CommKernel kKernels[2] = {CommKernel::kPush, CommKernel::kCopyEngine};

void set_kernel(RankGroup& g, CommKernel k) {
  for (int r = 0; r < g.size(); ++r) g.comm(r).set_kernel(k);
}

std::string name(const Problem& p, AllReduceVariant v, int ctas, int world, CommKernel k = CommKernel::kAuto) {
  return std::string(weft::comm_kernel_name(k)) + " " + std::string(weft::dtype_name(p.dt)) + " T" + std::to_string(p.T) + " H" + std::to_string(p.H) + " " +
         weft::allreduce_variant_name(v) + " ctas" + std::to_string(ctas) + " world" + std::to_string(world);
}

CommOptions options(int64_t max_tokens = 16384, int64_t max_hidden = 8192) {
  CommOptions o;
  o.max_tokens = max_tokens;
  o.max_hidden = max_hidden;
  o.dtype = DType::kBFloat16;
  return o;
}

// World size 1 (one GPU is enough): the communicator takes CommPath::kSingleRank and the fused
// call runs the multi-rank kernels' reduce + norm code on num_ctas CTAs. Every row's residual
// must equal the reference bit for bit, outputs within tolerance, the same bits for every CTA
// count, in place and out of place, both dtypes, ragged token counts.
TEST(CommFused, SingleRankSameKernelPath) {
  WEFT_REQUIRE_GPU();
  auto rng = weft::test::Rng::for_current_test();
  RankGroup g({0}, options());
  ASSERT_EQ(g.comm(0).path(), CommPath::kSingleRank) << g.comm(0).path_reason();
  for (DType dt : {DType::kBFloat16, DType::kFloat16})
    for (int64_t H : {1024, 8192})
      for (int64_t T : {1, 3, 130, 1000}) {
        const Problem p = make_problem(rng, dt, T, H, 1);
        std::vector<uint16_t> canonical;
        for (int ctas : {1, 2, 8, 32})
          for (Mode m : {Mode::kOutOfPlace, Mode::kInPlace}) {
            const RunResult rr = run(g, p, AllReduceVariant::kAuto, ctas, m);
            // kOneShot in check(): every residual row is updated (as at world 1).
            check(g, p, rr, AllReduceVariant::kOneShot, true, &canonical,
                  name(p, AllReduceVariant::kAuto, ctas, 1) + (m == Mode::kInPlace ? " in place" : ""));
            if (HasFailure()) return;
          }
      }
}

TEST(CommFused, MatchesReferenceAllShapes) {
  WEFT_REQUIRE_GPUS(2);
  auto rng = weft::test::Rng::for_current_test();
  for (const auto& devs : device_sets()) {
    RankGroup g(devs, options());
    const int world = g.size();
    std::printf("[ world %d ] path %s: %s\n", world, weft::comm_path_name(g.comm(0).path()),
                g.comm(0).path_reason().c_str());
    // A runtime NCCL other than the headers' version refuses the LSA path by design
    // (CommOptions::allow_nccl_mismatch): the fused kernels cannot run here, which is the
    // installation's state, not a failure of this test (the fallback has its own tests).
    if (g.comm(0).path() != CommPath::kLsa &&
        g.comm(0).path_reason().find("differs from the headers") != std::string::npos)
      GTEST_SKIP() << g.comm(0).path_reason();
    ASSERT_EQ(g.comm(0).path(), CommPath::kLsa) << "expected the LSA path on an NVLink machine: "
                                                << g.comm(0).path_reason();
    for (DType dt : {DType::kBFloat16, DType::kFloat16})
      for (int64_t H : {2048, 4096, 8192})
        for (int64_t T : {1, 2, 3, 7, 128, 1000}) {
          const Problem p = make_problem(rng, dt, T, H, world);
          std::vector<uint16_t> canonical;  // shared by both kernels: bit-identical outputs
          for (CommKernel k : kKernels) {
            set_kernel(g, k);
            for (AllReduceVariant v : {AllReduceVariant::kTwoShot, AllReduceVariant::kOneShot})
              for (int ctas : {1, 4, 8, 32}) {
                const RunResult rr = run(g, p, v, ctas);
                check(g, p, rr, v, true, &canonical, name(p, v, ctas, world, k));
                if (HasFailure()) return;
              }
          }
        }
    // Large token counts: fewer combinations (host reference cost).
    struct Big { DType dt; int64_t T, H; AllReduceVariant v; int ctas; };
    const Big big[] = {{DType::kBFloat16, 4096, 8192, AllReduceVariant::kTwoShot, 8},
                       {DType::kBFloat16, 4096, 8192, AllReduceVariant::kOneShot, 32},
                       {DType::kFloat16, 4096, 4096, AllReduceVariant::kTwoShot, 4},
                       {DType::kBFloat16, 16384, 2048, AllReduceVariant::kTwoShot, 32},
                       {DType::kFloat16, 16384, 2048, AllReduceVariant::kOneShot, 8}};
    // Push checked against the reference; the copy engine must reproduce its bits.
    for (const Big& b : big) {
      const Problem p = make_problem(rng, b.dt, b.T, b.H, world);
      set_kernel(g, CommKernel::kPush);
      const RunResult anchor = run(g, p, b.v, b.ctas);
      check(g, p, anchor, b.v, true, nullptr, name(p, b.v, b.ctas, world, CommKernel::kPush));
      for (CommKernel k : {CommKernel::kCopyEngine}) {
        set_kernel(g, k);
        const RunResult other = run(g, p, b.v, b.ctas);
        for (int r = 0; r < world; ++r) {
          EXPECT_TRUE(other.out[r] == anchor.out[r]) << name(p, b.v, b.ctas, world, k) << " rank " << r
                                                   << ": outputs differ from push's";
          EXPECT_TRUE(other.res[r] == anchor.res[r]) << name(p, b.v, b.ctas, world, k) << " rank " << r
                                                   << ": residuals differ from push's";
        }
      }
    }
  }
}

// Sanitizer-sized (gpu-check runs *Small* tests under compute-sanitizer memcheck / racecheck):
// all kernels, both variants, token counts not divisible by the world size, a few CTA counts.
TEST(CommFusedSmall, BothKernelsBothVariants) {
  WEFT_REQUIRE_GPUS(2);
  auto rng = weft::test::Rng::for_current_test();
  for (const auto& devs : device_sets()) {
    RankGroup g(devs, options(512, 2048));
    if (g.comm(0).path() != CommPath::kLsa) GTEST_SKIP() << g.comm(0).path_reason();
    for (DType dt : {DType::kBFloat16, DType::kFloat16})
      for (int64_t T : {1, 7, 259}) {
        const Problem p = make_problem(rng, dt, T, 2048, g.size());
        std::vector<uint16_t> canonical;
        for (CommKernel k : kKernels) {
          set_kernel(g, k);
          for (AllReduceVariant v : {AllReduceVariant::kTwoShot, AllReduceVariant::kOneShot})
            for (int ctas : {1, 3}) {
              check(g, p, run(g, p, v, ctas), v, true, &canonical, name(p, v, ctas, g.size(), k));
              if (HasFailure()) return;
            }
        }
      }
  }
}

TEST(CommFused, InPlaceZeroCopyAndAuto) {
  WEFT_REQUIRE_GPUS(2);
  auto rng = weft::test::Rng::for_current_test();
  for (const auto& devs : device_sets()) {
    RankGroup g(devs, options(2048, 8192));
    if (g.comm(0).path() != CommPath::kLsa) GTEST_SKIP() << g.comm(0).path_reason();
    for (int64_t T : {5, 1000}) {
      const Problem p = make_problem(rng, DType::kBFloat16, T, 4096, g.size());
      std::vector<uint16_t> canonical;
      for (CommKernel k : kKernels) {
        set_kernel(g, k);
        for (AllReduceVariant v : {AllReduceVariant::kTwoShot, AllReduceVariant::kOneShot, AllReduceVariant::kAuto}) {
          const AllReduceVariant eff = v == AllReduceVariant::kAuto ? g.comm(0).select_variant(T, 4096, p.dt) : v;
          check(g, p, run(g, p, v, 4, Mode::kInPlace), eff, true, &canonical,
                "in place " + name(p, v, 4, g.size(), k));
          check(g, p, run(g, p, v, 8, Mode::kZeroCopy), eff, true, &canonical,
                "zero copy " + name(p, v, 8, g.size(), k));
        }
      }
    }
  }
}

__global__ void count_diff(const uint16_t* a, const uint16_t* b, int n, unsigned long long* bad) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    if (a[i] != b[i]) atomicAdd(bad, 1ull);
}

// 10,000 back-to-back calls, no host synchronization between ranks: variants and CTA counts
// change every call, the kernel (push / copy engine) every 7 calls, x alternates between two sets whose rank-order sum is exactly zero (so
// every call must reproduce the same residual and output; a stale or missing peer read makes
// the sum non-zero). Each call's output and residual are compared on the device with the
// expected bits; the mismatch counter is read every 1000 calls.
TEST(CommFused, TenThousandCallsBackToBack) {
  WEFT_REQUIRE_GPUS(2);
  const int64_t T = 61, H = 2048;  // 61: not divisible by 2, 4 or 8
  const DType dt = DType::kBFloat16;
  const int kCalls = 10000, kCheckEvery = 1000;
  for (const auto& devs : device_sets()) {
    RankGroup g(devs, options(1024, 4096));
    if (g.comm(0).path() != CommPath::kLsa) GTEST_SKIP() << g.comm(0).path_reason();
    const int world = g.size();
    auto rng = weft::test::Rng::for_current_test(world);
    // set[s][r]: x of rank r in set s; pairs (2k, 2k+1) cancel exactly, an odd last rank is 0.
    std::vector<std::vector<HostRows>> set(2, std::vector<HostRows>(world));
    for (int s = 0; s < 2; ++s)
      for (int r = 0; r < world; r += 2) {
        set[s][r] = make_rows(rng, dt, T * H, -1.0, 1.0);
        if (r + 1 < world) {
          set[s][r + 1] = set[s][r];
          for (auto& v : set[s][r + 1].v) v = -v;
          set[s][r + 1].bits = weft::test::to_half_bits(dt, set[s][r + 1].v);
        }
        if (r + 1 == world) {
          std::fill(set[s][r].v.begin(), set[s][r].v.end(), 0.f);
          set[s][r].bits.assign(T * H, 0);
        }
      }
    HostRows res = make_rows(rng, dt, T * H, -1.0, 1.0), w = make_rows(rng, dt, H, 0.5, 1.5);
    std::vector<const float*> ptrs;
    for (auto& x : set[0]) ptrs.push_back(x.v.data());
    const auto ref = weft::ref::allreduce_add_rmsnorm(ptrs, res.v.data(), w.v.data(), T, H, 1e-6,
                                                      weft::ref::rounding_of(dt));
    std::vector<unsigned long long> bad(world, 0), first_bad_call(world, ~0ull);
    std::vector<std::vector<uint16_t>> final_out(world);
    const std::size_t bytes = T * H * 2;
    g.parallel([&](int r) {
      weft::Communicator& c = g.comm(r);
      cudaStream_t s = g.stream(r);
      DeviceBuffer x0 = DeviceBuffer::from(set[0][r].bits), x1 = DeviceBuffer::from(set[1][r].bits);
      DeviceBuffer dres = DeviceBuffer::from(res.bits), dw = DeviceBuffer::from(w.bits), dout(bytes), dexp(bytes),
                   dres0 = DeviceBuffer::from(res.bits), counter(sizeof(unsigned long long));
      WEFT_TEST_CUDA(cudaMemset(counter.get(), 0, sizeof(unsigned long long)));
      // Expected bits: the first call's output (checked against the reference after the loop).
      TensorView tres(dres.get(), dt, {T, H}, weft::Device::kCUDA, g.device(r));
      TensorView tw(dw.get(), dt, {H}, weft::Device::kCUDA, g.device(r));
      TensorView tout(dout.get(), dt, {T, H}, weft::Device::kCUDA, g.device(r));
      const AllReduceVariant vs[3] = {AllReduceVariant::kOneShot, AllReduceVariant::kTwoShot, AllReduceVariant::kTwoShot};
      const int ctas[5] = {2, 8, 4, 32, 1};
      for (int i = 0; i < kCalls; ++i) {
        TensorView tx((i & 1 ? x1 : x0).get(), dt, {T, H}, weft::Device::kCUDA, g.device(r));
        cudaMemsetAsync(dout.get(), 0xFF, bytes, s);
        // Kernel switches every 7 calls (coprime with 3 and 5): push and copy-engine calls
        // follow each other in every combination of variant and CTA count (shared per-CTA state,
        // staging reuse); the copy engine's chunk count cycles through 1..4.
        c.set_kernel(kKernels[(i / 7) % 2]);
        c.set_copy_engine_chunks(1 + i % 4);
        weft::fused_allreduce_add_rmsnorm(c, tx, tres, tw, 1e-6, tout, ctas[i % 5], s, vs[i % 3]);
        if (i == 0) {
          cudaStreamSynchronize(s);
          final_out[r] = dout.to_vector<uint16_t>(T * H);
          cudaMemcpy(dexp.get(), dout.get(), bytes, cudaMemcpyDeviceToDevice);
        }
        count_diff<<<64, 256, 0, s>>>(dout.as<uint16_t>(), dexp.as<uint16_t>(), int(T * H),
                                      counter.as<unsigned long long>());
        count_diff<<<64, 256, 0, s>>>(dres.as<uint16_t>(), dres0.as<uint16_t>(), int(T * H),
                                      counter.as<unsigned long long>());
        if ((i + 1) % kCheckEvery == 0) {
          cudaStreamSynchronize(s);
          unsigned long long b = 0;
          cudaMemcpy(&b, counter.get(), sizeof(b), cudaMemcpyDeviceToHost);
          if (b != 0 && first_bad_call[r] == ~0ull) first_bad_call[r] = i + 1;
          bad[r] = b;
        }
      }
      c.check_remote_errors(s);
      if (cudaGetLastError() != cudaSuccess) throw std::runtime_error("CUDA error in the stress loop");
    });
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(bad[r], 0u) << "world " << world << " rank " << r << ": mismatching elements, first seen by call "
                            << first_bad_call[r];
      EXPECT_EQ(final_out[r], final_out[0]);
    }
    const auto out0 = weft::test::from_half_bits(dt, final_out[0]);
    const auto cmp = weft::test::compare(out0, ref.out);
    EXPECT_LE(cmp.max_abs, 1e-2) << cmp.summary();
    EXPECT_EQ(cmp.nan_count, 0);
  }
}

TEST(CommFused, RankDisagreementIsReportedNotHung) {
  WEFT_REQUIRE_GPUS(2);
  auto rng = weft::test::Rng::for_current_test();
  const DType dt = DType::kBFloat16;
  const int64_t H = 2048;
  RankGroup g(device_sets().back(), options(256, 4096));
  if (g.comm(0).path() != CommPath::kLsa) GTEST_SKIP() << g.comm(0).path_reason();
  const int world = g.size();
  const Problem p = make_problem(rng, dt, 65, H, world);
  // Case A: rank 0 says 64 tokens, the others 65. Case B: rank 0 one-shot, the others two-shot.
  // Each with every kernel (step / 2 indexes kKernels). Case A with the copy engine at 2
  // chunks per call: 65 tokens make every slice >= 2 rows, 64 with rank 0 too, so the ranks cut
  // different rows into their chunks.
  // 2 cases x every kernel of kKernels (a fixed 6 read past its end once bulk was removed).
  constexpr int kSteps = 2 * static_cast<int>(sizeof(kKernels) / sizeof(kKernels[0]));
  for (int step = 0; step < kSteps; ++step) {
    const int which = step % 2;
    const CommKernel kernel = kKernels[step / 2];
    set_kernel(g, kernel);
    for (int r = 0; r < world; ++r) g.comm(r).set_copy_engine_chunks(2);
    std::vector<std::string> errors(world);
    std::vector<bool> untouched(world, false), res_untouched(world, false);
    g.parallel([&](int r) {
      weft::Communicator& c = g.comm(r);
      cudaStream_t s = g.stream(r);
      const int64_t T = which == 0 && r == 0 ? 64 : 65;
      const AllReduceVariant v = which == 1 && r == 0 ? AllReduceVariant::kOneShot : AllReduceVariant::kTwoShot;
      DeviceBuffer dx = DeviceBuffer::from(p.x[r].bits), dres = DeviceBuffer::from(p.res.bits),
                   dw = DeviceBuffer::from(p.w.bits), dout(65 * H * 2);
      dout.poison();
      cudaDeviceSynchronize();
      const int dev = g.device(r);
      weft::fused_allreduce_add_rmsnorm(c, TensorView(dx.get(), dt, {T, H}, weft::Device::kCUDA, dev),
                                        TensorView(dres.get(), dt, {T, H}, weft::Device::kCUDA, dev),
                                        TensorView(dw.get(), dt, {H}, weft::Device::kCUDA, dev), 1e-6,
                                        TensorView(dout.get(), dt, {T, H}, weft::Device::kCUDA, dev), 4, s, v);
      try {
        c.check_remote_errors(s);
      } catch (const weft::Error& e) {
        errors[r] = e.what();
      }
      const auto o = dout.to_vector<uint16_t>(65 * H);
      const auto rs = dres.to_vector<uint16_t>(65 * H);
      bool ok = rs == p.res.bits;
      res_untouched[r] = ok;
      for (uint16_t u : o) ok = ok && u == 0xFFFF;
      untouched[r] = ok;
    });
    for (int r = 0; r < world; ++r) {
      EXPECT_NE(errors[r].find(which == 0 ? "tokens" : "variant"), std::string::npos)
          << "rank " << r << " error: '" << errors[r] << "'";
      // The copy engine's pulls still run on a mismatch (`out` holds stale rows, see
      // fused_allreduce_ce.cu); the residual must be untouched with every kernel.
      if (kernel != CommKernel::kCopyEngine)
        EXPECT_TRUE(untouched[r]) << "rank " << r << ": a skipped call wrote its outputs";
      else
        EXPECT_TRUE(res_untouched[r]) << "rank " << r << ": a skipped call wrote the residual";
    }
  }
  // Local validation fails on every rank before anything is enqueued.
  g.parallel([&](int r) {
    DeviceBuffer dx(65 * H * 2), dres(65 * H * 2), dw(H * 2);
    const int dev = g.device(r);
    try {
      weft::fused_allreduce_add_rmsnorm(g.comm(r), TensorView(dx.get(), dt, {65, H}, weft::Device::kCUDA, dev),
                                        TensorView(dres.get(), dt, {65, H}, weft::Device::kCUDA, dev),
                                        TensorView(dw.get(), dt, {H}, weft::Device::kCUDA, dev), 1e-6, TensorView(),
                                        33, g.stream(r));
      throw std::runtime_error("num_ctas 33 accepted");
    } catch (const weft::Error& e) {
      if (e.argument() != "num_ctas") throw std::runtime_error(std::string("wrong argument: ") + e.what());
    }
  });
  // The communicator is still usable and in step (both kernels).
  std::vector<uint16_t> canonical;
  for (CommKernel k : kKernels) {
    set_kernel(g, k);
    check(g, p, run(g, p, AllReduceVariant::kTwoShot, 4), AllReduceVariant::kTwoShot, true, &canonical,
          std::string("after the mismatches, ") + weft::comm_kernel_name(k));
  }
}

// Copy-engine kernel: every chunk count 1..8 (including more chunks than owned rows) gives the
// same bits as push; then the call is captured in a CUDA graph (its internal streams fork from
// and join the capturing stream) and the graph is replayed on new inputs written into the same
// buffers, each replay checked against its own reference.
TEST(CommFused, CopyEngineChunksAndGraphReplay) {
  WEFT_REQUIRE_GPUS(2);
  auto rng = weft::test::Rng::for_current_test();
  for (const auto& devs : device_sets()) {
    RankGroup g(devs, options(4096, 4096));
    if (g.comm(0).path() != CommPath::kLsa) GTEST_SKIP() << g.comm(0).path_reason();
    const int world = g.size();
    for (int64_t T : {3, 1000, 4095}) {
      const Problem p = make_problem(rng, DType::kBFloat16, T, 4096, world);
      std::vector<uint16_t> canonical;
      set_kernel(g, CommKernel::kPush);
      check(g, p, run(g, p, AllReduceVariant::kTwoShot, 8), AllReduceVariant::kTwoShot, true, &canonical,
            "push " + name(p, AllReduceVariant::kTwoShot, 8, world));
      set_kernel(g, CommKernel::kCopyEngine);
      for (int chunks = 1; chunks <= 8; ++chunks) {
        for (int r = 0; r < world; ++r) g.comm(r).set_copy_engine_chunks(chunks);
        for (Mode mode : {Mode::kOutOfPlace, Mode::kInPlace, Mode::kZeroCopy})
          check(g, p, run(g, p, AllReduceVariant::kTwoShot, 5, mode), AllReduceVariant::kTwoShot, true, &canonical,
                "ce chunks " + std::to_string(chunks) + " mode " + std::to_string(static_cast<int>(mode)) + " " +
                    name(p, AllReduceVariant::kTwoShot, 5, world));
        if (HasFailure()) return;
      }
    }
    // Graph capture and replay (3 chunks per call, 8 CTAs).
    const int64_t T = 777, H = 4096;
    std::vector<Problem> problems;
    for (int i = 0; i < 3; ++i) problems.push_back(make_problem(rng, DType::kBFloat16, T, H, world));
    const std::size_t bytes = static_cast<std::size_t>(T * H) * 2;
    std::vector<RunResult> results(problems.size());
    for (auto& rr : results) {
      rr.out.resize(world);
      rr.res.resize(world);
    }
    for (int r = 0; r < world; ++r) g.comm(r).set_copy_engine_chunks(3);
    g.parallel([&](int r) {
      weft::Communicator& c = g.comm(r);
      cudaStream_t s = g.stream(r);
      const int dev = g.device(r);
      DeviceBuffer dx(bytes), dres(bytes), dw(H * 2), dout(bytes);
      const TensorView tx(dx.get(), DType::kBFloat16, {T, H}, weft::Device::kCUDA, dev);
      const TensorView tres(dres.get(), DType::kBFloat16, {T, H}, weft::Device::kCUDA, dev);
      const TensorView tw(dw.get(), DType::kBFloat16, {H}, weft::Device::kCUDA, dev);
      const TensorView tout(dout.get(), DType::kBFloat16, {T, H}, weft::Device::kCUDA, dev);
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      WEFT_TEST_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      weft::fused_allreduce_add_rmsnorm(c, tx, tres, tw, 1e-6, tout, 8, s, AllReduceVariant::kTwoShot);
      WEFT_TEST_CUDA(cudaStreamEndCapture(s, &graph));
      WEFT_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
      for (std::size_t i = 0; i < problems.size(); ++i) {
        const Problem& pr = problems[i];
        dx.upload(pr.x[r].bits.data(), bytes);
        dres.upload(pr.res.bits.data(), bytes);
        dw.upload(pr.w.bits.data(), H * 2);
        dout.poison();
        WEFT_TEST_CUDA(cudaDeviceSynchronize());
        WEFT_TEST_CUDA(cudaGraphLaunch(exec, s));
        c.check_remote_errors(s);
        results[i].out[r] = dout.to_vector<uint16_t>(T * H);
        results[i].res[r] = dres.to_vector<uint16_t>(T * H);
      }
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
    });
    for (std::size_t i = 0; i < problems.size(); ++i)
      check(g, problems[i], results[i], AllReduceVariant::kTwoShot, true, nullptr,
            "graph replay " + std::to_string(i) + " world " + std::to_string(world));
    for (int r = 0; r < world; ++r) g.comm(r).set_copy_engine_chunks(0);
  }
}

// CommOptions::kernel and set_kernel: a kernel stays that kernel; kAuto picks per call by size
// (kernel_for never returns kAuto); bad values are rejected.
TEST(CommFused, KernelOptionResolves) {
  WEFT_REQUIRE_GPUS(2);
  CommOptions o = options(64, 2048);
  o.kernel = CommKernel::kPush;
  RankGroup g(device_sets().back(), o);
  EXPECT_EQ(g.comm(0).kernel(), CommKernel::kPush);
  g.comm(0).set_kernel(CommKernel::kCopyEngine);
  EXPECT_EQ(g.comm(0).kernel(), CommKernel::kCopyEngine);
  g.comm(0).set_kernel(CommKernel::kAuto);
  EXPECT_EQ(g.comm(0).kernel(), CommKernel::kAuto);  // by size per call
  EXPECT_EQ(g.comm(0).kernel_for(128, 8192, DType::kBFloat16), CommKernel::kPush);
  EXPECT_EQ(g.comm(0).kernel_for(1024, 8192, DType::kBFloat16), CommKernel::kCopyEngine);
  EXPECT_NE(g.comm(0).kernel_for(1, 8192, DType::kBFloat16), CommKernel::kAuto);
  const auto kernel_for_arg = [&](int64_t t, int64_t h, DType d) {
    try {
      g.comm(0).kernel_for(t, h, d);
    } catch (const weft::Error& e) {
      return e.argument();
    }
    return std::string("accepted");
  };
  EXPECT_EQ(kernel_for_arg(-1, 8192, DType::kBFloat16), "tokens");
  EXPECT_EQ(kernel_for_arg(8, 0, DType::kBFloat16), "hidden");
  EXPECT_EQ(kernel_for_arg(8, 8192, DType::kFloat32), "dtype");
  g.comm(0).set_kernel(CommKernel::kCopyEngine);
  EXPECT_EQ(g.comm(0).kernel(), CommKernel::kCopyEngine);
  try {
    g.comm(0).set_copy_engine_chunks(9);
    ADD_FAILURE() << "9 chunks accepted";
  } catch (const weft::Error& e) {
    EXPECT_EQ(e.argument(), "chunks");
  }
  try {
    g.comm(0).set_kernel(static_cast<CommKernel>(7));
    ADD_FAILURE() << "kernel 7 accepted";
  } catch (const weft::Error& e) {
    EXPECT_EQ(e.argument(), "kernel");
  }
  try {
    g.comm(0).set_kernel(static_cast<CommKernel>(2));
    ADD_FAILURE() << "kernel 2 (the removed bulk kernel) accepted";
  } catch (const weft::Error& e) {
    EXPECT_EQ(e.argument(), "kernel");
  }
}

TEST(CommFused, NcclFallbackForced) {
  WEFT_REQUIRE_GPUS(2);
  auto rng = weft::test::Rng::for_current_test();
  for (const auto& devs : device_sets()) {
    CommOptions o = options(1024, 8192);
    o.force_fallback = true;
    RankGroup g(devs, o);
    ASSERT_EQ(g.comm(0).path(), CommPath::kNcclFallback);
    EXPECT_NE(g.comm(0).path_reason().find("forced"), std::string::npos) << g.comm(0).path_reason();
    EXPECT_EQ(g.comm(0).input_buffer(), nullptr);
    for (DType dt : {DType::kBFloat16, DType::kFloat16})
      for (int64_t H : {2048, 8192})
        for (int64_t T : {1, 7, 1000}) {
          const Problem p = make_problem(rng, dt, T, H, g.size());
          check(g, p, run(g, p, AllReduceVariant::kAuto, 4), AllReduceVariant::kAuto, false, nullptr,
                "fallback " + name(p, AllReduceVariant::kAuto, 4, g.size()));
          check(g, p, run(g, p, AllReduceVariant::kAuto, 4, Mode::kInPlace), AllReduceVariant::kAuto, false, nullptr,
                "fallback in place " + name(p, AllReduceVariant::kAuto, 4, g.size()));
        }
  }
}

}  // namespace
