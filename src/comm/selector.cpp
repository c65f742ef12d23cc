#include "comm/selector.h"

#include <cstdlib>

namespace weft::comm_detail {

int64_t default_one_shot_max_bytes(int world) {
  // Measured (4xH200, push schedule, hidden 8192 bf16, docs/perf-notes-comm.md): two-shot beats
  // one-shot at every measured size (>= 128 tokens = 2 MiB) and CTA count, e.g. world 4 t128:
  // two-shot 33 / 27 us vs one-shot 61 / 47 us at 8 / 16 CTAs; world 2 t128: 31 / 23 vs 39 / 28.
  // One-shot only saves the copy-out phase, which matters only for a few rows: kept for
  // <= 4 / 2 / 1 rows of 8192 (unmeasured below 2 MiB; override by WEFT_COMM_ONESHOT_MAX_BYTES).
  if (world <= 2) return 64 << 10;
  if (world <= 4) return 32 << 10;
  return 16 << 10;
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
