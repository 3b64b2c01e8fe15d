/* Local op kernels: forward against naive reference loops (f64 tight, f32 at
 * fp32 tolerance), every gradient against central finite differences in
 * double precision, odd sizes, stride 2, dilation 2, several tiles and
 * thread counts, accumulation semantics (+= for parameters, overwrite for
 * activations), and bad arguments. Single rank. */
#include "sg_ops.h"
#include "sg_test.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 88172645463325252ull;
static double urand(void) { /* xorshift64*, in [-1, 1) */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (double)((rng_state * 2685821657736338717ull) >> 11) /
             4503599627370496.0 -
         1.0;
}
static double *rnd(int64_t n) {
  double *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
  for (int64_t i = 0; i < n; ++i) p[i] = urand();
  return p;
}
static double *zeros(int64_t n) {
  return calloc((size_t)(n > 0 ? n : 1), sizeof(double));
}
static float *to_f32(const double *x, int64_t n) {
  float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
  for (int64_t i = 0; i < n; ++i) p[i] = (float)x[i];
  return p;
}
static double dot(const double *a, const double *b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
static int64_t prod(const int64_t *v, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; ++i) p *= v[i];
  return p;
}

/* Central differences of f at (up to 40 sampled) entries of p against g. */
typedef double (*scalar_fn)(void *ctx);
static void check_fd(const char *what, scalar_fn f, void *ctx, double *p,
                     const double *g, int64_t n, double tol) {
  const double h = 1e-6;
  int64_t step = n > 40 ? n / 40 : 1;
  int64_t bad = 0;
  for (int64_t i = (n > 40 ? (int64_t)(rng_state % (uint64_t)step) : 0); i < n;
       i += step) {
    double save = p[i];
    p[i] = save + h;
    double lp = f(ctx);
    p[i] = save - h;
    double lm = f(ctx);
    p[i] = save;
    double fd = (lp - lm) / (2 * h);
    if (!(fabs(fd - g[i]) <= tol * (1 + fabs(fd)))) {
      if (!bad)
        sg_test_fail_at(__FILE__, __LINE__,
                        "%s: d/dp[%lld] fd %.10g analytic %.10g", what,
                        (long long)i, fd, g[i]);
      ++bad;
    }
  }
  SG_CHECK(bad == 0, "%s: %lld gradient entries differ from finite differences",
           what, (long long)bad);
}

/* ---- convolution -------------------------------------------------------- */

typedef struct conv_case {
  sg_conv_desc d;
  int bias;
  int64_t out[3], nx, nw, ny;
  double *x, *w, *b, *r;
} conv_case;

static void conv_naive(const conv_case *c, const double *x, const double *w,
                       const double *b, double *y) {
  const sg_conv_desc *d = &c->d;
  int64_t in[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1},
          dl[3] = {1, 1, 1}, o[3] = {1, 1, 1};
  int off = 3 - d->nsp;
  for (int i = 0; i < d->nsp; ++i) {
    in[off + i] = d->in[i];
    k[off + i] = d->kernel[i];
    s[off + i] = d->stride[i];
    dl[off + i] = d->dilation[i];
    o[off + i] = c->out[i];
  }
  for (int64_t n = 0; n < d->batch; ++n)
    for (int64_t co = 0; co < d->cout; ++co)
      for (int64_t o0 = 0; o0 < o[0]; ++o0)
        for (int64_t o1 = 0; o1 < o[1]; ++o1)
          for (int64_t o2 = 0; o2 < o[2]; ++o2) {
            double acc = b ? b[co] : 0;
            for (int64_t ci = 0; ci < d->cin; ++ci)
              for (int64_t a = 0; a < k[0]; ++a)
                for (int64_t bb = 0; bb < k[1]; ++bb)
                  for (int64_t e = 0; e < k[2]; ++e) {
                    int64_t i0 = o0 * s[0] + a * dl[0],
                            i1 = o1 * s[1] + bb * dl[1],
                            i2 = o2 * s[2] + e * dl[2];
                    acc +=
                        w[(((co * d->cin + ci) * k[0] + a) * k[1] + bb) * k[2] +
                          e] *
                        x[(((n * d->cin + ci) * in[0] + i0) * in[1] + i1) *
                              in[2] +
                          i2];
                  }
            y[(((n * d->cout + co) * o[0] + o0) * o[1] + o1) * o[2] + o2] = acc;
          }
}

static double conv_loss(void *ctx) {
  conv_case *c = ctx;
  double *y = zeros(c->ny);
  sg_conv_forward(&c->d, SG_DTYPE_F64, c->x, c->w, c->bias ? c->b : NULL, y,
                  NULL);
  double l = dot(y, c->r, c->ny);
  free(y);
  return l;
}

static void test_conv_case(const char *name, sg_conv_desc d, int bias) {
  conv_case c = {.d = d, .bias = bias};
  SG_CHECK_OK(sg_conv_out_shape(&d, c.out));
  int64_t ksz = prod(d.kernel, d.nsp);
  c.nx = d.batch * d.cin * prod(d.in, d.nsp);
  c.nw = d.cout * d.cin * ksz;
  c.ny = d.batch * d.cout * prod(c.out, d.nsp);
  c.x = rnd(c.nx);
  c.w = rnd(c.nw);
  c.b = rnd(d.cout);
  c.r = rnd(c.ny);
  double *yref = zeros(c.ny), *y = zeros(c.ny);
  conv_naive(&c, c.x, c.w, bias ? c.b : NULL, yref);
  SG_CHECK_OK(
      sg_conv_forward(&d, SG_DTYPE_F64, c.x, c.w, bias ? c.b : NULL, y, NULL));
  SG_CHECK(sg_test_cmp_f64(name, y, yref, c.ny, 1e-12, 1e-12) == 0,
           "%s: f64 forward", name);
  /* f32 forward */
  float *xf = to_f32(c.x, c.nx), *wf = to_f32(c.w, c.nw),
        *bf = to_f32(c.b, d.cout);
  float *yf = malloc((size_t)c.ny * sizeof *yf);
  float *yreff = to_f32(yref, c.ny);
  SG_CHECK_OK(
      sg_conv_forward(&d, SG_DTYPE_F32, xf, wf, bias ? bf : NULL, yf, NULL));
  SG_CHECK(sg_test_cmp_f32(name, yf, yreff, c.ny, 1e-5,
                           1e-5 * sqrt((double)(d.cin * ksz))) == 0,
           "%s: f32 forward", name);
  /* backward: dx overwritten (pre-filled with garbage), dw/db accumulate */
  double *dx = rnd(c.nx), *dw = zeros(c.nw), *db = zeros(d.cout);
  for (int64_t i = 0; i < c.nw; ++i) dw[i] = 1.0;
  for (int64_t i = 0; i < d.cout; ++i) db[i] = 2.0;
  SG_CHECK_OK(sg_conv_backward(&d, SG_DTYPE_F64, c.x, c.w, c.r, dx, dw,
                               bias ? db : NULL, NULL));
  for (int64_t i = 0; i < c.nw; ++i) dw[i] -= 1.0;
  for (int64_t i = 0; i < d.cout; ++i) db[i] -= 2.0;
  check_fd(name, conv_loss, &c, c.x, dx, c.nx, 1e-6);
  check_fd(name, conv_loss, &c, c.w, dw, c.nw, 1e-6);
  if (bias) check_fd(name, conv_loss, &c, c.b, db, d.cout, 1e-6);
  /* f32 backward against the f64 one; and with 2 and 3 threads (the
   * weight gradient's slot partials, the two-phase col2im): the same bits
   * as one thread, forward and backward, f32 and f64 */
  float *bits[4] = {NULL, NULL, NULL, NULL}; /* 1 thread: y, dx, dw, db */
  double *bits64 = NULL;                     /* 1 thread: f64 dw */
  for (int nth = 1; nth <= 3; ++nth) {
    omp_set_num_threads(nth);
    float *rf = to_f32(c.r, c.ny), *dxf = malloc((size_t)c.nx * sizeof *dxf);
    float *dwf = calloc((size_t)c.nw, sizeof *dwf),
          *dbf = calloc((size_t)d.cout, sizeof *dbf);
    float *yt = malloc((size_t)c.ny * sizeof *yt);
    double *dw64 = zeros(c.nw);
    SG_CHECK_OK(
        sg_conv_forward(&d, SG_DTYPE_F32, xf, wf, bias ? bf : NULL, yt, NULL));
    SG_CHECK_OK(
        sg_conv_backward(&d, SG_DTYPE_F32, xf, wf, rf, dxf, dwf, dbf, NULL));
    SG_CHECK_OK(sg_conv_backward(&d, SG_DTYPE_F64, c.x, c.w, c.r, NULL, dw64,
                                 NULL, NULL));
    float *got[4] = {yt, dxf, dwf, dbf};
    const int64_t len[4] = {c.ny, c.nx, c.nw, d.cout};
    const char *what[4] = {"y", "dx", "dw", "db"};
    for (int i = 0; i < 4; ++i) {
      if (nth == 1) {
        bits[i] = malloc((size_t)len[i] * sizeof(float));
        memcpy(bits[i], got[i], (size_t)len[i] * sizeof(float));
      } else {
        SG_CHECK(memcmp(bits[i], got[i], (size_t)len[i] * sizeof(float)) == 0,
                 "%s: f32 %s at %d threads: not the bits of 1 thread", name,
                 what[i], nth);
      }
    }
    if (nth == 1)
      bits64 = dw64;
    else
      SG_CHECK(memcmp(bits64, dw64, (size_t)c.nw * sizeof(double)) == 0,
               "%s: f64 dw at %d threads: not the bits of 1 thread", name, nth);
    float *dxr = to_f32(dx, c.nx), *dwr = to_f32(dw, c.nw);
    SG_CHECK(sg_test_cmp_f32(name, dxf, dxr, c.nx, 1e-4, 1e-4) == 0,
             "%s: f32 dx (%d threads)", name, nth);
    SG_CHECK(sg_test_cmp_f32(name, dwf, dwr, c.nw, 1e-4, 1e-4) == 0,
             "%s: f32 dw (%d threads)", name, nth);
    double *dx2 = zeros(c.nx);
    SG_CHECK_OK(sg_conv_backward(&d, SG_DTYPE_F64, c.x, c.w, c.r, dx2, NULL,
                                 NULL, NULL));
    SG_CHECK(sg_test_cmp_f64(name, dx2, dx, c.nx, 1e-12, 1e-12) == 0,
             "%s: f64 dx (%d threads)", name, nth);
    free(rf);
    free(dxf);
    free(dwf);
    free(dbf);
    free(dxr);
    free(dwr);
    free(dx2);
    free(yt);
    if (nth > 1) free(dw64);
  }
  omp_set_num_threads(1);
  for (int i = 0; i < 4; ++i) free(bits[i]);
  free(bits64);
  free(yref);
  free(y);
  free(xf);
  free(wf);
  free(bf);
  free(yf);
  free(yreff);
  free(dx);
  free(dw);
  free(db);
  free(c.x);
  free(c.w);
  free(c.b);
  free(c.r);
}

/* The f32 convolution as run by default against the run with environment
 * variable env = val, on the same inputs, 1 and 2 threads: the direct
 * (im2col-free) kernels of 2-D stride-1 layers against the im2col path
 * (SG_CONV_DIRECT=0), or the AVX-512 kernels against the portable path
 * (SG_SIMD=portable: BLAS); test_conv_case checks the default against the
 * f64 reference. The same sums in another order: 1e-5 relative. Without
 * AVX-512 both runs take the portable im2col path. */
/* Where not NULL, the value of `env` for the first run of
 * test_conv_paths_case instead of leaving it unset (SG_SIMD=avx2 against
 * portable: the AVX2 tier on a CPU that also has AVX-512). */
static const char *paths_base = NULL;

static void test_conv_paths_case(const char *name, sg_conv_desc d,
                                 const char *env, const char *val) {
  int64_t out[2];
  SG_CHECK_OK(sg_conv_out_shape(&d, out));
  int64_t ksz = prod(d.kernel, 2), nx = d.batch * d.cin * prod(d.in, 2);
  int64_t nw = d.cout * d.cin * ksz, ny = d.batch * d.cout * out[0] * out[1];
  double *xd = rnd(nx), *wd = rnd(nw), *bd = rnd(d.cout), *rd = rnd(ny);
  float *x = to_f32(xd, nx), *w = to_f32(wd, nw), *b = to_f32(bd, d.cout),
        *r = to_f32(rd, ny);
  float *res[2][3];
  const char *had = getenv(env); /* restored after the v = 1 runs */
  char *saved = had ? strdup(had) : NULL;
  for (int nth = 1; nth <= 2; ++nth) {
    omp_set_num_threads(nth);
    for (int v = 0; v < 2; ++v) { /* v = 1: env = val */
      if (v) setenv(env, val, 1);
      if (!v && paths_base) setenv(env, paths_base, 1);
      res[v][0] = malloc((size_t)ny * sizeof(float));
      res[v][1] = malloc((size_t)nx * sizeof(float));
      res[v][2] = calloc((size_t)nw, sizeof(float));
      SG_CHECK_OK(sg_conv_forward(&d, SG_DTYPE_F32, x, w, b, res[v][0], NULL));
      SG_CHECK_OK(sg_conv_backward(&d, SG_DTYPE_F32, x, w, r, res[v][1],
                                   res[v][2], NULL, NULL));
      if (saved)
        setenv(env, saved, 1);
      else
        unsetenv(env);
    }
    const int64_t n[3] = {ny, nx, nw};
    const char *what[3] = {"y", "dx", "dw"};
    double tol = 1e-5 * sqrt((double)(d.cin * ksz));
    for (int i = 0; i < 3; ++i) {
      SG_CHECK(sg_test_cmp_f32(name, res[0][i], res[1][i], n[i], 1e-5, tol) ==
                   0,
               "%s: %s = %s with %s=%s (%d threads)", name, what[i], what[i],
               env, val, nth);
      free(res[0][i]);
      free(res[1][i]);
    }
  }
  omp_set_num_threads(1);
  free(saved);
  free(xd);
  free(wd);
  free(bd);
  free(rd);
  free(x);
  free(w);
  free(b);
  free(r);
}

static void test_conv_direct_case(const char *name, sg_conv_desc d) {
  test_conv_paths_case(name, d, "SG_CONV_DIRECT", "0");
}

/* Run-time dispatch: SG_SIMD=portable takes BLAS and plain C where the
 * AVX-512 kernels would run (direct 3x3, the 1x1 kernels, GELU), or the
 * AVX2 ones (1x1, GELU; the 3x3 convolution has no AVX2 kernel); the
 * results agree within f32 tolerance (GELU: the SIMD exp polynomial and
 * reciprocal against libm, a few ulp). Run twice: the default tier, then
 * SG_SIMD=avx2 (the AVX2 tier where AVX-512 would be taken). On a CPU
 * without AVX2 both runs are portable: the test then checks the switch is
 * harmless. */
static void test_simd_dispatch_tier(const char *base) {
  paths_base = base;
  sg_conv_desc d = {.nsp = 2,
                    .batch = 2,
                    .cin = 5,
                    .cout = 9,
                    .in = {21, 35},
                    .kernel = {3, 3},
                    .stride = {1, 1},
                    .dilation = {1, 1}};
  test_conv_paths_case("simd 3x3", d, "SG_SIMD", "portable");
  sg_conv_desc p = {.nsp = 2,
                    .batch = 2,
                    .cin = 7,
                    .cout = 11,
                    .in = {9, 13},
                    .kernel = {1, 1},
                    .stride = {1, 1},
                    .dilation = {1, 1}};
  test_conv_paths_case("simd 1x1", p, "SG_SIMD", "portable");
  /* odd channel counts past one register tile each way (AVX2: 4 x 24 and
   * 4 x 3 tiles, AVX-512: 8 x 48 and 4 x 6), pixels 2 x 24 + 7 */
  sg_conv_desc q = p;
  q.cin = 13, q.cout = 10, q.in[0] = 5, q.in[1] = 11;
  test_conv_paths_case("simd 1x1 odd", q, "SG_SIMD", "portable");
  paths_base = NULL;
  const int64_t n = 1000 + 13; /* a masked tail */
  double *ad = rnd(n), *dd = rnd(n);
  for (int64_t i = 0; i < n; ++i) ad[i] *= 8; /* past the clamps' knees */
  float *a = to_f32(ad, n), *dy = to_f32(dd, n), *r[2][2];
  for (int v = 0; v < 2; ++v) {
    if (v) setenv("SG_SIMD", "portable", 1);
    if (!v && base) setenv("SG_SIMD", base, 1);
    r[v][0] = malloc((size_t)n * sizeof(float));
    r[v][1] = malloc((size_t)n * sizeof(float));
    SG_CHECK_OK(sg_act_forward(SG_ACT_GELU, SG_DTYPE_F32, n, a, r[v][0]));
    SG_CHECK_OK(sg_act_backward(SG_ACT_GELU, SG_DTYPE_F32, n, a, dy, r[v][1]));
    unsetenv("SG_SIMD");
  }
  SG_CHECK(sg_test_cmp_f32("simd gelu", r[0][0], r[1][0], n, 1e-5, 1e-6) == 0,
           "gelu forward = portable");
  SG_CHECK(sg_test_cmp_f32("simd gelu'", r[0][1], r[1][1], n, 1e-5, 1e-6) == 0,
           "gelu backward = portable");
  for (int v = 0; v < 2; ++v) {
    free(r[v][0]);
    free(r[v][1]);
  }
  free(ad);
  free(dd);
  free(a);
  free(dy);
}

/* The direct convolution's AVX2 + FMA kernels (conv_avx2.c) against the
 * portable im2col + BLAS path, 1 and 2 threads: SG_SIMD=avx2 caps the tier
 * at AVX2 (on an AVX-512 CPU too), SG_SIMD=portable rules it out. Odd
 * sizes: channel counts off the 4-row forward tiles and the 3 x 4 weight
 * gradient tiles, one channel, tiles whose last 24-pixel strip and 8-pixel
 * vector are partial (masked loads and stores), several row tiles, kernels 3x3 / 5x3 dilated / 1x3 / 3x5 (margins 1 to 4 on a side).
 * test_conv_case checks the default path (AVX2 on an AVX2-only CPU) against
 * the f64 reference on other cases. Without AVX2 both runs are portable. */
static void test_conv_avx2(void) {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
  if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")))
    printf("# test_conv_avx2: no AVX2 + FMA here, both runs portable\n");
#endif
  static const struct {
    int64_t n, c, k, h, w, kh, kw, dh, dw;
  } cases[] = {
      {2, 5, 9, 21, 35, 3, 3, 1, 1},   {1, 1, 1, 9, 12, 3, 3, 1, 1},
      {1, 7, 6, 13, 33, 3, 3, 1, 1},   {2, 4, 5, 19, 26, 3, 3, 1, 1},
      {1, 33, 17, 11, 47, 3, 3, 1, 1}, {1, 3, 4, 40, 30, 5, 3, 1, 2},
      {2, 6, 3, 15, 21, 1, 3, 1, 1},   {1, 2, 7, 9, 29, 3, 5, 2, 1},
      {1, 8, 8, 70, 19, 3, 3, 1, 1},   {1, 3, 2, 5, 11, 3, 3, 1, 1},
  };
  setenv("SG_SIMD", "avx2", 1);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    sg_conv_desc d = {.nsp = 2,
                      .batch = cases[i].n,
                      .cin = cases[i].c,
                      .cout = cases[i].k,
                      .in = {cases[i].h, cases[i].w},
                      .kernel = {cases[i].kh, cases[i].kw},
                      .stride = {1, 1},
                      .dilation = {cases[i].dh, cases[i].dw}};
    char name[64];
    snprintf(name, sizeof name, "avx2 %lldx%lld c%lld k%lld %lldx%lld",
             (long long)cases[i].kh, (long long)cases[i].kw,
             (long long)cases[i].c, (long long)cases[i].k,
             (long long)cases[i].h, (long long)cases[i].w);
    test_conv_paths_case(name, d, "SG_SIMD", "portable");
  }
  unsetenv("SG_SIMD");
}

/* The AVX2 forward's in-place row stores (sg_c2_gemm_rows_f32) against
 * its tile copied out (SG_CONV_ROWS=0): the same bits, 1 and 2 threads.
 * Rows of 10 to 66 outputs (the narrowest the row mode takes: 10 at 3x3,
 * spilled lanes into the next row), junk columns of 2 to 4, strips
 * ending mid-row and at a row's end, several row tiles, odd channels. */
static void test_conv_rows_bits(void) {
  static const struct {
    int64_t n, c, k, h, w, kh, kw, dh, dw;
  } cases[] = {
      {2, 5, 9, 21, 35, 3, 3, 1, 1},   {1, 3, 5, 13, 12, 3, 3, 1, 1},
      {1, 2, 3, 9, 11, 3, 3, 1, 1},    {2, 7, 6, 17, 26, 3, 3, 1, 1},
      {1, 4, 9, 45, 67, 5, 3, 1, 2},   {1, 3, 4, 7, 23, 3, 5, 1, 1},
      {1, 33, 17, 71, 37, 3, 3, 1, 1}, {2, 8, 8, 66, 66, 3, 3, 1, 1},
      {1, 5, 3, 30, 14, 1, 3, 1, 1},   {2, 3, 4, 15, 13, 3, 3, 1, 1},
  };
  setenv("SG_SIMD", "avx2", 1);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    sg_conv_desc d = {.nsp = 2,
                      .batch = cases[i].n,
                      .cin = cases[i].c,
                      .cout = cases[i].k,
                      .in = {cases[i].h, cases[i].w},
                      .kernel = {cases[i].kh, cases[i].kw},
                      .stride = {1, 1},
                      .dilation = {cases[i].dh, cases[i].dw}};
    int64_t out[2];
    SG_CHECK_OK(sg_conv_out_shape(&d, out));
    const int64_t nx = d.batch * d.cin * d.in[0] * d.in[1],
                  nw = d.cout * d.cin * d.kernel[0] * d.kernel[1],
                  ny = d.batch * d.cout * out[0] * out[1];
    double *xd = rnd(nx), *wd = rnd(nw), *bd = rnd(d.cout);
    float *x = to_f32(xd, nx), *w = to_f32(wd, nw), *b = to_f32(bd, d.cout);
    for (int nth = 1; nth <= 2; ++nth) {
      omp_set_num_threads(nth);
      float *y[2];
      for (int v = 0; v < 2; ++v) {
        if (v) setenv("SG_CONV_ROWS", "0", 1);
        y[v] = malloc((size_t)ny * sizeof(float));
        for (int64_t j = 0; j < ny; ++j) y[v][j] = NAN; /* all written */
        SG_CHECK_OK(sg_conv_forward(&d, SG_DTYPE_F32, x, w, b, y[v], NULL));
        unsetenv("SG_CONV_ROWS");
      }
      int64_t nan = 0;
      for (int64_t j = 0; j < ny; ++j) nan += isnan(y[0][j]) != 0;
      SG_CHECK(nan == 0, "conv rows %zu: %lld outputs not written", i,
               (long long)nan);
      SG_CHECK(memcmp(y[0], y[1], (size_t)ny * sizeof(float)) == 0,
               "conv rows %zu (%lldx%lld in %lldx%lld, %d threads): the row "
               "stores' bits = the copied-out tile's",
               i, (long long)d.kernel[0], (long long)d.kernel[1],
               (long long)d.in[0], (long long)d.in[1], nth);
      free(y[0]);
      free(y[1]);
    }
    omp_set_num_threads(1);
    free(xd);
    free(wd);
    free(bd);
    free(x);
    free(w);
    free(b);
  }
  unsetenv("SG_SIMD");
}

static void test_conv_direct(void) {
  /* odd sizes, edge register tiles (17 = 2 x 8 + 1 outputs; 33 inputs),
   * several row tiles, kernels 3x3 / 5x3 dilated, padding margins 1 and
   * 2 (the input carries them: in = out + span - 1) */
  sg_conv_desc d = {.nsp = 2,
                    .batch = 2,
                    .cin = 3,
                    .cout = 5,
                    .in = {13, 19},
                    .kernel = {3, 3},
                    .stride = {1, 1},
                    .dilation = {1, 1}};
  test_conv_case("conv2d direct 3x3 odd", d, 1);
  test_conv_direct_case("direct 3x3 odd", d);
  sg_conv_desc e = {.nsp = 2,
                    .batch = 1,
                    .cin = 33,
                    .cout = 17,
                    .in = {71, 37},
                    .kernel = {3, 3},
                    .stride = {1, 1},
                    .dilation = {1, 1}};
  test_conv_case("conv2d direct edges", e, 0);
  test_conv_direct_case("direct edges", e);
  sg_conv_desc f = {.nsp = 2,
                    .batch = 2,
                    .cin = 4,
                    .cout = 9,
                    .in = {45, 67},
                    .kernel = {5, 3},
                    .stride = {1, 1},
                    .dilation = {1, 2}};
  test_conv_case("conv2d direct 5x3 d2", f, 1);
  test_conv_direct_case("direct 5x3 d2", f);
  /* a wider span across than down (dx's dy slots: 4 leading zeros, the
   * shifts past a slot's end into the next one's), a 2-row last dx tile */
  sg_conv_desc h = {.nsp = 2,
                    .batch = 1,
                    .cin = 3,
                    .cout = 4,
                    .in = {7, 23},
                    .kernel = {3, 5},
                    .stride = {1, 1},
                    .dilation = {1, 1}};
  test_conv_case("conv2d direct 3x5", h, 1);
  test_conv_direct_case("direct 3x5", h);
}

static void test_conv(void) {
  sg_conv_desc d1 = {.nsp = 1,
                     .batch = 2,
                     .cin = 3,
                     .cout = 2,
                     .in = {13},
                     .kernel = {3},
                     .stride = {2},
                     .dilation = {2}};
  test_conv_case("conv1d s2 d2", d1, 1);
  sg_conv_desc d2 = {.nsp = 2,
                     .batch = 2,
                     .cin = 3,
                     .cout = 4,
                     .in = {9, 11},
                     .kernel = {3, 2},
                     .stride = {2, 1},
                     .dilation = {1, 2}};
  test_conv_case("conv2d odd s2 d2", d2, 1);
  sg_conv_desc d2b = {.nsp = 2,
                      .batch = 3,
                      .cin = 2,
                      .cout = 3,
                      .in = {7, 5},
                      .kernel = {3, 3},
                      .stride = {1, 1},
                      .dilation = {1, 1}};
  test_conv_case("conv2d 3x3 nobias", d2b, 0);
  /* many tiles: 2400 output columns, inner 61 */
  sg_conv_desc d2t = {.nsp = 2,
                      .batch = 2,
                      .cin = 2,
                      .cout = 3,
                      .in = {43, 65},
                      .kernel = {3, 5},
                      .stride = {1, 1},
                      .dilation = {2, 1}};
  test_conv_case("conv2d tiled", d2t, 1);
  sg_conv_desc d2s = {.nsp = 2,
                      .batch = 1,
                      .cin = 2,
                      .cout = 2,
                      .in = {75, 35},
                      .kernel = {3, 3},
                      .stride = {2, 2},
                      .dilation = {2, 2}};
  test_conv_case("conv2d tiled s2 d2", d2s, 1);
  sg_conv_desc d3 = {.nsp = 3,
                     .batch = 2,
                     .cin = 2,
                     .cout = 3,
                     .in = {7, 6, 9},
                     .kernel = {3, 2, 3},
                     .stride = {2, 1, 2},
                     .dilation = {1, 2, 2}};
  test_conv_case("conv3d s2 d2", d3, 1);
  sg_conv_desc d11 = {.nsp = 2,
                      .batch = 2,
                      .cin = 5,
                      .cout = 3,
                      .in = {7, 9},
                      .kernel = {1, 1},
                      .stride = {1, 1},
                      .dilation = {1, 1}};
  test_conv_case("conv 1x1 (linear)", d11, 1);
  /* 1x1 with full register tiles and edges (f32 pointwise kernels): 13
   * outputs = 8 + 5 (forward) = 3 x 4 + 1 (dW), 14 inputs = 2 x 6 + 2,
   * 13 x 83 = 1079 pixels = 22 strips of 48 + 23 (dW chunks 1024 + 55) */
  sg_conv_desc d11b = {.nsp = 2,
                       .batch = 2,
                       .cin = 14,
                       .cout = 13,
                       .in = {13, 83},
                       .kernel = {1, 1},
                       .stride = {1, 1},
                       .dilation = {1, 1}};
  test_conv_case("conv 1x1 tiles", d11b, 1);
  sg_conv_desc d11c = {.nsp = 1,
                       .batch = 3,
                       .cin = 1,
                       .cout = 4,
                       .in = {64},
                       .kernel = {1},
                       .stride = {1},
                       .dilation = {1}};
  test_conv_case("conv 1x1 cin 1", d11c, 0);
  sg_conv_desc d1l = {.nsp = 1,
                      .batch = 2,
                      .cin = 2,
                      .cout = 2,
                      .in = {2500},
                      .kernel = {5},
                      .stride = {1},
                      .dilation = {3}};
  test_conv_case("conv1d long tiled", d1l, 1);

  /* sg_linear equals the 1x1 convolution */
  int64_t nb = 2, ci = 5, co = 3, sp = 63;
  double *x = rnd(nb * ci * sp), *w = rnd(co * ci), *b = rnd(co);
  double *y1 = zeros(nb * co * sp), *y2 = zeros(nb * co * sp);
  sg_conv_desc dl = {.nsp = 1,
                     .batch = nb,
                     .cin = ci,
                     .cout = co,
                     .in = {sp},
                     .kernel = {1},
                     .stride = {1},
                     .dilation = {1}};
  SG_CHECK_OK(sg_linear_forward(SG_DTYPE_F64, nb, ci, co, sp, x, w, b, y1));
  SG_CHECK_OK(sg_conv_forward(&dl, SG_DTYPE_F64, x, w, b, y2, NULL));
  SG_CHECK(sg_test_cmp_bytes("linear", y1, y2, (size_t)(nb * co * sp) * 8) == 0,
           "linear = conv1x1");
  free(x);
  free(w);
  free(b);
  free(y1);
  free(y2);

  /* errors */
  sg_conv_desc bad = d2;
  bad.in[0] = 2;
  SG_CHECK_STATUS(sg_conv_forward(&bad, SG_DTYPE_F64, d2.in, d2.in, NULL, d2.in,
                                  NULL),
                  SG_ERR_SHAPE);
  bad = d2;
  bad.stride[1] = 0;
  SG_CHECK_STATUS(sg_conv_forward(&bad, SG_DTYPE_F64, d2.in, d2.in, NULL, d2.in,
                                  NULL),
                  SG_ERR_INVALID_ARG);
  SG_CHECK_STATUS(sg_conv_forward(&d2, SG_DTYPE_I32, d2.in, d2.in, NULL, d2.in,
                                  NULL),
                  SG_ERR_NOT_SUPPORTED);
  SG_CHECK_STATUS(sg_conv_forward(&d2, SG_DTYPE_F64, NULL, d2.in, NULL, d2.in,
                                  NULL),
                  SG_ERR_INVALID_ARG);
}

/* ---- the fused linear: against the ops composed ----------------------- */

/* One case of sg_linear_act_forward / sg_linear_backward_add in dtype dt
 * (act < 0: none) against sg_linear_*, sg_binary_forward and sg_act_forward
 * one after the other: the same values, bit for bit (the fused kernels
 * round the same additions in the same order). */
static void linear_act_case(sg_dtype dt, int64_t nb, int64_t ci, int64_t co,
                            int64_t sp, int add, int act, int bias) {
  const int64_t nx = nb * ci * sp, nz = nb * co * sp;
  const size_t es = dt == SG_DTYPE_F32 ? 4 : 8;
  double *xd = rnd(nx), *wd = rnd(co * ci), *bd = rnd(co), *rd = rnd(nz),
         *dyd = rnd(nz), *dxd = rnd(nx);
  void *x = xd, *w = wd, *b = bd, *r = rd, *dy = dyd, *dx0 = dxd;
  if (dt == SG_DTYPE_F32)
    x = to_f32(xd, nx), w = to_f32(wd, co * ci), b = to_f32(bd, co),
    r = to_f32(rd, nz), dy = to_f32(dyd, nz), dx0 = to_f32(dxd, nx);
  void *bb = bias ? b : NULL;
  char *z1 = malloc((size_t)nz * es), *z2 = malloc((size_t)nz * es),
       *a1 = malloc((size_t)nz * es), *a2 = malloc((size_t)nz * es),
       *t = malloc((size_t)(nz > nx ? nz : nx) * es);
  memcpy(z1, r, (size_t)nz * es);
  SG_CHECK_OK(sg_linear_act_forward(dt, nb, ci, co, sp, x, w, bb, add, act, z1,
                                    act >= 0 ? a1 : NULL));
  SG_CHECK_OK(sg_linear_forward(dt, nb, ci, co, sp, x, w, bb, t));
  if (add)
    SG_CHECK_OK(sg_binary_forward(SG_BINARY_ADD, dt, nz, r, t, z2));
  else
    memcpy(z2, t, (size_t)nz * es);
  SG_CHECK(sg_test_cmp_bytes("linear_act z", z1, z2, (size_t)nz * es) == 0,
           "fused z = composed");
  if (act >= 0) {
    SG_CHECK_OK(sg_act_forward((sg_act)act, dt, nz, z2, a2));
    SG_CHECK(sg_test_cmp_bytes("linear_act a", a1, a2, (size_t)nz * es) == 0,
             "fused act = composed");
  }
  /* backward: dx = dx0 + W^T dy, dw and db accumulated */
  char *dx1 = malloc((size_t)nx * es), *dx2 = malloc((size_t)nx * es);
  double *g1 = zeros(co * ci + co), *g2 = zeros(co * ci + co);
  memcpy(dx1, dx0, (size_t)nx * es);
  SG_CHECK_OK(sg_linear_backward_add(dt, nb, ci, co, sp, x, w, dy, dx1, g1,
                                     bias ? (char *)g1 + co * ci * es : NULL));
  SG_CHECK_OK(sg_linear_backward(dt, nb, ci, co, sp, x, w, dy, t, g2,
                                 bias ? (char *)g2 + co * ci * es : NULL));
  SG_CHECK_OK(sg_binary_forward(SG_BINARY_ADD, dt, nx, dx0, t, dx2));
  SG_CHECK(sg_test_cmp_bytes("linear_backward_add dx", dx1, dx2,
                             (size_t)nx * es) == 0,
           "dx0 + W^T dy");
  SG_CHECK(sg_test_cmp_bytes("linear_backward_add dw", g1, g2,
                             (size_t)(co * ci + co) * es) == 0,
           "dw, db as sg_linear_backward");
  /* the backward from z (sg_linear_act_backward): as sg_act_backward and
   * the linear's backward composed, bit for bit; with dx, without */
  char *dz = malloc((size_t)nz * es);
  for (int v = 0; act >= 0 && v < 2; ++v) {
    char *gx = v ? NULL : dx1;
    memcpy(dx1, dx0, (size_t)nx * es);
    memcpy(dx2, dx0, (size_t)nx * es);
    memset(g1, 0, (size_t)(co * ci + co) * sizeof *g1);
    memset(g2, 0, (size_t)(co * ci + co) * sizeof *g2);
    void *gb1 = bias ? (char *)g1 + co * ci * es : NULL,
         *gb2 = bias ? (char *)g2 + co * ci * es : NULL;
    SG_CHECK_OK(sg_linear_act_backward(dt, nb, ci, co, sp, x, w, act, z1, dy,
                                       add, gx, g1, gb1));
    SG_CHECK_OK(sg_act_backward((sg_act)act, dt, nz, z1, dy, dz));
    SG_CHECK_OK((add ? sg_linear_backward_add : sg_linear_backward)(
        dt, nb, ci, co, sp, x, w, dz, v ? NULL : dx2, g2, gb2));
    SG_CHECK(sg_test_cmp_bytes("linear_act_backward dx", dx1, dx2,
                               (size_t)nx * es) == 0,
             "dx as act' then the linear's backward");
    SG_CHECK(sg_test_cmp_bytes("linear_act_backward dw", g1, g2,
                               (size_t)(co * ci + co) * es) == 0,
             "dw, db as act' then the linear's backward");
  }
  free(dz);
  if (dt == SG_DTYPE_F32)
    free(x), free(w), free(b), free(r), free(dy), free(dx0);
  free(xd), free(wd), free(bd), free(rd), free(dyd), free(dxd);
  free(z1), free(z2), free(a1), free(a2), free(t), free(dx1), free(dx2);
  free(g1), free(g2);
}

static void test_linear_act(void) {
  const sg_dtype dts[2] = {SG_DTYPE_F64, SG_DTYPE_F32};
  const int acts[3] = {-1, SG_ACT_GELU, SG_ACT_RELU};
  for (int d = 0; d < 2; ++d)
    for (int add = 0; add < 2; ++add)
      for (int a = 0; a < 3; ++a) /* odd sizes: edge tiles, masked pixels */
        linear_act_case(dts[d], 3, 5, 11, 205, add, acts[a], (a + add) % 2);
  omp_set_num_threads(2); /* the pixel chunks split over threads */
  linear_act_case(SG_DTYPE_F32, 2, 32, 32, 397, 1, SG_ACT_GELU, 1);
  omp_set_num_threads(1);
  /* the AVX2 tier where the CPU also has AVX-512 (elsewhere the default) */
  setenv("SG_SIMD", "avx2", 1);
  for (int add = 0; add < 2; ++add)
    linear_act_case(SG_DTYPE_F32, 3, 5, 11, 205, add, SG_ACT_GELU, add);
  linear_act_case(SG_DTYPE_F32, 2, 32, 32, 397, 1, SG_ACT_GELU, 1);
  /* more output rows than a packed chunk's, pixels over the fused
   * backward's chunks (288) with a masked tail; on two threads */
  linear_act_case(SG_DTYPE_F32, 2, 7, 133, 1739, 0, SG_ACT_GELU, 1);
  omp_set_num_threads(2);
  linear_act_case(SG_DTYPE_F32, 2, 7, 133, 1739, 1, SG_ACT_GELU, 1);
  omp_set_num_threads(1);
  unsetenv("SG_SIMD");
  float v[4] = {0};
  SG_CHECK_STATUS(sg_linear_act_forward(SG_DTYPE_F32, 1, 1, 1, 1, v, v + 1,
                                        NULL, 0, 99, v + 2, v + 3),
                  SG_ERR_INVALID_ARG);
}

/* ---- the projection head: against the linears composed ---------------- */

/* One case of sg_linear_head_forward / backward (ci -> cm -> co, GELU) in
 * dtype dt against sg_linear_act_forward + sg_linear_forward and
 * sg_linear_backward + sg_linear_act_backward: the same bits (the fused
 * kernels form a = gelu(z) per chunk and never store it). */
static void linear_head_case(sg_dtype dt, int64_t nb, int64_t ci, int64_t cm,
                             int64_t co, int64_t sp, int bias) {
  const int64_t nx = nb * ci * sp, nz = nb * cm * sp, ny = nb * co * sp,
                nw = cm * ci + cm + co * cm + co;
  const size_t es = dt == SG_DTYPE_F32 ? 4 : 8;
  const int act = SG_ACT_GELU;
  double *xd = rnd(nx), *pd = rnd(nw), *dyd = rnd(ny);
  void *x = xd, *pp = pd, *dy = dyd;
  if (dt == SG_DTYPE_F32)
    x = to_f32(xd, nx), pp = to_f32(pd, nw), dy = to_f32(dyd, ny);
  char *w1 = pp, *b1 = w1 + cm * ci * es, *w2 = b1 + cm * es,
       *b2 = w2 + co * cm * es;
  char *z1 = malloc((size_t)nz * es), *z2 = malloc((size_t)nz * es),
       *a1 = malloc((size_t)nz * es), *a2 = malloc((size_t)nz * es),
       *y1 = malloc((size_t)ny * es), *y2 = malloc((size_t)ny * es),
       *da = malloc((size_t)nz * es);
  SG_CHECK_OK(sg_linear_head_forward(dt, nb, ci, cm, co, sp, x, w1,
                                     bias ? b1 : NULL, act, w2,
                                     bias ? b2 : NULL, z1, a1, y1));
  SG_CHECK_OK(sg_linear_act_forward(dt, nb, ci, cm, sp, x, w1, bias ? b1 : NULL,
                                    0, act, z2, a2));
  SG_CHECK_OK(
      sg_linear_forward(dt, nb, cm, co, sp, a2, w2, bias ? b2 : NULL, y2));
  SG_CHECK(sg_test_cmp_bytes("linear_head z", z1, z2, (size_t)nz * es) == 0,
           "z as the linear_act's");
  SG_CHECK(sg_test_cmp_bytes("linear_head y", y1, y2, (size_t)ny * es) == 0,
           "y as linear_act then linear");
  /* backward: with dx and every gradient, then without dx */
  char *dx1 = malloc((size_t)nx * es), *dx2 = malloc((size_t)nx * es);
  double *g1 = zeros(nw), *g2 = zeros(nw);
  for (int v = 0; v < 2; ++v) {
    memset(dx1, 0, (size_t)nx * es), memset(dx2, 0, (size_t)nx * es);
    memset(g1, 0, (size_t)nw * sizeof *g1),
        memset(g2, 0, (size_t)nw * sizeof *g2);
    char *q1 = (char *)g1, *q2 = (char *)g2;
    const size_t o1 = (size_t)(cm * ci) * es, o2 = o1 + (size_t)cm * es,
                 o3 = o2 + (size_t)(co * cm) * es;
    SG_CHECK_OK(sg_linear_head_backward(dt, nb, ci, cm, co, sp, x, w1, act, w2,
                                        z1, a2, dy, v ? NULL : dx1, q1,
                                        bias ? q1 + o1 : NULL, q1 + o2,
                                        bias ? q1 + o3 : NULL));
    SG_CHECK_OK(sg_linear_backward(dt, nb, cm, co, sp, a2, w2, dy, da, q2 + o2,
                                   bias ? q2 + o3 : NULL));
    SG_CHECK_OK(sg_linear_act_backward(dt, nb, ci, cm, sp, x, w1, act, z2, da,
                                       0, v ? NULL : dx2, q2,
                                       bias ? q2 + o1 : NULL));
    SG_CHECK(sg_test_cmp_bytes("linear_head dx", dx1, dx2, (size_t)nx * es) ==
                 0,
             "dx as the linears' backwards composed");
    SG_CHECK(sg_test_cmp_bytes("linear_head dw", g1, g2, (size_t)nw * es) == 0,
             "dw1, db1, dw2, db2 as the linears' backwards composed");
  }
  if (dt == SG_DTYPE_F32) free(x), free(pp), free(dy);
  free(xd), free(pd), free(dyd), free(z1), free(z2), free(a1), free(a2);
  free(y1), free(y2), free(da), free(dx1), free(dx2), free(g1), free(g2);
}

static void test_linear_head(void) {
  /* odd sizes: edge tiles, masked pixels; the default tier, then AVX2 */
  linear_head_case(SG_DTYPE_F64, 3, 5, 11, 2, 205, 1);
  linear_head_case(SG_DTYPE_F32, 3, 5, 11, 2, 205, 1);
  setenv("SG_SIMD", "avx2", 1);
  linear_head_case(SG_DTYPE_F32, 3, 5, 11, 2, 205, 1);
  linear_head_case(SG_DTYPE_F32, 2, 7, 13, 5, 203, 0);
  /* over the forward's (192) and backward's (288) pixel chunks, a masked
   * tail, more rows than a tile's; the FNO's 32 -> 128 -> 1; two threads */
  linear_head_case(SG_DTYPE_F32, 2, 7, 133, 1, 1739, 1);
  omp_set_num_threads(2);
  linear_head_case(SG_DTYPE_F32, 2, 32, 128, 1, 397, 1);
  linear_head_case(SG_DTYPE_F32, 1, 3, 9, 6, 1001, 1);
  omp_set_num_threads(1);
  setenv("SG_SIMD", "portable", 1); /* the ops composed, a kept */
  linear_head_case(SG_DTYPE_F32, 2, 7, 13, 5, 203, 1);
  unsetenv("SG_SIMD");
  float v[8] = {0};
  SG_CHECK_STATUS(sg_linear_head_forward(SG_DTYPE_F32, 1, 1, 1, 1, 1, v, v + 1,
                                         NULL, 99, v + 2, NULL, v + 3, v + 4,
                                         v + 5),
                  SG_ERR_INVALID_ARG);
}

/* ---- transposed convolution --------------------------------------------- */

typedef struct convt_case {
  sg_conv_desc d;
  int64_t nx, nw, ny;
  double *x, *w, *b, *r;
} convt_case;

static double convt_loss(void *ctx) {
  convt_case *c = ctx;
  double *y = zeros(c->ny);
  sg_convt_forward(&c->d, SG_DTYPE_F64, c->x, c->w, c->b, y);
  double l = dot(y, c->r, c->ny);
  free(y);
  return l;
}

static void test_convt(void) {
  const int64_t in[2] = {5, 7}, k[2] = {2, 3};
  convt_case c = {.d = {.nsp = 2,
                        .batch = 2,
                        .cin = 3,
                        .cout = 2,
                        .in = {5, 7},
                        .kernel = {2, 3}}};
  c.nx = 2 * 3 * 35;
  c.nw = 3 * 2 * 6;
  c.ny = 2 * 2 * 10 * 21;
  c.x = rnd(c.nx);
  c.w = rnd(c.nw);
  c.b = rnd(2);
  c.r = rnd(c.ny);
  double *y = zeros(c.ny), *yref = zeros(c.ny);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t co = 0; co < 2; ++co)
      for (int64_t i = 0; i < in[0] * k[0]; ++i)
        for (int64_t j = 0; j < in[1] * k[1]; ++j) {
          double acc = c.b[co];
          for (int64_t ci = 0; ci < 3; ++ci)
            acc += c.x[((n * 3 + ci) * in[0] + i / k[0]) * in[1] + j / k[1]] *
                   c.w[((ci * 2 + co) * k[0] + i % k[0]) * k[1] + j % k[1]];
          yref[((n * 2 + co) * 10 + i) * 21 + j] = acc;
        }
  SG_CHECK_OK(sg_convt_forward(&c.d, SG_DTYPE_F64, c.x, c.w, c.b, y));
  SG_CHECK(sg_test_cmp_f64("convt", y, yref, c.ny, 1e-12, 1e-12) == 0,
           "convt forward");
  double *dx = rnd(c.nx), *dw = zeros(c.nw), *db = zeros(2);
  SG_CHECK_OK(sg_convt_backward(&c.d, SG_DTYPE_F64, c.x, c.w, c.r, dx, dw, db));
  check_fd("convt dx", convt_loss, &c, c.x, dx, c.nx, 1e-6);
  check_fd("convt dw", convt_loss, &c, c.w, dw, c.nw, 1e-6);
  check_fd("convt db", convt_loss, &c, c.b, db, 2, 1e-6);
  /* dx and dw the same bits at 1, 2 and 3 threads (11 samples: 11 column
   * tiles over the weight gradient's slots) */
  sg_conv_desc d5 = c.d;
  d5.batch = 11;
  const int64_t nx5 = 11 * 3 * 35, ny5 = 11 * 2 * 10 * 21;
  double *x5 = rnd(nx5), *r5 = rnd(ny5), *ref[2] = {NULL, NULL};
  for (int nth = 1; nth <= 3; ++nth) {
    omp_set_num_threads(nth);
    double *dx5 = zeros(nx5), *dw5 = zeros(c.nw);
    SG_CHECK_OK(
        sg_convt_backward(&d5, SG_DTYPE_F64, x5, c.w, r5, dx5, dw5, NULL));
    if (nth == 1) {
      ref[0] = dx5;
      ref[1] = dw5;
      continue;
    }
    SG_CHECK(memcmp(ref[0], dx5, (size_t)nx5 * sizeof(double)) == 0,
             "convt dx at %d threads: not the bits of 1 thread", nth);
    SG_CHECK(memcmp(ref[1], dw5, (size_t)c.nw * sizeof(double)) == 0,
             "convt dw at %d threads: not the bits of 1 thread", nth);
    free(dx5);
    free(dw5);
  }
  omp_set_num_threads(1);
  free(ref[0]);
  free(ref[1]);
  free(x5);
  free(r5);
  free(y);
  free(yref);
  free(dx);
  free(dw);
  free(db);
  free(c.x);
  free(c.w);
  free(c.b);
  free(c.r);
}

/* ---- pooling ------------------------------------------------------------ */

typedef struct pool_case {
  sg_pool_kind kind;
  sg_conv_desc d;
  int64_t nx, ny;
  double *x, *r;
} pool_case;

static double pool_loss(void *ctx) {
  pool_case *c = ctx;
  double *y = zeros(c->ny);
  sg_pool_forward(c->kind, &c->d, SG_DTYPE_F64, c->x, y);
  double l = dot(y, c->r, c->ny);
  free(y);
  return l;
}

static void test_pool_case(const char *name, sg_pool_kind kind,
                           sg_conv_desc d) {
  pool_case c = {.kind = kind, .d = d};
  int64_t out[3] = {1, 1, 1}, in[3] = {1, 1, 1}, k[3] = {1, 1, 1},
          s[3] = {1, 1, 1}, dl[3] = {1, 1, 1};
  SG_CHECK_OK(sg_pool_out_shape(&d, out + 3 - d.nsp));
  for (int i = 0; i < d.nsp; ++i) {
    in[3 - d.nsp + i] = d.in[i];
    k[3 - d.nsp + i] = d.kernel[i];
    s[3 - d.nsp + i] = d.stride[i];
    dl[3 - d.nsp + i] = d.dilation[i];
  }
  int64_t planes = d.batch * d.cin;
  c.nx = planes * prod(in, 3);
  c.ny = planes * prod(out, 3);
  c.x = rnd(c.nx);
  c.r = rnd(c.ny);
  double *y = zeros(c.ny), *yref = zeros(c.ny);
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t o0 = 0; o0 < out[0]; ++o0)
      for (int64_t o1 = 0; o1 < out[1]; ++o1)
        for (int64_t o2 = 0; o2 < out[2]; ++o2) {
          double acc = kind == SG_POOL_MAX ? -INFINITY : 0;
          for (int64_t a = 0; a < k[0]; ++a)
            for (int64_t b = 0; b < k[1]; ++b)
              for (int64_t e = 0; e < k[2]; ++e) {
                double v = c.x[((p * in[0] + o0 * s[0] + a * dl[0]) * in[1] +
                                o1 * s[1] + b * dl[1]) *
                                   in[2] +
                               o2 * s[2] + e * dl[2]];
                acc = kind == SG_POOL_MAX ? fmax(acc, v) : acc + v;
              }
          yref[((p * out[0] + o0) * out[1] + o1) * out[2] + o2] =
              kind == SG_POOL_MAX ? acc : acc / (double)prod(k, 3);
        }
  SG_CHECK_OK(sg_pool_forward(kind, &d, SG_DTYPE_F64, c.x, y));
  SG_CHECK(sg_test_cmp_f64(name, y, yref, c.ny, 1e-14, 1e-14) == 0,
           "%s forward", name);
  float *xf = to_f32(c.x, c.nx), *yf = malloc((size_t)c.ny * sizeof *yf),
        *yrf = to_f32(yref, c.ny);
  SG_CHECK_OK(sg_pool_forward(kind, &d, SG_DTYPE_F32, xf, yf));
  SG_CHECK(sg_test_cmp_f32(name, yf, yrf, c.ny, 1e-6, 1e-6) == 0,
           "%s f32 forward", name);
  double *dx = rnd(c.nx);
  SG_CHECK_OK(sg_pool_backward(kind, &d, SG_DTYPE_F64, c.x, c.r, dx));
  check_fd(name, pool_loss, &c, c.x, dx, c.nx, 1e-6);
  free(y);
  free(yref);
  free(xf);
  free(yf);
  free(yrf);
  free(dx);
  free(c.x);
  free(c.r);
}

static void test_pool(void) {
  for (int kind = 0; kind < 2; ++kind) {
    const char *nm = kind ? "maxpool" : "avgpool";
    char name[64];
    sg_conv_desc a = {.nsp = 2,
                      .batch = 2,
                      .cin = 3,
                      .in = {8, 6},
                      .kernel = {2, 2},
                      .stride = {2, 2},
                      .dilation = {1, 1}};
    snprintf(name, sizeof name, "%s 2d k=s", nm);
    test_pool_case(name, (sg_pool_kind)kind, a);
    sg_conv_desc b = {.nsp = 2,
                      .batch = 1,
                      .cin = 2,
                      .in = {11, 9},
                      .kernel = {3, 3},
                      .stride = {2, 2},
                      .dilation = {1, 1}};
    snprintf(name, sizeof name, "%s 2d k3 s2 odd", nm);
    test_pool_case(name, (sg_pool_kind)kind, b);
    sg_conv_desc c1 = {.nsp = 1,
                       .batch = 2,
                       .cin = 2,
                       .in = {13},
                       .kernel = {3},
                       .stride = {2},
                       .dilation = {1}};
    snprintf(name, sizeof name, "%s 1d", nm);
    test_pool_case(name, (sg_pool_kind)kind, c1);
    sg_conv_desc c3 = {.nsp = 3,
                       .batch = 1,
                       .cin = 2,
                       .in = {5, 6, 7},
                       .kernel = {2, 3, 2},
                       .stride = {1, 3, 2},
                       .dilation = {1, 1, 1}};
    snprintf(name, sizeof name, "%s 3d", nm);
    test_pool_case(name, (sg_pool_kind)kind, c3);
  }
  /* dilation 2 (once "not supported"): forward against the direct loops,
   * backward against finite differences in f64 */
  for (int kind = 0; kind < 2; ++kind) {
    const char *nm = kind ? "maxpool" : "avgpool";
    char name[64];
    sg_conv_desc d1 = {.nsp = 1,
                       .batch = 2,
                       .cin = 2,
                       .in = {13},
                       .kernel = {3},
                       .stride = {1},
                       .dilation = {2}};
    snprintf(name, sizeof name, "%s 1d d2", nm);
    test_pool_case(name, (sg_pool_kind)kind, d1);
    sg_conv_desc d2 = {.nsp = 2,
                       .batch = 1,
                       .cin = 3,
                       .in = {11, 10},
                       .kernel = {3, 2},
                       .stride = {2, 1},
                       .dilation = {2, 3}};
    snprintf(name, sizeof name, "%s 2d d(2,3) s(2,1)", nm);
    test_pool_case(name, (sg_pool_kind)kind, d2);
    sg_conv_desc d3 = {.nsp = 3,
                       .batch = 1,
                       .cin = 2,
                       .in = {7, 6, 9},
                       .kernel = {2, 2, 3},
                       .stride = {1, 2, 2},
                       .dilation = {2, 1, 2}};
    snprintf(name, sizeof name, "%s 3d d2", nm);
    test_pool_case(name, (sg_pool_kind)kind, d3);
  }
  /* a window wider than the block is refused */
  sg_conv_desc wide = {.nsp = 1,
                       .batch = 1,
                       .cin = 1,
                       .in = {4},
                       .kernel = {3},
                       .stride = {1},
                       .dilation = {2}};
  double buf[16] = {0};
  SG_CHECK_STATUS(sg_pool_forward(SG_POOL_MAX, &wide, SG_DTYPE_F64, buf, buf),
                  SG_ERR_SHAPE);
}

/* Max pooling with zero padding on one process: pad, fill the padding with
 * -inf (sg_pad_fill_outside), pool; against a hand-written loop over the
 * unpadded input that skips cells outside it (all-negative input: a padded
 * zero would be the maximum of every edge window). The fill touches only
 * zero-mode dims. */
static void test_pool_neg_inf(void) {
  const int64_t in[2] = {6, 5}, pad[2][2] = {{2, 2}, {1, 1}}, pin[2] = {10, 7};
  const sg_pad_mode zz[2] = {SG_PAD_ZERO, SG_PAD_ZERO},
                    zr[2] = {SG_PAD_ZERO, SG_PAD_REPLICATE};
  const int64_t origin[2] = {-2, -1};
  double x[2 * 30], xp[2 * 70], y[2 * 70], yref[2 * 70];
  for (int i = 0; i < 60; ++i) x[i] = -1.5 + 0.5 * urand();
  /* k (3, 2), stride 1, dilation (2, 3): out (6, 4) */
  sg_conv_desc d = {.nsp = 2,
                    .batch = 2,
                    .cin = 1,
                    .in = {10, 7},
                    .kernel = {3, 2},
                    .stride = {1, 1},
                    .dilation = {2, 3}};
  int64_t out[2];
  SG_CHECK_OK(sg_pool_out_shape(&d, out));
  SG_CHECK(out[0] == 6 && out[1] == 4, "pool out shape %lld x %lld",
           (long long)out[0], (long long)out[1]);
  SG_CHECK_OK(sg_pad_forward(SG_DTYPE_F64, 2, 2, in, pad, zz, x, xp));
  SG_CHECK_OK(sg_pad_fill_outside(SG_DTYPE_F64, 2, 2, pin, origin, in, zz,
                                  -INFINITY, xp));
  SG_CHECK_OK(sg_pool_forward(SG_POOL_MAX, &d, SG_DTYPE_F64, xp, y));
  int64_t zeros_seen = 0;
  for (int p = 0; p < 2; ++p)
    for (int64_t o0 = 0; o0 < out[0]; ++o0)
      for (int64_t o1 = 0; o1 < out[1]; ++o1) {
        double m = -INFINITY;
        for (int a = 0; a < 3; ++a)
          for (int b = 0; b < 2; ++b) {
            int64_t i0 = o0 - 2 + 2 * a, i1 = o1 - 1 + 3 * b;
            if (i0 >= 0 && i0 < in[0] && i1 >= 0 && i1 < in[1])
              m = fmax(m, x[(p * in[0] + i0) * in[1] + i1]);
          }
        int64_t o = (p * out[0] + o0) * out[1] + o1;
        yref[o] = m;
        zeros_seen += y[o] == 0;
      }
  SG_CHECK(sg_test_cmp_f64("maxpool -inf padding", y, yref, 2 * out[0] * out[1],
                           0, 0) == 0,
           "max pooling with zero padding pads with -inf");
  SG_CHECK(zeros_seen == 0,
           "%lld padded zeros in the max pooling of a negative input",
           (long long)zeros_seen);
  /* a replicate dim keeps its data; the zero dim gets -inf */
  SG_CHECK_OK(sg_pad_forward(SG_DTYPE_F64, 2, 2, in, pad, zr, x, xp));
  memcpy(y, xp, sizeof(double) * 2 * 70);
  SG_CHECK_OK(sg_pad_fill_outside(SG_DTYPE_F64, 2, 2, pin, origin, in, zr,
                                  -INFINITY, xp));
  int64_t bad = 0;
  for (int64_t i = 0; i < 2 * 70; ++i) {
    int64_t i0 = (i / 7) % 10;
    int outside = i0 < 2 || i0 >= 8;
    bad += outside ? xp[i] != -INFINITY : xp[i] != y[i];
  }
  SG_CHECK(bad == 0,
           "fill outside: %lld cells wrong (zero dim -inf, replicate dim kept)",
           (long long)bad);
}

/* ---- padding ------------------------------------------------------------ */

static void test_pad(void) {
  const int64_t in[3] = {4, 5, 3}, pad[3][2] = {{2, 1}, {3, 4}, {1, 2}};
  const int64_t planes = 2;
  int64_t out[3];
  for (int i = 0; i < 3; ++i) out[i] = in[i] + pad[i][0] + pad[i][1];
  for (int mode = 0; mode < 4; ++mode) {
    sg_pad_mode m[3] = {(sg_pad_mode)mode, (sg_pad_mode)mode,
                        (sg_pad_mode)mode};
    if (mode == SG_PAD_REFLECT)
      m[2] = SG_PAD_PERIODIC; /* reflect needs pad < 3 */
    int64_t nx = planes * prod(in, 3), ny = planes * prod(out, 3);
    double *x = rnd(nx), *y = zeros(ny), *yref = zeros(ny);
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t a = 0; a < out[0]; ++a)
        for (int64_t b = 0; b < out[1]; ++b)
          for (int64_t c = 0; c < out[2]; ++c) {
            int64_t o[3] = {a, b, c}, src[3];
            int zero = 0;
            for (int d = 0; d < 3; ++d) {
              int64_t i = o[d] - pad[d][0], n = in[d];
              switch (m[d]) {
              case SG_PAD_ZERO:
                zero |= i < 0 || i >= n;
                src[d] = i;
                break;
              case SG_PAD_PERIODIC: src[d] = ((i % n) + n) % n; break;
              case SG_PAD_REFLECT:
                src[d] = i < 0 ? -i : (i >= n ? 2 * (n - 1) - i : i);
                break;
              default: src[d] = i < 0 ? 0 : (i >= n ? n - 1 : i); break;
              }
            }
            yref[((p * out[0] + a) * out[1] + b) * out[2] + c] =
                zero ? 0
                     : x[((p * in[0] + src[0]) * in[1] + src[1]) * in[2] +
                         src[2]];
          }
    SG_CHECK_OK(sg_pad_forward(SG_DTYPE_F64, 3, planes, in, pad, m, x, y));
    SG_CHECK(sg_test_cmp_bytes(sg_pad_mode_name((sg_pad_mode)mode), y, yref,
                               (size_t)ny * 8) == 0,
             "pad %s forward", sg_pad_mode_name((sg_pad_mode)mode));
    /* adjoint identity <P x, r> = <x, P^T r> */
    double *r = rnd(ny), *dx = rnd(nx);
    SG_CHECK_OK(sg_pad_backward(SG_DTYPE_F64, 3, planes, in, pad, m, r, dx));
    double lhs = dot(y, r, ny), rhs = dot(x, dx, nx);
    SG_CHECK(fabs(lhs - rhs) <= 1e-12 * (1 + fabs(lhs)),
             "pad %s adjoint %.17g vs %.17g",
             sg_pad_mode_name((sg_pad_mode)mode), lhs, rhs);
    free(x);
    free(y);
    free(yref);
    free(r);
    free(dx);
  }
  /* periodic with a pad wider than the extent */
  const int64_t n1[1] = {3}, p1[1][2] = {{4, 5}};
  sg_pad_mode per = SG_PAD_PERIODIC, refl = SG_PAD_REFLECT;
  double x1[3] = {1, 2, 3}, y1[12],
         e1[12] = {3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2};
  SG_CHECK_OK(sg_pad_forward(SG_DTYPE_F64, 1, 1, n1, p1, &per, x1, y1));
  SG_CHECK(sg_test_cmp_bytes("wide periodic", y1, e1, sizeof e1) == 0,
           "wide periodic pad");
  SG_CHECK_STATUS(sg_pad_forward(SG_DTYPE_F64, 1, 1, n1, p1, &refl, x1, y1),
                  SG_ERR_SHAPE);
}

/* sg_pad_backward in f32 against the zero-filled element loop in padded
 * order (the sums it made before it wrote each row's zeros with its first
 * values): the same bits, every mode, 2-D and 3-D, odd extents, uneven and
 * wide pads (a periodic lo margin wider than the extent: the zero-filled
 * path), signed zeros among the values, dsrc's old contents ignored. */
static void test_pad_bwd_bits(void) {
  static const struct {
    int nsp;
    int64_t in[3], pad[3][2];
  } cases[] = {
      {2, {17, 13}, {{1, 1}, {1, 1}}},          {2, {9, 6}, {{2, 1}, {1, 2}}},
      {3, {4, 5, 7}, {{2, 1}, {3, 4}, {2, 2}}}, {2, {5, 3}, {{1, 2}, {4, 5}}},
      {2, {6, 11}, {{0, 3}, {3, 0}}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c)
    for (int mode = 0; mode < 4; ++mode) {
      const int nsp = cases[c].nsp, off = 3 - nsp;
      int64_t in3[3] = {1, 1, 1}, out3[3] = {1, 1, 1}, lo3[3] = {0, 0, 0};
      sg_pad_mode m[3];
      int ok = 1;
      for (int d = 0; d < nsp; ++d) {
        m[d] = (sg_pad_mode)mode;
        in3[off + d] = cases[c].in[d];
        lo3[off + d] = cases[c].pad[d][0];
        out3[off + d] = cases[c].in[d] + cases[c].pad[d][0] +
                        cases[c].pad[d][1];
        if (mode == SG_PAD_REFLECT && (cases[c].pad[d][0] >= cases[c].in[d] ||
                                       cases[c].pad[d][1] >= cases[c].in[d]))
          ok = 0;
      }
      if (!ok) continue;
      const int64_t planes = 3, sin = in3[0] * in3[1] * in3[2],
                    sout = out3[0] * out3[1] * out3[2];
      double *rd = rnd(planes * sout);
      float *r = to_f32(rd, planes * sout), *dx = malloc(planes * sin * 4),
            *ref = malloc(planes * sin * 4);
      for (int64_t i = 0; i < planes * sout; i += 7) r[i] = -0.0f;
      for (int64_t i = 0; i < planes * sin; ++i) dx[i] = NAN;
      for (int64_t p = 0; p < planes; ++p) {
        for (int64_t i = 0; i < sin; ++i) ref[p * sin + i] = 0;
        for (int64_t a = 0; a < out3[0]; ++a)
          for (int64_t b = 0; b < out3[1]; ++b)
            for (int64_t e = 0; e < out3[2]; ++e) {
              const int64_t o[3] = {a, b, e};
              int64_t src = 0, zero = 0;
              for (int d = 0; d < 3; ++d) {
                const int64_t i = o[d] - lo3[d], n = in3[d];
                int64_t k;
                switch (d < off ? SG_PAD_PERIODIC : m[d - off]) {
                case SG_PAD_ZERO:
                  zero |= i < 0 || i >= n;
                  k = i;
                  break;
                case SG_PAD_PERIODIC: k = ((i % n) + n) % n; break;
                case SG_PAD_REFLECT:
                  k = i < 0 ? -i : (i >= n ? 2 * (n - 1) - i : i);
                  break;
                default: k = i < 0 ? 0 : (i >= n ? n - 1 : i); break;
                }
                src = src * n + k;
              }
              if (!zero)
                ref[p * sin + src] +=
                    r[p * sout + (a * out3[1] + b) * out3[2] + e];
            }
      }
      SG_CHECK_OK(sg_pad_backward(SG_DTYPE_F32, nsp, planes, cases[c].in,
                                  cases[c].pad, m, r, dx));
      SG_CHECK(memcmp(dx, ref, (size_t)(planes * sin) * sizeof(float)) == 0,
               "pad backward %zu %s: the bits of the zero-filled loop", c,
               sg_pad_mode_name((sg_pad_mode)mode));
      free(rd);
      free(r);
      free(dx);
      free(ref);
    }
}

/* ---- up-sampling -------------------------------------------------------- */

typedef struct up_case {
  sg_upsample_kind kind;
  int nsp;
  int64_t planes, in[3], scale[3], nx, ny;
  double *x, *r;
} up_case;

static double up_loss(void *ctx) {
  up_case *c = ctx;
  double *y = zeros(c->ny);
  sg_upsample_forward(c->kind, c->nsp, c->planes, c->in, c->scale, SG_DTYPE_F64,
                      c->x, y);
  double l = dot(y, c->r, c->ny);
  free(y);
  return l;
}

/* PyTorch's align_corners=False linear weights on the UNPADDED input. */
static void torch_src(int64_t o, int64_t s, int64_t n, int64_t *i0, int64_t *i1,
                      double *l) {
  double src = ((double)o + 0.5) / (double)s - 0.5;
  if (src < 0) src = 0;
  *i0 = (int64_t)floor(src);
  if (*i0 > n - 1) *i0 = n - 1;
  *i1 = *i0 + 1 < n ? *i0 + 1 : n - 1;
  *l = src - (double)*i0;
}

static void test_upsample_case(const char *name, sg_upsample_kind kind, int nsp,
                               const int64_t *raw, const int64_t *scale) {
  up_case c = {.kind = kind, .nsp = nsp, .planes = 3};
  int64_t r3[3] = {1, 1, 1}, s3[3] = {1, 1, 1}, o3[3] = {1, 1, 1};
  int lin = kind == SG_UPSAMPLE_LINEAR;
  for (int i = 0; i < nsp; ++i) {
    c.in[i] = raw[i] + (lin ? 2 : 0);
    c.scale[i] = scale[i];
    r3[3 - nsp + i] = raw[i];
    s3[3 - nsp + i] = scale[i];
    o3[3 - nsp + i] = raw[i] * scale[i];
  }
  int64_t nraw = c.planes * prod(r3, 3);
  c.nx = c.planes * prod(c.in, nsp);
  c.ny = c.planes * prod(o3, 3);
  double *xr = rnd(nraw);
  c.x = zeros(c.nx);
  c.r = rnd(c.ny);
  if (lin) {
    int64_t pad[3][2] = {{1, 1}, {1, 1}, {1, 1}};
    sg_pad_mode m[3] = {SG_PAD_REPLICATE, SG_PAD_REPLICATE, SG_PAD_REPLICATE};
    SG_CHECK_OK(sg_pad_forward(SG_DTYPE_F64, nsp, c.planes, raw,
                               (const int64_t(*)[2])pad, m, xr, c.x));
  } else {
    memcpy(c.x, xr, (size_t)nraw * 8);
  }
  double *y = zeros(c.ny), *yref = zeros(c.ny);
  for (int64_t p = 0; p < c.planes; ++p)
    for (int64_t a = 0; a < o3[0]; ++a)
      for (int64_t b = 0; b < o3[1]; ++b)
        for (int64_t e = 0; e < o3[2]; ++e) {
          int64_t o[3] = {a, b, e}, i0[3], i1[3];
          double l[3];
          for (int d = 0; d < 3; ++d) {
            if (lin) {
              torch_src(o[d], s3[d], r3[d], &i0[d], &i1[d], &l[d]);
            } else {
              i0[d] = i1[d] = o[d] / s3[d];
              l[d] = 0;
            }
          }
          double v = 0;
          for (int corner = 0; corner < 8; ++corner) {
            double wgt = 1;
            int64_t idx[3];
            for (int d = 0; d < 3; ++d) {
              int hi = (corner >> d) & 1;
              wgt *= hi ? l[d] : 1 - l[d];
              idx[d] = hi ? i1[d] : i0[d];
            }
            v += wgt *
                 xr[((p * r3[0] + idx[0]) * r3[1] + idx[1]) * r3[2] + idx[2]];
          }
          yref[((p * o3[0] + a) * o3[1] + b) * o3[2] + e] = v;
        }
  SG_CHECK_OK(sg_upsample_forward(kind, nsp, c.planes, c.in, c.scale,
                                  SG_DTYPE_F64, c.x, y));
  SG_CHECK(sg_test_cmp_f64(name, y, yref, c.ny, 1e-13, 1e-13) == 0,
           "%s forward", name);
  float *xf = to_f32(c.x, c.nx), *yf = malloc((size_t)c.ny * sizeof *yf),
        *yrf = to_f32(yref, c.ny);
  SG_CHECK_OK(sg_upsample_forward(kind, nsp, c.planes, c.in, c.scale,
                                  SG_DTYPE_F32, xf, yf));
  SG_CHECK(sg_test_cmp_f32(name, yf, yrf, c.ny, 1e-5, 1e-6) == 0,
           "%s f32 forward", name);
  double *dx = rnd(c.nx);
  SG_CHECK_OK(sg_upsample_backward(kind, nsp, c.planes, c.in, c.scale,
                                   SG_DTYPE_F64, c.r, dx));
  check_fd(name, up_loss, &c, c.x, dx, c.nx, 1e-6);
  free(xr);
  free(y);
  free(yref);
  free(xf);
  free(yf);
  free(yrf);
  free(dx);
  free(c.x);
  free(c.r);
}

static void test_upsample(void) {
  const int64_t r1[1] = {7}, s1[1] = {3};
  const int64_t r2[2] = {5, 4}, s2[2] = {2, 3};
  const int64_t r3[3] = {3, 4, 3}, s3[3] = {2, 2, 3};
  test_upsample_case("nearest 1d", SG_UPSAMPLE_NEAREST, 1, r1, s1);
  test_upsample_case("nearest 2d", SG_UPSAMPLE_NEAREST, 2, r2, s2);
  test_upsample_case("nearest 3d", SG_UPSAMPLE_NEAREST, 3, r3, s3);
  test_upsample_case("linear 1d", SG_UPSAMPLE_LINEAR, 1, r1, s1);
  test_upsample_case("bilinear 2d", SG_UPSAMPLE_LINEAR, 2, r2, s2);
  test_upsample_case("trilinear 3d", SG_UPSAMPLE_LINEAR, 3, r3, s3);
}

/* ---- pointwise ---------------------------------------------------------- */

typedef struct pw_case {
  int kind; /* 0..3 act, 10+op binary, 20 scale, 21 bias */
  int64_t n, nb, c, s;
  double *a, *b, *r;
} pw_case;

static double pw_loss(void *ctx) {
  pw_case *c = ctx;
  double *y = zeros(c->n);
  if (c->kind < 10)
    sg_act_forward((sg_act)c->kind, SG_DTYPE_F64, c->n, c->a, y);
  else if (c->kind < 20)
    sg_binary_forward((sg_binary)(c->kind - 10), SG_DTYPE_F64, c->n, c->a, c->b,
                      y);
  else if (c->kind == 20)
    sg_scale(SG_DTYPE_F64, c->n, -1.75, c->a, y);
  else
    sg_bias_forward(SG_DTYPE_F64, c->nb, c->c, c->s, c->a, c->b, y);
  double l = dot(y, c->r, c->n);
  free(y);
  return l;
}

static void test_pointwise(void) {
  const int64_t n = 301;
  for (int act = 0; act < SG_ACT_COUNT; ++act) {
    pw_case c = {.kind = act, .n = n};
    c.a = rnd(n);
    c.r = rnd(n);
    for (int64_t i = 0; i < n; ++i) c.a[i] *= 3;
    /* far tails (the clamps of the f32 exp) */
    c.a[7] = -60, c.a[8] = -9.5, c.a[9] = 9.5, c.a[10] = 60, c.a[11] = -1e4,
    c.a[12] = 1e4;
    if (act == SG_ACT_RELU)
      for (int64_t i = 0; i < n; ++i)
        if (fabs(c.a[i]) < 1e-3) c.a[i] = 0.5; /* keep FD away from the kink */
    double *y = zeros(n), *ref = zeros(n), *dx = rnd(n);
    for (int64_t i = 0; i < n; ++i) {
      double x = c.a[i];
      ref[i] = act == 0   ? fmax(x, 0)
               : act == 1 ? 0.5 * x *
                                (1 + tanh(0.7978845608028654 *
                                          (x + 0.044715 * x * x * x)))
               : act == 2 ? x / (1 + exp(-x))
                          : tanh(x);
    }
    SG_CHECK_OK(sg_act_forward((sg_act)act, SG_DTYPE_F64, n, c.a, y));
    SG_CHECK(sg_test_cmp_f64(sg_act_name((sg_act)act), y, ref, n, 1e-14,
                             1e-15) == 0,
             "%s forward", sg_act_name((sg_act)act));
    float *af = to_f32(c.a, n), *yf = malloc(n * sizeof *yf),
          *rf = to_f32(ref, n);
    SG_CHECK_OK(sg_act_forward((sg_act)act, SG_DTYPE_F32, n, af, yf));
    SG_CHECK(sg_test_cmp_f32(sg_act_name((sg_act)act), yf, rf, n, 1e-5, 1e-6) ==
                 0,
             "%s f32 forward", sg_act_name((sg_act)act));
    SG_CHECK_OK(sg_act_backward((sg_act)act, SG_DTYPE_F64, n, c.a, c.r, dx));
    check_fd(sg_act_name((sg_act)act), pw_loss, &c, c.a, dx, n, 1e-6);
    { /* f32 backward against f64 */
      float *rf32 = to_f32(c.r, n), *dxf = malloc(n * sizeof *dxf),
            *dxr = to_f32(dx, n);
      SG_CHECK_OK(sg_act_backward((sg_act)act, SG_DTYPE_F32, n, af, rf32, dxf));
      SG_CHECK(sg_test_cmp_f32(sg_act_name((sg_act)act), dxf, dxr, n, 1e-5,
                               1e-6) == 0,
               "%s f32 backward", sg_act_name((sg_act)act));
      free(rf32);
      free(dxf);
      free(dxr);
    }
    /* in place */
    memcpy(y, c.a, n * 8);
    SG_CHECK_OK(sg_act_forward((sg_act)act, SG_DTYPE_F64, n, y, y));
    SG_CHECK(sg_test_cmp_f64("in place", y, ref, n, 1e-14, 1e-15) == 0,
             "%s in place", sg_act_name((sg_act)act));
    free(c.a);
    free(c.r);
    free(y);
    free(ref);
    free(dx);
    free(af);
    free(yf);
    free(rf);
  }
  for (int op = 0; op < 3; ++op) {
    pw_case c = {.kind = 10 + op, .n = n};
    c.a = rnd(n);
    c.b = rnd(n);
    c.r = rnd(n);
    double *y = zeros(n), *da = rnd(n), *db = rnd(n);
    SG_CHECK_OK(sg_binary_forward((sg_binary)op, SG_DTYPE_F64, n, c.a, c.b, y));
    int ok = 1;
    for (int64_t i = 0; i < n; ++i) {
      double e = op == 0   ? c.a[i] + c.b[i]
                 : op == 1 ? c.a[i] - c.b[i]
                           : c.a[i] * c.b[i];
      ok &= y[i] == e;
    }
    SG_CHECK(ok, "binary %d forward bitwise", op);
    SG_CHECK_OK(sg_binary_backward((sg_binary)op, SG_DTYPE_F64, n, c.a, c.b,
                                   c.r, da, db));
    check_fd("binary da", pw_loss, &c, c.a, da, n, 1e-6);
    check_fd("binary db", pw_loss, &c, c.b, db, n, 1e-6);
    free(c.a);
    free(c.b);
    free(c.r);
    free(y);
    free(da);
    free(db);
  }
  {
    pw_case c = {.kind = 20, .n = n};
    c.a = rnd(n);
    c.r = rnd(n);
    double *dx = zeros(n);
    SG_CHECK_OK(sg_scale(SG_DTYPE_F64, n, -1.75, c.r, dx));
    check_fd("scale", pw_loss, &c, c.a, dx, n, 1e-6);
    free(c.a);
    free(c.r);
    free(dx);
  }
  {
    pw_case c = {.kind = 21, .nb = 3, .c = 4, .s = 7};
    c.n = 3 * 4 * 7;
    c.a = rnd(c.n);
    c.b = rnd(4);
    c.r = rnd(c.n);
    double *db = zeros(4);
    for (int i = 0; i < 4; ++i) db[i] = 5;
    SG_CHECK_OK(sg_bias_backward(SG_DTYPE_F64, 3, 4, 7, c.r, db));
    for (int i = 0; i < 4; ++i) db[i] -= 5;
    check_fd("bias db", pw_loss, &c, c.b, db, 4, 1e-6);
    free(c.a);
    free(c.b);
    free(c.r);
    free(db);
  }
  /* concat / split round trip, bit for bit */
  const int64_t ch[3] = {2, 1, 3}, nb = 2, sp = 5;
  double *p0 = rnd(nb * 2 * sp), *p1 = rnd(nb * 1 * sp), *p2 = rnd(nb * 3 * sp);
  double *whole = zeros(nb * 6 * sp);
  const void *parts[3] = {p0, p1, p2};
  SG_CHECK_OK(sg_concat(SG_DTYPE_F64, nb, sp, 3, ch, parts, whole));
  SG_CHECK(whole[(1 * 6 + 2) * sp + 4] == p1[(1 * 1 + 0) * sp + 4] &&
               whole[(1 * 6 + 5) * sp + 0] == p2[(1 * 3 + 2) * sp + 0],
           "concat places channels");
  double *q0 = zeros(nb * 2 * sp), *q1 = zeros(nb * sp),
         *q2 = zeros(nb * 3 * sp);
  void *outs[3] = {q0, q1, q2};
  SG_CHECK_OK(sg_split(SG_DTYPE_F64, nb, sp, 3, ch, whole, outs));
  SG_CHECK(memcmp(p0, q0, nb * 2 * sp * 8) == 0 &&
               memcmp(p1, q1, nb * sp * 8) == 0 &&
               memcmp(p2, q2, nb * 3 * sp * 8) == 0,
           "split inverts concat");
  free(p0);
  free(p1);
  free(p2);
  free(whole);
  free(q0);
  free(q1);
  free(q2);
}

/* ---- normalisation ------------------------------------------------------ */

typedef struct norm_case {
  sg_norm_desc d;
  int64_t n, nstat;
  double *x, *gamma, *beta, *r;
} norm_case;

static double norm_loss(void *ctx) {
  norm_case *c = ctx;
  sg_moments *st = calloc((size_t)c->nstat, sizeof *st);
  double *y = zeros(c->n);
  sg_norm_stats(&c->d, SG_DTYPE_F64, c->x, st);
  sg_norm_forward(&c->d, SG_DTYPE_F64, c->x, st, c->gamma, c->beta, y);
  double l = dot(y, c->r, c->n);
  free(st);
  free(y);
  return l;
}

static void test_norm_case(const char *name, sg_norm_desc d) {
  norm_case c = {.d = d};
  c.n = d.batch * d.channels * d.spatial;
  SG_CHECK_OK(sg_norm_nstat(&d, &c.nstat));
  c.x = rnd(c.n);
  c.gamma = rnd(d.channels);
  c.beta = rnd(d.channels);
  c.r = rnd(c.n);
  for (int64_t i = 0; i < c.n; ++i) c.x[i] = 3 * c.x[i] + 1.5;
  sg_moments *st = calloc((size_t)c.nstat, sizeof *st);
  SG_CHECK_OK(sg_norm_stats(&d, SG_DTYPE_F64, c.x, st));
  /* naive two-pass reference per group */
  double *y = zeros(c.n), *yref = zeros(c.n), *cnt = zeros(c.nstat),
         *mean = zeros(c.nstat), *var = zeros(c.nstat);
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t n = 0; n < d.batch; ++n)
      for (int64_t k = 0; k < d.channels; ++k)
        for (int64_t s = 0; s < d.spatial; ++s) {
          int64_t g = d.kind == SG_NORM_BATCH      ? k
                      : d.kind == SG_NORM_INSTANCE ? n * d.channels + k
                      : d.kind == SG_NORM_GROUP
                          ? n * d.groups + k / (d.channels / d.groups)
                          : n * d.spatial + s;
          double v = c.x[(n * d.channels + k) * d.spatial + s];
          if (pass == 0) {
            cnt[g] += 1;
            mean[g] += v;
          } else {
            double m = mean[g] / cnt[g];
            var[g] += (v - m) * (v - m);
          }
        }
  int ok = 1;
  for (int64_t g = 0; g < c.nstat; ++g)
    ok &= st[g].count == cnt[g] &&
          fabs(st[g].mean - mean[g] / cnt[g]) < 1e-12 &&
          fabs(st[g].m2 - var[g]) < 1e-10 * (1 + var[g]);
  SG_CHECK(ok, "%s: statistics", name);
  for (int64_t n = 0; n < d.batch; ++n)
    for (int64_t k = 0; k < d.channels; ++k)
      for (int64_t s = 0; s < d.spatial; ++s) {
        int64_t g = d.kind == SG_NORM_BATCH      ? k
                    : d.kind == SG_NORM_INSTANCE ? n * d.channels + k
                    : d.kind == SG_NORM_GROUP
                        ? n * d.groups + k / (d.channels / d.groups)
                        : n * d.spatial + s;
        int64_t i = (n * d.channels + k) * d.spatial + s;
        yref[i] = (c.x[i] - mean[g] / cnt[g]) / sqrt(var[g] / cnt[g] + d.eps) *
                      c.gamma[k] +
                  c.beta[k];
      }
  SG_CHECK_OK(sg_norm_forward(&d, SG_DTYPE_F64, c.x, st, c.gamma, c.beta, y));
  SG_CHECK(sg_test_cmp_f64(name, y, yref, c.n, 1e-11, 1e-11) == 0, "%s forward",
           name);
  /* merge: statistics of two halves (split along the last dim that the
   * kind reduces over) merged with Chan's formula equal the whole */
  if (d.kind != SG_NORM_LAYER && d.spatial >= 2) {
    int64_t h = d.spatial / 2;
    sg_norm_desc d1 = d, d2 = d;
    d1.spatial = h;
    d2.spatial = d.spatial - h;
    double *x1 = zeros(d.batch * d.channels * h),
           *x2 = zeros(d.batch * d.channels * (d.spatial - h));
    for (int64_t p = 0; p < d.batch * d.channels; ++p) {
      memcpy(x1 + p * h, c.x + p * d.spatial, (size_t)h * 8);
      memcpy(x2 + p * (d.spatial - h), c.x + p * d.spatial + h,
             (size_t)(d.spatial - h) * 8);
    }
    sg_moments *s1 = calloc((size_t)c.nstat, sizeof *s1),
               *s2 = calloc((size_t)c.nstat, sizeof *s2);
    SG_CHECK_OK(sg_norm_stats(&d1, SG_DTYPE_F64, x1, s1));
    SG_CHECK_OK(sg_norm_stats(&d2, SG_DTYPE_F64, x2, s2));
    sg_moments_merge(s1, s2, c.nstat);
    ok = 1;
    for (int64_t g = 0; g < c.nstat; ++g)
      ok &= s1[g].count == st[g].count &&
            fabs(s1[g].mean - st[g].mean) < 1e-12 &&
            fabs(s1[g].m2 - st[g].m2) < 1e-10 * (1 + st[g].m2);
    SG_CHECK(ok, "%s: Chan merge of halves", name);
    free(x1);
    free(x2);
    free(s1);
    free(s2);
  }
  /* backward */
  double *sums = zeros(2 * c.nstat), *dx = rnd(c.n), *dg = zeros(d.channels),
         *dbt = zeros(d.channels);
  SG_CHECK_OK(
      sg_norm_backward_sums(&d, SG_DTYPE_F64, c.x, st, c.gamma, c.r, sums));
  SG_CHECK_OK(sg_norm_backward(&d, SG_DTYPE_F64, c.x, st, c.gamma, c.r, sums,
                               dx, dg, dbt));
  check_fd(name, norm_loss, &c, c.x, dx, c.n, 1e-5);
  check_fd(name, norm_loss, &c, c.gamma, dg, d.channels, 1e-6);
  check_fd(name, norm_loss, &c, c.beta, dbt, d.channels, 1e-6);
  /* f32 against f64 */
  float *xf = to_f32(c.x, c.n), *gf = to_f32(c.gamma, d.channels),
        *bf = to_f32(c.beta, d.channels);
  float *yf = malloc((size_t)c.n * sizeof *yf), *yrf = to_f32(yref, c.n);
  sg_moments *stf = calloc((size_t)c.nstat, sizeof *stf);
  SG_CHECK_OK(sg_norm_stats(&d, SG_DTYPE_F32, xf, stf));
  SG_CHECK_OK(sg_norm_forward(&d, SG_DTYPE_F32, xf, stf, gf, bf, yf));
  SG_CHECK(sg_test_cmp_f32(name, yf, yrf, c.n, 1e-5, 1e-5) == 0,
           "%s f32 forward", name);
  free(st);
  free(y);
  free(yref);
  free(cnt);
  free(mean);
  free(var);
  free(sums);
  free(dx);
  free(dg);
  free(dbt);
  free(xf);
  free(gf);
  free(bf);
  free(yf);
  free(yrf);
  free(stf);
  free(c.x);
  free(c.gamma);
  free(c.beta);
  free(c.r);
}

static void test_norm(void) {
  sg_norm_desc b = {.kind = SG_NORM_BATCH,
                    .batch = 3,
                    .channels = 4,
                    .spatial = 13,
                    .eps = 1e-5};
  test_norm_case("batchnorm", b);
  sg_norm_desc in = {.kind = SG_NORM_INSTANCE,
                     .batch = 2,
                     .channels = 3,
                     .spatial = 17,
                     .eps = 1e-5};
  test_norm_case("instancenorm", in);
  sg_norm_desc gn = {.kind = SG_NORM_GROUP,
                     .batch = 2,
                     .channels = 6,
                     .spatial = 11,
                     .groups = 3,
                     .eps = 1e-5};
  test_norm_case("groupnorm", gn);
  sg_norm_desc ln = {.kind = SG_NORM_LAYER,
                     .batch = 2,
                     .channels = 5,
                     .spatial = 9,
                     .eps = 1e-6};
  test_norm_case("layernorm(channels)", ln);
  /* the LayerNorm kernels walk 64-token blocks and 8-channel groups: two
   * blocks with a partial tail, a partial channel group */
  ln.channels = 11;
  ln.spatial = 70;
  test_norm_case("layernorm(channels, blocks)", ln);
  sg_norm_desc bad = gn;
  bad.groups = 4;
  int64_t ns;
  SG_CHECK_STATUS(sg_norm_nstat(&bad, &ns), SG_ERR_SHAPE);
}

/* ---- losses ------------------------------------------------------------- */

typedef struct loss_case {
  sg_loss_kind kind;
  int64_t batch, n;
  double *p, *t;
} loss_case;

static double loss_value(void *ctx) {
  loss_case *c = ctx;
  double part[16], v = 0;
  sg_loss_partial(c->kind, SG_DTYPE_F64, c->batch, c->n, c->p, c->t, part);
  sg_loss_finish(c->kind, c->batch, part, &v);
  return v;
}

static void test_loss(void) {
  const char *names[] = {"sum", "mean", "mse", "rel_l2"};
  for (int kind = 0; kind < 4; ++kind) {
    loss_case c = {.kind = (sg_loss_kind)kind, .batch = 3, .n = 3 * 5003};
    c.p = rnd(c.n);
    c.t = rnd(c.n);
    double ref = 0, v = 0;
    if (kind == SG_LOSS_REL_L2) {
      for (int64_t b = 0; b < c.batch; ++b) {
        double a = 0, t2 = 0;
        for (int64_t i = b * 5003; i < (b + 1) * 5003; ++i) {
          a += (c.p[i] - c.t[i]) * (c.p[i] - c.t[i]);
          t2 += c.t[i] * c.t[i];
        }
        ref += sqrt(a / t2) / (double)c.batch;
      }
    } else {
      for (int64_t i = 0; i < c.n; ++i)
        ref += kind < 2 ? c.p[i] : (c.p[i] - c.t[i]) * (c.p[i] - c.t[i]);
      if (kind != SG_LOSS_SUM) ref /= (double)c.n;
    }
    v = loss_value(&c);
    SG_CHECK(fabs(v - ref) <= 1e-12 * (1 + fabs(ref)), "%s: %.17g vs %.17g",
             names[kind], v, ref);
    /* partials of two pieces (split along the elements of each item) sum
     * to the whole */
    int64_t np = sg_loss_npartial(c.kind, c.batch);
    double whole[8], a[8], b[8];
    SG_CHECK_OK(
        sg_loss_partial(c.kind, SG_DTYPE_F64, c.batch, c.n, c.p, c.t, whole));
    if (kind != SG_LOSS_REL_L2) {
      SG_CHECK_OK(sg_loss_partial(c.kind, SG_DTYPE_F64, 1, 7000, c.p, c.t, a));
      SG_CHECK_OK(sg_loss_partial(c.kind, SG_DTYPE_F64, 1, c.n - 7000,
                                  c.p + 7000, c.t + 7000, b));
      int ok = 1;
      for (int64_t i = 0; i < np; ++i)
        ok &= fabs(a[i] + b[i] - whole[i]) <= 1e-11 * (1 + fabs(whole[i]));
      SG_CHECK(ok, "%s: partials add up", names[kind]);
    }
    double *dp = rnd(c.n), *dt = rnd(c.n);
    SG_CHECK_OK(sg_loss_backward(c.kind, SG_DTYPE_F64, c.batch, c.n, c.p, c.t,
                                 whole, 1.0, dp,
                                 kind >= SG_LOSS_MSE ? dt : NULL));
    check_fd(names[kind], loss_value, &c, c.p, dp, c.n, 1e-5);
    if (kind >= SG_LOSS_MSE)
      check_fd(names[kind], loss_value, &c, c.t, dt, c.n, 1e-5);
    free(c.p);
    free(c.t);
    free(dp);
    free(dt);
  }
  double z[4] = {0};
  SG_CHECK_STATUS(sg_loss_partial(SG_LOSS_MSE, SG_DTYPE_F64, 3, 4, z, z, z),
                  SG_ERR_SHAPE);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  omp_set_num_threads(1);
  test_conv();
  test_conv_direct();
  test_conv_rows_bits();
  test_simd_dispatch_tier(NULL);
  test_simd_dispatch_tier("avx2");
  test_conv_avx2();
  test_convt();
  test_pool();
  test_pool_neg_inf();
  test_pad();
  test_pad_bwd_bits();
  test_upsample();
  test_pointwise();
  test_linear_act();
  test_linear_head();
  test_norm();
  test_loss();
  return sg_test_finish();
}
