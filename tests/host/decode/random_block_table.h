// Random vLLM-style block tables for the property tests of the router's sharing feature
// (router_test.cpp: decode::shared_prefix_keys; pack_prepare_test.cpp: PackPlanner::prepare and
// the prefix forest's lead_keys): unshared rows (scattered distinct ids), groups sharing prefixes
// of random lengths (diverging at any page, rows shorter than the prefix, partial last pages), rows
// with equal first ids but nothing else in common, empty and sub-page rows, negative ids (unchecked
// entries), page size 1 (every 7th trial), strides wider than the rows; no groups on every 3rd trial.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "tests/common/test_util.h"

namespace weft::test {

struct RandomBlockTable {
  int32_t batch = 0, page_size = 16, max_blocks = 1;
  int64_t stride = 1;         // row stride of ids (>= max_blocks)
  std::vector<int32_t> ids;   // [max(1, batch), stride], unused entries -7
  std::vector<int32_t> lens;  // [max(1, batch)]
};

// Table number `trial` of `batch` rows, drawn from rng.
inline RandomBlockTable random_block_table(Rng& rng, int trial, int32_t batch) {
  RandomBlockTable t;
  t.batch = batch;
  const int32_t ps = t.page_size = trial % 7 == 0 ? 1 : 16;
  const int32_t max_blocks = t.max_blocks = int32_t(rng.randint(1, 40));
  t.stride = max_blocks + int32_t(rng.randint(0, 3));
  const int32_t groups = int32_t(rng.randint(1, 6));  // prefix groups (trial % 3 == 0: none)
  std::vector<std::vector<int32_t>> prefix(static_cast<size_t>(groups));
  int32_t next = int32_t(rng.randint(-50, 50));
  for (auto& g : prefix) {
    g.resize(size_t(rng.randint(1, max_blocks)));
    for (auto& id : g) id = next++;
  }
  t.ids.assign(size_t(std::max(1, batch)) * size_t(t.stride), -7);
  t.lens.assign(size_t(std::max(1, batch)), 0);
  for (int32_t b = 0; b < batch; ++b) {
    const int32_t pages = int32_t(rng.randint(0, max_blocks));
    t.lens[b] = pages == 0 ? int32_t(rng.randint(0, 1)) * int32_t(rng.randint(0, ps - 1))
                           : (pages - 1) * ps + int32_t(rng.randint(1, ps));
    int32_t* row = t.ids.data() + size_t(b) * size_t(t.stride);
    const bool in_group = trial % 3 != 0 && rng.randint(0, 3) != 0;
    const auto& g = prefix[size_t(rng.randint(0, groups - 1))];
    // A grouped row lists its group's prefix (up to a random divergence point) then private
    // pages; one in 8 takes only the first id (equal first ids, nothing else shared).
    const int32_t keep = !in_group ? 0 : rng.randint(0, 7) == 0 ? 1 : int32_t(rng.randint(1, int64_t(g.size())));
    for (int32_t p = 0; p < max_blocks; ++p) row[p] = p < keep ? g[size_t(p)] : next++;
  }
  return t;
}

}  // namespace weft::test
