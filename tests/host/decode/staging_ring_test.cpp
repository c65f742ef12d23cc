// StagingSlots (decode/staging_ring.h): which staging slot a decode plan() writes and which copies
// it must know have landed. A model of the GPU (copies complete in stream order, at random times)
// checks the property the wrapper relies on: a slot is never rewritten while its copy may still be
// queued, and the driver is asked about once per ring when the stream drains between plans.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "decode/staging_ring.h"

namespace {

using weft::decode::StagingSlots;

// Copies per stream, completed in order: done[s] = how many of stream s's copies have landed.
struct FakeGpu {
  std::vector<std::vector<int>> queued;  // per stream: the plan index of each copy, in order
  std::vector<int> done;
  explicit FakeGpu(int streams) : queued(streams), done(streams, 0) {}
  bool landed(int stream, int copy_pos) const { return copy_pos < done[stream]; }
};

struct SlotCopy {
  int stream = -1, pos = -1;  // the copy enqueued from the slot (pos in its stream), -1: none
};

// Runs `plans` plan() calls: acquire (query the newest covering copy, else wait on the slot's
// own), check the slot is free, enqueue. progress(rng) lands copies between calls.
void run_model(int slots, int streams, int plans, double p_drain, uint64_t seed, int* queries, int* waits) {
  std::mt19937_64 rng(seed);
  StagingSlots book(slots);
  FakeGpu gpu(streams);
  std::vector<SlotCopy> copy(slots);
  std::vector<int> stream_ids(streams);
  for (int s = 0; s < streams; ++s) stream_ids[s] = s;
  *queries = *waits = 0;
  for (int n = 0; n < plans; ++n) {
    // The GPU makes progress: each stream drains fully with probability p_drain, else lands a few.
    for (int s = 0; s < streams; ++s) {
      const int q = static_cast<int>(gpu.queued[s].size());
      gpu.done[s] = std::uniform_real_distribution<>(0, 1)(rng) < p_drain
                        ? q
                        : std::min(q, gpu.done[s] + std::uniform_int_distribution<>(0, 1)(rng));
    }
    const int slot = book.next();
    if (book.next_pending()) {
      const int newest = book.newest_covering();
      bool freed = false;
      if (newest >= 0) {
        ++*queries;
        const SlotCopy& c = copy[newest];
        if (gpu.landed(c.stream, c.pos)) {
          book.landed_through(newest);
          freed = true;
        }
      }
      if (!freed) {  // cudaEventSynchronize on the slot's own copy: the GPU finishes it
        ++*waits;
        const SlotCopy& c = copy[slot];
        gpu.done[c.stream] = std::max(gpu.done[c.stream], c.pos + 1);
        book.landed_next();
      }
    }
    // The property: the slot about to be rewritten has no copy still queued.
    const SlotCopy& c = copy[slot];
    ASSERT_TRUE(c.stream < 0 || gpu.landed(c.stream, c.pos)) << "plan " << n << " slot " << slot;
    const int st = streams == 1 ? 0 : std::uniform_int_distribution<>(0, streams - 1)(rng);
    copy[slot] = {st, static_cast<int>(gpu.queued[st].size())};
    gpu.queued[st].push_back(n);
    book.enqueued(&stream_ids[st]);
  }
}

TEST(StagingSlots, NeverRewritesAQueuedSlot) {
  int queries = 0, waits = 0;
  for (int slots : {1, 2, 3, 4})
    for (int streams : {1, 2, 3})
      for (double p : {0.0, 0.3, 1.0})
        for (uint64_t seed = 0; seed < 20; ++seed) {
          run_model(slots, streams, 200, p, seed, &queries, &waits);
          if (HasFatalFailure()) return;
        }
}

TEST(StagingSlots, DrainedStreamAsksOncePerRing) {
  int queries = 0, waits = 0;
  run_model(4, 1, 400, 1.0, 7, &queries, &waits);
  // The first 4 plans find empty slots; then one query frees the whole ring every 4 plans.
  EXPECT_EQ(queries, (400 - 4 + 3) / 4);
  EXPECT_EQ(waits, 0);
  run_model(1, 1, 100, 1.0, 7, &queries, &waits);  // one slot: its own event every plan
  EXPECT_EQ(queries, 0);
  EXPECT_EQ(waits, 99);
}

TEST(StagingSlots, OtherStreamsOnlyFreeTheirOwnSlot) {
  StagingSlots book(2);
  int a = 0, b = 0;
  EXPECT_FALSE(book.next_pending());
  book.enqueued(&a);  // slot 0 on stream a
  book.enqueued(&b);  // slot 1 on stream b
  EXPECT_EQ(book.next(), 0);
  EXPECT_TRUE(book.next_pending());
  EXPECT_EQ(book.newest_covering(), -1);  // stream b's copy says nothing about stream a's
  book.landed_next();
  EXPECT_FALSE(book.next_pending());
  book.enqueued(&b);  // slot 0 on stream b
  EXPECT_EQ(book.next(), 1);
  EXPECT_EQ(book.newest_covering(), 0);  // slot 0's copy is newer, same stream
  book.landed_through(0);
  EXPECT_FALSE(book.next_pending());
  // A handle that is not one stream (cudaStreamPerThread) never covers another slot.
  StagingSlots per_thread(2);
  per_thread.enqueued(&a, false);
  per_thread.enqueued(&a, false);
  EXPECT_EQ(per_thread.newest_covering(), -1);
}

}  // namespace
