/* The element-wise host loops that share their arithmetic with the CUDA
 * kernels (sg_ops_inl.h, optim_inl.h; issue 22): CPU time per call (median
 * of 15) and a checksum of the outputs' bits, one JSON line per loop. Run
 * against another build's library (LD_LIBRARY_PATH) for an A/B with bits.
 *   OMP_NUM_THREADS=1 build/bin/bench/bench_elementwise */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "sg_ops.h"
#include "sg_optim.h"

#define N (1 << 20)
static double cpu(void) { /* this process's CPU time, s */
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}
static uint64_t hash(const void *p, size_t bytes) {
  const unsigned char *c = p;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}
static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
#define TIME(name, call, out, bytes)                                          \
  do {                                                                        \
    double t[15];                                                             \
    for (int r = 0; r < 15; ++r) {                                            \
      double t0 = cpu();                                                      \
      call;                                                                   \
      t[r] = cpu() - t0;                                                      \
    }                                                                         \
    qsort(t, 15, sizeof *t, cmpd);                                            \
    printf("{\"loop\": \"%s\", \"ms\": %.4f, \"bits\": \"%016llx\"}\n", name, \
           1e3 * t[7], (unsigned long long)hash(out, bytes));                 \
  } while (0)

int main(void) {
  /* error returns are not checked: the checksums show a failed call */
  float *a = malloc(4 * N), *b = malloc(4 * N), *y = malloc(4 * N),
        *z = malloc(4 * N), *m = calloc(N, 4), *v = calloc(N, 4);
  double *ad = malloc(8 * N), *bd = malloc(8 * N), *yd = malloc(8 * N),
         *zd = malloc(8 * N);
  srand(1);
  for (int i = 0; i < N; ++i) {
    a[i] = (float)rand() / RAND_MAX - 0.5f;
    b[i] = (float)rand() / RAND_MAX - 0.5f;
    ad[i] = a[i], bd[i] = b[i];
  }
  double part[64];
  TIME("binary add f32",
       sg_binary_forward(SG_BINARY_ADD, SG_DTYPE_F32, N, a, b, y), y, 4 * N);
  TIME("binary mul f64",
       sg_binary_forward(SG_BINARY_MUL, SG_DTYPE_F64, N, ad, bd, yd), yd,
       8 * N);
  TIME("binary bwd mul f32",
       sg_binary_backward(SG_BINARY_MUL, SG_DTYPE_F32, N, a, b, b, y, z), z,
       4 * N);
  TIME("binary bwd add f64",
       sg_binary_backward(SG_BINARY_ADD, SG_DTYPE_F64, N, ad, bd, bd, yd, zd),
       zd, 8 * N);
  TIME("scale f32", sg_scale(SG_DTYPE_F32, N, 0.3, a, y), y, 4 * N);
  TIME("bias fwd f32", sg_bias_forward(SG_DTYPE_F32, 4, 16, N / 64, a, b, y), y,
       4 * N);
  TIME("bias fwd f64", sg_bias_forward(SG_DTYPE_F64, 4, 16, N / 64, ad, bd, yd),
       yd, 8 * N);
  TIME("loss partial mse f32",
       sg_loss_partial(SG_LOSS_MSE, SG_DTYPE_F32, 4, N, a, b, part), part, 16);
  TIME("loss partial rel f64",
       sg_loss_partial(SG_LOSS_REL_L2, SG_DTYPE_F64, 4, N, ad, bd, part), part,
       64);
  TIME("loss bwd mse f32",
       sg_loss_backward(SG_LOSS_MSE, SG_DTYPE_F32, 4, N, a, b,
                        (double[]){3.0, (double)N}, 0.7, y, z),
       z, 4 * N);
  TIME("loss bwd rel f64",
       sg_loss_backward(SG_LOSS_REL_L2, SG_DTYPE_F64, 4, N, ad, bd, part, 0.7,
                        yd, zd),
       zd, 8 * N);
  /* pooling: 2x2 stride 2 and 3x3 stride 1 over 16 planes of 128 x 128
   * (N / 64 = 16384 cells each; a, ad hold them) */
  sg_conv_desc pd = {.nsp = 2,
                     .batch = 4,
                     .cin = 4,
                     .cout = 4,
                     .in = {128, 128},
                     .kernel = {2, 2},
                     .stride = {2, 2},
                     .dilation = {1, 1}};
  sg_conv_desc pd3 = pd;
  pd3.kernel[0] = pd3.kernel[1] = 3, pd3.stride[0] = pd3.stride[1] = 1;
  TIME("pool avg 2x2 fwd f32",
       sg_pool_forward(SG_POOL_AVG, &pd, SG_DTYPE_F32, a, y), y, 4 * N / 16);
  TIME("pool max 3x3 fwd f32",
       sg_pool_forward(SG_POOL_MAX, &pd3, SG_DTYPE_F32, a, y), y,
       4 * 15876 * 16);
  TIME("pool max 2x2 bwd f32",
       sg_pool_backward(SG_POOL_MAX, &pd, SG_DTYPE_F32, a, b, z), z, 4 * N / 4);
  TIME("pool avg 3x3 bwd f64",
       sg_pool_backward(SG_POOL_AVG, &pd3, SG_DTYPE_F64, ad, bd, zd), zd,
       8 * N / 4);
  TIME("pool max 3x3 fwd f64",
       sg_pool_forward(SG_POOL_MAX, &pd3, SG_DTYPE_F64, ad, yd), yd,
       8 * 15876 * 16);
  /* up-sampling by 2: 16 planes of 126 x 126 (+ 1-cell margins: linear) */
  const int64_t uin[2] = {128, 128}, uin_n[2] = {126, 126}, us[2] = {2, 2};
  TIME("upsample linear fwd f32",
       sg_upsample_forward(SG_UPSAMPLE_LINEAR, 2, 16, uin, us, SG_DTYPE_F32, a,
                           y),
       y, 4 * 16 * 252 * 252);
  TIME("upsample linear bwd f64",
       sg_upsample_backward(SG_UPSAMPLE_LINEAR, 2, 16, uin, us, SG_DTYPE_F64,
                            bd, zd),
       zd, 8 * N / 4);
  TIME("upsample nearest fwd f32",
       sg_upsample_forward(SG_UPSAMPLE_NEAREST, 2, 16, uin_n, us, SG_DTYPE_F32,
                           a, y),
       y, 4 * 16 * 252 * 252);
  sg_adamw_config cfg = sg_adamw_defaults();
  cfg.weight_decay = 0.01;
  memcpy(y, a, 4 * N);
  TIME("adamw f32", sg_adamw_step_f32(y, b, m, v, N, 3, 1e-3, 0.5, &cfg), y,
       4 * N);
  return 0;
}
