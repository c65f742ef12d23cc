// weft::Communicator and the fused all-reduce + residual add + RMSNorm (TokenWeave, without
// multicast). Host-only header: needs nccl.h (a host header) and the CUDA runtime API types.
//
// Setup. A Communicator wraps an NCCL communicator (borrowed, or created and owned from a
// ncclUniqueId; one process per GPU or one thread per GPU: construct all ranks concurrently,
// each thread with its device current). At construction, on every rank (collective calls):
//   * one symmetric allocation (ncclMemAlloc) registered with ncclCommWindowRegister(...,
//     NCCL_WIN_COLL_SYMMETRIC): [control | input | output | staging], input and output of
//     capacity_bytes() = max_tokens * max_hidden * dtype_size each, staging of capacity plus
//     (world - 1) rows of kNormMaxHidden (peers push their x rows there; all ranks must use the
//     same CommOptions);
//   * an ncclDevComm with 32 LSA barriers (one per CTA index; num_ctas <= 32);
//   * a check that every peer is load/store accessible (LSA team size == world size).
// If anything is missing (NCCL < 2.28, a runtime NCCL other than the headers' (unless
// options.allow_nccl_mismatch), no symmetric memory, a peer not LSA-reachable, world > 8, or
// options.force_fallback) the communicator uses the fallback path (ncclAllReduce, then
// fused_add_rmsnorm) and says why: path() and path_reason(). The library reads no environment
// variable: every setting is a CommOptions field.
//
// The fused call, per rank: x [tokens, hidden] holds this rank's partial sums.
//   residual' = round(residual + sum_over_ranks(x))     (fp32 sum in rank order 0..N-1, then +
//                                                         residual in fp32, rounded to dtype)
//   out       = rmsnorm(residual') * weight              (fp32, from the rounded residual)
// Variants (LSA path; every NVLink transfer is a store, see src/comm/fused_allreduce_norm.cu):
//   two-shot: rank r owns a contiguous 1/N slice of the tokens (owned_tokens(); may be empty);
//     every rank pushes its x rows of r's slice into r's staging; r sums them, adds the
//     residual, normalizes and stores the normalized rows into every peer's output
//     (reduce-scatter + norm + all-gather).
//     RESIDUAL CONTRACT: only the rows this rank owns are updated in `residual`; the other rows
//     are left untouched. Ownership is a pure function of (tokens, world_size, rank), so a model
//     calling this every layer with the same token count keeps each token's residual on its
//     owner (TokenWeave's layout). The owned rows are bit-identical to what one-shot computes.
//   one-shot: every rank reduces every token itself (no all-gather); all residual rows updated.
//     Best for small messages. kAuto picks with select_variant() (bytes and world size).
//   fallback: ncclAllReduce + fused_add_rmsnorm; all residual rows updated; NCCL's sum order.
//   single rank (world 1): residual' = round(residual + x), out = rmsnorm(residual') * weight,
//     all rows updated, by the same reduce + norm device code as the LSA kernels on num_ctas CTAs
//     (so the CTA count still sets how many SMs the call occupies); variant is ignored.
// `out` receives all tokens on every rank; an empty TensorView (ndim 0) means in place into x.
// x and out must be row-contiguous (stride == hidden); residual may have any 16-byte row stride.
// Results are deterministic and identical on all ranks (fixed peer order, no atomics).
// Zero copy: a producer may write x directly into input_buffer() (then pass that pointer as x)
// and a consumer may read output_buffer() (pass it as out): the copies are skipped. One-shot
// cannot write its output into input_buffer() (kAuto picks two-shot then; kOneShot throws).
//
// Ordering: calls on one communicator must be stream-ordered on each rank (the kernel keeps
// per-CTA state between calls; x may be written into input_buffer() only after the previous
// call on that stream). Every call is capturable in a CUDA graph (state lives on the device; the
// copy-engine kernel's internal streams fork from and join the caller's stream by events).
// Rank agreement: every rank must call with the same tokens, hidden, dtype, variant and
// num_ctas, in the same order. On the LSA path each call publishes a header (tokens, hidden,
// dtype, variant, num_ctas, call sequence number) through the symmetric window; after the first
// barrier every CTA compares all peers' headers with its own; on a mismatch every rank skips the
// computation (outputs and residual untouched; with the copy-engine kernel `out` receives stale
// rows, the residual is untouched) and records it; check_remote_errors() reports it.
// A num_ctas mismatch can still hang the CTAs that exist on one rank only (NCCL barriers have
// no timeout). The fallback path cannot detect mismatches (NCCL may hang).
//
// Multicast (NVLS, multimem.ld_reduce / multimem.st as in the paper) would be a second
// load/store policy of the same kernel behind WEFT_ENABLE_MULTIMEM; it is not implemented.
#pragma once
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "weft/dtype.h"
#include "weft/export.h"
#include "weft/tensor.h"

namespace weft WEFT_API {

enum class CommPath : int32_t {
  kLsa = 0,           // fused kernel over NCCL symmetric memory (load/store to peers)
  kNcclFallback = 1,  // ncclAllReduce + fused_add_rmsnorm
  kSingleRank = 2,    // world size 1: residual add + RMSNorm by the LSA kernels' reduce code on
                      // num_ctas CTAs (one contribution, no window; src/comm/fused_single.cu)
};
const char* comm_path_name(CommPath p);

enum class AllReduceVariant : int32_t { kAuto = 0, kOneShot = 1, kTwoShot = 2 };
const char* allreduce_variant_name(AllReduceVariant v);

// Implementation of the LSA path (bit-identical results; see src/comm/fused_common.cuh).
// kPush: register-staged 16-byte stores; the SMs (num_ctas of them) move every NVLink byte.
// (Value 2 was kBulk, a TMA bulk-copy variant of kPush that no selector picked: within 5% of
// kPush at 8 CTAs, slower than kCopyEngine from 16 MiB (docs/perf-notes-comm.md, change 2);
// removed with issue 26. Passing 2 is rejected.)
// kCopyEngine: the copy engines move every NVLink byte (cudaMemcpyAsync on two internal streams:
// x rows pushed to their owners' staging, the owners' normalized rows pulled into `out`) and the
// num_ctas CTAs only reduce, add and normalize the owned rows from local memory, chunk by chunk
// so that the copies of one chunk overlap the reduction of the next (two-shot only; one-shot
// calls use kPush). Why: one SM copies ~50 GB/s however it issues (docs/perf-notes-comm.md), so
// <= 8 SMs cannot also carry the ~1.5 S per rank of NVLink traffic; the copy engines reach
// ~390 GB/s over NVLink without any SM.
// kAuto: chosen per call by size (measured): kCopyEngine for two-shot calls of >= 16 MiB, kPush
// below (kernel_for()).
// Every rank must use the same kernel for a call.
enum class CommKernel : int32_t { kAuto = 0, kPush = 1, kCopyEngine = 3 };
const char* comm_kernel_name(CommKernel k);

// The fused kernel's CTA count range (LSA barriers are allocated per CTA index).
constexpr int kCommMaxCtas = 32;
// Largest world size the fused kernel supports (peers read per row, unrolled).
constexpr int kCommMaxWorld = 8;

struct CommOptions {
  // Capacity of the symmetric input / output buffers: max_tokens * max_hidden * bytes(dtype).
  // Any f16/bf16 call whose x fits in that many bytes is accepted.
  int64_t max_tokens = 8192;
  int64_t max_hidden = 8192;
  DType dtype = DType::kBFloat16;
  // Use the fallback path (ncclAllReduce + fused_add_rmsnorm) even where the LSA path works.
  bool force_fallback = false;
  // The LSA path needs the runtime NCCL to be the version of the headers weft was compiled with
  // (the device API is inline code over NCCL's structs, whose layout changed between 2.28 patch
  // releases; a mismatch may read wrong fields and hang). true: use it anyway (at your risk).
  bool allow_nccl_mismatch = false;
  // Selector: one-shot when tokens * hidden * bytes <= this; < 0: built-in table by world size.
  int64_t one_shot_max_bytes = -1;
  // Which LSA kernel runs the fused call (see CommKernel); can be changed later with
  // Communicator::set_kernel (same value on every rank, between calls).
  CommKernel kernel = CommKernel::kAuto;
  // Copy-engine kernel: chunks per call (1..8; the copies of chunk j overlap the reduction of
  // chunk j + 1); 0: chosen from the size of x and the world size.
  // Every rank must use the same value.
  int copy_engine_chunks = 0;
};

class Communicator {
 public:
  // Borrow an existing communicator (not destroyed by ~Communicator). Collective.
  Communicator(ncclComm_t comm, const CommOptions& options = CommOptions());
  // Create (ncclCommInitRank) and own a communicator. Collective; the calling thread's current
  // device is this rank's GPU.
  Communicator(const ncclUniqueId& id, int rank, int world_size,
               const CommOptions& options = CommOptions());
  ~Communicator();  // collective on the LSA path (window deregistration)
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  static ncclUniqueId new_unique_id();

  int rank() const;
  int world_size() const;
  int device() const;
  ncclComm_t nccl_comm() const;

  CommPath path() const;
  const std::string& path_reason() const;  // why this path (e.g. "LSA team size 2 != world 4")

  std::size_t capacity_bytes() const;
  void* input_buffer() const;   // symmetric input (null off the LSA path)
  void* output_buffer() const;  // symmetric output (null off the LSA path)

  // The LSA kernel setting for the next calls: a kernel, or kAuto (by size, see CommKernel).
  CommKernel kernel() const;
  // The kernel a call of this size runs (never kAuto; one-shot calls run kPush under kCopyEngine).
  CommKernel kernel_for(int64_t tokens, int64_t hidden, DType dtype) const;
  // Not collective, but every rank must switch identically between the same two calls.
  void set_kernel(CommKernel k);
  // CommOptions::copy_engine_chunks for the next calls (same value on every rank).
  void set_copy_engine_chunks(int chunks);

  // Tokens this rank owns in the two-shot schedule: {begin, count}.
  std::pair<int64_t, int64_t> owned_tokens(int64_t tokens) const;
  // kOneShot or kTwoShot for a call of this size (pure function of bytes and world size).
  AllReduceVariant select_variant(int64_t tokens, int64_t hidden, DType dtype) const;

  // Synchronizes `stream`; throws weft::Error("comm", ...) when a fused call on this rank found
  // that the ranks disagreed (see "Rank agreement"), then clears the record.
  void check_remote_errors(cudaStream_t stream);

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// See the header comment. num_ctas in [1, kCommMaxCtas] (TokenWeave: 2-8 SMs suffice).
// Throws weft::Error naming the argument before any work is enqueued.
void fused_allreduce_add_rmsnorm(Communicator& comm, const TensorView& x, const TensorView& residual,
                                 const TensorView& weight, double eps, const TensorView& out,
                                 int num_ctas, cudaStream_t stream,
                                 AllReduceVariant variant = AllReduceVariant::kAuto);

}  // namespace weft
