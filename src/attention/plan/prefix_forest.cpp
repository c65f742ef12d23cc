// Prefix forest: a radix tree over the requests' full-page lists. Each edge is labelled by a
// range of one request's page list (its owner), so a page is compared once when a request is
// inserted and never stored twice: linear in the number of pages, with one hash lookup per
// tree node visited (child by first page id) instead of one per page.
#include "attention/plan/prefix_forest.h"

#include <algorithm>
#include <string>
#include <unordered_map>

#include "weft/error.h"

namespace weft::plan {

namespace {

struct RadixNode {
  int32_t parent = -1;
  int32_t owner = -1;            // request whose list labels the edge into this node
  int32_t begin = 0, end = 0;    // label: owner's page positions [begin, end) (= depth range)
  std::vector<int32_t> children; // creation order (deterministic DFS)
  std::vector<int32_t> ends;     // requests whose full pages end exactly here, input order
};

uint64_t child_key(int32_t node, int32_t page) {
  return (uint64_t(uint32_t(node)) << 32) | uint32_t(page);
}

}  // namespace

PrefixForest build_prefix_forest(const int32_t* indptr, const int32_t* indices, const int32_t* kv_len,
                                  int32_t batch, int32_t page_size) {
  WEFT_CHECK_ARG(batch >= 0, "batch", "must be >= 0, got " << batch);
  WEFT_CHECK_ARG(page_size >= 1, "page_size", "must be >= 1, got " << page_size);
  PrefixForest f;
  f.shared_pages.assign(batch, 0);
  if (batch == 0) return f;
  WEFT_CHECK_ARG(indptr != nullptr && kv_len != nullptr, "indptr", "host arrays required for batch " << batch);
  std::vector<int32_t> full(batch);
  for (int32_t b = 0; b < batch; ++b) {
    WEFT_CHECK_ARG(kv_len[b] >= 0, "kv_len", "entry " << b << " is negative: " << kv_len[b]);
    const int64_t pages = int64_t(indptr[b + 1]) - indptr[b];
    full[b] = kv_len[b] / page_size;
    WEFT_CHECK_ARG(pages >= (int64_t(kv_len[b]) + page_size - 1) / page_size, "indptr",
                   "request " << b << " has " << pages << " pages for " << kv_len[b] << " keys");
  }
  auto page = [&](int32_t req, int32_t pos) { return indices[indptr[req] + pos]; };

  std::vector<RadixNode> t(1);  // t[0]: the root (empty label)
  std::unordered_map<uint64_t, int32_t> child_of;  // (node, first page id of the child's label)
  child_of.reserve(static_cast<size_t>(batch) * 2);
  for (int32_t b = 0; b < batch; ++b) {
    int32_t cur = 0, pos = 0;
    const int32_t n = full[b];
    while (true) {
      if (pos == n) {
        t[cur].ends.push_back(b);
        break;
      }
      const auto it = child_of.find(child_key(cur, page(b, pos)));
      if (it == child_of.end()) {  // a new private tail
        RadixNode leaf;
        leaf.parent = cur;
        leaf.owner = b;
        leaf.begin = pos;
        leaf.end = n;
        leaf.ends.push_back(b);
        const int32_t id = static_cast<int32_t>(t.size());
        child_of.emplace(child_key(cur, page(b, pos)), id);
        t[cur].children.push_back(id);
        t.push_back(std::move(leaf));
        break;
      }
      const int32_t c = it->second;
      const RadixNode& cn = t[c];
      int32_t l = 0;  // common length of b's pages from pos and c's label
      const int32_t lmax = std::min(cn.end - cn.begin, n - pos);
      const int32_t* pa = indices + indptr[b] + pos;
      const int32_t* pb = indices + indptr[cn.owner] + cn.begin;
      while (l < lmax && pa[l] == pb[l]) ++l;
      if (l == cn.end - cn.begin) {  // the whole label matches: descend
        cur = c;
        pos += l;
        continue;
      }
      // Split c after l pages: m takes the common part, c keeps the rest below m.
      RadixNode m;
      m.parent = cur;
      m.owner = cn.owner;
      m.begin = cn.begin;
      m.end = cn.begin + l;
      const int32_t mid = static_cast<int32_t>(t.size());
      m.children.push_back(c);
      t.push_back(std::move(m));
      RadixNode& cc = t[c];
      cc.parent = mid;
      cc.begin += l;
      child_of[child_key(cur, page(b, pos))] = mid;  // same first page as c had
      std::replace(t[cur].children.begin(), t[cur].children.end(), c, mid);
      child_of.emplace(child_key(mid, page(cc.owner, cc.begin)), c);
      cur = mid;
      pos += l;
    }
  }

  // Pass 1, depth-first (iterative: a page-size-1 cache makes paths deep): the request order
  // (requests ending at a node before those below it, children in creation order) and each
  // tree node's range of it.
  const int32_t N = static_cast<int32_t>(t.size());
  std::vector<int32_t> range_begin(N, 0), range_end(N, 0);
  f.order.reserve(batch);
  struct Frame {
    int32_t node, next_child, forest_parent;
  };
  std::vector<Frame> stack{{0, 0, -1}};
  for (int32_t r : t[0].ends) f.order.push_back(r);
  while (!stack.empty()) {
    Frame& fr = stack.back();
    const RadixNode& u = t[fr.node];
    if (fr.next_child < static_cast<int32_t>(u.children.size())) {
      const int32_t c = u.children[fr.next_child++];
      range_begin[c] = static_cast<int32_t>(f.order.size());
      for (int32_t r : t[c].ends) f.order.push_back(r);
      stack.push_back({c, 0, -1});
      continue;
    }
    range_end[fr.node] = static_cast<int32_t>(f.order.size());
    stack.pop_back();
  }
  // Pass 2, preorder: forest nodes are the tree nodes (not the root) with >= 2 requests in
  // their range; a request's shared pages end where its deepest forest node ends.
  std::vector<int32_t> shared_end(N, 0);
  stack.assign(1, {0, 0, -1});
  while (!stack.empty()) {
    Frame& fr = stack.back();
    const RadixNode& u = t[fr.node];
    if (fr.next_child >= static_cast<int32_t>(u.children.size())) {
      stack.pop_back();
      continue;
    }
    const int32_t c = u.children[fr.next_child++];
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
    for (int32_t r : t[c].ends) f.shared_pages[r] = shared_end[c];
    stack.push_back({c, 0, forest_parent});
  }
  return f;
}

}  // namespace weft::plan
