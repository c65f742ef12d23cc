// std::thread fan-out for the references (see parallel.h).
#include "reference/parallel.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace weft::ref {
namespace {

std::atomic<int> g_override{0};

int env_threads() {
  const char* s = std::getenv("WEFT_REF_THREADS");
  if (s == nullptr || *s == '\0') return 0;
  char* end = nullptr;
  const long n = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || n <= 0) return 0;  // malformed: ignored
  return static_cast<int>(std::min<long>(n, 4096));
}

}  // namespace

int num_threads() {
  if (const int o = g_override.load(std::memory_order_relaxed); o > 0) return o;
  if (const int e = env_threads(); e > 0) return e;
  return std::max(1u, std::thread::hardware_concurrency());
}

void set_num_threads(int n) { g_override.store(n > 0 ? n : 0, std::memory_order_relaxed); }

void parallel_for(int64_t n_tasks, const std::function<void(int64_t)>& fn) {
  if (n_tasks <= 0) return;
  const int64_t n_threads = std::min<int64_t>(num_threads(), n_tasks);
  if (n_threads <= 1) {
    for (int64_t t = 0; t < n_tasks; ++t) fn(t);
    return;
  }
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mu;
  auto worker = [&] {
    for (;;) {
      if (failed.load(std::memory_order_relaxed)) return;
      const int64_t t = next.fetch_add(1, std::memory_order_relaxed);
      if (t >= n_tasks) return;
      try {
        fn(t);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!error) error = std::current_exception();
        failed.store(true, std::memory_order_relaxed);
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(n_threads - 1);
  for (int64_t n = 1; n < n_threads; ++n) {
    try {
      pool.emplace_back(worker);
    } catch (...) {  // no more threads available: the ones running (and this one) take all tasks
      break;
    }
  }
  worker();
  for (std::thread& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace weft::ref
