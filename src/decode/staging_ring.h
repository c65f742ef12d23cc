// The pinned staging slots a decode plan() serializes into and copies from (issues 19 / 22: fewer
// CUDA runtime calls per plan). Before this, every plan() called cudaEventSynchronize on the one
// staging buffer's event (0.28-0.47 us warm, ~1 us with cold caches on the lent H100 host, even
// when the copy had long landed). With S slots used round robin, slot s is rewritten S plans after
// its copy was enqueued; one cudaEventQuery on the NEWEST copy's event (same stream: the stream is
// FIFO, so it completes after every older copy) frees every slot at once, so a plan() asks the
// driver about once per S calls when the stream drains between steps, and back-to-back plans wait
// for the copy of S plans ago instead of the previous one.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

namespace weft::decode {

// Which slot the next plan writes and which copies it must know have landed. Pure bookkeeping,
// no CUDA (host-tested: tests/host/decode/staging_ring_test.cpp); streams are opaque handles.
class StagingSlots {
 public:
  explicit StagingSlots(int32_t slots = 1);
  int32_t slots() const { return static_cast<int32_t>(pending_.size()); }
  // The slot the next plan writes.
  int32_t next() const { return static_cast<int32_t>(seq_ % pending_.size()); }
  // Whether next()'s previous copy may still be queued (unknown to have landed).
  bool next_pending() const { return pending_[next()]; }
  // The slot of the newest pending copy when its completion implies next()'s (same stream, a
  // handle that names one stream whatever the thread, and not next() itself); else -1.
  int32_t newest_covering() const;
  // Every pending copy on the stream of `slot`'s copy, enqueued no later than it, has landed.
  void landed_through(int32_t slot);
  // next()'s previous copy has landed.
  void landed_next() { pending_[next()] = false; }
  // A copy from next() was enqueued on `stream` (its event recorded after it): next() advances.
  // one_stream: the handle names the same stream from every thread (false for
  // cudaStreamPerThread, whose copies then only ever free their own slot).
  void enqueued(const void* stream, bool one_stream = true);

 private:
  std::vector<bool> pending_, one_stream_;
  std::vector<const void*> stream_;
  std::vector<uint64_t> seq_of_;  // plan sequence number of each slot's last copy
  uint64_t seq_ = 0;              // sequence number of the next plan
};

// The slots themselves: one pinned allocation (slots x slot_bytes, zeroed) and an event per slot.
class StagingRing {
 public:
  StagingRing() = default;
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;
  ~StagingRing();
  // Pinned memory and events (weft::Error("CUDA") on failure; the ring stays empty then).
  void allocate(std::size_t slot_bytes, int32_t slots);
  int32_t slots() const { return book_.slots(); }
  std::size_t slot_bytes() const { return slot_bytes_; }
  // The slot the next plan writes, once its previous copy has landed: no CUDA call when that is
  // already known, else one cudaEventQuery on the newest copy's event (which frees every older
  // slot of its stream), and cudaEventSynchronize on the slot's own event only when that copy may
  // still be queued (a host wait on the GPU only then).
  int32_t acquire();
  unsigned char* slot(int32_t s) const { return base_ + std::size_t(s) * slot_bytes_; }
  // After the copy from slot s (the acquired one) is enqueued on `stream`: the slot's event.
  void enqueued(int32_t s, cudaStream_t stream);

 private:
  unsigned char* base_ = nullptr;
  std::size_t slot_bytes_ = 0;
  std::vector<cudaEvent_t> events_;
  StagingSlots book_;
};

}  // namespace weft::decode
