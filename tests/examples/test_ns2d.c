/* The Navier–Stokes solver: a Taylor–Green vortex decays as
 * exp(-nu |k|^2 t) (|k|^2 = 8 pi^2, i.e. exp(-2 nu k^2 t) with k = 2 pi per
 * component) to 1e-6 relative, and a random-field run on every mesh that
 * fits the process count equals the one-process run to 1e-6. */
#include "sg_mesh.h"
#include "sg_ns2d.h"
#include "sg_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define PI 3.14159265358979323846

static void taylor_green(const char *spec) {
  sg_mesh_t mesh = NULL;
  sg_ns2d_t ns = NULL;
  double *w = NULL;
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  sg_ns2d_config c = {
      32, 5e-3, 2e-3, 0.0, 0, SG_NS2D_INIT_TAYLOR_GREEN, SG_NS2D_GRF_CODE};
  SG_REQUIRE_OK(sg_ns2d_create(mesh, &c, 2, &ns));
  int64_t y0, ny, x0, nx;
  sg_ns2d_box(ns, &y0, &ny, &x0, &nx);
  w = malloc((size_t)(2 * ny * nx + 1) * sizeof *w);
  SG_REQUIRE_OK(sg_ns2d_init_state(ns, 0));
  SG_REQUIRE_OK(sg_ns2d_step(ns, 50));
  SG_REQUIRE_OK(sg_ns2d_vorticity(ns, w));
  double t = sg_ns2d_time(ns), decay = exp(-c.nu * 8.0 * PI * PI * t);
  double err = 0.0, ref = 0.0;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t j = 0; j < ny; ++j)
      for (int64_t i = 0; i < nx; ++i) {
        double y = (double)(y0 + j) / 32.0, x = (double)(x0 + i) / 32.0;
        double exact = sin(2 * PI * x) * sin(2 * PI * y) * decay;
        double d = fabs(w[(b * ny + j) * nx + i] - exact);
        err = d > err ? d : err;
        ref = fabs(exact) > ref ? fabs(exact) : ref;
      }
  double g[2] = {err, ref}, gm[2];
  MPI_Allreduce(g, gm, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  SG_CHECK(gm[0] <= 1e-6 * gm[1],
           "Taylor-Green on %s: max error %.3g relative to %.3g (t = %g)", spec,
           gm[0], gm[1], t);
done:
  sg_ns2d_destroy(&ns);
  sg_mesh_destroy(&mesh);
  free(w);
}

static void grf_vs_one(const char *spec) {
  sg_mesh_t mesh = NULL, one = NULL;
  sg_ns2d_t ns = NULL, ns1 = NULL;
  double *w = NULL, *w1 = NULL;
  const int64_t n = 36, batch = 2;
  sg_ns2d_config c = {
      n, 1e-3, 2e-3, 0.1, 7, SG_NS2D_INIT_GRF, SG_NS2D_GRF_CODE};
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_SELF, "h=1", &one));
  SG_REQUIRE_OK(sg_ns2d_create(mesh, &c, batch, &ns));
  SG_REQUIRE_OK(sg_ns2d_create(one, &c, batch, &ns1));
  int64_t y0, ny, x0, nx;
  sg_ns2d_box(ns, &y0, &ny, &x0, &nx);
  w = malloc((size_t)(batch * ny * nx + 1) * sizeof *w);
  w1 = malloc((size_t)(batch * n * n) * sizeof *w1);
  SG_REQUIRE_OK(sg_ns2d_init_state(ns, 3));
  SG_REQUIRE_OK(sg_ns2d_init_state(ns1, 3));
  SG_REQUIRE_OK(sg_ns2d_step(ns, 10));
  SG_REQUIRE_OK(sg_ns2d_step(ns1, 10));
  SG_REQUIRE_OK(sg_ns2d_vorticity(ns, w));
  SG_REQUIRE_OK(sg_ns2d_vorticity(ns1, w1));
  double err = 0.0, ref = 0.0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j = 0; j < ny; ++j)
      for (int64_t i = 0; i < nx; ++i) {
        double a = w[(b * ny + j) * nx + i],
               r = w1[(b * n + y0 + j) * n + x0 + i];
        err = fabs(a - r) > err ? fabs(a - r) : err;
        ref = fabs(r) > ref ? fabs(r) : ref;
      }
  double g[2] = {err, ref}, gm[2];
  MPI_Allreduce(g, gm, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  SG_CHECK(gm[1] > 0.1, "field is not trivial (max %g)", gm[1]);
  SG_CHECK(gm[0] <= 1e-6 * gm[1],
           "GRF run on %s vs one process: max diff %.3g relative to %.3g", spec,
           gm[0], gm[1]);
done:
  sg_ns2d_destroy(&ns);
  sg_ns2d_destroy(&ns1);
  sg_mesh_destroy(&mesh);
  sg_mesh_destroy(&one);
  free(w);
  free(w1);
}

/* The initial field's variance, averaged over samples and grid points,
 * against sum_k s(k)^2 with s(k)^2 = c (4 pi^2 |k|^2 + 49)^{-2.5}, k != 0
 * (the discrete field's exact variance). 32 samples x 32^2 points: the
 * estimate's relative standard error is about 0.1 (a few modes carry
 * most of the variance), so the band is +-35%; the two scales differ by
 * a factor 37 in variance. */
#define M_PI_SQ (3.14159265358979323846 * 3.14159265358979323846)
static void grf_variance(sg_ns2d_grf_scale scale) {
  sg_mesh_t one = NULL;
  sg_ns2d_t ns = NULL;
  const int64_t n = 32, batch = 32;
  double *w = malloc((size_t)(batch * n * n) * sizeof *w);
  sg_ns2d_config c = {n, 1e-3, 1e-3, 0.1, 11, SG_NS2D_INIT_GRF, scale};
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_SELF, "h=1", &one));
  SG_REQUIRE_OK(sg_ns2d_create(one, &c, batch, &ns));
  SG_REQUIRE_OK(sg_ns2d_init_state(ns, 0));
  SG_REQUIRE_OK(sg_ns2d_vorticity(ns, w));
  double var = 0.0, mean = 0.0;
  for (int64_t q = 0; q < batch * n * n; ++q) mean += w[q];
  mean /= (double)(batch * n * n);
  for (int64_t q = 0; q < batch * n * n; ++q)
    var += (w[q] - mean) * (w[q] - mean);
  var /= (double)(batch * n * n);
  const double cc = scale == SG_NS2D_GRF_TEXT ? pow(7.0, 1.5)
                                              : 2.0 * pow(7.0, 3.0);
  double theory = 0.0;
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < n; ++i) {
      double ky = (double)(j <= n / 2 ? j : j - n),
             kx = (double)(i <= n / 2 ? i : i - n);
      double k2 = 4.0 * M_PI_SQ * (kx * kx + ky * ky);
      if (k2 > 0.0) theory += cc * pow(k2 + 49.0, -2.5);
    }
  SG_CHECK(fabs(var / theory - 1.0) < 0.35,
           "GRF (%s scale): variance %.4g, covariance gives %.4g",
           scale == SG_NS2D_GRF_TEXT ? "text" : "code", var, theory);
done:
  sg_ns2d_destroy(&ns);
  sg_mesh_destroy(&one);
  free(w);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  int p = sg_test_size;
  char spec[64];
  for (int a = 1; a <= p; ++a) {
    if (p % a) continue;
    snprintf(spec, sizeof spec, "h=%d,w=%d", a, p / a);
    taylor_green(spec);
    grf_vs_one(spec);
  }
  if (p % 2 == 0) {
    snprintf(spec, sizeof spec, "dp=2,h=%d", p / 2);
    grf_vs_one(spec);
  }
  if (sg_test_rank == 0) {
    grf_variance(SG_NS2D_GRF_CODE);
    grf_variance(SG_NS2D_GRF_TEXT);
  }
  return sg_test_finish();
}
