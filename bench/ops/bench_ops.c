/* bench/ops: conv2d forward + backward GFLOP/s on one rank, beside the
 * machine's measured cblas_sgemm peak (a large square GEMM with the same
 * thread count, measured in this program).
 *
 *   OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 bench_ops [--reps R]
 *
 *   ... bench_ops --bf16 ROUNDS: per case, ROUNDS alternations of the f32
 *   kernels and the bf16 ones (sg_conv_desc.bf16; vdpbf16ps where the CPU
 *   has it) on the same bf16-valued inputs ("bf16":0/1 in the output).
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

#include "bench_util.h"

#include "sg_device.h"
#include "sg_ops.h"
#ifdef SG_BENCH_SHARDED
#include "sg_mesh.h"
#include "sg_sharded_ops.h"
#endif


static double sgemm_peak(int n, int reps) {
  float *a = frand((int64_t)n * n), *b = frand((int64_t)n * n),
        *c = frand((int64_t)n * n);
  double *t = malloc((size_t)reps * sizeof *t);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n,
              0, c, n);
  for (int r = 0; r < reps; ++r) {
    double t0 = now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b,
                n, 0, c, n);
    t[r] = now() - t0;
  }
  double gf = 2.0 * n * n * (double)n / median(t, reps) / 1e9;
  printf("{\"bench\":\"sgemm\",\"n\":%d,\"threads\":%d,\"gflops\":%.1f}\n", n,
         openblas_get_num_threads(), gf);
  fflush(stdout);
  free(a);
  free(b);
  free(c);
  free(t);
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
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, gem_a, n,
              gem_b, n, 0, gem_c, n);
  return 2.0 * n * n * (double)n / (now() - t0) / 1e9;
}

static int bench_bf16; /* the bf16 kernels for this conv_bench call */

static void conv_bench(const char *name, int64_t nb, int64_t c, int64_t k,
                       int64_t h, int64_t w, int reps, double peak) {
  double *pk = malloc((size_t)reps * sizeof *pk);
  sg_conv_desc d = {.nsp = 2,
                    .batch = nb,
                    .cin = c,
                    .cout = k,
                    .in = {h + 2, w + 2},
                    .kernel = {3, 3},
                    .stride = {1, 1},
                    .dilation = {1, 1},
                    .bf16 = bench_bf16};
  int64_t out[2];
  if (sg_conv_out_shape(&d, out) != SG_OK) return;
  int64_t nx = nb * c * (h + 2) * (w + 2), ny = nb * k * out[0] * out[1],
          nw = k * c * 9;
  float *x = frand(nx), *wt = frand(nw), *b = frand(k), *y = frand(ny),
        *dy = frand(ny);
  float *dx = frand(nx), *dw = calloc((size_t)nw, sizeof *dw),
        *db = calloc((size_t)k, sizeof *db);
  sg_round_bf16(x, nx); /* the values of the bf16 policy, for both paths */
  sg_round_bf16(wt, nw);
  sg_round_bf16(dy, ny);
  size_t wsb = sg_conv_workspace_bytes(&d, SG_DTYPE_F32);
  void *ws = aligned_alloc(64, (wsb + 63) / 64 * 64);
  double *tf = malloc((size_t)reps * sizeof *tf),
         *tb = malloc((size_t)reps * sizeof *tb);
  double *tt = malloc((size_t)reps * sizeof *tt);
  /* the backward's two GEMM-sized parts alone: dx (dw, db NULL) and dw
   * (dx NULL), to see which one holds the backward back */
  double *tdx = malloc((size_t)reps * sizeof *tdx),
         *tdw = malloc((size_t)reps * sizeof *tdw);
  sg_status st = sg_conv_forward(&d, SG_DTYPE_F32, x, wt, b, y, ws);
  st |= sg_conv_backward(&d, SG_DTYPE_F32, x, wt, dy, dx, dw, db, ws);
  for (int r = 0; r < reps && st == SG_OK; ++r) {
    pk[r] = sgemm_once();
    double t0 = now();
    st |= sg_conv_forward(&d, SG_DTYPE_F32, x, wt, b, y, ws);
    double t1 = now();
    st |= sg_conv_backward(&d, SG_DTYPE_F32, x, wt, dy, dx, dw, db, ws);
    double t2 = now();
    st |= sg_conv_backward(&d, SG_DTYPE_F32, x, wt, dy, dx, NULL, NULL, ws);
    double t3 = now();
    st |= sg_conv_backward(&d, SG_DTYPE_F32, x, wt, dy, NULL, dw, NULL, ws);
    double t4 = now();
    tf[r] = t1 - t0;
    tb[r] = t2 - t1;
    tt[r] = t2 - t0;
    tdx[r] = t3 - t2;
    tdw[r] = t4 - t3;
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
  double gdx = fl / median(tdx, reps) / 1e9, gdw = fl / median(tdw, reps) / 1e9;
  printf(
      "{\"bench\":\"conv2d\",\"case\":\"%s\",\"bf16\":%d,\"batch\":%lld,\"cin\":%lld,\"cout\":%lld,"
      "\"h\":%lld,\"w\":%lld,\"kernel\":3,\"threads\":%d,\"fwd_gflops\":%.1f,"
      "\"bwd_gflops\":%.1f,\"dx_gflops\":%.1f,\"dw_gflops\":%.1f,"
      "\"fwd_bwd_gflops\":%.1f,\"fwd_bwd_ms\":%.1f,"
      "\"sgemm_peak_gflops\":%.1f,\"fraction_of_peak\":%.2f}\n",
      name, bench_bf16, (long long)nb, (long long)c, (long long)k, (long long)h,
      (long long)w, omp_get_max_threads(), gf, gb, gdx, gdw, gt,
      1e3 * median(tt, reps), peak, gt / peak);
  fflush(stdout);
  free(x);
  free(wt);
  free(b);
  free(y);
  free(dy);
  free(dx);
  free(dw);
  free(db);
  free(ws);
  free(tf);
  free(tb);
  free(tt);
  free(tdx);
  free(tdw);
}

#ifdef SG_BENCH_SHARDED
/* Sharded conv2d forward + backward on a mesh (dims named dp, h, w shard
 * batch, H, W): time per step (median), GFLOP/s of the global problem, and
 * the peak memory of each rank (core's accounting) from before the input is
 * made to after backward. */
static int sharded_bench(const char *spec, int64_t nb, int64_t c, int64_t k,
                         int64_t h, int64_t w, int reps) {
  sg_mesh_t mesh = NULL;
  sg_status st = sg_mesh_create(MPI_COMM_WORLD, spec, &mesh);
  if (st != SG_OK) {
    fprintf(stderr, "bench_ops: %s\n", sg_last_error());
    return 1;
  }
  sg_placement pl[SG_MESH_MAX_DIMS];
  for (int m = 0; m < SG_MESH_MAX_DIMS; ++m) {
    pl[m] = sg_replicate();
    if (m >= sg_mesh_ndims(mesh)) continue;
    const char *nm = sg_mesh_dim_name(mesh, m);
    if (!strcmp(nm, "dp")) pl[m] = sg_shard(0);
    if (!strcmp(nm, "h")) pl[m] = sg_shard(2);
    if (!strcmp(nm, "w")) pl[m] = sg_shard(3);
  }
  const sg_window win[2] = {
      {.kernel = 3, .pad = {1, 1}, .boundary = SG_BOUNDARY_ZERO},
      {.kernel = 3, .pad = {1, 1}, .boundary = SG_BOUNDARY_PERIODIC}};
  const int64_t xs[4] = {nb, c, h, w}, ys[4] = {nb, k, h, w};
  float *wt = frand(k * c * 9), *b = frand(k),
        *dw = calloc((size_t)(k * c * 9), sizeof *dw),
        *db = calloc((size_t)k, sizeof *db);
  double *t = malloc((size_t)reps * sizeof *t);
  sg_shardtensor x, dy;
  sg_mem_reset_peak(sg_device_host());
  sg_mem_info m0;
  sg_mem_get_info(sg_device_host(), &m0);
  st = sg_shardtensor_create(&x, mesh, SG_DTYPE_F32, 4, xs, pl, NULL);
  if (st == SG_OK)
    st = sg_shardtensor_create(&dy, mesh, SG_DTYPE_F32, 4, ys, pl, NULL);
  if (st == SG_OK) {
    int64_t nx = 1, ny = 1;
    for (int d = 0; d < 4; ++d) {
      nx *= x.local_shape[d];
      ny *= dy.local_shape[d];
    }
    float *r = frand(nx > ny ? nx : ny);
    memcpy(x.local.data, r, (size_t)nx * sizeof *r);
    memcpy(dy.local.data, r, (size_t)ny * sizeof *r);
    free(r);
  }
  for (int rep = -1; rep < reps && st == SG_OK; ++rep) {
    sg_shardtensor y, dx;
    sg_sharded_ctx_t ctx = NULL;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    st = sg_sharded_conv_forward(&x, win, k, wt, b, &y, &ctx);
    if (st == SG_OK) st = sg_sharded_conv_backward(ctx, wt, &dy, &dx, dw, db);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rep >= 0) t[rep] = now() - t0;
    sg_shardtensor_destroy(&y);
    sg_shardtensor_destroy(&dx);
    sg_sharded_ctx_destroy(&ctx);
  }
  sg_mem_info m1;
  sg_mem_get_info(sg_device_host(), &m1);
  if (st != SG_OK) {
    fprintf(stderr, "bench_ops: %s\n", sg_last_error());
  } else {
    double peak = (double)(m1.peak_bytes - m0.current_bytes), maxpeak = 0;
    MPI_Allreduce(&peak, &maxpeak, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double fl = 3 * 2.0 * (double)(nb * k * c * 9 * h * w);
    double tm = median(t, reps);
    int size = 1, rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0)
      printf(
          "{\"bench\":\"sharded_conv2d\",\"mesh\":\"%s\",\"ranks\":%d,\"threads_per_rank\":%d,"
          "\"batch\":%lld,\"cin\":%lld,\"cout\":%lld,\"h\":%lld,\"w\":%lld,"
          "\"fwd_bwd_ms\":%.1f,\"gflops\":%.1f,\"peak_mib_per_rank\":%.1f}\n",
          spec, size, omp_get_max_threads(), (long long)nb, (long long)c,
          (long long)k, (long long)h, (long long)w, 1e3 * tm, fl / tm / 1e9,
          maxpeak / 1048576.0);
    fflush(stdout);
  }
  sg_shardtensor_destroy(&x);
  sg_shardtensor_destroy(&dy);
  sg_mesh_destroy(&mesh);
  free(wt);
  free(b);
  free(dw);
  free(db);
  free(t);
  return st != SG_OK;
}
#endif

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int reps = 5, rounds = 0;
  const char *mesh_spec = NULL;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--mesh") && i + 1 < argc)
      mesh_spec = argv[++i];
    else if (!strcmp(argv[i], "--bf16") && i + 1 < argc)
      rounds = atoi(argv[++i]);
  }
  if (reps < 1) reps = 1;
  if (mesh_spec) {
#ifdef SG_BENCH_SHARDED
    int rc = sharded_bench(mesh_spec, 8, 32, 32, 256, 256, reps);
    MPI_Finalize();
    return rc;
#else
    fprintf(stderr, "bench_ops: --mesh needs the halo layer\n");
    MPI_Finalize();
    return 1;
#endif
  }
  double peak = sgemm_peak(2048, reps);
  for (int r = 0; r < (rounds > 0 ? 2 * rounds : 1); ++r) {
    bench_bf16 = rounds > 0 ? r % 2 : 0;
    conv_bench("large", 8, 32, 32, 256, 256, reps, peak);
    conv_bench("small", 8, 32, 32, 64, 64, reps, peak);
    conv_bench("wide", 4, 64, 64, 128, 128, reps, peak);
  }
  peak = sgemm_peak(2048, reps);
  MPI_Finalize();
  return 0;
}
