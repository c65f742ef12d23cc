// Shared driver of the prefill GPU tests: builds random inputs (rounded to the dtype), a paged or
// ragged K/V cache, runs BatchPrefillWrapper on NaN-poisoned outputs and compares with the
// float64 reference under a tolerance derived from the low-precision emulation.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/gpu_util.h"
#include "common/test_util.h"
#include "weft/attention.h"
#include "weft/paged_kv.h"
#include "weft/prefill.h"

namespace weft::test::prefill {

struct Case {
  std::vector<int32_t> q_lens, kv_lens;
  int32_t num_qo_heads = 4, num_kv_heads = 1, head_dim = 128;
  DType dtype = DType::kBFloat16;
  bool paged = true;
  int32_t page_size = 16;
  KVLayout layout = KVLayout::kNHD;
  AttentionVariant variant{};
  double custom_density = 0.5;     // kCustom: probability a bit is 1
  bool fully_masked_rows = false;  // kCustom: every 3rd query row of request 0 masks all keys
  PrefillPlanOptions opt{};
  // ALiBi: one slope per query head (host copy; empty = off). prepare() uploads it and points
  // variant.alibi_slopes at the device copy; the reference gets the same slopes.
  std::vector<float> alibi_slopes;
  // fp8 K/V pools (paged, bf16 q; weft/fp8.h): head h's K and V are first multiplied by
  // 1 + 3 (h % 4) (heads that need different scales), then quantized with calibrated scales
  // (amax / fp8_max, per KV head or one per pool); Prepared::k / v become the DEQUANTIZED values
  // (the reference's input), k16 / v16 keep the bf16 values they were quantized from.
  std::optional<DType> kv_fp8;
  bool fp8_per_head = true;
  std::string describe() const;
};

// Device-resident inputs of one case plus everything needed to run it again.
struct Prepared {
  Case c;
  std::vector<int32_t> qo_indptr, kv_indptr;
  int64_t total_q = 0, total_kv = 0;
  std::vector<float> q, k, v;  // rounded host copies
  std::vector<uint8_t> mask_bits;
  std::vector<int32_t> mask_indptr;
  DeviceBuffer d_q, d_k, d_v, d_kv_indptr, d_mask, d_mask_indptr;
  // paged
  std::vector<int32_t> page_indptr, page_indices, last_page_len;
  DeviceBuffer d_pages_k, d_pages_v, d_page_indptr, d_page_indices, d_last;
  int64_t num_pages = 0;
  DeviceBuffer d_out, d_lse, d_ws;
  DeviceBuffer d_alibi;  // device slopes (Case::alibi_slopes)
  std::vector<float> k16, v16, k_scale, v_scale;  // fp8 cases (Case::kv_fp8)
  DeviceBuffer d_k_scale, d_v_scale;
  std::size_t ws_bytes = 0;
  PrefillBounds bounds{};

  PagedKVCache cache() const;
  PageTable table() const;
  TensorView q_view() const;
  TensorView out_view() const;
  TensorView lse_view() const;
  CustomMaskDevice mask() const;
};

// Whether the current device is compute capability 9.0 (the sm90 mainloop's tests); the macro
// skips a test elsewhere.
bool is_sm90();
#define WEFT_REQUIRE_SM90()                                                     \
  do {                                                                          \
    WEFT_REQUIRE_GPU();                                                         \
    if (!is_sm90()) GTEST_SKIP() << "needs a compute capability 9.0 (Hopper) GPU"; \
  } while (0)

// Random inputs and device buffers for `c` (seeded by the current test name and `salt`).
void prepare(Prepared& p, const Case& c, uint64_t salt = 0);
// plan + run (ragged or paged per the case), outputs poisoned first.
void plan_and_run(BatchPrefillWrapper& w, Prepared& p, cudaStream_t stream = nullptr);
void plan_only(BatchPrefillWrapper& w, Prepared& p, cudaStream_t stream = nullptr);
void run_only(BatchPrefillWrapper& w, Prepared& p, cudaStream_t stream = nullptr);
// Compares downloaded O and LSE with the references; gtest failures carry the case description.
void check_against_reference(const Prepared& p);
// Whole flow: prepare, plan, run, check.
void run_and_check(const Case& c, uint64_t salt = 0);

std::vector<uint16_t> download_out(const Prepared& p);
std::vector<float> download_lse(const Prepared& p);

}  // namespace weft::test::prefill
