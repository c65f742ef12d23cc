// Long sequences, mixed batches, chunked prefill, GQA and tile sweeps (Prefill.*).
#include <gtest/gtest.h>

#include <vector>

#include "prefill_case.h"

namespace weft::test::prefill {
namespace {

AttentionVariant causal() {
  AttentionVariant v;
  v.mask = MaskMode::kCausal;
  return v;
}

TEST(Prefill, Causal8KRagged) {
  WEFT_REQUIRE_GPU();
  Case c;
  c.q_lens = {8192};
  c.kv_lens = {8192};
  c.num_qo_heads = 2;
  c.num_kv_heads = 1;
  c.paged = false;
  c.variant = causal();
  run_and_check(c);
}

TEST(Prefill, Causal4KPagedPage16HND) {
  WEFT_REQUIRE_GPU();
  Case c;
  c.q_lens = {4000};
  c.kv_lens = {4103};
  c.num_qo_heads = 4;
  c.num_kv_heads = 1;
  c.layout = KVLayout::kHND;
  c.variant = causal();
  run_and_check(c);
}

TEST(Prefill, MixedBatchRandomLengths) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  for (int rep = 0; rep < 2; ++rep) {
    Case c;
    const int batch = 7;
    for (int b = 0; b < batch; ++b) {
      const int q = static_cast<int>(rng.randint(1, 700));
      c.q_lens.push_back(q);
      c.kv_lens.push_back(q + static_cast<int>(rng.randint(0, 900)));
    }
    c.num_qo_heads = 8;
    c.num_kv_heads = 2;
    c.paged = rep == 0;
    c.page_size = 16;
    c.dtype = rep ? DType::kFloat16 : DType::kBFloat16;
    c.variant = causal();
    run_and_check(c, rep);
  }
}

TEST(Prefill, ChunkedPrefillLongHistory) {
  WEFT_REQUIRE_GPU();
  Case c;
  c.q_lens = {512};
  c.kv_lens = {16384 + 512};
  c.num_qo_heads = 4;
  c.num_kv_heads = 1;
  c.variant = causal();
  run_and_check(c);
}

TEST(Prefill, GqaGroups1To16) {
  WEFT_REQUIRE_GPU();
  int i = 0;
  for (int g : {1, 2, 3, 4, 5, 8, 16}) {
    Case c;
    c.q_lens = {1, 29, 130};
    c.kv_lens = {64, 31, 200};
    c.num_qo_heads = g * 2;
    c.num_kv_heads = 2;
    c.head_dim = i % 2 ? 64 : 128;
    c.paged = i % 2 == 0;
    c.page_size = i % 3 ? 16 : 1;
    c.variant = causal();
    run_and_check(c, i++);
  }
}

TEST(Prefill, ForcedTileSizes) {
  WEFT_REQUIRE_GPU();
  int i = 0;
  for (int d : {64, 128, 256}) {
    for (int q : {16, 64, 128}) {
      if (d == 256 && q == 128) continue;  // not instantiated (shared memory)
      Case c;
      c.q_lens = {77, 300};
      c.kv_lens = {1000, 333};
      c.num_qo_heads = 4;
      c.num_kv_heads = 2;
      c.head_dim = d;
      c.opt.cta_q = q;
      c.variant = causal();
      c.variant.logits_soft_cap = i % 2 ? 30.f : 0.f;
      c.dtype = i % 2 ? DType::kFloat16 : DType::kBFloat16;
      run_and_check(c, i++);
    }
  }
}

TEST(Prefill, NoSplitMatchesSplit) {
  WEFT_REQUIRE_GPU();
  Case c;
  c.q_lens = {64};
  c.kv_lens = {6000};
  c.variant = causal();
  c.opt.allow_split_kv = false;
  run_and_check(c, 1);
  c.opt.allow_split_kv = true;
  run_and_check(c, 1);
}

}  // namespace
}  // namespace weft::test::prefill
