// Internal, pure C++: one-shot vs two-shot selection for the fused all-reduce + RMSNorm.
//
// Per rank, over NVLink: one-shot reads (N-1) * S bytes (S = tokens * hidden * bytes) and writes
// nothing remote; two-shot reads (N-1)/N * S and writes (N-1)/N * S (both link directions) plus
// a local copy-out, and its all-gather adds a dependent store -> barrier -> copy step. One-shot
// wins while the call is latency-bound; two-shot once bandwidth matters, and earlier for larger
// N (one-shot's traffic grows with N). The thresholds are starting points, to be tuned from the
// comm bench (bench/cases_comm.cu); override per communicator (CommOptions::one_shot_max_bytes)
// or by environment (WEFT_COMM_ONESHOT_MAX_BYTES).
#pragma once
#include <cstdint>

#include "weft/comm.h"

namespace weft::comm_detail {

// Built-in table: world <= 2: 512 KiB; <= 4: 256 KiB; larger: 128 KiB.
int64_t default_one_shot_max_bytes(int world);
// one_shot_max_bytes < 0 -> default table. Returns kOneShot or kTwoShot.
AllReduceVariant select_variant(int64_t bytes, int world, int64_t one_shot_max_bytes);
// Reads WEFT_COMM_ONESHOT_MAX_BYTES (>= 0) if set and valid; else `fallback`.
int64_t one_shot_max_bytes_from_env(int64_t fallback);

}  // namespace weft::comm_detail
