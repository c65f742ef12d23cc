#include "tp/gemm_lt.h"

#include <string>

#include "weft/error.h"

namespace weft::tp {

namespace {

void lt_check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw Error("cuBLASLt", std::string(what) + " failed: status " + std::to_string(static_cast<int>(st)));
}

cudaDataType_t cuda_type(DType d) {
  WEFT_CHECK_ARG(d == DType::kFloat16 || d == DType::kBFloat16, "dtype",
                 "GEMMs take f16 or bf16, got " << dtype_name(d));
  return d == DType::kFloat16 ? CUDA_R_16F : CUDA_R_16BF;
}

}  // namespace

LtGemm::LtGemm() { lt_check(cublasLtCreate(&handle_), "cublasLtCreate"); }

LtGemm::~LtGemm() {
  for (auto& kv : cache_) {
    Entry& e = kv.second;
    if (e.la) cublasLtMatrixLayoutDestroy(e.la);
    if (e.lb) cublasLtMatrixLayoutDestroy(e.lb);
    if (e.lc) cublasLtMatrixLayoutDestroy(e.lc);
    if (e.desc) cublasLtMatmulDescDestroy(e.desc);
  }
  if (handle_) cublasLtDestroy(handle_);
}

LtGemm::Entry& LtGemm::entry(int64_t lda, int64_t ldw, int64_t ldc, int64_t m, int64_t n, int64_t k, DType dtype,
                             int sm_target) {
  const Key key{lda, ldw, ldc, m, n, k, static_cast<int>(dtype), sm_target};
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  const cudaDataType_t t = cuda_type(dtype);
  Entry e;
  try {
    lt_check(cublasLtMatmulDescCreate(&e.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
    lt_check(cublasLtMatmulDescSetAttribute(e.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof(opT)), "TRANSA");
    lt_check(cublasLtMatmulDescSetAttribute(e.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof(opN)), "TRANSB");
    if (sm_target > 0) {
      const int32_t sms = sm_target;
      lt_check(cublasLtMatmulDescSetAttribute(e.desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &sms, sizeof(sms)),
               "SM_COUNT_TARGET");
    }
    // Column-major: "A" = W (K x N, ld ldw, transposed), "B" = x (K x M, ld lda), C: N x M.
    lt_check(cublasLtMatrixLayoutCreate(&e.la, t, static_cast<uint64_t>(k), static_cast<uint64_t>(n), ldw), "layout W");
    lt_check(cublasLtMatrixLayoutCreate(&e.lb, t, static_cast<uint64_t>(k), static_cast<uint64_t>(m), lda), "layout A");
    lt_check(cublasLtMatrixLayoutCreate(&e.lc, t, static_cast<uint64_t>(n), static_cast<uint64_t>(m), ldc), "layout C");
    cublasLtMatmulPreference_t pref = nullptr;
    lt_check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    const uint64_t ws = ws_bytes_;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(handle_, e.desc, e.la, e.lb, e.lc, e.lc, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    lt_check(st, "cublasLtMatmulAlgoGetHeuristic");
    if (found < 1)
      throw Error("cuBLASLt", "no algorithm for M " + std::to_string(m) + " N " + std::to_string(n) + " K " +
                                  std::to_string(k));
    e.algo = res.algo;
  } catch (...) {
    if (e.la) cublasLtMatrixLayoutDestroy(e.la);
    if (e.lb) cublasLtMatrixLayoutDestroy(e.lb);
    if (e.lc) cublasLtMatrixLayoutDestroy(e.lc);
    if (e.desc) cublasLtMatmulDescDestroy(e.desc);
    throw;
  }
  return cache_.emplace(key, e).first->second;
}

void LtGemm::prepare(int64_t lda, int64_t ldw, int64_t ldc, int64_t m, int64_t n, int64_t k, DType dtype,
                     int sm_target) {
  if (m > 0) entry(lda, ldw, ldc, m, n, k, dtype, sm_target);
}

void LtGemm::run(const void* a, int64_t lda, const void* w, int64_t ldw, void* c, int64_t ldc, int64_t m,
                 int64_t n, int64_t k, DType dtype, int sm_target, cudaStream_t stream) {
  if (m == 0) return;
  Entry& e = entry(lda, ldw, ldc, m, n, k, dtype, sm_target);
  const float alpha = 1.f, beta = 0.f;
  lt_check(cublasLtMatmul(handle_, e.desc, &alpha, w, e.la, a, e.lb, &beta, c, e.lc, c, e.lc, &e.algo, ws_, ws_bytes_,
                          stream),
           "cublasLtMatmul");
}

}  // namespace weft::tp
