/* The GPU ops against the vendor libraries (issue 22), one process, f32:
 *   sgemm      cuBLAS SGEMM (no TF32) at square sizes: the peak the others
 *              are measured against (the highest TFLOP/s of these)
 *   conv_*     sg_conv_fwd_cuda / sg_conv_bwd_cuda (dx only, dW only) at the
 *              bench/train CNN's layer and a larger one: TFLOP/s and the
 *              fraction of the SGEMM peak
 *   linear_*   sg_linear_fwd_cuda / _bwd_cuda (the FNO/CNN projection)
 *   spectral_* sg_spectral_conv_forward_cuda / _backward_cuda (dx and dW from
 *              the saved spectrum) beside a bare cuFFT r2c of the input
 *              channels plus a c2r of the output channels, same sizes:
 *              cufft_over_ours is the share the FFTs alone would take
 * Each: warm-up, then REPS calls timed one by one with CUDA events on the
 * legacy default stream, the median. One JSON line per measurement (the
 * first describes the device). Exits 2, saying so, without a CUDA device.
 *   mpiexec -n 1 build-cuda/bin/bench/bench_gpu_ops [--reps 20] [--quick] */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cufft.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sg_ops.h"
#include "sg_ops_cuda.h"
#include "sg_spectral.h"

static int reps = 20, warm = 3;

#define CU(call)                                                  \
  do {                                                            \
    cudaError_t e_ = (call);                                      \
    if (e_ != cudaSuccess) {                                      \
      fprintf(stderr, "bench_gpu_ops: %s: %s (line %d)\n", #call, \
              cudaGetErrorString(e_), __LINE__);                  \
      exit(1);                                                    \
    }                                                             \
  } while (0)
#define OK(call)                                                              \
  do {                                                                        \
    int r_ = (int)(call);                                                     \
    if (r_ != 0) {                                                            \
      fprintf(stderr, "bench_gpu_ops: %s returned %d (line %d)\n", #call, r_, \
              __LINE__);                                                      \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

static int cmpf(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* the median time of one call, ms: warm-up, then reps event pairs */
typedef void (*call_fn)(void *ctx);
static double time_ms(call_fn f, void *ctx) {
  cudaEvent_t a, b;
  CU(cudaEventCreate(&a));
  CU(cudaEventCreate(&b));
  for (int i = 0; i < warm; ++i) f(ctx);
  CU(cudaDeviceSynchronize());
  float *t = malloc(sizeof *t * (size_t)reps);
  if (!t) exit(1);
  for (int i = 0; i < reps; ++i) {
    CU(cudaEventRecord(a, 0));
    f(ctx);
    CU(cudaEventRecord(b, 0));
    CU(cudaEventSynchronize(b));
    CU(cudaEventElapsedTime(&t[i], a, b));
  }
  CU(cudaGetLastError());
  qsort(t, (size_t)reps, sizeof *t, cmpf);
  const double med = t[reps / 2];
  free(t);
  CU(cudaEventDestroy(a));
  CU(cudaEventDestroy(b));
  return med;
}

/* device buffer of n floats, uniform in [-0.5, 0.5) */
static float *dev_rand(size_t n) {
  float *h = malloc(sizeof *h * (n ? n : 1)), *d = NULL;
  if (!h) exit(1);
  for (size_t i = 0; i < n; ++i) h[i] = (float)rand() / RAND_MAX - 0.5f;
  CU(cudaMalloc((void **)&d, sizeof *d * (n ? n : 1)));
  CU(cudaMemcpy(d, h, sizeof *d * n, cudaMemcpyHostToDevice));
  free(h);
  return d;
}

/* ---- cuBLAS SGEMM ---- */
typedef struct {
  cublasHandle_t h;
  int n;
  float *a, *b, *c;
} gemm_ctx;
static void gemm_call(void *p) {
  gemm_ctx *g = p;
  const float one = 1, zero = 0;
  OK(cublasSgemm(g->h, CUBLAS_OP_N, CUBLAS_OP_N, g->n, g->n, g->n, &one, g->a,
                 g->n, g->b, g->n, &zero, g->c, g->n));
}
static double bench_sgemm(int quick) {
  gemm_ctx g;
  OK(cublasCreate(&g.h));
  OK(cublasSetMathMode(g.h, CUBLAS_DEFAULT_MATH)); /* f32 products, no TF32 */
  const int sizes[] = {1024, 2048, 4096, 8192};
  double peak = 0;
  for (int k = 0; k < (quick ? 2 : 4); ++k) {
    g.n = sizes[k];
    const size_t nn = (size_t)g.n * g.n;
    g.a = dev_rand(nn), g.b = dev_rand(nn), g.c = dev_rand(nn);
    const double ms = time_ms(gemm_call, &g);
    const double tf = 2.0 * g.n * g.n * (double)g.n / (ms * 1e-3) / 1e12;
    if (tf > peak) peak = tf;
    printf("{\"bench\": \"sgemm\", \"m\": %d, \"n\": %d, \"k\": %d, "
           "\"ms\": %.4f, \"tflops\": %.3f}\n",
           g.n, g.n, g.n, ms, tf);
    fflush(stdout);
    CU(cudaFree(g.a));
    CU(cudaFree(g.b));
    CU(cudaFree(g.c));
  }
  OK(cublasDestroy(g.h));
  printf("{\"bench\": \"sgemm_peak\", \"tflops\": %.3f}\n", peak);
  return peak;
}

/* ---- convolution (2-D, stride 1, valid on the padded block) ---- */
typedef struct {
  sg_conv_desc d;
  float *x, *w, *b, *y, *dy, *dx, *dw, *db;
  int which; /* 0 forward, 1 dx, 2 dW (+ db) */
} conv_ctx;
static void conv_call(void *p) {
  conv_ctx *c = p;
  if (c->which == 0)
    OK(sg_conv_fwd_cuda(&c->d, SG_DTYPE_F32, c->x, c->w, c->b, c->y, NULL,
                        NULL));
  else if (c->which == 1)
    OK(sg_conv_bwd_cuda(&c->d, SG_DTYPE_F32, c->x, c->w, c->dy, c->dx, NULL,
                        NULL, NULL, NULL));
  else
    OK(sg_conv_bwd_cuda(&c->d, SG_DTYPE_F32, c->x, c->w, c->dy, NULL, c->dw,
                        c->db, NULL, NULL));
}
static void bench_conv(const char *tag, int64_t batch, int64_t ch, int64_t n,
                       int64_t k, double peak) {
  conv_ctx c = {.d = {.nsp = 2,
                      .batch = batch,
                      .cin = ch,
                      .cout = ch,
                      .in = {n + k - 1, n + k - 1},
                      .kernel = {k, k},
                      .stride = {1, 1},
                      .dilation = {1, 1}}};
  const size_t nx = (size_t)(batch * ch * (n + k - 1) * (n + k - 1)),
               ny = (size_t)(batch * ch * n * n),
               nw = (size_t)(ch * ch * k * k);
  c.x = dev_rand(nx), c.dx = dev_rand(nx), c.w = dev_rand(nw),
  c.dw = dev_rand(nw), c.b = dev_rand((size_t)ch), c.db = dev_rand((size_t)ch),
  c.y = dev_rand(ny), c.dy = dev_rand(ny);
  const double flop = 2.0 * (double)ny * (double)(ch * k * k);
  static const char *names[] = {"conv_fwd", "conv_dx", "conv_dw"};
  for (c.which = 0; c.which < 3; ++c.which) {
    const double ms = time_ms(conv_call, &c);
    const double tf = flop / (ms * 1e-3) / 1e12;
    printf("{\"bench\": \"%s\", \"case\": \"%s\", \"batch\": %lld, "
           "\"cin\": %lld, \"cout\": %lld, \"n\": %lld, \"kernel\": %lld, "
           "\"ms\": %.4f, \"tflops\": %.3f, \"frac_sgemm_peak\": %.3f}\n",
           names[c.which], tag, (long long)batch, (long long)ch, (long long)ch,
           (long long)n, (long long)k, ms, tf, peak > 0 ? tf / peak : 0.0);
    fflush(stdout);
  }
  float *bufs[] = {c.x, c.dx, c.w, c.dw, c.b, c.db, c.y, c.dy};
  for (int i = 0; i < 8; ++i) CU(cudaFree(bufs[i]));
}

/* ---- channel-wise linear ---- */
typedef struct {
  int64_t batch, cin, cout, sp;
  float *x, *w, *b, *y, *dy, *dx, *dw, *db;
  int bwd;
} lin_ctx;
static void lin_call(void *p) {
  lin_ctx *l = p;
  if (!l->bwd)
    OK(sg_linear_fwd_cuda(SG_DTYPE_F32, l->batch, l->cin, l->cout, l->sp, l->x,
                          l->w, l->b, l->y, NULL));
  else
    OK(sg_linear_bwd_cuda(SG_DTYPE_F32, l->batch, l->cin, l->cout, l->sp, l->x,
                          l->w, l->dy, l->dx, l->dw, l->db, NULL));
}
static void bench_linear(int64_t batch, int64_t cin, int64_t cout, int64_t sp,
                         double peak) {
  lin_ctx l = {.batch = batch, .cin = cin, .cout = cout, .sp = sp};
  const size_t nx = (size_t)(batch * cin * sp),
               ny = (size_t)(batch * cout * sp);
  l.x = dev_rand(nx), l.dx = dev_rand(nx), l.y = dev_rand(ny),
  l.dy = dev_rand(ny), l.w = dev_rand((size_t)(cin * cout)),
  l.dw = dev_rand((size_t)(cin * cout)), l.b = dev_rand((size_t)cout),
  l.db = dev_rand((size_t)cout);
  for (l.bwd = 0; l.bwd < 2; ++l.bwd) {
    const double flop = (l.bwd ? 4.0 : 2.0) * (double)ny * (double)cin;
    const double ms = time_ms(lin_call, &l);
    const double tf = flop / (ms * 1e-3) / 1e12;
    printf("{\"bench\": \"%s\", \"batch\": %lld, \"cin\": %lld, "
           "\"cout\": %lld, \"spatial\": %lld, \"ms\": %.4f, \"tflops\": %.3f, "
           "\"frac_sgemm_peak\": %.3f}\n",
           l.bwd ? "linear_bwd" : "linear_fwd", (long long)batch,
           (long long)cin, (long long)cout, (long long)sp, ms, tf,
           peak > 0 ? tf / peak : 0.0);
    fflush(stdout);
  }
  float *bufs[] = {l.x, l.dx, l.y, l.dy, l.w, l.dw, l.b, l.db};
  for (int i = 0; i < 8; ++i) CU(cudaFree(bufs[i]));
}

/* ---- spectral convolution against bare cuFFT ---- */
typedef struct {
  sg_spectral_conv_t conv;
  float *x, *w, *y, *xhat, *dy, *dx, *dw;
  int bwd;
  cufftHandle r2c, c2r;
  float *fx, *fy;
  cufftComplex *fx_hat, *fy_hat;
} spec_ctx;
static void spec_call(void *p) {
  spec_ctx *s = p;
  if (!s->bwd)
    OK(sg_spectral_conv_forward_cuda(s->conv, s->x, s->w, s->y, s->xhat));
  else
    OK(sg_spectral_conv_backward_cuda(s->conv, s->x, s->xhat, s->w, s->dy,
                                      s->dx, s->dw));
}
static void fft_call(void *p) { /* what a forward or backward must transform */
  spec_ctx *s = p;
  OK(cufftExecR2C(s->r2c, s->fx, s->fx_hat));
  OK(cufftExecC2R(s->c2r, s->fy_hat, s->fy));
}
static void bench_spectral(const char *tag, int64_t batch, int64_t ch,
                           int64_t n, int64_t modes) {
  sg_fft_desc desc;
  sg_fft_desc_init(&desc);
  desc.dtype = SG_DTYPE_F32;
  desc.ndim = 2;
  desc.batch = batch;
  desc.shape[0] = desc.shape[1] = n;
  desc.keep[0] = desc.keep[1] = modes;
  spec_ctx s = {0};
  OK(sg_spectral_conv_create_comms(MPI_COMM_SELF, 0, NULL, &desc, ch, ch,
                                   &s.conv));
  const size_t nx = (size_t)(batch * ch * n * n),
               nW = (size_t)sg_spectral_conv_weight_count(s.conv),
               nh = (size_t)sg_spectral_conv_spectrum_count(s.conv);
  s.x = dev_rand(nx), s.dx = dev_rand(nx), s.y = dev_rand(nx),
  s.dy = dev_rand(nx), s.w = dev_rand(nW), s.dw = dev_rand(nW),
  s.xhat = dev_rand(nh);
  /* bare cuFFT: r2c of batch*ch planes, c2r of batch*ch planes */
  int dims[2] = {(int)n, (int)n};
  OK(cufftPlanMany(&s.r2c, 2, dims, NULL, 1, 0, NULL, 1, 0, CUFFT_R2C,
                   (int)(batch * ch)));
  OK(cufftPlanMany(&s.c2r, 2, dims, NULL, 1, 0, NULL, 1, 0, CUFFT_C2R,
                   (int)(batch * ch)));
  const size_t nc = (size_t)(batch * ch * n * (n / 2 + 1));
  s.fx = dev_rand(nx), s.fy = dev_rand(nx);
  CU(cudaMalloc((void **)&s.fx_hat, sizeof(cufftComplex) * nc));
  CU(cudaMalloc((void **)&s.fy_hat, sizeof(cufftComplex) * nc));
  CU(cudaMemset(s.fy_hat, 0, sizeof(cufftComplex) * nc));
  const double fft_ms = time_ms(fft_call, &s);
  for (s.bwd = 0; s.bwd < 2; ++s.bwd) {
    const double ms = time_ms(spec_call, &s);
    printf("{\"bench\": \"%s\", \"case\": \"%s\", \"batch\": %lld, "
           "\"channels\": %lld, \"n\": %lld, \"modes\": %lld, \"ms\": %.4f, "
           "\"cufft_r2c_c2r_ms\": %.4f, \"cufft_over_ours\": %.3f}\n",
           s.bwd ? "spectral_bwd" : "spectral_fwd", tag, (long long)batch,
           (long long)ch, (long long)n, (long long)modes, ms, fft_ms,
           fft_ms / ms);
    fflush(stdout);
  }
  OK(cufftDestroy(s.r2c));
  OK(cufftDestroy(s.c2r));
  void *bufs[] = {s.x,    s.dx, s.y,  s.dy,     s.w,     s.dw,
                  s.xhat, s.fx, s.fy, s.fx_hat, s.fy_hat};
  for (int i = 0; i < 11; ++i) CU(cudaFree(bufs[i]));
  OK(sg_spectral_conv_destroy(&s.conv));
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int quick = 0;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--quick"))
      quick = 1;
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: bench_gpu_ops [--reps N] [--quick]\n");
      MPI_Finalize();
      return 2;
    }
  }
  if (reps < 1) reps = 1;
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev < 1) {
    fprintf(stderr,
            "bench_gpu_ops: no CUDA device (%s): nothing was measured\n",
            e != cudaSuccess ? cudaGetErrorString(e) : "count 0");
    MPI_Finalize();
    return 2;
  }
  CU(cudaSetDevice(0));
  struct cudaDeviceProp prop;
  CU(cudaGetDeviceProperties(&prop, 0));
  int rt = 0, drv = 0;
  CU(cudaRuntimeGetVersion(&rt));
  CU(cudaDriverGetVersion(&drv));
  printf("{\"bench\": \"device\", \"name\": \"%s\", \"sm\": \"%d.%d\", "
         "\"mem_gib\": %.1f, \"cuda_runtime\": %d, \"cuda_driver\": %d, "
         "\"devices\": %d, \"reps\": %d}\n",
         prop.name, prop.major, prop.minor, prop.totalGlobalMem / 1073741824.0,
         rt, drv, ndev, reps);
  fflush(stdout);
  srand(1);
  const double peak = bench_sgemm(quick);
  /* the bench/train CNN's 3x3 layer (batch 8, width 32, 64^2) and a larger */
  bench_conv("cnn_train", 8, 32, 64, 3, peak);
  if (!quick) bench_conv("large", 32, 64, 128, 3, peak);
  /* the projection to 128 of bench/train's FNO and CNN */
  bench_linear(8, 32, 128, 64 * 64, peak);
  /* the bench/train FNO's layer (width 32, 12 modes, 64^2) and a larger */
  bench_spectral("fno_train", 8, 32, 64, 12);
  if (!quick) bench_spectral("large", 8, 64, 256, 32);
  MPI_Finalize();
  return 0;
}
