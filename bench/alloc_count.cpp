// weft-bench: the process's count of C++ allocations (global operator new, which libweft's
// std::vectors and strings use; linked statically, so the library's calls are counted), for the
// plan rows' extra "plan_allocs": operator new calls per warm plan() (issue 19: a warm plan() is
// meant to allocate nothing). The CUDA runtime allocates with malloc and is not counted.
// Diagnostic: trace_allocs(n) records the call stacks of the next n allocations (raw return
// addresses, no allocation in the hook), print_alloc_traces() prints them as (object, offset)
// pairs for addr2line on the unstripped binary.
#include <dlfcn.h>
#include <execinfo.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "harness.h"

namespace {
std::atomic<uint64_t> g_news{0};
constexpr int kMaxTraces = 64, kFrames = 10;
void* g_trace[kMaxTraces][kFrames];
int g_trace_depth[kMaxTraces];
std::size_t g_trace_size[kMaxTraces];
std::atomic<int> g_traces_left{0};
int g_traced = 0;
void* counted(std::size_t n) {
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (g_traces_left.load(std::memory_order_relaxed) > 0 && g_traced < kMaxTraces) {
    g_traces_left.fetch_sub(1, std::memory_order_relaxed);
    g_trace_size[g_traced] = n;
    g_trace_depth[g_traced] = backtrace(g_trace[g_traced], kFrames);
    ++g_traced;
  }
  if (void* p = std::malloc(n != 0 ? n : 1)) return p;
  throw std::bad_alloc();
}
}  // namespace

namespace weft::bench {
uint64_t operator_news() { return g_news.load(std::memory_order_relaxed); }
void trace_allocs(int n) {
  void* warm[2];
  backtrace(warm, 2);  // loads the unwinder now (it allocates on first use)
  g_traced = 0;
  g_traces_left.store(n < kMaxTraces ? n : kMaxTraces);
}
void print_alloc_traces(const char* what) {
  g_traces_left.store(0);
  for (int t = 0; t < g_traced; ++t) {
    std::fprintf(stderr, "alloc-trace %s #%d size %zu:", what, t, g_trace_size[t]);
    for (int f = 1; f < g_trace_depth[t]; ++f) {
      Dl_info info{};
      if (dladdr(g_trace[t][f], &info) != 0 && info.dli_fname != nullptr)
        std::fprintf(stderr, " %s+0x%lx", info.dli_fname,
                     static_cast<unsigned long>(reinterpret_cast<uintptr_t>(g_trace[t][f]) -
                                                reinterpret_cast<uintptr_t>(info.dli_fbase)));
      else
        std::fprintf(stderr, " %p", g_trace[t][f]);
    }
    std::fprintf(stderr, "\n");
  }
  g_traced = 0;
}
}  // namespace weft::bench

void* operator new(std::size_t n) { return counted(n); }
void* operator new[](std::size_t n) { return counted(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
