// Internal (host): row-major GEMM C[M, N] = A[M, K] @ W[N, K]^T through cuBLASLt (f16/bf16 in and
// out, fp32 accumulation), the heuristic's algorithm cached per shape (M, N, K, strides, dtype):
// the heuristic query costs tens of microseconds of host time, a layer step issues 4-8 GEMMs.
// Column-major view used by cuBLASLt: C^T [N, M] (ld ldc) = op_T(W: K x N, ld ldw) * A^T (K x M,
// ld lda), i.e. the "TN" case.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <tuple>

#include "weft/dtype.h"

namespace weft::tp {

class LtGemm {
 public:
  LtGemm();
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // Workspace for every call (calls sharing it must be stream-ordered).
  void set_workspace(void* ws, std::size_t bytes) {
    ws_ = ws;
    ws_bytes_ = bytes;
  }
  // Enqueues on `stream`; M == 0 does nothing. Capturable once the shape's entry exists
  // (prepare() creates it; the first run() of a shape does too, host work only).
  // sm_target > 0: CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, the SMs the GEMM may assume it has
  // (device SMs minus those a concurrent kernel holds): cuBLASLt then picks tiles and persistent
  // grids for the SMs that are actually free during the overlap.
  void run(const void* a, int64_t lda, const void* w, int64_t ldw, void* c, int64_t ldc, int64_t m, int64_t n,
           int64_t k, DType dtype, int sm_target, cudaStream_t stream);
  void prepare(int64_t lda, int64_t ldw, int64_t ldc, int64_t m, int64_t n, int64_t k, DType dtype, int sm_target);

  static constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;  // cuBLAS's Hopper advice

 private:
  struct Entry {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int>;
  Entry& entry(int64_t lda, int64_t ldw, int64_t ldc, int64_t m, int64_t n, int64_t k, DType dtype, int sm_target);

  cublasLtHandle_t handle_ = nullptr;
  void* ws_ = nullptr;
  std::size_t ws_bytes_ = 0;
  std::map<Key, Entry> cache_;
};

}  // namespace weft::tp
