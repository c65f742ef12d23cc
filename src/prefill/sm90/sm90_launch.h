// Hopper (sm_90a) prefill mainloop: host-side declarations. Included by the dispatcher and the
// wrapper, which never see device code; the kernels are instantiated in src/prefill/sm90/*.cu.
//
// The sm90 kernel executes the SAME segmented, balanced plan as the FA2 kernel (work items of
// request segment x KV head x 128 query rows x KV range, partial slots merged by the shared merge
// kernel), planned with cta_q = 128 and cta_kv = 128 on a grid of one CTA per SM.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "prefill/kernel/params.h"
#include "weft/dtype.h"

namespace weft::prefill::sm90 {

inline constexpr int kBlockM = 128;  // query rows of a CTA tile (two consumer warpgroups x 64)
inline constexpr int kBlockN = 128;  // keys per pipeline stage

// What the tensor maps need beyond PrefillParams (extents of the tensors).
struct Shapes {
  int64_t q_rows = 0;      // tokens of Q
  int32_t num_qo_heads = 0;
  int32_t num_kv_heads = 0;
  int64_t k_rows = 0;      // ragged: rows (tokens) of K; paged: pages of the K pool
  int64_t v_rows = 0;
};

struct Entry {
  void (*launch)(const PrefillParams&, const Shapes&, int, cudaStream_t) = nullptr;
  int (*occupancy)() = nullptr;
};

template <int D, class T>
void launch_prefill_sm90(const PrefillParams& p, const Shapes& s, int num_ctas, cudaStream_t stream);
template <int D, class T>
int occupancy_prefill_sm90();

// Whether the sm90 mainloop can run this plan on `device` (compute capability 9.0, a head dim and
// dtype instantiated here, the GQA group a divisor of 128 (Q tile loaded as one TMA box of
// tokens x group heads), page sizes whose pages tile a 128-key stage). The caller also requires
// the heuristic's 128-row tile. WEFT_PREFILL_MAINLOOP=fa2 turns it off, =sm90 is the default.
bool eligible(int device, int32_t head_dim, DType dtype, int32_t group_size, bool paged,
              int64_t page_size);
Entry find(int32_t head_dim, DType dtype);

}  // namespace weft::prefill::sm90

#define WEFT_PREFILL_SM90_INSTANCE(D, T)                                                           \
  namespace weft::prefill::sm90 {                                                                \
  template void launch_prefill_sm90<D, T>(const PrefillParams&, const Shapes&, int, cudaStream_t); \
  template int occupancy_prefill_sm90<D, T>();                                                   \
  }
