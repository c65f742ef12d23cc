// Hopper (sm_90a) prefill mainloop: host-side declarations. Included by the dispatcher and the
// wrapper, which never see device code; the kernels are instantiated in src/prefill/sm90/*.cu.
//
// The sm90 kernel executes the SAME segmented, balanced plan as the FA2 kernel (work items of
// request segment x KV head x 128 query rows x KV range, partial slots merged by the shared merge
// kernel), planned with cta_q = 128 and cta_kv = block_n(head_dim) on a grid of one CTA per SM.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "prefill/kernel/params.h"
#include "weft/dtype.h"

namespace weft::prefill::sm90 {

inline constexpr int kBlockM = 128;  // query rows of a CTA tile (two consumer warpgroups x 64)
// Keys per pipeline stage: 128 at head_dim 64 / 128; 64 at head_dim 256, where a 128-key K or V
// stage would be 64 KB (Q 64 KB + two such stages of K and V exceed 227 KB) and S (32 fp32) next
// to the 128 fp32 of O keeps a consumer thread under its 240 registers.
constexpr int block_n(int head_dim) { return head_dim == 256 ? 64 : 128; }
// Paged V copy: one TMA box per page piece and 64-column half (shipped), or, in an experiments
// build (-DWEFT_SM90_PAGED_V_WHOLE=ON), one box per piece for all halves (sm90_params.h: the V
// stage layout). Why try it: the shipped paged rows ran at ~2M TMA boxes per ms over the GPU
// whatever the head dim, page-128 pools (4 boxes per stage) as fast as ragged (H100 run of
// 5b2fcc8, docs/perf-notes-prefill.md); whole-page V boxes cut a page-16 d128 stage from 32 to
// 24 boxes. It passed no device test yet, hence not shipped.
#ifdef WEFT_SM90_PAGED_V_WHOLE
inline constexpr bool kWholePageV = true;
#else
inline constexpr bool kWholePageV = false;
#endif

// Start latency, experiments build only (-DWEFT_SM90_FAST_START=ON). Why try it: short causal
// prompts (L1024-4096) and chunked c512 ran at 0.6-0.86x FlashInfer's sm90 backend while long
// prompts reach ~0.9x, and a plan that launches no merge kernel timed 0.042 ms against 0.051 ms
// with the (no-op) merge at L1024 (perf notes): launch and per-item latency, not mainloop rate.
// Before its first TMA the TMA warp waited for two chains of dependent global loads in turn (the
// map staging's plan extents, then the first item's geometry), then for Q and K from HBM; and
// every later item's Q came from HBM only after the previous item released the Q buffer. Here:
//  - warp 1 of the producer warpgroup (idle for 16-bit pools) loads the first item's geometry
//    while the TMA warp stages the maps, and prefetches that item's Q boxes and, ragged, its first
//    K/V tile into L2 through the kernel-parameter maps;
//  - the TMA warp prefetches each later item's Q boxes into L2 as soon as it has the item's
//    geometry, before it waits for the Q buffer;
//  - thread 0 lets the dependent merge grid launch at once (griddepcontrol.launch_dependents;
//    the merge still waits for this grid's completion and memory before it reads partials).
// (Tried first: the items' geometry handed to the consumers through a shared-memory ring filled by
// warp 1: 260-430 bytes of consumer spills, as the earlier hand-off; not pursued.)
#ifdef WEFT_SM90_FAST_START
inline constexpr bool kFastStart = true;
#else
inline constexpr bool kFastStart = false;
#endif

// What the tensor maps need beyond PrefillParams (extents of the tensors).
struct Shapes {
  int64_t q_rows = 0;      // tokens of Q
  int32_t num_qo_heads = 0;
  int32_t num_kv_heads = 0;
  int64_t k_rows = 0;      // ragged: rows (tokens) of K; paged: pages of the K pool
  int64_t v_rows = 0;
  void* map_scratch = nullptr;  // kMapBytesPerCta per CTA of device memory (in the workspace)
};

// Graph safety of the tensor maps: a captured launch keeps its kernel parameters, while a later
// plan() may change the number of query tokens and (ragged) keys. So each CTA copies the maps
// into its slot of the workspace and sets the row extents from the plan in device memory (Q:
// the plan's last query token; ragged K/V: kv_indptr[batch]) before its first TMA: rows past a
// request's end are then zero-filled, never read past the tensor, whatever the shapes given to
// the run() that was captured. The slots follow the plan's workspace layout.
inline constexpr std::size_t kMapBytesPerCta = 3 * 128;
inline std::size_t map_scratch_offset(std::size_t plan_bytes) { return (plan_bytes + 127) / 128 * 128; }
inline std::size_t workspace_bytes(std::size_t plan_bytes, int32_t num_ctas) {
  return map_scratch_offset(plan_bytes) + kMapBytesPerCta * static_cast<std::size_t>(num_ctas);
}

struct Entry {
  void (*launch)(const PrefillParams&, const Shapes&, int, cudaStream_t) = nullptr;
  int (*occupancy)() = nullptr;
};

// KV: the K/V element type, T, or (fp8 pools: bf16 T, paged) __nv_fp8_e4m3 / __nv_fp8_e5m2.
template <int D, class T, class KV>
void launch_prefill_sm90(const PrefillParams& p, const Shapes& s, int num_ctas, cudaStream_t stream);
template <int D, class T, class KV>
int occupancy_prefill_sm90();

// Whether the sm90 mainloop can run this plan on `device` (compute capability 9.0, a head dim and
// dtype instantiated here, the GQA group a divisor of 128 (Q tile loaded as one TMA box of
// tokens x group heads), page sizes whose pages tile a stage of block_n(head_dim) keys). The caller also requires
// the heuristic's 128-row tile. PrefillPlanOptions::mainloop = kFA2 turns it off.
// kv_dtype: the K/V pools' type (dtype, or fp8 e4m3 / e5m2: instantiated for bf16 q at head_dim
// 128, paged pools only).
bool eligible(int device, int32_t head_dim, DType dtype, int32_t group_size, bool paged,
              int64_t page_size, DType kv_dtype);
// The device-independent part of eligible() (host-testable): an instance exists and the GQA
// group and page size fit the kernel.
bool shape_supported(int32_t head_dim, DType dtype, int32_t group_size, bool paged, int64_t page_size,
                     DType kv_dtype);
// The (head_dim, dtype, kv_dtype) instance; an empty Entry when not instantiated.
Entry find(int32_t head_dim, DType dtype, DType kv_dtype);

// Number of sm90 kernel launches issued by this process (tests check which mainloop ran).
uint64_t launch_count();
void note_launch();

}  // namespace weft::prefill::sm90

#define WEFT_PREFILL_SM90_INSTANCE_KV(D, T, KV)                                                      \
  namespace weft::prefill::sm90 {                                                                    \
  template void launch_prefill_sm90<D, T, KV>(const PrefillParams&, const Shapes&, int, cudaStream_t); \
  template int occupancy_prefill_sm90<D, T, KV>();                                                   \
  }
#define WEFT_PREFILL_SM90_INSTANCE(D, T) WEFT_PREFILL_SM90_INSTANCE_KV(D, T, T)
