#include "jit/paths.h"

#include <dlfcn.h>
#include <nvrtc.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "jit/disk_cache.h"
#include "weft/error.h"

namespace weft::jit_detail {
namespace fs = std::filesystem;

std::string module_dir_of(const void* addr) {
  Dl_info info{};
  if (dladdr(addr, &info) == 0 || info.dli_fname == nullptr) return "";
  std::error_code ec;
  const fs::path p = fs::canonical(fs::path(info.dli_fname), ec);
  return ec ? fs::path(info.dli_fname).parent_path().string() : p.parent_path().string();
}

std::string find_device_include_dir(const std::string& override_dir) {
  auto ok = [](const fs::path& d) {
    std::error_code ec;
    return fs::is_regular_file(d / "jit" / "jit_variant.cuh", ec);
  };
  if (!override_dir.empty()) {
    WEFT_CHECK_ARG(ok(override_dir), "options.device_include_dir",
                   override_dir << " does not hold weft's device headers (jit/jit_variant.cuh)");
    return override_dir;
  }
  const std::string here = module_dir_of(reinterpret_cast<const void*>(&find_device_include_dir));
  fs::path d = here;
  for (int up = 0; up < 4 && !d.empty(); ++up, d = d.parent_path()) {
    const fs::path c = d / "include" / "weft" / "device";
    if (ok(c)) return c.string();
  }
  throw Error("options.device_include_dir",
              "weft's device headers were not found near " + (here.empty() ? std::string("the library") : here) +
                  " (expected <prefix>/include/weft/device); set Options::device_include_dir");
}

std::vector<std::string> find_cuda_include_dirs(const std::string& override_dir) {
  auto ok = [](const fs::path& d) {
    std::error_code ec;
    return fs::is_regular_file(d / "cuda_fp16.h", ec);
  };
  auto with_cccl = [](const fs::path& d) {
    std::vector<std::string> v{d.string()};
    std::error_code ec;
    if (fs::is_directory(d / "cccl" / "cuda", ec)) v.push_back((d / "cccl").string());
    return v;
  };
  if (!override_dir.empty()) {
    WEFT_CHECK_ARG(ok(override_dir), "options.cuda_include_dir", override_dir << " has no cuda_fp16.h");
    return with_cccl(override_dir);
  }
  const std::string lib = module_dir_of(reinterpret_cast<const void*>(&nvrtcVersion));
  if (!lib.empty()) {
    const fs::path l = lib;
    for (const fs::path& c : {l.parent_path() / "include", l.parent_path().parent_path() / "include"})
      if (ok(c)) return with_cccl(c);
  }
#ifdef WEFT_CUDA_INCLUDE_DIR
  if (ok(WEFT_CUDA_INCLUDE_DIR)) return with_cccl(WEFT_CUDA_INCLUDE_DIR);
#endif
  throw Error("options.cuda_include_dir",
              "CUDA's headers (cuda_fp16.h, cccl/) were not found next to libnvrtc (" + lib +
                  "); set Options::cuda_include_dir");
}

std::string directory_digest(const std::string& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::string material;
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    material += fs::relative(f, dir).string();
    material += '\0';
    material.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    material += '\0';
  }
  return make_cache_key(material).hex();
}

}  // namespace weft::jit_detail
