// User-defined attention variants compiled at run time (NVRTC), cached on disk. Host-only header.
//
//   weft::jit::VariantSource src;
//   src.source = R"(
//     struct Params { float cap; };
//     struct Variant : weft::jit::VariantBase<Params> {
//       __device__ float logit(float score, const Row& row, int k_pos) const {
//         return params.cap * tanhf(score / params.cap);
//       }
//     };)";
//   src.params_size = sizeof(MyParams);  src.params_align = alignof(MyParams);  // the same struct
//   weft::jit::Options opt;  opt.cache_dir = "/var/cache/weft";   // "" : no disk cache
//   auto v = weft::jit::Variant::create(src, opt);                 // checks the source (compiles nothing)
//   weft::AttentionVariant av;  av.jit = v.get();  av.jit_params = &my_params;
//   decode.plan(..., av, ...);   decode.run(...);                  // as with any variant
//
// The contract (the user's source; device C++17, compiled by NVRTC against weft's device
// headers, which the source need not include: it sees <cuda/std/...>, CUDA's math builtins
// (expf, tanhf, log1pf, ...) and weft::jit::VariantBase):
//   struct Params { ... };   the parameter struct: plain data (numbers, device pointers), at
//                            most kMaxParamsBytes bytes; passed BY VALUE in the kernel
//                            parameters: plan() copies the bytes AttentionVariant::jit_params
//                            points to (params_size of them), so every run of that plan sees them.
//   struct Variant : weft::jit::VariantBase<Params> { hooks };
//     members from VariantBase: `params` (Params), `sm_scale` (float, the variant's sm_scale),
//     `Row` (weft::jit::QueryRow {int q_pos, qo_head}) and `row()`.
//     Hooks, each optional (an omitted hook keeps the built-in behaviour):
//       query hook   Row row(int q_pos, int qo_head) const     per query row state, computed once
//                    per row and tile (positions are absolute KV positions: query i of a request
//                    with q_len queries and kv_len keys sits at kv_len - q_len + i). A variant may
//                    declare its own `struct Row` with it.
//       logits       float logit(float score, const Row& row, int k_pos) const
//                    score = sm_scale * <q, k> (natural-log units); returns the logit in natural
//                    log units, or -INFINITY to mask the key. Replaces scale / soft cap (the
//                    AttentionVariant's logits_soft_cap is ignored when it is defined).
//       mask         bool mask(const Row& row, int k_pos) const     false: key masked
//       normalize    static constexpr bool kSoftmax = true;  false: O_i = sum_j exp(logit_ij) v_j
//                    without the softmax's normalization (e.g. sigmoid attention: logit = log
//                    sigmoid(x)); computed as the softmax output times exp(LSE), so run() then
//                    needs an `lse` output (weft::Error otherwise).
//     The AttentionVariant's causal mask, sliding window and (prefill) custom mask still apply,
//     and with them the planner's KV trimming; alibi_slopes must be null (write the bias as a
//     logit hook). A row whose keys are all masked gives O = 0, LSE = -inf.
//   All hooks are `__device__ ... const`. A Variant without hooks is the built-in default variant
//   (its kernels are the ahead-of-time kernels' code, compiled by NVRTC).
//
// Compilation: plan() compiles (NVRTC, for the current device's architecture, e.g. sm_90a) the
// kernel its plan needs -- one decode or prefill specialization of (dtype, head_dim, tile) --
// loads it (CUDA library management), and keeps it in the Variant for later plans. With a cache
// directory, the image is stored under a key of (generated source, NVRTC options, weft version,
// NVRTC version, device headers, GPU architecture); another process finds it there (no compile).
// Errors in the user's source: weft::Error whose argument is "jit.source" and whose message holds
// NVRTC's log (file name VariantSource::name, line numbers of the user's source).
//
// Threads: a Variant may be used by several wrappers and threads (its kernel table is locked).
// It must outlive every plan that uses it. Cache writes are atomic (a temporary file renamed into
// place): concurrent processes may share a directory; unreadable, partial or foreign files are
// ignored (and replaced).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "weft/export.h"

namespace weft WEFT_API {
namespace jit {

// Largest parameter struct (bytes): kernel parameters stay well inside the 4 KB of any device.
inline constexpr std::size_t kMaxParamsBytes = 1024;

struct VariantSource {
  std::string source;                 // device C++ defining `params` and `variant` (contract above)
  std::string variant = "Variant";    // name of the variant struct
  std::string params = "Params";      // name of its parameter struct
  std::size_t params_size = 0;        // sizeof / alignof of the same struct on the host (checked by a
  std::size_t params_align = 1;       //   static_assert in the compiled code; an empty struct: 0 / 1)
  std::string name = "variant.cu";    // file name in compiler messages
};

struct Options {
  // Disk cache directory (created if missing); empty: no disk cache (compiled images are still
  // kept in memory by the Variant).
  std::string cache_dir;
  // Where weft's device headers are: empty = found next to the library (<prefix>/include/weft/device
  // of the libweft that runs, or the build tree's include/weft/device).
  std::string device_include_dir;
  // The CUDA toolkit's include directory (with cccl/): empty = next to the libnvrtc that was
  // loaded (<cuda>/lib64 -> <cuda>/include), else the toolkit weft was built with.
  std::string cuda_include_dir;
  // Extra NVRTC options (e.g. "-lineinfo"); part of the cache key.
  std::vector<std::string> nvrtc_options;
};

// What a Variant did so far (for logs, tests and benches).
struct Stats {
  int32_t compiled = 0;        // NVRTC compilations
  int32_t disk_hits = 0;       // images read from the disk cache
  int32_t memory_hits = 0;     // kernels found already loaded in this Variant
  double compile_seconds = 0;  // total NVRTC time
  double load_ms = 0;          // total time of cache reads + module loads (not compiles)
};

class Variant {
 public:
  // Checks the description (names, params size/alignment) and finds the include directories;
  // throws weft::Error naming the field. Compiles nothing (plan() does, per specialization).
  static std::shared_ptr<Variant> create(const VariantSource& source, const Options& options = {});
  ~Variant();
  Variant(const Variant&) = delete;
  Variant& operator=(const Variant&) = delete;

  const VariantSource& source() const;
  const Options& options() const;
  Stats stats() const;
  // The device header directory in use (Options::device_include_dir or the one found).
  const std::string& device_include_dir() const;

  // Compiles (or reads from the cache) the image of one specialization WITHOUT loading it, for
  // the given architecture ("sm_90a"); returns the CUBIN bytes. kind: "decode_tc1", "decode_tc2",
  // "decode_tc4", "decode_cc" or "prefill_q<Q>_kv<KV>"; dtype "f16" / "bf16"; head_dim 64/128/256.
  // Needs no GPU (tests and ahead-of-time warm-up of a cache directory).
  std::vector<char> compile(const std::string& kind, const std::string& dtype, int32_t head_dim,
                            const std::string& arch);

  struct Impl;
  Impl& impl() const { return *impl_; }

 private:
  explicit Variant(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace jit
}  // namespace weft
