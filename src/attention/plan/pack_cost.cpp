// share_cost_inputs: the prefix-sharing cost model's per-CTA work of a pack plan (pack_cost.h).
#include "attention/plan/pack_cost.h"

#include <algorithm>

namespace weft::plan {

heuristics::PrefixShareCostInputs share_cost_inputs(const PrefixForest& forest, const WorkPlan& p,
                                                    const int32_t* kv_len, int32_t batch, int32_t page_size,
                                                    int32_t head_fold, int32_t kv_bytes_per_key,
                                                    bool cuda_core_decode) {
  heuristics::PrefixShareCostInputs in;
  in.cuda_core_decode = cuda_core_decode;
  const int32_t f = std::max(1, head_fold), C = std::max(1, p.num_ctas), C0 = std::max(1, p.num_ctas / f);
  const double unit = double(kv_bytes_per_key) / 512.0;  // keys of 512 bytes (d128, 16 bits)
  // Standard decode: every request's keys per KV head; a node's segment is read by each of its s
  // sharers, s - 1 of them repeats (the forest's nodes hold >= 2 sharers, segments of full pages).
  int64_t keys = 0, repeat = 0;
  for (int32_t b = 0; b < batch; ++b) keys += kv_len[b];
  for (const PrefixNode& n : forest.nodes)
    repeat += int64_t(n.page_end - n.page_begin) * page_size * (n.req_end - n.req_begin - 1);
  const double per_cta = double(p.num_kv_heads) * unit / C;
  in.unique_keys_per_cta = double(keys - repeat) * per_cta;
  in.repeat_keys_per_cta = double(repeat) * per_cta;
  // The sharing plan's narrow items: the folded plan's first copy (C0 CTAs; every copy the same).
  int64_t priv = 0, pack = 0;
  double worst = 0;
  for (int32_t c = 0; c < C0 && c + 1 < static_cast<int32_t>(p.cta_indptr.size()); ++c) {
    double load = 0;
    for (int32_t i = p.cta_indptr[c]; i < p.cta_indptr[c + 1]; ++i) {
      const int32_t k = p.item_kv_end[i] - p.item_kv_begin[i];
      (p.item_num_reqs[i] >= 2 ? pack : priv) += k;
      load += heuristics::kPrefixShareItemKeys + k * unit;
    }
    worst = std::max(worst, load);
  }
  in.private_keys_per_cta = double(priv) * unit / C0;
  in.pack_keys_per_cta = double(pack) * unit / C0;
  in.max_cta_keys = worst;
  // Wide items: the most loaded wide CTA (each copy's wide CTAs hold the same work).
  if (p.num_wide_items > 0) {
    int64_t wide = 0;
    for (int32_t c = 0; c + 1 < static_cast<int32_t>(p.wide_cta_indptr.size()); ++c) {
      int64_t load = 0;
      for (int32_t i = p.wide_cta_indptr[c]; i < p.wide_cta_indptr[c + 1]; ++i)
        load += p.item_kv_end[i] - p.item_kv_begin[i];
      wide = std::max(wide, load);
    }
    in.max_wide_cta_keys = double(wide) * unit;
  }
  return in;
}

}  // namespace weft::plan
