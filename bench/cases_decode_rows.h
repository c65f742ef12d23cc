// The decode bench's row runner (cases_decode_rows.cu), shared by the row lists of bench group "decode"
// (cases_decode.cu): the model shapes, a row's options, its name, and the runners of a decode row,
// a launch-overhead row and a plain-read row. What the rows time and how: cases_decode.cu's header.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "harness.h"
#include "weft/decode.h"
#include "weft/paged_kv.h"

namespace weft::bench::decode_rows {

constexpr int64_t kHeadDim = 128, kPageSize = 16;
constexpr int kPlanCalls = 21;  // warm plan() calls per timing of plan_us (median)
constexpr double kMaxKVBytes = 60.0 * (1ull << 30);
constexpr double kMaxSteadyBytes = 40.0 * (1ull << 30);  // all pool copies of one steady-state row

// "<prefix><model>/b<B>/kv<KV>": the name of a uniform-length row.
inline std::string row_name(const std::string& prefix, const char* model, int32_t batch, int32_t kv) {
  return prefix + model + "/b" + std::to_string(batch) + "/kv" + std::to_string(kv);
}

// Allocation i of a row (and of the floor/spacer rows) is preceded by a spacer of this many
// bytes, so that fresh allocations land in different places (run_decode_case).
inline size_t spacer_bytes(int i) { return size_t(i) * ((size_t(1) << 30) + (size_t(6) << 20)); }

struct Model {
  const char* name;
  int32_t hq, hkv;
  int32_t d = kHeadDim;  // head_dim
};

// Bytes of K and V (bf16, or `elem_bytes` per element: fp8 1) that `keys` keys of model m take.
inline double kv_bytes_of(const Model& m, double keys, int elem_bytes = 2) { return keys * m.hkv * m.d * 2 /*K,V*/ * elem_bytes; }

struct CaseOptions {
  weft::DecodePath path = weft::DecodePath::kAuto;
  // Warps per CTA and per-warp stages (weft::DecodeOptions; 0: the library's tuned default).
  int32_t warps = 0, stages = 0;
  weft::KVLayout layout = weft::KVLayout::kNHD;
  int allocations = 3;        // fresh pool allocations; the row reports the median
  bool shuffled_pages = true; // pages in a random permutation of the pool (fragmented cache)
  // Where the V pool lies relative to the K pool: two cudaMallocs (kSeparate; back to back in
  // a fresh address range, so V = K + pool bytes, a power of two for these shapes), one buffer
  // with each page's K then V (kInterleaved, the [page][2][...] cache of FlashInfer/vLLM-style
  // engines), or one buffer with V 3 MiB past the end of K (kOffset: not a power of two).
  enum class KVPlacement { kSeparate, kInterleaved, kOffset } placement = KVPlacement::kSeparate;
  // Steady-state rows ("decode/steady/..."): > 0 = this many fresh copies of the K/V pools (same
  // page table and plan), and the row times kSteadyRuns runs back to back in one graph, run i on
  // copy i % copies, after one L2 flush; ms = graph time / runs. See steady_copies().
  int copies = 0;
  // Pool element type: bf16, or fp8 e4m3 / e5m2 (scales 1/64 per KV head; q and out stay bf16).
  weft::DType kv_dtype = weft::DType::kBFloat16;
  double bf16_ms = 0;  // > 0: the bf16 row of the same shape, for extra.speedup_vs_bf16
};

// Runs per graph of a steady-state row: the graph's launch and the first run's cold start are
// shared by 8 runs (they are still in the time, 1/8 each).
constexpr int kSteadyRuns = 8;

// Pool copies for a steady-state row of `kv_bytes`: enough that between two reads of one copy the
// other copies move at least 2x the L2 capacity through it (nothing of the copy is left in L2
// when it is read again: every run reads DRAM, as the single-run rows do after their flush).
inline int steady_copies(double kv_bytes, double l2_bytes) {
  const int others = static_cast<int>(std::ceil(2.0 * l2_bytes / kv_bytes));
  return std::max(2, std::min(kSteadyRuns, others + 1));
}

// Returns the row's ms (0 when it was filtered out or failed).
double run_decode_case(weft::bench::Context& ctx, const std::string& name, const Model& m,
                       const std::vector<int32_t>& lens, const CaseOptions& opt = {});
// An empty kernel's row (one graph launch after an L2 flush): launch and completion overhead.
void report_launch_overhead(weft::bench::Context& ctx, int smem_bytes);
// A plain-read row (weft::bench::plain_read_ms over `bytes`), after a spacer allocation of
// spacer_bytes(spacer) when spacer > 0.
void report_plain_read(weft::bench::Context& ctx, const std::string& name,
                       std::vector<std::pair<std::string, std::string>> params, double bytes, int spacer = 0,
                       int copies = 1, int runs = 1);

}  // namespace weft::bench::decode_rows
