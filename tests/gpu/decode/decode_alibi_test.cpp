// BatchDecodeWrapper with ALiBi (AttentionVariant::alibi_slopes, attention/variant.cuh
// AlibiVariant) against the float64 reference on random paged batches: every head dim, GQA
// groups 1/4/8/32 (32: the 32-row tensor-core items and the CUDA-core path's 16-row items), both
// paths, pages of 1 and 16 (NHD / HND), with soft cap and sliding windows, split and unsplit
// plans; zero slopes are bit-identical to no ALiBi; slopes are read at run time; a misaligned
// slopes pointer is rejected. Tests named *Small* form the compute-sanitizer subset.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "reference/attention.h"
#include "tests/gpu/decode/decode_batch.h"
#include "tests/common/gpu_util.h"
#include "tests/common/test_util.h"
#include "weft/decode.h"
#include "weft/error.h"

namespace weft {
namespace {

using test::DeviceBuffer;
using test::Rng;
using test_decode::Batch;
using test_decode::Case;

// ALiBi's published slopes 2^(-8 (h + 1) / H), and random ones in [lo, hi].
std::vector<float> typical_slopes(int32_t hq) {
  std::vector<float> s(hq);
  for (int32_t h = 0; h < hq; ++h) s[h] = static_cast<float>(std::pow(2.0, -8.0 * double(h + 1) / double(hq)));
  return s;
}
std::vector<float> random_slopes(Rng& rng, int32_t hq, double lo = 0.0, double hi = 1.0) {
  std::vector<float> s(hq);
  for (float& x : s) x = static_cast<float>(rng.uniform(lo, hi));
  return s;
}

struct Runner {
  int32_t max_batch;
  DeviceBuffer ws;
  size_t bytes;
  BatchDecodeWrapper w;
  explicit Runner(const Case& c)
      : max_batch(std::max<int32_t>(1, int32_t(c.lens.size()))),
        bytes(BatchDecodeWrapper::workspace_size(max_batch, c.hq, c.hkv, c.d)),
        w(max_batch, c.hq, c.hkv, c.d, c.path) {
    ws = DeviceBuffer(bytes);
  }
  void plan(Batch& bt) {
    const Case& c = bt.c;
    w.plan(bt.table, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws.get(), bytes, nullptr);
  }
  void run(Batch& bt) {
    bt.dout.poison();
    bt.dlse.poison();
    w.run(bt.tq, bt.cache, bt.table, bt.tout, &bt.tlse, nullptr);
  }
};

void check_alibi_against_reference(const Batch& bt) {
  const Case& c = bt.c;
  ref::RaggedQ rq{bt.q.data(), c.hq, c.d, ref::iota_indptr(int64_t(c.lens.size()))};
  const ref::PagedKV rkv = bt.ref_kv();
  ref::Options opt = ref::options_from(c.var);
  opt.alibi_slopes.assign(c.slopes.begin(), c.slopes.end());
  const ref::Result exact = ref::attention(rq, rkv, opt);
  const ref::Result low = ref::attention_low_precision(rq, rkv, opt, c.dtype, /*round_p=*/true);
  const test::Comparison base = test::compare(ref::to_float(low.o), exact.o);
  const test::Tolerance tol = test::tolerance_from_baseline(base, 4.0, 1e-5, 2e-3);
  const test::Comparison got = test::compare(bt.out(), exact.o);
  EXPECT_TRUE(test::within(got, tol)) << c.describe() << "\n got " << got.summary() << "\n baseline "
                                      << base.summary();
  const test::Comparison lbase = test::compare(ref::to_float(low.lse), exact.lse);
  const test::Tolerance ltol = test::tolerance_from_baseline(lbase, 4.0, 2e-5, 2e-3);
  const test::Comparison gl = test::compare(bt.lse(), exact.lse);
  EXPECT_TRUE(test::within(gl, ltol)) << c.describe() << " lse " << gl.summary() << " baseline "
                                      << lbase.summary();
  // kv_len 0 rows: exactly O = 0 and LSE = -inf.
  const std::vector<float> o = bt.out(), l = bt.lse();
  for (size_t b = 0; b < c.lens.size(); ++b) {
    if (c.lens[b] != 0) continue;
    for (int64_t i = 0; i < int64_t(c.hq) * c.d; ++i) ASSERT_EQ(o[b * c.hq * c.d + i], 0.f) << "request " << b;
    for (int h = 0; h < c.hq; ++h) ASSERT_TRUE(std::isinf(l[b * c.hq + h]) && l[b * c.hq + h] < 0);
  }
}

void run_case(const Case& c, Rng& rng) {
  SCOPED_TRACE(c.describe());
  Batch bt(c, rng);
  Runner r(c);
  r.plan(bt);
  r.run(bt);
  WEFT_TEST_CUDA(cudaDeviceSynchronize());
  check_alibi_against_reference(bt);
}

const DecodePath kPaths[] = {DecodePath::kTensorCore, DecodePath::kCudaCore};

// Head dims x groups x paths x pages, each with a soft cap / window combination, typical and
// random slopes.
TEST(DecodeAlibiSmall, HeadDimsGroupsPathsPages) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  const int32_t dims[] = {64, 128, 256};
  const int32_t groups[] = {1, 4, 8, 32};
  int n = 0;
  for (int di = 0; di < 3; ++di)
    for (int gi = 0; gi < 4; ++gi)
      for (DecodePath path : kPaths) {
        if (!decode_path_available(path)) continue;
        Case c;
        c.d = dims[di];
        c.hkv = groups[gi] == 32 ? 1 : 2;
        c.hq = c.hkv * groups[gi];
        c.dtype = (di + gi) % 2 ? DType::kFloat16 : DType::kBFloat16;
        c.page_size = (di + gi + n) % 2 ? 1 : 16;
        c.layout = n % 3 == 0 ? KVLayout::kHND : KVLayout::kNHD;
        c.path = path;
        switch (n % 4) {
          case 0: break;
          case 1: c.var.logits_soft_cap = 30.f; break;
          case 2: c.var.window_left = 90; break;
          default: c.var.window_left = 300; c.var.logits_soft_cap = 10.f; break;
        }
        c.lens = {0, 1, 17, int32_t(rng.randint(2, 300)), 64, 65, int32_t(rng.randint(700, 2500))};
        c.slopes = n % 2 ? typical_slopes(c.hq) : random_slopes(rng, c.hq);
        run_case(c, rng);
        ++n;
      }
  EXPECT_EQ(n, 24);
}

// Long histories: split-KV plans, the bias of every chunk relative to the same query position;
// small slopes so far keys still matter.
TEST(DecodeAlibi, SplitKvLongHistories) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  for (int32_t d : {64, 128, 256})
    for (DecodePath path : kPaths) {
      if (!decode_path_available(path)) continue;
      Case c;
      c.d = d;
      c.hq = 8;
      c.hkv = 2;
      c.path = path;
      c.page_size = d == 128 ? 1 : 16;
      c.lens = {30000, 0, 5000, 1};
      c.var.window_left = d == 256 ? 20000 : -1;
      c.slopes = random_slopes(rng, c.hq, 0.0, 0.01);
      run_case(c, rng);
    }
}

// GQA group 32 with enough KV for 32-row tensor-core items (plan_tile_rows), both epilogue rounds,
// and the CUDA-core path's 16-row items of the same shape.
TEST(DecodeAlibi, Group32WideItems) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  for (int32_t d : {64, 128})
    for (DecodePath path : kPaths) {
      if (!decode_path_available(path)) continue;
      Case c;
      c.d = d;
      c.hkv = 2;
      c.hq = 64;
      c.path = path;
      c.dtype = d == 64 ? DType::kFloat16 : DType::kBFloat16;
      c.lens = {20000, 0, 19000, 21000, 20500, 1};
      c.slopes = typical_slopes(c.hq);
      SCOPED_TRACE(c.describe());
      Batch bt(c, rng);
      Runner r(c);
      r.plan(bt);
      EXPECT_EQ(r.w.plan_info().tile_rows, path == DecodePath::kTensorCore ? 32 : 16);
      r.run(bt);
      WEFT_TEST_CUDA(cudaDeviceSynchronize());
      check_alibi_against_reference(bt);
    }
}

// All-zero slopes run the ALiBi kernels with a zero bias (x + (+-0) == x): bit-identical to the
// default kernels, with and without a soft cap, on both paths.
TEST(DecodeAlibiSmall, ZeroSlopesMatchNoAlibiBitwise) {
  WEFT_REQUIRE_GPU();
  for (DecodePath path : kPaths)
    for (float cap : {0.f, 25.f}) {
      if (!decode_path_available(path)) continue;
      Case c;
      c.d = 128;
      c.hq = 16;
      c.hkv = 2;
      c.path = path;
      c.var.logits_soft_cap = cap;
      c.lens = {300, 1, 2000, 0};
      Rng r1 = Rng::for_current_test(), r2 = Rng::for_current_test();
      Batch a(c, r1);
      Case cz = c;
      cz.slopes.assign(c.hq, 0.f);
      Batch b(cz, r2);  // same seed: same inputs
      Runner ra(c), rb(cz);
      ra.plan(a);
      ra.run(a);
      rb.plan(b);
      rb.run(b);
      WEFT_TEST_CUDA(cudaDeviceSynchronize());
      SCOPED_TRACE(c.describe());
      EXPECT_EQ(a.dout.to_vector<uint16_t>(c.lens.size() * c.hq * c.d),
                b.dout.to_vector<uint16_t>(c.lens.size() * c.hq * c.d));
      const std::vector<float> la = a.lse(), lb = b.lse();
      for (size_t i = 0; i < la.size(); ++i) ASSERT_EQ(std::memcmp(&la[i], &lb[i], 4), 0) << "lse " << i;
    }
}

// The kernels read the slopes at run time (graph replays see new contents without a re-plan).
TEST(DecodeAlibiSmall, SlopesReadAtRunTime) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  for (DecodePath path : kPaths) {
    if (!decode_path_available(path)) continue;
    Case c;
    c.d = 64;
    c.hq = 8;
    c.hkv = 1;
    c.path = path;
    c.lens = {500, 37};
    c.slopes = typical_slopes(c.hq);
    Batch bt(c, rng);
    Runner r(c);
    r.plan(bt);
    r.run(bt);
    WEFT_TEST_CUDA(cudaDeviceSynchronize());
    check_alibi_against_reference(bt);
    bt.c.slopes = random_slopes(rng, c.hq);
    bt.d_slopes.upload(bt.c.slopes.data(), bt.c.slopes.size() * sizeof(float));
    r.run(bt);
    WEFT_TEST_CUDA(cudaDeviceSynchronize());
    check_alibi_against_reference(bt);
  }
}

TEST(DecodeAlibiSmall, MisalignedSlopesRejectedAtPlan) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  Case c;
  c.d = 128;
  c.hq = 8;
  c.hkv = 2;
  c.lens = {40, 3};
  c.slopes = typical_slopes(c.hq);
  Batch bt(c, rng);
  Runner r(c);
  bt.c.var.alibi_slopes = reinterpret_cast<const float*>(bt.d_slopes.as<char>() + 2);
  EXPECT_EQ(test::thrown_argument([&] { r.plan(bt); }), "variant.alibi_slopes");
  // The aligned pointer then plans and runs.
  bt.c.var.alibi_slopes = bt.d_slopes.as<float>();
  r.plan(bt);
  r.run(bt);
  WEFT_TEST_CUDA(cudaDeviceSynchronize());
  check_alibi_against_reference(bt);
}

}  // namespace
}  // namespace weft
