// Diagnostic only (CMake -DWEFT_PLAN_PHASES=ON, off by default; no environment variable): the host
// time of a decode plan()'s phases. The planner marks the END of each phase with
// WEFT_PLAN_PHASE(kPh...): the time since the previous mark (or since plan_phases_begin()) is added
// to that phase's bucket of this thread's clock. The caller (weft-serve-sim, weft-plan-bench) calls
// plan_phases_begin() right before plan() and plan_phases_end() right after it (the time past the
// last mark goes to kPhTail), then reads plan_phase_clock(). Nested plans (the kAuto wrapper's
// twin, the prefix-sharing plan behind the router) add to the same buckets. Without the option the
// marks compile to nothing; the compile definition is set only on the sources that mark
// (src/decode/*.cpp) and on the tools that read the clock (CMakeLists.txt, bench/CMakeLists.txt).
#pragma once
#include <chrono>
#include <cstdint>

namespace weft::diag {

enum PlanPhase : int {
  kPhRows,         // paged::check_block_table_rows (plan(BlockTable))
  kPhSharedKeys,   // kAuto with share_prefixes: decode::shared_prefix_keys of the rows
  kPhRoute,        // kAuto: choose_route (the memo or the vote)
  kPhRowsView,     // prefix sharing from a block table: the row offsets the forest reads
  kPhChecks,       // plan_lengths: the argument checks and the lengths' sign check
  kPhShape,        // balanced: batch_shape + plan_tile_rows + balance_config
  kPhPrepare,      // plan_decode: Planner::prepare (tiles, units, bound L0)
  kPhChooseSplit,  // plan_decode: Planner::choose_split (split or not at L0)
  kPhSearch,       // plan_decode: the bound search over coarser chunks
  kPhBuild,        // plan_decode: Planner::build (the deal, the items, the merges)
  kPhRecords,      // balanced: the image size (launch_records_used)
  kPhPack,         // prefix sharing: PackPlanner::plan (forest, packs, schedule) and its re-plans
  kPhShareCost,    // prefix sharing: the packs counted, the cost model's fallback decision
  kPhAcquire,      // StagingRing::acquire (cudaEventQuery / cudaEventSynchronize)
  kPhSerialize,    // WorkspaceLayout / WorkPlanLayout::serialize into the staging slot
  kPhBook,         // the plan swap, path choice, plan info (balanced); kv_len copy (sharing)
  kPhCopy,         // cudaMemcpyAsync of the staging slot into the workspace
  kPhRecord,       // StagingRing::enqueued (cudaEventRecord)
  kPhTail,         // from the last mark to plan()'s return (plan_phases_end)
  kPhCount
};

inline const char* plan_phase_name(int p) {
  static const char* const names[] = {"rows",    "shared_keys", "route",      "rows_view", "checks",
                                      "shape",   "prepare",     "choose_split", "search",  "build",
                                      "records", "pack",        "share_cost", "acquire",   "serialize",
                                      "book",    "copy",        "record",     "tail"};
  static_assert(sizeof(names) / sizeof(names[0]) == kPhCount, "a name per phase");
  return p >= 0 && p < kPhCount ? names[p] : "?";
}

struct PlanPhaseClock {
  int64_t last_ns = 0;
  int64_t ns[kPhCount] = {};
};

inline PlanPhaseClock& plan_phase_clock() {
  static thread_local PlanPhaseClock c;
  return c;
}

inline int64_t plan_phase_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline void plan_phases_begin() {
  PlanPhaseClock& c = plan_phase_clock();
  for (int64_t& n : c.ns) n = 0;
  c.last_ns = plan_phase_now_ns();
}

inline void plan_phase_mark(PlanPhase p) {
  PlanPhaseClock& c = plan_phase_clock();
  const int64_t t = plan_phase_now_ns();
  c.ns[p] += t - c.last_ns;
  c.last_ns = t;
}

inline void plan_phases_end() { plan_phase_mark(kPhTail); }

}  // namespace weft::diag

#if defined(WEFT_PLAN_PHASES)
#define WEFT_PLAN_PHASE(p) ::weft::diag::plan_phase_mark(::weft::diag::p)
#else
#define WEFT_PLAN_PHASE(p) ((void)0)
#endif
