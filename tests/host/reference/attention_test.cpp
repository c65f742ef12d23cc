// reference/attention.h against an independent brute force, plus masking / layout properties.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "problem.h"
#include "reference/attention.h"

namespace {

using weft::DType;
using weft::reftest::close;
using weft::reftest::make_problem;
using weft::reftest::naive_attention;
using weft::reftest::NaiveSpec;
using weft::reftest::Problem;
namespace ref = weft::ref;

// Options + the equivalent NaiveSpec for a variant id (bit flags), with random parameters.
enum : int { kCausal = 1, kWindow = 2, kCap = 4, kAlibi = 8, kCustom = 16, kScale = 32 };

void make_variant(weft::test::Rng& rng, const Problem& P, int flags, ref::Options& opt, NaiveSpec& spec,
                  ref::PackedMask& pm) {
  if (flags & kScale) opt.sm_scale = spec.scale = rng.uniform(0.05, 0.5);
  if (flags & kCausal) opt.causal = spec.causal = true;
  if (flags & kWindow) opt.window_left = spec.window_left = rng.randint(0, 6);
  if (flags & kCap) opt.logits_soft_cap = spec.cap = rng.uniform(0.3, 2.0);  // small: tanh bends
  if (flags & kAlibi) {
    for (int64_t h = 0; h < P.hq; ++h) spec.slopes.push_back(std::pow(2.0, -double(h + 1) * 8.0 / double(P.hq)));
    opt.alibi_slopes = spec.slopes;
  }
  if (flags & kCustom) {
    for (int64_t b = 0; b < P.batch(); ++b) {
      spec.dense_mask.push_back(weft::reftest::random_dense_mask(rng, P.q_len(b) * P.kv_len(b), 0.6));
    }
    pm = ref::pack_custom_mask(P.qo_indptr, P.kv_indptr, [&](int64_t b, int64_t i, int64_t j) {
      return bool(spec.dense_mask[b][i * P.kv_len(b) + j]);
    });
    opt.custom_mask = pm.bits.data();
    opt.mask_indptr = pm.indptr;
  }
}

TEST(RefAttention, MatchesBruteForceEachVariantAndCombined) {
  auto rng = weft::test::Rng::for_current_test();
  const int variants[] = {0,      kCausal, kWindow, kCap, kAlibi, kCustom, kScale, kCausal | kWindow,
                          kCausal | kCap | kAlibi, kCustom | kCausal, kCausal | kWindow | kCap | kAlibi | kCustom | kScale,
                          kWindow | kAlibi};
  for (int flags : variants) {
    for (int trial = 0; trial < 4; ++trial) {
      const int64_t batch = rng.randint(1, 3);
      std::vector<int64_t> ql, kl;
      for (int64_t b = 0; b < batch; ++b) {
        ql.push_back(rng.randint(1, 7));
        kl.push_back(rng.randint(0, 19));  // includes kv_len 0 and q_len > kv_len
      }
      const int64_t hkv = rng.randint(1, 2), group = rng.randint(1, 3);
      const Problem P = make_problem(rng, ql, kl, hkv * group, hkv, 8 * rng.randint(1, 3));
      ref::Options opt;
      NaiveSpec spec;
      ref::PackedMask pm;
      make_variant(rng, P, flags, opt, spec, pm);
      const ref::Result got = ref::attention(P.rq(), P.rkv(), opt);
      const ref::Result want = naive_attention(P, spec);
      ASSERT_TRUE(close(got, want, 1e-12)) << "flags=" << flags << " trial=" << trial;
    }
  }
}

TEST(RefAttention, GqaGroupsAndHeadDims) {
  auto rng = weft::test::Rng::for_current_test();
  struct Heads { int64_t hq, hkv; };
  const Heads heads[] = {{4, 4}, {4, 2}, {8, 2}, {16, 2}, {32, 2}, {8, 1}, {16, 1}};  // groups 1,2,4,8,16; MQA 8,16
  for (const Heads& h : heads) {
    for (int64_t d : {64, 128, 256}) {
      const Problem P = make_problem(rng, {1, 3}, {5, 9}, h.hq, h.hkv, d, DType::kBFloat16);
      NaiveSpec spec;
      spec.causal = true;
      ref::Options opt;
      opt.causal = true;
      ASSERT_TRUE(close(ref::attention(P.rq(), P.rkv(), opt), naive_attention(P, spec), 1e-12))
          << "hq=" << h.hq << " hkv=" << h.hkv << " d=" << d;
    }
  }
}

TEST(RefAttention, GqaHeadMappingIsGroupContiguous) {
  // Each KV head holds a distinct constant V; query head h must see V of head h / group.
  auto rng = weft::test::Rng::for_current_test();
  Problem P = make_problem(rng, {2}, {3}, 8, 2, 4);
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t kh = 0; kh < 2; ++kh)
      for (int64_t d = 0; d < 4; ++d) P.v[(t * 2 + kh) * 4 + d] = float(kh + 1);
  const ref::Result r = ref::attention(P.rq(), P.rkv(), {});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t h = 0; h < 8; ++h) EXPECT_NEAR(r.o[(i * 8 + h) * 4], double(h / 4 + 1), 1e-14) << h;
}

TEST(RefAttention, CausalSquareEqualsLowerTriangularMask) {
  auto rng = weft::test::Rng::for_current_test();
  const Problem P = make_problem(rng, {6, 1, 11}, {6, 1, 11}, 4, 2, 16);
  ref::Options causal;
  causal.causal = true;
  const auto pm = ref::pack_custom_mask(P.qo_indptr, P.kv_indptr, [](int64_t, int64_t i, int64_t j) { return j <= i; });
  ref::Options lower;
  lower.custom_mask = pm.bits.data();
  lower.mask_indptr = pm.indptr;
  EXPECT_TRUE(close(ref::attention(P.rq(), P.rkv(), causal), ref::attention(P.rq(), P.rkv(), lower), 0));
}

TEST(RefAttention, CausalIsBottomRightAligned) {
  auto rng = weft::test::Rng::for_current_test();
  const Problem P = make_problem(rng, {3, 4}, {10, 4}, 2, 1, 16);
  ref::Options causal;
  causal.causal = true;
  const auto pm = ref::pack_custom_mask(P.qo_indptr, P.kv_indptr, [&](int64_t b, int64_t i, int64_t j) {
    return j <= P.kv_len(b) - P.q_len(b) + i;
  });
  ref::Options custom;
  custom.custom_mask = pm.bits.data();
  custom.mask_indptr = pm.indptr;
  const ref::Result a = ref::attention(P.rq(), P.rkv(), causal);
  EXPECT_TRUE(close(a, ref::attention(P.rq(), P.rkv(), custom), 0));
  // The last query of a causal request sees every key: same as no mask for that row.
  const ref::Result full = ref::attention(P.rq(), P.rkv(), {});
  for (int64_t h = 0; h < 2; ++h) EXPECT_EQ(a.lse[2 * 2 + h], full.lse[2 * 2 + h]);
  // The first query of request 0 (position 7) must differ from the unmasked result.
  EXPECT_NE(a.lse[0], full.lse[0]);
}

TEST(RefAttention, WindowCoveringEverythingEqualsNoWindow) {
  auto rng = weft::test::Rng::for_current_test();
  const Problem P = make_problem(rng, {3, 5}, {9, 5}, 4, 4, 8);
  for (bool causal : {false, true}) {
    ref::Options a, b;
    a.causal = b.causal = causal;
    b.window_left = 9;
    EXPECT_TRUE(close(ref::attention(P.rq(), P.rkv(), a), ref::attention(P.rq(), P.rkv(), b), 0));
    b.window_left = 3;  // and a real window changes something
    EXPECT_FALSE(close(ref::attention(P.rq(), P.rkv(), a), ref::attention(P.rq(), P.rkv(), b), 1e-6));
  }
}

TEST(RefAttention, CausalWindowZeroAttendsOnlyOwnPosition) {
  auto rng = weft::test::Rng::for_current_test();
  const Problem P = make_problem(rng, {3}, {7}, 2, 1, 8);
  ref::Options opt;
  opt.causal = true;
  opt.window_left = 0;
  const ref::Result r = ref::attention(P.rq(), P.rkv(), opt);
  for (int64_t i = 0; i < 3; ++i) {
    const int64_t j = 4 + i;
    for (int64_t h = 0; h < 2; ++h) {
      double dot = 0;
      for (int64_t d = 0; d < 8; ++d) {
        EXPECT_EQ(r.o[(i * 2 + h) * 8 + d], double(P.v[j * 8 + d]));
        dot += double(P.q[(i * 2 + h) * 8 + d]) * double(P.k[j * 8 + d]);
      }
      EXPECT_NEAR(r.lse[i * 2 + h], dot / std::sqrt(8.0), 1e-14);
    }
  }
}

TEST(RefAttention, HugeSoftCapEqualsNoCap) {
  auto rng = weft::test::Rng::for_current_test();
  const Problem P = make_problem(rng, {4}, {12}, 2, 2, 32);
  ref::Options a, b;
  b.logits_soft_cap = 1e7;
  EXPECT_TRUE(close(ref::attention(P.rq(), P.rkv(), a), ref::attention(P.rq(), P.rkv(), b), 1e-12));
  b.logits_soft_cap = 0.5;
  EXPECT_FALSE(close(ref::attention(P.rq(), P.rkv(), a), ref::attention(P.rq(), P.rkv(), b), 1e-6));
}

TEST(RefAttention, AllOnesCustomMaskEqualsNoMask) {
  auto rng = weft::test::Rng::for_current_test();
  const Problem P = make_problem(rng, {3, 2, 5}, {7, 0, 13}, 4, 2, 16);
  const auto pm = ref::pack_custom_mask(P.qo_indptr, P.kv_indptr, [](int64_t, int64_t, int64_t) { return true; });
  ref::Options m;
  m.custom_mask = pm.bits.data();
  m.mask_indptr = pm.indptr;
  EXPECT_TRUE(close(ref::attention(P.rq(), P.rkv(), {}), ref::attention(P.rq(), P.rkv(), m), 0));
}

TEST(RefAttention, PackedMaskBitLayout) {
  // Request 0: 2 x 3 (6 bits, 1 byte), request 1: 3 x 3 (9 bits, 2 bytes); little bit order.
  const auto pm = ref::pack_custom_mask({0, 2, 5}, {0, 3, 6}, [](int64_t b, int64_t i, int64_t j) {
    return b == 0 ? (i == 1 && j == 0) || (i == 0 && j == 2) : (i == 2 && j == 2) || (i == 0 && j == 0);
  });
  EXPECT_EQ(pm.indptr, (std::vector<int64_t>{0, 1, 3}));
  ASSERT_EQ(pm.bits.size(), 3u);
  EXPECT_EQ(pm.bits[0], 0x04 | 0x08);  // bit 2 = (0,2), bit 3 = (1,0)
  EXPECT_EQ(pm.bits[1], 0x01);         // bit 0 = (0,0)
  EXPECT_EQ(pm.bits[2], 0x01);         // bit 8 = (2,2)
  // And attention reads it that way: hand-packed mask keeps only key 2 for query 0 of request 0.
  auto rng = weft::test::Rng::for_current_test();
  const Problem P = make_problem(rng, {2, 3}, {3, 3}, 1, 1, 4);
  ref::Options opt;
  opt.custom_mask = pm.bits.data();
  opt.mask_indptr = pm.indptr;
  const ref::Result r = ref::attention(P.rq(), P.rkv(), opt);
  for (int64_t d = 0; d < 4; ++d) {
    EXPECT_EQ(r.o[0 * 4 + d], double(P.v[2 * 4 + d]));        // req 0, i 0 -> key 2
    EXPECT_EQ(r.o[1 * 4 + d], double(P.v[0 * 4 + d]));        // req 0, i 1 -> key 0
    EXPECT_EQ(r.o[2 * 4 + d], double(P.v[(3 + 0) * 4 + d]));  // req 1, i 0 -> key 0
    EXPECT_EQ(r.o[3 * 4 + d], 0.0);                           // req 1, i 1 -> nothing
  }
  EXPECT_EQ(r.lse[3], -INFINITY);
}

TEST(RefAttention, FullyMaskedRowsAndEmptyKvGiveZeroAndMinusInf) {
  auto rng = weft::test::Rng::for_current_test();
  // Request 0: row 1 fully masked by the custom mask; request 1: kv_len 0; request 2: causal
  // with q_len > kv_len, so its first two rows see no key.
  const Problem P = make_problem(rng, {3, 2, 4}, {5, 0, 2}, 4, 2, 8);
  const auto pm = ref::pack_custom_mask(P.qo_indptr, P.kv_indptr, [](int64_t b, int64_t i, int64_t) {
    return !(b == 0 && i == 1);
  });
  ref::Options opt;
  opt.causal = true;
  opt.alibi_slopes = {0.5, 0.25, 0.125, 0.0625};
  opt.logits_soft_cap = 5;
  opt.custom_mask = pm.bits.data();
  opt.mask_indptr = pm.indptr;
  for (int low = 0; low < 2; ++low) {
    const ref::Result r = low ? ref::attention_low_precision(P.rq(), P.rkv(), opt, DType::kBFloat16)
                              : ref::attention(P.rq(), P.rkv(), opt);
    const int64_t empty_rows[] = {1, 3, 4, 5, 6};
    for (int64_t row = 0; row < 9; ++row) {
      const bool empty = std::find(std::begin(empty_rows), std::end(empty_rows), row) != std::end(empty_rows);
      for (int64_t h = 0; h < 4; ++h) {
        const double lse = r.lse[row * 4 + h];
        ASSERT_FALSE(std::isnan(lse));
        EXPECT_EQ(empty, lse == -INFINITY) << "row " << row << " low " << low;
        for (int64_t d = 0; d < 8; ++d) {
          const double o = r.o[(row * 4 + h) * 8 + d];
          ASSERT_FALSE(std::isnan(o));
          if (empty) {
            EXPECT_EQ(o, 0.0);
          }
        }
      }
    }
  }
}

// Builds a paged copy of P's K/V: shuffled page ids, unused slots and spare pages filled with NaN
// (so reading one shows up), optionally an interleaved pool (page_stride > dense size).
struct PagedCopy {
  std::vector<float> k, v;
  ref::PagedKV kv;
};
PagedCopy to_paged(weft::test::Rng& rng, const Problem& P, int64_t page_size, bool hnd, int64_t pad) {
  PagedCopy c;
  std::vector<int64_t> pages_of(P.batch());
  int64_t total = 0;
  for (int64_t b = 0; b < P.batch(); ++b) total += pages_of[b] = (P.kv_len(b) + page_size - 1) / page_size;
  const int64_t num_pages = total + 3;  // spare pages never referenced
  std::vector<int32_t> ids(num_pages);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng.engine());
  const int64_t dense = page_size * P.hkv * P.d, stride = dense + pad;
  c.k.assign(num_pages * stride, NAN);
  c.v.assign(num_pages * stride, NAN);
  ref::PagedKV& kv = c.kv;
  kv.hnd = hnd;
  kv.num_pages = num_pages;
  kv.page_size = page_size;
  kv.num_kv_heads = P.hkv;
  kv.head_dim = P.d;
  kv.page_stride = pad ? stride : 0;
  kv.indptr = {0};
  int64_t next = 0;
  for (int64_t b = 0; b < P.batch(); ++b) {
    for (int64_t n = 0; n < pages_of[b]; ++n) kv.indices.push_back(ids[next++]);
    kv.indptr.push_back(static_cast<int32_t>(kv.indices.size()));
    kv.last_page_len.push_back(
        static_cast<int32_t>(pages_of[b] == 0 ? 0 : P.kv_len(b) - (pages_of[b] - 1) * page_size));
    for (int64_t t = 0; t < P.kv_len(b); ++t) {
      const int64_t page = kv.indices[kv.indptr[b] + t / page_size], slot = t % page_size;
      for (int64_t h = 0; h < P.hkv; ++h)
        for (int64_t d = 0; d < P.d; ++d) {
          const int64_t dst = page * stride + (hnd ? (h * page_size + slot) : (slot * P.hkv + h)) * P.d + d;
          const int64_t src = ((P.kv_indptr[b] + t) * P.hkv + h) * P.d + d;
          c.k[dst] = P.k[src];
          c.v[dst] = P.v[src];
        }
    }
  }
  kv.k_pages = c.k.data();
  kv.v_pages = c.v.data();
  return c;
}

TEST(RefAttention, PagedEqualsRaggedAllLayouts) {
  auto rng = weft::test::Rng::for_current_test();
  const Problem P = make_problem(rng, {1, 4, 2, 1}, {1, 17, 0, 33}, 4, 2, 16);
  ref::Options opt;
  opt.causal = true;
  const ref::Result want = ref::attention(P.rq(), P.rkv(), opt);
  for (int64_t ps : {1, 3, 16}) {
    for (bool hnd : {false, true}) {
      for (int64_t pad : {0, 5}) {
        const PagedCopy c = to_paged(rng, P, ps, hnd, pad);
        const ref::OwnedKV g = ref::gather_paged(c.kv);
        EXPECT_EQ(g.k, P.k);
        EXPECT_EQ(g.v, P.v);
        EXPECT_EQ(g.kv_indptr, P.kv_indptr);
        EXPECT_TRUE(close(ref::attention(P.rq(), c.kv, opt), want, 0)) << ps << hnd << pad;
        EXPECT_TRUE(close(ref::attention_low_precision(P.rq(), c.kv, opt, DType::kFloat16),
                          ref::attention_low_precision(P.rq(), P.rkv(), opt, DType::kFloat16), 0));
      }
    }
  }
}

TEST(RefAttention, RejectsInconsistentInputs) {
  auto rng = weft::test::Rng::for_current_test();
  const Problem P = make_problem(rng, {2}, {3}, 4, 2, 8);
  ref::RaggedKV kv = P.rkv();
  kv.kv_indptr = {0, 3, 3};  // batch mismatch
  EXPECT_THROW(ref::attention(P.rq(), kv, {}), std::invalid_argument);
  kv = P.rkv();
  kv.num_kv_heads = 3;  // 4 % 3 != 0
  EXPECT_THROW(ref::attention(P.rq(), kv, {}), std::invalid_argument);
  ref::Options opt;
  opt.alibi_slopes = {1.0};
  EXPECT_THROW(ref::attention(P.rq(), P.rkv(), opt), std::invalid_argument);
  PagedCopy c = to_paged(rng, P, 2, false, 0);
  c.kv.indices[0] = static_cast<int32_t>(c.kv.num_pages);
  EXPECT_THROW(ref::gather_paged(c.kv), std::invalid_argument);
  c = to_paged(rng, P, 2, false, 0);
  c.kv.last_page_len[0] = 3;  // > page_size
  EXPECT_THROW(ref::gather_paged(c.kv), std::invalid_argument);
}

TEST(RefAttention, OptionsFromVariant) {
  weft::AttentionVariant v;
  v.sm_scale = 0.3;
  v.mask = weft::MaskMode::kCausal;
  v.window_left = 7;
  v.logits_soft_cap = 30.f;
  const ref::Options o = ref::options_from(v);
  EXPECT_EQ(o.sm_scale, 0.3);
  EXPECT_TRUE(o.causal);
  EXPECT_EQ(o.window_left, 7);
  EXPECT_EQ(o.logits_soft_cap, 30.0);
  EXPECT_EQ(ref::iota_indptr(3), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(ref::iota_indptr(2, 5), (std::vector<int32_t>{0, 5, 10}));
}

}  // namespace
