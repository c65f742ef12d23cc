// Helpers of the multi-GPU bench groups (one thread per GPU inside this process): comm
// (bench/cases_comm.cu) and tp_world (bench/cases_tp_world.cu).
#pragma once
#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <vector>

namespace weft::bench {

// All rank threads meet here (C++17 stand-in for std::barrier; reusable, generation-counted).
class HostBarrier {
 public:
  explicit HostBarrier(int n) : n_(n) {}
  void wait() {
    std::unique_lock<std::mutex> l(m_);
    const int gen = gen_;
    if (++count_ == n_) {
      count_ = 0;
      ++gen_;
      cv_.notify_all();
    } else {
      cv_.wait(l, [&] { return gen != gen_; });
    }
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int n_, count_ = 0, gen_ = 0;
};

// Upper median (v[n / 2] of the sorted samples); 0 for none.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace weft::bench
