// kAuto's kernel path (choose_decode_path) is the measured policy: CUDA cores only for GQA groups
// 1-2 at head_dim 128, tensor cores everywhere else (numbers in src/attention/heuristics.cpp).
#include <gtest/gtest.h>

#include "weft/decode.h"

namespace weft {
namespace {

TEST(DecodePathPolicy, CudaCoresOnlyForSmallGroupsAtD128) {
  for (DType dtype : {DType::kBFloat16, DType::kFloat16})
    for (int32_t g = 1; g <= 16; ++g) {
      EXPECT_EQ(choose_decode_path(g, 128, dtype), g <= 2 ? DecodePath::kCudaCore : DecodePath::kTensorCore)
          << "group " << g;
      EXPECT_EQ(choose_decode_path(g, 64, dtype), DecodePath::kTensorCore) << "D64 group " << g;
      EXPECT_EQ(choose_decode_path(g, 256, dtype), DecodePath::kTensorCore) << "D256 group " << g;
    }
}

}  // namespace
}  // namespace weft
