// Prefix forest from EXPLICIT cascade levels (pure C++, no CUDA): the caller states the sharing,
// as FlashInfer's multi-level cascade wrapper takes it, instead of build_prefix_forest finding it
// in the page ids. The result is the same kind of forest, so make_pack_plan turns it into the
// same kind of work plan.
//
// Level l splits the batch into consecutive groups of requests (req_indptr over requests, from 0
// to batch); group g shares num_pages[g] pages, which are the next pages of each member's page
// list after the pages of the levels above (every member of a group is in the same groups above,
// so they start at the same page position). A level's groups nest in the previous level's (every
// group boundary above is a boundary below). Groups of one request, or of no pages, are private:
// no node. The stated pages must hold the same page ids in every member's list and be full pages
// of every member (kv_len >= the pages' end x page_size): otherwise weft::Error naming "levels".
#pragma once
#include <cstdint>

#include "attention/plan/prefix_forest.h"

namespace weft::plan {

struct CascadeLevelSpec {
  const int32_t* req_indptr = nullptr;  // num_groups + 1 entries, 0 .. batch, non-decreasing
  const int32_t* num_pages = nullptr;   // num_groups entries, >= 0
  int32_t num_groups = 0;
};

// Nodes in level order (a parent before its children), order = the identity.
PrefixForest make_cascade_forest(const CascadeLevelSpec* levels, int32_t num_levels, const int32_t* indptr,
                                 const int32_t* indices, const int32_t* kv_len, int32_t batch, int32_t page_size);

}  // namespace weft::plan
