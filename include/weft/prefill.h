// Batch prefill / append attention: ragged queries against paged or ragged (contiguous) K/V,
// FlashAttention-2 style tensor-core kernel with a load-balanced persistent schedule.
// Semantics (masks, soft-cap, LSE base, empty rows): weft/attention.h.
//
// Inspector-executor contract (same as decode):
//   size = BatchPrefillWrapper::workspace_size(bounds)   once: allocate a device workspace
//   w.plan_paged(...) / w.plan_ragged(...)                once per generation step (host; copies
//                                                         the plan into the workspace on `stream`)
//   w.run_paged(...) / w.run_ragged(...)                  once per layer; fixed grid, reads the plan
//                                                         from the workspace: CUDA-graph capturable
// Every plan array lives at a fixed workspace offset, so a graph captured after one plan replays
// correctly after a re-plan as long as the new plan picks the same tile configuration
// (plan_info().cta_q / cta_kv) -- force it with PrefillPlanOptions::cta_q for graph use.
// All validation happens before any launch; a rejected call throws weft::Error naming the
// argument and writes nothing (outputs untouched).
//
// Shapes: q, out [total_q, num_qo_heads, head_dim] (f16/bf16, head_dim contiguous, 16-byte rows),
// lse [total_q, num_qo_heads] float32 (optional, natural log). Ragged K/V [total_kv, num_kv_heads,
// head_dim]. num_qo_heads % num_kv_heads == 0 (GQA). head_dim 64, 128 or 256.
// Custom mask (variant.mask == MaskMode::kCustom): bit-packed per request, FlashInfer layout
// (reference/attention.h): request b's q_len x kv_len bits, row-major, little bit order, start at
// byte mask_indptr[b]; mask_indptr[b+1] - mask_indptr[b] == ceil(q_len * kv_len / 8). 1 = attend.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include <cuda_runtime_api.h>

#include "weft/attention.h"
#include "weft/dtype.h"
#include "weft/export.h"
#include "weft/paged_kv.h"
#include "weft/tensor.h"

namespace weft WEFT_API {

// Largest batch a workspace must hold (sizes every plan array and partial-state buffer).
struct PrefillBounds {
  int32_t max_batch = 0;
  int64_t max_total_q = 0;  // query tokens summed over the batch
  int32_t num_qo_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t device = -1;      // -1: current device (its SM count sizes the persistent grid)
};

// Which prefill mainloop runs a plan. kAuto: the Hopper (sm_90a, wgmma + TMA) mainloop where it
// is eligible (compute capability 9.0, the 128-row tile, head_dim 64/128/256, ALiBi too; no JIT
// variant; page sizes it tiles; fp8 K/V: bf16 q, head_dim 128, paged), else the FA2 mainloop
// (measured: attention/heuristics.cpp, prefill_auto_prefers_sm90). kFA2 pins the FA2 mainloop
// (comparisons, or any GPU). kSm90 requests the Hopper mainloop with its 128-row tile wherever it
// is eligible (fp8 pools included: bf16 q, head_dim 128, paged), an error naming opt.mainloop
// where it is not.
enum class PrefillMainloop : int32_t { kAuto = 0, kFA2 = 1, kSm90 = 2 };

struct PrefillPlanOptions {
  int32_t cta_q = 0;        // 0: heuristic (weft docs: FlashInfer §3.2.2); else 16, 64 or 128
  bool allow_split_kv = true;
  int32_t min_chunk = 256;  // never split a query tile's keys into chunks shorter than this
  PrefillMainloop mainloop = PrefillMainloop::kAuto;
  // Element type of the paged K/V pools run_paged() will read, when it is not q's dtype: an fp8
  // pool (DType::kFloat8E4M3 / kFloat8E5M2, weft/fp8.h; bf16 q / out, head_dim 128, paged; the
  // Hopper mainloop where eligible under kAuto / kSm90, else the FA2 one; not with ALiBi or
  // run-time compiled variants). Empty: q's dtype.
  std::optional<DType> kv_dtype;
  // Cap on the persistent grid (0: none): the plan is balanced over min(grid, max_ctas) CTAs and
  // the launch has that many. With the sm90 mainloop (one CTA per SM) a cap of P leaves the other
  // SMs free for a kernel on another stream (BatchPODAttention's SM partition). The workspace
  // must then be sized by workspace_size(bounds, max_ctas).
  int32_t max_ctas = 0;
  // Plan cost (issue 19), off by default: deal the KV head classes of a query segment to one CTA
  // together, except for the last segments of the longest-first order (a coarser deal of the bulk:
  // H times fewer planner queue operations, the planned makespan within ~0.3% of the
  // one-tile-at-a-time deal on the measured shapes). On the H100 it cut prefill/plan/b64's plan()
  // from 60.8 to 48.2 us but ran that plan 5.8% slower on the GPU (0.420 vs 0.397 ms, the same
  // process; bench/results/h100_prefill_plan_check_270bf7e.txt), so the default deals every tile
  // alone. The bench group prefill_plan_ab times both. Ignored where the Hopper mainloop runs the
  // call: its plans deal the head classes in turn (docs/perf-notes-prefill.md, "L2 at 16K").
  bool deal_heads_together = false;
};

// Device copy of a custom mask (run time).
struct CustomMaskDevice {
  const uint8_t* bits = nullptr;    // packed bits
  const int32_t* indptr = nullptr;  // [batch + 1] byte offsets
};

// What the last plan decided (tests, benchmarks, graph users).
struct PrefillPlanInfo {
  int32_t cta_q = 0, cta_kv = 0;
  int32_t num_ctas = 0;
  int32_t num_items = 0;
  int32_t num_merges = 0;  // split query tiles (merge pass)
  bool split = false;
  bool sm90 = false;  // the Hopper mainloop (wgmma + TMA) runs this plan; the FA2 kernel otherwise
};

class BatchPrefillWrapper {
 public:
  BatchPrefillWrapper();
  ~BatchPrefillWrapper();
  BatchPrefillWrapper(const BatchPrefillWrapper&) = delete;
  BatchPrefillWrapper& operator=(const BatchPrefillWrapper&) = delete;

  static std::size_t workspace_size(const PrefillBounds& bounds);
  // Bytes for plans of either grid: the full one or one capped at max_ctas
  // (PrefillPlanOptions::max_ctas; the head fold of a capped grid can need more plan metadata).
  static std::size_t workspace_size(const PrefillBounds& bounds, int32_t max_ctas);

  // qo_indptr_host[batch + 1]; table: host mirrors are read (device pointers are used at run).
  // mask_indptr_host[batch + 1]: required iff variant.mask == kCustom (checked against lengths).
  void plan_paged(const int32_t* qo_indptr_host, const PageTable& table, int64_t page_size,
                  int32_t num_qo_heads, int32_t num_kv_heads, int32_t head_dim, DType dtype,
                  const AttentionVariant& variant, void* workspace, std::size_t workspace_bytes,
                  const PrefillBounds& bounds, cudaStream_t stream,
                  const int32_t* mask_indptr_host = nullptr, const PrefillPlanOptions& opt = {});
  // kv_indptr_host[batch + 1]: request b's keys are rows kv_indptr[b] .. kv_indptr[b+1] of K/V.
  void plan_ragged(const int32_t* qo_indptr_host, const int32_t* kv_indptr_host, int32_t batch,
                   int32_t num_qo_heads, int32_t num_kv_heads, int32_t head_dim, DType dtype,
                   const AttentionVariant& variant, void* workspace, std::size_t workspace_bytes,
                   const PrefillBounds& bounds, cudaStream_t stream,
                   const int32_t* mask_indptr_host = nullptr, const PrefillPlanOptions& opt = {});

  // lse: nullptr or a [total_q, num_qo_heads] f32 view. mask: required iff planned kCustom.
  void run_paged(const TensorView& q, const PagedKVCache& cache, const PageTable& table,
                 const TensorView& out, const TensorView* lse, cudaStream_t stream,
                 const CustomMaskDevice* mask = nullptr);
  // kv_indptr: device array [batch + 1], equal to the kv_indptr given to plan_ragged.
  void run_ragged(const TensorView& q, const TensorView& k, const TensorView& v,
                  const int32_t* kv_indptr, const TensorView& out, const TensorView* lse,
                  cudaStream_t stream, const CustomMaskDevice* mask = nullptr);

  bool planned() const { return planned_; }
  const PrefillPlanInfo& plan_info() const { return info_; }

 private:
  struct State;
  void plan_common(const int32_t* qo_indptr_host, int32_t batch, const std::vector<int32_t>& kv_len,
                   bool paged, int64_t page_size, int32_t num_qo_heads, int32_t num_kv_heads,
                   int32_t head_dim, DType dtype, const AttentionVariant& variant, void* workspace,
                   std::size_t workspace_bytes, const PrefillBounds& bounds, cudaStream_t stream,
                   const int32_t* mask_indptr_host, const PrefillPlanOptions& opt);
  void check_common(const TensorView& q, const TensorView& out, const TensorView* lse,
                    const CustomMaskDevice* mask) const;
  void launch(const void* params, const TensorView& out, const TensorView* lse, cudaStream_t stream);
  State* s_ = nullptr;
  bool planned_ = false;
  PrefillPlanInfo info_{};
};

}  // namespace weft
