// Tensor-parallel Llama-style layer runner with TokenWeave's token split and compute /
// communication overlap (weft/comm.h, weft/token_split.h). Host-only header. Built with the comm
// component (needs NCCL; weft/config.h: WEFT_HAS_COMM) and links cuBLASLt.
//
// One rank's shard of a layer (Megatron split: QKV and gate/up column-parallel, O and down
// row-parallel), weights random (seeded), activations `dtype` (f16 or bf16), fp32 accumulation:
//   qkv   = x @ Wqkv^T                  [T, (hq + 2 hkv) d]   cuBLASLt
//   K, V  -> paged cache (append_paged_kv) at each token's position
//   attn  = causal attention of q on the paged cache (BatchPrefillWrapper)   [T, hq d]
//   o     = attn @ Wo^T                 [T, hidden]  (this rank's partial sum)
//   h2    = fused_allreduce_add_rmsnorm(o, residual, w_post_attn)          (residual += sum o)
//   gu    = h2 @ Wgu^T                  [T, 2 I]     (gate | up)
//   act   = silu(gate) * up             [T, I]
//   down  = act @ Wdown^T               [T, hidden]
//   out   = fused_allreduce_add_rmsnorm(down, residual, w_next_input)      (residual += sum down)
// So each layer is exactly two fused calls, and `out` is the NEXT layer's normalized input
// (TokenWeave's layout: the input RMSNorm of layer l + 1 is fused into layer l's second call).
// No rotary embedding: weft has no RoPE kernel (q and k enter attention as projected).
//
// Batch: requests with q_lens[b] new tokens each (concatenated in request order: the T rows of
// x) after ctx_lens[b] tokens already in the cache. plan() gives request b the pages
// [P_b, P_b + ceil((ctx_b + q_b) / page_size)) of the layer's pool (P_b = pages of the requests
// before it); cached context K/V is whatever the pool holds (random at construction).
//
// Schedules (TpLayerOptions::schedule):
//   kUnsplit  all T tokens, one stream: the non-overlapped reference.
//   kSplit    two halves A = rows [0, m1), B = [m1, T) (m1 from plan_token_split or
//             TpLayerOptions::split_tokens), still one stream, in the overlapped order:
//             A.attn, A.comm1, B.attn, B.comm1, A.mlp, A.comm2, B.mlp, B.comm2.
//   kOverlap  the same order on two streams (TokenWeave §3.1.2): compute (attn, mlp) on the
//             caller's stream, the fused calls on an internal comm stream, joined by events
//             only: A.comm1 runs during B.attn, B.comm1 during A.mlp, A.comm2 during B.mlp.
// Attention of half B reads half A's keys (a request cut by m1 keeps its prefix in A), so the
// halves' attention plans are chunked prefill: A's table stops at each request's last A token.
// Every schedule computes the same function; results agree to bf16 rounding (GEMM tiling and the
// attention plan may differ between a half and the whole; the fused calls are row-wise and
// bit-identical per row).
// RESIDUAL CONTRACT at world > 1: as in weft/comm.h, a two-shot fused call updates only the rows
// this rank owns; with a split, ownership is decided per half (owned_tokens(m1) of A,
// owned_tokens(T - m1) of B, offset by m1). The same split every layer keeps each token's
// residual on its owner. At world 1 every row is updated.
//
// run() is capturable in a CUDA graph (a whole layer step, both streams; tested), as long as
// plan() is not called between capture and replay with a different split or tile choice.
// WARM-UP: run one step with the same plan before relying on the overlap. With CUDA's lazy
// module loading, the first launch of a kernel (e.g. the cuBLASLt kernel of a new shape) may
// wait until kernels already running finish; on H100 a bench kernel that held SMs until the
// layer's end deadlocked once per new plan, which fits that cause (not isolated;
// docs/perf-notes-tp.md). A comm kernel that waits for its peers must not meet a first launch.
// Calls on one TpLayer (and on its Communicator) must be stream-ordered.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "weft/comm.h"
#include "weft/dtype.h"
#include "weft/export.h"
#include "weft/tensor.h"
#include "weft/token_split.h"

namespace weft WEFT_API {

// This rank's shard (model sizes divided by the world size).
struct TpLayerShape {
  int64_t hidden = 0;        // model hidden size (not sharded)
  int32_t num_qo_heads = 0;  // this rank's query heads
  int32_t num_kv_heads = 0;  // this rank's KV heads (num_qo_heads % num_kv_heads == 0)
  int32_t head_dim = 128;    // 64, 128 or 256
  int64_t intermediate = 0;  // this rank's MLP width
  DType dtype = DType::kBFloat16;
  double eps = 1e-5;
};

// Largest step the layer's buffers, page pool and attention workspaces hold.
struct TpLayerBounds {
  int64_t max_tokens = 0;     // T (rows of x)
  int32_t max_batch = 1;      // requests per step
  int64_t max_kv_tokens = 0;  // sum over requests of ctx_len + q_len
  int32_t page_size = 16;
};

enum class TpSchedule : int32_t { kUnsplit = 0, kSplit = 1, kOverlap = 2 };
const char* tp_schedule_name(TpSchedule s);

struct TpLayerOptions {
  TpSchedule schedule = TpSchedule::kOverlap;
  // CTAs of every fused call (kCommMaxCtas at most): the SMs the communication occupies while
  // the other half computes (TokenWeave: 2-8).
  int comm_ctas = 8;
  // m1 (rows of half A). 0: plan_token_split on the gate/up GEMM (the largest) with the tile
  // below and sm_count = the GEMMs' SM target (gemm_sms).
  // (If no tile-aligned cut exists, T <= tile_m, the layer runs unsplit.)
  int64_t split_tokens = 0;
  // SMs the GEMMs are planned for (cuBLASLt CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET) and the split
  // planner's sm_count. 0: SMs - comm_ctas under kOverlap (the comm CTAs hold their SMs: 512
  // threads x 128 registers fill an SM's register file), all SMs otherwise.
  int gemm_sms = 0;
  // The planner's GEMM tile: 128 x 256 is the bf16 tile cuBLASLt's heuristic returns for these
  // shapes on sm_90 (M >= 1K, N >= 2K); a tile-aligned cut keeps every half's M tiles full.
  int64_t tile_m = 128;
  int64_t tile_n = 256;
};

struct TpBatch {
  std::vector<int32_t> q_lens;    // new tokens per request this step (>= 0)
  std::vector<int32_t> ctx_lens;  // tokens already cached per request (>= 0)
};

class TpLayer {
 public:
  // Allocates weights (random, uniform(-1/sqrt(K), 1/sqrt(K)) for a GEMM of depth K; norm
  // weights uniform(0.5, 1.5)), the page pool (random), activations and workspaces on the
  // communicator's device. comm must outlive the layer; every rank constructs with the same
  // shape, bounds and seed (then the weights are those of one model, sharded identically).
  TpLayer(Communicator& comm, const TpLayerShape& shape, const TpLayerBounds& bounds, uint64_t seed);
  ~TpLayer();
  TpLayer(const TpLayer&) = delete;
  TpLayer& operator=(const TpLayer&) = delete;

  // Host: validates the batch against the bounds, decides the split, builds the page tables of
  // the whole batch and of both halves, plans attention and copies the index arrays on `stream`.
  // Not capturable. Throws weft::Error naming the argument.
  void plan(const TpBatch& batch, const TpLayerOptions& options, cudaStream_t stream);

  // One layer step. x: [T, hidden] this layer's normalized input (not modified); residual:
  // [T, hidden], updated in place; out: [T, hidden], the next layer's normalized input. All of
  // `dtype`, row-contiguous, on the communicator's device, pairwise disjoint.
  void run(const TensorView& x, const TensorView& residual, const TensorView& out, cudaStream_t stream);

  int64_t tokens() const;        // T of the last plan
  int64_t split_tokens() const;  // m1 of the last plan (T under kUnsplit)
  const TokenSplit& split() const;  // the planner's answer (when split_tokens was 0)
  const TpLayerShape& shape() const;

  // Views of the layer's weights and intermediates (tests, benchmarks): rows [0, T) of the
  // last run are valid after it completes.
  struct Views {
    TensorView w_qkv, w_o, w_gate_up, w_down;  // [N, K] row-major (out features x in features)
    TensorView w_post_attn_norm, w_next_norm;  // [hidden]
    TensorView qkv, attn, o, h2, gate_up, act, down;
    TensorView k_pages, v_pages;  // NHD [pages, page_size, hkv, d]
  };
  Views views() const;
  // Page table of the whole batch (host mirrors), as planned.
  const std::vector<int32_t>& kv_indptr() const;
  const std::vector<int32_t>& kv_indices() const;
  const std::vector<int32_t>& kv_last_page_len() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace weft
