#include "comm/selector.h"

#include <cstdlib>

namespace weft::comm_detail {

int64_t default_one_shot_max_bytes(int world) {
  if (world <= 2) return 512 << 10;
  if (world <= 4) return 256 << 10;
  return 128 << 10;
}

AllReduceVariant select_variant(int64_t bytes, int world, int64_t one_shot_max_bytes) {
  const int64_t limit = one_shot_max_bytes >= 0 ? one_shot_max_bytes : default_one_shot_max_bytes(world);
  return bytes <= limit ? AllReduceVariant::kOneShot : AllReduceVariant::kTwoShot;
}

int64_t one_shot_max_bytes_from_env(int64_t fallback) {
  const char* s = std::getenv("WEFT_COMM_ONESHOT_MAX_BYTES");
  if (s == nullptr || *s == '\0') return fallback;
  char* end = nullptr;
  const long long v = std::strtoll(s, &end, 10);
  if (end == s || *end != '\0' || v < 0) return fallback;
  return static_cast<int64_t>(v);
}

}  // namespace weft::comm_detail
