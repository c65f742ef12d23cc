// POD planner (pure C++, no CUDA: host unit tests in CI). Decides, per hybrid step, whether the
// fused kernel runs, and what its scheduler (attention/scheduler.cuh BindPlan) hands out: the
// prefill side's virtual CTAs are its work items (one each, longest first), the decode side's are
// `decode_lists` dealt item lists; every CTA of the fixed grid picks its first side per SM by the
// ratio r0 : r1 and switches over when its side runs out. The decision comes from a cost model of
// both sides (heuristics::PodCost: rates, fixed costs, the fused time and kAuto's measured region).
//
// Model (times in microseconds; constants and their measurements: heuristics::pod_cost):
//   prefill work  W_p = 4 * D * Hq * sum_b pairs(b) FLOPs; pairs(b) = q * kv, causal: the visible
//                 (query, key) pairs of a bottom-right aligned chunk, q * (kv - q) + q * (q + 1) / 2
//   decode work   W_d = 2 * D * Hkv * 2 bytes * sum kv   (K and V read once per KV head)
//   alone         t_x = W_x / rate_x + fixed_x  (prefill: the sm90 line when the Hopper prefill is
//                 eligible, else FA2)
//   serial        t_s = t_prefill + t_decode
//   fused         P = FA2 prefill alone, D = decode alone: t_f = max(P, D) + overlap * min(P, D)
//                 + fused_us (the fused kernel hides about half of the smaller side)
//   kAuto fuses when a fused kernel exists (head_dim 64/128, GQA group <= 8), both sides have
//   work, prefill_items <= max_items_per_sm * num_sms, D >= min_decode_over_prefill * P and
//   t_f < t_s * (1 - min_gain): the region where the fused kernel measurably beat serial.
//   partition     (PodMode::kPartition) the sm90 prefill capped at P = N - k CTAs (N SMs, one CTA
//                 per SM) and the decode kernel on a forked stream: decode reads on the k free SMs
//                 at r_k = min(R_d, k * r_sm) while the prefill runs t_P = slowdown * (W_p / (R_p
//                 * P / N)) + fixed_p, then what is left of it on every SM at R_d:
//                   left = W_d - r_k * max(0, t_P - fixed_d)
//                   t = (left <= 0 ? t_P : max(t_P, fixed_d) + left / R_d) + partition_us
//                 (PodPlanInfo::predicted_partition_us; fitted, ~7% error). k and whether kAuto
//                 partitions come from the measured bands (heuristics::pod_partition_free_sms /
//                 _pays) of x = partition_ratio() and the sm90 tiles per SM, and with them the
//                 decode CTA shape (Decision::deep_decode). Only with the sm90 prefill.
//   kAuto: the partition in its bands, else fused in its region, else serial.
// Per-SM ratio: r0 : r1 = 1 : 1 for kFiftyFifty and kStatic; kProportional rounds the prefill
// share P / (P + D) to ctas_per_sm slots, keeping one slot per side (so 1 : 1 at 2 CTAs per SM).
// kStatic starts CTAs below first0 = G * r0 / (r0 + r1) on prefill.
#pragma once
#include <cstdint>
#include <vector>

namespace weft::pod {

enum class Mode : int32_t { kAuto = 0, kFused = 1, kSerial = 2, kPartition = 3 };
enum class Binding : int32_t { kProportional = 0, kFiftyFifty = 1, kStatic = 2 };

struct PlanInput {
  std::vector<int32_t> pre_qo_len, pre_kv_len;  // prefill requests
  std::vector<int32_t> dec_kv_len;              // decode requests
  int32_t num_qo_heads = 0, num_kv_heads = 0, head_dim = 0;
  bool causal = true;
  int32_t num_sms = 0, ctas_per_sm = 0;         // G = num_sms * ctas_per_sm
  bool sm90_prefill = false;                    // serial prefill runs the Hopper kernel
  bool fused_supported = true;                  // a fused kernel exists for this batch
  int32_t prefill_items = 0;                    // work items of the fused prefill plan (no split)
  int32_t partition_free_sms = 0;               // kPartition: k fixed (a candidate); 0: the bands'
  bool tensor_core_decode = true;               // the decode kernel's path (partition bands)
  Mode mode = Mode::kAuto;
  Binding binding = Binding::kProportional;
};

struct Decision {
  bool fused = false;
  int32_t grid = 0;
  int32_t n_prefill = 0, n_decode = 0;          // virtual CTAs: prefill items, decode lists
  int32_t ratio_prefill = 1, ratio_decode = 1;  // per-SM ratio of the first binding
  int32_t first0 = 0;                           // kStatic: CTAs starting on prefill
  double t_prefill_us = 0, t_decode_us = 0;     // each side alone (serial)
  double t_serial_us = 0, t_fused_us = 0;
  bool partition = false;                       // the SM partition runs (then fused is false)
  int32_t free_sms = 0;                         // its k (the model's best, or the pinned one)
  int32_t prefill_grid = 0;                     // its prefill grid N - k
  double t_partition_us = 0;                    // predicted at free_sms (0 without sm90 prefill)
  // The partition's decode runs the deeper CTA shape (heuristics::kPodDeepDecodeWarps x
  // kPodDeepDecodeStages) instead of the default: the bands' choice with the bands' k
  // (heuristics::pod_partition_deep_decode); false with a pinned k.
  bool deep_decode = false;
};

double prefill_flops(const PlanInput& in);
double decode_bytes(const PlanInput& in);
// Predicted fused time (the co-run + switch-over model above).
double fused_time_us(const PlanInput& in);
// Candidate k of the SM partition on num_sms SMs: partition_step, 2 step, .. up to
// min(partition_max_free, num_sms / 2) (heuristics::pod_cost; the workspace covers these grids).
std::vector<int32_t> partition_candidates(int32_t num_sms);
// The largest of them (0: none) and whether k is one of them, without building the list (the
// planner's and the wrapper's check of a pinned k).
int32_t max_partition_candidate(int32_t num_sms);
bool is_partition_candidate(int32_t k, int32_t num_sms);
// Predicted partition time with k free SMs (the model above; the sm90 prefill's rates).
double partition_time_us(const PlanInput& in, int32_t free_sms);
// 128-row query tiles of the prefill side (the sm90 kernel's work items before splits).
int64_t sm90_tiles(const PlanInput& in);
// x = decode alone / sm90 prefill alone, predicted (0 without prefill work).
double partition_ratio(const PlanInput& in);
// Throws weft::Error naming the field on bad input (negative lengths, q > kv, zero heads/SMs),
// and ("mode") for Mode::kFused when !fused_supported, ("partition_free_sms") for a pinned k that
// is not a candidate.
Decision decide(const PlanInput& in);

// CTA count the fused prefill side is planned for (prefill::PlanRequest::num_ctas). With splits:
// the grid G, so the balanced planner cuts KV where a query tile costs more than ~1/G of the
// prefill work (items <= tiles + G: at 50:50 binding about two waves of the G/2 prefill-first
// slots, or one wave of all slots after switch-over) -- a chunk of 512 tokens has only 128 d128
// tiles (Llama-3-8B: 512 x 4 rows / 128 x 8 KV heads), fewer than the 264 slots, and without
// splits its prefill lasts one whole tile's KV loop on one CTA (yet measured faster: one prefill
// item per SM beside decode; PodOptions::prefill_split). Without splits: one list (the whole-tile
// items longest first, claimed in that order).
inline int32_t prefill_plan_ctas(int32_t grid, bool split) { return split ? grid : 1; }

// Decode item lists of the fused kernel: one per grid slot (G), so the decode side is claimed in
// units of ~1/G of its work.
inline int32_t decode_lists(int32_t grid) { return grid; }

}  // namespace weft::pod
