/* The CUDA spectral convolution's arithmetic on the host: the SG_HD
 * functions of sg_spec_inl.h (what shardtensor/fft/cuda/spectral_cuda.cu
 * runs, one thread per element: the kept modes gathered from the full r2c
 * spectrum, the per-mode channel contractions, the scatter into a full
 * spectrum whose self-conjugate columns are made Hermitian) with FFTW's
 * multi-dimensional r2c and c2r in place of cuFFT's, against the host op
 * sg_spectral_conv_forward / sg_spectral_conv_backward on one process:
 * y, the saved spectrum, dx and dW (accumulated onto a non-zero dW), f64 at
 * 1e-12 and f32 at 2e-5 (normwise: relative to max(1, max |host|); the
 * f32 gather, contraction and scatter in f32, the transforms in f64 here,
 * in f32 on the host: FFT rounding of a few ulp times log N). Odd and even
 * lengths (the Nyquist column kept or not), modes not dividing the
 * lengths, every mode kept, cin != cout both ways, batch > 1, 2-D and 3-D;
 * the scattered spectrum is checked Hermitian in its self-conjugate
 * columns (what makes cuFFT's c2r compute the host's inverse). And the
 * index maps against the host's kept-mode order (sg_fft_plan_freq).
 * Needs no GPU; runs in every build. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fft_testutil.h"
#include "sg_fft.h"
#include "sg_spec_inl.h"
#include "sg_spectral.h"

static int fails;

static double *dalloc(int64_t n) {
  double *p = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
  if (!p) exit(1);
  return p;
}

/* max |got - want| / max(1, max |want|) */
static double nerr(const double *got, const double *want, int64_t n) {
  double m = 1, e = 0;
  for (int64_t i = 0; i < n; ++i) m = fabs(want[i]) > m ? fabs(want[i]) : m;
  for (int64_t i = 0; i < n; ++i) {
    double d = fabs(got[i] - want[i]);
    if (!(d <= e)) e = d;
  }
  return e / m;
}

static void report(const char *what, const char *part, double err, double tol) {
  const int ok = err <= tol;
  printf("%-44s %-8s max err %.2e  %s\n", what, part, err, ok ? "ok" : "FAIL");
  fails += !ok;
}

/* The device pipeline with FFTW; f32: the SG_HD passes in float. */
typedef struct pipe {
  sg_spec_geo g;
  int64_t nb, ci, co;
  int f32;
} pipe;

static void to32(const double *a, float *b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) b[i] = (float)a[i];
}
static void to64(const float *a, double *b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) b[i] = a[i];
}

/* out[rows, M] = gather(X[rows, nf]) */
static void gather(const pipe *p, int64_t rows, const double *X, double *out,
                   double s, double pw) {
  const int64_t n = rows * p->g.M, nf = rows * p->g.nf;
  if (!p->f32) {
    for (int64_t e = 0; e < n; ++e) sg_spec_gather_f64(&p->g, X, out, e, s, pw);
    return;
  }
  float *a = malloc(sizeof(float) * 2 * (size_t)nf),
        *b = malloc(sizeof(float) * 2 * (size_t)n);
  to32(X, a, 2 * nf);
  for (int64_t e = 0; e < n; ++e) sg_spec_gather_f32(&p->g, a, b, e, s, pw);
  to64(b, out, 2 * n);
  free(a);
  free(b);
}

static void scatter(const pipe *p, int64_t rows, const double *yh, double *Y,
                    double s, double pw) {
  const int64_t n = rows * p->g.nf, nk = rows * p->g.M;
  if (!p->f32) {
    for (int64_t e = 0; e < n; ++e) sg_spec_scatter_f64(&p->g, yh, Y, e, s, pw);
    return;
  }
  float *a = malloc(sizeof(float) * 2 * (size_t)nk),
        *b = malloc(sizeof(float) * 2 * (size_t)n);
  to32(yh, a, 2 * nk);
  for (int64_t e = 0; e < n; ++e) sg_spec_scatter_f32(&p->g, a, b, e, s, pw);
  to64(b, Y, 2 * n);
  free(a);
  free(b);
}

/* which 0: out = mix_fwd(a = x, b = W); 1: mix_bwd_x(a = dy, b = W);
 * 2: out += mix_bwd_w(a = x, b = dy) */
static void mix(const pipe *p, int which, const double *a, const double *b,
                double *out) {
  const int64_t M = p->g.M, nb = p->nb, ci = p->ci, co = p->co;
  const int64_t na = 2 * nb * (which == 1 ? co : ci) * M,
                nbb = which == 2 ? 2 * nb * co * M : 2 * ci * co * M,
                n = which == 0   ? nb * co * M
                    : which == 1 ? nb * ci * M
                                 : ci * co * M;
  if (!p->f32) {
    for (int64_t e = 0; e < n; ++e) {
      if (which == 0) sg_spec_mix_fwd_f64(ci, co, M, a, b, out, e);
      if (which == 1) sg_spec_mix_bwd_x_f64(ci, co, M, a, b, out, e);
      if (which == 2) sg_spec_mix_bwd_w_f64(nb, ci, co, M, a, b, out, e);
    }
    return;
  }
  float *fa = malloc(sizeof(float) * (size_t)na),
        *fb = malloc(sizeof(float) * (size_t)nbb),
        *fo = malloc(sizeof(float) * 2 * (size_t)n);
  to32(a, fa, na);
  to32(b, fb, nbb);
  to32(out, fo, 2 * n);
  for (int64_t e = 0; e < n; ++e) {
    if (which == 0) sg_spec_mix_fwd_f32(ci, co, M, fa, fb, fo, e);
    if (which == 1) sg_spec_mix_bwd_x_f32(ci, co, M, fa, fb, fo, e);
    if (which == 2) sg_spec_mix_bwd_w_f32(nb, ci, co, M, fa, fb, fo, e);
  }
  to64(fo, out, 2 * n);
  free(fa);
  free(fb);
  free(fo);
}

/* max |Y[k] - conj(Y[-k])| over the self-conjugate columns */
static double hermitian_defect(const pipe *p, int64_t rows, const double *Y) {
  double e = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t f = 0; f < p->g.nf; ++f) {
      if (!sg_spec_self(&p->g, f)) continue;
      int64_t mf = 0;
      sg_spec_kept_of(&p->g, f, &mf);
      const double *a = Y + 2 * (r * p->g.nf + f),
                   *b = Y + 2 * (r * p->g.nf + mf);
      double d = fabs(a[0] - b[0]) + fabs(a[1] + b[1]);
      if (d > e) e = d;
    }
  return e;
}

/* The kept-mode maps against the host plan's order: kept mode m of the
 * plan's spectral layout has frequencies sg_fft_plan_freq; full_of(m) must
 * sit at those frequencies (mod n) and kept_of must invert it. */
static void check_maps(const pipe *p, sg_spectral_conv_t c, const char *what) {
  sg_fft_plan_t plan = sg_spectral_conv_plan(c, 0);
  const sg_spec_geo *g = &p->g;
  int bad = 0;
  for (int64_t m = 0; m < g->M; ++m) {
    int64_t rem = m, frem = sg_spec_full_of(g, m);
    for (int d = g->nd - 1; d >= 0; --d) {
      const int64_t j = rem % g->K[d], fj = frem % g->F[d];
      rem /= g->K[d];
      frem /= g->F[d];
      const int64_t k = sg_fft_plan_freq(plan, d, j);
      bad += ((k % g->n[d]) + g->n[d]) % g->n[d] != fj;
    }
    bad += sg_spec_kept_of(g, sg_spec_full_of(g, m), NULL) != m;
  }
  int64_t nkept = 0;
  for (int64_t f = 0; f < g->nf; ++f) nkept += sg_spec_kept_of(g, f, NULL) >= 0;
  bad += nkept != g->M;
  printf("%-44s maps     %s\n", what, bad ? "FAIL" : "ok");
  fails += bad != 0;
}

static void run(int D, const int64_t *shape, const int64_t *keep, int64_t nb,
                int64_t ci, int64_t co, sg_dtype dt) {
  pipe p = {.nb = nb, .ci = ci, .co = co, .f32 = dt == SG_DTYPE_F32};
  sg_spec_geo_init(&p.g, D, shape, keep);
  const int64_t M = p.g.M, nf = p.g.nf;
  int64_t N = 1;
  for (int d = 0; d < D; ++d) N *= shape[d];
  const int64_t nx = nb * ci * N, ny = nb * co * N, nw = 2 * ci * co * M,
                nh = 2 * nb * ci * M;
  char what[160];
  snprintf(what, sizeof what,
           "%s %dD %lldx%lldx%lld keep %lld,%lld,%lld %lld->%lld b%lld",
           sg_dtype_name(dt), D, (long long)shape[0], (long long)shape[1],
           (long long)(D == 3 ? shape[2] : 1), (long long)keep[0],
           (long long)keep[1], (long long)(D == 3 ? keep[2] : 0), (long long)ci,
           (long long)co, (long long)nb);
  double *x = dalloc(nx), *w = dalloc(nw), *dy = dalloc(ny);
  ft_fill(x, nx, 31);
  ft_fill(w, nw, 32);
  ft_fill(dy, ny, 33);
  if (p.f32) { /* the values both sides see */
    for (int64_t i = 0; i < nx; ++i) x[i] = (float)x[i];
    for (int64_t i = 0; i < nw; ++i) w[i] = (float)w[i];
    for (int64_t i = 0; i < ny; ++i) dy[i] = (float)dy[i];
  }
  /* the host op */
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
  sg_spectral_conv_t c = NULL;
  if (sg_spectral_conv_create_comms(MPI_COMM_SELF, 0, NULL, &desc, ci, co,
                                    &c) != SG_OK) {
    printf("FAIL: %s: create\n", what);
    ++fails;
    return;
  }
  if (sg_spectral_conv_spectrum_count(c) != nh ||
      sg_spectral_conv_weight_count(c) != nw) {
    printf(
        "FAIL: %s: spectrum %lld / weight %lld scalars, expected %lld / %lld\n",
        what, (long long)sg_spectral_conv_spectrum_count(c),
        (long long)sg_spectral_conv_weight_count(c), (long long)nh,
        (long long)nw);
    ++fails;
    sg_spectral_conv_destroy(&c);
    return;
  }
  check_maps(&p, c, what);
  const size_t es = sg_dtype_size(dt);
  void *hx = malloc(es * (size_t)nx), *hw = malloc(es * (size_t)nw),
       *hdy = malloc(es * (size_t)ny), *hy = malloc(es * (size_t)ny),
       *hxh = malloc(es * (size_t)nh), *hdx = malloc(es * (size_t)nx),
       *hdw = malloc(es * (size_t)nw);
  double *ry = dalloc(ny), *rxh = dalloc(nh), *rdx = dalloc(nx),
         *rdw = dalloc(nw);
#define PUT(dst, src, n)                              \
  do {                                                \
    if (p.f32)                                        \
      to32(src, (float *)dst, n);                     \
    else                                              \
      memcpy(dst, src, sizeof(double) * (size_t)(n)); \
  } while (0)
#define GET(dst, src, n)                              \
  do {                                                \
    if (p.f32)                                        \
      to64((const float *)src, dst, n);               \
    else                                              \
      memcpy(dst, src, sizeof(double) * (size_t)(n)); \
  } while (0)
  PUT(hx, x, nx);
  PUT(hw, w, nw);
  PUT(hdy, dy, ny);
  for (int64_t i = 0; i < nw; ++i) rdw[i] = 0.25;
  PUT(hdw, rdw, nw);
  int ok = sg_spectral_conv_forward(c, hx, hw, hy, hxh) == SG_OK &&
           sg_spectral_conv_backward(c, hx, hxh, hw, hdy, hdx, hdw) == SG_OK;
  GET(ry, hy, ny);
  GET(rxh, hxh, nh);
  GET(rdx, hdx, nx);
  GET(rdw, hdw, nw);
  if (!ok) {
    printf("FAIL: %s: the host op failed\n", what);
    ++fails;
  }
  /* the device pipeline, FFTW for cuFFT */
  const int64_t rmax = nb * (ci > co ? ci : co);
  double *F = dalloc(2 * rmax * nf), *xh = dalloc(nh),
         *kout = dalloc(2 * nb * co * M), *kin = dalloc(nh), *y = dalloc(ny),
         *dx = dalloc(nx), *dw = dalloc(nw);
  ft_ref_r2c(D, shape, nb * ci, x, F);
  gather(&p, nb * ci, F, xh, 1.0, 1.0);
  mix(&p, 0, xh, w, kout);
  scatter(&p, nb * co, kout, F, 1.0 / (double)N, 1.0);
  const double hdef = hermitian_defect(&p, nb * co, F);
  ft_ref_c2r(D, shape, nb * co, F, y);
  /* backward */
  ft_ref_r2c(D, shape, nb * co, dy, F);
  gather(&p, nb * co, F, kout, 1.0 / (double)N, 2.0);
  for (int64_t i = 0; i < nw; ++i) dw[i] = 0.25;
  mix(&p, 2, xh, kout, dw);
  mix(&p, 1, kout, w, kin);
  scatter(&p, nb * ci, kin, F, 1.0, 0.5);
  const double hdef2 = hermitian_defect(&p, nb * ci, F);
  ft_ref_c2r(D, shape, nb * ci, F, dx);
  const double tol = p.f32 ? 2e-5 : 1e-12;
  report(what, "y", nerr(y, ry, ny), tol);
  report(what, "xhat", nerr(xh, rxh, nh), tol);
  report(what, "dx", nerr(dx, rdx, nx), tol);
  report(what, "dW", nerr(dw, rdw, nw), tol);
  report(what, "herm", hdef > hdef2 ? hdef : hdef2, 0.0);
  free(hx), free(hw), free(hdy), free(hy), free(hxh), free(hdx), free(hdw);
  free(ry), free(rxh), free(rdx), free(rdw);
  free(F), free(xh), free(kout), free(kin), free(y), free(dx), free(dw);
  free(x), free(w), free(dy);
  sg_spectral_conv_destroy(&c);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  const sg_dtype dts[2] = {SG_DTYPE_F64, SG_DTYPE_F32};
  for (int k = 0; k < 2; ++k) {
    /* odd lengths, modes not dividing them, cin > cout */
    run(2, (int64_t[]){7, 9}, (int64_t[]){2, 3}, 2, 3, 2, dts[k]);
    /* even lengths: every mode kept (the Nyquist row and column), cin <
     * cout */
    run(2, (int64_t[]){8, 10}, (int64_t[]){4, 6}, 3, 2, 3, dts[k]);
    /* even last length without its Nyquist column, odd first */
    run(2, (int64_t[]){5, 6}, (int64_t[]){1, 3}, 2, 2, 2, dts[k]);
    /* 3-D, mixed parities */
    run(3, (int64_t[]){5, 6, 7}, (int64_t[]){2, 3, 2}, 2, 2, 3, dts[k]);
    run(3, (int64_t[]){4, 3, 6}, (int64_t[]){2, 1, 4}, 1, 3, 1, dts[k]);
  }
  /* the device entry points without CUDA, or without a device: refused,
   * never a silent host run (a conv is needed: the argument check first) */
  if (sg_spectral_conv_forward_cuda(NULL, NULL, NULL, NULL, NULL) == SG_OK) {
    printf("FAIL: sg_spectral_conv_forward_cuda(NULL conv) succeeded\n");
    ++fails;
  }
  printf("%s\n", fails ? "FAILED" : "PASSED");
  MPI_Finalize();
  return fails ? 1 : 0;
}
