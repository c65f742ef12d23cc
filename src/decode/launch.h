// Internal host interface between the wrapper (decode.cpp) and the kernels (kernels.cu).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "attention/plan/balance.h"
#include "decode/decode_plan.h"
#include "weft/decode.h"
#include "weft/paged_kv.h"
#include "weft/tensor.h"

namespace weft::decode {


struct LaunchArgs {
  plan::PlanPointers plan;
  const TensorView* q = nullptr;
  const TensorView* out = nullptr;
  const TensorView* lse = nullptr;     // may be null
  const PagedKVCache* cache = nullptr;
  const PageTable* table = nullptr;
  int32_t group_size = 1;
  double sm_scale = 0;
  float soft_cap = 0;
  DType dtype = DType::kBFloat16;
  int32_t head_dim = 0;
  DecodePath path = DecodePath::kTensorCore;
  int32_t grid = 0;
};

// Launches the decode kernel of (dtype, head_dim, path) with args.grid persistent CTAs.
void launch_decode(const LaunchArgs& args, cudaStream_t stream);
// Resident CTAs per SM of the tensor-core kernel for head_dim (sizes the fixed grid).
int ctas_per_sm(int32_t head_dim, int device);
bool path_compiled(DecodePath path);

}  // namespace weft::decode
