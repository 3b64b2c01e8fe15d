/* bench/ops: conv2d forward + backward GFLOP/s on one rank, beside the
 * machine's measured cblas_sgemm peak (a large square GEMM with the same
 * thread count, measured in this program).
 *
 *   OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 bench_ops [--reps R]
 *
 * Prints one JSON line per measurement. The convolution kernels run OpenMP
 * over (batch, tile) with single-threaded BLAS inside; the SGEMM peak uses
 * OpenBLAS's own threads (the same count). Times are medians of R runs. */
#include <cblas.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sg_ops.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static float *frand(int64_t n) {
  float *p = malloc((size_t)n * sizeof *p);
  uint64_t s = 12345;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5);
  }
  return p;
}

static double sgemm_peak(int n, int reps) {
  float *a = frand((int64_t)n * n), *b = frand((int64_t)n * n), *c = frand((int64_t)n * n);
  double *t = malloc((size_t)reps * sizeof *t);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
  for (int r = 0; r < reps; ++r) {
    double t0 = now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
    t[r] = now() - t0;
  }
  double gf = 2.0 * n * n * (double)n / median(t, reps) / 1e9;
  printf("{\"bench\":\"sgemm\",\"n\":%d,\"threads\":%d,\"gflops\":%.1f}\n", n,
         openblas_get_num_threads(), gf);
  fflush(stdout);
  free(a); free(b); free(c); free(t);
  return gf;
}

/* One timed 2048^3 SGEMM (the peak reference), run between the conv
 * repetitions so both see the same machine load. */
static float *gem_a, *gem_b, *gem_c;
static double sgemm_once(void) {
  const int n = 2048;
  if (!gem_a) {
    gem_a = frand((int64_t)n * n);
    gem_b = frand((int64_t)n * n);
    gem_c = frand((int64_t)n * n);
  }
  double t0 = now();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, gem_a, n, gem_b, n, 0, gem_c, n);
  return 2.0 * n * n * (double)n / (now() - t0) / 1e9;
}

static void conv_bench(const char *name, int64_t nb, int64_t c, int64_t k, int64_t h,
                       int64_t w, int reps, double peak) {
  double *pk = malloc((size_t)reps * sizeof *pk);
  sg_conv_desc d = {.nsp = 2, .batch = nb, .cin = c, .cout = k, .in = {h + 2, w + 2},
                    .kernel = {3, 3}, .stride = {1, 1}, .dilation = {1, 1}};
  int64_t out[2];
  if (sg_conv_out_shape(&d, out) != SG_OK) return;
  int64_t nx = nb * c * (h + 2) * (w + 2), ny = nb * k * out[0] * out[1], nw = k * c * 9;
  float *x = frand(nx), *wt = frand(nw), *b = frand(k), *y = frand(ny), *dy = frand(ny);
  float *dx = frand(nx), *dw = calloc((size_t)nw, sizeof *dw), *db = calloc((size_t)k, sizeof *db);
  size_t wsb = sg_conv_workspace_bytes(&d, SG_DTYPE_F32);
  void *ws = aligned_alloc(64, (wsb + 63) / 64 * 64);
  double *tf = malloc((size_t)reps * sizeof *tf), *tb = malloc((size_t)reps * sizeof *tb);
  double *tt = malloc((size_t)reps * sizeof *tt);
  sg_status st = sg_conv_forward(&d, SG_DTYPE_F32, x, wt, b, y, ws);
  st |= sg_conv_backward(&d, SG_DTYPE_F32, x, wt, dy, dx, dw, db, ws);
  for (int r = 0; r < reps && st == SG_OK; ++r) {
    pk[r] = sgemm_once();
    double t0 = now();
    st |= sg_conv_forward(&d, SG_DTYPE_F32, x, wt, b, y, ws);
    double t1 = now();
    st |= sg_conv_backward(&d, SG_DTYPE_F32, x, wt, dy, dx, dw, db, ws);
    double t2 = now();
    tf[r] = t1 - t0;
    tb[r] = t2 - t1;
    tt[r] = t2 - t0;
  }
  if (st != SG_OK) {
    fprintf(stderr, "bench_ops: %s\n", sg_last_error());
    return;
  }
  double fl = 2.0 * (double)(nb * k * c * 9 * out[0] * out[1]);
  peak = median(pk, reps);
  free(pk);
  double gf = fl / median(tf, reps) / 1e9, gb = 2 * fl / median(tb, reps) / 1e9;
  double gt = 3 * fl / median(tt, reps) / 1e9;
  printf("{\"bench\":\"conv2d\",\"case\":\"%s\",\"batch\":%lld,\"cin\":%lld,\"cout\":%lld,"
         "\"h\":%lld,\"w\":%lld,\"kernel\":3,\"threads\":%d,\"fwd_gflops\":%.1f,"
         "\"bwd_gflops\":%.1f,\"fwd_bwd_gflops\":%.1f,\"fwd_bwd_ms\":%.1f,"
         "\"sgemm_peak_gflops\":%.1f,\"fraction_of_peak\":%.2f}\n",
         name, (long long)nb, (long long)c, (long long)k, (long long)h, (long long)w,
         omp_get_max_threads(), gf, gb, gt, 1e3 * median(tt, reps), peak, gt / peak);
  fflush(stdout);
  free(x); free(wt); free(b); free(y); free(dy); free(dx); free(dw); free(db); free(ws);
  free(tf); free(tb); free(tt);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int reps = 5;
  for (int i = 1; i < argc; ++i)
    if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
  if (reps < 1) reps = 1;
  double peak = sgemm_peak(2048, reps);
  conv_bench("large", 8, 32, 32, 256, 256, reps, peak);
  conv_bench("small", 8, 32, 32, 64, 64, reps, peak);
  conv_bench("wide", 4, 64, 64, 128, 128, reps, peak);
  peak = sgemm_peak(2048, reps);
  MPI_Finalize();
  return 0;
}
