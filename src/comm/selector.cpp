#include "comm/selector.h"

#include <algorithm>

namespace weft::comm_detail {

int64_t default_one_shot_max_bytes(int world) {
  // Measured (4xH200, push schedule, hidden 8192 bf16, docs/perf-notes-comm.md): two-shot beats
  // one-shot at every measured size (>= 128 tokens = 2 MiB) and CTA count, e.g. world 4 t128:
  // two-shot 33 / 27 us vs one-shot 61 / 47 us at 8 / 16 CTAs; world 2 t128: 31 / 23 vs 39 / 28.
  // One-shot only saves the copy-out phase, which matters only for a few rows: kept for
  // <= 4 / 2 / 1 rows of 8192 (unmeasured below 2 MiB; override by CommOptions::one_shot_max_bytes).
  if (world <= 2) return 64 << 10;
  if (world <= 4) return 32 << 10;
  return 16 << 10;
}

AllReduceVariant select_variant(int64_t bytes, int world, int64_t one_shot_max_bytes) {
  const int64_t limit = one_shot_max_bytes >= 0 ? one_shot_max_bytes : default_one_shot_max_bytes(world);
  return bytes <= limit ? AllReduceVariant::kOneShot : AllReduceVariant::kTwoShot;
}

CommKernel select_kernel(int64_t bytes) {
  // Measured at 8 CTAs, hidden 8192 bf16 (docs/perf-notes-comm.md, h200x4_comm_ce_277271b.json):
  // the copy engine is faster than push from 1K tokens (16 MiB) at world 4 and 2 (world 4, 8K:
  // 0.96 vs 1.40 ms), ties at 512 tokens and is slower at 128 (52 vs 34 us at world 4: each
  // cudaMemcpyAsync and event adds a few us that a 2 MiB call cannot hide).
  return bytes >= kCopyEngineMinBytes ? CommKernel::kCopyEngine : CommKernel::kPush;
}

int ce_chunk_count(int64_t bytes, int world, int requested) {
  if (requested > 0) return std::min(requested, kMaxCeChunks);
  // Best K at 8 CTAs on 2 and 4 H200 (hidden 8192 bf16), 512-thread reduce CTAs (d03205f,
  // bench/results/h200x4_comm_ce_chunks_streams_d03205f.json): 1 at 128 and 512 tokens (more
  // chunks add ~7 us each of copy and launch set-up), 2 at 1K. From 2K on, world 2 (the reduce
  // sets the time) is fastest at 4 (8K: 924 against 991 us at 2), world 4 (the copies set it)
  // at 2 (8K: 876 against 945 us at 4; 4K: 467 against 508; 2K: 258 against 295). One chunk per
  // 8 MiB of x, at most 4 at world <= 2 and 2 above (worlds 3 and > 4 unmeasured: they take the
  // world-4 cap, whose copies also dominate).
  constexpr int64_t kBytesPerChunk = int64_t{8} << 20;
  const int64_t max_auto_chunks = world <= 2 ? 4 : 2;
  return static_cast<int>(std::clamp<int64_t>(bytes / kBytesPerChunk, 1, max_auto_chunks));
}

}  // namespace weft::comm_detail
