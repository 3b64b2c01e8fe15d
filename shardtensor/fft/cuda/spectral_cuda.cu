// shardgrid — the spectral convolution on CUDA device pointers, one
// process (spectral_cuda.h, driven by spectral.c): cuFFT's
// multi-dimensional r2c over the spatial dims batched over the
// (batch, channel) rows, the kept modes gathered, the per-mode complex
// channel contraction, the kept modes scattered into a full spectrum and
// cuFFT's c2r, all on the legacy default stream. One thread per element
// over the SG_HD functions of sg_spec_inl.h, which
// tests/fft/test_spectral_device.c runs on the host against the host op.
// Correctness first: the contraction is a loop over channels per output
// mode (no cuBLAS: the modes are the innermost, unit-stride index).
#include <cuda_runtime.h>
#include <cufft.h>
#include <stdint.h>
#include <stdlib.h>

#include "cuda/launch_inl.h"
#include "spectral_cuda.h"

namespace {

const int kThreads = 256;

inline unsigned grid_for(int64_t n) { return sg_grid_for(n, kThreads); }

__device__ inline void gather(const sg_spec_geo *g, const float *X, float *xh,
                              int64_t e, double s, double pw) {
  sg_spec_gather_f32(g, X, xh, e, s, pw);
}
__device__ inline void gather(const sg_spec_geo *g, const double *X, double *xh,
                              int64_t e, double s, double pw) {
  sg_spec_gather_f64(g, X, xh, e, s, pw);
}
__device__ inline void scatter(const sg_spec_geo *g, const float *yh, float *Y,
                               int64_t e, double s, double pw) {
  sg_spec_scatter_f32(g, yh, Y, e, s, pw);
}
__device__ inline void scatter(const sg_spec_geo *g, const double *yh,
                               double *Y, int64_t e, double s, double pw) {
  sg_spec_scatter_f64(g, yh, Y, e, s, pw);
}

template <typename T>
__global__ void gather_k(sg_spec_geo g, int64_t n, const T *X, T *xh, double s,
                         double pw) {
  SG_GRID_STRIDE(e, n) gather(&g, X, xh, e, s, pw);
}
template <typename T>
__global__ void scatter_k(sg_spec_geo g, int64_t n, const T *yh, T *Y, double s,
                          double pw) {
  SG_GRID_STRIDE(e, n) scatter(&g, yh, Y, e, s, pw);
}

// which: 0 y = x W, 1 dx = dy W^H, 2 dW += dy x^H (per mode)
__global__ void mix_k_f32(int which, int64_t nb, int64_t ci, int64_t co,
                          int64_t M, int64_t n, const float *a, const float *b,
                          float *out) {
  SG_GRID_STRIDE(e, n) {
    if (which == 0)
      sg_spec_mix_fwd_f32(ci, co, M, a, b, out, e);
    else if (which == 1)
      sg_spec_mix_bwd_x_f32(ci, co, M, a, b, out, e);
    else
      sg_spec_mix_bwd_w_f32(nb, ci, co, M, a, b, out, e);
  }
}
__global__ void mix_k_f64(int which, int64_t nb, int64_t ci, int64_t co,
                          int64_t M, int64_t n, const double *a,
                          const double *b, double *out) {
  SG_GRID_STRIDE(e, n) {
    if (which == 0)
      sg_spec_mix_fwd_f64(ci, co, M, a, b, out, e);
    else if (which == 1)
      sg_spec_mix_bwd_x_f64(ci, co, M, a, b, out, e);
    else
      sg_spec_mix_bwd_w_f64(nb, ci, co, M, a, b, out, e);
  }
}

}  // namespace

struct sg_spectral_cuda {
  int f64;
  sg_spec_geo g;
  int64_t nb, cin, cout;
  cufftHandle fin, bin, fout, bout;  // r2c / c2r of nb*cin and nb*cout rows
  int have[4];
  void *F;           // full spectrum, nb * max(cin, cout) rows
  void *kin, *kout;  // kept spectra, nb * cin and nb * cout rows
};

namespace {

sg_status plan(sg_spectral_cuda *s, int64_t rows, int r2c, cufftHandle *h,
               int *have) {
  sg_status st = SG_OK;
  int n[3] = {1, 1, 1};
  size_t ws = 0;
  for (int d = 0; d < s->g.nd; ++d) n[d] = (int)s->g.n[d];
  const cufftType t = r2c ? (s->f64 ? CUFFT_D2Z : CUFFT_R2C)
                          : (s->f64 ? CUFFT_Z2D : CUFFT_C2R);
  SG_CUFFT(cufftCreate(h));
  *have = 1;
  SG_CUFFT(cufftMakePlanMany(*h, s->g.nd, n, NULL, 1, 0, NULL, 1, 0, t,
                             (int)rows, &ws));
fail:
  return st;
}

sg_status r2c(const sg_spectral_cuda *s, cufftHandle h, const void *x,
              void *X) {
  sg_status st = SG_OK;
  // out of place: cuFFT's r2c leaves its input as it is
  if (s->f64)
    SG_CUFFT(cufftExecD2Z(h, (cufftDoubleReal *)x, (cufftDoubleComplex *)X));
  else
    SG_CUFFT(cufftExecR2C(h, (cufftReal *)x, (cufftComplex *)X));
fail:
  return st;
}

// destroys X (cuFFT's c2r overwrites its input)
sg_status c2r(const sg_spectral_cuda *s, cufftHandle h, void *X, void *x) {
  sg_status st = SG_OK;
  if (s->f64)
    SG_CUFFT(cufftExecZ2D(h, (cufftDoubleComplex *)X, (cufftDoubleReal *)x));
  else
    SG_CUFFT(cufftExecC2R(h, (cufftComplex *)X, (cufftReal *)x));
fail:
  return st;
}

sg_status gather_run(const sg_spectral_cuda *s, int64_t rows, const void *X,
                     void *xh, double sc, double pw) {
  sg_status st = SG_OK;
  const int64_t n = rows * s->g.M;
  if (n < 1) return SG_OK;
  if (s->f64)
    gather_k<double><<<grid_for(n), kThreads>>>(s->g, n, (const double *)X,
                                                (double *)xh, sc, pw);
  else
    gather_k<float><<<grid_for(n), kThreads>>>(s->g, n, (const float *)X,
                                               (float *)xh, sc, pw);
  SG_CUDA(cudaGetLastError());
fail:
  return st;
}

sg_status scatter_run(const sg_spectral_cuda *s, int64_t rows, const void *yh,
                      void *Y, double sc, double pw) {
  sg_status st = SG_OK;
  const int64_t n = rows * s->g.nf;
  if (n < 1) return SG_OK;
  if (s->f64)
    scatter_k<double><<<grid_for(n), kThreads>>>(s->g, n, (const double *)yh,
                                                 (double *)Y, sc, pw);
  else
    scatter_k<float><<<grid_for(n), kThreads>>>(s->g, n, (const float *)yh,
                                                (float *)Y, sc, pw);
  SG_CUDA(cudaGetLastError());
fail:
  return st;
}

sg_status mix_run(const sg_spectral_cuda *s, int which, const void *a,
                  const void *b, void *out) {
  sg_status st = SG_OK;
  const int64_t M = s->g.M;
  const int64_t n = which == 0   ? s->nb * s->cout * M
                    : which == 1 ? s->nb * s->cin * M
                                 : s->cin * s->cout * M;
  if (n < 1) return SG_OK;
  if (s->f64)
    mix_k_f64<<<grid_for(n), kThreads>>>(which, s->nb, s->cin, s->cout, M, n,
                                         (const double *)a, (const double *)b,
                                         (double *)out);
  else
    mix_k_f32<<<grid_for(n), kThreads>>>(which, s->nb, s->cin, s->cout, M, n,
                                         (const float *)a, (const float *)b,
                                         (float *)out);
  SG_CUDA(cudaGetLastError());
fail:
  return st;
}

__global__ void wlocal_k_f32(int64_t n, int64_t M, int64_t K,
                             const int64_t *gidx, float *W, float *wl,
                             int add) {
  SG_GRID_STRIDE(e, n) sg_spec_wlocal_f32(M, K, gidx, W, wl, e, add);
}
__global__ void wlocal_k_f64(int64_t n, int64_t M, int64_t K,
                             const int64_t *gidx, double *W, double *wl,
                             int add) {
  SG_GRID_STRIDE(e, n) sg_spec_wlocal_f64(M, K, gidx, W, wl, e, add);
}

double real_count(const sg_spec_geo *g) {
  double n = 1;
  for (int d = 0; d < g->nd; ++d) n *= (double)g->n[d];
  return n;
}

}  // namespace

extern "C" sg_status sg_spectral_cuda_create(sg_dtype dt, const sg_spec_geo *g,
                                             int64_t nb, int64_t cin,
                                             int64_t cout,
                                             sg_spectral_cuda **out) {
  sg_status st = SG_OK;
  sg_spectral_cuda *s = NULL;
  const int64_t rmax = nb * (cin > cout ? cin : cout);
  if (!g || !out || (dt != SG_DTYPE_F32 && dt != SG_DTYPE_F64))
    SG_RAISE(SG_ERR_INVALID_ARG, "spectral conv on cuda: f32 or f64 geometry");
  *out = NULL;
  for (int d = 0; d < g->nd; ++d)
    if (g->n[d] > INT32_MAX)
      SG_RAISE(SG_ERR_NOT_SUPPORTED, "spectral conv on cuda: dim %d too long",
               d);
  if (rmax > INT32_MAX)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "spectral conv on cuda: %lld rows",
             (long long)rmax);
  s = (sg_spectral_cuda *)calloc(1, sizeof *s);
  if (!s) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  s->f64 = dt == SG_DTYPE_F64;
  s->g = *g;
  s->nb = nb;
  s->cin = cin;
  s->cout = cout;
  {
    const size_t es = s->f64 ? sizeof(double) : sizeof(float);
    SG_CUDA(cudaMalloc(&s->F, 2 * es * (size_t)(rmax * g->nf)));
    SG_CUDA(cudaMalloc(&s->kin, 2 * es * (size_t)(nb * cin * g->M)));
    SG_CUDA(cudaMalloc(&s->kout, 2 * es * (size_t)(nb * cout * g->M)));
  }
  SG_TRY(plan(s, nb * cin, 1, &s->fin, &s->have[0]));
  SG_TRY(plan(s, nb * cin, 0, &s->bin, &s->have[1]));
  SG_TRY(plan(s, nb * cout, 1, &s->fout, &s->have[2]));
  SG_TRY(plan(s, nb * cout, 0, &s->bout, &s->have[3]));
  *out = s;
  return SG_OK;
fail:
  sg_spectral_cuda_destroy(&s);
  return st;
}

extern "C" void sg_spectral_cuda_destroy(sg_spectral_cuda **sp) {
  if (!sp || !*sp) return;
  sg_spectral_cuda *s = *sp;
  const cufftHandle h[4] = {s->fin, s->bin, s->fout, s->bout};
  for (int i = 0; i < 4; ++i)
    if (s->have[i]) cufftDestroy(h[i]);
  cudaFree(s->F);
  cudaFree(s->kin);
  cudaFree(s->kout);
  free(s);
  *sp = NULL;
}

extern "C" sg_status sg_spectral_cuda_forward(sg_spectral_cuda *s,
                                              const void *x, const void *w,
                                              void *y, void *xhat) {
  sg_status st = SG_OK;
  void *xh = xhat ? xhat : s->kin;
  SG_TRY(r2c(s, s->fin, x, s->F));
  SG_TRY(gather_run(s, s->nb * s->cin, s->F, xh, 1.0, 1.0));
  SG_TRY(mix_run(s, 0, xh, w, s->kout));
  SG_TRY(scatter_run(s, s->nb * s->cout, s->kout, s->F, 1.0 / real_count(&s->g),
                     1.0));
  SG_TRY(c2r(s, s->bout, s->F, y));
fail:
  return st;
}

extern "C" sg_status sg_spectral_cuda_backward(sg_spectral_cuda *s,
                                               const void *x, const void *xhat,
                                               const void *w, const void *dy,
                                               void *dx, void *dw) {
  sg_status st = SG_OK;
  if (!dx && !dw) return SG_OK;
  // dyhat = the adjoint of the normalised inverse: 1/N, pair modes twice
  SG_TRY(r2c(s, s->fout, dy, s->F));
  SG_TRY(gather_run(s, s->nb * s->cout, s->F, s->kout, 1.0 / real_count(&s->g),
                    2.0));
  if (dw) {
    const void *xh = xhat;
    if (!xh) {
      SG_TRY(r2c(s, s->fin, x, s->F));
      SG_TRY(gather_run(s, s->nb * s->cin, s->F, s->kin, 1.0, 1.0));
      xh = s->kin;
    }
    SG_TRY(mix_run(s, 2, xh, s->kout, dw));
  }
  if (dx) {
    // the adjoint of the forward transform: pair modes halved
    SG_TRY(mix_run(s, 1, s->kout, w, s->kin));
    SG_TRY(scatter_run(s, s->nb * s->cin, s->kin, s->F, 1.0, 0.5));
    SG_TRY(c2r(s, s->bin, s->F, dx));
  }
fail:
  return st;
}

extern "C" sg_status sg_spec_mix_cuda(int f64, int which, int64_t nb,
                                      int64_t cin, int64_t cout, int64_t M,
                                      const void *a, const void *b, void *out) {
  sg_status st = SG_OK;
  const int64_t n = which == 0   ? nb * cout * M
                    : which == 1 ? nb * cin * M
                                 : cin * cout * M;
  if (n < 1) return SG_OK;
  if (f64)
    mix_k_f64<<<grid_for(n), kThreads>>>(which, nb, cin, cout, M, n,
                                         (const double *)a, (const double *)b,
                                         (double *)out);
  else
    mix_k_f32<<<grid_for(n), kThreads>>>(which, nb, cin, cout, M, n,
                                         (const float *)a, (const float *)b,
                                         (float *)out);
  SG_CUDA(cudaGetLastError());
fail:
  return st;
}

extern "C" sg_status sg_spec_wlocal_cuda(int f64, int add, int64_t io,
                                         int64_t M, int64_t K,
                                         const int64_t *gidx, void *W,
                                         void *wl) {
  sg_status st = SG_OK;
  const int64_t n = io * M;
  if (n < 1) return SG_OK;
  if (f64)
    wlocal_k_f64<<<grid_for(n), kThreads>>>(n, M, K, gidx, (double *)W,
                                            (double *)wl, add);
  else
    wlocal_k_f32<<<grid_for(n), kThreads>>>(n, M, K, gidx, (float *)W,
                                            (float *)wl, add);
  SG_CUDA(cudaGetLastError());
fail:
  return st;
}
