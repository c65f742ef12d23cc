// Hopper prefill: kernel parameters (host-includable: CUDA driver API types only, no device code).
#pragma once
#include <cuda.h>

#include <cstdint>

#include "prefill/kernel/params.h"
#include "prefill/sm90/sm90_launch.h"
#include "weft/dtype.h"

namespace weft::prefill::sm90 {

// The plan/run parameters plus the tensor maps, passed by value as a __grid_constant__ kernel
// parameter (the TMA unit reads the maps from the parameter space; a graph captures them by
// value, so they depend only on pointers and extents fixed across re-plans: the tensors' own
// shapes, never the planned lengths).
struct KernelParams {
  CUtensorMap tm_q;  // [q_rows][Hq][D], box {64, group, 128 / group}: 128 packed rows
  CUtensorMap tm_k;  // ragged [rows][Hk][D] box {64, 1, 128}; paged (page, head, slot) box {64, min(ps, 128), 1, 1}
  CUtensorMap tm_v;  // ragged as tm_k; paged (page, head, half, slot) box {64, rows_per_copy, D / 64, 1, 1}
                     // fp8 pools (K and V): bytes, (page, head, slot) box {D, min(ps, 128), 1, 1}
  PrefillParams p;
  CUtensorMap* map_scratch = nullptr;  // 3 maps per CTA (see Shapes::map_scratch)
  int32_t rows_per_copy = 128;  // keys per TMA box: paged min(page_size, kBlockN); ragged kBlockN
  // V stage layout: pieces of v_piece_keys keys, piece p, half h, key r of the piece at
  // p * v_piece_bytes + h * v_half_bytes + r * 128. Ragged: one piece of kBlockN keys (the K
  // layout); paged (16-bit pools): pieces of rows_per_copy keys, one TMA box each for all head_dim
  // halves (the producer in sm90_producer.cuh says why). The P V wgmma reads it with
  // LBO = v_half_bytes (between 64-column halves) and SBO = v_sbo_bytes (between 8-key groups:
  // 1024 inside a piece; a piece when it holds 8 keys). fp8 pools: the widened stage has the K
  // layout (sm90_fp8.cuh).
  int32_t v_piece_shift = 7;  // log2(v_piece_keys)
  uint32_t v_half_bytes = 0, v_piece_bytes = 0, v_sbo_bytes = 0;
  // Byte offset of key 16 kk (P V k-step kk) in a V stage in 16-byte units (the descriptors'
  // address field), kk < 8: the same for every tile of the launch, so the consumers add it from
  // the parameter space instead of deriving it from the piece geometry per k-step.
  uint32_t v_kstep[8] = {};
};

// Encodes the three maps (cuTensorMapEncodeTiled through the runtime's driver entry point, so
// libweft links cudart only). 128-byte swizzle, boxes of 64 columns (one swizzle atom row).
// fp8 K/V (kv_dtype of one byte, paged): K and V as bytes, unswizzled, one box of
// {head_dim, min(page_size, kBlockN)} per page piece (sm90_fp8.cuh reads [kBlockN][D] bytes).
void make_tensor_maps(KernelParams& kp, const Shapes& s, DType dtype, DType kv_dtype, int head_dim);

}  // namespace weft::prefill::sm90
