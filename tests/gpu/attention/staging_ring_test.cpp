// StagingRing (attention/staging_ring.h) with its pinned memory and events: a second allocate()
// is rejected naming "staging" and leaves the ring as it was. (Bad slot counts and sizes are
// rejected before any CUDA call: tests/host/attention/staging_ring_test.cpp.)
#include <gtest/gtest.h>

#include "attention/staging_ring.h"
#include "tests/common/gpu_util.h"
#include "tests/common/test_util.h"

namespace {

using weft::plan::StagingRing;
using weft::test::thrown_argument;

TEST(StagingRing, AllocateTwiceRejected) {
  WEFT_REQUIRE_GPU();
  StagingRing ring;
  ring.allocate(256, 2);
  ASSERT_EQ(ring.slots(), 2);
  ASSERT_EQ(ring.slot_bytes(), 256u);
  unsigned char* const s1 = ring.slot(1);
  EXPECT_EQ(s1, ring.slot(0) + 256);
  EXPECT_EQ(thrown_argument([&] { ring.allocate(512, 4); }), "staging");
  EXPECT_EQ(thrown_argument([&] { ring.allocate(256, 2); }), "staging");
  // Unchanged: the same slots, still zeroed.
  EXPECT_EQ(ring.slots(), 2);
  EXPECT_EQ(ring.slot_bytes(), 256u);
  EXPECT_EQ(ring.slot(1), s1);
  for (int s = 0; s < 2; ++s)
    for (int i = 0; i < 256; ++i) ASSERT_EQ(ring.slot(s)[i], 0) << "slot " << s << " byte " << i;
  EXPECT_EQ(ring.acquire(), 0);  // nothing enqueued yet: slot 0
}

}  // namespace
