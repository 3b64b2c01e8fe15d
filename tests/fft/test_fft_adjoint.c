/* Mode truncation against one-process FFTW, adjoint identities of the
 * distributed FFT (forward and inverse, with and without truncation) and
 * of the transposes, in double precision (relative 1e-12), on every mesh
 * and layout that fits the number of ranks. */
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

static double dot_all(const double *a, const double *b, int64_t n) {
  double s = 0, t = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  MPI_Allreduce(&s, &t, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return t;
}

static void check_adjoint(const char *what, double lhs, double rhs) {
  double rel = fabs(lhs - rhs) / fmax(fabs(lhs), fabs(rhs));
  SG_CHECK(rel <= 1e-12, "%s: <Fx,y> = %.17g, <x,F^T y> = %.17g, rel %.3g",
           what, lhs, rhs, rel);
}

static void run(int D, const int64_t *shape, int64_t batch, const int64_t *keep,
                const ft_layout *L, int nl) {
  int64_t F[3], K[3];
  for (int d = 0; d < D; ++d) F[d] = d == D - 1 ? shape[d] / 2 + 1 : shape[d];
  ft_kept_shape(D, shape, keep, K);
  const int64_t nr = batch * prodn(shape, D), nf = batch * prodn(F, D),
                nk = batch * prodn(K, D);
  double *x = malloc(sizeof(double) * (size_t)nr);
  double *yf = malloc(sizeof(double) * 2 * (size_t)nf);
  double *yk = malloc(sizeof(double) * 2 * (size_t)nk);
  double *zk = malloc(sizeof(double) * 2 * (size_t)nk);
  double *zf = malloc(sizeof(double) * 2 * (size_t)nf);
  double *xr = malloc(sizeof(double) * (size_t)nr);
  ft_fill(x, nr, 5);
  ft_ref_r2c(D, shape, batch, x, yf);
  ft_truncate(D, shape, batch, keep, yf, yk);
  ft_fill(zk, 2 * nk, 6); /* an arbitrary (non-Hermitian) spectrum */
  ft_pad(D, shape, batch, keep, zk, zf);
  ft_ref_c2r_sep(D, shape, batch, zf, xr);
  const double ntot = (double)prodn(shape, D);
  for (int64_t i = 0; i < nr; ++i) xr[i] /= ntot;
  const double ty = 1e-12 * ft_maxabs(yk, 2 * nk),
               tx = 1e-12 * ft_maxabs(xr, nr);
  for (int li = 0; li < nl; ++li) {
    sg_fft_desc desc;
    sg_fft_desc_init(&desc);
    desc.ndim = D;
    desc.batch = batch;
    desc.nthreads = 1;
    desc.norm = (sg_fft_norm)(li % 3); /* every norm somewhere */
    if ((li / 2) % 2) desc.flags |= SG_FFT_MPI_ALLTOALL; /* both paths */
    if (batch > 1 && li % 2 == 1) desc.chunk = 1;        /* stages per chunk */
    for (int d = 0; d < D; ++d) {
      desc.shape[d] = shape[d];
      desc.split[d] = L[li].split[d];
      desc.keep[d] = keep[d];
    }
    char what[200];
    snprintf(what, sizeof what, "%dD %lldx%lldx%lld keep %lld,%lld,%lld %s", D,
             (long long)shape[0], (long long)shape[1],
             (long long)(D == 3 ? shape[2] : 1), (long long)keep[0],
             (long long)keep[1], (long long)(D == 3 ? keep[2] : 0), L[li].name);
    if (desc.chunk) {
      size_t l = strlen(what);
      snprintf(what + l, sizeof what - l, " chunk 1");
    }
    sg_fft_plan_t plan = NULL;
    double *xl = NULL, *yl = NULL, *a = NULL, *b = NULL, *c = NULL;
    SG_REQUIRE_OK(sg_fft_plan_create(L[li].mesh, &desc, &plan));
    int64_t ro[3], rl[3], so[3], sl[3];
    sg_fft_plan_local_box(plan, SG_FFT_SPACE_REAL, ro, rl);
    sg_fft_plan_local_box(plan, SG_FFT_SPACE_SPECTRAL, so, sl);
    sg_fft_layout spec;
    sg_fft_plan_layout(plan, SG_FFT_SPACE_SPECTRAL, &spec);
    for (int d = 0; d < D; ++d)
      SG_CHECK(spec.shape[d] == K[d], "%s: spectral shape[%d] %lld != %lld",
               what, d, (long long)spec.shape[d], (long long)K[d]);
    const int64_t nrl = sg_fft_plan_local_count(plan, SG_FFT_SPACE_REAL);
    const int64_t ncl = sg_fft_plan_local_count(plan, SG_FFT_SPACE_SPECTRAL);
    xl = malloc(sizeof(double) * (size_t)(nrl + 1));
    yl = malloc(sizeof(double) * (size_t)(ncl + 1));
    a = malloc(sizeof(double) * (size_t)(nrl + ncl + 1));
    b = malloc(sizeof(double) * (size_t)(nrl + ncl + 1));
    c = malloc(sizeof(double) * (size_t)(nrl + ncl + 1));
    double fs = desc.norm == SG_FFT_NORM_ORTHO ? 1 / sqrt(ntot) : 1.0;
    double is = desc.norm == SG_FFT_NORM_NONE    ? ntot
                : desc.norm == SG_FFT_NORM_ORTHO ? sqrt(ntot)
                                                 : 1.0;
    char w2[300];
    /* truncated forward == kept modes of FFTW */
    ft_extract(x, D, shape, batch, 1, ro, rl, xl, SG_DTYPE_F64);
    SG_CHECK_OK(sg_fft_forward(plan, xl, yl));
    ft_extract(yk, D, K, batch, 2, so, sl, b, SG_DTYPE_F64);
    for (int64_t i = 0; i < ncl; ++i) b[i] *= fs;
    snprintf(w2, sizeof w2, "%s forward", what);
    SG_CHECK(ft_cmp(w2, yl, b, ncl, ty) == 0, "%s", w2);
    /* zero-padded inverse == one-process (separable) inverse */
    ft_extract(zk, D, K, batch, 2, so, sl, yl, SG_DTYPE_F64);
    SG_CHECK_OK(sg_fft_inverse(plan, yl, a));
    ft_extract(xr, D, shape, batch, 1, ro, rl, b, SG_DTYPE_F64);
    for (int64_t i = 0; i < nrl; ++i) b[i] *= is;
    snprintf(w2, sizeof w2, "%s inverse", what);
    SG_CHECK(ft_cmp(w2, a, b, nrl, tx * is) == 0, "%s", w2);
    /* adjoint identities with arbitrary local data */
    {
      int r;
      MPI_Comm_rank(MPI_COMM_WORLD, &r);
      ft_fill(xl, nrl, 100 + (uint64_t)r);
      ft_fill(yl, ncl, 200 + (uint64_t)r);
      SG_CHECK_OK(sg_fft_forward(plan, xl, a));         /* a = F x */
      SG_CHECK_OK(sg_fft_forward_adjoint(plan, yl, b)); /* b = F^T y */
      snprintf(w2, sizeof w2, "%s forward adjoint", what);
      check_adjoint(w2, dot_all(a, yl, ncl), dot_all(xl, b, nrl));
      SG_CHECK_OK(sg_fft_inverse(plan, yl, a));         /* a = G y */
      SG_CHECK_OK(sg_fft_inverse_adjoint(plan, xl, b)); /* b = G^T x */
      snprintf(w2, sizeof w2, "%s inverse adjoint", what);
      check_adjoint(w2, dot_all(a, xl, nrl), dot_all(yl, b, ncl));
      /* the inputs of the adjoints are untouched */
      ft_fill(c, ncl, 200 + (uint64_t)r);
      SG_CHECK(sg_test_cmp_bytes("adjoint input", yl, c,
                                 sizeof(double) * (size_t)ncl) == 0,
               "%s: input modified", what);
    }
  done:
    sg_fft_plan_destroy(&plan);
    free(xl);
    free(yl);
    free(a);
    free(b);
    free(c);
  }
  free(x);
  free(yf);
  free(yk);
  free(zk);
  free(zf);
  free(xr);
}

/* Transposes on their own: <Tx, y> = <x, T^T y>, and T^T T = identity bit
 * for bit. Every layout, every move of every axis to every other dim. */
static void run_transposes(int D, const int64_t *shape, const ft_layout *L,
                           int nl) {
  for (int li = 0; li < nl; ++li) {
    sg_fft_layout lay;
    memset(&lay, 0, sizeof lay);
    lay.ndim = D;
    for (int d = 0; d < D; ++d) {
      lay.shape[d] = shape[d];
      if (L[li].split[d] >= 0) {
        lay.nsplit[d] = 1;
        lay.split[d][0] = L[li].split[d];
      }
    }
    for (int d = 0; d < D; ++d) {
      if (lay.nsplit[d] == 0) continue;
      for (int to = 0; to < D; ++to) {
        if (to == d) continue;
        for (int ncomp = D == 2 ? 1 : 2; ncomp <= 2; ++ncomp) {
          sg_fft_transpose_t tr = NULL;
          double *x = NULL, *y = NULL, *a = NULL, *b = NULL;
          int r;
          MPI_Comm_rank(MPI_COMM_WORLD, &r);
          SG_REQUIRE_OK(sg_fft_transpose_create(L[li].mesh, SG_DTYPE_F64, ncomp,
                                                3, &lay, lay.split[d][0], to,
                                                &tr));
          int64_t n0 = sg_fft_transpose_local_count(tr, 0);
          int64_t n1 = sg_fft_transpose_local_count(tr, 1);
          x = malloc(sizeof(double) * (size_t)(n0 + 1));
          a = malloc(sizeof(double) * (size_t)(n0 + 1));
          y = malloc(sizeof(double) * (size_t)(n1 + 1));
          b = malloc(sizeof(double) * (size_t)(n1 + 1));
          ft_fill(x, n0, 300 + (uint64_t)r);
          ft_fill(y, n1, 400 + (uint64_t)r);
          SG_CHECK_OK(sg_fft_transpose_execute(tr, x, b));
          SG_CHECK_OK(sg_fft_transpose_adjoint(tr, y, a));
          char w[160];
          snprintf(w, sizeof w, "transpose %s dim %d -> %d ncomp %d",
                   L[li].name, d, to, ncomp);
          check_adjoint(w, dot_all(b, y, n1), dot_all(x, a, n0));
          SG_CHECK_OK(sg_fft_transpose_adjoint(tr, b, a));
          SG_CHECK(sg_test_cmp_bytes(w, a, x, sizeof(double) * (size_t)n0) == 0,
                   "%s: T^T T x != x", w);
          /* the data lands where the layout after the move says */
          {
            sg_fft_layout after;
            sg_fft_transpose_layout(tr, 1, &after);
            int64_t o[3], l[3];
            int sizes[SG_MESH_MAX_DIMS], coords[SG_MESH_MAX_DIMS];
            for (int k = 0; k < 2; ++k) {
              sizes[k] = L[li].p[k];
              MPI_Comm_rank(L[li].ax[k], &coords[k]);
            }
            sg_fft_layout_box(&after, sizes, coords, o, l);
            SG_CHECK(n1 == 3 * ncomp * prodn(l, D), "%s: count after", w);
          }
        done:
          sg_fft_transpose_destroy(&tr);
          free(x);
          free(y);
          free(a);
          free(b);
        }
      }
    }
  }
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  ft_layout L2[FT_MAX_LAYOUTS], L3[FT_MAX_LAYOUTS];
  int n2 = ft_layouts(2, L2), n3 = ft_layouts(3, L3);
  {
    const int64_t s[2] = {24, 30}, k0[2] = {0, 0}, k1[2] = {5, 7},
                  k2[2] = {12, 16};
    run(2, s, 2, k0, L2, n2);
    run(2, s, 2, k1, L2, n2);
    run(2, s, 1, k2, L2, n2); /* keep everything, truncation path */
    const int64_t s2[2] = {9, 11}, k3[2] = {1, 1};
    run(2, s2, 2, k3, L2, n2);
  }
  {
    const int64_t s[3] = {10, 12, 9}, k0[3] = {0, 0, 0}, k1[3] = {3, 2, 4};
    (void)k0; /* untruncated 3-D: test_fft */
    run(3, s, 2, k1, L3, n3);
  }
  {
    const int64_t s[2] = {13, 10}, s3[3] = {5, 7, 6};
    run_transposes(2, s, L2, n2);
    run_transposes(3, s3, L3, n3);
  }
  ft_layouts_free();
  return sg_test_finish();
}
