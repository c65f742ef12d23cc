// Issue 18, rmsnorm / fused_add_rmsnorm: (1) every pointer is validated against the kernel's
// 16-byte vector accesses (x, out and residual rows, the weight): a misaligned pointer or row
// stride throws weft::Error naming it, no buffer changes, the context stays clean, and the next
// valid call on the same context matches the float64 reference; (2) an empty step (tokens 0, rows
// without storage) is a no-op eagerly and inside a captured graph.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/gpu_util.h"
#include "common/test_util.h"
#include "reference/rmsnorm.h"
#include "weft/error.h"
#include "weft/norm.h"

namespace {

using weft::DType;
using weft::TensorView;
using weft::test::DeviceBuffer;
using weft::test::thrown_argument;

template <class T>
T* shifted(T* p, int bytes) {
  return reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(p) + bytes);
}

constexpr int64_t T = 37, H = 4096;
constexpr double kEps = 1e-6;
const DType dt = DType::kBFloat16;
constexpr std::size_t kSlack = 64;

// Device buffers of one norm step (fresh random rows) and their float64 references.
struct Norm {
  std::vector<float> x, r, w;  // rounded to bf16
  DeviceBuffer dx, dr, dw, dout;
  std::vector<double> ref_out;
  weft::ref::FusedNormResult ref_fused;

  explicit Norm(weft::test::Rng& rng)
      : dx(T * H * 2 + kSlack), dr(T * H * 2 + kSlack), dw(H * 2 + kSlack), dout(T * H * 2 + kSlack) {
    x = rng.uniform_vec(T * H, -2, 2);
    r = rng.uniform_vec(T * H, -2, 2);
    w = rng.uniform_vec(H, 0.5, 1.5);
    for (auto* v : {&x, &r, &w}) weft::test::round_inplace(dt, *v);
    ref_out = weft::ref::rmsnorm(x.data(), w.data(), T, H, kEps);
    ref_fused = weft::ref::fused_add_rmsnorm(x.data(), r.data(), w.data(), T, H, kEps, weft::ref::rounding_of(dt));
    reset();
  }
  // Inputs back to their values, the output poisoned (0xFF: NaN in bf16).
  void reset() {
    dx.upload(weft::test::to_half_bits(dt, x).data(), T * H * 2);
    dr.upload(weft::test::to_half_bits(dt, r).data(), T * H * 2);
    dw.upload(weft::test::to_half_bits(dt, w).data(), H * 2);
    dout.poison();
  }
  std::vector<uint8_t> snapshot() const {
    std::vector<uint8_t> all;
    for (const DeviceBuffer* b : {&dx, &dr, &dw, &dout}) {
      const auto v = b->to_vector<uint8_t>(b->bytes());
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  }
  TensorView tx() const { return TensorView(dx.get(), dt, {T, H}); }
  TensorView tr() const { return TensorView(dr.get(), dt, {T, H}); }
  TensorView tw() const { return TensorView(dw.get(), dt, {H}); }
  TensorView tout() const { return TensorView(dout.get(), dt, {T, H}); }

  static void expect_close(const std::vector<float>& got, const std::vector<double>& ref, const char* what) {
    std::vector<float> rounded(ref.size());
    for (std::size_t i = 0; i < ref.size(); ++i) rounded[i] = weft::test::round_to(dt, static_cast<float>(ref[i]));
    const auto tol = weft::test::tolerance_from_baseline(weft::test::compare(rounded, ref), 4.0, 1e-5, 1e-3);
    const auto cmp = weft::test::compare(got, ref);
    EXPECT_TRUE(weft::test::within(cmp, tol)) << what << ": " << cmp.summary();
  }
  // Valid calls on the current context, checked against the references.
  void check_rmsnorm() {
    reset();
    weft::rmsnorm(tx(), tw(), tout(), kEps, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "the context must survive the rejected call";
    expect_close(weft::test::from_half_bits(dt, dout.to_vector<uint16_t>(T * H)), ref_out, "rmsnorm");
  }
  void check_fused() {
    reset();
    weft::fused_add_rmsnorm(tx(), tr(), tw(), kEps, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "the context must survive the rejected call";
    const auto res = weft::test::from_half_bits(dt, dr.to_vector<uint16_t>(T * H));
    const auto rc = weft::test::compare(res, ref_fused.residual);
    EXPECT_EQ(rc.max_abs, 0.0) << "residual: " << rc.summary();
    EXPECT_EQ(rc.nan_count, 0);
    expect_close(weft::test::from_half_bits(dt, dx.to_vector<uint16_t>(T * H)), ref_fused.out, "fused_add_rmsnorm");
  }
};

void expect_rejected(Norm& n, bool fused, const std::string& arg, const std::function<void()>& bad) {
  SCOPED_TRACE("argument " + arg);
  n.reset();
  WEFT_TEST_CUDA(cudaDeviceSynchronize());
  const std::vector<uint8_t> before = n.snapshot();
  EXPECT_EQ(thrown_argument(bad), arg);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_TRUE(n.snapshot() == before) << "a rejected call changed a buffer";
  if (fused)
    n.check_fused();
  else
    n.check_rmsnorm();
}

TEST(NormHardening, MisalignedPointersAndStridesAreRejected) {
  WEFT_REQUIRE_GPU();
  auto rng = weft::test::Rng::for_current_test();
  Norm n(rng);
  const TensorView x = n.tx(), r = n.tr(), w = n.tw(), out = n.tout();
  auto rms = [](TensorView x_, TensorView w_, TensorView o_) {
    return [x_, w_, o_] { weft::rmsnorm(x_, w_, o_, kEps, nullptr); };
  };
  auto fused = [](TensorView x_, TensorView r_, TensorView w_) {
    return [x_, r_, w_] { weft::fused_add_rmsnorm(x_, r_, w_, kEps, nullptr); };
  };
  for (int off : {2, 8}) {
    expect_rejected(n, false, "x", rms(TensorView(shifted(x.data, off), dt, {T, H}), w, out));
    expect_rejected(n, false, "out", rms(x, w, TensorView(shifted(out.data, off), dt, {T, H})));
    expect_rejected(n, false, "weight", rms(x, TensorView(shifted(w.data, off), dt, {H}), out));
    expect_rejected(n, true, "x", fused(TensorView(shifted(x.data, off), dt, {T, H}), r, w));
    expect_rejected(n, true, "residual", fused(x, TensorView(shifted(r.data, off), dt, {T, H}), w));
    expect_rejected(n, true, "weight", fused(x, r, TensorView(shifted(w.data, off), dt, {H})));
  }
  // Row strides that put row 1 at +8 bytes from a 16-byte boundary (fewer rows: inside the buffer).
  const int64_t t2 = T / 2;
  expect_rejected(n, false, "x", rms(TensorView(x.data, dt, {t2, H}, {H + 4, 1}), w, TensorView(out.data, dt, {t2, H})));
  expect_rejected(n, false, "out", rms(TensorView(x.data, dt, {t2, H}), w, TensorView(out.data, dt, {t2, H}, {H + 4, 1})));
  expect_rejected(n, true, "residual", fused(TensorView(x.data, dt, {t2, H}), TensorView(r.data, dt, {t2, H}, {H + 4, 1}), w));
}

// tokens 0: rows without storage, a real weight. Accepted and nothing written, eagerly and in a
// captured graph (with a marker memset so the graph is not empty); the context then serves a
// valid call.
TEST(NormHardening, EmptyStepEagerAndInAGraph) {
  WEFT_REQUIRE_GPU();
  auto rng = weft::test::Rng::for_current_test();
  Norm n(rng);
  WEFT_TEST_CUDA(cudaDeviceSynchronize());
  const std::vector<uint8_t> before = n.snapshot();
  const TensorView none(nullptr, dt, {0, H});
  const TensorView empty_x(n.dx.get(), dt, {0, H}), empty_r(n.dr.get(), dt, {0, H}), empty_o(n.dout.get(), dt, {0, H});
  auto calls = [&](cudaStream_t s) {
    weft::rmsnorm(none, n.tw(), none, kEps, s);
    weft::fused_add_rmsnorm(none, none, n.tw(), kEps, s);
    weft::rmsnorm(empty_x, n.tw(), empty_o, kEps, s);
    weft::fused_add_rmsnorm(empty_x, empty_r, n.tw(), kEps, s);
  };
  EXPECT_EQ(thrown_argument([&] { calls(nullptr); }), "<no throw>");
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_TRUE(n.snapshot() == before) << "an empty norm step changed a buffer";

  cudaStream_t s;
  WEFT_TEST_CUDA(cudaStreamCreate(&s));
  DeviceBuffer marker(4);
  WEFT_TEST_CUDA(cudaMemset(marker.get(), 0, 4));
  cudaGraph_t g;
  WEFT_TEST_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  WEFT_TEST_CUDA(cudaMemsetAsync(marker.get(), 0x5A, 4, s));
  const std::string thrown = thrown_argument([&] { calls(s); });
  WEFT_TEST_CUDA(cudaStreamEndCapture(s, &g));
  EXPECT_EQ(thrown, "<no throw>");
  cudaGraphExec_t exec;
  WEFT_TEST_CUDA(cudaGraphInstantiate(&exec, g, 0));
  WEFT_TEST_CUDA(cudaGraphLaunch(exec, s));
  WEFT_TEST_CUDA(cudaStreamSynchronize(s));
  EXPECT_EQ(marker.to_vector<uint32_t>(1)[0], 0x5A5A5A5Au) << "the graph did not replay";
  EXPECT_TRUE(n.snapshot() == before) << "the replayed empty step changed a buffer";
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);

  n.check_rmsnorm();
  n.check_fused();
}

}  // namespace
