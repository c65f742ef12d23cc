#pragma once
namespace weft {
// "0.1.0"
const char* version();
}  // namespace weft
