// make_cascade_forest: a prefix forest from explicit cascade levels (cascade_forest.h).
#include "attention/plan/cascade_forest.h"

#include <vector>

#include "weft/error.h"

namespace weft::plan {

PrefixForest make_cascade_forest(const CascadeLevelSpec* levels, int32_t num_levels, const int32_t* indptr,
                                 const int32_t* indices, const int32_t* kv_len, int32_t batch, int32_t page_size) {
  WEFT_CHECK_ARG(batch >= 0, "batch", "must be >= 0, got " << batch);
  WEFT_CHECK_ARG(page_size >= 1, "page_size", "must be >= 1, got " << page_size);
  WEFT_CHECK_ARG(num_levels >= 0 && (num_levels == 0 || levels != nullptr), "levels",
                 "expected num_levels >= 0 level specs, got " << num_levels);
  PrefixForest f;
  f.order.resize(batch);
  for (int32_t b = 0; b < batch; ++b) f.order[b] = b;
  f.shared_pages.assign(batch, 0);
  std::vector<int32_t> start(batch, 0);      // page position where each request's next level starts
  std::vector<int32_t> node_of(batch, -1);   // deepest node holding each request
  std::vector<char> boundary(batch + 1, 0);  // group boundaries of the previous level
  boundary[0] = boundary[batch] = 1;
  for (int32_t l = 0; l < num_levels; ++l) {
    const CascadeLevelSpec& lv = levels[l];
    WEFT_CHECK_ARG(lv.num_groups >= 0 && lv.req_indptr != nullptr && (lv.num_groups == 0 || lv.num_pages != nullptr),
                   "levels", "level " << l << ": req_indptr (num_groups + 1) and num_pages (num_groups) required");
    WEFT_CHECK_ARG(lv.req_indptr[0] == 0 && lv.req_indptr[lv.num_groups] == batch, "levels",
                   "level " << l << ": req_indptr must run from 0 to batch " << batch << ", got "
                            << lv.req_indptr[0] << " .. " << lv.req_indptr[lv.num_groups]);
    std::vector<char> next(batch + 1, 0);
    for (int32_t g = 0; g <= lv.num_groups; ++g) {
      const int32_t r = lv.req_indptr[g];
      WEFT_CHECK_ARG(g == 0 || r >= lv.req_indptr[g - 1], "levels",
                     "level " << l << ": req_indptr must not decrease (group " << g << ")");
      next[r] = 1;
    }
    for (int32_t r = 0; r <= batch; ++r)
      WEFT_CHECK_ARG(!boundary[r] || next[r], "levels",
                     "level " << l << ": its groups must nest in the level above's (no boundary at request " << r
                              << ")");
    for (int32_t g = 0; g < lv.num_groups; ++g) {
      const int32_t r0 = lv.req_indptr[g], r1 = lv.req_indptr[g + 1], np = lv.num_pages[g];
      WEFT_CHECK_ARG(np >= 0, "levels", "level " << l << " group " << g << ": num_pages " << np << " < 0");
      if (r1 == r0) continue;
      const int32_t p0 = start[r0], p1 = p0 + np;
      for (int32_t b = r0; b < r1; ++b) {
        WEFT_CHECK_ARG(int64_t(kv_len[b]) >= int64_t(p1) * page_size && int64_t(indptr[b + 1]) - indptr[b] >= p1,
                       "levels", "level " << l << " group " << g << ": request " << b << " (" << kv_len[b]
                                          << " keys) does not hold " << p1 << " full pages");
        for (int32_t p = p0; p < p1; ++p)
          WEFT_CHECK_ARG(indices[indptr[b] + p] == indices[indptr[r0] + p], "levels",
                         "level " << l << " group " << g << ": request " << b << " has page id "
                                  << indices[indptr[b] + p] << " at position " << p << " where request " << r0
                                  << " has " << indices[indptr[r0] + p]);
        start[b] = p1;
      }
      if (r1 - r0 < 2 || np == 0) continue;
      PrefixNode n;
      n.parent = node_of[r0];  // the same for every member (nested groups)
      n.page_begin = p0;
      n.page_end = p1;
      n.req_begin = r0;
      n.req_end = r1;
      const int32_t id = static_cast<int32_t>(f.nodes.size());
      f.nodes.push_back(n);
      for (int32_t b = r0; b < r1; ++b) {
        node_of[b] = id;
        f.shared_pages[b] = p1;
      }
    }
    boundary.swap(next);
  }
  return f;
}

}  // namespace weft::plan
