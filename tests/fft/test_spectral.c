/* Spectral convolution (FNO layer) against one process: forward (f64 and
 * f32) and gradients (input and weights, weights reduced over the ranks),
 * gradients against central finite differences in double; spectral
 * derivatives of analytic functions on a periodic box to 1e-10. Every mesh
 * and layout that fits the number of ranks (3-D: FNO-3D's (t, y, x) with t
 * whole and y, x split among them). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fft_testutil.h"
#include "sg_device.h"
#include "sg_fft.h"
#include "sg_spectral.h"
#include "sg_test.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

static int64_t prodn(const int64_t *v, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; ++i) p *= v[i];
  return p;
}

/* One-process reference of the layer in double. */
static void ref_conv(int D, const int64_t *shape, const int64_t *keep,
                     int64_t nb, int64_t ci, int64_t co, const double *x,
                     const double *w, double *y) {
  int64_t F[3], K[3];
  for (int d = 0; d < D; ++d) F[d] = d == D - 1 ? shape[d] / 2 + 1 : shape[d];
  ft_kept_shape(D, shape, keep, K);
  int64_t nf = prodn(F, D), nk = prodn(K, D), nr = prodn(shape, D);
  double *xf = malloc(sizeof(double) * 2 * (size_t)(nf * nb * ci));
  double *xk = malloc(sizeof(double) * 2 * (size_t)(nk * nb * ci));
  double *yk = calloc(2 * (size_t)(nk * nb * co), sizeof(double));
  double *yf = malloc(sizeof(double) * 2 * (size_t)(nf * nb * co));
  ft_ref_r2c(D, shape, nb * ci, x, xf);
  ft_truncate(D, shape, nb * ci, keep, xf, xk);
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t o = 0; o < co; ++o)
      for (int64_t i = 0; i < ci; ++i)
        for (int64_t k = 0; k < nk; ++k) {
          const double *xv = xk + 2 * ((b * ci + i) * nk + k);
          const double *wv = w + 2 * ((i * co + o) * nk + k);
          double *yv = yk + 2 * ((b * co + o) * nk + k);
          yv[0] += xv[0] * wv[0] - xv[1] * wv[1];
          yv[1] += xv[0] * wv[1] + xv[1] * wv[0];
        }
  ft_pad(D, shape, nb * co, keep, yk, yf);
  ft_ref_c2r_sep(D, shape, nb * co, yf, y);
  for (int64_t i = 0; i < nr * nb * co; ++i) y[i] /= (double)nr;
  free(xf);
  free(xk);
  free(yk);
  free(yf);
}

static void run_conv(int D, const int64_t *shape, const int64_t *keep,
                     int64_t nb, int64_t ci, int64_t co, sg_dtype dt,
                     const ft_layout *L, int nl) {
  const int64_t nr = prodn(shape, D);
  int64_t K[3];
  ft_kept_shape(D, shape, keep, K);
  const int64_t nw = 2 * ci * co * prodn(K, D);
  double *x = malloc(sizeof(double) * (size_t)(nb * ci * nr));
  double *w = malloc(sizeof(double) * (size_t)nw);
  double *r = malloc(sizeof(double) * (size_t)(nb * co * nr));
  double *y = malloc(sizeof(double) * (size_t)(nb * co * nr));
  double *dx1 = malloc(sizeof(double) * (size_t)(nb * ci * nr));
  double *dw1 = calloc((size_t)nw, sizeof(double));
  ft_fill(x, nb * ci * nr, 21);
  ft_fill(w, nw, 22);
  ft_fill(r, nb * co * nr, 23);
  ref_conv(D, shape, keep, nb, ci, co, x, w, y);
  sg_fft_desc desc;
  sg_fft_desc_init(&desc);
  desc.dtype = dt;
  desc.ndim = D;
  desc.batch = nb;
  desc.nthreads = 1;
  for (int d = 0; d < D; ++d) {
    desc.shape[d] = shape[d];
    desc.keep[d] = keep[d];
  }
  const int f64 = dt == SG_DTYPE_F64;
  const double rel = f64 ? 1e-12 : 1e-5;
  const size_t es = sg_dtype_size(dt);
  /* one-process gradients with the same library on MPI_COMM_SELF */
  if (f64) {
    sg_spectral_conv_t c1 = NULL;
    double *y1 = malloc(sizeof(double) * (size_t)(nb * co * nr));
    SG_CHECK_OK(sg_spectral_conv_create_comms(MPI_COMM_SELF, 0, NULL, &desc, ci,
                                              co, &c1));
    if (c1) {
      SG_CHECK(sg_spectral_conv_weight_count(c1) == nw, "weight count");
      SG_CHECK_OK(sg_spectral_conv_forward(c1, x, w, y1, NULL));
      SG_CHECK(ft_cmp("one-process conv vs reference", y1, y, nb * co * nr,
                      rel * ft_maxabs(y, nb * co * nr)) == 0,
               "1p conv");
      SG_CHECK_OK(sg_spectral_conv_backward(c1, x, NULL, w, r, dx1, dw1));
    }
    sg_spectral_conv_destroy(&c1);
    free(y1);
  }
  const double ty = rel * ft_maxabs(y, nb * co * nr);
  const double tdx = 1e-12 * ft_maxabs(dx1, nb * ci * nr);
  const double tdw = 1e-12 * ft_maxabs(dw1, nw);
  for (int li = 0; li < nl; ++li) {
    for (int d = 0; d < D; ++d) desc.split[d] = L[li].split[d];
    char what[200];
    snprintf(what, sizeof what,
             "conv %dD %lldx%lldx%lld %s cin %lld cout %lld %s", D,
             (long long)shape[0], (long long)shape[1],
             (long long)(D == 3 ? shape[2] : 1), sg_dtype_name(dt),
             (long long)ci, (long long)co, L[li].name);
    sg_spectral_conv_t conv = NULL;
    void *xl = NULL, *yl = NULL, *wl = NULL, *rl_ = NULL, *dxl = NULL,
         *xh = NULL;
    double *a = NULL, *b = NULL, *dw = NULL;
    SG_REQUIRE_OK(sg_spectral_conv_create(L[li].mesh, &desc, ci, co, &conv));
    sg_fft_plan_t pin = sg_spectral_conv_plan(conv, 0);
    sg_fft_plan_t pout = sg_spectral_conv_plan(conv, 1);
    int64_t ro[3], rl[3];
    sg_fft_plan_local_box(pin, SG_FFT_SPACE_REAL, ro, rl);
    int64_t nxl = sg_fft_plan_local_count(pin, SG_FFT_SPACE_REAL);
    int64_t nyl = sg_fft_plan_local_count(pout, SG_FFT_SPACE_REAL);
    xl = malloc(es * (size_t)(nxl + 1));
    dxl = malloc(es * (size_t)(nxl + 1));
    yl = malloc(es * (size_t)(nyl + 1));
    rl_ = malloc(es * (size_t)(nyl + 1));
    wl = malloc(es * (size_t)nw);
    xh = malloc(es * (size_t)(sg_spectral_conv_spectrum_count(conv) + 1));
    a = malloc(sizeof(double) * (size_t)(nxl + nyl + nw + 1));
    b = malloc(sizeof(double) * (size_t)(nxl + nyl + nw + 1));
    dw = calloc((size_t)nw, sizeof(double));
    ft_extract(x, D, shape, nb * ci, 1, ro, rl, xl, dt);
    ft_extract(r, D, shape, nb * co, 1, ro, rl, rl_, dt);
    for (int64_t i = 0; i < nw; ++i) {
      if (f64)
        ((double *)wl)[i] = w[i];
      else
        ((float *)wl)[i] = (float)w[i];
    }
    SG_CHECK_OK(sg_spectral_conv_forward(conv, xl, wl, yl, xh));
    ft_to_f64(yl, dt, nyl, a);
    ft_extract(y, D, shape, nb * co, 1, ro, rl, b, SG_DTYPE_F64);
    char w2[300];
    snprintf(w2, sizeof w2, "%s forward", what);
    SG_CHECK(ft_cmp(w2, a, b, nyl, ty) == 0, "%s", w2);
    if (!f64) goto done;
    /* gradients == one process (dw summed over the ranks: Partial) */
    SG_CHECK_OK(sg_spectral_conv_backward(conv, xl, xh, wl, rl_, dxl, dw));
    ft_extract(dx1, D, shape, nb * ci, 1, ro, rl, b, SG_DTYPE_F64);
    snprintf(w2, sizeof w2, "%s dx", what);
    SG_CHECK(ft_cmp(w2, dxl, b, nxl, tdx) == 0, "%s", w2);
    MPI_Allreduce(MPI_IN_PLACE, dw, (int)nw, MPI_DOUBLE, MPI_SUM,
                  MPI_COMM_WORLD);
    snprintf(w2, sizeof w2, "%s dw", what);
    SG_CHECK(ft_cmp(w2, dw, dw1, nw, tdw) == 0, "%s", w2);
    /* backward without the saved spectrum, dw accumulates */
    {
      double *dw2 = malloc(sizeof(double) * (size_t)nw);
      for (int64_t i = 0; i < nw; ++i) dw2[i] = 1.0;
      SG_CHECK_OK(
          sg_spectral_conv_backward(conv, xl, NULL, wl, rl_, NULL, dw2));
      MPI_Allreduce(MPI_IN_PLACE, dw2, (int)nw, MPI_DOUBLE, MPI_SUM,
                    MPI_COMM_WORLD);
      int size;
      MPI_Comm_size(MPI_COMM_WORLD, &size);
      for (int64_t i = 0; i < nw; ++i) dw2[i] -= size;
      snprintf(w2, sizeof w2, "%s dw recomputed, accumulated", what);
      SG_CHECK(ft_cmp(w2, dw2, dw1, nw, tdw * 10) == 0, "%s", w2);
      free(dw2);
    }
    /* SHARD_MODES: each rank holds only its box of W; the same forward and
     * dx, and dW of the box complete over the domain (no sum over ranks) */
    {
      int64_t Kb[3], bo[3], bl[3];
      const int nd = sg_spectral_conv_weight_box(conv, Kb, bo, bl);
      const int64_t nloc = sg_spectral_conv_local_weight_count(conv);
      int64_t m = 1;
      for (int d = 0; d < nd; ++d) m *= bl[d];
      SG_CHECK(nd == D && nloc == 2 * ci * co * m,
               "%s: local weight count %lld", what, (long long)nloc);
      double *ws = malloc(sizeof(double) * (size_t)(nloc + 1)),
             *dws = calloc((size_t)(nloc + 1), sizeof(double));
      double *dwb = malloc(sizeof(double) * (size_t)(nloc + 1)),
             *ys = malloc(sizeof(double) * (size_t)(nyl + 1));
      double *dxs = malloc(sizeof(double) * (size_t)(nxl + 1));
      int *cover = calloc((size_t)nw, sizeof(int));
      /* W_local[p, j] = W[p, box(j)], p = (i, o); dwb the same box of dw1 */
      for (int64_t pq = 0; pq < ci * co; ++pq)
        for (int64_t j = 0; j < m; ++j) {
          int64_t rem = j, g = 0, mul = 1;
          for (int d = nd - 1; d >= 0; --d) {
            g += (bo[d] + rem % bl[d]) * mul;
            rem /= bl[d];
            mul *= Kb[d];
          }
          const int64_t src = 2 * (pq * mul + g), dst = 2 * (pq * m + j);
          for (int c = 0; c < 2; ++c) {
            ws[dst + c] = w[src + c];
            dwb[dst + c] = dw1[src + c];
            cover[src + c] += 1;
          }
        }
      MPI_Allreduce(MPI_IN_PLACE, cover, (int)nw, MPI_INT, MPI_SUM,
                    MPI_COMM_WORLD);
      int even = 1;
      for (int64_t i = 0; i < nw; ++i)
        even &= cover[i] == cover[0] && cover[i] >= 1;
      SG_CHECK(even,
               "%s: the ranks' weight boxes do not tile the kept modes evenly",
               what);
      SG_CHECK_OK(sg_spectral_conv_set_weight_layout(
          conv, SG_SPECTRAL_WEIGHT_SHARD_MODES));
      SG_CHECK_OK(sg_spectral_conv_forward(conv, xl, ws, ys, xh));
      snprintf(w2, sizeof w2, "%s sharded W forward", what);
      SG_CHECK(ft_cmp(w2, ys, yl, nyl, 0.0) == 0, "%s", w2);
      SG_CHECK_OK(sg_spectral_conv_backward(conv, xl, xh, ws, rl_, dxs, dws));
      snprintf(w2, sizeof w2, "%s sharded W dx", what);
      SG_CHECK(ft_cmp(w2, dxs, dxl, nxl, 0.0) == 0, "%s", w2);
      snprintf(w2, sizeof w2, "%s sharded W dw (local box, no reduction)",
               what);
      SG_CHECK(ft_cmp(w2, dws, dwb, nloc, tdw) == 0, "%s", w2);
      SG_CHECK_OK(sg_spectral_conv_set_weight_layout(
          conv, SG_SPECTRAL_WEIGHT_REPLICATE));
      SG_CHECK(sg_spectral_conv_set_weight_layout(
                   conv, (sg_spectral_weight_layout)7) == SG_ERR_INVALID_ARG,
               "unknown layout refused");
      free(ws);
      free(dws);
      free(dwb);
      free(ys);
      free(dxs);
      free(cover);
    }
    /* central finite differences of L = sum(y * r) */
    {
      const double h = 1e-4;
      for (int probe = 0; probe < 4; ++probe) {
        int64_t gi = (int64_t)((ft_value(31, probe) + 1) * 0.5 *
                               (double)(nb * ci * nr)) %
                     (nb * ci * nr);
        /* owner of global index gi: decode it */
        int64_t rem = gi, idx[4];
        for (int d = D - 1; d >= 0; --d) {
          idx[d + 1] = rem % shape[d];
          rem /= shape[d];
        }
        idx[0] = rem;
        int64_t li_ = -1;
        int mine = 1;
        for (int d = 0; d < D; ++d)
          if (idx[d + 1] < ro[d] || idx[d + 1] >= ro[d] + rl[d]) mine = 0;
        if (mine) {
          li_ = idx[0];
          for (int d = 0; d < D; ++d) li_ = li_ * rl[d] + (idx[d + 1] - ro[d]);
        }
        double lp = 0, lm = 0, g = mine ? ((double *)dxl)[li_] : 0, gsum;
        double x0 = mine ? ((double *)xl)[li_] : 0;
        for (int s = 0; s < 2; ++s) {
          if (mine) ((double *)xl)[li_] = x0 + (s ? -h : h);
          SG_CHECK_OK(sg_spectral_conv_forward(conv, xl, wl, yl, NULL));
          double l = 0;
          for (int64_t i = 0; i < nyl; ++i)
            l += ((double *)yl)[i] * ((double *)rl_)[i];
          MPI_Allreduce(MPI_IN_PLACE, &l, 1, MPI_DOUBLE, MPI_SUM,
                        MPI_COMM_WORLD);
          if (s)
            lm = l;
          else
            lp = l;
        }
        if (mine) ((double *)xl)[li_] = x0;
        MPI_Allreduce(&g, &gsum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        double fd = (lp - lm) / (2 * h);
        SG_CHECK(fabs(fd - gsum) <= 1e-7 * fmax(1.0, fabs(gsum)),
                 "%s: dL/dx[%lld] fd %.12g vs %.12g", what, (long long)gi, fd,
                 gsum);
      }
      for (int probe = 0; probe < 4; ++probe) {
        int64_t k = (int64_t)((ft_value(41, probe) + 1) * 0.5 * (double)nw) %
                    nw;
        double w0 = ((double *)wl)[k], lp = 0, lm = 0;
        for (int s = 0; s < 2; ++s) {
          ((double *)wl)[k] = w0 + (s ? -h : h);
          SG_CHECK_OK(sg_spectral_conv_forward(conv, xl, wl, yl, NULL));
          double l = 0;
          for (int64_t i = 0; i < nyl; ++i)
            l += ((double *)yl)[i] * ((double *)rl_)[i];
          MPI_Allreduce(MPI_IN_PLACE, &l, 1, MPI_DOUBLE, MPI_SUM,
                        MPI_COMM_WORLD);
          if (s)
            lm = l;
          else
            lp = l;
        }
        ((double *)wl)[k] = w0;
        double fd = (lp - lm) / (2 * h);
        SG_CHECK(fabs(fd - dw[k]) <= 1e-7 * fmax(1.0, fabs(dw[k])),
                 "%s: dL/dW[%lld] fd %.12g vs %.12g", what, (long long)k, fd,
                 dw[k]);
      }
    }
  done:
    sg_spectral_conv_destroy(&conv);
    free(xl);
    free(yl);
    free(wl);
    free(rl_);
    free(dxl);
    free(xh);
    free(a);
    free(b);
    free(dw);
  }
  free(x);
  free(w);
  free(r);
  free(y);
  free(dx1);
  free(dw1);
}

/* u = sin(a X) cos(b Y) [sin(c Z)] + 0.5 cos(e X); batch 1 holds 2u.
 * Normwise: max |err| <= 1e-10 * max |exact| over the whole grid. */
static void run_deriv(int D, const int64_t *shape, const ft_layout *L, int nl) {
  const double Lb[3] = {2 * M_PI, 3.0, 5.0};
  const double a = 2 * 2 * M_PI / Lb[0], b = 3 * 2 * M_PI / Lb[1],
               c = 1 * 2 * M_PI / Lb[2], e = 2 * M_PI / Lb[0];
  for (int li = 0; li < nl; ++li) {
    sg_fft_desc desc;
    sg_fft_desc_init(&desc);
    desc.ndim = D;
    desc.batch = 2;
    desc.nthreads = 1;
    desc.norm = (sg_fft_norm)(li % 3);
    for (int d = 0; d < D; ++d) {
      desc.shape[d] = shape[d];
      desc.split[d] = L[li].split[d];
    }
    sg_fft_plan_t plan = NULL;
    double *u = NULL, *out = NULL, *want[5] = {NULL}, *work = NULL;
    SG_REQUIRE_OK(sg_fft_plan_create(L[li].mesh, &desc, &plan));
    int64_t ro[3], rl[3];
    sg_fft_plan_local_box(plan, SG_FFT_SPACE_REAL, ro, rl);
    int64_t n = sg_fft_plan_local_count(plan, SG_FFT_SPACE_REAL);
    u = malloc(sizeof(double) * (size_t)(n + 1));
    out = malloc(sizeof(double) * (size_t)(n + 1));
    work = malloc(
        sizeof(double) *
        (size_t)(sg_fft_plan_local_count(plan, SG_FFT_SPACE_SPECTRAL) + 1));
    for (int k = 0; k < 5; ++k)
      want[k] = malloc(sizeof(double) * (size_t)(n + 1));
    int64_t S = n / 2;
    for (int64_t s = 0; s < S; ++s) {
      int64_t rem = s, j[3] = {0, 0, 0};
      for (int d = D - 1; d >= 0; --d) {
        j[d] = rem % rl[d];
        rem /= rl[d];
      }
      double X = (double)(ro[0] + j[0]) * Lb[0] / (double)shape[0];
      double Y = (double)(ro[1] + j[1]) * Lb[1] / (double)shape[1];
      double Z = D == 3 ? (double)(ro[2] + j[2]) * Lb[2] / (double)shape[2] : 0;
      double sz = D == 3 ? sin(c * Z) : 1, cz = D == 3 ? cos(c * Z) : 0;
      double cc = D == 3 ? c * c : 0;
      double v = sin(a * X) * cos(b * Y) * sz + 0.5 * cos(e * X);
      double dxv = a * cos(a * X) * cos(b * Y) * sz - 0.5 * e * sin(e * X);
      double dyv = -b * sin(a * X) * sin(b * Y) * sz;
      double dzv = D == 3 ? c * sin(a * X) * cos(b * Y) * cz : 0;
      double lap = -(a * a + b * b + cc) * sin(a * X) * cos(b * Y) * sz -
                   0.5 * e * e * cos(e * X);
      double vals[5] = {v, dxv, dyv, dzv, lap};
      for (int bb = 0; bb < 2; ++bb) {
        u[bb * S + s] = (bb + 1) * v;
        for (int k = 0; k < 5; ++k) want[k][bb * S + s] = (bb + 1) * vals[k];
      }
    }
    char w[200];
    const double *lens = Lb;
    double mx[5];
    for (int k = 0; k < 5; ++k) mx[k] = ft_maxabs(want[k], n);
    MPI_Allreduce(MPI_IN_PLACE, mx, 5, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    for (int d = 0; d < D; ++d) {
      SG_CHECK_OK(
          sg_spectral_derivative(plan, d, lens, u, out, d % 2 ? NULL : work));
      snprintf(w, sizeof w, "d/dx%d %dD %s", d, D, L[li].name);
      SG_CHECK(ft_cmp(w, out, want[1 + d], n, 1e-10 * mx[1 + d]) == 0, "%s", w);
    }
    SG_CHECK_OK(sg_spectral_laplacian(plan, lens, u, out, work));
    snprintf(w, sizeof w, "laplacian %dD %s", D, L[li].name);
    SG_CHECK(ft_cmp(w, out, want[4], n, 1e-10 * mx[4]) == 0, "%s", w);
    SG_CHECK_OK(sg_spectral_inv_laplacian(plan, lens, want[4], out, work));
    snprintf(w, sizeof w, "inverse laplacian %dD %s", D, L[li].name);
    SG_CHECK(ft_cmp(w, out, u, n, 1e-10 * mx[0]) == 0, "%s", w);
    /* the mean is removed by the inverse Laplacian */
    for (int64_t i = 0; i < n; ++i) u[i] += 1.0;
    SG_CHECK_OK(sg_spectral_inv_laplacian(plan, lens, u, out, work));
    SG_CHECK_OK(sg_spectral_laplacian(plan, lens, out, out, work));
    for (int64_t i = 0; i < n; ++i) u[i] -= 1.0;
    snprintf(w, sizeof w, "laplacian(inverse laplacian(u + 1)) %dD %s", D,
             L[li].name);
    SG_CHECK(ft_cmp(w, out, u, n, 1e-10 * mx[0]) == 0, "%s", w);
    SG_CHECK_STATUS(sg_spectral_derivative(plan, D, NULL, u, out, work),
                    SG_ERR_INVALID_ARG);
  done:
    sg_fft_plan_destroy(&plan);
    free(u);
    free(out);
    free(work);
    for (int k = 0; k < 5; ++k) free(want[k]);
  }
}

/* The f32 AVX2 kernels of the mode mixing (mix_avx2.c) and the kept-modes
 * product (dft_avx2.c), taken where the CPU has AVX2 and not AVX-512,
 * against the portable ones (SG_SIMD=portable): the same operations in
 * the same order, so the same bits, forward and backward. Odd sizes:
 * channels past a block of 4 rows, partial 16-mode blocks, product widths
 * 2K = 8 and 24 (its 24-column blocks), n = 13 and 26 (masked 16-column
 * tails), rows no multiple of the row blocks. On other CPUs both runs are
 * portable. */
static void run_mix_bits(const int64_t shape[2], const int64_t keep[2]) {
  const int64_t nb = 2, ci = 5, co = 6;
  const int64_t nr = shape[0] * shape[1];
  int64_t K[3];
  ft_kept_shape(2, shape, keep, K);
  const int64_t nw = 2 * ci * co * K[0] * K[1];
  const int64_t nx = nb * ci * nr, ny = nb * co * nr;
  double *xd = malloc(sizeof(double) * (size_t)nx);
  double *wd = malloc(sizeof(double) * (size_t)nw);
  double *rd = malloc(sizeof(double) * (size_t)ny);
  ft_fill(xd, nx, 51);
  ft_fill(wd, nw, 52);
  ft_fill(rd, ny, 53);
  float *x = malloc(sizeof(float) * (size_t)nx);
  float *w = malloc(sizeof(float) * (size_t)nw);
  float *r = malloc(sizeof(float) * (size_t)ny);
  for (int64_t i = 0; i < nx; ++i) x[i] = (float)xd[i];
  for (int64_t i = 0; i < nw; ++i) w[i] = (float)wd[i];
  for (int64_t i = 0; i < ny; ++i) r[i] = (float)rd[i];
  sg_fft_desc desc;
  sg_fft_desc_init(&desc);
  desc.dtype = SG_DTYPE_F32;
  desc.ndim = 2;
  desc.batch = nb;
  desc.nthreads = 1;
  for (int d = 0; d < 2; ++d) {
    desc.shape[d] = shape[d];
    desc.keep[d] = keep[d];
  }
  float *out[2][3];
  for (int v = 0; v < 2; ++v) {
    if (v) setenv("SG_SIMD", "portable", 1);
    out[v][0] = malloc(sizeof(float) * (size_t)ny);
    out[v][1] = malloc(sizeof(float) * (size_t)nx);
    out[v][2] = calloc((size_t)nw, sizeof(float));
    sg_spectral_conv_t c = NULL;
    SG_CHECK_OK(sg_spectral_conv_create_comms(MPI_COMM_SELF, 0, NULL, &desc, ci,
                                              co, &c));
    if (c) {
      SG_CHECK_OK(sg_spectral_conv_forward(c, x, w, out[v][0], NULL));
      SG_CHECK_OK(
          sg_spectral_conv_backward(c, x, NULL, w, r, out[v][1], out[v][2]));
    }
    sg_spectral_conv_destroy(&c);
    unsetenv("SG_SIMD");
  }
  const int64_t n[3] = {ny, nx, nw};
  const char *what[3] = {"y", "dx", "dW"};
  for (int i = 0; i < 3; ++i) {
    SG_CHECK(memcmp(out[0][i], out[1][i], sizeof(float) * (size_t)n[i]) == 0,
             "f32 mixing: %s the same bits as SG_SIMD=portable", what[i]);
    free(out[0][i]);
    free(out[1][i]);
  }
  free(xd), free(wd), free(rd), free(x), free(w), free(r);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  ft_layout L2[FT_MAX_LAYOUTS], L3[FT_MAX_LAYOUTS];
  int n2 = ft_layouts(2, L2), n3 = ft_layouts(3, L3);
  {
    const int64_t s[2] = {20, 18}, k[2] = {4, 5};
    run_conv(2, s, k, 2, 3, 2, SG_DTYPE_F64, L2, n2);
    run_conv(2, s, k, 2, 3, 2, SG_DTYPE_F32, L2, n2);
    const int64_t s2[2] = {9, 14}, k2[2] = {2, 3};
    run_conv(2, s2, k2, 1, 2, 2, SG_DTYPE_F64, L2, n2); /* cin == cout */
    /* odd sizes for the planar mixing kernels' blocks: channels past a
     * block of 4 rows (5 -> 6; f64 4 -> 5), partial 16-mode blocks (24,
     * 12 modes); small, as the f64 case checks gradients by differences */
    const int64_t s5[2] = {11, 13}, k5[2] = {3, 4};
    run_conv(2, s5, k5, 2, 5, 6, SG_DTYPE_F32, L2, n2);
    const int64_t s6[2] = {6, 7}, k6[2] = {2, 3};
    run_conv(2, s6, k6, 1, 4, 5, SG_DTYPE_F64, L2, n2);
    const int64_t s3[3] = {8, 10, 9}, k3[3] = {2, 3, 2};
    run_conv(3, s3, k3, 1, 2, 3, SG_DTYPE_F64, L3, n3);
    /* FNO-3D's layout (fno.c): (t, y, x), the padded time axis whole, y
     * and x uneven over 2 and 3 ranks; 2*2 t, 2*2 y, 3 x modes kept */
    const int64_t s4[3] = {10, 7, 9}, k4[3] = {2, 2, 3};
    run_conv(3, s4, k4, 1, 2, 3, SG_DTYPE_F64, L3, n3);
  }
  {
    const int64_t s1[2] = {11, 13}, k1[2] = {3, 4};
    run_mix_bits(s1, k1);
    const int64_t s2[2] = {7, 26}, k2[2] = {3, 12};
    run_mix_bits(s2, k2);
  }
  {
    const int64_t s[2] = {24, 30}, s3[3] = {12, 10, 16};
    run_deriv(2, s, L2, n2);
    run_deriv(3, s3, L3, n3);
  }
  ft_layouts_free();
  return sg_test_finish();
}
