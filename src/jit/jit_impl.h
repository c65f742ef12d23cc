// Internal: weft::jit's machinery behind include/weft/jit.h -- the kernels a plan asks for
// (compiled or read from the cache, then loaded), and their launch. Used by the decode and
// prefill wrappers (plan: get_kernel; run: ParamBlock + launch).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "jit/disk_cache.h"
#include "weft/attention.h"
#include "weft/jit.h"

namespace weft::jit_detail {

using jit::Options;
using jit::Stats;
using jit::Variant;
using jit::VariantSource;

// One specialization: kind "decode_tc1" | "decode_tc2" | "decode_tc4" | "decode_cc" |
// "prefill_q<Q>_kv<KV>", dtype "f16" | "bf16", head_dim 64 | 128 | 256.
struct KernelSpec {
  std::string kind;
  std::string dtype;
  int32_t head_dim = 0;
  std::string str() const { return kind + "_" + dtype + "_d" + std::to_string(head_dim); }
};

// Host size / alignment of a kernel's built-in parameter struct (decode::DecodeParams<T> or
// prefill::PrefillParams; layouts.cu): the JIT kernel's parameters are that struct then the
// user's (jit/jit_variant.cuh JitParams).
struct BaseLayout {
  std::size_t size = 0, align = 0;
};
BaseLayout base_layout(const KernelSpec& spec);

// Byte offset of the user parameters and total size of JitParams<Base, User>.
struct ParamLayout {
  std::size_t user_offset = 0, total = 0;
};
ParamLayout param_layout(const BaseLayout& base, std::size_t user_size, std::size_t user_align);

// A loaded kernel (and, for variants without softmax normalization, the output hook).
struct LoadedKernel {
  cudaLibrary_t library = nullptr;
  cudaKernel_t kernel = nullptr;
  cudaKernel_t scale_by_lse = nullptr;  // jit/jit_variant.cuh scale_rows_by_lse
  bool softmax = true;                  // the variant's kSoftmax
  ParamLayout layout;
  ~LoadedKernel();
};

// The kernel parameters of one launch: the base struct's bytes, then the plan's user params.
class ParamBlock {
 public:
  void init(const ParamLayout& layout, const void* user, std::size_t user_size);
  void set_base(const void* base, std::size_t base_size);
  void* data() { return bytes_.data(); }
  bool empty() const { return bytes_.empty(); }

 private:
  std::vector<unsigned char> bytes_;
};

// Launch of a JIT kernel with its ParamBlock (stream work only: graph capturable).
void launch(const LoadedKernel& k, ParamBlock& params, dim3 grid, dim3 block, std::size_t smem,
            cudaStream_t stream);
// O[t, h, :] *= exp(LSE[t, h]) (natural log) for tokens x heads rows of head_dim elements.
void launch_scale_by_lse(const LoadedKernel& k, void* o, int64_t o_stride_token, int64_t o_stride_head,
                         const float* lse, int64_t lse_stride_token, int32_t tokens, int32_t heads,
                         int32_t head_dim, cudaStream_t stream);

// The CUDA architecture NVRTC targets for `device`: sm_<major><minor>, with the "a" suffix on
// 9.0 / 10.x / 12.x (architecture-specific features, as the AOT build's sm_90a).
std::string device_arch(int device);

// Plan-time checks of AttentionVariant::jit / jit_params (weft::Error naming them).
void check_jit_variant(const AttentionVariant& v);

// Host copies of a plan's JIT state (wrappers keep one).
struct PlanState {
  std::shared_ptr<const LoadedKernel> kernel;
  ParamBlock params;
};

}  // namespace weft::jit_detail

namespace weft::jit {

// Hidden: internal (its members name weft::jit_detail types), though nested in a public class.
struct __attribute__((visibility("hidden"))) Variant::Impl {
  jit::VariantSource src;
  jit::Options opt;
  std::string device_include;  // weft's device headers (<prefix>/include/weft/device)
  std::vector<std::string> cuda_includes;  // toolkit include dir (+ its cccl/)
  std::string headers_digest;  // hash of every device header: part of the cache key
  jit_detail::DiskCache cache{""};

  mutable std::mutex mu;
  std::map<std::string, std::shared_ptr<const jit_detail::LoadedKernel>> kernels;  // spec + arch -> loaded
  jit::Stats stats;

  // The CUBIN of a specialization for `arch`: from the disk cache, else compiled (and stored).
  std::vector<char> image(const jit_detail::KernelSpec& spec, const std::string& arch, bool* from_disk);
  // Loaded kernel for the current device (plan time: may compile; sets its max dynamic shared
  // memory to `smem_bytes`).
  std::shared_ptr<const jit_detail::LoadedKernel> get_kernel(const jit_detail::KernelSpec& spec, std::size_t smem_bytes);
};

}  // namespace weft::jit
