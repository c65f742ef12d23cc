// Internal: device side of the decode timeline (decode/trace.h). WEFT_DECODE_TRACE_POINT(ev)
// records clock64() for thread 0 of the CTA; with the build option off it expands to nothing.
#pragma once
#include "decode/trace.h"

#if WEFT_DECODE_TRACE
namespace weft::decode {
// One record per CTA of the last launch. Defined here: kernels.cu is the only translation unit
// that includes this header (through the decode kernels), and trace_read() there copies it.
__device__ TraceRecord g_trace[kTraceMaxCtas];

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ uint32_t sm_id() {
  uint32_t v;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(v));
  return v;
}
__device__ __forceinline__ bool trace_thread() { return threadIdx.x == 0 && blockIdx.x < kTraceMaxCtas; }
}  // namespace weft::decode

// Thread 0's record; the macros below do nothing on other threads.
#define WEFT_DECODE_TRACE_REC ::weft::decode::g_trace[blockIdx.x]
#define WEFT_DECODE_TRACE_POINT(ev)                                                        \
  do {                                                                                     \
    if (::weft::decode::trace_thread()) WEFT_DECODE_TRACE_REC.clock[ev] = clock64();       \
  } while (0)
// Records the event once `value` has arrived: storing it makes thread 0 wait for the load.
#define WEFT_DECODE_TRACE_AFTER(value, ev)                                                 \
  do {                                                                                     \
    if (::weft::decode::trace_thread()) {                                                  \
      WEFT_DECODE_TRACE_REC.sink = (long long)(value);                                     \
      WEFT_DECODE_TRACE_REC.clock[ev] = clock64();                                         \
    }                                                                                      \
  } while (0)
#define WEFT_DECODE_TRACE_FIRST_ITEM_POINT(first, ev) \
  do {                                                \
    if (first) WEFT_DECODE_TRACE_POINT(ev);           \
  } while (0)
#define WEFT_DECODE_TRACE_ENTRY()                                                          \
  do {                                                                                     \
    if (::weft::decode::trace_thread()) {                                                  \
      WEFT_DECODE_TRACE_REC.global_entry_ns = ::weft::decode::global_timer_ns();           \
      WEFT_DECODE_TRACE_REC.clock[::weft::decode::kTraceEntry] = clock64();                \
      WEFT_DECODE_TRACE_REC.merged = 0;                                                    \
      WEFT_DECODE_TRACE_REC.smid = static_cast<int32_t>(::weft::decode::sm_id());          \
      WEFT_DECODE_TRACE_REC.items = 0;                                                     \
    }                                                                                      \
  } while (0)
#define WEFT_DECODE_TRACE_EXIT(n_items)                                                    \
  do {                                                                                     \
    if (::weft::decode::trace_thread()) {                                                  \
      WEFT_DECODE_TRACE_REC.clock[::weft::decode::kTraceExit] = clock64();                 \
      WEFT_DECODE_TRACE_REC.global_exit_ns = ::weft::decode::global_timer_ns();            \
      WEFT_DECODE_TRACE_REC.items = (n_items);                                             \
    }                                                                                      \
  } while (0)
#define WEFT_DECODE_TRACE_MERGED()                                                         \
  do {                                                                                     \
    if (::weft::decode::trace_thread()) WEFT_DECODE_TRACE_REC.merged = 1;                  \
  } while (0)
#else
#define WEFT_DECODE_TRACE_POINT(ev) do {} while (0)
#define WEFT_DECODE_TRACE_AFTER(value, ev) do {} while (0)
#define WEFT_DECODE_TRACE_FIRST_ITEM_POINT(first, ev) do {} while (0)
#define WEFT_DECODE_TRACE_ENTRY() do {} while (0)
#define WEFT_DECODE_TRACE_EXIT(n_items) do {} while (0)
#define WEFT_DECODE_TRACE_MERGED() do {} while (0)
#endif
