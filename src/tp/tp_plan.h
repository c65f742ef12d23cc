// Internal, pure C++: the page tables and token arrays of one TP layer step, for the whole
// batch and for the two halves of a token split (TokenWeave §3.1: a request cut by the split
// keeps its prefix in half A, so half B's attention is chunked prefill over A's keys).
#pragma once
#include <cstdint>
#include <vector>

namespace weft::tp {

// One attention batch over the layer's page pool: every request of the step appears (q_len may
// be 0), so request indices are the same in every table.
struct StepTable {
  std::vector<int32_t> qo_indptr;      // batch + 1: this table's query rows, relative to its first row
  std::vector<int32_t> kv_indptr;      // batch + 1
  std::vector<int32_t> kv_indices;     // pages
  std::vector<int32_t> last_page_len;  // batch
  int64_t rows = 0;                    // query rows (qo_indptr.back())
};

struct StepPlan {
  int64_t tokens = 0;  // T
  int64_t m1 = 0;      // rows of half A (T when not split)
  int64_t pages = 0;   // pages the batch uses (request b: [page_base[b], page_base[b] + pages_b))
  std::vector<int32_t> page_base;
  StepTable full, a, b;
  // Per token row (token order): its request and its position in that request's sequence.
  std::vector<int32_t> batch_indices, positions;
};

int64_t ceil_div(int64_t a, int64_t b);

// q_lens, ctx_lens: per request (>= 0, equal sizes); m1 in [0, T]; page_size >= 1.
// Throws weft::Error naming the argument.
StepPlan plan_step(const std::vector<int32_t>& q_lens, const std::vector<int32_t>& ctx_lens, int64_t m1,
                   int64_t page_size);

}  // namespace weft::tp
