// Internal: host-side validation of append_paged_kv (no CUDA; unit-tested in CI).
#pragma once
#include "weft/paged_kv.h"

namespace weft::paged {

// Every check append_paged_kv makes before it launches, in order:
//   validate_paged_kv(cache, table);
//   new_k / new_v: CUDA, ndim 3, dtype == pools', shape [nnz, num_kv_heads, head_dim] (equal),
//     same device as the pools, inner stride 1 and 16-byte aligned rows;
//   batch_indices / positions: nnz entries each, host mirror and device pointer present (both
//     may be null when nnz == 0), device pointers 4-byte aligned whenever given;
//   batch_indices[i] in [0, batch), positions[i] in [0, kv_len(batch_indices[i]));
//   no two tokens target the same (page, slot) (the copy would race: result undefined).
// Reads host mirrors only; never touches device memory. Throws weft::Error naming the argument.
// Returns nnz.
int64_t validate_append(const TensorView& new_k, const TensorView& new_v,
                        const IndexArray& batch_indices, const IndexArray& positions,
                        const PagedKVCache& cache, const PageTable& table);

}  // namespace weft::paged
