/* Distributed r2c / c2r FFT against one-process FFTW, on every mesh and
 * layout that fits the number of ranks: slab (both orientations, uneven at
 * 3 ranks), 2x2 (2-D: both dims split; 3-D: pencils), batch carried along.
 * Tolerances are normwise: max |a - b| <= rel * max |reference|, rel 1e-12
 * (f64) and 1e-5 (f32). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fft_testutil.h"
#include "sg_device.h"
#include "sg_fft.h"
#include "sg_test.h"

static int64_t prodn(const int64_t *v, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; ++i) p *= v[i];
  return p;
}

static void run_grid(int D, const int64_t *shape, int64_t batch, sg_dtype dt,
                     const ft_layout *L, int nl) {
  int64_t cshape[3];
  for (int d = 0; d < D; ++d)
    cshape[d] = d == D - 1 ? shape[d] / 2 + 1 : shape[d];
  const int64_t nr = batch * prodn(shape, D), nc = batch * prodn(cshape, D);
  double ntot = (double)prodn(shape, D);
  double *x = malloc(sizeof(double) * (size_t)nr);
  double *y = malloc(sizeof(double) * 2 * (size_t)nc);
  double *xr = malloc(sizeof(double) * (size_t)nr);
  ft_fill(x, nr, 11 + (uint64_t)D);
  ft_ref_r2c(D, shape, batch, x, y);
  ft_ref_c2r(D, shape, batch, y, xr);
  for (int64_t i = 0; i < nr; ++i) xr[i] /= ntot;
  const double rel = dt == SG_DTYPE_F64 ? 1e-12 : 1e-5;
  const double ty = rel * ft_maxabs(y, 2 * nc), tx = rel * ft_maxabs(x, nr);
  const size_t es = sg_dtype_size(dt);
  for (int li = 0; li < nl; ++li) {
    sg_fft_desc desc;
    sg_fft_desc_init(&desc);
    desc.dtype = dt;
    desc.ndim = D;
    desc.batch = batch;
    desc.nthreads = 1;
    /* cache blocking: one batch element at a time on some layouts (the
     * stages then run per chunk, each chunk's transposes collective) */
    if (batch > 1 && li % 3 == 1) desc.chunk = 1;
    /* both transpose paths: shared-memory window and MPI_Alltoallv */
    if ((li / 2) % 2) desc.flags |= SG_FFT_MPI_ALLTOALL;
    for (int d = 0; d < D; ++d) {
      desc.shape[d] = shape[d];
      desc.split[d] = L[li].split[d];
    }
    char what[200];
    snprintf(what, sizeof what, "%dD %lldx%lldx%lld b%lld %s %s%s", D,
             (long long)shape[0], (long long)shape[1],
             (long long)(D == 3 ? shape[2] : 1), (long long)batch,
             sg_dtype_name(dt), L[li].name,
             (desc.flags & SG_FFT_MPI_ALLTOALL) ? " alltoallv" : " shm");
    if (desc.chunk) {
      size_t l = strlen(what);
      snprintf(what + l, sizeof what - l, " chunk %lld", (long long)desc.chunk);
    }
    sg_fft_plan_t plan = NULL;
    void *xl = NULL, *yl = NULL, *x2 = NULL, *yin = NULL;
    double *a = NULL, *b = NULL;
    /* mesh plans, and the plain-communicator entry point on odd layouts */
    if (li % 2 == 0)
      SG_REQUIRE_OK(sg_fft_plan_create(L[li].mesh, &desc, &plan));
    else
      SG_REQUIRE_OK(
          sg_fft_plan_create_comms(MPI_COMM_WORLD, 2, L[li].ax, &desc, &plan));
    int64_t ro[3], rl[3], so[3], sl[3];
    sg_fft_plan_local_box(plan, SG_FFT_SPACE_REAL, ro, rl);
    sg_fft_plan_local_box(plan, SG_FFT_SPACE_SPECTRAL, so, sl);
    int64_t nrl = sg_fft_plan_local_count(plan, SG_FFT_SPACE_REAL);
    int64_t ncl = sg_fft_plan_local_count(plan, SG_FFT_SPACE_SPECTRAL);
    SG_CHECK(nrl == batch * prodn(rl, D), "%s: real count", what);
    SG_CHECK(ncl == 2 * batch * prodn(sl, D), "%s: spectral count", what);
    /* the boxes of all ranks tile the global arrays */
    {
      int64_t cnt[2] = {prodn(rl, D), prodn(sl, D)}, tot[2];
      MPI_Allreduce(cnt, tot, 2, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
      int dup = 1;
      for (int a2 = 0; a2 < 2; ++a2)
        if (L[li].split[0] != a2 && L[li].split[1] != a2 &&
            (D < 3 || L[li].split[2] != a2))
          dup *= L[li].p[a2];
      SG_CHECK(tot[0] == dup * prodn(shape, D), "%s: real boxes tile", what);
      SG_CHECK(tot[1] == dup * prodn(cshape, D), "%s: spectral boxes tile",
               what);
    }
    SG_REQUIRE_OK(sg_malloc(sg_device_host(), (size_t)(nrl + 1) * es, &xl));
    SG_REQUIRE_OK(sg_malloc(sg_device_host(), (size_t)(nrl + 1) * es, &x2));
    SG_REQUIRE_OK(sg_malloc(sg_device_host(), (size_t)(ncl + 2) * es, &yl));
    SG_REQUIRE_OK(sg_malloc(sg_device_host(), (size_t)(ncl + 2) * es, &yin));
    a = malloc(sizeof(double) * (size_t)(ncl + nrl + 2));
    b = malloc(sizeof(double) * (size_t)(ncl + nrl + 2));
    ft_extract(x, D, shape, batch, 1, ro, rl, xl, dt);
    /* forward == FFTW */
    SG_CHECK_OK(sg_fft_forward(plan, xl, yl));
    ft_to_f64(yl, dt, ncl, a);
    ft_extract(y, D, cshape, batch, 2, so, sl, b, SG_DTYPE_F64);
    char w2[256];
    snprintf(w2, sizeof w2, "%s forward", what);
    SG_CHECK(ft_cmp(w2, a, b, ncl, ty) == 0, "%s", w2);
    /* the input is untouched */
    ft_extract(x, D, shape, batch, 1, ro, rl, x2, dt);
    SG_CHECK(sg_test_cmp_bytes("input kept", xl, x2, (size_t)nrl * es) == 0,
             "%s: forward modified its input", what);
    /* inverse of the reference spectrum == FFTW c2r / N */
    ft_extract(y, D, cshape, batch, 2, so, sl, yin, dt);
    memcpy(yl, yin, (size_t)ncl * es);
    SG_CHECK_OK(sg_fft_inverse(plan, yl, x2));
    SG_CHECK(sg_test_cmp_bytes("spectrum kept", yl, yin, (size_t)ncl * es) == 0,
             "%s: inverse modified its input", what);
    ft_to_f64(x2, dt, nrl, a);
    ft_extract(xr, D, shape, batch, 1, ro, rl, b, SG_DTYPE_F64);
    snprintf(w2, sizeof w2, "%s inverse", what);
    SG_CHECK(ft_cmp(w2, a, b, nrl, tx) == 0, "%s", w2);
    /* round trip */
    SG_CHECK_OK(sg_fft_forward(plan, xl, yl));
    SG_CHECK_OK(sg_fft_inverse(plan, yl, x2));
    ft_to_f64(x2, dt, nrl, a);
    ft_to_f64(xl, dt, nrl, b);
    snprintf(w2, sizeof w2, "%s round trip", what);
    SG_CHECK(ft_cmp(w2, a, b, nrl, tx) == 0, "%s", w2);
  done:
    sg_fft_plan_destroy(&plan);
    sg_free(sg_device_host(), &xl);
    sg_free(sg_device_host(), &x2);
    sg_free(sg_device_host(), &yl);
    sg_free(sg_device_host(), &yin);
    free(a);
    free(b);
  }
  free(x);
  free(y);
  free(xr);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  ft_layout L2[FT_MAX_LAYOUTS], L3[FT_MAX_LAYOUTS];
  int n2 = ft_layouts(2, L2), n3 = ft_layouts(3, L3);
  SG_CHECK(n2 > 0 && n3 > 0, "no layouts");
  const sg_dtype dts[2] = {SG_DTYPE_F64, SG_DTYPE_F32};
  for (int t = 0; t < 2; ++t) {
    const int64_t g1[2] = {64, 64}, g2[2] = {90, 180}, g3[3] = {33, 64, 48};
    const int64_t g4[2] = {3, 7}, g5[3] = {6, 5, 7};
    run_grid(2, g1, 3, dts[t], L2, n2);
    run_grid(2, g2, 2, dts[t], L2, n2);
    run_grid(2, g4, 2, dts[t], L2, n2); /* shards thinner than the mesh */
    run_grid(3, g3, 1, dts[t], L3, n3);
    run_grid(3, g5, 2, dts[t], L3, n3);
  }
  ft_layouts_free();
  return sg_test_finish();
}
