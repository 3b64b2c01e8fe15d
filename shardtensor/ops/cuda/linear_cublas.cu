// shardgrid — the channel-wise linear (1x1 convolution) on cuBLAS
// (sg_ops_cuda.h): strided-batched GEMMs over the batch items, the bias
// through the bias kernels of ops_cuda.cu. The host's sg_linear_* compute
// the same products with its BLAS; the sums' order differs (rounding).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "cublas_impl.h"
#include "sg_ops_cuda.h"

sg_status sg_cublas_on(void *stream, cublasHandle_t *h) {
  static cublasHandle_t handle = nullptr;
  sg_status st = SG_OK;
  if (!handle) SG_CUBLAS(cublasCreate(&handle));
  SG_CUBLAS(cublasSetStream(handle, (cudaStream_t)stream));
  *h = handle;
fail:
  return st;
}

namespace {

sg_status linear_check(const char *what, sg_dtype dt, int64_t batch,
                       int64_t cin, int64_t cout, int64_t spatial) {
  sg_status st = SG_OK;
  if (dt != SG_DTYPE_F32 && dt != SG_DTYPE_F64)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "%s: f32 or f64, not %s", what,
             sg_dtype_name(dt));
  if (batch < 0 || cin < 1 || cout < 1 || spatial < 0 || cin > INT32_MAX ||
      cout > INT32_MAX || spatial > INT32_MAX || batch > INT32_MAX)
    SG_RAISE(SG_ERR_SHAPE, "%s: batch %lld, channels %lld -> %lld, %lld cells",
             what, (long long)batch, (long long)cin, (long long)cout,
             (long long)spatial);
fail:
  return st;
}

// Row-major y_n (K x S) = W (K x C) x_n (C x S) is column-major
// y_n^T = x_n^T W^T: m = S, n = K, k = C.
template <typename T>
sg_status fwd(cublasHandle_t h, int64_t nb, int64_t c, int64_t k, int64_t s,
              const T *x, const T *w, T *y) {
  sg_status st = SG_OK;
  SG_CUBLAS(sg_gemm<T>(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)s, (int)k, (int)c, 1,
                       x, (int)s, c * s, w, (int)c, 0, 0, y, (int)s, k * s,
                       (int)nb));
fail:
  return st;
}

// dx_n (C x S) = W^T dy_n: column-major dx_n^T = dy_n^T W (m = S, n = C,
// k = K). dW (K x C) += sum_n dy_n x_n^T: column-major dW^T (C x K) +=
// x_n^T^T dy_n^T, one GEMM per batch item in order.
template <typename T>
sg_status bwd(cublasHandle_t h, int64_t nb, int64_t c, int64_t k, int64_t s,
              const T *x, const T *w, const T *dy, T *dx, T *dw) {
  sg_status st = SG_OK;
  if (dx)
    SG_CUBLAS(sg_gemm<T>(h, CUBLAS_OP_N, CUBLAS_OP_T, (int)s, (int)c, (int)k, 1,
                         dy, (int)s, k * s, w, (int)c, 0, 0, dx, (int)s, c * s,
                         (int)nb));
  for (int64_t n = 0; dw && n < nb; ++n)
    SG_CUBLAS(sg_gemm<T>(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)c, (int)k, (int)s, 1,
                         x + n * c * s, (int)s, 0, dy + n * k * s, (int)s, 0, 1,
                         dw, (int)c, 0, 1));
fail:
  return st;
}

}  // namespace

extern "C" sg_status sg_linear_fwd_cuda(sg_dtype dt, int64_t batch, int64_t cin,
                                        int64_t cout, int64_t spatial,
                                        const void *x, const void *w,
                                        const void *b, void *y, void *stream) {
  sg_status st = SG_OK;
  cublasHandle_t h = nullptr;
  SG_TRY(linear_check("sg_linear_fwd_cuda", dt, batch, cin, cout, spatial));
  if (batch == 0 || spatial == 0) return SG_OK;
  if (!x || !w || !y)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_linear_fwd_cuda: NULL x, w or y");
  SG_TRY(sg_cublas_on(stream, &h));
  if (dt == SG_DTYPE_F32)
    SG_TRY(fwd(h, batch, cin, cout, spatial, (const float *)x, (const float *)w,
               (float *)y));
  else
    SG_TRY(fwd(h, batch, cin, cout, spatial, (const double *)x,
               (const double *)w, (double *)y));
  if (b) SG_TRY(sg_bias_fwd_cuda(dt, batch, cout, spatial, y, b, y, stream));
fail:
  return st;
}

extern "C" sg_status sg_linear_bwd_cuda(sg_dtype dt, int64_t batch, int64_t cin,
                                        int64_t cout, int64_t spatial,
                                        const void *x, const void *w,
                                        const void *dy, void *dx, void *dw,
                                        void *db, void *stream) {
  sg_status st = SG_OK;
  cublasHandle_t h = nullptr;
  SG_TRY(linear_check("sg_linear_bwd_cuda", dt, batch, cin, cout, spatial));
  if (batch == 0 || spatial == 0) return SG_OK;
  if (!dy || (dx && !w) || (dw && !x))
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_linear_bwd_cuda: NULL dy, w or x");
  SG_TRY(sg_cublas_on(stream, &h));
  if (dt == SG_DTYPE_F32)
    SG_TRY(bwd(h, batch, cin, cout, spatial, (const float *)x, (const float *)w,
               (const float *)dy, (float *)dx, (float *)dw));
  else
    SG_TRY(bwd(h, batch, cin, cout, spatial, (const double *)x,
               (const double *)w, (const double *)dy, (double *)dx,
               (double *)dw));
  if (db) SG_TRY(sg_bias_bwd_cuda(dt, batch, cout, spatial, dy, db, stream));
fail:
  return st;
}
