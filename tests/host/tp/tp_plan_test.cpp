// Host tests: the TP layer step planner (src/tp/tp_plan.h): page tables of the whole batch and
// of the two token halves. Properties on random batches and cuts: every query keeps its absolute
// position (bottom-right causal alignment) and reads the same physical page slots in its half
// as in the whole batch; half A never sees a key past its own tokens; rejections name the argument.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "common/test_util.h"
#include "tp/tp_plan.h"
#include "weft/error.h"

namespace {

using weft::tp::plan_step;
using weft::tp::StepPlan;
using weft::tp::StepTable;

int64_t kv_len(const StepTable& t, int64_t page_size, std::size_t b) {
  const int64_t np = t.kv_indptr[b + 1] - t.kv_indptr[b];
  return np == 0 ? 0 : (np - 1) * page_size + t.last_page_len[b];
}

// Physical slot (page * page_size + offset) of position p of request b in table t.
int64_t slot(const StepTable& t, int64_t page_size, std::size_t b, int64_t p) {
  return int64_t{t.kv_indices[t.kv_indptr[b] + p / page_size]} * page_size + p % page_size;
}

void check_plan(const std::vector<int32_t>& q, const std::vector<int32_t>& ctx, int64_t m1, int64_t ps) {
  const StepPlan s = plan_step(q, ctx, m1, ps);
  const std::size_t n = q.size();
  int64_t T = 0;
  for (int32_t v : q) T += v;
  ASSERT_EQ(s.tokens, T);
  ASSERT_EQ(s.full.rows, T);
  ASSERT_EQ(s.a.rows, m1);
  ASSERT_EQ(s.b.rows, T - m1);
  ASSERT_EQ(s.batch_indices.size(), static_cast<std::size_t>(T));
  for (const StepTable* t : {&s.full, &s.a, &s.b}) {
    ASSERT_EQ(t->qo_indptr.size(), n + 1);
    ASSERT_EQ(t->kv_indptr.size(), n + 1);
    ASSERT_EQ(t->last_page_len.size(), n);
    for (std::size_t b = 0; b < n; ++b) {
      const int64_t np = t->kv_indptr[b + 1] - t->kv_indptr[b];
      ASSERT_GE(np, 0);
      if (np == 0) {
        EXPECT_EQ(t->last_page_len[b], 0);
      } else {
        EXPECT_GE(t->last_page_len[b], 1);
        EXPECT_LE(t->last_page_len[b], ps);
      }
      for (int64_t p = 0; p < np; ++p) {  // only the request's own pages, in order
        EXPECT_EQ(t->kv_indices[t->kv_indptr[b] + p], s.page_base[b] + p);
        EXPECT_LT(t->kv_indices[t->kv_indptr[b] + p], s.pages);
      }
    }
  }
  int64_t row = 0;
  for (std::size_t b = 0; b < n; ++b) {
    EXPECT_EQ(kv_len(s.full, ps, b), int64_t{ctx[b]} + q[b]);
    const int64_t qa = s.a.qo_indptr[b + 1] - s.a.qo_indptr[b], qb = s.b.qo_indptr[b + 1] - s.b.qo_indptr[b];
    EXPECT_EQ(qa + qb, q[b]);
    EXPECT_EQ(kv_len(s.a, ps, b), int64_t{ctx[b]} + qa) << "A sees the context and its own tokens only";
    EXPECT_EQ(kv_len(s.b, ps, b), int64_t{ctx[b]} + q[b]);
    for (int32_t i = 0; i < q[b]; ++i, ++row) {
      EXPECT_EQ(s.batch_indices[row], static_cast<int32_t>(b));
      EXPECT_EQ(s.positions[row], ctx[b] + i);
      const bool in_a = row < m1;
      const StepTable& h = in_a ? s.a : s.b;
      const int64_t local = row - (in_a ? 0 : m1);  // row inside the half
      ASSERT_GE(local, h.qo_indptr[b]);
      ASSERT_LT(local, h.qo_indptr[b + 1]);
      const int64_t qh = h.qo_indptr[b + 1] - h.qo_indptr[b];
      const int64_t kvh = kv_len(h, ps, b);
      // Bottom-right alignment: query j of the half sits at kv_len - q_len + j.
      EXPECT_EQ(kvh - qh + (local - h.qo_indptr[b]), s.positions[row]) << "row " << row;
      // The append of this token writes the slot the whole batch's table reads.
      ASSERT_LT(s.positions[row], kvh);
      EXPECT_EQ(slot(h, ps, b, s.positions[row]), slot(s.full, ps, b, s.positions[row]));
    }
  }
  // A request's rows in A come first: A's part of every request is a prefix.
  for (std::size_t b = 0; b < n; ++b)
    if (s.b.qo_indptr[b + 1] > s.b.qo_indptr[b] && s.a.qo_indptr[b + 1] > s.a.qo_indptr[b])
      for (std::size_t c = b + 1; c < n; ++c) EXPECT_EQ(s.a.qo_indptr[c + 1], s.a.qo_indptr[c]) << "request " << c;
}

TEST(TpPlan, CutInsideARequestIsChunkedPrefill) {
  // Two requests, 300 and 213 new tokens after 0 / 64 cached ones; cut at 256 (inside request 0).
  check_plan({300, 213}, {0, 64}, 256, 16);
  const StepPlan s = plan_step({300, 213}, {0, 64}, 256, 16);
  EXPECT_EQ(s.a.qo_indptr, (std::vector<int32_t>{0, 256, 256}));
  EXPECT_EQ(s.b.qo_indptr, (std::vector<int32_t>{0, 44, 257}));
  EXPECT_EQ(kv_len(s.a, 16, 0), 256);
  EXPECT_EQ(kv_len(s.a, 16, 1), 64);  // only its context
  EXPECT_EQ(s.pages, 19 + 18);        // ceil(300 / 16) + ceil(277 / 16)
}

TEST(TpPlan, EdgeCuts) {
  check_plan({5}, {0}, 0, 16);    // everything in B
  check_plan({5}, {0}, 5, 16);    // everything in A
  check_plan({0, 7, 0}, {3, 0, 9}, 3, 1);  // empty requests, page size 1
  check_plan({16, 16}, {16, 0}, 16, 16);   // cut on a request boundary and a page boundary
}

TEST(TpPlan, RandomBatchesAndCuts) {
  std::mt19937 gen(26);
  for (int it = 0; it < 400; ++it) {
    const int n = 1 + static_cast<int>(gen() % 6);
    std::vector<int32_t> q(n), ctx(n);
    int64_t T = 0;
    for (int b = 0; b < n; ++b) {
      q[b] = static_cast<int32_t>(gen() % 70);
      ctx[b] = gen() % 3 == 0 ? 0 : static_cast<int32_t>(gen() % 100);
      T += q[b];
    }
    const int64_t m1 = T == 0 ? 0 : static_cast<int64_t>(gen() % (T + 1));
    const int64_t ps = it % 4 == 0 ? 1 : it % 4 == 1 ? 7 : 16;
    check_plan(q, ctx, m1, ps);
    if (HasFailure()) return;
  }
}

TEST(TpPlan, RejectsBadArguments) {
  using weft::test::thrown_argument;
  EXPECT_EQ(thrown_argument([] { plan_step({1, 2}, {0}, 0, 16); }), "batch.ctx_lens");
  EXPECT_EQ(thrown_argument([] { plan_step({1, -2}, {0, 0}, 0, 16); }), "batch.q_lens");
  EXPECT_EQ(thrown_argument([] { plan_step({1}, {-1}, 0, 16); }), "batch.ctx_lens");
  EXPECT_EQ(thrown_argument([] { plan_step({4}, {0}, 5, 16); }), "split_tokens");
  EXPECT_EQ(thrown_argument([] { plan_step({4}, {0}, -1, 16); }), "split_tokens");
  EXPECT_EQ(thrown_argument([] { plan_step({4}, {0}, 2, 0); }), "page_size");
}

}  // namespace
