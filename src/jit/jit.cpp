// weft::jit::Variant (include/weft/jit.h) and the machinery of jit_impl.h: images from the disk
// cache or NVRTC, loading through CUDA's library management API, and launches.
#include <chrono>
#include <cstring>
#include <regex>

#include "common/cuda_check.h"
#include "jit/jit_impl.h"
#include "jit/kernel_source.h"
#include "jit/paths.h"
#include "weft/error.h"
#include "weft/version.h"

namespace weft::jit_detail {
namespace {

std::size_t round_up(std::size_t x, std::size_t a) { return (x + a - 1) / a * a; }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Options that change the image (the include directories do not: their contents are in the key
// through the headers' digest, so a cache stays valid when the installation moves).
std::vector<std::string> image_options(const Options& opt, const std::string& arch) {
  std::vector<std::string> o{"-arch=" + arch, "-std=c++17", "-default-device", "-DNDEBUG"};
  o.insert(o.end(), opt.nvrtc_options.begin(), opt.nvrtc_options.end());
  return o;
}

}  // namespace

ParamLayout param_layout(const BaseLayout& base, std::size_t user_size, std::size_t user_align) {
  ParamLayout l;
  const std::size_t ua = user_align == 0 ? 1 : user_align;
  l.user_offset = round_up(base.size, ua);
  l.total = round_up(l.user_offset + (user_size == 0 ? 1 : user_size), std::max(ua, base.align));
  return l;
}

LoadedKernel::~LoadedKernel() {
  if (library != nullptr) cudaLibraryUnload(library);  // no throw from a destructor
}

void ParamBlock::init(const ParamLayout& layout, const void* user, std::size_t user_size) {
  bytes_.assign(layout.total, 0);
  if (user_size > 0) std::memcpy(bytes_.data() + layout.user_offset, user, user_size);
}
void ParamBlock::set_base(const void* base, std::size_t base_size) { std::memcpy(bytes_.data(), base, base_size); }

void launch(const LoadedKernel& k, ParamBlock& params, dim3 grid, dim3 block, std::size_t smem,
            cudaStream_t stream) {
  void* args[] = {params.data()};
  WEFT_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(k.kernel), grid, block, args, smem, stream));
}

void launch_scale_by_lse(const LoadedKernel& k, void* o, int64_t o_stride_token, int64_t o_stride_head,
                         const float* lse, int64_t lse_stride_token, int32_t tokens, int32_t heads,
                         int32_t head_dim, cudaStream_t stream) {
  long long ost = o_stride_token, osh = o_stride_head, lst = lse_stride_token;
  int t = tokens, h = heads, d = head_dim;
  void* args[] = {&o, &ost, &osh, &lse, &lst, &t, &h, &d};
  // One warp per (token, head) row, 8 warps per block.
  const int64_t rows = int64_t(tokens) * heads;
  if (rows == 0) return;
  const dim3 grid(static_cast<unsigned>((rows + 7) / 8));
  WEFT_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(k.scale_by_lse), grid, dim3(256), args, 0, stream));
}

void check_jit_variant(const AttentionVariant& v) {
  if (v.jit == nullptr) return;
  WEFT_CHECK_ARG(v.alibi_slopes == nullptr, "variant.jit",
                 "a run-time compiled variant is not combined with alibi_slopes (write the bias as a logit hook)");
  WEFT_CHECK_ARG(v.jit_params != nullptr || v.jit->source().params_size == 0, "variant.jit_params",
                 "must point to the variant's parameters (" << v.jit->source().params_size << " bytes)");
}

std::string device_arch(int device) {
  int major = 0, minor = 0;
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  const bool specific = (major == 9 && minor == 0) || major == 10 || major == 12;
  return "sm_" + std::to_string(major) + std::to_string(minor) + (specific ? "a" : "");
}

}  // namespace weft::jit_detail

namespace weft::jit {
using namespace jit_detail;

std::vector<char> Variant::Impl::image(const KernelSpec& spec, const std::string& arch, bool* from_disk) {
  const BaseLayout base = base_layout(spec);
  const ParamLayout layout = param_layout(base, src.params_size, src.params_align);
  const std::string source = kernel_source(src, spec, base, layout);
  const std::vector<std::string> options = image_options(opt, arch);
  std::string material = "weft " + std::string(weft::version()) + "\nnvrtc " + nvrtc_version() + "\narch " + arch +
                         "\nheaders " + headers_digest + "\noptions";
  for (const std::string& o : options) material += " " + o;
  material += "\n" + source;
  const CacheKey key = make_cache_key(material);
  std::vector<char> cubin;
  const auto t0 = std::chrono::steady_clock::now();
  if (cache.load(key, cubin)) {
    *from_disk = true;
    ++stats.disk_hits;
    stats.load_ms += 1e3 * seconds_since(t0);
    return cubin;
  }
  *from_disk = false;
  std::vector<std::string> all = options;
  all.push_back("-I" + device_include);
  for (const std::string& d : cuda_includes) all.push_back("-I" + d);
  cubin = nvrtc_compile(source, src.name, all);
  ++stats.compiled;
  stats.compile_seconds += seconds_since(t0);
  cache.store(key, cubin);  // best effort
  return cubin;
}

std::shared_ptr<const LoadedKernel> Variant::Impl::get_kernel(const KernelSpec& spec, std::size_t smem_bytes) {
  int device = 0;
  WEFT_CUDA_CHECK(cudaGetDevice(&device));
  const std::string arch = device_arch(device);
  const std::string id = spec.str() + "@" + arch + "#" + std::to_string(device);
  std::lock_guard<std::mutex> lock(mu);
  auto it = kernels.find(id);
  if (it != kernels.end()) {
    ++stats.memory_hits;
    WEFT_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(it->second->kernel),
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_bytes)));
    return it->second;
  }
  bool from_disk = false;
  const std::vector<char> cubin = image(spec, arch, &from_disk);
  const auto t0 = std::chrono::steady_clock::now();
  auto k = std::make_shared<LoadedKernel>();
  WEFT_CUDA_CHECK(cudaLibraryLoadData(&k->library, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  WEFT_CUDA_CHECK(cudaLibraryGetKernel(&k->kernel, k->library, "weft_jit_kernel"));
  WEFT_CUDA_CHECK(cudaLibraryGetKernel(&k->scale_by_lse, k->library, "weft_jit_scale_by_lse"));
  void* flag = nullptr;
  std::size_t flag_bytes = 0;
  WEFT_CUDA_CHECK(cudaLibraryGetGlobal(&flag, &flag_bytes, k->library, "weft_jit_softmax"));
  int softmax = 1;
  WEFT_CUDA_CHECK(cudaMemcpy(&softmax, flag, sizeof(int), cudaMemcpyDeviceToHost));
  k->softmax = softmax != 0;
  k->layout = param_layout(base_layout(spec), src.params_size, src.params_align);
  WEFT_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(k->kernel),
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_bytes)));
  stats.load_ms += 1e3 * seconds_since(t0);
  kernels.emplace(id, k);
  return k;
}

// ---- public API ----

Variant::Variant(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Variant::~Variant() = default;

std::shared_ptr<Variant> Variant::create(const VariantSource& source, const Options& options) {
  const std::regex ident(R"([A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)*)");
  WEFT_CHECK_ARG(!source.source.empty(), "source.source", "empty variant source");
  WEFT_CHECK_ARG(std::regex_match(source.variant, ident), "source.variant", "not a C++ name: '" << source.variant << "'");
  WEFT_CHECK_ARG(std::regex_match(source.params, ident), "source.params", "not a C++ name: '" << source.params << "'");
  WEFT_CHECK_ARG(source.params_size <= kMaxParamsBytes, "source.params_size",
                 "at most " << kMaxParamsBytes << " bytes, got " << source.params_size);
  const std::size_t a = source.params_align;
  WEFT_CHECK_ARG(a >= 1 && a <= 16 && (a & (a - 1)) == 0 && (source.params_size % a) == 0, "source.params_align",
                 "a power of two <= 16 dividing params_size, got " << a);
  WEFT_CHECK_ARG(!source.name.empty() && source.name.find_first_of("\"\n\\") == std::string::npos, "source.name",
                 "a file name without quotes, backslashes or newlines");
  auto impl = std::make_unique<Impl>();
  impl->src = source;
  impl->opt = options;
  impl->device_include = find_device_include_dir(options.device_include_dir);
  impl->cuda_includes = find_cuda_include_dirs(options.cuda_include_dir);
  impl->headers_digest = directory_digest(impl->device_include);
  impl->cache = DiskCache(options.cache_dir);
  return std::shared_ptr<Variant>(new Variant(std::move(impl)));
}

const VariantSource& Variant::source() const { return impl_->src; }
const Options& Variant::options() const { return impl_->opt; }
const std::string& Variant::device_include_dir() const { return impl_->device_include; }
Stats Variant::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

std::vector<char> Variant::compile(const std::string& kind, const std::string& dtype, int32_t head_dim,
                                   const std::string& arch) {
  WEFT_CHECK_ARG(head_dim == 64 || head_dim == 128 || head_dim == 256, "head_dim",
                 "expected 64, 128 or 256, got " << head_dim);
  std::lock_guard<std::mutex> lock(impl_->mu);
  bool from_disk = false;
  return impl_->image(KernelSpec{kind, dtype, head_dim}, arch, &from_disk);
}

}  // namespace weft::jit
