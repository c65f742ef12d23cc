#include "attention/staging_ring.h"

#include <cstdint>
#include <cstring>

#include "common/cuda_check.h"

namespace weft::plan {

StagingSlots::StagingSlots(int32_t slots)
    : pending_(std::size_t(slots < 1 ? 1 : slots), false),
      one_stream_(pending_.size(), false),
      stream_(pending_.size(), nullptr),
      seq_of_(pending_.size(), 0) {}

int32_t StagingSlots::free_other() const {
  const int32_t S = slots();
  const int32_t n = newest_ < 0 ? 0 : newest_;
  for (int32_t k = 1; k < S; ++k)
    if (!pending_[(n + k) % S]) return (n + k) % S;
  return -1;
}

int32_t StagingSlots::oldest_other() const {
  int32_t best = -1;
  for (int32_t s = 0; s < slots(); ++s)
    if (s != newest_ && pending_[s] && (best < 0 || seq_of_[s] < seq_of_[best])) best = s;
  return best;
}

void StagingSlots::landed_through(int32_t slot) {
  for (std::size_t k = 0; k < pending_.size(); ++k)
    if (pending_[k] && one_stream_[k] && one_stream_[slot] && stream_[k] == stream_[slot] &&
        seq_of_[k] <= seq_of_[slot])
      pending_[k] = false;
  pending_[slot] = false;
}

void StagingSlots::enqueued(int32_t s, const void* stream, bool one_stream) {
  pending_[s] = true;
  one_stream_[s] = one_stream;
  stream_[s] = stream;
  seq_of_[s] = seq_++;
  newest_ = s;
}

StagingRing::~StagingRing() {
  for (cudaEvent_t e : events_) {
    cudaEventSynchronize(e);  // a pending copy still reads its slot
    cudaEventDestroy(e);
  }
  if (base_ != nullptr) cudaFreeHost(base_);
}

void StagingRing::allocate(std::size_t slot_bytes, int32_t slots) {
  WEFT_CHECK_ARG(base_ == nullptr && slots >= 1, "staging", "allocated twice or with " << slots << " slots");
  WEFT_CHECK_ARG(slot_bytes >= 1 && slot_bytes <= SIZE_MAX / std::size_t(slots), "staging",
                 "slot_bytes " << slot_bytes << " x " << slots << " slots: need 1 byte or more, the total within size_t");
  void* p = nullptr;
  WEFT_CUDA_CHECK(cudaHostAlloc(&p, slot_bytes * std::size_t(slots), cudaHostAllocDefault));
  base_ = static_cast<unsigned char*>(p);
  slot_bytes_ = slot_bytes;
  std::memset(base_, 0, slot_bytes * std::size_t(slots));  // a copy's tail past the metadata stays zero
  events_.reserve(std::size_t(slots));
  for (int32_t s = 0; s < slots; ++s) {
    cudaEvent_t e = nullptr;
    WEFT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    events_.push_back(e);
  }
  book_ = StagingSlots(slots);
}

bool StagingRing::query(int32_t s) {
  // cudaErrorNotReady is not an error of the caller's: it is cleared from the thread's last error
  // unless an earlier error is waiting there.
  const cudaError_t before = cudaPeekAtLastError();
  const cudaError_t e = cudaEventQuery(events_[std::size_t(s)]);
  if (e == cudaSuccess) return true;
  if (e != cudaErrorNotReady) WEFT_CUDA_CHECK(e);
  if (before == cudaSuccess) (void)cudaGetLastError();
  return false;
}

int32_t StagingRing::acquire(bool rotate) {
  return book_.acquire([this](int32_t s) { return query(s); },
                       [this](int32_t s) { WEFT_CUDA_CHECK(cudaEventSynchronize(events_[std::size_t(s)])); },
                       rotate);
}

void StagingRing::enqueued(int32_t s, cudaStream_t stream) {
  WEFT_CUDA_CHECK(cudaEventRecord(events_[std::size_t(s)], stream));
  book_.enqueued(s, stream, stream != cudaStreamPerThread);
}

}  // namespace weft::plan
