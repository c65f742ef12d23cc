// StagingSlots (attention/staging_ring.h): which staging slot a decode or prefill plan() writes and which copies
// it must know have landed. A model of the GPU (copies complete in stream order, at random times)
// runs the same acquire() the wrapper runs (its CUDA calls replaced by the model) and checks: a
// slot is never rewritten while its copy may still be queued; a drained stream reuses one slot
// with one query per plan; a busy stream waits only when every slot's copy is queued.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "attention/staging_ring.h"
#include "tests/common/test_util.h"

namespace {

using weft::plan::StagingRing;
using weft::plan::StagingSlots;
using weft::test::thrown_argument;

struct Counts {
  int queries = 0, waits = 0, slot_changes = 0;
};

// `plans` plan() calls on `streams` streams; before each, every stream lands all its copies with
// probability p_drain, else at most one more (p_drain < 0: none, a copy lands only when waited for).
// rotate: acquire()'s rotation (a known-free other slot before a query; small plans).
Counts run_model(int slots, int streams, int plans, double p_drain, uint64_t seed, bool rotate = false) {
  std::mt19937_64 rng(seed);
  StagingSlots book(slots);
  std::vector<std::vector<int>> queued(streams);  // per stream: slot of each copy, in order
  std::vector<int> done(streams, 0);              // copies landed per stream
  struct Copy {
    int stream = -1, pos = -1;
  };
  std::vector<Copy> copy(slots);
  std::vector<int> ids(streams);
  auto landed = [&](int s) { return copy[s].stream < 0 || copy[s].pos < done[copy[s].stream]; };
  Counts n;
  int last = -1;
  for (int p = 0; p < plans; ++p) {
    for (int st = 0; st < streams && p_drain >= 0; ++st) {
      const int q = static_cast<int>(queued[st].size());
      done[st] = std::uniform_real_distribution<>(0, 1)(rng) < p_drain
                     ? q
                     : std::min(q, done[st] + static_cast<int>(std::uniform_int_distribution<>(0, 1)(rng)));
    }
    const int slot = book.acquire(
        [&](int s) {
          ++n.queries;
          return landed(s);
        },
        [&](int s) {
          ++n.waits;
          done[copy[s].stream] = std::max(done[copy[s].stream], copy[s].pos + 1);
        },
        rotate);
    EXPECT_TRUE(landed(slot)) << "plan " << p << " rewrites slot " << slot << " while its copy is queued";
    if (last >= 0 && slot != last) ++n.slot_changes;
    last = slot;
    const int st = streams == 1 ? 0 : static_cast<int>(std::uniform_int_distribution<>(0, streams - 1)(rng));
    copy[slot] = {st, static_cast<int>(queued[st].size())};
    queued[st].push_back(slot);
    book.enqueued(slot, &ids[st]);
  }
  return n;
}

TEST(StagingSlots, NeverRewritesAQueuedSlot) {
  for (int slots : {1, 2, 3, 4})
    for (int streams : {1, 2, 3})
      for (double p : {-1.0, 0.0, 0.3, 1.0})
        for (uint64_t seed = 0; seed < 20; ++seed)
          for (bool rotate : {false, true}) {
            run_model(slots, streams, 200, p, seed, rotate);
            if (HasFailure()) return;
          }
}

TEST(StagingSlots, DrainedStreamReusesOneSlotWithOneQueryPerPlan) {
  const Counts n = run_model(4, 1, 300, 1.0, 7);
  EXPECT_EQ(n.queries, 299);  // the first plan finds the ring empty
  EXPECT_EQ(n.waits, 0);
  EXPECT_EQ(n.slot_changes, 0);  // the same lines and pages every step, as one buffer
}

TEST(StagingSlots, RotatingDrainedStreamQueriesOncePerRing) {
  // Small plans (heuristics::kRotateStagingMaxBytes) take the slots in turn: the driver is asked
  // only when no other slot is known to have landed, i.e. once per 4 plans, and never waited for.
  const Counts n = run_model(4, 1, 301, 1.0, 7, true);
  EXPECT_EQ(n.queries, 75);  // plans 4, 8, ..., 300
  EXPECT_EQ(n.waits, 0);
  EXPECT_EQ(n.slot_changes, 300 - 75);  // a query's plan reuses the newest slot (it landed)
  // A busy stream still waits only when every slot's copy is queued.
  EXPECT_EQ(run_model(4, 1, 4, -1.0, 1, true).waits, 0);
  EXPECT_EQ(run_model(4, 1, 5, -1.0, 1, true).waits, 1);
}

TEST(StagingSlots, BusyStreamWaitsOnlyWhenEverySlotIsQueued) {
  // The GPU never lands a copy unless waited for: with 4 slots the first wait comes at plan 4
  // (slots 0..3 all queued), and it is for the oldest copy.
  const Counts n4 = run_model(4, 1, 4, -1.0, 1);
  EXPECT_EQ(n4.waits, 0);
  const Counts n5 = run_model(4, 1, 5, -1.0, 1);
  EXPECT_EQ(n5.waits, 1);
  // One slot: every plan after the first waits for the previous copy (the behaviour before).
  const Counts one = run_model(1, 1, 10, -1.0, 1);
  EXPECT_EQ(one.waits, 9);
}

TEST(StagingSlots, OtherStreamsOnlyFreeTheirOwnSlot) {
  StagingSlots book(3);
  int a = 0, b = 0;
  book.enqueued(0, &a);
  book.enqueued(1, &b);
  book.enqueued(2, &b);
  book.landed_through(2);  // stream b's newest copy landed: b's older copy too, not a's
  EXPECT_TRUE(book.pending(0));
  EXPECT_FALSE(book.pending(1));
  EXPECT_FALSE(book.pending(2));
  // A handle that is not one stream (cudaStreamPerThread) frees only its own slot.
  StagingSlots per_thread(2);
  per_thread.enqueued(0, &a, false);
  per_thread.enqueued(1, &a, false);
  per_thread.landed_through(1);
  EXPECT_TRUE(per_thread.pending(0));
  EXPECT_FALSE(per_thread.pending(1));
}

TEST(StagingRing, AllocateRejectsNoSlotsBeforeAnyCudaCall) {
  StagingRing ring;  // no allocation: its destructor makes no CUDA call either
  EXPECT_EQ(thrown_argument([&] { ring.allocate(4096, 0); }), "staging");
  EXPECT_EQ(thrown_argument([&] { ring.allocate(4096, -2); }), "staging");
}

// Empty slots, and slots whose total overflows size_t (it would allocate the wrapped, smaller
// total): rejected before any CUDA call (without a GPU a CUDA call would throw "CUDA" instead).
TEST(StagingRing, AllocateRejectsBadSlotBytesBeforeAnyCudaCall) {
  StagingRing ring;
  EXPECT_EQ(thrown_argument([&] { ring.allocate(0, 2); }), "staging");
  EXPECT_EQ(thrown_argument([&] { ring.allocate(SIZE_MAX / 2 + 1, 2); }), "staging");
  EXPECT_EQ(thrown_argument([&] { ring.allocate(SIZE_MAX, 8); }), "staging");
  EXPECT_EQ(ring.slots(), 1);  // nothing allocated: the default book of one slot
  EXPECT_EQ(ring.slot_bytes(), 0u);
}

// Fewer than one slot is one slot: every plan writes slot 0, waiting for its previous copy.
TEST(StagingSlots, FewerThanOneSlotIsOne) {
  for (int32_t n : {0, -1, -100}) {
    StagingSlots book(n);
    EXPECT_EQ(book.slots(), 1) << n;
    EXPECT_EQ(book.acquire([](int32_t) { return false; }, [](int32_t) {}), 0);
    int a = 0;
    book.enqueued(0, &a);
    int waits = 0;
    EXPECT_EQ(book.acquire([](int32_t) { return false; }, [&](int32_t s) { waits += s == 0; }), 0);
    EXPECT_EQ(waits, 1) << "one slot, its copy queued: the plan waits for it";
    EXPECT_FALSE(book.pending(0));
  }
}

}  // namespace
