// Internal diagnostic: a per-CTA timeline of the last decode launch (build option
// WEFT_DECODE_TRACE, off by default; the default build records nothing and costs nothing).
// Thread 0 of every CTA records clock64() at fixed points of its FIRST item and %globaltimer at
// entry and exit. weft-bench reads it after a launch to show where a call's time goes (start-up
// chain, KV stream, epilogue, merge chain, spread of CTA end times).
#pragma once
#include "common/rtc_compat.h"
#if !WEFT_RTC
#include <vector>
#endif

namespace weft::decode {

// Points of a CTA's timeline (clock64, SM cycles), in the order they happen.
enum TraceEvent : int {
  kTraceEntry = 0,     // first instruction
  kTraceRecord,        // the CTA's record (item range, first item) landed
  kTraceIndptr,        // indptr[request] of the first item landed
  kTracePage0,         // lane 0's first page id landed
  kTraceIssued,        // warp 0 issued its first copies (its first page ids landed)
  kTraceItemReady,     // first item's Q landed, CTA barrier passed (metadata + first copies issued)
  kTraceFirstTile,     // warp 0: its first KV tile landed
  kTraceLoopEnd,       // warp 0: left the KV loop
  kTraceStatesStored,  // every warp's softmax state in shared memory (CTA barrier)
  kTraceItemStored,    // output or partial state stored (thread 0's share)
  kTraceMergeDecided,  // slot counted, merge decision known: of the CTA's LAST split item (the
                       // first item's kTraceItemStored when the CTA ran no split item)
  kTraceExit,          // after the last item (and its merge, if this CTA merged)
  kTraceEvents
};
constexpr int kTraceMaxCtas = 2048;

struct TraceRecord {
  int64_t clock[kTraceEvents];  // clock64 of each event (SM-local counter)
  uint64_t global_entry_ns;     // %globaltimer at entry and exit (device-wide, ns)
  uint64_t global_exit_ns;
  int32_t merged;               // 1 when this CTA merged a split tile
  int32_t items;                // items this CTA ran
  int32_t smid;                 // the SM the CTA ran on
  int32_t pad;
  int64_t sink;                 // values stored so that a point waits for them (WEFT_DECODE_TRACE_AFTER)
};

#if !WEFT_RTC  // host only (NVRTC: common/rtc_compat.h)
// Whether the library was built with WEFT_DECODE_TRACE.
bool trace_compiled();
// The records of CTAs 0 .. ctas-1 from the last decode launch (synchronous copy; call after the
// launch completed). Empty when trace_compiled() is false.
std::vector<TraceRecord> trace_read(int ctas);
#endif  // !WEFT_RTC

}  // namespace weft::decode
