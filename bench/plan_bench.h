// weft-plan-bench's timing vocabulary, shared by its case files (plan_bench.cpp: main, the decode,
// prefill, pack and pat-shape cases, the copy rows; plan_bench_route.cpp: the router's rows).
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

namespace weft::plan_bench {

using Clock = std::chrono::steady_clock;

extern double g_min_ms;  // time budget per measured column (--min-ms)
// --cold MB: before every timed call, write MB MiB of an unrelated buffer (not timed), so the call
// finds its planner state and staging image evicted from the CPU caches, as a serving loop does
// between two steps' plan() (the harness runs other wrappers and kernels in between).
extern std::vector<unsigned char> g_cold_buf;
extern volatile int32_t g_sink;  // keeps results observable

inline void evict_caches() {
  for (size_t i = 0; i < g_cold_buf.size(); i += 64) g_cold_buf[i] = static_cast<unsigned char>(g_cold_buf[i] + 1);
}

struct Stats {
  double median = 0, p10 = 0, p90 = 0;
  int calls = 0;
};

// Median of many warm calls of f (each timed alone; an f that returns a double times itself, in us).
template <class F>
Stats time_calls(F&& f) {
  for (int i = 0; i < 20; ++i) f();  // warm: buffers grown, caches filled
  std::vector<double> us;
  const auto start = Clock::now();
  while (us.size() < 20000 &&
         (us.size() < 50 || std::chrono::duration<double, std::milli>(Clock::now() - start).count() < g_min_ms)) {
    if (!g_cold_buf.empty()) evict_caches();
    if constexpr (std::is_same_v<decltype(f()), double>) {
      us.push_back(f());
    } else {
      const auto t0 = Clock::now();
      f();
      const auto t1 = Clock::now();
      us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
  }
  std::sort(us.begin(), us.end());
  Stats s;
  s.calls = static_cast<int>(us.size());
  s.median = us[us.size() / 2];
  s.p10 = us[us.size() / 10];
  s.p90 = us[us.size() * 9 / 10];
  return s;
}

inline void print_row(const std::string& name, const std::string& what, const Stats& ref, const Stats& neu,
                      const char* note) {
  std::printf("%-40s %-16s %9.2f %9.2f %8.1fx   [%7.2f .. %7.2f]  %s\n", name.c_str(), what.c_str(), ref.median,
              neu.median, neu.median > 0 ? ref.median / neu.median : 0.0, neu.p10, neu.p90, note);
  std::fflush(stdout);
}

// route/ rows (plan_bench_route.cpp): the router's host parts with the table at router_path.
void route_cases(const std::string& filter, const std::string& router_path);

}  // namespace weft::plan_bench
