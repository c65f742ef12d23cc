// Compiled by the host C++ compiler only: proves the public headers need no nvcc. The umbrella
// header includes every public header of this build (comm.h when comm is built), and the program
// links libweft.so, which exports the public API only.
#include <weft/weft.h>

#include <cstdio>
#include <cstring>

int main() {
  weft::TensorView t(nullptr, weft::DType::kBFloat16, {0, 8, 128});
  // weft/config.h (through weft.h) holds the version CMake's project() set.
  if (t.numel() != 0 || std::strcmp(weft::version(), WEFT_VERSION) != 0) return 1;
  try {
    weft::check::head_dim_supported(96, "head_dim");
    return 1;
  } catch (const weft::Error& e) {
    if (e.argument() != "head_dim") return 1;
  }
  std::printf("public headers OK (weft %s)\n", weft::version());
  return 0;
}
