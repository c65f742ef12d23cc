// The attention heuristics in one place, each with the measurements that set it (heuristics.cpp):
//   - decode kernel path under DecodePath::kAuto (decode_prefers_cuda_cores, kTensorCoreMinGroup);
//   - decode CTA shape: warps per CTA and per-warp pipeline stages (decode_default_warps/_stages;
//     weft::DecodeOptions overrides them);
//   - prefill tile (CTA query rows x keys per step) from the packed query length (prefill_tiles,
//     with the budgets kSmemBudget / kAccRegBudget), and whether kAuto takes the Hopper mainloop
//     where it may (prefill_auto_prefers_sm90);
//   - persistent grid size: CTAs per SM x SMs (persistent_grid).
// Pure C++ (no CUDA headers): host tests pin every decision (tests/host/attention/heuristics_test.cpp).
//
// Decisions that live elsewhere, next to the code they shape (and why):
//   - the planner's split/merge thresholds and decode's item height (16 or 32 rows per item:
//     decode_tile_rows / plan_tile_rows in src/decode/decode_plan.cpp, and the balanced planner
//     in src/attention/plan/): they are part of the plan format;
//   - whether the Hopper prefill mainloop serves a call (src/prefill/sm90/sm90_host.cpp,
//     eligible()): it depends on that kernel's own limits;
//   - communication (src/comm/selector.cpp): comm is an optional component (built only with
//     NCCL) and no attention code uses its decisions.
#pragma once
#include <cstddef>
#include <cstdint>

namespace weft::heuristics {

// ---- decode ----

// kAuto at head_dim 128: CUDA cores below this GQA group size, tensor cores from it on; tensor
// cores at every group at head dims 64 and 256 (measurements in heuristics.cpp).
inline constexpr int32_t kTensorCoreMinGroup = 3;
bool decode_prefers_cuda_cores(int32_t group_size, int32_t head_dim);
// kAuto on fp8 KV pools: the tensor-core path at every group (it reads the fp8 tiles directly;
// the CUDA-core path widens them in shared memory first). Measurements in heuristics.cpp.
bool decode_fp8_prefers_tensor_cores(int32_t group_size, int32_t head_dim);

// The tuned defaults of the decode CTA shape (DecodeOptions value 0).
int32_t decode_default_stages(int32_t head_dim);  // per-warp cp.async stages: 2
int32_t decode_default_warps(int32_t head_dim);   // warps per CTA: 4

// ---- prefill ----

// Budgets of the tile heuristic (why: H100/H200 have 228 KB smem and 64K registers per SM).
//   kSmemBudget: <= 113 KB per CTA so two CTAs share an SM (2 x (113 + 1 reserved) KB <= 228 KB;
//                one computes while the other waits on memory or runs its softmax).
//   kAccRegBudget: accumulators that leave room for fragments/addresses under 255 registers
//                without spills (measured with -Xptxas -v; docs/perf-notes-prefill.md). 192 =
//                the 32-row d128 warp (O 128 + S 64, Q re-read from smem, P converted to 32
//                b16x2 registers before P.V so S and P are never live together).
inline constexpr std::size_t kSmemBudget = 113 * 1024;
inline constexpr int32_t kAccRegBudget = 192;

struct PrefillTiles {
  int32_t cta_q = 0;   // query rows (tokens x GQA group) per CTA tile
  int32_t cta_kv = 0;  // keys per main-loop step
};
// FlashInfer §3.2.2:
//   1. cta_q = the smallest query tile in {16, 64, 128} >= the average packed query length
//      (tokens x GQA group), 128 for anything longer. (32 is not instantiated: 16 -> 64 keeps
//      the instantiation count small; a 17..32-row workload runs a 64-row tile half empty.)
//   2. cta_kv = the largest KV tile in {128, 64, 32} whose registers and shared memory fit the
//      budgets (prefill_config.h: smem_bytes_of, acc_regs_of); if none fits, halve cta_q and
//      retry.
// Throws weft::Error("head_dim", ...) for head dims other than 64, 128, 256.
PrefillTiles prefill_tiles(double avg_packed_qo_len, int32_t head_dim);

// PrefillMainloop::kAuto: whether a call the Hopper mainloop can run (sm90::eligible) takes it.
// wide_tile: prefill_tiles chose the 128-row tile (or head_dim 256 with > 64 packed rows);
// fp8_kv: fp8 K/V pools. Yes on the wide tile for 16-bit and fp8 pools alike (the sm90 fp8
// instances measured 1.39-1.61x the FA2 kernel's, heuristics.cpp). kSm90 / kFA2 bypass this.
bool prefill_auto_prefers_sm90(bool wide_tile, bool fp8_kv);

// Whether a prefill plan deals its KV head classes in turn (plan::BalanceConfig::heads_in_turn):
// the Hopper mainloop's plans (sm90: one CTA per SM, every CTA resident at once).
bool prefill_heads_in_turn(bool sm90);

// ---- both ----

// The smallest host -> device copy a plan() enqueues from its pinned staging buffer: a decode
// plan's metadata region below it is copied together with the start of the (scratch) partial
// states after it. Measured on the lent H100 machine (driver 580.159.04, weft-plan-bench --copy,
// bench/results/h100_plan_bench_copy_39bac1c.txt, host time of cudaMemcpyAsync from pinned
// memory): 2 to 24 KiB cost 2.0-3.1 us (the driver writes such copies into its command stream
// from the CPU), 28 KiB to 128 KiB 1.3 us (a DMA transfer). Llama-3-8B's batch-1 decode plan is
// 6 KiB (2.0-2.9 us).
inline constexpr std::size_t kMinPlanCopyBytes = 32 * 1024;

// Prefill plans dealt with the KV head classes of a segment together
// (BalanceConfig::deal_heads_together; the prefill wrapper's plans, not POD's): the requests
// (segments) of the sorted order's last kGroupedTailUnitsPerCta x CTAs are still dealt one tile at
// a time. LPT simulation of the dealt makespan (causal prefill, 2 head classes on 33 plan CTAs:
// the sm90 grid of Llama-3-8B; 45 single-request and batch shapes of 1-128 prompts up to 16K
// tokens): a tail of 1 x CTAs left some plans 70% longer (few segments per CTA), 2 x 3%, 4 x at
// most 0.26% longer and some shorter than the one-tile-at-a-time deal, for 55% of its queue
// operations at prefill/plan/b64 (648 of 1172) and about half on larger batches. Not the default
// (PrefillPlanOptions::deal_heads_together = false): the H100 ran the grouped prefill/plan/b64 plan
// 5.8% slower (bench/results/h100_prefill_plan_check_270bf7e.txt).
inline constexpr int32_t kGroupedTailUnitsPerCta = 4;

// Staging slots of a decode or prefill plan() (attention/staging_ring.h; prefill/plan/b64's ~93 KiB
// image: 4 slots, 372 KiB of pinned memory per prefill wrapper). A drained stream reuses one slot (as
// one buffer did); plans back to back, with the previous copy still queued, write another slot
// instead of waiting for it on the host: with S slots a plan() waits only when the copies of the
// last S plans are all queued. The bench's back-to-back plan() rows found the stream busy on 20 of
// 20 calls, and with the slots they took 7.4 us instead of 9.8 (b1, H100,
// bench/results/h100_dplan_check_312808a.txt). 4 slots while each is at most 256 KiB (Llama-3-8B
// at max_batch 256: 32 KiB, 128 KiB of pinned memory per wrapper), else 2.
inline constexpr int32_t plan_staging_slots(std::size_t slot_bytes) { return slot_bytes <= 256 * 1024 ? 4 : 2; }

// A balanced decode plan whose serialized arrays and CTA records take at most this many bytes (batch
// 1 of Llama-3-8B on the folded 33-CTA plan at kv4096: 16 items, ~6.8 KiB with its 128 launch
// records of 48 bytes, plan::launch_records_used (~13.5 KiB with one per launched CTA, 264; ~2.3
// KiB when the records were per plan CTA, which the 4 KiB bound of the measurement below was set
// for) takes the staging slots in turn
// (StagingSlots::acquire's rotate): a slot known to have landed is written without asking the
// driver, so a drained stream costs one cudaEventQuery per 4 plans instead of one per plan (0.25-0.47
// us each on the H100 host, bench/results/h100_dplan_check_312808a.txt), for 4 x this many bytes of
// staging lines in use. Larger plans reuse the newest slot (one query per plan): rotating them put
// each plan on lines last written 4 plans earlier, and the serving harness's cold b256 plan read
// slower in both pairs of that call (41.2 / 25.8 vs 31.5 / 24.3 us). 16 KiB keeps batch 1 (and
// Llama-2-7B's b1, ~13.5 KiB with 256 records) rotating with the launch records (not re-measured at
// this bound; a b256 image is ~80 KiB).
inline constexpr std::size_t kRotateStagingMaxBytes = 16384;

// Prefix sharing: the smallest node whose packs go WIDE (PackPlanConfig::wide_min_rows /
// wide_min_keys: 128-row items through the prefill FA2 tile, decode/kernels_wide.cu) instead of
// 32-row decode packs: at least kPackWideMinRows query rows (sharers x GQA group) AND
// kPackWideMinKeys keys of its own (its shared segment); DecodeOptions::prefix_wide_min_rows /
// prefix_wide_min_keys override them. History: 1024 rows (any length) from
// bench/results/h100_pat_48c877e.json and h100_pat_{,w64_,w256_}2da8800.json, where the wide
// kernel ran before the decode kernel: lower row bounds lost on small nodes (the wide kernel's
// longest item added to the decode kernel's time) and their gains were all on 4096-key nodes.
// With the overlapped launch (kPackWideSplitMargin below) re-measured in one call
// (bench/results/h100_pat_{,w64_,w256_,w256k2048_,w64k4096_}7b298fb.json, each tree's time
// under this planner's split-or-serial choice: its "share" or "share_serial" row): against the
// 1024-row selector, from 256 rows any length 1.007x geomean over the 60 trees (8 faster, 6
// slower: 512-1024-key nodes, 32x8 B1-8-64 L512-512-512 0.89-0.91x), from 64 rows 0.979x (28
// slower), from 64 rows with >= 4096 keys 1.009x (but 0.69x where a 2048-key root lost its wide
// items: 64x8 B1-256 L2048-512), from 256 rows with >= 2048 keys 1.010x: the 4 trees it makes
// wide are faster (16x8 / 32x32 B1-256 L4096-128 1.27x / 1.20x, 64x8 B1-32 L2048-512 1.17x,
// L4096-128 1.09x), the 56 others the same plans within the runs' spread (0.96-1.02x). So 256
// rows and 2048 keys.
inline constexpr int32_t kPackWideMinRows = 256;
inline constexpr int32_t kPackWideMinKeys = 2048;

// Overlapped wide launch (DecodeOptions::prefix_wide_overlap; PackPlanConfig::wide_overlap says
// how the planner uses them). kPackWideKeyCost: the time of one key of a wide (128-row) item in
// units of one key of a 32-row decode item, measured on H100 (bench/results/
// h100_pat_w64_2da8800.json, 64x8 B1-256 L4096-128): 32-row packs only 442.8 us for ~7940 keys
// per CTA (~56 ns per key, mostly from L2); wide from 64 rows 229.0 us with one 2048-key wide item
// per CTA (~100 ns per key) -> 2. kPackWideSplitMargin: the planner splits the CTAs between the
// two kernels when margin x (its split estimate) < (its serial estimate). The split estimate is
// pessimistic: the decode kernel is bound by memory, so fewer CTAs lose less than in proportion,
// and a wide CTA beside a decode CTA has the SM's tensor cores mostly to itself (32x8 B1-256
// L4096-128 ran two 1024-key wide items per wide CTA in 155 us, <= 76 ns per key, against ~100
// beside another wide CTA). Measured (bench/results/h100_pat_{,w64_,w256_,w256k2048_,w64k4096_}
// 7b298fb.json: the split always taken, "share", against "share_serial" in the same call; 99
// tree x selector rows with wide items): serial / split estimate >= 0.735 on 84 rows, where the
// split measured 0.98-1.58x of serial (geomean 1.17x; up to 1.58x on small nodes, whose wide
// items now run beside the decode kernel instead of before it); <= 0.625 on 15 rows, where it
// measured 0.86-1.006x (geomean 0.93x: 64x8 B1-256 / B1-32 / B4-64 L4096-128, 32x8 B4-64
// L4096-128, wide-bound plans whose 32 wide items per folded copy ran one per CTA serially and
// two per CTA split). 0.7 lies between (docs/perf-notes-decode.md "PAT overlapped wide launch").
inline constexpr float kPackWideKeyCost = 2.0f;
inline constexpr float kPackWideSplitMargin = 0.7f;

// Wide packs on the Hopper mainloop (DecodeOptions::prefix_wide_sm90) in plans the planner split
// (WorkPlan::wide_split): false, they keep the FA2 tile. An sm90 CTA fills its SM (384 threads x
// up to 168 registers, 224 KB), so the split deal's premise (one wide CTA beside one decode CTA
// per SM) fails and the decode grid loses whole SMs. Measured in one call (H100,
// bench/results/h100_pat_0b10d32.json, 12 tree rows with wide items, sm90 "share" vs the same plan
// on the FA2 tile "share_fa2"): the 10 split plans 0.86-0.91x on sm90 (32x32 B1-256 L2048-512
// 952.2 vs 859.2 us); the 2 serial plans 1.02x / 1.17x (64x8 B1-32 / B1-256 L4096-128, 64.5 vs
// 65.9 and 196.4 vs 230.7 us).
inline constexpr bool kPackWideSm90SplitPlans = false;

// The fixed cost of one wide item on the Hopper mainloop, in keys of streaming, for the planner's
// one-wave cut (PackPlanConfig::wide_item_keys, DecodeOptions::prefix_wide_sm90_wave): the first
// 128-key tile's load before any product (the pipeline fill, ~128 keys) plus the epilogue's 128
// partial rows (128 x d128 fp32 = 64 KB, the bytes of 128 keys of K and V at 16 bits) written,
// which the merge reads again (~128 more): ~256-384 keys; 256 taken. The cut is insensitive to
// it where the items are a node's equal chunks: one wave beats w waves for any value > 0 (64x8
// B1-32 L4096-128: 16 items of 512 keys per head class vs 32 of 256 keys in two waves).
// Estimated, not fitted.
inline constexpr int32_t kPackWideSm90ItemKeys = 256;

// Prefix sharing: whether a step's sharing plan is predicted faster than the standard decode plan
// of the same batch (DecodeOptions::prefix_cost_model; the decode wrapper falls back to the
// standard plan and kernel, plan_info().prefix_fallback, where it is not). The bytes a plan
// saves are not the whole cost: the sharing chain adds a merge launch and partial states, its
// kernel's items are 32-row tiles, and standard decode reads a shared page's repeats mostly
// from L2 (its sharers run at once). Both times are affine in per-CTA work, fitted in
// heuristics.cpp (H100 rows, which and how well). Work is counted in "keys" of 512 bytes (one
// key of one KV head at d128 in 16 bits; other head dims scale by their bytes).
struct PrefixShareCostInputs {
  // The standard decode plan (what the fallback runs) over the decode grid: each request's keys
  // of every KV head once (unique: each shared key once per KV head; repeat: the other sharers'
  // reads of it), per CTA; and whether it runs the CUDA-core path (groups 1-2 at d128).
  double unique_keys_per_cta = 0, repeat_keys_per_cta = 0;
  bool cuda_core_decode = false;
  // The sharing plan's decode-kernel (narrow) items, per CTA of the grid: keys of one-request
  // (private) items and of packs; the most loaded CTA's keys plus kPrefixShareItemKeys per item.
  double private_keys_per_cta = 0, pack_keys_per_cta = 0, max_cta_keys = 0;
  // Its wide-kernel items: the most loaded wide CTA's keys (0: no wide items).
  double max_wide_cta_keys = 0;
};
// The fixed cost of one narrow item in the makespan above, in keys (fitted with the rest).
inline constexpr double kPrefixShareItemKeys = 64;
// Fall back unless predicted share < kPrefixShareMargin x predicted decode (heuristics.cpp).
inline constexpr double kPrefixShareMargin = 0.98;
double predict_decode_us(const PrefixShareCostInputs& in);  // standard decode, H100 us
double predict_share_us(const PrefixShareCostInputs& in);   // the sharing plan, H100 us
bool prefix_share_pays(const PrefixShareCostInputs& in);

// The fixed grid of a persistent kernel: `ctas_per_sm` resident CTAs on each of `sm_count` SMs
// (at least one CTA per SM). Decode passes the smallest residency of all its kernels of the head
// dim (the path is chosen at plan time, the grid at construction, for CUDA graphs); prefill the
// chosen tile's occupancy.
int32_t persistent_grid(int32_t sm_count, int32_t ctas_per_sm);

// ---- POD (hybrid prefill + decode, src/pod/pod_plan.h) ----

// The cost model of the POD planner (its formulas: pod_plan.h): each kernel alone as an affine
// time (work / rate + fixed cost), the fused kernel's time from the two sides alone, and the
// measured region where kAuto fuses. Fitted to bench "pod" on H100 (pod_cost() in heuristics.cpp
// says which rows).
struct PodCost {
  double fa2_tflops = 0, fa2_us = 0;    // FA2 prefill kernel alone (the fused kernel's prefill body)
  double sm90_tflops = 0, sm90_us = 0;  // Hopper sm90 prefill alone (serial's prefill)
  double decode_gbps = 0, decode_us = 0;  // decode kernel alone (KV bytes)
  double overlap = 0;        // fused = max(P, D) + overlap * min(P, D) + fused_us (P: FA2 alone)
  double fused_us = 0;       // fixed cost of the fused launch
  // kAuto fuses only where the fused kernel measurably won: at most max_items_per_sm prefill
  // work items per SM (each SM then runs its prefill item beside a decode CTA) and decode alone
  // at least min_decode_over_prefill x the FA2 prefill alone (decode hides the slower prefill).
  int32_t max_items_per_sm = 0;
  double min_decode_over_prefill = 0;
  double min_gain = 0;       // and the predicted fused time at least this much below serial
  // SM partition (PodMode::kPartition; pod_plan.h): the sm90 prefill on SMs - k CTAs, the decode
  // kernel forked on a second stream, landing on the k SMs left free, then on all of them. Its
  // time model (PodPlanInfo::predicted_partition_us; fitted, ~7% mean error):
  double decode_gbps_per_sm = 0;   // decode's read rate per SM when it runs on few SMs
  double partition_prefill_slowdown = 0;  // the capped sm90 prefill beyond SMs / P
  double partition_us = 0;         // fork/join + the decode tail after the prefill
  int32_t partition_step = 0, partition_max_free = 0;  // candidate k: step, 2 step, .. max_free
};
const PodCost& pod_cost();

// The SM partition's choices (kAuto), from the predicted ratio x = decode alone / sm90 prefill
// alone (PodCost's rate lines), the prefill's 128-row query tiles per SM, and the decode path
// (tensor cores, or CUDA cores: GQA group < kTensorCoreMinGroup at head_dim 128). Bands measured
// on H100 (heuristics.cpp). The time model above is too coarse (~7%) to choose between gains of
// 5-30% and k's a few percent apart, so the choice is the measured bands'.
bool pod_partition_pays(double x, double tiles_per_sm, bool tensor_core_decode);
int32_t pod_partition_free_sms(double x, double tiles_per_sm, bool tensor_core_decode);
// Whether the partition's decode then runs the deeper CTA shape (kPodDeepDecodeWarps x
// kPodDeepDecodeStages) instead of the decode wrapper's default (PodOptions::partition_decode_*
// left 0 and k chosen by the bands; measured in heuristics.cpp).
bool pod_partition_deep_decode(double x, double tiles_per_sm, bool tensor_core_decode);
// Whether kAuto runs the fused kernel instead of the partition in x's band (where the partition
// pays: the band's k and shape stay kPartition's; measured in heuristics.cpp, 0e04bc4).
bool pod_band_fuses(double x, double tiles_per_sm, bool tensor_core_decode);
// The deeper shape: 8 warps x 2 per-warp stages (one CTA per SM at d128, 8 warps each; measured
// at d9292c4 against 4 x 3, the deep shape before: 8 x 2 won where either beat the default).
inline constexpr int32_t kPodDeepDecodeWarps = 8, kPodDeepDecodeStages = 2;

}  // namespace weft::heuristics
