// PackPlanner: full prefix-sharing plans and their lazy update (pack_planner.h).
#include "attention/plan/pack_planner.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "weft/error.h"

namespace weft::plan {

namespace {

bool same_config(const PackPlanConfig& a, const PackPlanConfig& b) {
  return a.num_ctas == b.num_ctas && a.num_kv_heads == b.num_kv_heads && a.group_size == b.group_size &&
         a.tile_rows == b.tile_rows && a.page_size == b.page_size && a.max_chunk == b.max_chunk &&
         a.kv_granularity == b.kv_granularity && a.min_sharers == b.min_sharers && a.head_fold == b.head_fold &&
         a.kv_bytes_per_key == b.kv_bytes_per_key && a.partial_bytes_per_row == b.partial_bytes_per_row &&
         a.auto_chunk_min == b.auto_chunk_min && a.wide_rows == b.wide_rows && a.wide_min_rows == b.wide_min_rows &&
         a.wide_min_keys == b.wide_min_keys && a.wide_overlap == b.wide_overlap &&
         a.wide_key_cost == b.wide_key_cost && a.wide_split_margin == b.wide_split_margin &&
         a.max_slots == b.max_slots && a.wide_wave_ctas == b.wide_wave_ctas && a.wide_item_keys == b.wide_item_keys;
}

// Chunks of a private suffix of `len` keys (make_pack_plan: one, possibly empty, when uncut).
int32_t chunk_count(int64_t len, int64_t clen) { return len == 0 ? 1 : static_cast<int32_t>((len + clen - 1) / clen); }

}  // namespace

PackPlanner::Update PackPlanner::plan(const int32_t* indptr, const int32_t* indices, const int32_t* kv_len,
                                      int32_t batch, const PackPlanConfig& cfg) {
  if (lazy_ok_ && try_lazy(indptr, indices, kv_len, batch, cfg)) return Update::kLazy;
  lazy_ok_ = false;
  forest_builder_.build(indptr, indices, kv_len, batch, cfg.page_size, forest_);
  make_pack_plan(forest_, indptr, kv_len, cfg, plan_, scratch_);
  cfg_ = cfg;
  chunk_ = scratch_.max_chunk;
  dup_keys_ = scratch_.dup_keys;
  // The structural key: each request's first t_b = min(full pages, shared pages + 1) page ids.
  trunc_ptr_.assign(1, 0);
  trunc_ptr_.reserve(batch + 1);
  trunc_ids_.clear();
  keys_at_full_ = 0;
  for (int32_t b = 0; b < batch; ++b) {
    const int32_t t = std::min(kv_len[b] / cfg.page_size, forest_.shared_pages[b] + 1);
    trunc_ids_.insert(trunc_ids_.end(), indices + indptr[b], indices + indptr[b] + t);
    trunc_ptr_.push_back(static_cast<int32_t>(trunc_ids_.size()));
    keys_at_full_ += kv_len[b];
  }
  index_private_items();
  lazy_ok_ = true;
  return Update::kFull;
}

void PackPlanner::plan_forest(const PrefixForest& forest, const int32_t* indptr, const int32_t* kv_len,
                              const PackPlanConfig& cfg) {
  lazy_ok_ = false;
  forest_ = forest;
  make_pack_plan(forest_, indptr, kv_len, cfg, plan_, scratch_);
  cfg_ = cfg;
  chunk_ = scratch_.max_chunk;
  dup_keys_ = scratch_.dup_keys;
}

// Each request's private items in generation order (kv head, row tile, key), as make_pack_plan
// reports them in its scratch (priv_items, dest).
void PackPlanner::index_private_items() {
  const WorkPlan& p = plan_;
  const int32_t B = p.batch;
  priv_start_.assign(scratch_.priv_start.begin(), scratch_.priv_start.end());
  const int32_t first = scratch_.priv_items[0];
  priv_ptr_.resize(size_t(B) + 1);
  for (int32_t b = 0; b <= B; ++b) priv_ptr_[b] = scratch_.priv_items[b] - first;
  priv_items_.resize(priv_ptr_[B]);
  for (int32_t j = 0; j < priv_ptr_[B]; ++j) priv_items_[j] = scratch_.dest[first + j];
  priv_chunks_.resize(B);
  // Private items per chunk of a request: one per (folded KV head, row tile).
  const int32_t per_chunk = p.num_kv_heads / cfg_.head_fold * ((p.group_size + p.tile_rows - 1) / p.tile_rows);
  for (int32_t b = 0; b < B; ++b) priv_chunks_[b] = (priv_ptr_[b + 1] - priv_ptr_[b]) / per_chunk;
}

bool PackPlanner::try_lazy(const int32_t* indptr, const int32_t* indices, const int32_t* kv_len, int32_t batch,
                           const PackPlanConfig& cfg) {
  if (batch != plan_.batch || !same_config(cfg, cfg_) || batch == 0) return false;
  const int32_t ps = cfg.page_size;
  int64_t keys = 0;
  // The chunk bound this plan would be cut at: with auto_chunk_min it follows the packed work,
  // which for the same forest (checked below) moves only with the batch's keys (dup_keys_ fixed);
  // pack_max_chunk's coarse rounding keeps it over most decode steps.
  for (int32_t b = 0; b < batch; ++b) keys += kv_len[b];
  const int32_t max_chunk = cfg.auto_chunk_min > 0 ? pack_work_chunk(keys, dup_keys_, cfg) : cfg.max_chunk;
  if (max_chunk != chunk_) return false;
  for (int32_t b = 0; b < batch; ++b) {
    const int32_t len = kv_len[b];
    // The page table must hold the keys (build_prefix_forest's check, which a full plan throws
    // on: refuse the lazy path and let it).
    const int32_t full = len / ps, pages = full + (full * ps < len);  // one division per request
    if (len < priv_start_[b] || int64_t(indptr[b + 1]) - indptr[b] < pages) return false;
    const int32_t t = trunc_ptr_[b + 1] - trunc_ptr_[b];
    if (std::min(full, forest_.shared_pages[b] + 1) != t) return false;
    if (std::memcmp(indices + indptr[b], trunc_ids_.data() + trunc_ptr_[b], size_t(t) * sizeof(int32_t)) != 0)
      return false;
    // Same number of private chunks, and whether it has any: a request with shared pages has no
    // private item when it has no key past them (one with none has one, possibly empty).
    const int32_t plen = len - priv_start_[b];
    const int32_t items = priv_ptr_[b + 1] - priv_ptr_[b];
    if (items == 0 ? plen != 0 : (priv_start_[b] > 0 && plen == 0)) return false;
    const bool uncut = max_chunk <= 0 || plen <= max_chunk;  // one chunk (chunk_keys), no division
    if (items > 0 && (uncut ? 1 : chunk_count(plen, chunk_keys(plen, max_chunk, cfg.kv_granularity))) !=
                         priv_chunks_[b])
      return false;
  }
  if (std::llabs(keys - keys_at_full_) * 8 > keys_at_full_) return false;  // the deal drifted
  // Rewrite, in the folded plan (for_folded_items: make_pack_plan, head_fold; private items are
  // narrow, so dest indexes the plan): private key ranges, every page base; then its copies.
  WorkPlan& p = plan_;
  for (int32_t b = 0; b < batch; ++b) {
    const int32_t n = priv_chunks_[b];
    if (n == 0 || kv_len[b] == p.kv_len[b]) continue;
    const int32_t start = priv_start_[b];
    const int64_t clen = chunk_keys(kv_len[b] - start, max_chunk, cfg.kv_granularity);
    for (int32_t j = priv_ptr_[b], c = 0; j < priv_ptr_[b + 1]; ++j, c = c + 1 == n ? 0 : c + 1) {
      const int32_t i = priv_items_[j];
      p.item_kv_begin[i] = static_cast<int32_t>(start + c * clen);
      p.item_kv_end[i] = static_cast<int32_t>(std::min<int64_t>(kv_len[b], start + (c + 1) * clen));
    }
  }
  for_folded_items(p, cfg.head_fold, [&](int32_t i) { p.item_page_base[i] = indptr[p.req_list[p.item_req_begin[i]]]; });
  expand_item_kv(cfg.head_fold, p);
  std::copy(kv_len, kv_len + batch, p.kv_len.begin());
  return true;
}

}  // namespace weft::plan
