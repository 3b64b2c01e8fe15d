// shardgrid — the cuBLAS pieces the GEMM-based CUDA ops share (internal to
// shardtensor/ops/cuda/): the process's handle and typed strided-batched
// GEMMs, column-major (gemm) and row-major (gemm_rm).
#ifndef SG_CUBLAS_IMPL_H
#define SG_CUBLAS_IMPL_H

#include <cublas_v2.h>

#include "sg_ops_cuda.h"

// The process's cuBLAS handle on `stream` (made on first use on the device
// current then: one rank per GPU; not thread-safe, as the tape).
sg_status sg_cublas_on(void *stream, cublasHandle_t *h);

// C (m x n, ldc, strideC per batch) = alpha op(A) op(B) + beta C, column
// major, in T.
template <typename T>
cublasStatus_t sg_gemm(cublasHandle_t h, cublasOperation_t ta,
                       cublasOperation_t tb, int m, int n, int k, T alpha,
                       const T *a, int lda, long long sa, const T *b, int ldb,
                       long long sb, T beta, T *c, int ldc, long long sc,
                       int count);
template <>
inline cublasStatus_t sg_gemm<float>(cublasHandle_t h, cublasOperation_t ta,
                                     cublasOperation_t tb, int m, int n, int k,
                                     float alpha, const float *a, int lda,
                                     long long sa, const float *b, int ldb,
                                     long long sb, float beta, float *c,
                                     int ldc, long long sc, int count) {
  return cublasSgemmStridedBatched(h, ta, tb, m, n, k, &alpha, a, lda, sa, b,
                                   ldb, sb, &beta, c, ldc, sc, count);
}
template <>
inline cublasStatus_t sg_gemm<double>(cublasHandle_t h, cublasOperation_t ta,
                                      cublasOperation_t tb, int m, int n, int k,
                                      double alpha, const double *a, int lda,
                                      long long sa, const double *b, int ldb,
                                      long long sb, double beta, double *c,
                                      int ldc, long long sc, int count) {
  return cublasDgemmStridedBatched(h, ta, tb, m, n, k, &alpha, a, lda, sa, b,
                                   ldb, sb, &beta, c, ldc, sc, count);
}

// The same with row-major matrices (C = op(A) op(B) is column-major C^T =
// op(B)^T op(A)^T): ta, tb say whether A, B are transposed.
template <typename T>
cublasStatus_t sg_gemm_rm(cublasHandle_t h, bool ta, bool tb, int m, int n,
                          int k, const T *a, int lda, long long sa, const T *b,
                          int ldb, long long sb, T beta, T *c, int ldc,
                          long long sc, int count) {
  return sg_gemm<T>(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                    ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, T(1), b, ldb, sb,
                    a, lda, sa, beta, c, ldc, sc, count);
}

#endif  // SG_CUBLAS_IMPL_H
