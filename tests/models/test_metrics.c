/* Latitude-weighted metrics (sg_metrics.h): the MSE, ACC and weight sums
 * of a field split over the domain (uneven blocks of rows and columns on
 * 1-4 ranks) equal one process's to 1e-12 (f64), the same bits on every
 * rank; a NaN at a valid point of one rank is an error on every rank, at a
 * masked point ignored; sg_lat_weights refuses latitudes outside [-90, 90].
 * With --ref DIR it scores the case check_metrics.py wrote there (the
 * numpy reference of the WeatherBench 2 formulas): DIR/out.txt. */
#include "sg_mesh.h"
#include "sg_metrics.h"
#include "sg_rng.h"
#include "sg_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A global case: n forecasts of nv variables on ny x nx, the latitudes. */
typedef struct gcase {
  int64_t n, nv, ny, nx;
  double *lat, *f, *o, *c, *m;
} gcase;

/* This rank's block of a balanced split of len over parts. */
static void split(int64_t len, int parts, int idx, int64_t *s, int64_t *c) {
  *c = len / parts + (idx < len % parts);
  *s = idx * (len / parts) + (idx < len % parts ? idx : len % parts);
}

/* Copy rows [y0, y0+ly) and columns [x0, x0+lx) of every (i, v) plane of
 * g (nplanes of them) into out. */
static void take(const double *g, int64_t nplanes, int64_t ny, int64_t nx,
                 int64_t y0, int64_t ly, int64_t x0, int64_t lx, double *out) {
  for (int64_t p = 0; p < nplanes; ++p)
    for (int64_t j = 0; j < ly; ++j)
      memcpy(out + (p * ly + j) * lx, g + (p * ny + y0 + j) * nx + x0,
             (size_t)lx * sizeof *out);
}

typedef struct block {
  double *w, *f, *o, *c, *m;
  sg_metric_block b;
} block;

/* This rank's block of g on a mesh whose dims 0 and 1 split y and x. */
static int make_block(const gcase *g, sg_mesh_t mesh, const double *wg,
                      block *B) {
  int64_t y0, ly, x0, lx;
  const int nd = sg_mesh_ndims(mesh);
  split(g->ny, sg_mesh_dim_size(mesh, 0), sg_mesh_coord(mesh, 0), &y0, &ly);
  if (nd > 1)
    split(g->nx, sg_mesh_dim_size(mesh, 1), sg_mesh_coord(mesh, 1), &x0, &lx);
  else
    x0 = 0, lx = g->nx;
  const int64_t np = g->n * g->nv, n = np * ly * lx + 1;
  B->w = malloc((size_t)(ly + 1) * sizeof *B->w);
  B->f = malloc((size_t)n * sizeof *B->f);
  B->o = malloc((size_t)n * sizeof *B->o);
  B->m = malloc((size_t)n * sizeof *B->m);
  B->c = malloc((size_t)(g->nv * ly * lx + 1) * sizeof *B->c);
  if (!B->w || !B->f || !B->o || !B->m || !B->c) return 0;
  memcpy(B->w, wg + y0, (size_t)ly * sizeof *B->w);
  take(g->f, np, g->ny, g->nx, y0, ly, x0, lx, B->f);
  take(g->o, np, g->ny, g->nx, y0, ly, x0, lx, B->o);
  take(g->m, np, g->ny, g->nx, y0, ly, x0, lx, B->m);
  take(g->c, g->nv, g->ny, g->nx, y0, ly, x0, lx, B->c);
  B->b = (sg_metric_block){SG_DTYPE_F64, g->n, g->nv, ly,   lx,
                           B->w,         B->f, B->o,  B->c, B->m};
  return 1;
}

static void free_block(block *B) {
  free(B->w);
  free(B->f);
  free(B->o);
  free(B->c);
  free(B->m);
}

static sg_status domain_of(sg_mesh_t mesh, sg_group_t *g) {
  return sg_mesh_group(mesh, (1u << sg_mesh_ndims(mesh)) - 1u, g);
}

/* A random case: latitudes -81 .. 81, a few masked points, the second
 * variable of forecast 1 wholly masked. */
static int random_case(gcase *g) {
  *g = (gcase){3, 2, 7, 5, NULL, NULL, NULL, NULL, NULL};
  const int64_t n = g->n * g->nv * g->ny * g->nx, nc = g->nv * g->ny * g->nx;
  g->lat = malloc((size_t)g->ny * sizeof *g->lat);
  g->f = malloc((size_t)n * sizeof *g->f);
  g->o = malloc((size_t)n * sizeof *g->o);
  g->m = malloc((size_t)n * sizeof *g->m);
  g->c = malloc((size_t)nc * sizeof *g->c);
  if (!g->lat || !g->f || !g->o || !g->m || !g->c) return 0;
  for (int64_t j = 0; j < g->ny; ++j) g->lat[j] = -81.0 + 27.0 * (double)j;
  sg_rng_fill(SG_RNG_NORMAL, 0, 1, 7, 0, 0, n, SG_DTYPE_F64, g->f);
  sg_rng_fill(SG_RNG_NORMAL, 0, 1, 7, 1, 0, n, SG_DTYPE_F64, g->o);
  sg_rng_fill(SG_RNG_NORMAL, 0, 1, 7, 2, 0, nc, SG_DTYPE_F64, g->c);
  const int64_t plane = g->ny * g->nx;
  for (int64_t i = 0; i < n; ++i)
    g->m[i] = (i % 11 == 3 || (i / plane) == 1 * g->nv + 1) ? 0.0 : 1.0;
  for (int64_t i = 0; i < n; ++i) /* fill values at masked points */
    if (g->m[i] == 0.0) g->f[i] = g->o[i] = 1e20;
  return 1;
}

static void free_case(gcase *g) {
  free(g->lat);
  free(g->f);
  free(g->o);
  free(g->c);
  free(g->m);
}

/* Every split of the ranks (h=P, w=P, h x w): the same values as one
 * process to 1e-12, the same bits on every rank. */
static void run_split(const gcase *g, const char *spec) {
  sg_mesh_t mesh = NULL;
  sg_group_t dom = NULL;
  block B, W;
  memset(&B, 0, sizeof B);
  memset(&W, 0, sizeof W);
  const int64_t k = g->n * g->nv;
  double wg[64], r1[3 * 64], rs[3 * 64];
  SG_REQUIRE_OK(sg_lat_weights(g->ny, g->lat, wg));
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  SG_REQUIRE_OK(domain_of(mesh, &dom));
  SG_CHECK(make_block(g, mesh, wg, &B), "out of memory");
  /* one process: the whole field on this rank, no group */
  W.b = (sg_metric_block){SG_DTYPE_F64, g->n, g->nv, g->ny, g->nx,
                          wg,           g->f, g->o,  g->c,  g->m};
  SG_REQUIRE_OK(sg_dist_metrics(&W.b, NULL, r1, r1 + k, r1 + 2 * k));
  SG_REQUIRE_OK(sg_dist_metrics(&B.b, dom, rs, rs + k, rs + 2 * k));
  SG_CHECK(sg_test_cmp_f64(spec, rs, r1, 3 * k, 1e-12, 1e-14) == 0,
           "%s: sharded metrics differ from one process", spec);
  SG_CHECK(rs[2 * k + g->nv + 1] == 0.0 && rs[g->nv + 1] == 0.0,
           "%s: a wholly masked field has weight %g, mse %g", spec,
           rs[2 * k + g->nv + 1], rs[g->nv + 1]);
  double lo[3 * 64], hi[3 * 64]; /* the same bits on every rank */
  MPI_Allreduce(rs, lo, (int)(3 * k), MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(rs, hi, (int)(3 * k), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  SG_CHECK(memcmp(lo, hi, (size_t)(3 * k) * sizeof *lo) == 0,
           "%s: ranks disagree", spec);
  /* the relative L2 sums (no climatology), added twice as over two frames:
   * sharded == one process == the direct sums over the whole field */
  {
    sg_metric_block w1 = W.b, b1 = B.b;
    w1.c = b1.c = NULL;
    double s1[2 * 64] = {0}, ss[2 * 64] = {0}, want[2 * 64] = {0};
    const int64_t plane = g->ny * g->nx;
    for (int64_t i = 0; i < g->n; ++i)
      for (int64_t e = i * g->nv * plane; e < (i + 1) * g->nv * plane; ++e) {
        const double wv = wg[(e % plane) / g->nx] * g->m[e];
        if (wv == 0.0) continue;
        want[2 * i] += 2.0 * wv * (g->f[e] - g->o[e]) * (g->f[e] - g->o[e]);
        want[2 * i + 1] += 2.0 * wv * g->o[e] * g->o[e];
      }
    for (int rep = 0; rep < 2; ++rep) {
      SG_REQUIRE_OK(sg_rel_l2_sums_add(&w1, NULL, s1));
      SG_REQUIRE_OK(sg_rel_l2_sums_add(&b1, dom, ss));
    }
    SG_CHECK(sg_test_cmp_f64(spec, s1, want, 2 * g->n, 1e-12, 1e-14) == 0,
             "%s: one-process relative L2 sums differ from the direct sums",
             spec);
    SG_CHECK(sg_test_cmp_f64(spec, ss, s1, 2 * g->n, 1e-12, 1e-14) == 0,
             "%s: sharded relative L2 sums differ from one process", spec);
    SG_CHECK_STATUS(sg_rel_l2_sums_add(&B.b, dom, ss), SG_ERR_INVALID_ARG);
  }
  /* a NaN at a masked point: ignored; at a valid point of the last rank:
   * an error on every rank */
  const int64_t nl = k * B.b.ny * B.b.nx;
  int64_t vi = -1, mi = -1;
  for (int64_t i = 0; i < nl; ++i) {
    if (B.m[i] != 0.0 && vi < 0) vi = i;
    if (B.m[i] == 0.0 && mi < 0) mi = i;
  }
  if (mi >= 0) B.f[mi] = NAN;
  SG_CHECK_OK(sg_dist_metrics(&B.b, dom, rs, NULL, NULL));
  if (sg_test_rank == sg_test_size - 1 && vi >= 0) B.o[vi] = NAN;
  SG_CHECK_STATUS(sg_dist_metrics(&B.b, dom, rs, rs + k, NULL),
                  SG_ERR_INVALID_ARG);
done:
  free_block(&B);
  sg_mesh_destroy(&mesh);
}

/* sg_scores: the ranks of a group score different forecasts of the whole
 * field (forecast i on rank i mod P, in slot i mod 2; the last forecast
 * left out as padding); their sum over the group equals one process
 * scoring them in turn, to 1e-12, the same bits on every rank; RMSE/ACC
 * are the means over the forecasts with a valid point (forecast 1's
 * wholly masked variable 1 is left out); an empty slot gives NaN. */
static void run_scores(const gcase *g) {
  sg_mesh_t mesh = NULL;
  sg_group_t all = NULL;
  double wg[64];
  char spec[32];
  const int64_t plane = g->nv * g->ny * g->nx;
  sg_scores *one = sg_scores_new(3, g->nv), *mine = sg_scores_new(3, g->nv);
  SG_REQUIRE_OK(one && mine ? SG_OK : SG_ERR_ALLOC);
  SG_REQUIRE_OK(sg_lat_weights(g->ny, g->lat, wg));
  snprintf(spec, sizeof spec, "h=%d", sg_test_size);
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  SG_REQUIRE_OK(domain_of(mesh, &all));
  for (int64_t i = 0; i < g->n; ++i) {
    const sg_metric_block b = {SG_DTYPE_F64,
                               1,
                               g->nv,
                               g->ny,
                               g->nx,
                               wg,
                               g->f + i * plane,
                               g->o + i * plane,
                               g->c,
                               g->m + i * plane};
    const int64_t valid = i + 1 < g->n; /* the last: padding */
    SG_CHECK_OK(sg_scores_add(one, i % 2, &b, valid, NULL));
    if (i % sg_test_size == sg_test_rank)
      SG_CHECK_OK(sg_scores_add(mine, i % 2, &b, valid, NULL));
  }
  SG_CHECK_OK(sg_scores_allreduce(mine, all));
  const int64_t ns = 4 * 3 * g->nv;
  SG_CHECK(sg_test_cmp_f64("scores", mine->sum, one->sum, ns, 1e-12, 1e-14) ==
               0,
           "scores summed over the group differ from one process");
  double m[2 * 8]; /* slot 0 holds forecast 0 only: mse, acc per var */
  const sg_metric_block b0 = {SG_DTYPE_F64, 1,    g->nv, g->ny, g->nx,
                              wg,           g->f, g->o,  g->c,  g->m};
  SG_CHECK_OK(sg_dist_metrics(&b0, NULL, m, m + g->nv, NULL));
  SG_CHECK(fabs(sg_scores_rmse(one, 0, 0) - sqrt(m[0])) < 1e-14 &&
               fabs(sg_scores_acc(one, 0, 0) - m[g->nv]) < 1e-14,
           "slot 0: RMSE %g ACC %g, want %g %g", sg_scores_rmse(one, 0, 0),
           sg_scores_acc(one, 0, 0), sqrt(m[0]), m[g->nv]);
  SG_CHECK(isnan(sg_scores_rmse(one, 2, 0)) && isnan(sg_scores_acc(one, 2, 1)),
           "an empty slot is not NaN");
  SG_CHECK_STATUS(sg_scores_add(one, 3, &b0, 1, NULL), SG_ERR_INVALID_ARG);
  double lo[4 * 3 * 8], hi[4 * 3 * 8];
  MPI_Allreduce(mine->sum, lo, (int)ns, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(mine->sum, hi, (int)ns, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  SG_CHECK(memcmp(lo, hi, (size_t)ns * sizeof(double)) == 0,
           "ranks disagree on the summed scores");
done:
  sg_scores_free(one);
  sg_scores_free(mine);
  sg_mesh_destroy(&mesh);
}

static void run_weights(void) {
  double lat[3] = {-90, 0, 90}, w[3], bad[2] = {0, 91};
  SG_CHECK_OK(sg_lat_weights(3, lat, w));
  SG_CHECK(w[0] == 0.0 && w[2] == 0.0 && fabs(w[1] - 3.0) < 1e-15,
           "weights of -90, 0, 90: %g %g %g", w[0], w[1], w[2]);
  SG_CHECK_STATUS(sg_lat_weights(2, bad, w), SG_ERR_INVALID_ARG);
}

/* --ref DIR: in.bin (int64 n, nv, ny, nx; then f64 lat, f, o, c, m) ->
 * out.txt: RMSE_v and ACC_v (WeatherBench 2: over the forecasts with a
 * valid point), split over the ranks (h = P). */
static void run_ref(const char *dir) {
  char path[4096];
  gcase g;
  memset(&g, 0, sizeof g);
  sg_mesh_t mesh = NULL;
  sg_group_t dom = NULL;
  sg_scores *sc = NULL;
  block B;
  memset(&B, 0, sizeof B);
  int64_t d[4];
  snprintf(path, sizeof path, "%s/in.bin", dir);
  FILE *fp = fopen(path, "rb");
  SG_CHECK(fp && fread(d, sizeof *d, 4, fp) == 4, "cannot read %s", path);
  if (!fp) return;
  g = (gcase){d[0], d[1], d[2], d[3], NULL, NULL, NULL, NULL, NULL};
  const int64_t n = d[0] * d[1] * d[2] * d[3], nc = d[1] * d[2] * d[3];
  double *buf = malloc((size_t)(d[2] + 3 * n + nc) * sizeof *buf);
  size_t want = (size_t)(d[2] + 3 * n + nc);
  SG_CHECK(buf && fread(buf, sizeof *buf, want, fp) == want, "short %s", path);
  fclose(fp);
  g.lat = buf, g.f = buf + d[2], g.o = g.f + n, g.c = g.o + n, g.m = g.c + nc;
  double wg[4096], *r = calloc((size_t)(3 * d[0] * d[1]), sizeof *r);
  SG_REQUIRE_OK(d[2] <= 4096 && r ? SG_OK : SG_ERR_ALLOC);
  SG_REQUIRE_OK(sg_lat_weights(d[2], g.lat, wg));
  snprintf(path, sizeof path, "h=%d", sg_test_size);
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, path, &mesh));
  SG_REQUIRE_OK(domain_of(mesh, &dom));
  SG_CHECK(make_block(&g, mesh, wg, &B), "out of memory");
  const int64_t k = d[0] * d[1];
  (void)k;
  sc = sg_scores_new(1, d[1]);
  SG_REQUIRE_OK(sc ? SG_OK : SG_ERR_ALLOC);
  SG_REQUIRE_OK(sg_scores_add(sc, 0, &B.b, d[0], dom));
  snprintf(path, sizeof path, "%s/out.txt", dir);
  FILE *out = sg_test_rank == 0 ? fopen(path, "w") : NULL;
  for (int64_t v = 0; v < d[1] && out; ++v)
    fprintf(out, "%.17g %.17g\n", sg_scores_rmse(sc, 0, v),
            sg_scores_acc(sc, 0, v));
  if (out) fclose(out);
done:
  free_block(&B);
  sg_scores_free(sc);
  free(r);
  free(buf);
  sg_mesh_destroy(&mesh);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  if (argc == 3 && strcmp(argv[1], "--ref") == 0) {
    run_ref(argv[2]);
    return sg_test_finish();
  }
  gcase g;
  if (!random_case(&g)) SG_CHECK(0, "out of memory");
  run_weights();
  run_scores(&g);
  char spec[64];
  snprintf(spec, sizeof spec, "h=%d", sg_test_size);
  run_split(&g, spec);
  snprintf(spec, sizeof spec, "h=1,w=%d", sg_test_size);
  run_split(&g, spec);
  if (sg_test_size == 4) run_split(&g, "h=2,w=2");
  free_case(&g);
  return sg_test_finish();
}
