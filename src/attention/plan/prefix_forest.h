// Prefix forest of a paged batch (pure C++, no CUDA): requests whose page lists start with the
// same page ids share those pages' keys. Built in one pass over the page table (a trie over
// page ids, then chains without a branch compressed into one node), so its cost is linear in
// the number of pages.
//
// Only FULL pages are shared: a request's last page, when partially filled, is always private
// (another request may have written more tokens into the same page id, and those keys are not
// this request's). A node therefore covers the same key positions [page_begin * page_size,
// page_end * page_size) in every sharer's sequence.
//
// Vocabulary (shared with the pack planner, pack_plan.h, and PAT):
//   node     a run of page positions [page_begin, page_end) that the same >= 2 requests hold with
//            identical page ids; its sharers are order[req_begin .. req_end).
//   order    the requests in depth-first order of the trie: every node's sharers are a
//            contiguous range of it, children's ranges nest inside their parent's.
//   shared_pages[b]  the full pages of request b covered by nodes (its private suffix starts
//            there: keys [shared_pages[b] * page_size, kv_len[b])).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

namespace weft::plan {

struct PrefixNode {
  int32_t parent = -1;                    // index in PrefixForest::nodes, -1 for a root
  int32_t page_begin = 0, page_end = 0;   // page positions of every sharer's list
  int32_t req_begin = 0, req_end = 0;     // sharers: order[req_begin .. req_end), >= 2 of them
};

struct PrefixForest {
  std::vector<PrefixNode> nodes;      // preorder: a parent before its children
  std::vector<int32_t> order;         // every request once, depth-first
  std::vector<int32_t> shared_pages;  // per request
  int32_t num_requests() const { return static_cast<int32_t>(shared_pages.size()); }
};

// indptr[batch + 1], indices[indptr[batch]]: the page table's host arrays; kv_len[batch]: each
// request's length (its full pages are kv_len / page_size of its list). Throws weft::Error on
// inconsistent input (a list shorter than its length needs, negative lengths).
PrefixForest build_prefix_forest(const int32_t* indptr, const int32_t* indices, const int32_t* kv_len,
                                 int32_t batch, int32_t page_size);

// The same forest built into `out` by a builder that keeps its buffers between builds (a warm
// build allocates nothing; PackPlanner keeps one).
class PrefixForestBuilder {
 public:
  PrefixForestBuilder();
  ~PrefixForestBuilder();
  PrefixForestBuilder(const PrefixForestBuilder&) = delete;
  PrefixForestBuilder& operator=(const PrefixForestBuilder&) = delete;
  // lead_keys (optional): also the decode router's sharing feature of the same table
  // (decode::shared_prefix_keys: per request with a full page, page_size x its common full pages
  // with the lowest request of the same first page id), read off the insertions below instead of
  // a second walk over the ids (PackPlanner::prepare).
  void build(const int32_t* indptr, const int32_t* indices, const int32_t* kv_len, int32_t batch,
             int32_t page_size, PrefixForest& out, int64_t* lead_keys = nullptr);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace weft::plan
