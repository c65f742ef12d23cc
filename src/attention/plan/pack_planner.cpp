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

int64_t PackPlanner::prepare(const int32_t* indptr, const int32_t* indices, const int32_t* kv_len, int32_t batch,
                             int32_t page_size, bool build_forest) {
  prep_ = Prep::kNone;
  int64_t keys = shared_keys_;
  const Prep p = key_ids_hold(indptr, indices, kv_len, batch, page_size) ? Prep::kProbed : Prep::kForest;
  if (p == Prep::kForest) {
    if (!build_forest) return -1;
    forest_builder_.build(indptr, indices, kv_len, batch, page_size, pending_, &keys);
  }
  prep_ = p;
  prep_indptr_ = indptr;
  prep_indices_ = indices;
  prep_kv_len_ = kv_len;
  prep_batch_ = batch;
  prep_page_size_ = page_size;
  prep_keys_ = keys;
  return keys;
}

// The structural key's checks that read the table (try_lazy's first ones, without its rewrite):
// the same t_b (kv_len in [lo, hi]), the keys held by the list, the shared ids and the first
// private id.
bool PackPlanner::key_ids_hold(const int32_t* indptr, const int32_t* indices, const int32_t* kv_len, int32_t batch,
                               int32_t page_size) const {
  if (!lazy_ok_ || batch != plan_.batch || batch == 0 || page_size != cfg_.page_size) return false;
  const int32_t* const path = path_ids_.data();
  for (int32_t b = 0; b < batch; ++b) {
    const ReqKey& k = key_[b];
    const int32_t len = kv_len[b], at = indptr[b];
    if (len < k.lo || len > k.hi || (int64_t(indptr[b + 1]) - at) * page_size < len) return false;
    const int32_t* ids = indices + at;
    if (k.shared > 0 && std::memcmp(ids, path + k.path, size_t(k.shared) * sizeof(int32_t)) != 0) return false;
    if (k.has_priv && ids[k.shared] != k.first_priv) return false;
  }
  return true;
}

PackPlanner::Update PackPlanner::plan(const int32_t* indptr, const int32_t* indices, const int32_t* kv_len,
                                      int32_t batch, const PackPlanConfig& cfg, bool prepared) {
  // prepare()'s work where it was of this table (and, for a forest, of this page size).
  const bool same = prepared && prep_indptr_ == indptr && prep_indices_ == indices && prep_kv_len_ == kv_len &&
                    prep_batch_ == batch && prep_page_size_ == cfg.page_size;
  const Prep prep = same ? prep_ : Prep::kNone;
  prep_ = Prep::kNone;
  // (kForest: the key did not hold, so neither would try_lazy, which checks it and more.)
  if (prep != Prep::kForest && lazy_ok_ && try_lazy(indptr, indices, kv_len, batch, cfg, prep == Prep::kProbed)) {
    ++version_;
    return Update::kLazy;
  }
  lazy_ok_ = false;
  moved_ = 7;
  if (prep == Prep::kForest) {
    std::swap(forest_, pending_);  // (pending_ keeps the old one's buffers for the next prepare)
    shared_keys_ = prep_keys_;
  } else {
    forest_builder_.build(indptr, indices, kv_len, batch, cfg.page_size, forest_, &shared_keys_);
  }
  make_pack_plan(forest_, indptr, kv_len, cfg, plan_, scratch_);
  cfg_ = cfg;
  chunk_ = scratch_.max_chunk;
  dup_keys_ = scratch_.dup_keys;
  keys_at_full_ = 0;
  for (int32_t b = 0; b < batch; ++b) keys_at_full_ += kv_len[b];
  index_private_items();
  build_key(indptr, indices, kv_len, batch);
  lazy_ok_ = true;
  ++version_;
  return Update::kFull;
}

void PackPlanner::plan_forest(const PrefixForest& forest, const int32_t* indptr, const int32_t* kv_len,
                              const PackPlanConfig& cfg) {
  lazy_ok_ = false;
  moved_ = 7;
  forest_ = forest;
  make_pack_plan(forest_, indptr, kv_len, cfg, plan_, scratch_);
  cfg_ = cfg;
  chunk_ = scratch_.max_chunk;
  dup_keys_ = scratch_.dup_keys;
  ++version_;
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
    k.item_begin = priv_ptr_[b];
    k.item_end = priv_ptr_[b + 1];
    const int32_t items = k.item_end - k.item_begin;
    k.chunks = priv_chunks_[b];
    k.len = kv_len[b];
    k.base = indptr[b];
    // kv_len range: the same t_b (t_b pages full, and when t_b = s_b (a fully shared request,
    // t_b < s_b + 1 means full pages = s_b) not one more); at least its private start; with no
    // private item no private key (make_pack_plan would add one), and a request with shared
    // pages and private items keeps a private key (without one it has no private item).
    int64_t lo = std::max<int64_t>(int64_t(t) * ps, k.priv_start);
    int64_t hi = k.has_priv ? INT64_MAX : int64_t(t + 1) * ps - 1;
    if (items == 0) hi = std::min<int64_t>(hi, k.priv_start);
    if (items > 0 && k.priv_start > 0) lo = std::max<int64_t>(lo, int64_t(k.priv_start) + 1);
    // Private items but fewer than one chunk's (some (head, row tile) groups without keys): a
    // fresh plan's count differs from any whole number of chunks, never lazy (as before).
    if (items > 0 && k.chunks == 0) lo = INT64_MAX;
    const bool never = lo > hi || lo > INT32_MAX;
    k.lo = never ? 1 : static_cast<int32_t>(lo);
    k.hi = never ? 0 : static_cast<int32_t>(std::min<int64_t>(hi, INT32_MAX));
  }
  // Per folded item its first request (its page base is that request's indptr entry).
  const WorkPlan& p = plan_;
  fold_req_.clear();
  for_folded_items(p, cfg_.head_fold, [&](int32_t i) { fold_req_.push_back(p.req_list[p.item_req_begin[i]]); });
}

bool PackPlanner::try_lazy(const int32_t* indptr, const int32_t* indices, const int32_t* kv_len, int32_t batch,
                           const PackPlanConfig& cfg, bool ids_checked) {
  if (batch != plan_.batch || !same_config(cfg, cfg_) || batch == 0) return false;
  const int32_t ps = cfg.page_size;
  // One pass over the requests: each one's checks in order of cost (the first failure ends it)
  // and, for requests with one private chunk (uncut under the bound checked after the pass),
  // the rewrite of their items' ends. A refusal after a rewrite is harmless: plan() then plans
  // fully, which rewrites the plan and the key.
  WorkPlan& p = plan_;
  const int32_t* const path = path_ids_.data();
  const int32_t* const items = priv_items_.data();
  int32_t* const kb = p.item_kv_begin.data();
  int32_t* const ke = p.item_kv_end.data();
  int64_t keys = 0;
  int32_t max_plen = 0;  // the longest private suffix of a one-chunk request
  bool cut = false, end_moved = false, begin_moved = false, base_moved = false;
  for (int32_t b = 0; b < batch; ++b) {
    ReqKey& k = key_[b];
    const int32_t len = kv_len[b], at = indptr[b];
    keys += len;
    // The same t_b, private start and private items (ReqKey::lo, hi); the page table must hold
    // the keys (build_prefix_forest's check, which a full plan throws on: refuse the lazy path
    // and let it).
    if (len < k.lo || len > k.hi || (int64_t(indptr[b + 1]) - at) * ps < len) return false;
    const int32_t* ids = indices + at;  // (ids_checked: key_ids_hold read them for prepare())
    if (!ids_checked && k.shared > 0 && std::memcmp(ids, path + k.path, size_t(k.shared) * sizeof(int32_t)) != 0)
      return false;
    if (!ids_checked && k.has_priv && ids[k.shared] != k.first_priv) return false;
    base_moved |= at != k.base;
    k.base = at;
    if (k.chunks == 1) {
      max_plen = std::max(max_plen, len - k.priv_start);
      if (len != k.len) {
        for (int32_t j = k.item_begin; j < k.item_end; ++j) ke[items[j]] = len;  // [priv_start, len)
        end_moved = true;
        k.len = len;
      }
    } else {
      cut |= k.chunks > 1;
    }
  }
  // The chunk bound this plan would be cut at: with auto_chunk_min it follows the packed work,
  // which for the same forest (checked above) moves only with the batch's keys (dup_keys_ fixed);
  // pack_max_chunk's coarse rounding keeps it over most decode steps.
  const int32_t max_chunk = cfg.auto_chunk_min > 0 ? pack_work_chunk(keys, dup_keys_, cfg) : cfg.max_chunk;
  if (max_chunk != chunk_) return false;
  if (std::llabs(keys - keys_at_full_) * 8 > keys_at_full_) return false;  // the deal drifted
  // Same number of private chunks: one-chunk requests stay uncut (chunk_keys, no division) or
  // are counted; requests cut into several are counted and their ranges rewritten.
  if (max_chunk > 0 && max_plen > max_chunk)
    for (int32_t b = 0; b < batch; ++b) {
      const ReqKey& k = key_[b];
      const int32_t plen = kv_len[b] - k.priv_start;
      if (k.chunks == 1 && plen > max_chunk && chunk_count(plen, chunk_keys(plen, max_chunk, cfg.kv_granularity)) != 1)
        return false;
    }
  if (cut)
    for (int32_t b = 0; b < batch; ++b) {
      ReqKey& k = key_[b];
      const int32_t nc = k.chunks, len = kv_len[b], start = k.priv_start;
      if (nc <= 1) continue;
      const int32_t plen = len - start;
      const int64_t clen = chunk_keys(plen, max_chunk, cfg.kv_granularity);
      if ((max_chunk <= 0 || plen <= max_chunk ? 1 : chunk_count(plen, clen)) != nc) return false;
      if (len == k.len) continue;
      k.len = len;
      end_moved = begin_moved = true;
      for (int32_t j = k.item_begin, c = 0; j < k.item_end; ++j, c = c + 1 == nc ? 0 : c + 1) {
        kb[items[j]] = static_cast<int32_t>(start + c * clen);
        ke[items[j]] = static_cast<int32_t>(std::min<int64_t>(len, start + (c + 1) * clen));
      }
    }
  // The page bases where an indptr entry moved (per folded item: its first request's entry);
  // then only the moved arrays' copies (expand_item_kv's; each plan and update leaves them equal
  // to the folded items). Private items are narrow: dest indexes the plan.
  const int32_t f = cfg.head_fold, n = p.num_items() - p.num_wide_items, n0 = n / f, w0 = p.num_wide_items / f;
  int32_t* const base = p.item_page_base.data();
  if (base_moved) {
    const int32_t* const req = fold_req_.data();
    for (int32_t i = 0; i < n0; ++i) base[i] = indptr[req[i]];
    for (int32_t w = 0; w < w0; ++w) base[n + w] = indptr[req[n0 + w]];
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
  moved_ = uint32_t(base_moved) | uint32_t(begin_moved) << 1 | uint32_t(end_moved) << 2;
  return true;
}

std::pair<std::size_t, std::size_t> PackPlanner::serialize_moved(const WorkPlanLayout& layout, void* dst) const {
  const WorkPlan& p = plan_;
  WEFT_CHECK_ARG(p.num_items() <= layout.bounds().max_items, "plan", "items exceed the workspace bounds");
  // The three arrays lie back to back in the image (WorkPlanLayout::item_kv_offset, in this order).
  const WorkPlanPointers at = layout.pointers(dst);
  unsigned char* const d = static_cast<unsigned char*>(dst);
  const int32_t* const arr[3] = {at.item_page_base, at.item_kv_begin, at.item_kv_end};
  const std::vector<int32_t>* const src[3] = {&p.item_page_base, &p.item_kv_begin, &p.item_kv_end};
  const uint32_t moved = moved_ | 4u;  // at least the ends (a copy of no bytes is never queued)
  int first = 0;
  while (!(moved >> first & 1u)) ++first;
  const std::size_t n = std::size_t(p.num_items()) * sizeof(int32_t);
  for (int a = first; a < 3; ++a)
    if (n > 0) std::memcpy(const_cast<int32_t*>(arr[a]), src[a]->data(), n);
  const std::size_t begin = reinterpret_cast<const unsigned char*>(arr[first]) - d;
  return {begin, layout.item_kv_offset() + layout.item_kv_bytes() - begin};
}

}  // namespace weft::plan
