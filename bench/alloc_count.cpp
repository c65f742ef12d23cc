// weft-bench: the process's count of C++ allocations (global operator new, which libweft's
// std::vectors and strings use; linked statically, so the library's calls are counted), for the
// plan rows' extra "plan_allocs": operator new calls per warm plan() (issue 19: a warm plan() is
// meant to allocate nothing). The CUDA runtime allocates with malloc and is not counted.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "harness.h"

namespace {
std::atomic<uint64_t> g_news{0};
void* counted(std::size_t n) {
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n != 0 ? n : 1)) return p;
  throw std::bad_alloc();
}
}  // namespace

namespace weft::bench {
uint64_t operator_news() { return g_news.load(std::memory_order_relaxed); }
}  // namespace weft::bench

void* operator new(std::size_t n) { return counted(n); }
void* operator new[](std::size_t n) { return counted(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
