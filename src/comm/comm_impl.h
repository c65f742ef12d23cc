// Internal, host-only: the state behind weft::Communicator, shared by communicator.cpp (host
// logic, fallback) and the .cu files that need NCCL's device API (LSA setup, fused kernel).
#pragma once
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "comm/selector.h"
#include "weft/comm.h"
#include "weft/error.h"

#define WEFT_NCCL_CHECK(expr)                                                               \
  do {                                                                                      \
    ncclResult_t weft_nr_ = (expr);                                                         \
    if (weft_nr_ != ncclSuccess)                                                            \
      throw ::weft::Error("NCCL", std::string(#expr) + " failed: " + ncclGetErrorString(weft_nr_) + \
                                      " (" + ncclGetLastError(nullptr) + ")");             \
  } while (0)

namespace weft {

struct Communicator::Impl {
  ncclComm_t comm = nullptr;
  bool owned = false;
  int rank = 0, world = 1, device = 0;
  CommOptions opt;
  std::size_t capacity = 0;
  int64_t one_shot_max_bytes = -1;
  CommKernel kernel = CommKernel::kAuto;  // kAuto: by size per call (select_kernel)
  CommPath path = CommPath::kNcclFallback;
  std::string reason;

  // LSA path resources (see lsa_setup.cu). One symmetric allocation:
  //   [ctrl: 4 KiB, call headers | input: capacity | output: capacity | staging: stage_bytes],
  //   4 KiB aligned parts. Peers push their x rows into our staging area (fused kernel, phase A);
  //   stage_bytes = capacity + (world - 1) rows of kNormMaxHidden (two-shot rounds each rank's
  //   slice up to ceil(tokens / world) rows).
  void* sym = nullptr;
  std::size_t sym_bytes = 0;
  ncclWindow_t win = nullptr;
  std::size_t ctrl_off = 0, in_off = 0, out_off = 0, stage_off = 0, stage_bytes = 0;
  bool devcomm_created = false;
  // ncclDevComm, opaque here (its definition needs nccl_device.h). Oversized on purpose: if
  // the runtime NCCL's struct were larger than the headers', ncclDevCommCreate would write
  // into this padding instead of past the object (the setup also refuses a version mismatch).
  alignas(64) unsigned char devcomm[4096] = {};
  // Device words: [0] error bits of rank-agreement checks, [1 + c] call counter of CTA c,
  // [1 + kCommMaxCtas + c] mismatch bits CTA c found in the current call's first chunk (copy
  // engine: later chunk launches of the same call read them).
  uint32_t* state = nullptr;

  // Copy-engine kernel (CommKernel::kCopyEngine, fused_allreduce_ce.cu), created by lsa_setup:
  // two internal streams (pushes of x rows to the owners' staging; pulls of the owners'
  // normalized rows), events forking / joining them with the caller's stream per chunk, and the
  // window base of every rank as mapped in this process (ncclGetLsaPointer(win, 0, q), read once
  // at setup) for the copies' peer addresses.
  cudaStream_t ce_push = nullptr, ce_pull = nullptr;
  cudaEvent_t ce_start = nullptr, ce_pulled = nullptr;
  cudaEvent_t ce_pushed[comm_detail::kMaxCeChunks] = {}, ce_reduced[comm_detail::kMaxCeChunks] = {};
  char* peer_base[kCommMaxWorld] = {};
  int ce_chunks = 0;  // chunks per call; 0: by size (ce_chunk_count)
};

namespace comm_detail {

constexpr int kStateWords = 1 + 2 * kCommMaxCtas;

// Error bits written by the fused kernel when peers' call headers differ from this rank's.
enum MismatchBits : uint32_t {
  kMismatchTokens = 1u << 0,
  kMismatchHidden = 1u << 1,
  kMismatchDtype = 1u << 2,
  kMismatchVariant = 1u << 3,
  kMismatchCtas = 1u << 4,
  kMismatchSequence = 1u << 5,
  kMismatchMagic = 1u << 6,
};

// Tries to set up the LSA path. Returns "" on success, else the reason it is unavailable
// (everything it allocated is released). May throw weft::Error on CUDA failures.
std::string lsa_setup(Communicator::Impl& im);
void lsa_teardown(Communicator::Impl& im) noexcept;

struct FusedLaunch {
  const void* x = nullptr;
  void* residual = nullptr;
  int64_t residual_stride = 0;
  const void* weight = nullptr;
  void* out = nullptr;
  int64_t tokens = 0, hidden = 0;
  DType dtype = DType::kBFloat16;
  float eps = 1e-6f;
  bool one_shot = false;
  int num_ctas = 1;
  CommKernel kernel = CommKernel::kPush;  // never kAuto
};
void launch_fused_lsa(Communicator::Impl& im, const FusedLaunch& l, cudaStream_t stream);
// World size 1 (CommPath::kSingleRank, fused_single.cu): the multi-rank kernels' reduce + norm
// code on l.num_ctas CTAs, one contribution (x), no window; l.one_shot / l.kernel are ignored.
void launch_fused_single(const FusedLaunch& l, cudaStream_t stream);

}  // namespace comm_detail
}  // namespace weft
