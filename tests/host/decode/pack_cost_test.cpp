// The prefix-sharing cost model (heuristics::prefix_share_pays, plan::share_cost_inputs): the
// decode wrapper's choice between its sharing plan and the standard decode plan on the PAT bench's
// batches as planned on the H100 (264-CTA decode grid, 132 SMs, the sm90 wide tile; the wrapper's
// config: bench/prefix_tree.h pat_wrapper_plan). Named cases: the rows where sharing measured
// slower than standard decode fall back, the rows where it won keep sharing
// (bench/results/h100_all_049f043.json; the replay over every committed row:
// bench/pat_fallback_replay.py, bench/results/devbox_pat_fallback_208f0a6.txt).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "attention/heuristics.h"
#include "attention/plan/pack_cost.h"
#include "attention/plan/pack_planner.h"
#include "bench/prefix_tree.h"

namespace weft::plan {
namespace {

struct Choice {
  heuristics::PrefixShareCostInputs in;
  int32_t packs = 0;
  bool share = false;
};

Choice choose(int32_t hq, int32_t hkv, const std::vector<int32_t>& fan, const std::vector<int32_t>& keys) {
  const bench::PrefixTreeBatch t = bench::make_prefix_tree_batch(fan, keys, 16);
  PackPlanner planner;
  const PackPlanConfig pc = bench::pat_wrapper_plan(t, hq, hkv, 264, 132, true, 16, planner);
  Choice c;
  for (int32_t n : planner.current().item_num_reqs) c.packs += n >= 2;
  c.in = share_cost_inputs(planner.forest(), planner.current(), t.kv_len.data(), t.batch(), 16, pc.head_fold,
                           pc.kv_bytes_per_key, heuristics::decode_prefers_cuda_cores(hq / hkv, 128));
  c.share = heuristics::prefix_share_pays(c.in);
  return c;
}

std::string name(int32_t hq, int32_t hkv, const std::vector<int32_t>& fan, const std::vector<int32_t>& keys) {
  return std::to_string(hq) + "x" + std::to_string(hkv) + " B" + bench::join_dims(fan) + " L" + bench::join_dims(keys);
}

// Measured share / decode on H100 (h100_all_049f043.json) in the comments.
TEST(PackCost, SlowerSharingFallsBack) {
  const std::vector<int32_t> b4{1, 4, 16}, b8{1, 8, 64}, l128{128, 256, 1024}, l512{512, 512, 512};
  struct Row {
    int32_t hq, hkv;
    std::vector<int32_t> fan, keys;
  };
  const Row rows[] = {
      {64, 8, b4, l128},   // 64.1 vs 35.1 us (1.83x slower)
      {32, 8, b4, l128},   // 50.5 vs 33.4
      {16, 8, b4, l128},   // 51.0 vs 38.9
      {32, 32, b4, l128},  // 119.7 vs 113.5
      {32, 8, b8, l128},   // 144.5 vs 112.2
      {64, 8, b8, l128},   // 148.4 vs 113.0
      {16, 8, b8, l128},   // 122.0 vs 119.9
      {16, 8, b4, l512},   // 36.9 vs 31.6
      {32, 8, b4, l512},   // 36.9 vs 28.4
      {64, 8, b4, l512},   // 39.3 vs 29.8
  };
  for (const Row& r : rows) {
    const Choice c = choose(r.hq, r.hkv, r.fan, r.keys);
    SCOPED_TRACE(name(r.hq, r.hkv, r.fan, r.keys));
    EXPECT_GT(c.packs, 0) << "the sharing plan has packs: the cost model decides";
    EXPECT_FALSE(c.share) << "predicted share " << heuristics::predict_share_us(c.in) << " us, decode "
                          << heuristics::predict_decode_us(c.in) << " us";
  }
}

TEST(PackCost, FasterSharingKeepsSharing) {
  struct Row {
    int32_t hq, hkv;
    std::vector<int32_t> fan, keys;
  };
  const std::vector<int32_t> l4096{4096, 128}, l2048{2048, 512};
  const std::vector<Row> rows = {
      {64, 8, {1, 32}, l4096},        // 47.9 vs 98.6 us (the shared8 minimum)
      {32, 8, {1, 32}, l4096},        // 50.4 vs 98.0
      {16, 8, {1, 32}, l4096},        // 37.2 vs 128.7
      {32, 32, {1, 32}, l4096},       // 75.9 vs 389.9
      {64, 8, {1, 32}, l2048},        // 56.8 vs 72.5
      {32, 8, {1, 32}, l2048},        // 50.3 vs 71.8 (also the GPU test SharePrefixesCostModelFallsBack's)
      {16, 8, {1, 32}, l2048},        // 51.9 vs 86.3
      {64, 8, {1, 256}, l4096},       // 173.4 vs 736.2 (wide items)
      {32, 8, {1, 256}, l2048},       // 251.1 vs 507.0 (split wide plan)
      {64, 8, {4, 64}, l4096},        // 134.0 vs 191.4
      {64, 8, {1, 8, 64}, {512, 512, 512}},            // 85.0 vs 96.0 (the closest win kept)
      {32, 32, {1, 8, 64}, {128, 256, 1024}},          // 408.1 vs 428.2
      {64, 8, {1, 4, 16, 64}, {128, 256, 1024, 128}},  // 77.9 vs 80.5
      {32, 32, {1, 4, 16}, {512, 512, 512}},           // 83.3 vs 97.5
  };
  for (const Row& r : rows) {
    const Choice c = choose(r.hq, r.hkv, r.fan, r.keys);
    SCOPED_TRACE(name(r.hq, r.hkv, r.fan, r.keys));
    EXPECT_TRUE(c.share) << "predicted share " << heuristics::predict_share_us(c.in) << " us, decode "
                         << heuristics::predict_decode_us(c.in) << " us";
  }
}

// The inputs: standard decode's keys are the batch's (unique + repeats = every request's keys per
// KV head, per CTA of the grid); a plan's narrow keys are its items'; deterministic.
TEST(PackCost, InputsCountTheBatch) {
  const std::vector<int32_t> fan{1, 4, 16}, keys{128, 256, 1024};
  const bench::PrefixTreeBatch t = bench::make_prefix_tree_batch(fan, keys, 16);
  for (const int32_t hkv : {8, 32}) {
    PackPlanner planner;
    const PackPlanConfig pc = bench::pat_wrapper_plan(t, hkv * 4, hkv, 264, 132, true, 16, planner);
    const WorkPlan& p = planner.current();
    const heuristics::PrefixShareCostInputs in =
        share_cost_inputs(planner.forest(), p, t.kv_len.data(), t.batch(), 16, pc.head_fold, pc.kv_bytes_per_key, false);
    int64_t keys_total = 0;
    for (int32_t l : t.kv_len) keys_total += l;
    EXPECT_NEAR((in.unique_keys_per_cta + in.repeat_keys_per_cta) * 264, double(keys_total) * hkv, 1e-6 * keys_total * hkv);
    EXPECT_NEAR(in.unique_keys_per_cta * 264, double(t.unique_keys) * hkv, 1e-6 * keys_total * hkv);
    int64_t item_keys = 0;
    for (int32_t i = 0; i < p.num_items() - p.num_wide_items; ++i) item_keys += p.item_kv_end[i] - p.item_kv_begin[i];
    EXPECT_NEAR((in.private_keys_per_cta + in.pack_keys_per_cta) * 264, double(item_keys), 1e-6 * item_keys);
    EXPECT_GE(in.max_cta_keys * 264, double(item_keys)) << "the most loaded CTA holds at least the mean";
    const heuristics::PrefixShareCostInputs again =
        share_cost_inputs(planner.forest(), p, t.kv_len.data(), t.batch(), 16, pc.head_fold, pc.kv_bytes_per_key, false);
    EXPECT_EQ(again.max_cta_keys, in.max_cta_keys);
    EXPECT_EQ(heuristics::predict_share_us(again), heuristics::predict_share_us(in));
  }
}

// The models grow with the work they count (each rate is positive), and a plan with no narrow
// CTA load costs at least the sharing chain's fixed cost.
TEST(PackCost, ModelIsMonotone) {
  heuristics::PrefixShareCostInputs a;
  a.unique_keys_per_cta = 1000;
  a.repeat_keys_per_cta = 500;
  a.private_keys_per_cta = 800;
  a.pack_keys_per_cta = 100;
  a.max_cta_keys = 1200;
  for (double heuristics::PrefixShareCostInputs::*f :
       {&heuristics::PrefixShareCostInputs::unique_keys_per_cta, &heuristics::PrefixShareCostInputs::repeat_keys_per_cta}) {
    heuristics::PrefixShareCostInputs b = a;
    b.*f *= 2;
    EXPECT_GT(heuristics::predict_decode_us(b), heuristics::predict_decode_us(a));
  }
  for (double heuristics::PrefixShareCostInputs::*f :
       {&heuristics::PrefixShareCostInputs::private_keys_per_cta, &heuristics::PrefixShareCostInputs::pack_keys_per_cta,
        &heuristics::PrefixShareCostInputs::max_cta_keys, &heuristics::PrefixShareCostInputs::max_wide_cta_keys}) {
    heuristics::PrefixShareCostInputs b = a;
    b.*f = b.*f * 2 + 100;
    EXPECT_GT(heuristics::predict_share_us(b), heuristics::predict_share_us(a));
  }
  EXPECT_GT(heuristics::predict_share_us(heuristics::PrefixShareCostInputs{}),
            heuristics::predict_decode_us(heuristics::PrefixShareCostInputs{}))
      << "an empty step: the sharing chain's fixed cost exceeds the single decode launch's";
}

}  // namespace
}  // namespace weft::plan
