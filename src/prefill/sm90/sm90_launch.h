// Hopper (sm_90a) prefill mainloop: host-side declarations. Included by the dispatcher and the
// wrapper, which never see device code; the kernels are instantiated in src/prefill/sm90/*.cu.
//
// The sm90 kernel executes the SAME segmented, balanced plan as the FA2 kernel (work items of
// request segment x KV head x 128 query rows x KV range, partial slots merged with the shared
// merge function inside the kernel, by the CTA that counts a tile's last slot: sm90_merge.cuh),
// planned with cta_q = 128 and cta_kv = block_n(head_dim) on a grid of one CTA per SM.
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

// Smallest GQA group whose Q rows may be gathered one token per box (Shapes::q_box_tokens = 1,
// sm90_kernel.cuh kGatherQ): a box of group heads x 128 bytes then covers whole 1024-byte atoms
// of the 128-byte swizzle, as the paged K/V pieces of >= 8 keys do (page sizes >= 8, tile_fits).
inline constexpr int kQGatherMinGroup = 8;

// What the tensor maps need beyond PrefillParams (extents of the tensors).
struct Shapes {
  int64_t q_rows = 0;      // tokens of Q
  int32_t num_qo_heads = 0;
  int32_t num_kv_heads = 0;
  int64_t k_rows = 0;      // ragged: rows (tokens) of K; paged: pages of the K pool
  int64_t v_rows = 0;
  void* map_scratch = nullptr;  // kMapBytesPerCta per CTA of device memory (in the workspace)
  // Tokens per Q box: 0 = kBlockM / group (the tile's rows as consecutive tokens); 1 = one token
  // (rows gathered from several tokens, group >= 8: decode's wide packs, sm90_kernel.cuh kGatherQ).
  int32_t q_box_tokens = 0;
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
// The tile's shape constraints (pure): the GQA group divides the 128-row tile (the Q box holds
// 128 / group tokens x group heads) and, paged, pages tile a stage of block_n(head_dim) keys.
constexpr bool tile_fits(int32_t head_dim, int32_t group_size, bool paged, int64_t page_size) {
  const int64_t bn = block_n(head_dim);
  if (group_size <= 0 || group_size > kBlockM || kBlockM % group_size != 0) return false;
  const bool divides = page_size >= 8 && page_size <= bn && bn % page_size == 0;
  const bool multiple = page_size >= bn && page_size % bn == 0;
  return !paged || divides || multiple;
}
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
