// The decode timeline (src/decode/trace.h) is a diagnostic build option: the default build,
// which every shipped and measured build is, compiles no recording and reads back nothing.
#include "decode/trace.h"

#include <gtest/gtest.h>

namespace weft::decode {
namespace {

TEST(DecodeTrace, FollowsTheBuildOption) {
#if WEFT_DECODE_TRACE
  EXPECT_TRUE(trace_compiled());
#else
  EXPECT_FALSE(trace_compiled());
  EXPECT_TRUE(trace_read(264).empty());
  EXPECT_TRUE(trace_read(-1).empty());  // a negative count reads nothing (the trace build clamps it too)
#endif
}

}  // namespace
}  // namespace weft::decode
