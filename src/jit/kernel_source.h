// Internal: the CUDA source NVRTC compiles for one JIT specialization: weft's device headers, the
// user's variant (behind a #line directive, so NVRTC's messages carry the user's file name and
// line numbers), layout checks, and one extern "C" kernel `weft_jit_kernel` that runs the
// built-in decode mainloop / FA2 prefill body with the adapted variant (jit/jit_variant.cuh),
// plus `weft_jit_scale_by_lse` and `weft_jit_softmax` (the variant's kSoftmax).
#pragma once
#include <string>

#include "jit/jit_impl.h"

namespace weft::jit_detail {

// Throws weft::Error("jit.kind", ...) for an unknown specialization.
std::string kernel_source(const VariantSource& src, const KernelSpec& spec, const BaseLayout& base,
                          const ParamLayout& layout);

// NVRTC: source -> CUBIN for options (which carry -arch). A compile error throws weft::Error
// ("jit.source") with NVRTC's log and the first line of `user_file` it names.
std::vector<char> nvrtc_compile(const std::string& source, const std::string& user_file,
                                const std::vector<std::string>& options);
// "<major>.<minor>" of the NVRTC library in use (part of the cache key).
std::string nvrtc_version();

}  // namespace weft::jit_detail
