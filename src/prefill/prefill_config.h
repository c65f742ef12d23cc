// Prefill tile configurations and the host heuristic that picks one (FlashInfer §3.2.2).
// Pure C++: no CUDA headers (host tests include it).
//
// A configuration is (cta_q, cta_kv, head_dim): a CTA computes cta_q packed query rows (GQA:
// rows = query tokens x group, token-major) against cta_kv keys per main-loop step.
//   warps_q  = cta_q / rows_per_warp  one warp owns 16 rows (one m16 MMA row block), or 32 for
//              the d128 x 128 tile (see rows_per_warp_of)
//   warps_kv = 4 / warps_q (>= 1, capped at cta_kv / 16)
//              small query tiles split each KV tile over several warps (merged at the end)
//              so a 16-row tile still runs 4 warps; d64 cta_q = 128 runs 8 warps x 16 rows.
// Every (config, dtype) pair in WEFT_PREFILL_CONFIGS has exactly one .cu file in
// src/prefill/instances/ (the dispatch table references all of them, so a missing file is a
// link error).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace weft::prefill {

// The one list of instantiated configurations: X(head_dim, cta_q, cta_kv).
// Why these: the heuristic below only ever returns these (a host test enumerates it).
//   d64:  KV tile 128 fits registers (O 32 + Q 16 + S 64 floats) and 96 KB smem.
//   d128: KV tile 64; cta_q 128: 4 warps x 32 rows (O 128 + S 64 accumulators), 112 KB smem,
//         2 CTAs per SM; cta_q 64/16: 16 rows per warp (O 64 + Q 32 + S 32).
//   d256: Q stays in shared memory (O alone is 128 floats), KV tile 32, cta_q <= 64.
#define WEFT_PREFILL_CONFIGS(X) \
  X(64, 128, 128)               \
  X(64, 64, 128)                \
  X(64, 16, 128)                \
  X(128, 128, 64)               \
  X(128, 64, 64)                \
  X(128, 16, 64)                \
  X(256, 64, 32)                \
  X(256, 16, 32)

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

// Budgets of the heuristic (why: H100/H200 have 228 KB smem and 64K registers per SM).
//   kSmemBudget: <= 113 KB per CTA so two CTAs share an SM (2 x (113 + 1 reserved) KB <= 228 KB;
//                one computes while the other waits on memory or runs its softmax).
//   kAccRegBudget: accumulators that leave room for fragments/addresses under 255 registers
//                without spills (measured with -Xptxas -v; docs/perf-notes-prefill.md). 192 =
//                the 32-row d128 warp (O 128 + S 64, Q re-read from smem, P converted to 32
//                b16x2 registers before P.V so S and P are never live together).
inline constexpr std::size_t kSmemBudget = 113 * 1024;
inline constexpr int32_t kAccRegBudget = 192;

// FlashInfer §3.2.2:
//   1. cta_q = the smallest query tile in {16, 64, 128} >= the average packed query length
//      (tokens x GQA group), 128 for anything longer. (32 is not instantiated: 16 -> 64 keeps
//      the instantiation count small; a 17..32-row workload runs a 64-row tile half empty.)
//   2. cta_kv = the largest KV tile in {128, 64, 32} whose registers and shared memory fit the
//      budgets; if none fits, halve cta_q and retry.
// Throws weft::Error("head_dim", ...) for unsupported head dims.
TileConfig choose_tiles(double avg_packed_qo_len, int32_t head_dim);

// All instantiated configurations (from WEFT_PREFILL_CONFIGS).
const std::vector<TileConfig>& instantiated_configs();
bool is_instantiated(const TileConfig& c);
std::string describe(const TileConfig& c);

}  // namespace weft::prefill
