// Internal: where NVRTC finds its headers at run time, without paths baked in at build time:
// weft's device headers next to the library that runs (the installed <prefix>/include/weft/device,
// or the build tree's include/weft/device), CUDA's headers next to the libnvrtc in use.
#pragma once
#include <string>
#include <vector>

namespace weft::jit_detail {

// Directory of the shared object (or executable) that contains `addr` (dladdr); "" if unknown.
std::string module_dir_of(const void* addr);
// `override` if set; else the first of <d>/include/weft/device, <d>/../include/weft/device, ...
// (up to three levels above d = the directory of the module holding weft's code) that holds
// jit/jit_variant.cuh. Throws weft::Error("options.device_include_dir") when none does.
std::string find_device_include_dir(const std::string& override_dir);
// The CUDA include directory (cuda_fp16.h) and, when present, its cccl/ subdirectory (CCCL's
// <cuda/std/...>): `override` if set; else next to the loaded libnvrtc (<lib>/../include,
// <lib>/../../include); else the toolkit weft was built with. Throws weft::Error
// ("options.cuda_include_dir") when none has the headers.
std::vector<std::string> find_cuda_include_dirs(const std::string& override_dir);
// A digest (hex) of every file under dir (paths and contents, sorted by path).
std::string directory_digest(const std::string& dir);

}  // namespace weft::jit_detail
