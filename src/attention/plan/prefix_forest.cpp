// Prefix forest: a radix tree over the requests' full-page lists. Each edge is labelled by a
// range of one request's page list (its owner), so a page is compared once when a request is
// inserted (memcmp of the whole label first) and never stored twice: linear in the number of
// pages, with one hash lookup per tree node visited (child by first page id) instead of one per
// page.
#include "attention/plan/prefix_forest.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "weft/error.h"

namespace weft::plan {

namespace {

// Tree nodes in one flat array, no per-node containers: children and the requests that end at a
// node are intrusive lists (creation / insertion order), so building allocates O(1) times.
struct RadixNode {
  int32_t parent = -1;
  int32_t owner = -1;          // request whose list labels the edge into this node
  int32_t begin = 0, end = 0;  // label: owner's page positions [begin, end) (= depth range)
  int32_t first_child = -1, last_child = -1, prev_sibling = -1, next_sibling = -1;
  int32_t first_end = -1, last_end = -1;  // requests whose full pages end exactly here
};

uint64_t child_key(int32_t node, int32_t page) {
  return (uint64_t(uint32_t(node)) << 32) | uint32_t(page);
}

// (node, first page id of the child's label) -> child: open addressing with linear probing in a
// power-of-two table sized for every node the tree can have (2 per request + the root), so it
// never grows. A key is never all ones (node ids are < 2^31).
class ChildMap {
 public:
  void reset(size_t max_entries) {  // empty, sized for max_entries (keeps its memory)
    size_t cap = 16;
    while (cap < 2 * max_entries) cap *= 2;
    keys_.assign(cap, kEmpty);
    vals_.resize(cap);
    mask_ = cap - 1;
  }
  int32_t find(uint64_t k) const {
    for (size_t i = slot(k);; i = (i + 1) & mask_) {
      if (keys_[i] == k) return vals_[i];
      if (keys_[i] == kEmpty) return -1;
    }
  }
  void set(uint64_t k, int32_t v) {  // insert or overwrite
    size_t i = slot(k);
    while (keys_[i] != kEmpty && keys_[i] != k) i = (i + 1) & mask_;
    keys_[i] = k;
    vals_[i] = v;
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t(0);
  size_t slot(uint64_t k) const { return size_t((k * 0x9E3779B97F4A7C15ull) >> 20) & mask_; }
  std::vector<uint64_t> keys_;
  std::vector<int32_t> vals_;
  size_t mask_ = 0;
};

struct Frame {
  int32_t node, next_child, forest_parent;  // next_child: a child id or -1
};

}  // namespace

// The builder's buffers, kept between builds (a warm build allocates nothing).
struct PrefixForestBuilder::State {
  std::vector<RadixNode> t;
  std::vector<int32_t> full, next_end, range_begin, range_end, shared_end, path;
  std::vector<Frame> stack;
  ChildMap child_of;
};

PrefixForestBuilder::PrefixForestBuilder() : s_(new State) {}
PrefixForestBuilder::~PrefixForestBuilder() = default;

PrefixForest build_prefix_forest(const int32_t* indptr, const int32_t* indices, const int32_t* kv_len,
                                  int32_t batch, int32_t page_size) {
  PrefixForest f;
  PrefixForestBuilder().build(indptr, indices, kv_len, batch, page_size, f);
  return f;
}

void PrefixForestBuilder::build(const int32_t* indptr, const int32_t* indices, const int32_t* kv_len,
                                int32_t batch, int32_t page_size, PrefixForest& f, int64_t* lead_keys) {
  if (lead_keys != nullptr) *lead_keys = 0;
  WEFT_CHECK_ARG(batch >= 0, "batch", "must be >= 0, got " << batch);
  WEFT_CHECK_ARG(page_size >= 1, "page_size", "must be >= 1, got " << page_size);
  f.nodes.clear();
  f.order.clear();
  f.shared_pages.assign(batch, 0);
  if (batch == 0) return;
  WEFT_CHECK_ARG(indptr != nullptr && kv_len != nullptr, "indptr", "host arrays required for batch " << batch);
  State& st = *s_;
  std::vector<int32_t>& full = st.full;
  full.resize(batch);
  for (int32_t b = 0; b < batch; ++b) {
    WEFT_CHECK_ARG(kv_len[b] >= 0, "kv_len", "entry " << b << " is negative: " << kv_len[b]);
    const int64_t pages = int64_t(indptr[b + 1]) - indptr[b];
    full[b] = kv_len[b] / page_size;
    WEFT_CHECK_ARG(pages >= (int64_t(kv_len[b]) + page_size - 1) / page_size, "indptr",
                   "request " << b << " has " << pages << " pages for " << kv_len[b] << " keys");
  }
  auto page = [&](int32_t req, int32_t pos) { return indices[indptr[req] + pos]; };

  const size_t max_nodes = 2 * static_cast<size_t>(batch) + 1;  // each insertion adds a leaf and a split
  std::vector<RadixNode>& t = st.t;
  t.assign(1, RadixNode{});  // t[0]: the root (empty label)
  t.reserve(max_nodes);
  std::vector<int32_t>& next_end = st.next_end;
  next_end.assign(batch, -1);
  auto add_end = [&](int32_t node, int32_t r) {
    if (t[node].last_end < 0) t[node].first_end = r;
    else next_end[t[node].last_end] = r;
    t[node].last_end = r;
  };
  auto add_child = [&](int32_t node, int32_t c) {
    t[c].prev_sibling = t[node].last_child;
    t[c].next_sibling = -1;
    if (t[node].last_child < 0) t[node].first_child = c;
    else t[t[node].last_child].next_sibling = c;
    t[node].last_child = c;
  };
  ChildMap& child_of = st.child_of;
  child_of.reset(max_nodes);
  // The previous request's path (its tree nodes from the root's child down): requests that share
  // a prefix usually come one after another, so a request first follows that path while it
  // matches whole labels (one memcmp per node, no lookup), and only looks children up below it.
  // The node it reaches is the one the lookups would find (same first page under the same node).
  std::vector<int32_t>& path = st.path;
  path.clear();
  // The sharing feature (lead_keys): the lowest request with a given first page id created the
  // root's child of that id, and every node on its path is labelled by its list (splits keep the
  // owner), so the nodes a request passes that the leader owns are a prefix of its path, and its
  // common pages with the leader end at the last of them (or inside it, where it splits it).
  int64_t lead_pages = 0;
  for (int32_t b = 0; b < batch; ++b) {
    int32_t cur = 0, pos = 0;
    const int32_t n = full[b];
    int32_t lead = -1, with_lead = 0;  // the root child's owner; common pages with it so far
    auto passed = [&](int32_t x) {     // b's path holds tree node x whole
      if (lead < 0) lead = t[x].owner;
      if (t[x].owner == lead) with_lead = t[x].end;
    };
    if (b > 0) {
      const int32_t* mine = indices + indptr[b];
      const int32_t* prev = indices + indptr[b - 1];
      for (int32_t x : path) {
        const int32_t e = t[x].end;
        if (e > n || std::memcmp(mine + pos, prev + pos, size_t(e - pos) * sizeof(int32_t)) != 0) break;
        cur = x;
        pos = e;
        passed(x);
      }
    }
    int32_t end_node = -1;
    while (true) {
      if (pos == n) {
        add_end(cur, b);
        end_node = cur;
        break;
      }
      const uint64_t key = child_key(cur, page(b, pos));
      const int32_t c = child_of.find(key);
      if (c < 0) {  // a new private tail
        const int32_t id = static_cast<int32_t>(t.size());
        t.emplace_back();
        t[id].parent = cur;
        t[id].owner = b;
        t[id].begin = pos;
        t[id].end = n;
        add_end(id, b);
        child_of.set(key, id);
        add_child(cur, id);
        end_node = id;
        break;
      }
      // Common length of b's pages from pos and c's label (the first page matches by the key).
      const int32_t label = t[c].end - t[c].begin;
      const int32_t lmax = std::min(label, n - pos);
      const int32_t* pa = indices + indptr[b] + pos;
      const int32_t* pb = indices + indptr[t[c].owner] + t[c].begin;
      int32_t l = lmax;
      if (std::memcmp(pa, pb, size_t(lmax) * sizeof(int32_t)) != 0) {
        l = 1;
        while (pa[l] == pb[l]) ++l;
      }
      if (l == label) {  // the whole label matches: descend
        cur = c;
        pos += l;
        passed(c);
        continue;
      }
      if (lead < 0) lead = t[c].owner;
      if (t[c].owner == lead) with_lead = pos + l;  // the split's common part is the leader's
      // Split c after l pages: mid takes the common part and c's place among cur's children; c
      // keeps the rest, as mid's only child.
      const int32_t mid = static_cast<int32_t>(t.size());
      t.emplace_back();
      RadixNode& m = t[mid];
      RadixNode& cc = t[c];
      m.parent = cur;
      m.owner = cc.owner;
      m.begin = cc.begin;
      m.end = cc.begin + l;
      m.prev_sibling = cc.prev_sibling;
      m.next_sibling = cc.next_sibling;
      if (m.prev_sibling >= 0) t[m.prev_sibling].next_sibling = mid;
      else t[cur].first_child = mid;
      if (m.next_sibling >= 0) t[m.next_sibling].prev_sibling = mid;
      else t[cur].last_child = mid;
      m.first_child = m.last_child = c;
      cc.parent = mid;
      cc.prev_sibling = cc.next_sibling = -1;
      cc.begin += l;
      child_of.set(key, mid);  // same first page as c had
      child_of.set(child_key(mid, page(cc.owner, cc.begin)), c);
      cur = mid;
      pos += l;
    }
    lead_pages += with_lead;  // 0 for a leader (it creates the root child) and a row of no full page
    path.clear();
    for (int32_t x = end_node; x != 0; x = t[x].parent) path.push_back(x);
    std::reverse(path.begin(), path.end());
  }

  if (lead_keys != nullptr) *lead_keys = lead_pages * page_size;

  // Pass 1, depth-first (iterative: a page-size-1 cache makes paths deep): the request order
  // (requests ending at a node before those below it, children in creation order) and each
  // tree node's range of it.
  const int32_t N = static_cast<int32_t>(t.size());
  std::vector<int32_t>& range_begin = st.range_begin;
  std::vector<int32_t>& range_end = st.range_end;
  range_begin.assign(N, 0);
  range_end.assign(N, 0);
  f.order.reserve(batch);
  std::vector<Frame>& stack = st.stack;
  stack.assign(1, {0, t[0].first_child, -1});
  for (int32_t r = t[0].first_end; r >= 0; r = next_end[r]) f.order.push_back(r);
  while (!stack.empty()) {
    Frame& fr = stack.back();
    if (fr.next_child >= 0) {
      const int32_t c = fr.next_child;
      fr.next_child = t[c].next_sibling;
      range_begin[c] = static_cast<int32_t>(f.order.size());
      for (int32_t r = t[c].first_end; r >= 0; r = next_end[r]) f.order.push_back(r);
      stack.push_back({c, t[c].first_child, -1});
      continue;
    }
    range_end[fr.node] = static_cast<int32_t>(f.order.size());
    stack.pop_back();
  }
  // Pass 2, preorder: forest nodes are the tree nodes (not the root) with >= 2 requests in
  // their range; a request's shared pages end where its deepest forest node ends.
  std::vector<int32_t>& shared_end = st.shared_end;
  shared_end.assign(N, 0);
  stack.assign(1, {0, t[0].first_child, -1});
  while (!stack.empty()) {
    Frame& fr = stack.back();
    if (fr.next_child < 0) {
      stack.pop_back();
      continue;
    }
    const int32_t c = fr.next_child;
    fr.next_child = t[c].next_sibling;
    int32_t forest_parent = fr.forest_parent;
    shared_end[c] = shared_end[fr.node];
    if (range_end[c] - range_begin[c] >= 2) {
      PrefixNode pn;
      pn.parent = fr.forest_parent;
      pn.page_begin = t[c].begin;
      pn.page_end = t[c].end;
      pn.req_begin = range_begin[c];
      pn.req_end = range_end[c];
      forest_parent = static_cast<int32_t>(f.nodes.size());
      f.nodes.push_back(pn);
      shared_end[c] = pn.page_end;
    }
    for (int32_t r = t[c].first_end; r >= 0; r = next_end[r]) f.shared_pages[r] = shared_end[c];
    stack.push_back({c, t[c].first_child, forest_parent});
  }
}

}  // namespace weft::plan
