#pragma once
#include "weft/export.h"
namespace weft WEFT_API {
// "0.1.0"
const char* version();
}  // namespace weft
