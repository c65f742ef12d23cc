#pragma once
#include "weft/export.h"
namespace weft WEFT_API {
// The library's version, e.g. "0.1.0" (WEFT_VERSION of weft/config.h, from CMake's project()).
const char* version();
}  // namespace weft
