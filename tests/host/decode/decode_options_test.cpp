// DecodeOptions validation (weft/decode.h): bad tuning values are rejected naming the field
// before any CUDA call, so this runs without a GPU.
#include <gtest/gtest.h>

#include "tests/common/test_util.h"
#include "weft/decode.h"

namespace weft {
namespace {

TEST(DecodeOptions, BadTuningRejectedNamingTheField) {
  DecodeOptions o;
  o.warps_per_cta = 1;
  EXPECT_EQ(test::thrown_argument([&] { BatchDecodeWrapper::workspace_size(8, 32, 8, 128, o); }),
            "options.warps_per_cta");
  o.warps_per_cta = kDecodeMaxWarpsPerCta + 1;
  EXPECT_EQ(test::thrown_argument([&] { BatchDecodeWrapper::workspace_size(8, 32, 8, 128, o); }),
            "options.warps_per_cta");
  o = DecodeOptions{};
  o.pipeline_stages = 1;
  EXPECT_EQ(test::thrown_argument([&] { BatchDecodeWrapper::workspace_size(8, 32, 8, 128, o); }),
            "options.pipeline_stages");
  o.pipeline_stages = kDecodeMaxPipelineStages + 1;
  EXPECT_EQ(test::thrown_argument([&] { BatchDecodeWrapper::workspace_size(8, 32, 8, 128, o); }),
            "options.pipeline_stages");
  o = DecodeOptions{};
  o.share_prefixes = true;
  o.prefix_wide_min_rows = -1;
  EXPECT_EQ(test::thrown_argument([&] { BatchDecodeWrapper::workspace_size(8, 32, 8, 128, o); }),
            "options.prefix_wide_min_rows");
  EXPECT_EQ(test::thrown_argument([&] { BatchDecodeWrapper w(8, 32, 8, 128, o); }), "options.prefix_wide_min_rows");
  o.prefix_wide_min_rows = 0;
  o.prefix_wide_min_keys = -1;
  EXPECT_EQ(test::thrown_argument([&] { BatchDecodeWrapper::workspace_size(8, 32, 8, 128, o); }),
            "options.prefix_wide_min_keys");
  EXPECT_EQ(test::thrown_argument([&] { BatchDecodeWrapper w(8, 32, 8, 128, o); }), "options.prefix_wide_min_keys");
}

}  // namespace
}  // namespace weft
