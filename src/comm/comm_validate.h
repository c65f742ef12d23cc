// Internal, host-only: argument checks of fused_allreduce_add_rmsnorm that need no GPU and no
// communicator (so host tests can run them). Each throws weft::Error naming the argument.
#pragma once
#include <cstddef>
#include <cstdint>

#include "weft/comm.h"
#include "weft/tensor.h"

namespace weft::comm_detail {

struct FusedCall {
  int64_t tokens = 0;
  int64_t hidden = 0;
  DType dtype = DType::kBFloat16;
  std::size_t bytes = 0;  // tokens * hidden * dtype size
  void* out = nullptr;    // where the normalized rows go (x.data when out is empty)
};

// x, out: [tokens, hidden] row-contiguous f16/bf16 on device `device_id`; residual same shape
// and dtype (any 16-byte row stride, not overlapping x/out); weight [hidden]; eps > 0;
// num_ctas in [1, kCommMaxCtas]; bytes <= capacity_bytes; variant a valid enum value.
FusedCall check_fused_args(const TensorView& x, const TensorView& residual, const TensorView& weight,
                           double eps, const TensorView& out, int num_ctas, AllReduceVariant variant,
                           std::size_t capacity_bytes, int device_id);

}  // namespace weft::comm_detail
