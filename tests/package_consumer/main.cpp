// Includes only the umbrella header and uses only the public API of the installed libweft.so.
// Every call below is rejected by host validation before any CUDA call, so no GPU is needed.
// Each rejection is caught as weft::Error by type, and the caught object's typeinfo must be the
// program's own typeid(weft::Error): one typeinfo, so libweft.so exports it. (Catching by type
// alone proves less: libstdc++ also matches two copies of a typeinfo by name, so a hidden one
// would still be caught, but dynamic_cast and typeid comparisons across the boundary would not
// agree.)
#include <weft/weft.h>

#include <weft/jit_examples.h>

#include <cstdio>
#include <exception>
#include <string>
#include <typeinfo>
#include <vector>

namespace {

int failures = 0;

// Runs `call`, which must throw weft::Error naming `argument`.
template <class F>
void expect_rejected(const char* what, const std::string& argument, F&& call) {
  try {
    call();
    std::printf("FAIL %s: not rejected\n", what);
  } catch (const weft::Error& e) {
    if (&typeid(e) != &typeid(weft::Error)) {
      std::printf("FAIL %s: weft::Error's typeinfo is not exported (two copies)\n", what);
    } else if (e.argument() != argument) {
      std::printf("FAIL %s: argument '%s', expected '%s'\n", what, e.argument().c_str(),
                  argument.c_str());
    } else {
      std::printf("ok   %s: %s\n", what, e.what());
      return;
    }
  } catch (const std::exception& e) {
    std::printf("FAIL %s: not caught as weft::Error: %s\n", what, e.what());
  }
  ++failures;
}

}  // namespace

int main(int argc, char** argv) {
  std::printf("weft %s (comm %s)\n", weft::version(), WEFT_HAS_COMM ? "built" : "not built");

  // validate.h: a decreasing page-table indptr.
  const int32_t indptr[] = {0, 2, 1};
  expect_rejected("check::indptr", "kv_indptr", [&] { weft::check::indptr(indptr, 2, "kv_indptr"); });

  // prefill.h: workspace bounds with an unsupported head_dim (checked before any device query).
  weft::PrefillBounds bounds;
  bounds.max_batch = 4;
  bounds.max_total_q = 1024;
  bounds.num_qo_heads = 32;
  bounds.num_kv_heads = 8;
  bounds.head_dim = 96;
  expect_rejected("BatchPrefillWrapper::workspace_size", "bounds.head_dim",
                  [&] { weft::BatchPrefillWrapper::workspace_size(bounds); });

  // decode.h: the same for decode.
  expect_rejected("BatchDecodeWrapper::workspace_size", "head_dim",
                  [&] { weft::BatchDecodeWrapper::workspace_size(8, 32, 8, 96); });
  if (std::string(weft::decode_path_name(weft::DecodePath::kTensorCore)) != "tensor_core") ++failures;

#if WEFT_HAS_COMM
  // token_split.h (comm component): a non-positive tile is rejected.
  weft::TokenSplitProblem split;
  split.tokens = 300;
  split.n = 4096;
  split.tile_m = 0;
  expect_rejected("plan_token_split", "tile_m", [&] { weft::plan_token_split(split); });
#endif

  // jit.h: the installed device headers are found next to the installed library (argv[1]: the
  // install prefix; no path of the build tree), and NVRTC compiles a variant against them for
  // sm_90a (no GPU needed).
  try {
    auto v = weft::jit::Variant::create(weft::jit::examples::soft_cap());
    const std::string dir = v->device_include_dir();
    const std::vector<char> cubin = v->compile("decode_tc1", "f16", 64, "sm_90a");
    const bool under_prefix = argc < 2 || dir.rfind(argv[1], 0) == 0;
    std::printf("%s jit: device headers %s, decode_tc1 f16 d64 sm_90a CUBIN %zu bytes\n",
                under_prefix && !cubin.empty() ? "ok  " : "FAIL", dir.c_str(), cubin.size());
    if (!under_prefix || cubin.empty()) ++failures;
  } catch (const std::exception& e) {
    std::printf("FAIL jit: %s\n", e.what());
    ++failures;
  }

  std::printf("%s\n", failures == 0 ? "consumer OK" : "consumer FAILED");
  return failures == 0 ? 0 : 1;
}
