// Rejected calls throw weft::Error naming the argument, before any launch, and leave the
// outputs untouched (checked against the NaN poison).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "prefill_case.h"
#include "weft/error.h"
#include "common/test_util.h"

namespace weft::test::prefill {
namespace {

using weft::test::thrown_argument;

Case small_case(bool paged) {
  Case c;
  c.q_lens = {5, 9};
  c.kv_lens = {20, 9};
  c.num_qo_heads = 4;
  c.num_kv_heads = 2;
  c.paged = paged;
  c.variant.mask = MaskMode::kCausal;
  return c;
}

bool all_poison(const Prepared& p) {
  for (uint16_t x : download_out(p))
    if (x != 0xFFFF) return false;
  const std::vector<float> l = download_lse(p);
  const std::vector<uint32_t> bits(reinterpret_cast<const uint32_t*>(l.data()),
                                   reinterpret_cast<const uint32_t*>(l.data()) + l.size());
  for (uint32_t b : bits)
    if (b != 0xFFFFFFFFu) return false;
  return true;
}

TEST(PrefillSmall, NegativeRunArguments) {
  WEFT_REQUIRE_GPU();
  Prepared p;
  prepare(p, small_case(true));
  BatchPrefillWrapper w;
  p.d_out.poison();
  p.d_lse.poison();
  const TensorView lse = p.lse_view();
  // run before plan
  EXPECT_EQ(thrown_argument([&] { w.run_paged(p.q_view(), p.cache(), p.table(), p.out_view(), &lse, nullptr); }),
            "plan");
  plan_only(w, p);
  // wrong q dtype
  TensorView q = p.q_view();
  q.dtype = DType::kFloat16;
  EXPECT_EQ(thrown_argument([&] { w.run_paged(q, p.cache(), p.table(), p.out_view(), &lse, nullptr); }), "q");
  // wrong out shape
  TensorView out(p.d_out.get(), p.c.dtype, {p.total_q - 1, 4, 128});
  EXPECT_EQ(thrown_argument([&] { w.run_paged(p.q_view(), p.cache(), p.table(), out, &lse, nullptr); }), "out");
  // lse of the wrong dtype
  TensorView bad_lse = lse;
  bad_lse.dtype = DType::kFloat16;
  EXPECT_EQ(thrown_argument([&] { w.run_paged(p.q_view(), p.cache(), p.table(), p.out_view(), &bad_lse, nullptr); }),
            "lse");
  // table that disagrees with the plan (different kv length)
  std::vector<int32_t> last = p.last_page_len;
  last[0] = last[0] > 1 ? last[0] - 1 : last[0] + 1;
  PageTable t = p.table();
  t.last_page_len.host = last.data();
  EXPECT_EQ(thrown_argument([&] { w.run_paged(p.q_view(), p.cache(), t, p.out_view(), &lse, nullptr); }), "table");
  // unaligned q
  TensorView q2(static_cast<char*>(p.d_q.get()) + 2, p.c.dtype, {p.total_q, 4, 128});
  EXPECT_EQ(thrown_argument([&] { w.run_paged(q2, p.cache(), p.table(), p.out_view(), &lse, nullptr); }), "q");
  // ragged run on a paged plan
  const TensorView k(p.d_pages_k.get(), p.c.dtype, {16, 2, 128});
  EXPECT_EQ(thrown_argument([&] { w.run_ragged(p.q_view(), k, k, p.d_page_indptr.as<int32_t>(), p.out_view(), &lse, nullptr); }),
            "plan");
  WEFT_TEST_CUDA(cudaDeviceSynchronize());
  EXPECT_TRUE(all_poison(p)) << "a rejected call wrote its outputs";
}

TEST(PrefillSmall, NegativePlanArguments) {
  WEFT_REQUIRE_GPU();
  Prepared p;
  prepare(p, small_case(false));
  BatchPrefillWrapper w;
  const Case& c = p.c;
  auto plan = [&](const int32_t* qo, const int32_t* kv, int32_t hq, int32_t hk, int32_t d, DType dt,
                  AttentionVariant v, std::size_t ws_bytes, const int32_t* mask_indptr = nullptr,
                  PrefillPlanOptions opt = {}) {
    w.plan_ragged(qo, kv, 2, hq, hk, d, dt, v, p.d_ws.get(), ws_bytes, p.bounds, nullptr, mask_indptr, opt);
  };
  const int32_t* qo = p.qo_indptr.data();
  const int32_t* kv = p.kv_indptr.data();
  EXPECT_EQ(thrown_argument([&] { plan(nullptr, kv, 4, 2, 128, c.dtype, c.variant, p.ws_bytes); }), "qo_indptr");
  std::vector<int32_t> bad_qo = {0, 9, 5};
  EXPECT_EQ(thrown_argument([&] { plan(bad_qo.data(), kv, 4, 2, 128, c.dtype, c.variant, p.ws_bytes); }), "qo_indptr");
  std::vector<int32_t> bad_kv = {0, 30, 20};
  EXPECT_EQ(thrown_argument([&] { plan(qo, bad_kv.data(), 4, 2, 128, c.dtype, c.variant, p.ws_bytes); }), "kv_indptr");
  EXPECT_EQ(thrown_argument([&] { plan(qo, kv, 6, 2, 128, c.dtype, c.variant, p.ws_bytes); }), "num_qo_heads");
  EXPECT_EQ(thrown_argument([&] { plan(qo, kv, 4, 2, 96, c.dtype, c.variant, p.ws_bytes); }), "head_dim");
  EXPECT_EQ(thrown_argument([&] { plan(qo, kv, 4, 2, 128, DType::kFloat32, c.variant, p.ws_bytes); }), "dtype");
  EXPECT_EQ(thrown_argument([&] { plan(qo, kv, 4, 2, 128, c.dtype, c.variant, 1024); }), "workspace");
  AttentionVariant v = c.variant;
  v.window_left = -5;
  EXPECT_EQ(thrown_argument([&] { plan(qo, kv, 4, 2, 128, c.dtype, v, p.ws_bytes); }), "variant.window_left");
  v = c.variant;
  v.mask = MaskMode::kCustom;
  EXPECT_EQ(thrown_argument([&] { plan(qo, kv, 4, 2, 128, c.dtype, v, p.ws_bytes); }), "mask_indptr");
  std::vector<int32_t> mi = {0, 13, 23};  // request 0 needs ceil(5*20/8) = 13 bytes, request 1 11
  EXPECT_EQ(thrown_argument([&] { plan(qo, kv, 4, 2, 128, c.dtype, v, p.ws_bytes, mi.data()); }), "mask_indptr");
  PrefillPlanOptions opt;
  opt.cta_q = 32;
  EXPECT_EQ(thrown_argument([&] { plan(qo, kv, 4, 2, 128, c.dtype, c.variant, p.ws_bytes, nullptr, opt); }), "opt.cta_q");
  opt = PrefillPlanOptions{};
  opt.mainloop = static_cast<PrefillMainloop>(7);
  EXPECT_EQ(thrown_argument([&] { plan(qo, kv, 4, 2, 128, c.dtype, c.variant, p.ws_bytes, nullptr, opt); }),
            "opt.mainloop");
  opt = PrefillPlanOptions{};
  opt.max_ctas = -1;
  EXPECT_EQ(thrown_argument([&] { plan(qo, kv, 4, 2, 128, c.dtype, c.variant, p.ws_bytes, nullptr, opt); }),
            "opt.max_ctas");
  EXPECT_FALSE(w.planned());
  // a valid plan, then a run without the mask planned as custom
  mi = {0, 13, 24};
  plan(qo, kv, 4, 2, 128, c.dtype, v, p.ws_bytes, mi.data());
  p.d_out.poison();
  p.d_lse.poison();
  const TensorView lse = p.lse_view();
  const TensorView k(p.d_k.get(), c.dtype, {p.total_kv, 2, 128});
  EXPECT_EQ(thrown_argument([&] { w.run_ragged(p.q_view(), k, k, p.d_kv_indptr.as<int32_t>(), p.out_view(), &lse, nullptr); }),
            "mask");
  const TensorView short_k(p.d_k.get(), c.dtype, {p.total_kv - 1, 2, 128});
  const CustomMaskDevice m{p.d_q.as<uint8_t>(), p.d_kv_indptr.as<int32_t>()};
  EXPECT_EQ(thrown_argument([&] { w.run_ragged(p.q_view(), short_k, k, p.d_kv_indptr.as<int32_t>(), p.out_view(), &lse, nullptr, &m); }),
            "k");
  WEFT_TEST_CUDA(cudaDeviceSynchronize());
  EXPECT_TRUE(all_poison(p));
}

}  // namespace
}  // namespace weft::test::prefill
