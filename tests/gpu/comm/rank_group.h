// Test helper: one weft::Communicator per GPU in this process, one thread per rank.
#pragma once
#include <cuda_runtime_api.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "weft/comm.h"

namespace weft::test {

inline int visible_gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

class RankGroup {
 public:
  RankGroup(std::vector<int> devices, const CommOptions& opt) : devices_(std::move(devices)) {
    const int n = static_cast<int>(devices_.size());
    comms_.resize(n);
    streams_.resize(n);
    const ncclUniqueId id = Communicator::new_unique_id();
    parallel([&](int r) {  // collective: all ranks construct concurrently
      comms_[r] = std::make_unique<Communicator>(id, r, n, opt);
      if (cudaStreamCreateWithFlags(&streams_[r], cudaStreamNonBlocking) != cudaSuccess)
        throw std::runtime_error("cudaStreamCreate failed");
    });
  }
  ~RankGroup() {
    try {
      parallel([&](int r) {
        cudaStreamSynchronize(streams_[r]);
        cudaStreamDestroy(streams_[r]);
        comms_[r].reset();  // collective on the LSA path
      });
    } catch (...) {
    }
  }
  RankGroup(const RankGroup&) = delete;
  RankGroup& operator=(const RankGroup&) = delete;

  int size() const { return static_cast<int>(devices_.size()); }
  int device(int r) const { return devices_[r]; }
  Communicator& comm(int r) { return *comms_[r]; }
  cudaStream_t stream(int r) const { return streams_[r]; }

  // Runs f(rank) on one thread per rank (device set), joins, rethrows the first failure with
  // every rank's message. f must not return early on some ranks before a collective call.
  template <class F>
  void parallel(F&& f) {
    const int n = size();
    std::vector<std::string> err(n);
    std::vector<std::thread> th;
    for (int r = 0; r < n; ++r) {
      th.emplace_back([&, r] {
        try {
          if (cudaSetDevice(devices_[r]) != cudaSuccess) throw std::runtime_error("cudaSetDevice failed");
          f(r);
        } catch (const std::exception& e) {
          err[r] = e.what();
        } catch (...) {
          err[r] = "unknown exception";
        }
      });
    }
    for (auto& t : th) t.join();
    std::string all;
    for (int r = 0; r < n; ++r)
      if (!err[r].empty()) all += "[rank " + std::to_string(r) + "] " + err[r] + "\n";
    if (!all.empty()) throw std::runtime_error(all);
  }

 private:
  std::vector<int> devices_;
  std::vector<std::unique_ptr<Communicator>> comms_;
  std::vector<cudaStream_t> streams_;
};

}  // namespace weft::test
