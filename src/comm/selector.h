// Internal, pure C++: one-shot vs two-shot selection for the fused all-reduce + RMSNorm, the
// kernel under CommKernel::kAuto, and the copy-engine kernel's chunk count.
//
// Per rank (push schedule, all remote traffic is stores): one-shot pushes (N-1) * S bytes
// (S = tokens * hidden * bytes) and reduces all S itself; two-shot pushes (N-1)/N * S twice
// (reduce-scatter, all-gather) plus a local copy-out of (N-1)/N * S. Both use two barriers, so
// one-shot only wins for a handful of rows. Thresholds from the comm bench
// (bench/cases_comm.cu, numbers in selector.cpp); override per communicator
// (CommOptions::one_shot_max_bytes).
//
// The attention heuristics live in src/attention/heuristics.cpp; comm keeps its selector here
// because comm is an optional component (built only with NCCL), whose decisions no other
// component uses.
#pragma once
#include <cstdint>

#include "weft/comm.h"

namespace weft::comm_detail {

// Built-in table: world <= 2: 64 KiB; <= 4: 32 KiB; larger: 16 KiB.
int64_t default_one_shot_max_bytes(int world);
// one_shot_max_bytes < 0 -> default table. Returns kOneShot or kTwoShot.
AllReduceVariant select_variant(int64_t bytes, int world, int64_t one_shot_max_bytes);

// Kernel of a two-shot call when the communicator's kernel is kAuto:
// kCopyEngine from kCopyEngineMinBytes of x (tokens * hidden * bytes), kPush below.
constexpr int64_t kCopyEngineMinBytes = int64_t{16} << 20;
CommKernel select_kernel(int64_t bytes);

// Copy-engine kernel: chunks per call. requested in 1..kMaxCeChunks is taken as is (larger values
// are capped); 0: by size and world (one chunk per 8 MiB of x, at most 4 at world <= 2 and at
// most 2 from world 3 on).
constexpr int kMaxCeChunks = 8;
int ce_chunk_count(int64_t bytes, int world, int requested);

}  // namespace weft::comm_detail
