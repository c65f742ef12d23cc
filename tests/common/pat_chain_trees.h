// Seeded random prefix trees of the PAT bench's shape for the programmatic launch chain of the
// sm90 wave plans (DecodeOptions::prefix_wide_overlap in plans cut for one wave of the sm90 tile):
// one long root (3072..4096 keys) shared by 32..48 requests at GQA 8 (64 x 8 heads), private
// suffixes of 1..128 keys; pages 16 / 64. (A middle level of 2..4 wide nodes tips the planner's
// overlap estimate to a split plan, which keeps the FA2 tile: not this path.) Shared by the host test that checks
// the decode wrapper's planner config plans them serial with a wave (pack_wave_test.cpp, H100
// grid) and the GPU test that runs them (decode_pack_forest_test.cpp), so the GPU test's chain is
// known to run. Long roots with >= 256 rows per KV head: the wide items fill the grid, so the
// overlap estimate keeps the kinds one after the other (a shorter root splits the CTAs instead).
#pragma once
#include <cstdint>
#include <vector>

#include "tests/common/test_util.h"

namespace weft::test {

struct ChainTree {
  std::vector<int32_t> fan, keys;  // bench/prefix_tree.h make_prefix_tree_batch's B and L
  int32_t hq = 16, hkv = 2, page_size = 16;
};

inline ChainTree chain_tree(int iter) {
  Rng rng(0x5eed0000u + static_cast<uint64_t>(iter));
  ChainTree t;
  t.hq = 64;  // 8 KV heads at GQA 8 (Q gathered per request): with fewer KV heads a head class has
  t.hkv = 8;  // more of the grid's CTAs than the root's wide items fill, and the plan splits
  t.page_size = iter % 3 == 2 ? 64 : 16;
  const int32_t ps = t.page_size;
  const int32_t root = ps * static_cast<int32_t>(rng.randint(3072 / ps, 4096 / ps));
  const int32_t suffix = static_cast<int32_t>(rng.randint(1, 128));
  const int32_t sharers = static_cast<int32_t>(rng.randint(32, 48));
  t.fan = {1, sharers};
  t.keys = {root, suffix};
  return t;
}

}  // namespace weft::test
