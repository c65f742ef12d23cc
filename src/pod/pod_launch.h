// Internal host interface of the fused POD kernel (pod_kernel.cuh; instances pod_d64.cu,
// pod_d128.cu). Host-includable.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "attention/scheduler.cuh"
#include "prefill/kernel/params.h"
#include "prefill/prefill_config.h"
#include "weft/dtype.h"

namespace weft::decode {
struct LaunchArgs;
}

namespace weft::pod {

// The fused kernel's shape per head dim (one prefill tile and one decode CTA shape, both 4 warps,
// so every CTA of the grid can run either side):
//   prefill: the FA2 kernel's 128-thread tiles -- d128: 128 rows x 64 keys (4 warps x 32 rows,
//            112 KB smem, the tile the heuristic picks for long chunks); d64: 64 x 128 (4 warps x
//            16 rows, 88 KB; the d64 128-row tile runs 8 warps).
//   decode:  the tensor-core decode mainloop (GQA group <= 8 as one n8 tile of query columns,
//            16-row items), 4 warps, kDecodeStages per-warp stages (what fits in the prefill
//            tile's shared memory: 3 at d128 (106 KB), 4 at d64 (73 KB)).
inline constexpr int32_t kThreads = 128;
inline constexpr int32_t kDecodeWarps = 4;
inline constexpr int32_t kMaxGroup = 8;
constexpr prefill::TileConfig prefill_tile(int32_t head_dim) {
  return head_dim == 128 ? prefill::TileConfig{128, 128, 64} : prefill::TileConfig{64, 64, 128};
}
constexpr int32_t decode_stages(int32_t head_dim) { return head_dim == 128 ? 3 : 4; }
inline bool supported(int32_t head_dim, int32_t group) {
  return (head_dim == 64 || head_dim == 128) && group >= 1 && group <= kMaxGroup;
}

struct Workspace {
  const attn::sched::BindPlan* bind = nullptr;
  attn::sched::Counters* counters = nullptr;
};

// decode: the decode side's launch arguments (decode/launch.h; dtype, head_dim, stages, warps).
void launch(const prefill::PrefillParams& p_prefill, const decode::LaunchArgs& decode, const Workspace& ws,
            int32_t grid, cudaStream_t stream);
// Resident CTAs per SM of the fused kernel (also raises its dynamic shared memory limit).
int32_t occupancy(int32_t head_dim, DType dtype);

}  // namespace weft::pod
