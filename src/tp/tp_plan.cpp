#include "tp/tp_plan.h"

#include <algorithm>

#include "weft/error.h"

namespace weft::tp {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

namespace {

// Table in which request b has q[b] query rows and kv[b] keys; its pages are the first
// ceil(kv[b] / page_size) of the request's pages.
StepTable make_table(const std::vector<int64_t>& q, const std::vector<int64_t>& kv,
                     const std::vector<int32_t>& page_base, int64_t page_size) {
  StepTable t;
  const std::size_t n = q.size();
  t.qo_indptr.assign(1, 0);
  t.kv_indptr.assign(1, 0);
  for (std::size_t b = 0; b < n; ++b) {
    t.qo_indptr.push_back(static_cast<int32_t>(t.qo_indptr.back() + q[b]));
    const int64_t np = ceil_div(kv[b], page_size);
    for (int64_t p = 0; p < np; ++p) t.kv_indices.push_back(static_cast<int32_t>(page_base[b] + p));
    t.kv_indptr.push_back(static_cast<int32_t>(t.kv_indices.size()));
    t.last_page_len.push_back(static_cast<int32_t>(kv[b] == 0 ? 0 : kv[b] - (np - 1) * page_size));
  }
  t.rows = t.qo_indptr.back();
  return t;
}

}  // namespace

StepPlan plan_step(const std::vector<int32_t>& q_lens, const std::vector<int32_t>& ctx_lens, int64_t m1,
                   int64_t page_size) {
  WEFT_CHECK_ARG(q_lens.size() == ctx_lens.size(), "batch.ctx_lens",
                 "expected " << q_lens.size() << " entries (one per request), got " << ctx_lens.size());
  WEFT_CHECK_ARG(page_size >= 1, "page_size", "must be >= 1, got " << page_size);
  StepPlan s;
  const std::size_t n = q_lens.size();
  for (std::size_t b = 0; b < n; ++b) {
    WEFT_CHECK_ARG(q_lens[b] >= 0, "batch.q_lens", "entry " << b << " is " << q_lens[b] << " (< 0)");
    WEFT_CHECK_ARG(ctx_lens[b] >= 0, "batch.ctx_lens", "entry " << b << " is " << ctx_lens[b] << " (< 0)");
    s.tokens += q_lens[b];
  }
  WEFT_CHECK_ARG(m1 >= 0 && m1 <= s.tokens, "split_tokens", "must be in [0, " << s.tokens << "], got " << m1);
  s.m1 = m1;
  std::vector<int64_t> q_full(n), kv_full(n), q_a(n), kv_a(n), q_b(n);
  int64_t row = 0;
  for (std::size_t b = 0; b < n; ++b) {
    s.page_base.push_back(static_cast<int32_t>(s.pages));
    const int64_t kv = int64_t{ctx_lens[b]} + q_lens[b];
    s.pages += ceil_div(kv, page_size);
    q_full[b] = q_lens[b];
    kv_full[b] = kv;
    // Rows [row, row + q) of the step; those below m1 are in half A.
    const int64_t in_a = std::clamp<int64_t>(m1 - row, 0, q_lens[b]);
    q_a[b] = in_a;
    kv_a[b] = ctx_lens[b] + in_a;  // A sees the context and its own tokens only
    q_b[b] = q_lens[b] - in_a;     // B sees everything (its keys end with its own tokens)
    for (int32_t i = 0; i < q_lens[b]; ++i) {
      s.batch_indices.push_back(static_cast<int32_t>(b));
      s.positions.push_back(ctx_lens[b] + i);
    }
    row += q_lens[b];
  }
  s.full = make_table(q_full, kv_full, s.page_base, page_size);
  s.a = make_table(q_a, kv_a, s.page_base, page_size);
  s.b = make_table(q_b, kv_full, s.page_base, page_size);
  return s;
}

}  // namespace weft::tp
