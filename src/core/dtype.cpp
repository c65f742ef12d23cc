#include "weft/dtype.h"

#include "weft/config.h"
#include "weft/error.h"
#include "weft/version.h"

namespace weft {

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
    case DType::kFloat32: return 4;
    case DType::kFloat8E4M3: return 1;
    case DType::kFloat8E5M2: return 1;
    case DType::kInt32: return 4;
    case DType::kUInt8: return 1;
  }
  throw Error("dtype", "unknown DType value " + std::to_string(static_cast<int>(t)));
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat16: return "f16";
    case DType::kBFloat16: return "bf16";
    case DType::kFloat32: return "f32";
    case DType::kFloat8E4M3: return "fp8_e4m3";
    case DType::kFloat8E5M2: return "fp8_e5m2";
    case DType::kInt32: return "i32";
    case DType::kUInt8: return "u8";
  }
  return "unknown";
}

const char* version() { return WEFT_VERSION; }

}  // namespace weft
