// GPU tests: rmsnorm / fused_add_rmsnorm against the float64 reference (reference/rmsnorm.h),
// f16 and bf16, hidden 1024..16384 (and non-power-of-two widths), poisoned outputs, strided and
// in-place views, determinism, and rejected calls that must leave every buffer untouched.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
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

struct HostRows {
  std::vector<float> v;           // values (already representable in the dtype)
  std::vector<uint16_t> bits;     // storage
};

HostRows make_rows(weft::test::Rng& rng, DType dt, std::size_t n, double lo = -2.0, double hi = 2.0) {
  HostRows h;
  h.v = rng.uniform_vec(n, lo, hi);
  weft::test::round_inplace(dt, h.v);
  h.bits = weft::test::to_half_bits(dt, h.v);
  return h;
}

std::vector<double> round_ref(DType dt, const std::vector<double>& ref) {
  std::vector<double> r(ref.size());
  for (std::size_t i = 0; i < ref.size(); ++i) r[i] = weft::ref::round_value(weft::ref::rounding_of(dt), ref[i]);
  return r;
}

// Downloads `rows` rows of `hidden` values from a buffer whose rows are `stride` elements apart.
std::vector<float> download_rows(const DeviceBuffer& b, DType dt, int64_t rows, int64_t hidden, int64_t stride) {
  std::vector<uint16_t> all(static_cast<std::size_t>(rows > 0 ? (rows - 1) * stride + hidden : 0));
  b.download(all.data(), all.size() * 2);
  std::vector<uint16_t> packed(static_cast<std::size_t>(rows * hidden));
  for (int64_t t = 0; t < rows; ++t)
    std::memcpy(&packed[t * hidden], &all[t * stride], hidden * 2);
  return weft::test::from_half_bits(dt, packed);
}

DeviceBuffer upload_rows(const std::vector<uint16_t>& bits, int64_t rows, int64_t hidden, int64_t stride) {
  DeviceBuffer b(static_cast<std::size_t>(rows > 0 ? ((rows - 1) * stride + hidden) * 2 : 2));
  b.poison();
  std::vector<uint16_t> all(b.bytes() / 2, 0xFFFF);
  for (int64_t t = 0; t < rows; ++t) std::memcpy(&all[t * stride], &bits[t * hidden], hidden * 2);
  b.upload(all.data(), all.size() * 2);
  return b;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& ref, DType dt, const std::string& what) {
  const auto base = weft::test::compare(
      [&] { std::vector<float> f(ref.size()); auto r = round_ref(dt, ref); for (std::size_t i = 0; i < f.size(); ++i) f[i] = float(r[i]); return f; }(),
      ref);
  const auto tol = weft::test::tolerance_from_baseline(base, 4.0, 1e-5, 1e-3);
  const auto cmp = weft::test::compare(got, ref);
  EXPECT_TRUE(weft::test::within(cmp, tol)) << what << ": " << cmp.summary() << " (baseline " << base.summary() << ")";
}

struct Case {
  DType dt;
  int64_t tokens, hidden, stride;
};

void run_rmsnorm(const Case& c, bool in_place) {
  auto rng = weft::test::Rng::for_current_test(static_cast<uint64_t>(c.hidden * 131 + c.tokens + (in_place ? 7 : 0)));
  const int64_t n = c.tokens * c.hidden;
  HostRows x = make_rows(rng, c.dt, n);
  HostRows w = make_rows(rng, c.dt, c.hidden, 0.5, 1.5);
  const double eps = 1e-5;
  DeviceBuffer dx = upload_rows(x.bits, c.tokens, c.hidden, c.stride);
  DeviceBuffer dw = DeviceBuffer::from(w.bits);
  DeviceBuffer dout(static_cast<std::size_t>(std::max<int64_t>(n, 1) * 2));
  dout.poison();
  TensorView tx(dx.get(), c.dt, {c.tokens, c.hidden}, {c.stride, 1});
  TensorView tw(dw.get(), c.dt, {c.hidden});
  TensorView tout = in_place ? tx : TensorView(dout.get(), c.dt, {c.tokens, c.hidden});
  weft::rmsnorm(tx, tw, tout, eps, nullptr);
  WEFT_TEST_CUDA(cudaDeviceSynchronize());
  const auto got = in_place ? download_rows(dx, c.dt, c.tokens, c.hidden, c.stride)
                            : download_rows(dout, c.dt, c.tokens, c.hidden, c.hidden);
  const auto ref = weft::ref::rmsnorm(x.v.data(), w.v.data(), c.tokens, c.hidden, eps);
  expect_close(got, ref, c.dt, "rmsnorm " + std::string(weft::dtype_name(c.dt)) + " tokens " +
                                   std::to_string(c.tokens) + " hidden " + std::to_string(c.hidden));
}

void run_fused(const Case& c) {
  auto rng = weft::test::Rng::for_current_test(static_cast<uint64_t>(c.hidden * 977 + c.tokens));
  const int64_t n = c.tokens * c.hidden;
  HostRows x = make_rows(rng, c.dt, n);
  HostRows r = make_rows(rng, c.dt, n);
  HostRows w = make_rows(rng, c.dt, c.hidden, 0.5, 1.5);
  const double eps = 1e-6;
  DeviceBuffer dx = upload_rows(x.bits, c.tokens, c.hidden, c.hidden);
  DeviceBuffer dr = upload_rows(r.bits, c.tokens, c.hidden, c.stride);
  DeviceBuffer dw = DeviceBuffer::from(w.bits);
  TensorView tx(dx.get(), c.dt, {c.tokens, c.hidden});
  TensorView tr(dr.get(), c.dt, {c.tokens, c.hidden}, {c.stride, 1});
  TensorView tw(dw.get(), c.dt, {c.hidden});
  weft::fused_add_rmsnorm(tx, tr, tw, eps, nullptr);
  WEFT_TEST_CUDA(cudaDeviceSynchronize());
  const auto out = download_rows(dx, c.dt, c.tokens, c.hidden, c.hidden);
  const auto res = download_rows(dr, c.dt, c.tokens, c.hidden, c.stride);
  const auto ref = weft::ref::fused_add_rmsnorm(x.v.data(), r.v.data(), w.v.data(), c.tokens, c.hidden, eps,
                                                weft::ref::rounding_of(c.dt));
  // The updated residual is an fp32 add rounded once: bit-exact with the reference.
  const auto rc = weft::test::compare(res, ref.residual);
  EXPECT_EQ(rc.max_abs, 0.0) << "residual: " << rc.summary();
  EXPECT_EQ(rc.nan_count, 0);
  expect_close(out, ref.out, c.dt, "fused_add_rmsnorm " + std::string(weft::dtype_name(c.dt)) + " tokens " +
                                       std::to_string(c.tokens) + " hidden " + std::to_string(c.hidden));
}

const int64_t kHiddens[] = {1024, 1032, 2048, 3072, 4096, 5120, 8192, 12288, 16384};

TEST(RmsNorm, MatchesReferenceAcrossHiddenSizes) {
  WEFT_REQUIRE_GPU();
  auto rng = weft::test::Rng::for_current_test();
  for (DType dt : {DType::kBFloat16, DType::kFloat16})
    for (int64_t h : kHiddens) {
      run_rmsnorm({dt, 1, h, h}, false);
      run_rmsnorm({dt, rng.randint(2, 300), h, h}, false);
    }
}

TEST(RmsNorm, StridedAndInPlace) {
  WEFT_REQUIRE_GPU();
  for (DType dt : {DType::kBFloat16, DType::kFloat16}) {
    run_rmsnorm({dt, 37, 4096, 4096 + 64}, false);
    run_rmsnorm({dt, 37, 4096, 4096}, true);
    run_rmsnorm({dt, 5, 16384, 16384 + 8}, true);
  }
}

TEST(FusedAddRmsNorm, MatchesReferenceAcrossHiddenSizes) {
  WEFT_REQUIRE_GPU();
  auto rng = weft::test::Rng::for_current_test();
  for (DType dt : {DType::kBFloat16, DType::kFloat16})
    for (int64_t h : kHiddens) {
      run_fused({dt, 1, h, h});
      run_fused({dt, rng.randint(2, 300), h, h});
    }
  run_fused({DType::kBFloat16, 33, 8192, 8192 + 256});  // strided residual
  run_fused({DType::kBFloat16, 4096, 8192, 8192});      // bench-sized
}

TEST(FusedAddRmsNorm, DeterministicBits) {
  WEFT_REQUIRE_GPU();
  auto rng = weft::test::Rng::for_current_test();
  const DType dt = DType::kBFloat16;
  const int64_t T = 513, H = 8192;
  HostRows x = make_rows(rng, dt, T * H), r = make_rows(rng, dt, T * H), w = make_rows(rng, dt, H, 0.5, 1.5);
  std::vector<uint16_t> first_out, first_res;
  for (int run = 0; run < 3; ++run) {
    DeviceBuffer dx = DeviceBuffer::from(x.bits), dr = DeviceBuffer::from(r.bits), dw = DeviceBuffer::from(w.bits);
    weft::fused_add_rmsnorm(TensorView(dx.get(), dt, {T, H}), TensorView(dr.get(), dt, {T, H}),
                            TensorView(dw.get(), dt, {H}), 1e-6, nullptr);
    WEFT_TEST_CUDA(cudaDeviceSynchronize());
    auto o = dx.to_vector<uint16_t>(T * H), rr = dr.to_vector<uint16_t>(T * H);
    if (run == 0) {
      first_out = o;
      first_res = rr;
    } else {
      ASSERT_EQ(o, first_out);
      ASSERT_EQ(rr, first_res);
    }
  }
}

TEST(RmsNorm, EmptyAndRejectedCallsWriteNothing) {
  WEFT_REQUIRE_GPU();
  const DType dt = DType::kBFloat16;
  const int64_t T = 8, H = 2048;
  DeviceBuffer dx(T * H * 2), dr(T * H * 2), dw(H * 2), dout(T * H * 2);
  for (auto* b : {&dx, &dr, &dw, &dout}) b->poison();
  WEFT_TEST_CUDA(cudaDeviceSynchronize());
  TensorView x(dx.get(), dt, {T, H}), r(dr.get(), dt, {T, H}), w(dw.get(), dt, {H}), out(dout.get(), dt, {T, H});
  // tokens = 0: valid, nothing launched
  EXPECT_NO_THROW(weft::rmsnorm(TensorView(dx.get(), dt, {0, H}), w, TensorView(dout.get(), dt, {0, H}), 1e-6, nullptr));
  EXPECT_NO_THROW(weft::fused_add_rmsnorm(TensorView(dx.get(), dt, {0, H}), TensorView(dr.get(), dt, {0, H}), w, 1e-6, nullptr));
  auto expect_arg = [](const char* arg, auto&& f) {
    try {
      f();
      ADD_FAILURE() << "accepted, expected an error naming " << arg;
    } catch (const weft::Error& e) {
      EXPECT_EQ(e.argument(), arg) << e.what();
    }
  };
  expect_arg("x", [&] { weft::rmsnorm(TensorView(dx.get(), dt, {T, 2044}), w, out, 1e-6, nullptr); });
  expect_arg("eps", [&] { weft::rmsnorm(x, w, out, 0.0, nullptr); });
  expect_arg("weight", [&] { weft::rmsnorm(x, TensorView(dw.get(), dt, {H - 8}), out, 1e-6, nullptr); });
  expect_arg("out", [&] { weft::rmsnorm(x, w, TensorView(dout.get(), DType::kFloat16, {T, H}), 1e-6, nullptr); });
  expect_arg("residual", [&] { weft::fused_add_rmsnorm(x, TensorView(dr.get(), dt, {T - 1, H}), w, 1e-6, nullptr); });
  expect_arg("x", [&] { weft::fused_add_rmsnorm(TensorView(dx.get(), dt, {T, 16392}), r, w, 1e-6, nullptr); });
  WEFT_TEST_CUDA(cudaDeviceSynchronize());
  for (auto* b : {&dx, &dr, &dout}) {
    const auto v = b->to_vector<uint16_t>(T * H);
    for (uint16_t u : v) ASSERT_EQ(u, 0xFFFF) << "a rejected call wrote into a buffer";
  }
}

}  // namespace
