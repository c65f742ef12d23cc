// Validation helpers shared by every entry point. Each throws weft::Error naming `name`.
// They run on the host, before any launch, so a rejected call writes nothing.
#pragma once
#include <cstdint>
#include <initializer_list>

#include "weft/error.h"
#include "weft/export.h"
#include "weft/tensor.h"

namespace weft WEFT_API { namespace check {  // (a nested `weft::check` takes no attribute)

// t.data non-null (unless t is empty) and on `device`.
void on_device(const TensorView& t, const char* name, Device device = Device::kCUDA);
void dtype_is(const TensorView& t, const char* name, DType expected);
void dtype_in(const TensorView& t, const char* name, std::initializer_list<DType> allowed);
void same_dtype(const TensorView& a, const char* a_name, const TensorView& b, const char* b_name);
void ndim_is(const TensorView& t, const char* name, int expected);
// Exact shape; -1 in `expected` matches any extent.
void shape_is(const TensorView& t, const char* name, std::initializer_list<int64_t> expected);
void same_shape(const TensorView& a, const char* a_name, const TensorView& b, const char* b_name);
// Innermost dimension has stride 1 and every other stride keeps rows `alignment` bytes aligned.
void inner_contiguous(const TensorView& t, const char* name, std::size_t alignment = 16);
void contiguous(const TensorView& t, const char* name);
// p is `bytes`-aligned. A null p passes (whether it may be null is on_device's / not_null's call).
void aligned(const void* p, const char* name, std::size_t bytes = 16);
void head_dim_supported(int64_t head_dim, const char* name);  // 64, 128 or 256
// value in [lo, hi]
void in_range(int64_t value, const char* name, int64_t lo, int64_t hi);
// indptr[0] == 0, non-decreasing, indptr[n] <= max_last (max_last < 0: no bound). Host memory.
// An empty step (batch 0) may pass null instead of {0}.
void indptr(const int32_t* indptr_host, int64_t batch, const char* name, int64_t max_last = -1);
// An indptr of `batch` requests has batch + 1 entries, or none at all when batch == 0.
void indptr_size(int64_t size, int64_t batch, const char* name);
// Device copy of an int32 index array of `size` entries (kernels load int32): non-null when
// size > 0, and 4-byte aligned whenever non-null, even at size 0 (a graph captured on an empty
// step replays with that pointer after a non-empty plan).
void device_index_array(const void* p, int64_t size, const char* name);
// every entry in [0, bound). Host memory.
void indices_below(const int32_t* values_host, int64_t n, const char* name, int64_t bound);
void not_null(const void* p, const char* name);
// The byte ranges of a's and b's elements (first to last byte, by their strides; empty views
// cover nothing) do not intersect. Throws naming b. Non-negative strides (writable checks them).
bool overlaps(const TensorView& a, const TensorView& b);
void disjoint(const TensorView& a, const char* a_name, const TensorView& b, const char* b_name);
// t can be written in parallel: strides >= 0 and no two elements share an address (each dim's
// stride, taken in increasing order, spans at least everything the smaller ones cover).
void writable(const TensorView& t, const char* name);
// Workspace: at least `needed` bytes and 256-byte aligned (the plan layout assumes it).
void workspace(const void* p, std::size_t bytes, std::size_t needed, const char* name);

}}  // namespace weft::check
