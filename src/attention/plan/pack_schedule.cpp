// schedule_packs: which forest nodes get a pack, over which pages, for which sharers -- the
// memory-centric profit model of the pack planner (work_plan.h; PAT §5.1, Alg. 1).
//
// Decode is bound by memory traffic, so the model counts bytes per KV head:
//   KV      a pack of n requests reads its keys once per item of at most P requests: ceil(n / P)
//           reads instead of n (P = pack_item_requests of the node's sharers: tile_rows / group,
//           or wide_rows / group for a wide node);
//   partial every source of an output row that is not its only source writes a partial state
//           (fp32 O + LSE) that the merge reads back: partial_bytes_per_row per row and source,
//           one source per chunk of a pack's keys (long ranges are cut into chunks of at most
//           max_chunk keys so that a pack keeps the grid busy: that is what packing costs in
//           parallelism, and it is paid in more partial states).
// For node u (its pack over L_u keys, rem members still in it) and a member c with s_c sharers
// (a child node, or a request whose path ends at u, s_c = 1), merging c (c reads u's keys in its
// own pack or private item, and its rows lose u's partial states) changes
//   KV:      (ceil((rem - s_c) / P) + ceil(s_c / P) - ceil(rem / P)) * L_u * kv_bytes_per_key
//   partial: -s_c * group * partial_bytes_per_row * (chunks(L_u) + chunks(L_c) - chunks(L_u + L_c))
//            for a child node (its pack now covers both ranges), * chunks(L_u) for a request;
// it is merged when the partial bytes saved exceed the KV bytes added. The paper's rule (merge
// when 4 s_c > l_u) is this comparison for one query per CTA row; here the tile holds P requests,
// so merging a child whose sharers fill whole tiles adds no KV traffic at all and is always taken
// (the parent's pack only shrinks), while a lone request (s_c = 1) costs a full extra read of
// L_u unless the parent's last tile had room to spare.
// A node left with fewer than min_sharers members gets no pack: they all read its keys
// themselves. Decisions depend on the forest and the config only (lazy updates, pack_planner.h,
// rely on it); members are scanned in range order, so the result is deterministic.
#include <algorithm>

#include "attention/plan/work_plan.h"

namespace weft::plan {

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

int32_t pack_item_requests(int64_t sharers, int64_t node_keys, const PackPlanConfig& cfg) {
  const int32_t g = std::max(1, cfg.group_size);
  if (cfg.wide_rows > cfg.tile_rows && sharers * g >= std::max(cfg.wide_min_rows, cfg.tile_rows + 1) &&
      node_keys >= cfg.wide_min_keys)
    return cfg.wide_rows / g;
  return cfg.tile_rows / g;
}

int64_t pack_duplicate_keys(const PrefixForest& forest, const PackPlanConfig& cfg) {
  if (cfg.tile_rows / std::max(1, cfg.group_size) < 2) return 0;  // no packs: every request reads its keys itself
  int64_t dup = 0;
  for (const PrefixNode& n : forest.nodes) {
    const int64_t s = n.req_end - n.req_begin, P = pack_item_requests(n, cfg);
    if (s >= std::max(2, cfg.min_sharers))
      dup += int64_t(n.page_end - n.page_begin) * cfg.page_size * (s - ceil_div(s, P));
  }
  return dup;
}

void schedule_packs(const PrefixForest& forest, const PackPlanConfig& cfg, PackSchedule& s) {
  const int32_t N = static_cast<int32_t>(forest.nodes.size());
  const int32_t g = cfg.group_size, ps = cfg.page_size;
  const bool packs = cfg.tile_rows / cfg.group_size >= 2;
  const bool model = cfg.kv_bytes_per_key > 0 && cfg.partial_bytes_per_row > 0;
  s.order.assign(forest.order.begin(), forest.order.end());
  s.req_begin.resize(N);
  s.pack_reqs.assign(N, 0);
  s.pack_page_begin.resize(N);
  // Children of each node (CSR, in range order).
  s.child_ptr.assign(size_t(N) + 1, 0);
  for (const PrefixNode& n : forest.nodes)
    if (n.parent >= 0) ++s.child_ptr[n.parent + 1];
  for (int32_t u = 0; u < N; ++u) s.child_ptr[u + 1] += s.child_ptr[u];
  s.child_list.resize(s.child_ptr[N]);
  s.members.assign(s.child_ptr.begin(), s.child_ptr.end() - 1);  // fill cursors
  for (int32_t c = 0; c < N; ++c)
    if (forest.nodes[c].parent >= 0) s.child_list[s.members[forest.nodes[c].parent]++] = c;
  auto by_range = [&](int32_t a, int32_t b) { return forest.nodes[a].req_begin < forest.nodes[b].req_begin; };
  for (int32_t u = 0; u < N; ++u) {
    auto* first = s.child_list.data() + s.child_ptr[u];
    auto* last = s.child_list.data() + s.child_ptr[u + 1];
    if (!std::is_sorted(first, last, by_range)) std::sort(first, last, by_range);  // preorder: sorted already
  }
  for (int32_t u = 0; u < N; ++u)
    if (forest.nodes[u].parent < 0) {
      s.req_begin[u] = forest.nodes[u].req_begin;
      s.pack_page_begin[u] = forest.nodes[u].page_begin;
    }
  auto chunks = [&](int64_t len) {
    const int64_t c = chunk_keys(len, cfg.max_chunk, cfg.kv_granularity);
    return len == 0 ? int64_t(1) : ceil_div(len, c);
  };

  // Top-down (nodes are in preorder: a parent's decisions place its children before they run).
  for (int32_t u = 0; u < N; ++u) {
    const PrefixNode& n = forest.nodes[u];
    // Members in range order: a child node as -(c + 1), a request ending at u as its id.
    s.members.clear();
    int32_t i = n.req_begin;
    for (int32_t k = s.child_ptr[u]; k < s.child_ptr[u + 1]; ++k) {
      const PrefixNode& c = forest.nodes[s.child_list[k]];
      for (; i < c.req_begin; ++i) s.members.push_back(forest.order[i]);
      s.members.push_back(-(s.child_list[k] + 1));
      i = c.req_end;
    }
    for (; i < n.req_end; ++i) s.members.push_back(forest.order[i]);
    s.merged.assign(s.members.size(), 0);
    int64_t rem = n.req_end - n.req_begin;
    const int64_t len_u = int64_t(n.page_end - s.pack_page_begin[u]) * ps;
    // Requests per item of u's pack (the tile selector: wide for a node of many rows).
    const int64_t P = pack_item_requests(rem, int64_t(n.page_end - n.page_begin) * ps, cfg);
    if (model && packs) {
      for (size_t m = 0; m < s.members.size(); ++m) {
        const int32_t x = s.members[m];
        const bool node = x < 0;
        const PrefixNode* c = node ? &forest.nodes[-x - 1] : nullptr;
        if (node && c->page_begin != n.page_end) continue;  // not contiguous (cannot happen for forests)
        const int64_t sc = node ? c->req_end - c->req_begin : 1;
        const int64_t kv_added =
            (ceil_div(rem - sc, P) + ceil_div(sc, P) - ceil_div(rem, P)) * len_u * cfg.kv_bytes_per_key;
        int64_t sources_saved = chunks(len_u);
        if (node) {
          const int64_t len_c = int64_t(c->page_end - c->page_begin) * ps;
          sources_saved += chunks(len_c) - chunks(len_u + len_c);
        }
        const int64_t partial_saved = sc * g * sources_saved * cfg.partial_bytes_per_row;
        if (partial_saved > kv_added) {
          s.merged[m] = 1;
          rem -= sc;
        }
      }
    }
    if (rem < std::max(2, cfg.min_sharers) || !packs) {  // too few left for a pack: all read u's keys
      std::fill(s.merged.begin(), s.merged.end(), 1);
      rem = 0;
    }
    s.pack_reqs[u] = static_cast<int32_t>(rem);
    // Place the members: the pack's first (kept), then the merged, each in range order.
    int32_t at = s.req_begin[u];
    for (int pass = 0; pass < 2; ++pass)
      for (size_t m = 0; m < s.members.size(); ++m) {
        if (s.merged[m] != pass) continue;
        const int32_t x = s.members[m];
        if (x >= 0) {
          s.order[at++] = x;
          continue;
        }
        const int32_t c = -x - 1;
        s.req_begin[c] = at;
        s.pack_page_begin[c] = pass == 1 ? s.pack_page_begin[u] : forest.nodes[c].page_begin;
        at += forest.nodes[c].req_end - forest.nodes[c].req_begin;
      }
  }
}

}  // namespace weft::plan
