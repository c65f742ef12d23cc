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
  keys_at_full_ = 0;
  for (int32_t b = 0; b < batch; ++b) keys_at_full_ += kv_len[b];
  index_private_items();
  build_key(indptr, indices, kv_len, batch);
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

// The structural key of the plan just made (pack_planner.h): per request t_b = min(full pages,
// s_b + 1) as a kv_len range, its shared page ids as its deepest node's path (every sharer of a
// node holds the same ids over the node's pages and its ancestors'), its first private page id.
void PackPlanner::build_key(const int32_t* indptr, const int32_t* indices, const int32_t* kv_len, int32_t batch) {
  const int32_t ps = cfg_.page_size;
  const PrefixForest& f = forest_;
  // Each request's deepest node: nodes are in preorder, so a descendant overwrites its ancestor.
  fold_req_.assign(size_t(batch), -1);  // (reused as the deepest node per request here)
  for (size_t u = 0; u < f.nodes.size(); ++u)
    for (int32_t i = f.nodes[u].req_begin; i < f.nodes[u].req_end; ++i) fold_req_[f.order[i]] = int32_t(u);
  path_of_node_.assign(f.nodes.size(), -1);
  path_ids_.clear();
  key_.resize(size_t(batch));
  for (int32_t b = 0; b < batch; ++b) {
    ReqKey& k = key_[b];
    const int32_t s = f.shared_pages[b], full = kv_len[b] / ps, t = std::min(full, s + 1);
    const int32_t u = fold_req_[b];
    const int32_t* ids = indices + indptr[b];
    if (s > 0 && u >= 0 && f.nodes[u].page_end == s && path_of_node_[u] >= 0) {
      k.path = path_of_node_[u];
    } else {  // the node's first sharer (or, were s_b not its node's end, the request's own copy)
      k.path = static_cast<int32_t>(path_ids_.size());
      path_ids_.insert(path_ids_.end(), ids, ids + s);
      if (s > 0 && u >= 0 && f.nodes[u].page_end == s) path_of_node_[u] = k.path;
    }
    k.shared = s;
    k.has_priv = t > s;
    k.first_priv = k.has_priv ? ids[s] : 0;
    k.priv_start = scratch_.priv_start[b];
    const int32_t items = priv_ptr_[b + 1] - priv_ptr_[b];
    k.chunks = items == 0 ? -1 : priv_chunks_[b];
    // kv_len range: the same t_b (t_b pages full, and when t_b = s_b (a fully shared request,
    // t_b < s_b + 1 means full pages = s_b) not one more); at least its private start; with no
    // private item no private key (make_pack_plan would add one), and a request with shared
    // pages and private items keeps a private key (without one it has no private item).
    k.lo = std::max<int64_t>(int64_t(t) * ps, k.priv_start);
    k.hi = k.has_priv ? INT64_MAX : int64_t(t + 1) * ps;
    if (items == 0) k.hi = std::min<int64_t>(k.hi, int64_t(k.priv_start) + 1);
    if (items > 0 && k.priv_start > 0) k.lo = std::max<int64_t>(k.lo, int64_t(k.priv_start) + 1);
  }
  // Per folded item its first request (its page base is that request's indptr entry).
  const WorkPlan& p = plan_;
  fold_req_.clear();
  for_folded_items(p, cfg_.head_fold, [&](int32_t i) { fold_req_.push_back(p.req_list[p.item_req_begin[i]]); });
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
  if (std::llabs(keys - keys_at_full_) * 8 > keys_at_full_) return false;  // the deal drifted
  // One pass, each request's checks in order of cost, the first failure ends it.
  const ReqKey* key = key_.data();
  const int32_t* path = path_ids_.data();
  for (int32_t b = 0; b < batch; ++b) {
    const ReqKey& k = key[b];
    const int32_t len = kv_len[b];
    // The same t_b, private start and private items (ReqKey::lo, hi); the page table must hold
    // the keys (build_prefix_forest's check, which a full plan throws on: refuse the lazy path
    // and let it).
    if (len < k.lo || len >= k.hi || (int64_t(indptr[b + 1]) - indptr[b]) * ps < len) return false;
    const int32_t* ids = indices + indptr[b];
    if (k.shared > 0 && std::memcmp(ids, path + k.path, size_t(k.shared) * sizeof(int32_t)) != 0) return false;
    if (k.has_priv && ids[k.shared] != k.first_priv) return false;
    // Same number of private chunks (one, without a division, when uncut: chunk_keys).
    if (k.chunks >= 0) {
      const int32_t plen = len - k.priv_start;
      const bool uncut = max_chunk <= 0 || plen <= max_chunk;
      if ((uncut ? 1 : chunk_count(plen, chunk_keys(plen, max_chunk, cfg.kv_granularity))) != k.chunks) return false;
    }
  }
  // Rewrite, in the folded plan (for_folded_items; private items are narrow, so dest indexes the
  // plan), only what moved: the key ranges of requests whose length changed (uncut: only the
  // end) and the page bases whose request's indptr entry changed; then only the moved arrays'
  // copies (expand_item_kv's copies; each plan and update leaves them equal to the folded items).
  WorkPlan& p = plan_;
  const int32_t f = cfg.head_fold, n = p.num_items() - p.num_wide_items, n0 = n / f, w0 = p.num_wide_items / f;
  int32_t* const kb = p.item_kv_begin.data();
  int32_t* const ke = p.item_kv_end.data();
  bool end_moved = false, begin_moved = false, base_moved = false;
  for (int32_t b = 0; b < batch; ++b) {
    const int32_t nc = priv_chunks_[b], len = kv_len[b];
    if (nc == 0 || len == p.kv_len[b]) continue;
    end_moved = true;
    const int32_t* j0 = priv_items_.data() + priv_ptr_[b];
    const int32_t* const j1 = priv_items_.data() + priv_ptr_[b + 1];
    if (nc == 1) {  // uncut: [priv_start, len)
      for (; j0 < j1; ++j0) ke[*j0] = len;
      continue;
    }
    begin_moved = true;
    const int32_t start = key_[b].priv_start;
    const int64_t clen = chunk_keys(len - start, max_chunk, cfg.kv_granularity);
    for (int32_t c = 0; j0 < j1; ++j0, c = c + 1 == nc ? 0 : c + 1) {
      kb[*j0] = static_cast<int32_t>(start + c * clen);
      ke[*j0] = static_cast<int32_t>(std::min<int64_t>(len, start + (c + 1) * clen));
    }
  }
  int32_t* const base = p.item_page_base.data();
  const int32_t* const req = fold_req_.data();
  for (int32_t i = 0; i < n0; ++i) {
    const int32_t v = indptr[req[i]];
    base_moved |= v != base[i];
    base[i] = v;
  }
  for (int32_t w = 0; w < w0; ++w) {
    const int32_t v = indptr[req[n0 + w]];
    base_moved |= v != base[n + w];
    base[n + w] = v;
  }
  for (int32_t k = 1; k < f; ++k) {
    if (end_moved) std::copy_n(ke, n0, ke + size_t(k) * n0);
    if (begin_moved) std::copy_n(kb, n0, kb + size_t(k) * n0);
    if (base_moved) {
      std::copy_n(base, n0, base + size_t(k) * n0);
      std::copy_n(base + n, w0, base + n + size_t(k) * w0);
    }
  }
  std::copy(kv_len, kv_len + batch, p.kv_len.begin());
  return true;
}

}  // namespace weft::plan
