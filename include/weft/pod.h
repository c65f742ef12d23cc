// Hybrid batches (POD-Attention): prefill chunks and decodes of one step on the same paged KV
// cache, computed in ONE kernel launch whose CTAs bind themselves to prefill or decode work per
// SM at run time, so each SM runs compute-bound prefill and memory-bound decode side by side.
// Host-only header.
//
//   weft::PodBounds b{...};
//   size_t ws_bytes = BatchPODAttention::workspace_size(b);   void* ws; cudaMalloc(&ws, ws_bytes);
//   BatchPODAttention pod(b);                                  // once
//   per step:  pod.plan(prefill_qo_indptr_host, prefill_table, decode_table, page_size, dtype,
//                       variant, ws, ws_bytes, stream);
//   per layer: pod.run(prefill_q, decode_q, cache, prefill_table, decode_table,
//                      prefill_out, decode_out, &prefill_lse_or_null, &decode_lse_or_null, stream);
//
// Prefill requests: ragged queries prefill_q / prefill_out [total_q, Hq, D] (qo_indptr host array
// of batch + 1 entries), keys from the paged cache through prefill_table; a request with q_len
// query tokens and kv_len keys is the chunk of the LAST q_len positions of its sequence (chunked
// prefill: the chunk attends to all of its history and, with MaskMode::kCausal, causally to
// itself; weft/attention.h). Decode requests: decode_q / decode_out [batch, Hq, D], one token each,
// attending to all kv_len keys of their decode_table entry. LSE (optional, natural log):
// [total_q, Hq] and [batch, Hq] f32. Both tables index the same cache (pools, layout NHD or HND).
// Variant: sm_scale, causal (prefill), logits_soft_cap, window_left; no ALiBi, no custom mask, no
// run-time compiled variant (weft::Error naming the field at plan()).
//
// How a step runs (PodPlanInfo::fused / partition): the planner estimates the serial time (the
// fastest prefill -- the Hopper sm90 kernel where eligible -- then decode), the fused time and the
// SM partition's (PodMode::kPartition); kAuto runs the fastest predicted, and when neither overlap
// is predicted faster (one side tiny, GQA group > 8, ...), run() launches the standard prefill and
// decode kernels back to back on the stream (never slower than serial, up to the prediction).
// PodOptions::mode pins any of them.
//
// CUDA graphs: run() in fused mode is one launch of the fused kernel with a FIXED grid (resident
// CTA slots of the device; with PodOptions::prefill_split, then the small merge of split prefill
// tiles), whose plan, binding and counters live at fixed workspace offsets; the counters are
// reset by the kernel's last CTA, so a graph captured around run() replays correctly after any re-plan
// that stays in fused mode (same buffers, batch sizes within the bounds). A re-plan that switches
// mode changes the launches: pin PodOptions::mode for graph use (kFused replays across any mix).
// Serial mode follows the prefill wrapper's rule (weft/prefill.h).
// Validation: every argument is checked before anything is written or launched (weft::Error
// naming it).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include <cuda_runtime_api.h>

#include "weft/attention.h"
#include "weft/dtype.h"
#include "weft/export.h"
#include "weft/paged_kv.h"
#include "weft/tensor.h"

namespace weft WEFT_API {

struct PodBounds {
  int32_t max_prefill_batch = 0;
  int64_t max_prefill_tokens = 0;  // query tokens summed over the prefill requests
  int32_t max_decode_batch = 0;
  int32_t num_qo_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;  // 64 or 128 (fused kernel instances)
  KVLayout kv_layout = KVLayout::kNHD;  // of the cache run() will be given
};

enum class PodMode : int32_t {
  kAuto = 0,    // the planner's prediction per step
  kFused = 1,   // always the fused kernel (weft::Error when the batch has no fused kernel)
  kSerial = 2,  // always the standard prefill kernel then the decode kernel
  // SM partition: the standard prefill kernel with its persistent grid capped at SMs - k CTAs,
  // launched first, so decode CTAs run on the k SMs the prefill leaves free and on every SM once
  // it ends. A partition proper with the Hopper sm90 prefill (one CTA per SM; kAuto partitions
  // only then): both kernels on the caller's stream, the decode kernel launched with programmatic
  // stream serialization after the prefill, whose CTAs release it at their start, so decode is
  // dispatched only once every prefill CTA holds its SM (graph capturable: a programmatic edge).
  // With the FA2 prefill (other GPUs, page sizes the sm90 kernel does not tile) the decode kernel
  // runs on a second stream forked from the caller's (events, joined before run() returns) and the
  // partition runs correctly on the capped grid. The prefill runs its
  // 128-row query tile in this mode (a fixed kernel across re-plans, for graphs).
  kPartition = 3,
};

// How the fused kernel's CTAs pick their first side (attention/scheduler.cuh); every CTA then
// claims work of that side until it runs out and switches over to the other side.
enum class PodBinding : int32_t {
  kProportional = 0,  // %smid + per-SM ticket, ratio from the predicted co-run times of the two
                      // sides, one slot per side at least (1:1 at 2 CTAs per SM)
  kFiftyFifty = 1,    // %smid + per-SM ticket, 1:1 on every SM
  kStatic = 2,        // no SM binding: the first half of the grid starts on prefill (ablation)
};

struct PodOptions {
  PodMode mode = PodMode::kAuto;
  PodBinding binding = PodBinding::kProportional;
  // Limited prefill splits (fused mode): the prefill side's KV is split so its work items fill at
  // most about two waves of the grid (the balanced planner with the grid as its CTA count); split
  // items are merged by the plan merge kernel launched right after the fused kernel (launched in
  // every fused run when set, a no-op without splits: fixed graph topology). Off by default:
  // measured slower (H100, bench pod at 6d33c1b: mean 0.83x serial against 0.87x without, and
  // 5-20% slower on the chunk-512 batches it splits -- more prefill CTAs share SMs instead of one
  // prefill item per SM beside decode). false: every query tile is one item.
  bool prefill_split = false;
  // SM partition (kPartition, and kAuto when it chooses the partition): the k SMs left to decode.
  // 0: the planner's cost model picks k per step among 8, 16, .. 64 (at most half the SMs);
  // else one of those values, fixed. A graph captured around a partition run() replays after
  // re-plans only while k and the decode shape stay the same: pin k (and PodMode::kPartition)
  // for graph use (a pinned k keeps one decode shape, partition_decode_*).
  int32_t partition_free_sms = 0;
  // SM partition: the decode CTA shape of the partition's decode launch (DecodeOptions::warps_per_cta
  // and pipeline_stages of its own decode wrapper), which reads on the k free SMs while the
  // prefill runs. Both 0: with the bands' k (partition_free_sms 0, kAuto or kPartition) the
  // planner picks per step between the decode wrapper's defaults (4 warps x 2 stages) and 8 x 2
  // (heuristics::pod_partition_deep_decode: measured faster in the bands it picks;
  // PodPlanInfo::decode_warps / decode_stages say which ran); with a pinned k, the defaults. Else
  // this shape in every partition step. The serial fallback's decode keeps the defaults.
  // Validated like DecodeOptions (2..8 each; the CTA's shared memory must fit the device):
  // weft::Error naming the field. A shape whose grid is larger than the defaults' (more CTAs per
  // SM) needs workspace_size(bounds, options).
  int32_t partition_decode_warps = 0;
  int32_t partition_decode_stages = 0;
};

struct PodPlanInfo {
  bool fused = false;
  int32_t grid = 0;            // fused kernel CTAs (= resident slots: SMs x ctas_per_sm)
  int32_t ctas_per_sm = 0;
  int32_t prefill_ctas = 0;    // units the scheduler hands out: prefill work items (fused),
  int32_t decode_ctas = 0;     // decode item lists (fused)
  int32_t ratio_prefill = 0, ratio_decode = 0;  // per-SM ticket ratio of the first binding
  int32_t prefill_items = 0, decode_items = 0;
  int32_t prefill_merges = 0;  // fused: split query tiles merged after the fused kernel
  double predicted_serial_us = 0, predicted_fused_us = 0;
  bool partition = false;      // the SM partition runs (PodMode::kPartition)
  int32_t free_sms = 0;        // its k: SMs left to decode while the prefill runs
  int32_t prefill_grid = 0;    // its prefill CTAs (SMs - k)
  double predicted_partition_us = 0;  // 0 when the prefill is not the sm90 kernel
  int32_t decode_warps = 0, decode_stages = 0;  // the partition's decode CTA shape (0 otherwise)
};

class BatchPODAttention {
 public:
  // Bytes of device workspace for the bounds (256-byte aligned; kept for the object's life). Covers
  // both PodOptions::prefill_split settings (with splits: + 2 x grid fp32 partial tiles, ~35 MB at
  // d128 on 132 SMs).
  static std::size_t workspace_size(const PodBounds& bounds);
  // ... for a wrapper with these options (PodOptions::partition_decode_warps / _stages size the
  // decode region by their grid; the one-argument form is the default options').
  static std::size_t workspace_size(const PodBounds& bounds, const PodOptions& options);
  explicit BatchPODAttention(const PodBounds& bounds, const PodOptions& options = {});
  ~BatchPODAttention();
  BatchPODAttention(const BatchPODAttention&) = delete;
  BatchPODAttention& operator=(const BatchPODAttention&) = delete;

  // prefill_qo_indptr_host: prefill_table.batch_size + 1 entries (host). The tables' host mirrors
  // are read; their device arrays are used by run().
  void plan(const int32_t* prefill_qo_indptr_host, const PageTable& prefill_table, const PageTable& decode_table,
            int32_t page_size, DType dtype, const AttentionVariant& variant, void* workspace,
            std::size_t workspace_bytes, cudaStream_t stream);

  // lse pointers may be null (required when the variant has return_lse).
  void run(const TensorView& prefill_q, const TensorView& decode_q, const PagedKVCache& cache,
           const PageTable& prefill_table, const PageTable& decode_table, const TensorView& prefill_out,
           const TensorView& decode_out, const TensorView* prefill_lse, const TensorView* decode_lse,
           cudaStream_t stream);

  const PodPlanInfo& plan_info() const { return info_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  PodPlanInfo info_;
};

}  // namespace weft
