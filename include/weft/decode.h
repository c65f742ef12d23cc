// Batch decode attention on the paged KV cache (one query token per request), load-balanced
// split-KV, CUDA-graph safe. Host-only header.
//
//   size_t ws_bytes = BatchDecodeWrapper::workspace_size(max_batch, Hq, Hkv, D);
//   void* ws;  cudaMalloc(&ws, ws_bytes);             // 256-byte aligned, kept for the wrapper's life
//   BatchDecodeWrapper dec(max_batch, Hq, Hkv, D);    // allocates its pinned staging buffer once
//   per generation step:
//     dec.plan(table, Hq, Hkv, D, page_size, DType::kBFloat16, KVLayout::kNHD, variant, ws, ws_bytes, s);
//     per layer: dec.run(q, cache, table, out, &lse_or_nullptr, s);   // capturable in a graph
//
// Shapes: q, out [batch, Hq, D] (f16/bf16, inner stride 1, 16-byte aligned rows);
// lse [batch, Hq] f32 (natural log; kv_len 0 -> -inf, O = 0). Semantics: include/weft/attention.h
// (sm_scale, logits_soft_cap, window_left; a causal mask is a no-op for one query token).
// KV pools: the planned dtype, or fp8 e4m3 / e5m2 with scales (weft/fp8.h, paged_kv.h) read by
// run() with a PageTable: q / out stay the planned dtype (today bf16 at head_dim 128; the default
// variant without prefix sharing; other combinations throw weft::Error naming the argument).
//
// CUDA graphs: run() launches a FIXED grid (persistent CTAs, one per SM slot) that reads its
// work from the workspace, and every pointer it passes is fixed (workspace offsets never move).
// A graph captured around run() stays valid after a later plan() with other lengths, as long
// as batch <= max_batch, the same workspace and the same q/out/lse/page-table buffers are used
// (the caller updates their contents), and dtype, layout, heads and head_dim are unchanged.
// plan() copies the plan with cudaMemcpyAsync on `stream` from a pinned staging buffer; it
// waits (host) for its previous copy to finish before overwriting the staging buffer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "weft/attention.h"
#include "weft/dtype.h"
#include "weft/export.h"
#include "weft/paged_kv.h"
#include "weft/tensor.h"

namespace weft WEFT_API {

// Kernel path. Both share the load pipeline, page lookup, planner, workspace and merge; they
// differ in the per-tile math. kAuto resolves with choose_decode_path() at plan time.
enum class DecodePath : int32_t {
  kAuto = 0,        // choose_decode_path()
  kCudaCore = 1,    // fp32 FMA dot products, exactly the group's rows (no padding)
  kTensorCore = 2,  // mma.sync m16n8k16, GQA group in the M dimension (padded to 16)
};
const char* decode_path_name(DecodePath p);

// The heuristic used by kAuto, set from bench "decode/path/{tc,cc}/..." and
// "decode/hdim/path/{tc,cc}/...": kCudaCore for GQA groups 1 and 2 at head_dim 128, kTensorCore
// otherwise (numbers in src/attention/heuristics.cpp).
DecodePath choose_decode_path(int32_t group_size, int32_t head_dim, DType dtype);
// Whether a path is compiled into this build.
bool decode_path_available(DecodePath p);

// What the current plan looks like (for logs, tests and benches).
struct DecodePlanInfo {
  int32_t batch = 0;
  int32_t num_ctas = 0;     // fixed grid of run()
  int32_t num_items = 0;
  int32_t num_merges = 0;   // split query tiles (merged in the decode kernel)
  int32_t max_chunk = 0;    // longest KV chunk of one work item
  int32_t tile_rows = 0;    // query rows per work item (16, or 32 for GQA groups > 16)
  int32_t num_packs = 0;    // items holding several requests' rows (DecodeOptions::share_prefixes)
  int32_t num_wide_items = 0;  // of them, items of > 32 rows run by the wide-pack kernel
                               // (DecodeOptions::prefix_wide_packs)
  bool wide_split = false;  // wide items on their own CTAs, the decode kernel started beside the
                            // wide kernel (DecodeOptions::prefix_wide_overlap)
  bool wide_sm90 = false;   // the wide items run on the Hopper (sm90 wgmma) mainloop, not the FA2
                            // tile (DecodeOptions::prefix_wide_sm90)
  int32_t wide_grid = 0;    // CTAs of the wide launch when cut for one wave of the sm90 tile
                            // (DecodeOptions::prefix_wide_sm90_wave); 0: num_ctas
  bool lazy_update = false; // share_prefixes: the previous plan updated in place (only private
                            // suffixes grew; its key ranges and page bases copied, not the plan)
  bool prefix_fallback = false;  // share_prefixes: the table had no pack, or the cost model predicted
                                 // no gain (DecodeOptions::prefix_cost_model): the standard decode
                                 // plan and kernel run instead (DecodeOptions::prefix_fallback)
  // share_prefixes with prefix_cost_model: the model's predicted times (H100 us) of the sharing plan
  // and of the standard decode plan of the last full plan() with packs (0: not evaluated).
  float predicted_share_us = 0.f, predicted_decode_us = 0.f;
  bool split = false;
  DecodePath path = DecodePath::kAuto;  // resolved path
  int32_t route = 0;        // DecodeRoute of this plan (kAuto resolved: kBalanced, kWorkQueue or kNoSplit)
  int32_t route_chunk = 0;  // work queue: keys per split of this plan
  bool prefix_sharing = false;  // a prefix-sharing work plan (share_prefixes; under kAuto the
                                // prefix_share route, route then says kBalanced)
};

// Kernel settings of a BatchDecodeWrapper, fixed at construction. 0 means the tuned default
// (src/attention/heuristics.cpp: 4 warps per CTA and 2 stages at every head_dim, with the
// measurements behind them). Other values are for tuning and benches ("decode/w<W>s<S>/..." rows);
// the constructor and workspace_size() reject values out of range with weft::Error naming the
// field ("options.warps_per_cta", "options.pipeline_stages").
inline constexpr int32_t kDecodeMaxWarpsPerCta = 8;

// Schedule of a decode step (DecodeOptions::route). Measured on H100 with Llama-3-8B's decode
// shape over eight serving-trace families: docs/perf-notes-serve.md.
enum class DecodeRoute : int32_t {
  kBalanced = 0,   // the balanced split-KV plan: fixed persistent grid, in-kernel merge (default)
  kWorkQueue = 1,  // compact work queue: one task per non-empty (row, KV head, split) of
                   // work_queue_chunk keys, a 1-D grid of the tasks, a segmented merge of split rows
  kNoSplit = 2,    // the work queue with one task per (row, KV head)
  kAuto = 3,       // per plan(), the route with the lowest predicted wall time (plan + upload +
                   // kernels) under a calibrated router table (router_table): balanced (with
                   // share_prefixes: the prefix-sharing plan), work queue at the table's chunks,
                   // or no split (these two only for variants the work queue runs: no custom mask,
                   // window, ALiBi or run-time compiled variant; other steps plan balanced)
};
const char* decode_route_name(DecodeRoute r);
inline constexpr int32_t kDecodeMaxPipelineStages = 8;
struct DecodeOptions {
  DecodePath path = DecodePath::kAuto;  // kAuto: choose_decode_path() at plan time
  int32_t warps_per_cta = 0;            // 0, or 2..kDecodeMaxWarpsPerCta warps per CTA
  int32_t pipeline_stages = 0;          // 0, or 2..kDecodeMaxPipelineStages per-warp cp.async stages
  // Prefix sharing (PAT-style packs): plan() finds the requests whose page lists start with the
  // same full pages (a prefix forest) and reads each shared page once for all of them, their
  // query rows packed into one work item; run() then launches the decode kernel and a merge.
  // Plans from the page table only (plan(), not plan_lengths()); GQA group <= 16, tensor-core
  // path, no ALiBi or sliding window yet (weft::Error otherwise). max_pack_items bounds the work
  // items a plan may have (it sizes the workspace; 0: 4 * max_batch * num_kv_heads + 2 * grid).
  // A plan() whose table has the same prefix structure as the previous plan's (same shared page
  // ids, only private suffixes grown or shrunk, same number of chunks each, same workspace) is a
  // LAZY UPDATE: the previous plan's items with new key ranges and page bases (a few us of host
  // time, only those arrays copied); it gives the same output bits as a full plan.
  bool share_prefixes = false;
  int32_t max_pack_items = 0;
  // With share_prefixes: a plan() whose table yields no pack (no two requests share a full page,
  // or the profit model packs none) plans and runs exactly what a wrapper without share_prefixes
  // would (balanced plan, kernel and path; plan_info().prefix_fallback), instead of the
  // work-plan kernel (~2% slower on such batches, docs/perf-notes-decode.md). The two are
  // different kernels: a CUDA graph captured around run() then replays only plans of the same
  // kind (re-capture when plan_info().prefix_fallback changes), or set this to false to keep the
  // work-plan kernel for every plan. The workspace holds either plan (workspace_size()).
  bool prefix_fallback = true;
  // With share_prefixes and prefix_fallback: a plan() whose sharing plan has packs but is not
  // predicted faster than the standard decode plan of the same batch (a cost model fitted on H100,
  // heuristics::prefix_share_pays: bytes at calibrated rates, the sharing chain's fixed cost, the
  // most loaded CTA; plan_info().predicted_share_us / predicted_decode_us) also falls back to the
  // standard decode (plan_info().prefix_fallback, num_packs still the sharing plan's). A lazy update
  // keeps the previous plan's choice (same structure and chunks). false: fall back only without packs.
  bool prefix_cost_model = true;
  // With share_prefixes at head_dim 128 (fp16 / bf16): a forest node whose sharers hold at least
  // prefix_wide_min_rows query rows (sharers x GQA group; 0: the measured default,
  // heuristics::kPackWideMinRows = 256) is read in WIDE packs of 128 rows (the prefill FA2 tile
  // with its Q rows gathered from the pack's requests, a second kernel beside or before the decode kernel;
  // its partial states go through the same merge) instead of 32-row decode packs: its keys are read
  // a quarter as often and the tensor cores work on 128-row tiles. A plan with wide items
  // (plan_info().num_wide_items > 0) launches one kernel more: a CUDA graph captured around run()
  // replays only plans of the same kind (as with prefix_fallback); false: never wide.
  bool prefix_wide_packs = true;
  int32_t prefix_wide_min_rows = 0;
  // ... and whose own shared keys (the node's segment of the page lists) number at least
  // prefix_wide_min_keys (0: the measured default, heuristics::kPackWideMinKeys = 2048).
  int32_t prefix_wide_min_keys = 0;
  // Wide and decode kernels side by side where the plan estimates it faster (programmatic
  // dependent launch; the plan then splits the grid between the two kinds of items,
  // plan_info().wide_split, heuristics::kPackWideSplitMargin) instead of the wide kernel first:
  // a wide node's longest item overlaps the decode kernel instead of adding to it. Same output
  // bits either way (each item writes its own partial slots; the same merge), and a graph
  // captured on either kind of plan replays the other correctly. Also in a serial plan cut for
  // one wave of the sm90 tile (plan_info().wide_grid > 0): the decode kernel launched the same
  // programmatic way, its CTAs taking the SMs the wave leaves free and each wide CTA's SM as it
  // exits (same bits). false: always one after the other, the decode kernel after the wide one's
  // completion.
  bool prefix_wide_overlap = true;
  // Wide packs on the Hopper mainloop (TMA + wgmma, the sm90 prefill kernel) instead of the FA2
  // tile, on an sm_90 device, where the plan's wide items hold consecutive requests (their query
  // rows are then one TMA box; true of a batch ordered by prefix), the GQA group divides 128 and
  // pages tile 128 keys; other plans keep the FA2 tile (plan_info().wide_sm90 says which ran).
  // Not the same bits as the FA2 tile: a CUDA graph captured around run() replays only plans of
  // the same kind (as with prefix_fallback). false: always the FA2 tile. Ignored where wide packs
  // do not run (without share_prefixes or prefix_wide_packs, head_dim other than 128) and on other
  // devices.
  bool prefix_wide_sm90 = true;
  // With prefix_wide_sm90, in plans that run the two kinds one after the other: the wide items cut
  // and dealt for ONE wave of the sm90 tile (one CTA per SM: the SM count), fewer and longer
  // items than the decode grid's two waves (fewer partial sources per row to merge), at the chunk
  // of the planner's wave cost model (PackPlanConfig::wide_wave_ctas, heuristics::
  // kPackWideSm90ItemKeys). Same math per key; another cut, so not the same output bits as false.
  // false: the wide items cut for the decode grid (the FA2 tile's cut). Ignored where
  // prefix_wide_sm90 is (and with it off): plan_info().wide_grid is then 0.
  bool prefix_wide_sm90_wave = true;
  // Route (DecodeRoute). The work-queue routes and kAuto plan from a native block table
  // (plan(BlockTable) / run(BlockTable)); plan(PageTable) and plan_lengths() with kAuto plan the
  // balanced route, with kWorkQueue / kNoSplit they throw. A work-queue plan's grid follows the
  // plan (one CTA per task), so a CUDA graph captured around run() replays only that plan: capture
  // with kBalanced. share_prefixes combines with kAuto only: its persistent candidate is then the
  // prefix-sharing plan (the table's prefix_share option, its shared keys estimated from the
  // rows' leading page ids; plan_info().route says kBalanced for it, num_packs > 0). Not with the
  // CUDA-core path (forced) or JIT variants; the work queue supports neither custom masks, windows
  // nor ALiBi (weft::Error naming the argument).
  DecodeRoute route = DecodeRoute::kBalanced;
  // kWorkQueue: keys per split, a positive multiple of 16 (0: 2048, the best fixed split on most
  // H100 trace families, docs/perf-notes-serve.md).
  int32_t work_queue_chunk = 0;
  // Work-queue tasks a plan may have (they size the workspace: 16 x head_dim fp32 of partial
  // output each); 0: 8 * max_batch * num_kv_heads + 1024. A kWorkQueue / kNoSplit plan with more
  // tasks throws naming "max_tasks"; kAuto never picks such a plan.
  int32_t max_tasks = 0;
  // kAuto: the text of a router table written by weft-serve-sim --calibrate (data/router/<gpu>.json,
  // committed per GPU), calibrated for this wrapper's head counts and head_dim (weft::Error naming
  // "options.router_table" when malformed or for another shape).
  std::string router_table;
};

// One level of an explicit multi-level cascade (BatchDecodeWrapper::plan_cascade): the caller
// states which requests share which pages, as FlashInfer's multi-level cascade wrapper takes per
// level an indptr over queries and the pages of each group, instead of plan() finding the sharing
// in the page ids. The level splits the batch into consecutive groups of requests (req_indptr:
// num_groups + 1 entries from 0 to batch); group g shares num_pages[g] pages, the next pages of
// each member's page list (in the page table) after the pages of the levels above. Levels nest (a
// group boundary of a level is one of every level below), the stated pages hold the same page
// ids in every member's list and are full pages of every member; the last, private pages of
// each request need no level. A group of one request or of no pages shares nothing.
struct CascadeLevel {
  std::vector<int32_t> req_indptr;
  std::vector<int32_t> num_pages;
};

namespace detail {
struct WEFT_HIDDEN DecodeWrapperAccess;  // the library's own callers (src/decode/wrapper_access.h)
}

class BatchDecodeWrapper {
 public:
  // Bytes of device workspace for plans of up to `max_batch` requests on the current device.
  // The grid (and with it the workspace) depends on the warps and stages: pass the same options
  // as to the constructor.
  static std::size_t workspace_size(int32_t max_batch, int32_t num_qo_heads, int32_t num_kv_heads,
                                    int32_t head_dim);
  static std::size_t workspace_size(int32_t max_batch, int32_t num_qo_heads, int32_t num_kv_heads,
                                    int32_t head_dim, const DecodeOptions& options);

  // Every later plan() must use these head counts / head_dim and batch <= max_batch.
  // `path` forces a kernel path (kAuto: choose_decode_path at plan time).
  BatchDecodeWrapper(int32_t max_batch, int32_t num_qo_heads, int32_t num_kv_heads, int32_t head_dim,
                     DecodePath path = DecodePath::kAuto);
  BatchDecodeWrapper(int32_t max_batch, int32_t num_qo_heads, int32_t num_kv_heads, int32_t head_dim,
                     const DecodeOptions& options);
  ~BatchDecodeWrapper();
  BatchDecodeWrapper(const BatchDecodeWrapper&) = delete;
  BatchDecodeWrapper& operator=(const BatchDecodeWrapper&) = delete;

  // Plan from the host mirrors of a page table (indptr, last_page_len).
  void plan(const PageTable& table, int32_t num_qo_heads, int32_t num_kv_heads, int32_t head_dim,
            int32_t page_size, DType dtype, KVLayout layout, const AttentionVariant& variant,
            void* workspace, std::size_t workspace_bytes, cudaStream_t stream);
  // Plan with explicitly stated shared levels (CascadeLevel; the wrapper must be built with
  // DecodeOptions::share_prefixes): the same kind of work plan as plan() with prefix sharing, its
  // packs over the stated groups' pages (weft::Error naming "levels" when a level is malformed,
  // does not nest, or states pages that its members do not hold identically as full pages).
  void plan_cascade(const PageTable& table, const std::vector<CascadeLevel>& levels, int32_t num_qo_heads,
                    int32_t num_kv_heads, int32_t head_dim, int32_t page_size, DType dtype, KVLayout layout,
                    const AttentionVariant& variant, void* workspace, std::size_t workspace_bytes,
                    cudaStream_t stream);
  // Plan from KV lengths (host array of `batch` entries).
  void plan_lengths(const int32_t* kv_lens, int32_t batch, int32_t num_qo_heads, int32_t num_kv_heads,
                    int32_t head_dim, int32_t page_size, DType dtype, KVLayout layout,
                    const AttentionVariant& variant, void* workspace, std::size_t workspace_bytes,
                    cudaStream_t stream);

  // Plan from a native block table (weft/paged_kv.h: lengths from its seq_lens host mirror,
  // validated with validate_block_table; no page table conversion). With share_prefixes the
  // rows' page ids feed the prefix forest directly. Run such a plan with the BlockTable run().
  void plan(const BlockTable& table, int32_t num_qo_heads, int32_t num_kv_heads, int32_t head_dim,
            int32_t page_size, DType dtype, KVLayout layout, const AttentionVariant& variant,
            void* workspace, std::size_t workspace_bytes, cudaStream_t stream);

  // Validates every argument against the plan (weft::Error naming it, nothing launched), then
  // launches the decode kernel (one launch: split tiles are merged inside it, in a fixed order).
  // lse may be nullptr unless the planned variant has return_lse.
  void run(const TensorView& q, const PagedKVCache& cache, const PageTable& table, const TensorView& out,
           const TensorView* lse, cudaStream_t stream);

  // The same over a native block table: the kernels read its rows in place (row b's page list
  // at block_ids + b * row_stride), split bounds from the plan's true per-row lengths. Bitwise
  // equal to run() over the equivalent BSR page table.
  void run(const TensorView& q, const PagedKVCache& cache, const BlockTable& table, const TensorView& out,
           const TensorView* lse, cudaStream_t stream);

  const DecodePlanInfo& plan_info() const { return info_; }
  int32_t num_ctas() const;

 private:
  friend struct detail::DecodeWrapperAccess;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  DecodePlanInfo info_;
};

}  // namespace weft
