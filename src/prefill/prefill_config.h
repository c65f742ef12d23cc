// Prefill tile configurations (the heuristic that picks one: src/attention/heuristics.cpp).
// Pure C++: no CUDA headers (host tests include it).
//
// A configuration is (cta_q, cta_kv, head_dim): a CTA computes cta_q packed query rows (GQA:
// rows = query tokens x group, token-major) against cta_kv keys per main-loop step.
//   warps_q  = cta_q / rows_per_warp  one warp owns 16 rows (one m16 MMA row block), or 32 for
//              the d128 x 128 tile (see rows_per_warp_of)
//   warps_kv = 4 / warps_q (>= 1, capped at cta_kv / 16)
//              small query tiles split each KV tile over several warps (merged at the end)
//              so a 16-row tile still runs 4 warps; d64 cta_q = 128 runs 8 warps x 16 rows.
// The instantiated (configuration, dtype) pairs are the prefill rows of the one instance table,
// src/instances.txt (with why each is there); CMake generates one .cu per row and the lists
// WEFT_PREFILL_INSTANCES(X) (dispatch) and WEFT_PREFILL_CONFIGS(X) (head_dim, cta_q, cta_kv:
// instantiated_configs()) in weft_gen/instances.h.
#pragma once
#include "common/rtc_compat.h"
#if !WEFT_RTC
#include <string>
#include <vector>

#include "weft_gen/instances.h"
#endif

namespace weft::prefill {

struct TileConfig {
  int32_t head_dim = 0;
  int32_t cta_q = 0;
  int32_t cta_kv = 0;
  bool operator==(const TileConfig& o) const {
    return head_dim == o.head_dim && cta_q == o.cta_q && cta_kv == o.cta_kv;
  }
};

// Derived quantities (must match the device traits in kernel/traits.cuh).
// Query rows per warp: 32 (two m16 row blocks) for the d128 x 128-row tile -- the FA2 layout:
// 4 warps x 32 rows, so every K/V fragment read from shared memory (ldmatrix) feeds 4 MMAs
// instead of 2 (with 16 rows per warp one ldmatrix.x4, 512 B = 4 cycles of the 128 B/clk shared
// memory port, is spent per 2 MMAs: about the tensor pipe's own rate). Measured on H200, causal
// L16384, all else equal: 346 TFLOP/s vs 278 for the 16-row cta_q 64 tile (docs/
// perf-notes-prefill.md). The 4-warp CTA also fits
// twice per SM (255 registers x 128 threads, 112 KB smem), so one CTA's barriers overlap the
// other's math. Q is then re-read from shared memory each k-step (64 more registers would not fit
// next to the 128 O accumulators). Every other tile keeps 16 rows per warp.
constexpr int32_t rows_per_warp_of(int32_t head_dim, int32_t cta_q) {
  return head_dim == 128 && cta_q == 128 ? 32 : 16;
}
constexpr int32_t warps_q_of(int32_t head_dim, int32_t cta_q) {
  return cta_q / rows_per_warp_of(head_dim, cta_q);
}
//   warps_kv = 4 / warps_q (>= 1, capped at cta_kv / 16): small query tiles split each KV tile
//   over several warps (merged at the end) so a 16-row tile still runs 4 warps.
constexpr int32_t warps_kv_of(int32_t head_dim, int32_t cta_q, int32_t cta_kv) {
  return warps_q_of(head_dim, cta_q) >= 4
             ? 1
             : ((4 / warps_q_of(head_dim, cta_q)) < (cta_kv / 16) ? (4 / warps_q_of(head_dim, cta_q))
                                                                   : (cta_kv / 16));
}
constexpr int32_t threads_of(int32_t head_dim, int32_t cta_q, int32_t cta_kv) {
  return 32 * warps_q_of(head_dim, cta_q) * warps_kv_of(head_dim, cta_q, cta_kv);
}
// Q kept in registers for the whole item when it fits (d <= 128 with 16 rows per warp); d256
// and the 32-row warps re-read it from smem.
constexpr bool q_in_regs(int32_t head_dim, int32_t cta_q) {
  return head_dim <= 128 && rows_per_warp_of(head_dim, cta_q) == 16;
}
// K/V pipeline depth: 3 K stages, 2 V stages. With a third K stage every copy of a KV step can
// be issued right after the ONE barrier at the top of the step (K two steps ahead, V one step
// ahead): the buffers it overwrites were last read in the previous step. Two stages each needed a
// second barrier per step (between Q.K^T and P.V) before the K copy.
constexpr int32_t kKStages = 3;
constexpr int32_t kVStages = 2;
// Dynamic shared memory of one CTA: Q tile + 3 K + 2 V tiles, 16-bit elements.
constexpr std::size_t smem_bytes_of(int32_t head_dim, int32_t cta_q, int32_t cta_kv) {
  return static_cast<std::size_t>(cta_q + (kKStages + kVStages) * cta_kv) * head_dim * 2;
}
// Estimated fp32/b32 accumulator registers per thread: O (rows_per_warp x D per warp),
// S (rows_per_warp x KV/warps_kv), Q fragments when kept in registers.
constexpr int32_t acc_regs_of(int32_t head_dim, int32_t cta_q, int32_t cta_kv) {
  return (rows_per_warp_of(head_dim, cta_q) / 16) *
             (head_dim / 2 + cta_kv / (2 * warps_kv_of(head_dim, cta_q, cta_kv))) +
         (q_in_regs(head_dim, cta_q) ? head_dim / 4 : 0);
}

// The tile heuristic (FlashInfer §3.2.2) and its budgets, with their reasons:
// heuristics::prefill_tiles in src/attention/heuristics.{h,cpp}. Throws weft::Error("head_dim",
// ...) for unsupported head dims.
#if !WEFT_RTC  // host only (NVRTC: common/rtc_compat.h)
TileConfig choose_tiles(double avg_packed_qo_len, int32_t head_dim);

// All instantiated configurations (WEFT_PREFILL_CONFIGS: the table's prefill rows, in order).
const std::vector<TileConfig>& instantiated_configs();
std::string describe(const TileConfig& c);
#endif  // !WEFT_RTC

}  // namespace weft::prefill
