// Element types understood by weft entry points. Host-only header (no CUDA needed).
#pragma once
#include <cstddef>
#include <cstdint>

#include "weft/export.h"

namespace weft WEFT_API {

enum class DType : int32_t {
  kFloat16 = 0,
  kBFloat16 = 1,
  kFloat32 = 2,
  kFloat8E4M3 = 3,  // fp8 KV page pools (weft/fp8.h, paged_kv.h): decode and append
  kFloat8E5M2 = 4,  // fp8 KV page pools, as e4m3
  kInt32 = 5,       // index arrays (page tables, indptr)
  kUInt8 = 6,       // bit-packed masks
};

// Bytes per element.
std::size_t dtype_size(DType t);
// "f16", "bf16", "f32", "fp8_e4m3", "fp8_e5m2", "i32", "u8".
const char* dtype_name(DType t);

}  // namespace weft
