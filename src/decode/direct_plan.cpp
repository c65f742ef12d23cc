// decode::DirectPlanner (direct_plan.h): unsplit balanced decode plans from the lengths, written
// straight into the workspace image.
#include "decode/direct_plan.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <utility>

#include "attention/plan/balance_internal.h"
#include "decode/decode_plan.h"
#include "weft/error.h"

namespace weft::decode {

int32_t plan_tile_rows_of(const int32_t* kv_len, const int32_t* kv_start, int32_t batch, int32_t num_kv_heads,
                          int32_t group_size, int32_t grid, int32_t max_rows) {
  if (max_rows <= kPlanTileQ) return max_rows;
  const int64_t wide_tiles_per_request = int64_t(num_kv_heads) * plan::tiles_per_head(1, group_size, max_rows);
  int64_t pieces = 0;
  for (int32_t b = 0; b < batch; ++b) {
    const int64_t len = kv_len[b] - (kv_start == nullptr ? 0 : kv_start[b]);
    pieces += wide_tiles_per_request * std::max<int64_t>(1, (len + kMinChunk - 1) / kMinChunk);
    if (pieces >= int64_t(kWidePiecesPerCta) * grid) return max_rows;
  }
  return kPlanTileQ;
}

namespace {
// alpha / beta as the planner's integral costs (Planner::prepare: whole numbers below 2^20).
bool whole_cost(double x, uint64_t* out) {
  if (!(x >= 0 && x < 1048576.0) || x != static_cast<double>(static_cast<int64_t>(x))) return false;
  *out = static_cast<uint64_t>(x);
  return true;
}

// Stable LSD radix sort of n words by their high 32 bits (at most `span`), in one or two passes of
// at most 11 bits (b256's 0.5-4K keys: 12 bits, two passes over 64 buckets; the planner's
// byte-wise radix_sort clears and scans 2 x 256 buckets for them), else in passes of 8 bits.
// Ends with the result in a.
void sorted_radix(uint64_t* a, uint64_t* tmp, std::size_t n, uint32_t span) {
  int bits = 0;
  while (bits < 32 && (span >> bits) != 0) ++bits;
  const int passes = bits <= 11 ? 1 : bits <= 22 ? 2 : (bits + 7) / 8;
  const int d = (bits + passes - 1) / passes;
  const uint32_t mask = (uint32_t(1) << d) - 1;
  uint32_t hist[2][2048];
  int done = 0;
  uint64_t *src = a, *dst = tmp;
  while (done < passes) {
    const int now = passes - done >= 2 ? 2 : 1;  // digits counted in one pass over the words
    const int s0 = 32 + done * d, s1 = s0 + d;
    std::memset(hist[0], 0, (mask + 1) * sizeof(uint32_t));
    if (now == 2) std::memset(hist[1], 0, (mask + 1) * sizeof(uint32_t));
    if (now == 2) {
      for (std::size_t i = 0; i < n; ++i) {
        ++hist[0][(src[i] >> s0) & mask];
        ++hist[1][(src[i] >> s1) & mask];
      }
    } else {
      for (std::size_t i = 0; i < n; ++i) ++hist[0][(src[i] >> s0) & mask];
    }
    for (int p = 0; p < now; ++p) {
      uint32_t* const h = hist[p];
      uint32_t sum = 0;
      for (uint32_t v = 0; v <= mask; ++v) {
        const uint32_t c = h[v];
        h[v] = sum;
        sum += c;
      }
      const int sh = s0 + p * d;
      for (std::size_t i = 0; i < n; ++i) dst[h[(src[i] >> sh) & mask]++] = src[i];
      std::swap(src, dst);
    }
    done += now;
  }
  if (src != a) std::memcpy(a, src, n * sizeof(uint64_t));
}
}  // namespace

bool DirectPlanner::plan(const int32_t* kv_len, int32_t batch, const plan::BalanceConfig& cfg) {
  const int32_t C = cfg.num_ctas, H = cfg.num_kv_heads;
  uint64_t ia = 0, ib = 0;
  // What the general planner's unsplit one-tile-per-head integer path covers (Planner::build ->
  // build_whole_units); anything else (and bad configurations, which it reports) goes there.
  if (batch < 1 || batch >= (1 << 24) || C < 1 || H < 1 || H > 256 || cfg.group_size < 1 ||
      cfg.group_size > cfg.tile_q || cfg.kv_granularity < 1 || cfg.min_chunk < 0 || !(cfg.beta > 0) ||
      !whole_cost(cfg.alpha, &ia) || !whole_cost(cfg.beta, &ib) || !(cfg.min_gain >= 0 && cfg.min_gain < 1) ||
      cfg.deal_heads_together || cfg.heads_in_turn)
    return false;
  cfg_ = cfg;
  kv_len_ = kv_len;
  batch_ = batch;
  rows_ = cfg.group_size;  // one query row per request: the group, one tile per KV head
  // One pass: total keys, the longest request, the costs' range and sum (the requests' order is
  // the tie order of the stable sort below).
  int64_t total = 0;
  int32_t longest = 0, shortest = INT32_MAX;
  for (int32_t b = 0; b < batch; ++b) {
    const int32_t k = kv_len[b];
    total += k;
    longest = std::max(longest, k);
    shortest = std::min(shortest, k);
  }
  // Step 2's bound L0 (Planner::chunk_bound over H tiles per request); a longer request is a split
  // candidate (choose_split): the general planner.
  int64_t L = (total * H + C - 1) / C;
  L = std::max<int64_t>({L, cfg.min_chunk, 1});
  L = (L + cfg.kv_granularity - 1) / cfg.kv_granularity * cfg.kv_granularity;
  if (cfg.allow_split && longest > L) return false;
  const uint64_t row_cost = ia * static_cast<uint64_t>(rows_);
  const uint64_t cmax = row_cost + ib * static_cast<uint64_t>(longest);
  const uint64_t csum = row_cost * static_cast<uint64_t>(batch) + ib * static_cast<uint64_t>(total);
  const std::size_t U = static_cast<std::size_t>(batch), n = U * static_cast<std::size_t>(H);
  // The integer queue's conditions (build_whole_units / Planner::int_keys_for_total): keys
  // (load << shift) | cta below 2^63 for loads up to the total.
  if (!(cmax == 0 || n <= ~uint64_t(0) / cmax)) return false;
  int shift = 1;
  while ((int64_t(1) << shift) < C) ++shift;
  if (!(static_cast<double>(csum * static_cast<uint64_t>(H)) < static_cast<double>(uint64_t(1) << (62 - shift))))
    return false;

  // Step 4: the requests by cost, descending, stable. cost = row_cost + ib * len is monotone in
  // len, so the key is ib * (longest - len) (below 2^32, else the general planner); sorted with the
  // request in the low half of one word (sorted_radix).
  const uint64_t span = ib * static_cast<uint64_t>(longest - shortest);
  if (span >= (uint64_t(1) << 32)) return false;
  plan::balance_detail::grow(sorted_, U);
  plan::balance_detail::grow(sorted_tmp_, U);
  uint64_t* const a = sorted_.data();
  for (std::size_t b = 0; b < U; ++b)
    a[b] = (ib * static_cast<uint64_t>(longest - kv_len[b])) << 32 | static_cast<uint64_t>(b);
  if (span > 0) sorted_radix(a, sorted_tmp_.data(), U, static_cast<uint32_t>(span));

  // Step 5: the LPT deal of each request's H tiles (head order), lowest (load, CTA) first: a binary
  // min-heap of keys (load << shift) | cta, padded with maximal keys (balance_detail::deal_heap;
  // every correct min-queue on that total order pops what the planner's ring + heap pops, so
  // the heap's shape does not matter).
  // With every cost >= 1 (decode: rows >= 1 at alpha 1) the first C tiles go to CTAs 0 .. C - 1 in
  // order (all loads 0, each new key above every untouched one): dealt without the heap, which is
  // then made from their keys.
  plan::balance_detail::grow(assigned_, n);
  indptr_.assign(std::size_t(C) + 1, 0);
  int32_t* const as = assigned_.data();
  int32_t* const cnt = indptr_.data() + 1;
  heap_.assign(2 * std::size_t(C) + 2, ~uint64_t(0));
  uint64_t* const heap = heap_.data();
  auto cost_of = [&](std::size_t k) {  // the sorted place k's cost, shifted into a key increment
    return (row_cost + ib * static_cast<uint64_t>(kv_len[static_cast<uint32_t>(a[k])])) << shift;
  };
  std::size_t t0 = 0;  // tiles dealt before the heap
  if (row_cost + ib * static_cast<uint64_t>(shortest) >= 1) {
    t0 = std::min(n, std::size_t(C));
    for (std::size_t t = 0; t < t0; ++t) {
      as[t] = static_cast<int32_t>(t);
      cnt[t] = 1;
      heap[t] = cost_of(t / std::size_t(H)) | t;
    }
    for (std::size_t t = t0; t < std::size_t(C); ++t) heap[t] = t;
    std::make_heap(heap, heap + C, std::greater<uint64_t>());
  } else {
    for (int32_t c = 0; c < C; ++c) heap[c] = static_cast<uint64_t>(c);  // load 0: sorted = a heap
  }
  if (H == 1) {
    for (std::size_t k = t0; k < U; ++k) {
      const int32_t cta = plan::balance_detail::deal_heap(heap, std::size_t(C), shift, cost_of(k));
      as[k] = cta;
      ++cnt[cta];
    }
  } else {
    for (std::size_t t = t0; t < n; ++t) {
      const int32_t cta = plan::balance_detail::deal_heap(heap, std::size_t(C), shift, cost_of(t / std::size_t(H)));
      as[t] = cta;
      ++cnt[cta];
    }
  }
  int32_t* const ci = indptr_.data();
  busy_end_ = 0;
  for (int32_t c = 0; c < C; ++c) {
    if (ci[c + 1] > 0) busy_end_ = c + 1;
    ci[c + 1] += ci[c];
  }
  n_ = static_cast<int32_t>(n);
  longest_ = longest;
  return true;
}

void DirectPlanner::write(const plan::WorkspaceLayout& layout, void* dst, plan::WorkspaceLayout::Image* image) const {
  const plan::PlanBounds& bd = layout.bounds();
  const int32_t C = cfg_.num_ctas, H = cfg_.num_kv_heads, F = cfg_.head_fold, batch = batch_;
  const std::size_t n = static_cast<std::size_t>(n_);
  WEFT_CHECK_ARG(bd.launch_records && C == bd.num_ctas && F == bd.head_fold && cfg_.tile_q <= bd.tile_q &&
                     batch <= bd.max_batch && n_ <= bd.max_tiles && n_ <= layout.max_items(),
                 "plan", "the direct plan (" << C << " CTAs, fold " << F << ", batch " << batch << ", " << n_
                                             << " items) does not fit the workspace layout");
  const bool incremental = image != nullptr && image->valid;
  if (!incremental) std::memset(dst, 0, layout.metadata_bytes());
  plan::PlanHeader hd{};
  hd.version = plan::kPlanVersion;
  hd.num_items = n_;
  hd.num_merges = 0;
  hd.num_ctas = C;
  hd.batch = batch;
  hd.tile_q = cfg_.tile_q;
  hd.group_size = cfg_.group_size;
  hd.num_kv_heads = H;
  hd.num_partial_slots = 0;
  hd.split = 0;
  hd.head_fold = F;
  std::memcpy(dst, &hd, sizeof hd);
  const plan::PlanPointers v = layout.pointers(dst);
  auto out = [](const int32_t* p) { return const_cast<int32_t*>(p); };
  int32_t* const ci = out(v.cta_indptr);
  std::memcpy(ci, indptr_.data(), (std::size_t(C) + 1) * sizeof(int32_t));
  // The varying item fields at each CTA's next place, in the deal order (build_whole_units'
  // flatten); the constant ones filled: every tile whole (rows from 0, keys from 0), final.
  int32_t *const ir = out(v.item_request), *const ih = out(v.item_kv_head), *const ike = out(v.item_kv_end);
  cursor_.assign(indptr_.begin(), indptr_.end() - 1);
  int32_t* const cur = cursor_.data();
  const int32_t* const as = assigned_.data();
  const uint64_t* const ord = sorted_.data();  // (request in the low half)
  const std::size_t U = static_cast<std::size_t>(batch);
  if (H == 1) {
    for (std::size_t k = 0; k < U; ++k) {
      const int32_t b = static_cast<int32_t>(static_cast<uint32_t>(ord[k]));
      const int32_t i = cur[as[k]]++;
      ir[i] = b;
      ike[i] = kv_len_[b];
    }
    std::fill(ih, ih + n, 0);
  } else {
    for (std::size_t k = 0; k < U; ++k) {
      const int32_t b = static_cast<int32_t>(static_cast<uint32_t>(ord[k])), len = kv_len_[b];
      for (int32_t h = 0; h < H; ++h) {
        const int32_t i = cur[as[k * std::size_t(H) + std::size_t(h)]]++;
        ir[i] = b;
        ih[i] = h;
        ike[i] = len;
      }
    }
  }
  std::fill(out(v.item_row_begin), out(v.item_row_begin) + n, 0);
  std::fill(out(v.item_row_end), out(v.item_row_end) + n, rows_);
  std::fill(out(v.item_kv_begin), out(v.item_kv_begin) + n, 0);
  std::fill(out(v.item_partial_slot), out(v.item_partial_slot) + n, -1);
  std::fill(out(v.item_merge), out(v.item_merge) + n, -1);
  out(v.merge_indptr)[0] = 0;
  int32_t* const qo = out(v.qo_indptr);
  for (int32_t b = 0; b <= batch; ++b) qo[b] = b;  // one query token per request
  std::memcpy(out(v.kv_len), kv_len_, std::size_t(batch) * sizeof(int32_t));

  // The launch records (plan::fold_launch_order up to the last busy plan CTA): runs of consecutive
  // plan CTAs whose first items are one tile, each launched sub-head major. In an unsplit plan a
  // tile is one item, so only empty CTAs share a run.
  plan::CtaRecord* const rec = const_cast<plan::CtaRecord*>(v.cta_first);
  auto record = [&](int32_t p, int32_t j) {
    plan::CtaRecord r{};
    r.item_begin = ci[p];
    r.item_end = ci[p + 1];
    if (r.item_begin < r.item_end) {
      const int32_t i = r.item_begin;
      r.request = ir[i];
      r.kv_head = ih[i];
      r.row_begin = 0;
      r.row_end = rows_;
      r.kv_begin = 0;
      r.kv_end = ike[i];
      r.partial_slot = -1;
      r.token0 = r.request;
      r.merge = -1;
    }
    r.fold = plan::fold_word(j, F);
    return r;
  };
  auto same_tile = [&](int32_t a, int32_t b) {
    const bool ea = ci[a] == ci[a + 1], eb = ci[b] == ci[b + 1];
    if (ea || eb) return ea && eb;
    return ir[ci[a]] == ir[ci[b]] && ih[ci[a]] == ih[ci[b]];
  };
  int32_t c = 0;
  for (int32_t p0 = 0; p0 < busy_end_;) {
    int32_t p1 = p0 + 1;
    while (p1 < C && same_tile(p1, p0)) ++p1;
    for (int32_t p = p0; p < p1; ++p) rec[c + (p - p0)] = record(p, 0);
    for (int32_t j = 1; j < F; ++j)
      for (int32_t p = p0; p < p1; ++p) {
        plan::CtaRecord& r = rec[c + j * (p1 - p0) + (p - p0)];
        r = rec[c + (p - p0)];
        r.fold = plan::fold_word(j, F);
      }
    c += F * (p1 - p0);
    p0 = p1;
  }
  const int32_t records = busy_end_ * F;

  // The previous image's excess (WorkspaceLayout::serialize's Image: len[] in its array order:
  // cta_indptr, the 7 item arrays, the 4 merge arrays, merge_indptr, qo_indptr, kv_len, item_merge).
  const int32_t* const dsts[16] = {ci,
                                   ir,
                                   ih,
                                   v.item_row_begin,
                                   v.item_row_end,
                                   v.item_kv_begin,
                                   ike,
                                   v.item_partial_slot,
                                   v.merge_request,
                                   v.merge_kv_head,
                                   v.merge_row_begin,
                                   v.merge_row_end,
                                   v.merge_indptr,
                                   qo,
                                   v.kv_len,
                                   v.item_merge};
  const int32_t ni = n_;
  const int32_t lens[16] = {C + 1, ni, ni, ni, ni, ni, ni, ni, 0, 0, 0, 0, 1, batch + 1, batch, ni};
  if (incremental) {
    for (int k = 0; k < 16; ++k)
      if (image->len[k] > lens[k])
        std::memset(out(dsts[k]) + lens[k], 0, std::size_t(image->len[k] - lens[k]) * sizeof(int32_t));
    if (image->records > records)
      std::memset(rec + records, 0, sizeof(plan::CtaRecord) * std::size_t(image->records - records));
  }
  if (image != nullptr) {
    std::memcpy(image->len, lens, sizeof lens);
    image->records = records;
    image->valid = true;
  }
}

}  // namespace weft::decode
