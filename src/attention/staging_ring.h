// The pinned staging slots a decode or prefill plan() serializes into and copies from (issues 19 /
// 22; one helper for both wrappers, in the shared attention component). With
// one staging buffer, a plan() called while the previous plan's copy was still queued (plans back
// to back, the stream behind) waited for that copy on the host. With S slots it writes another
// slot instead: a host wait on the GPU only when the copies from every slot are still queued.
// When the stream has drained (the usual serving step), plan() reuses the same slot every time,
// as with one buffer: its lines and pages are the ones the previous plan wrote, and the driver is
// asked once per plan (cudaEventQuery on that slot's event, the cost of the cudaEventSynchronize
// it replaces: 0.25-0.47 us warm on the H100 host, bench/results/h100_dplan_check_312808a.txt).
// (Rotating through the slots on every plan instead, one query per ring, measured slower in the
// serving harness, where a plan() meets cold caches: same file.)
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

namespace weft::plan {

// Which slot a plan writes and what is known about each slot's last copy. Pure bookkeeping, no
// CUDA (host-tested: tests/host/attention/staging_ring_test.cpp); streams are opaque handles.
class StagingSlots {
 public:
  explicit StagingSlots(int32_t slots = 1);  // slots < 1: one slot
  int32_t slots() const { return static_cast<int32_t>(pending_.size()); }
  // The slot of the last copy enqueued, -1 before the first.
  int32_t newest() const { return newest_; }
  // Whether slot s's last copy may still be queued (not known to have landed).
  bool pending(int32_t s) const { return pending_[s]; }
  // A slot other than the newest whose copy is known to have landed (round robin after the
  // newest), else -1.
  int32_t free_other() const;
  // The pending slot with the oldest copy other than the newest (its copy is the most likely to
  // have landed), else -1.
  int32_t oldest_other() const;
  // Slot s's copy has landed, and with it every older copy on the same stream (a handle that
  // names one stream whatever the thread).
  void landed_through(int32_t s);
  // A copy from slot s was enqueued on `stream` (its event recorded after it). one_stream: the
  // handle names the same stream from every thread (false for cudaStreamPerThread, whose copies
  // then only ever free their own slot).
  void enqueued(int32_t s, const void* stream, bool one_stream = true);

  // The slot the next plan writes, once its last copy has landed (StagingRing::acquire with its
  // CUDA calls passed in: query(s) -> whether slot s's copy has landed, wait(s) -> blocks until it
  // has): the newest slot when its copy has landed (one query), else another slot known or found
  // (one more query) to have landed, else a wait for the oldest queued copy.
  // rotate: a slot other than the newest that is known to have landed first, without asking the
  // driver (a drained stream then costs one query per S plans instead of one per plan, and the
  // plans take the slots in turn: for small images only, heuristics::kRotateStagingMaxBytes).
  template <class Query, class Wait>
  int32_t acquire(Query&& query, Wait&& wait, bool rotate = false) {
    const int32_t n = newest_;
    if (n < 0) return 0;
    if (!pending_[n]) return n;
    if (rotate) {
      const int32_t f = free_other();
      if (f >= 0) return f;
    }
    if (query(n)) {  // the stream drained: the same slot again
      landed_through(n);
      return n;
    }
    const int32_t f = free_other();
    if (f >= 0) return f;
    const int32_t o = oldest_other();
    if (o >= 0 && query(o)) {
      landed_through(o);
      return o;
    }
    const int32_t w = o >= 0 ? o : n;  // every slot's copy queued (or one slot): the only wait
    wait(w);
    landed_through(w);
    return w;
  }

 private:
  std::vector<bool> pending_, one_stream_;
  std::vector<const void*> stream_;
  std::vector<uint64_t> seq_of_;  // sequence number of each slot's last copy
  uint64_t seq_ = 0;              // sequence number of the next copy
  int32_t newest_ = -1;
};

// The slots themselves: one pinned allocation (slots x slot_bytes, zeroed) and an event per slot.
class StagingRing {
 public:
  StagingRing() = default;
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;
  ~StagingRing();
  // Pinned memory and events (weft::Error("CUDA") on failure). Once, with slots >= 1 and
  // slot_bytes >= 1 (their product within size_t): weft::Error("staging") before any CUDA call
  // otherwise.
  void allocate(std::size_t slot_bytes, int32_t slots);
  int32_t slots() const { return book_.slots(); }
  std::size_t slot_bytes() const { return slot_bytes_; }
  // A slot whose previous copy has landed: the newest slot when its copy has (one cudaEventQuery),
  // else another slot known or found (cudaEventQuery) to have landed, else a host wait
  // (cudaEventSynchronize) for the oldest queued copy: only when every slot's copy is queued.
  // rotate: StagingSlots::acquire's (a known-free other slot before a query).
  int32_t acquire(bool rotate = false);
  unsigned char* slot(int32_t s) const { return base_ + std::size_t(s) * slot_bytes_; }
  // After the copy from slot s (the acquired one) is enqueued on `stream`: the slot's event.
  void enqueued(int32_t s, cudaStream_t stream);

 private:
  bool query(int32_t s);  // cudaEventQuery: landed (true) or still queued (false); throws on errors
  unsigned char* base_ = nullptr;
  std::size_t slot_bytes_ = 0;
  std::vector<cudaEvent_t> events_;
  StagingSlots book_;
};

}  // namespace weft::plan
