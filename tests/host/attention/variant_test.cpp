// Host tests of the attention variants' host-usable parts (src/attention/variant.cuh): the
// KV-range hook and the interior-tile test against brute force over masked(), masked() against
// include/weft/attention.h's definition, and the host parameter builder (variant_host.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>

#include "attention/variant.cuh"
#include "attention/variant_host.h"
#include "weft/attention.h"

namespace weft {
namespace {

attn::DefaultVariant make(bool causal, int32_t window_left) {
  attn::VariantParams p;
  p.causal = causal ? 1 : 0;
  p.window_left = window_left;
  return attn::DefaultVariant(p);
}

std::string describe(bool causal, int32_t w, int64_t kv_len, int64_t qf, int64_t ql) {
  std::ostringstream os;
  os << "causal " << causal << " window " << w << " kv_len " << kv_len << " q [" << qf << ", " << ql << "]";
  return os.str();
}

const int32_t kWindows[] = {-1, 0, 1, 2, 3, 5, 8, 30};

// masked() is exactly the documented rule: causal and j > p; window_left >= 0 and j < p - window_left.
TEST(VariantHost, MaskedMatchesDocumentedRule) {
  for (bool causal : {false, true})
    for (int32_t w : kWindows) {
      const attn::DefaultVariant v = make(causal, w);
      for (int q = -6; q < 20; ++q)
        for (int k = 0; k < 24; ++k) {
          const bool expect = (causal && k > q) || (w >= 0 && k < q - w);
          ASSERT_EQ(v.masked(q, k), expect) << describe(causal, w, 24, q, q) << " k " << k;
        }
    }
}

// kv_range(q_first, q_last, kv_len) against brute force over masked(): inside [0, kv_len), holds
// every key some query of [q_first, q_last] attends, and is tight: begin = the first such key,
// end = one past the last (or an empty range when there is none). For one query position the
// keys inside the range are exactly its unmasked keys (what decode relies on: no per-element mask).
// Query positions run from below 0 (q_len > kv_len) to kv_len - 1, as they do in a request.
TEST(VariantHost, KvRangeExhaustiveAgainstBruteForce) {
  int64_t checked = 0;
  for (bool causal : {false, true})
    for (int32_t w : kWindows)
      for (int64_t kv_len = 0; kv_len <= 14; ++kv_len) {
        const attn::DefaultVariant v = make(causal, w);
        for (int64_t qf = -5; qf < kv_len; ++qf)
          for (int64_t ql = qf; ql < kv_len; ++ql) {
            SCOPED_TRACE(describe(causal, w, kv_len, qf, ql));
            const attn::KVRange r = v.kv_range(qf, ql, kv_len);
            ASSERT_LE(0, r.begin);
            ASSERT_LE(r.begin, r.end);
            ASSERT_LE(r.end, kv_len);
            int64_t lo = kv_len, hi = -1;
            for (int64_t q = qf; q <= ql; ++q)
              for (int64_t k = 0; k < kv_len; ++k)
                if (!v.masked(int(q), int(k))) {
                  lo = std::min(lo, k);
                  hi = std::max(hi, k);
                }
            if (hi < 0) {
              EXPECT_EQ(r.begin, r.end) << "no key is visible: the range must be empty";
            } else {
              EXPECT_EQ(r.begin, lo);
              EXPECT_EQ(r.end, hi + 1);
            }
            if (qf == ql) {
              for (int64_t k = 0; k < kv_len; ++k)
                EXPECT_EQ(k >= r.begin && k < r.end, !v.masked(int(qf), int(k))) << "key " << k;
            }
            ++checked;
          }
      }
  EXPECT_GT(checked, 10000);
}

// The query positions of a request never pass kv_len - 1; the hook still clamps past it.
TEST(VariantHost, KvRangeClampsOutOfRangePositions) {
  for (bool causal : {false, true})
    for (int32_t w : kWindows) {
      const attn::DefaultVariant v = make(causal, w);
      for (int64_t kv_len = 0; kv_len < 6; ++kv_len)
        for (int64_t qf = -40; qf < 40; qf += 3)
          for (int64_t ql = qf; ql < 40; ql += 5) {
            const attn::KVRange r = v.kv_range(qf, ql, kv_len);
            EXPECT_TRUE(0 <= r.begin && r.begin <= r.end && r.end <= kv_len) << describe(causal, w, kv_len, qf, ql);
          }
    }
  // Large windows and positions: no overflow (int64 inside).
  const attn::DefaultVariant v = make(true, INT32_MAX);
  const attn::KVRange r = v.kv_range(-2000000000LL, 2000000000LL - 1, 2000000000LL);
  EXPECT_EQ(r.begin, 0);
  EXPECT_EQ(r.end, 2000000000);
}

// box_unmasked(q_first, q_last, k_begin, k_end) == no (q, k) of the box is masked.
TEST(VariantHost, BoxUnmaskedExhaustiveAgainstBruteForce) {
  for (bool causal : {false, true})
    for (int32_t w : kWindows) {
      const attn::DefaultVariant v = make(causal, w);
      for (int qf = -3; qf < 12; ++qf)
        for (int ql = qf; ql < 12; ++ql)
          for (int kb = 0; kb < 12; ++kb)
            for (int ke = kb + 1; ke <= 12; ++ke) {
              bool any = false;
              for (int q = qf; q <= ql && !any; ++q)
                for (int k = kb; k < ke && !any; ++k) any = v.masked(q, k);
              ASSERT_EQ(v.box_unmasked(qf, ql, kb, ke), !any)
                  << describe(causal, w, 12, qf, ql) << " keys [" << kb << ", " << ke << ")";
            }
    }
}

// What the decode planner asks: the one query at p = kv_len - 1 (windows only; causal is a no-op).
TEST(VariantHost, DecodeSingleQueryRange) {
  for (int32_t w : kWindows)
    for (bool causal : {false, true})
      for (int64_t kv_len = 0; kv_len < 50; ++kv_len) {
        const attn::DefaultVariant v = make(causal, w);
        const attn::KVRange r = v.kv_range(kv_len - 1, kv_len - 1, kv_len);
        EXPECT_EQ(r.end, kv_len);
        EXPECT_EQ(r.begin, w < 0 ? 0 : std::max<int64_t>(0, kv_len - 1 - w)) << describe(causal, w, kv_len, 0, 0);
      }
}

TEST(VariantHost, ParamsFromPublicVariant) {
  AttentionVariant a;
  attn::VariantParams p = attn::variant_params(a, 128);
  EXPECT_FLOAT_EQ(p.scale_log2, static_cast<float>(1.0 / std::sqrt(128.0) * 1.4426950408889634));
  EXPECT_EQ(p.softcap_pre, 0.f);
  EXPECT_EQ(p.causal, 0);
  EXPECT_EQ(p.window_left, -1);
  EXPECT_EQ(p.alibi_slopes, nullptr);
  EXPECT_EQ(attn::variant_kind(a), attn::VariantKind::kDefault);

  a.sm_scale = 0.25;
  a.logits_soft_cap = 30.f;
  a.mask = MaskMode::kCausal;
  a.window_left = 7;
  const float slopes[2] = {0.5f, 0.25f};
  a.alibi_slopes = slopes;
  p = attn::variant_params(a, 64);
  EXPECT_EQ(p.scale_log2, static_cast<float>(0.25 * 1.4426950408889634));
  EXPECT_EQ(p.sm_scale, 0.25f);
  EXPECT_EQ(p.soft_cap, 30.f);
  EXPECT_EQ(p.softcap_pre, static_cast<float>(0.25 / 30.0));
  EXPECT_EQ(p.softcap_post, static_cast<float>(30.0 * 1.4426950408889634));
  EXPECT_EQ(p.causal, 1);
  EXPECT_EQ(p.window_left, 7);
  EXPECT_EQ(p.alibi_slopes, slopes);
  EXPECT_EQ(attn::variant_kind(a), attn::VariantKind::kAlibi);

  a.logits_soft_cap = -1.f;  // <= 0: off
  EXPECT_EQ(attn::variant_params(a, 64).softcap_pre, 0.f);
  EXPECT_EQ(attn::variant_params(a, 64).soft_cap, 0.f);
}

}  // namespace
}  // namespace weft
