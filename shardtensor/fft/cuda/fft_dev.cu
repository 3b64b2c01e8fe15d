// shardgrid — the distributed FFT's element passes on device buffers
// (fft_dev_inl.h, driven by fft_dev.c): the transposes' box copies (pack,
// unpack, the cut of the kept modes), the halved dim's weights, the c2r's
// self-conjugate columns and the scaling, one thread per element over the
// SG_HD functions the host loops of fft_dev.c run in the tests, on the
// legacy default stream.
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda/launch_inl.h"
#include "fft_dev_inl.h"

namespace {

const int kThreads = 256;

inline unsigned grid_for(int64_t n) { return sg_grid_for(n, kThreads); }

__global__ void xbox_f64(sg_fft_xbox b, const double *src, double *dst) {
  SG_GRID_STRIDE(e, b.n) sg_fft_xbox_copy_f64(&b, src, dst, e);
}
__global__ void xbox_f32(sg_fft_xbox b, const float *src, float *dst) {
  SG_GRID_STRIDE(e, b.n) sg_fft_xbox_copy_f32(&b, src, dst, e);
}
__global__ void weight_f64(int64_t n, double *y, int64_t nl, int64_t ol,
                           int64_t len, double w, double s) {
  SG_GRID_STRIDE(e, n) sg_fft_weight_f64(y, e, nl, ol, len, w, s);
}
__global__ void weight_f32(int64_t n, float *y, int64_t nl, int64_t ol,
                           int64_t len, double w, double s) {
  SG_GRID_STRIDE(e, n) sg_fft_weight_f32(y, e, nl, ol, len, w, s);
}
__global__ void cols_f64(int64_t rows, double *y, int64_t n) {
  SG_GRID_STRIDE(r, rows) sg_fft_c2r_cols_f64(y, r, n);
}
__global__ void cols_f32(int64_t rows, float *y, int64_t n) {
  SG_GRID_STRIDE(r, rows) sg_fft_c2r_cols_f32(y, r, n);
}
__global__ void scale_f64(int64_t n, double f, double *y) {
  SG_GRID_STRIDE(i, n) y[i] *= f;
}
__global__ void scale_f32(int64_t n, float f, float *y) {
  SG_GRID_STRIDE(i, n) y[i] *= f;
}

sg_status launched(void) {
  sg_status st = SG_OK;
  SG_CUDA(cudaGetLastError());
fail:
  return st;
}

}  // namespace

extern "C" sg_status sg_fft_xbox_cuda(int f64, const sg_fft_xbox *b,
                                      const void *src, void *dst) {
  if (b->n <= 0) return SG_OK;
  if (f64)
    xbox_f64<<<grid_for(b->n), kThreads>>>(*b, (const double *)src,
                                           (double *)dst);
  else
    xbox_f32<<<grid_for(b->n), kThreads>>>(*b, (const float *)src,
                                           (float *)dst);
  return launched();
}

extern "C" sg_status sg_fft_weight_cuda(int f64, int64_t rows, int64_t nl,
                                        int64_t ol, int64_t n, double w,
                                        double s, void *y) {
  const int64_t ne = rows * nl;
  if (ne <= 0) return SG_OK;
  if (f64)
    weight_f64<<<grid_for(ne), kThreads>>>(ne, (double *)y, nl, ol, n, w, s);
  else
    weight_f32<<<grid_for(ne), kThreads>>>(ne, (float *)y, nl, ol, n, w, s);
  return launched();
}

extern "C" sg_status sg_fft_c2r_cols_cuda(int f64, int64_t rows, int64_t n,
                                          void *y) {
  if (rows <= 0) return SG_OK;
  if (f64)
    cols_f64<<<grid_for(rows), kThreads>>>(rows, (double *)y, n);
  else
    cols_f32<<<grid_for(rows), kThreads>>>(rows, (float *)y, n);
  return launched();
}

extern "C" sg_status sg_fft_scale_cuda(int f64, int64_t n, double f, void *y) {
  if (n <= 0) return SG_OK;
  if (f64)
    scale_f64<<<grid_for(n), kThreads>>>(n, f, (double *)y);
  else
    scale_f32<<<grid_for(n), kThreads>>>(n, (float)f, (float *)y);
  return launched();
}
