// weft::Communicator: NCCL bootstrap, path choice (LSA / fallback / single rank), the fused
// entry point's validation and dispatch (LSA kernels, the world-1 kernel), the NCCL fallback.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <sstream>
#include <string>

#include "comm/comm_impl.h"
#include "comm/comm_validate.h"
#include "comm/partition.h"
#include "comm/selector.h"
#include "common/cuda_check.h"
#include "norm/norm_launch.h"
#include "norm/norm_validate.h"
#include "weft/comm.h"
#include "weft/validate.h"

namespace weft {

const char* comm_path_name(CommPath p) {
  switch (p) {
    case CommPath::kLsa: return "lsa";
    case CommPath::kNcclFallback: return "nccl_fallback";
    case CommPath::kSingleRank: return "single_rank";
  }
  return "unknown";
}

const char* allreduce_variant_name(AllReduceVariant v) {
  switch (v) {
    case AllReduceVariant::kAuto: return "auto";
    case AllReduceVariant::kOneShot: return "one_shot";
    case AllReduceVariant::kTwoShot: return "two_shot";
  }
  return "unknown";
}

const char* comm_kernel_name(CommKernel k) {
  switch (k) {
    case CommKernel::kAuto: return "auto";
    case CommKernel::kPush: return "push";
    case CommKernel::kCopyEngine: return "ce";
  }
  return "unknown";
}

namespace {

void check_kernel(CommKernel k, const char* name) {
  WEFT_CHECK_ARG(k == CommKernel::kAuto || k == CommKernel::kPush ||
                     k == CommKernel::kCopyEngine,
                 name,
                 "unknown value " << static_cast<int>(k));
}

void check_ce_chunks(int chunks, const char* name) {
  WEFT_CHECK_ARG(chunks >= 0 && chunks <= comm_detail::kMaxCeChunks, name,
                 "must be in [0, " << comm_detail::kMaxCeChunks << "] (0: by size), got " << chunks);
}

void check_options(const CommOptions& o) {
  WEFT_CHECK_ARG(o.max_tokens > 0, "options.max_tokens", "must be > 0, got " << o.max_tokens);
  norm_detail::check_hidden(o.max_hidden, "options.max_hidden");
  WEFT_CHECK_ARG(o.dtype == DType::kFloat16 || o.dtype == DType::kBFloat16, "options.dtype",
                 "expected f16 or bf16, got " << dtype_name(o.dtype));
  check_kernel(o.kernel, "options.kernel");
  check_ce_chunks(o.copy_engine_chunks, "options.copy_engine_chunks");
}

// Everything after the NCCL communicator exists. Collective on every rank.
void init(Communicator::Impl& im) {
  WEFT_NCCL_CHECK(ncclCommUserRank(im.comm, &im.rank));
  WEFT_NCCL_CHECK(ncclCommCount(im.comm, &im.world));
  WEFT_NCCL_CHECK(ncclCommCuDevice(im.comm, &im.device));
  int current = -1;
  WEFT_CUDA_CHECK(cudaGetDevice(&current));
  WEFT_CHECK_ARG(current == im.device, "comm",
                 "the NCCL communicator uses cuda:" << im.device << " but the current device is cuda:" << current);
  im.capacity = static_cast<std::size_t>(im.opt.max_tokens) * static_cast<std::size_t>(im.opt.max_hidden) *
                dtype_size(im.opt.dtype);
  im.one_shot_max_bytes = im.opt.one_shot_max_bytes;
  im.kernel = im.opt.kernel;
  im.ce_chunks = im.opt.copy_engine_chunks;
  WEFT_CUDA_CHECK(cudaMalloc(&im.state, comm_detail::kStateWords * sizeof(uint32_t)));
  WEFT_CUDA_CHECK(cudaMemset(im.state, 0, comm_detail::kStateWords * sizeof(uint32_t)));
  WEFT_CUDA_CHECK(cudaDeviceSynchronize());

  if (im.world == 1) {
    im.path = CommPath::kSingleRank;
    im.reason = "world size 1: no communication";
  } else if (im.opt.force_fallback) {
    im.path = CommPath::kNcclFallback;
    im.reason = "forced by CommOptions::force_fallback";
  } else if (im.world > kCommMaxWorld) {
    im.path = CommPath::kNcclFallback;
    im.reason = "world size " + std::to_string(im.world) + " > " + std::to_string(kCommMaxWorld) +
                " (the fused kernel reads at most 8 peers)";
  } else {
    const std::string why = comm_detail::lsa_setup(im);
    if (why.empty()) {
      im.path = CommPath::kLsa;
      im.reason = "NCCL symmetric memory, LSA team of " + std::to_string(im.world) + " ranks";
    } else {
      im.path = CommPath::kNcclFallback;
      im.reason = "LSA unavailable: " + why;
    }
  }
}

ncclDataType_t nccl_type(DType d) { return d == DType::kFloat16 ? ncclFloat16 : ncclBfloat16; }

}  // namespace

Communicator::Communicator(ncclComm_t comm, const CommOptions& options) : impl_(new Impl) {
  WEFT_CHECK_ARG(comm != nullptr, "comm", "must not be null");
  check_options(options);
  impl_->comm = comm;
  impl_->owned = false;
  impl_->opt = options;
  try {
    init(*impl_);
  } catch (...) {
    if (impl_->state) cudaFree(impl_->state);
    throw;
  }
}

Communicator::Communicator(const ncclUniqueId& id, int rank, int world_size, const CommOptions& options)
    : impl_(new Impl) {
  WEFT_CHECK_ARG(world_size >= 1, "world_size", "must be >= 1, got " << world_size);
  WEFT_CHECK_ARG(rank >= 0 && rank < world_size, "rank", "must be in [0, " << world_size << "), got " << rank);
  check_options(options);
  impl_->opt = options;
  WEFT_NCCL_CHECK(ncclCommInitRank(&impl_->comm, world_size, id, rank));
  impl_->owned = true;
  try {
    init(*impl_);
  } catch (...) {
    if (impl_->state) cudaFree(impl_->state);
    ncclCommDestroy(impl_->comm);
    throw;
  }
}

Communicator::~Communicator() {
  if (!impl_) return;
  Impl& im = *impl_;
  int prev = -1;
  cudaGetDevice(&prev);
  cudaSetDevice(im.device);
  cudaDeviceSynchronize();
  comm_detail::lsa_teardown(im);
  if (im.state) cudaFree(im.state);
  if (im.owned && im.comm) ncclCommDestroy(im.comm);
  if (prev >= 0) cudaSetDevice(prev);
}

ncclUniqueId Communicator::new_unique_id() {
  ncclUniqueId id;
  WEFT_NCCL_CHECK(ncclGetUniqueId(&id));
  return id;
}

int Communicator::rank() const { return impl_->rank; }
int Communicator::world_size() const { return impl_->world; }
int Communicator::device() const { return impl_->device; }
ncclComm_t Communicator::nccl_comm() const { return impl_->comm; }
CommPath Communicator::path() const { return impl_->path; }
const std::string& Communicator::path_reason() const { return impl_->reason; }
std::size_t Communicator::capacity_bytes() const { return impl_->capacity; }
void* Communicator::input_buffer() const {
  return impl_->path == CommPath::kLsa ? static_cast<char*>(impl_->sym) + impl_->in_off : nullptr;
}
void* Communicator::output_buffer() const {
  return impl_->path == CommPath::kLsa ? static_cast<char*>(impl_->sym) + impl_->out_off : nullptr;
}

CommKernel Communicator::kernel() const { return impl_->kernel; }
CommKernel Communicator::kernel_for(int64_t tokens, int64_t hidden, DType dtype) const {
  WEFT_CHECK_ARG(tokens >= 0, "tokens", "must be >= 0, got " << tokens);
  WEFT_CHECK_ARG(hidden > 0, "hidden", "must be > 0, got " << hidden);
  WEFT_CHECK_ARG(dtype == DType::kFloat16 || dtype == DType::kBFloat16, "dtype",
                 "expected f16 or bf16, got " << dtype_name(dtype));
  if (impl_->kernel != CommKernel::kAuto) return impl_->kernel;
  return comm_detail::select_kernel(tokens * hidden * static_cast<int64_t>(dtype_size(dtype)));
}
void Communicator::set_kernel(CommKernel k) {
  check_kernel(k, "kernel");
  impl_->kernel = k;
}

void Communicator::set_copy_engine_chunks(int chunks) {
  check_ce_chunks(chunks, "chunks");
  impl_->ce_chunks = chunks;
}

std::pair<int64_t, int64_t> Communicator::owned_tokens(int64_t tokens) const {
  const comm_detail::TokenRange r = comm_detail::owned_range(tokens, impl_->world, impl_->rank);
  return {r.begin, r.count};
}

AllReduceVariant Communicator::select_variant(int64_t tokens, int64_t hidden, DType dtype) const {
  return comm_detail::select_variant(tokens * hidden * static_cast<int64_t>(dtype_size(dtype)), impl_->world,
                                     impl_->one_shot_max_bytes);
}

void Communicator::check_remote_errors(cudaStream_t stream) {
  WEFT_CUDA_CHECK(cudaStreamSynchronize(stream));
  uint32_t bits = 0;
  WEFT_CUDA_CHECK(cudaMemcpy(&bits, impl_->state, sizeof(bits), cudaMemcpyDeviceToHost));
  if (bits == 0) return;
  WEFT_CUDA_CHECK(cudaMemset(impl_->state, 0, sizeof(uint32_t)));
  WEFT_CUDA_CHECK(cudaDeviceSynchronize());
  std::ostringstream os;
  os << "ranks disagreed on a fused_allreduce_add_rmsnorm call (the call was skipped on every rank):";
  using namespace comm_detail;
  if (bits & kMismatchTokens) os << " tokens";
  if (bits & kMismatchHidden) os << " hidden";
  if (bits & kMismatchDtype) os << " dtype";
  if (bits & kMismatchVariant) os << " variant";
  if (bits & kMismatchCtas) os << " num_ctas";
  if (bits & kMismatchSequence) os << " call_sequence";
  if (bits & kMismatchMagic) os << " header";
  os << " differ";
  throw Error("comm", os.str());
}

void fused_allreduce_add_rmsnorm(Communicator& comm, const TensorView& x, const TensorView& residual,
                                 const TensorView& weight, double eps, const TensorView& out, int num_ctas,
                                 cudaStream_t stream, AllReduceVariant variant) {
  Communicator::Impl& im = comm.impl();
  const comm_detail::FusedCall c =
      comm_detail::check_fused_args(x, residual, weight, eps, out, num_ctas, variant, im.capacity, im.device);
  if (c.tokens == 0) return;
  if (im.path == CommPath::kLsa || im.path == CommPath::kSingleRank) {
    comm_detail::FusedLaunch l;
    l.x = x.data;
    l.residual = residual.data;
    l.residual_stride = residual.strides[0];
    l.weight = weight.data;
    l.out = c.out;
    l.tokens = c.tokens;
    l.hidden = c.hidden;
    l.dtype = c.dtype;
    l.eps = static_cast<float>(eps);
    l.num_ctas = num_ctas;
    if (im.path == CommPath::kSingleRank) {  // the same reduce + norm code, one contribution
      comm_detail::launch_fused_single(l, stream);
      return;
    }
    AllReduceVariant v = variant;
    if (v == AllReduceVariant::kAuto) {
      v = comm.select_variant(c.tokens, c.hidden, c.dtype);
      // In place on the symmetric input: one-shot would overwrite rows peers still read.
      if (c.out == comm.input_buffer()) v = AllReduceVariant::kTwoShot;
    }
    l.one_shot = v == AllReduceVariant::kOneShot;
    l.kernel = comm.kernel_for(c.tokens, c.hidden, c.dtype);
    comm_detail::launch_fused_lsa(im, l, stream);
    return;
  }
  // Fallback: the all-reduced sum lands in `out` (x when in place), then the single-GPU fused
  // residual add + RMSNorm runs in place on it.
  WEFT_NCCL_CHECK(ncclAllReduce(x.data, c.out, static_cast<size_t>(c.tokens * c.hidden), nccl_type(c.dtype),
                                ncclSum, im.comm, stream));
  norm_detail::NormArgs a;
  a.x = c.out;
  a.x_stride = c.hidden;
  a.residual = residual.data;
  a.residual_stride = residual.strides[0];
  a.weight = weight.data;
  a.out = c.out;
  a.out_stride = c.hidden;
  a.tokens = c.tokens;
  a.hidden = c.hidden;
  a.eps = static_cast<float>(eps);
  a.fused = true;
  norm_detail::launch_rmsnorm(a, c.dtype, stream);
}

}  // namespace weft
