// FlashInfer Algorithm 1 (balanced split-KV scheduling) and the fixed workspace layout.
#include "attention/plan/balance.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <queue>
#include <string>

#include "weft/error.h"

namespace weft::plan {

int64_t tiles_per_head(int64_t qo_len, int32_t group_size, int32_t tile_q) {
  const int64_t rows = qo_len * group_size;
  return (rows + tile_q - 1) / tile_q;
}

double chunk_cost(const BalanceConfig& cfg, int32_t rows, int32_t kv_length) {
  return cfg.alpha * rows + cfg.beta * kv_length;
}

namespace {

void validate(const BatchShape& s, const BalanceConfig& c) {
  WEFT_CHECK_ARG(c.num_ctas >= 1, "cfg.num_ctas", "must be >= 1, got " << c.num_ctas);
  WEFT_CHECK_ARG(c.num_kv_heads >= 1, "cfg.num_kv_heads", "must be >= 1, got " << c.num_kv_heads);
  WEFT_CHECK_ARG(c.group_size >= 1, "cfg.group_size", "must be >= 1, got " << c.group_size);
  WEFT_CHECK_ARG(c.tile_q >= 1, "cfg.tile_q", "must be >= 1, got " << c.tile_q);
  WEFT_CHECK_ARG(c.kv_granularity >= 1, "cfg.kv_granularity", "must be >= 1, got " << c.kv_granularity);
  WEFT_CHECK_ARG(c.min_chunk >= 0, "cfg.min_chunk", "must be >= 0, got " << c.min_chunk);
  WEFT_CHECK_ARG(c.alpha >= 0 && c.beta > 0, "cfg.alpha/beta",
                 "need alpha >= 0 and beta > 0, got " << c.alpha << ", " << c.beta);
  WEFT_CHECK_ARG(c.min_gain >= 0 && c.min_gain < 1, "cfg.min_gain", "must be in [0, 1), got " << c.min_gain);
  WEFT_CHECK_ARG(s.qo_len.size() == s.kv_len.size(), "shape.kv_len",
                 "size " << s.kv_len.size() << " differs from qo_len size " << s.qo_len.size());
  WEFT_CHECK_ARG(s.kv_start.empty() || s.kv_start.size() == s.kv_len.size(), "shape.kv_start",
                 "size " << s.kv_start.size() << " must be 0 or " << s.kv_len.size());
  for (size_t b = 0; b < s.kv_len.size(); ++b) {
    WEFT_CHECK_ARG(s.qo_len[b] >= 0, "shape.qo_len[" + std::to_string(b) + "]",
                   "must be >= 0, got " << s.qo_len[b]);
    WEFT_CHECK_ARG(s.kv_len[b] >= 0, "shape.kv_len[" + std::to_string(b) + "]",
                   "must be >= 0, got " << s.kv_len[b]);
    if (!s.kv_start.empty()) {
      WEFT_CHECK_ARG(s.kv_start[b] >= 0 && s.kv_start[b] <= s.kv_len[b],
                     "shape.kv_start[" + std::to_string(b) + "]",
                     "must be in [0, kv_len = " << s.kv_len[b] << "], got " << s.kv_start[b]);
    }
  }
}

struct Tile {
  int32_t request, kv_head, row_begin, row_end, kv_begin, kv_end;
};
struct Chunk {
  int32_t tile, kv_begin, kv_end;
  double cost;
};

// Steps 3-5 for chunk bound L (split) or whole tiles (!split); fills p's items, merges, costs.
void deal(const std::vector<Tile>& tiles, const BalanceConfig& cfg, int64_t L, bool split, Plan& p) {
  int32_t longest = 0;
  for (const Tile& t : tiles) longest = std::max(longest, t.kv_end - t.kv_begin);
  p.max_chunk = tiles.empty() ? 0 : static_cast<int32_t>(split ? L : longest);

  p.split = false;
  // Step 3: chunks (generation order), partial slots and merges.
  std::vector<Chunk> chunks;
  std::vector<int32_t> chunk_slot;
  p.merge_indptr.push_back(0);
  for (int32_t t = 0; t < static_cast<int32_t>(tiles.size()); ++t) {
    const Tile& tl = tiles[t];
    const int32_t rows = tl.row_end - tl.row_begin;
    const int64_t len = tl.kv_end - tl.kv_begin;
    const int64_t n = (split && len > L) ? (len + L - 1) / L : 1;
    // n near-equal chunks (length rounded up to the granularity, <= L) balance better than
    // n - 1 chunks of L plus a short remainder.
    int64_t clen = (len + n - 1) / n;
    clen = (clen + cfg.kv_granularity - 1) / cfg.kv_granularity * cfg.kv_granularity;
    const int64_t n_used = n == 1 ? 1 : (len + clen - 1) / clen;
    for (int64_t c = 0; c < n_used; ++c) {
      const int32_t b0 = static_cast<int32_t>(tl.kv_begin + c * clen);
      const int32_t b1 = n_used == 1 ? tl.kv_end : static_cast<int32_t>(std::min<int64_t>(tl.kv_end, b0 + clen));
      chunks.push_back({t, b0, b1, chunk_cost(cfg, rows, b1 - b0)});
      chunk_slot.push_back(n_used == 1 ? -1 : p.merge_indptr.back() + static_cast<int32_t>(c));
    }
    if (n_used > 1) {
      p.merge_request.push_back(tl.request);
      p.merge_kv_head.push_back(tl.kv_head);
      p.merge_row_begin.push_back(tl.row_begin);
      p.merge_row_end.push_back(tl.row_end);
      p.merge_indptr.push_back(p.merge_indptr.back() + static_cast<int32_t>(n_used));
    }
  }

  // Step 4: stable sort by cost, descending.
  std::vector<int32_t> order(chunks.size());
  std::iota(order.begin(), order.end(), 0);
  if (cfg.row_tiles_together) {
    // Tie order (request, kv_head, chunk index, tile): chunk c of every tile of one (request,
    // kv head) before chunk c + 1. Tiles of one (request, kv head) are consecutive in `tiles`.
    std::vector<int64_t> head_of(chunks.size()), chunk_index(chunks.size());
    int64_t head = -1, c = 0;
    for (size_t i = 0; i < chunks.size(); ++i) {
      const Tile& tl = tiles[chunks[i].tile];
      const bool new_tile = i == 0 || chunks[i].tile != chunks[i - 1].tile;
      const bool new_head = i == 0 || tl.request != tiles[chunks[i - 1].tile].request ||
                            tl.kv_head != tiles[chunks[i - 1].tile].kv_head;
      if (new_head) ++head;
      c = new_tile ? 0 : c + 1;
      head_of[i] = head;
      chunk_index[i] = c;
    }
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return head_of[a] != head_of[b] ? head_of[a] < head_of[b] : chunk_index[a] < chunk_index[b];
    });
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return chunks[a].cost > chunks[b].cost; });

  // Step 5: min-heap of (load, cta); ties go to the lower CTA index.
  using Entry = std::pair<double, int32_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  for (int32_t c = 0; c < cfg.num_ctas; ++c) heap.push({0.0, c});
  std::vector<std::vector<int32_t>> per_cta(cfg.num_ctas);
  p.cta_cost.assign(cfg.num_ctas, 0.0);
  for (int32_t w : order) {
    auto [load, c] = heap.top();
    heap.pop();
    per_cta[c].push_back(w);
    load += chunks[w].cost;
    p.cta_cost[c] = load;
    heap.push({load, c});
  }

  // Flatten by CTA.
  p.cta_indptr.assign(cfg.num_ctas + 1, 0);
  const size_t n_items = chunks.size();
  p.item_request.reserve(n_items);
  for (int32_t c = 0; c < cfg.num_ctas; ++c) {
    for (int32_t w : per_cta[c]) {
      const Chunk& ch = chunks[w];
      const Tile& tl = tiles[ch.tile];
      p.item_request.push_back(tl.request);
      p.item_kv_head.push_back(tl.kv_head);
      p.item_row_begin.push_back(tl.row_begin);
      p.item_row_end.push_back(tl.row_end);
      p.item_kv_begin.push_back(ch.kv_begin);
      p.item_kv_end.push_back(ch.kv_end);
      p.item_partial_slot.push_back(chunk_slot[w]);
    }
    p.cta_indptr[c + 1] = static_cast<int32_t>(p.item_request.size());
  }
  p.split = p.num_merges() > 0;
}

}  // namespace

Plan balance(const BatchShape& shape, const BalanceConfig& cfg) {
  validate(shape, cfg);
  Plan p;
  p.num_ctas = cfg.num_ctas;
  p.num_kv_heads = cfg.num_kv_heads;
  p.group_size = cfg.group_size;
  p.tile_q = cfg.tile_q;
  p.batch = static_cast<int32_t>(shape.kv_len.size());
  p.qo_indptr.assign(p.batch + 1, 0);
  for (int32_t b = 0; b < p.batch; ++b) {
    const int64_t next = int64_t(p.qo_indptr[b]) + shape.qo_len[b];
    WEFT_CHECK_ARG(next <= INT32_MAX, "shape.qo_len", "total query tokens overflow int32");
    p.qo_indptr[b + 1] = static_cast<int32_t>(next);
  }
  p.kv_len = shape.kv_len;

  // Tiles in generation order (request, kv_head, tile).
  std::vector<Tile> tiles;
  int64_t total_kv = 0;
  int32_t longest = 0;  // longest tile KV range
  for (int32_t b = 0; b < p.batch; ++b) {
    const int64_t rows = int64_t(shape.qo_len[b]) * cfg.group_size;
    WEFT_CHECK_ARG(rows <= INT32_MAX, "shape.qo_len", "rows of request " << b << " overflow int32");
    const int64_t nt = tiles_per_head(shape.qo_len[b], cfg.group_size, cfg.tile_q);
    const int32_t kb = shape.kv_start.empty() ? 0 : shape.kv_start[b];
    const int32_t ke = shape.kv_len[b];
    for (int32_t h = 0; h < cfg.num_kv_heads; ++h) {
      for (int64_t t = 0; t < nt; ++t) {
        const int32_t r0 = static_cast<int32_t>(t * cfg.tile_q);
        const int32_t r1 = static_cast<int32_t>(std::min<int64_t>(rows, r0 + int64_t(cfg.tile_q)));
        tiles.push_back({b, h, r0, r1, kb, ke});
        total_kv += ke - kb;
        longest = std::max(longest, ke - kb);
      }
    }
  }
  p.num_tiles = static_cast<int32_t>(tiles.size());

  // Step 2: the maximum chunk length.
  int64_t L = (total_kv + cfg.num_ctas - 1) / cfg.num_ctas;
  L = std::max<int64_t>({L, cfg.min_chunk, 1});
  L = (L + cfg.kv_granularity - 1) / cfg.kv_granularity * cfg.kv_granularity;
  if (cfg.allow_split && longest > L) {
    // Split only when it lowers the planned makespan by min_gain: splitting adds partial
    // writes and a merge pass that the cost model does not count.
    Plan with = p, without = p;
    deal(tiles, cfg, L, true, with);
    deal(tiles, cfg, L, false, without);
    const double ms_with = *std::max_element(with.cta_cost.begin(), with.cta_cost.end());
    const double ms_without = *std::max_element(without.cta_cost.begin(), without.cta_cost.end());
    return ms_with <= (1.0 - cfg.min_gain) * ms_without ? with : without;
  }
  deal(tiles, cfg, L, false, p);
  return p;
}

// ---------------------------------------------------------------------------------------------
namespace {
constexpr int kItemArrays = 8;
constexpr int kMergeArrays = 4;
std::size_t align_up(std::size_t x, std::size_t a) { return (x + a - 1) / a * a; }
}  // namespace

WorkspaceLayout::WorkspaceLayout(const PlanBounds& b) : bounds_(b) {
  WEFT_CHECK_ARG(b.max_batch >= 1, "max_batch", "must be >= 1, got " << b.max_batch);
  WEFT_CHECK_ARG(b.max_tiles >= 0, "max_tiles", "must be >= 0, got " << b.max_tiles);
  WEFT_CHECK_ARG(b.num_ctas >= 1, "num_ctas", "must be >= 1, got " << b.num_ctas);
  WEFT_CHECK_ARG(b.tile_q >= 1, "tile_q", "must be >= 1, got " << b.tile_q);
  WEFT_CHECK_ARG(b.head_dim >= 1 && b.head_dim % 4 == 0, "head_dim",
                 "must be a positive multiple of 4, got " << b.head_dim);
  max_items_ = b.max_tiles + b.num_ctas;
  max_merges_ = b.num_ctas;
  max_slots_ = 2 * b.num_ctas;
  std::size_t off = align_up(sizeof(PlanHeader), kAlign);
  off_cta_ = off;
  off = align_up(off + sizeof(int32_t) * (b.num_ctas + 1), kAlign);
  off_first_ = off;
  off = align_up(off + sizeof(CtaRecord) * std::size_t(b.num_ctas), kAlign);
  off_items_ = off;
  off = align_up(off + sizeof(int32_t) * kItemArrays * std::size_t(max_items_), kAlign);
  off_merges_ = off;
  off = align_up(off + sizeof(int32_t) * (kMergeArrays * std::size_t(max_merges_) + max_merges_ + 1), kAlign);
  off_counter_ = off;
  off = align_up(off + sizeof(uint32_t) * std::size_t(max_merges_), kAlign);
  off_qo_ = off;
  off = align_up(off + sizeof(int32_t) * (b.max_batch + 1), kAlign);
  off_kv_ = off;
  off = align_up(off + sizeof(int32_t) * b.max_batch, kAlign);
  metadata_bytes_ = off;
  off_po_ = off;
  off = align_up(off + sizeof(float) * std::size_t(max_slots_) * b.tile_q * b.head_dim, kAlign);
  off_plse_ = off;
  off = align_up(off + sizeof(float) * std::size_t(max_slots_) * b.tile_q, kAlign);
  total_bytes_ = off;
}

PlanPointers WorkspaceLayout::pointers(void* base) const {
  char* p = static_cast<char*>(base);
  auto i32 = [&](std::size_t off, std::size_t k) {
    return reinterpret_cast<const int32_t*>(p + off) + k;
  };
  const std::size_t mi = max_items_, mm = max_merges_;
  PlanPointers v{};
  v.header = reinterpret_cast<const PlanHeader*>(p);
  v.cta_indptr = i32(off_cta_, 0);
  v.cta_first = reinterpret_cast<const CtaRecord*>(p + off_first_);
  v.item_request = i32(off_items_, 0 * mi);
  v.item_kv_head = i32(off_items_, 1 * mi);
  v.item_row_begin = i32(off_items_, 2 * mi);
  v.item_row_end = i32(off_items_, 3 * mi);
  v.item_kv_begin = i32(off_items_, 4 * mi);
  v.item_kv_end = i32(off_items_, 5 * mi);
  v.item_partial_slot = i32(off_items_, 6 * mi);
  v.item_merge = i32(off_items_, 7 * mi);
  v.merge_request = i32(off_merges_, 0 * mm);
  v.merge_kv_head = i32(off_merges_, 1 * mm);
  v.merge_row_begin = i32(off_merges_, 2 * mm);
  v.merge_row_end = i32(off_merges_, 3 * mm);
  v.merge_indptr = i32(off_merges_, 4 * mm);
  v.merge_counter = reinterpret_cast<uint32_t*>(p + off_counter_);
  v.qo_indptr = i32(off_qo_, 0);
  v.kv_len = i32(off_kv_, 0);
  v.partial_o = reinterpret_cast<float*>(p + off_po_);
  v.partial_lse = reinterpret_cast<float*>(p + off_plse_);
  return v;
}

void WorkspaceLayout::serialize(const Plan& plan, void* dst) const {
  WEFT_CHECK_ARG(plan.version == kPlanVersion, "plan", "version " << plan.version << " != " << kPlanVersion);
  WEFT_CHECK_ARG(plan.num_ctas == bounds_.num_ctas, "plan",
                 "num_ctas " << plan.num_ctas << " != workspace bound " << bounds_.num_ctas);
  // A plan may cut shorter query tiles than the bound (decode plans 16-row tiles into a 32-row
  // workspace when that fills the grid better); partial slots keep the bound's row stride.
  WEFT_CHECK_ARG(plan.tile_q >= 1 && plan.tile_q <= bounds_.tile_q, "plan",
                 "tile_q " << plan.tile_q << " exceeds the workspace bound " << bounds_.tile_q);
  WEFT_CHECK_ARG(plan.batch <= bounds_.max_batch, "plan",
                 "batch " << plan.batch << " exceeds max_batch " << bounds_.max_batch);
  WEFT_CHECK_ARG(plan.num_tiles <= bounds_.max_tiles, "plan",
                 "num_tiles " << plan.num_tiles << " exceeds max_tiles " << bounds_.max_tiles);
  WEFT_CHECK_ARG(plan.num_items() <= max_items_ && plan.num_merges() <= max_merges_ &&
                     plan.num_partial_slots() <= max_slots_,
                 "plan", "items/merges/slots " << plan.num_items() << "/" << plan.num_merges() << "/"
                                               << plan.num_partial_slots() << " exceed bounds "
                                               << max_items_ << "/" << max_merges_ << "/" << max_slots_);
  std::memset(dst, 0, metadata_bytes_);
  char* base = static_cast<char*>(dst);
  PlanHeader h{};
  h.version = plan.version;
  h.num_items = plan.num_items();
  h.num_merges = plan.num_merges();
  h.num_ctas = plan.num_ctas;
  h.batch = plan.batch;
  h.tile_q = bounds_.tile_q;  // the partial slots' row stride (items have <= tile_q rows)
  h.group_size = plan.group_size;
  h.num_kv_heads = plan.num_kv_heads;
  h.num_partial_slots = plan.num_partial_slots();
  h.split = plan.split ? 1 : 0;
  std::memcpy(base, &h, sizeof(h));
  PlanPointers v = pointers(dst);
  auto put = [](const int32_t* d, const std::vector<int32_t>& s) {
    if (!s.empty()) std::memcpy(const_cast<int32_t*>(d), s.data(), s.size() * sizeof(int32_t));
  };
  put(v.cta_indptr, plan.cta_indptr);
  put(v.item_request, plan.item_request);
  put(v.item_kv_head, plan.item_kv_head);
  put(v.item_row_begin, plan.item_row_begin);
  put(v.item_row_end, plan.item_row_end);
  put(v.item_kv_begin, plan.item_kv_begin);
  put(v.item_kv_end, plan.item_kv_end);
  put(v.item_partial_slot, plan.item_partial_slot);
  put(v.merge_request, plan.merge_request);
  put(v.merge_kv_head, plan.merge_kv_head);
  put(v.merge_row_begin, plan.merge_row_begin);
  put(v.merge_row_end, plan.merge_row_end);
  put(v.merge_indptr, plan.merge_indptr);
  put(v.qo_indptr, plan.qo_indptr);
  put(v.kv_len, plan.kv_len);
  // item_merge: the merge entry whose slot range holds the item's partial slot (slots of a merge
  // are consecutive); the counters stay 0 (memset above).
  int32_t* item_merge = const_cast<int32_t*>(v.item_merge);
  std::vector<int32_t> slot_merge(std::max(plan.num_partial_slots(), 0), -1);
  for (int32_t m = 0; m < plan.num_merges(); ++m)
    for (int32_t s = plan.merge_indptr[m]; s < plan.merge_indptr[m + 1]; ++s) slot_merge[s] = m;
  for (int32_t i = 0; i < plan.num_items(); ++i) {
    const int32_t s = plan.item_partial_slot[i];
    item_merge[i] = s >= 0 && s < static_cast<int32_t>(slot_merge.size()) ? slot_merge[s] : -1;
  }
  CtaRecord* first = const_cast<CtaRecord*>(v.cta_first);
  for (int32_t c = 0; c < plan.num_ctas; ++c) {
    CtaRecord r{};
    r.item_begin = plan.cta_indptr[c];
    r.item_end = plan.cta_indptr[c + 1];
    if (r.item_begin < r.item_end) {
      const int32_t i = r.item_begin;
      r.request = plan.item_request[i];
      r.kv_head = plan.item_kv_head[i];
      r.row_begin = plan.item_row_begin[i];
      r.row_end = plan.item_row_end[i];
      r.kv_begin = plan.item_kv_begin[i];
      r.kv_end = plan.item_kv_end[i];
      r.partial_slot = plan.item_partial_slot[i];
      r.token0 = plan.qo_indptr[r.request];
      r.merge = item_merge[i];
    }
    first[c] = r;
  }
}

Plan WorkspaceLayout::deserialize(const void* src) const {
  PlanPointers v = pointers(const_cast<void*>(src));
  const PlanHeader& h = *v.header;
  Plan p;
  p.version = h.version;
  p.num_ctas = h.num_ctas;
  p.num_kv_heads = h.num_kv_heads;
  p.group_size = h.group_size;
  p.tile_q = h.tile_q;
  p.batch = h.batch;
  p.split = h.split != 0;
  auto get = [](const int32_t* s, int64_t n) { return std::vector<int32_t>(s, s + n); };
  p.cta_indptr = get(v.cta_indptr, h.num_ctas + 1);
  p.item_request = get(v.item_request, h.num_items);
  p.item_kv_head = get(v.item_kv_head, h.num_items);
  p.item_row_begin = get(v.item_row_begin, h.num_items);
  p.item_row_end = get(v.item_row_end, h.num_items);
  p.item_kv_begin = get(v.item_kv_begin, h.num_items);
  p.item_kv_end = get(v.item_kv_end, h.num_items);
  p.item_partial_slot = get(v.item_partial_slot, h.num_items);
  p.merge_request = get(v.merge_request, h.num_merges);
  p.merge_kv_head = get(v.merge_kv_head, h.num_merges);
  p.merge_row_begin = get(v.merge_row_begin, h.num_merges);
  p.merge_row_end = get(v.merge_row_end, h.num_merges);
  p.merge_indptr = get(v.merge_indptr, h.num_merges + 1);
  p.qo_indptr = get(v.qo_indptr, h.batch + 1);
  p.kv_len = get(v.kv_len, h.batch);
  return p;
}

}  // namespace weft::plan
