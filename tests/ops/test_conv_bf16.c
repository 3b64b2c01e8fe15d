/* The bf16 convolution (sg_conv_desc.bf16: AMX tiles where the CPU has
 * AMX-BF16, the vdpbf16ps kernel with SG_CONV_BF16=avx512 where it has
 * AVX512_BF16) against scalar references on the same bf16 values:
 *  - y against a scalar f32 loop over the kernel's channel pairs in its
 *    order (per output: pair rows in increasing order, the odd channel's
 *    product added before the even one's), and y, dx, dw against f64 sums.
 *    bf16 products are exact in f32, so only the f32 accumulation differs
 *    from the f64 sum: |err| <= 1e-6 sum |terms| (a sum of up to 2 x 288
 *    terms rounded at 6e-8 each; the observed error is far below);
 *  - x not bf16-valued: every path computes in f32 (the library checks),
 *    so y is off the reference on the rounded x by bf16-sized errors;
 *  - bf16 denormal inputs: the bf16 kernels flush them (y = 0, and dw = 0
 *    from the AMX weight gradient), f32 FMAs do not: proof of which kernel
 *    ran, where the CPU has it (SG_CONV_BF16_DW=0 makes the dw probe fail);
 *  - dw from AMX (its own summation order, not a documented scalar loop,
 *    so a tolerance, not bits): within 1e-6 of sum |terms| of the f64 sum;
 *    (vdpbf16ps matched the pair loop bit for bit on Sapphire Rapids; AMX
 *    sums in its own order);
 *  - SG_SIMD=portable and SG_CONV_BF16=0: the f32 path on the same values,
 *    within the same bound;
 * odd sizes, odd channel counts (a zero channel pads the last pair), 3x3,
 * 1x3 and 5x5 kernels, dilation 2, several tiles, 1 and 2 threads. */
#include "sg_dtype.h"
#include "sg_ops.h"
#include "sg_test.h"

#include <math.h>
#include <omp.h>
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <cpuid.h>
#endif
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float urand(void) { /* xorshift64*, in [-1, 1) */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (float)((double)((rng_state * 2685821657736338717ull) >> 11) /
                     4503599627370496.0 -
                 1.0);
}

static float *rnd(int64_t n, int round) {
  float *p = malloc((size_t)n * sizeof *p);
  for (int64_t i = 0; i < n; ++i) p[i] = urand();
  if (round) sg_round_bf16(p, n);
  return p;
}

static int have_bf16(void) {
  const char *env = getenv("SG_SIMD");
  if (env && !strcmp(env, "portable")) return 0;
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
  return __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bf16");
#else
  return 0;
#endif
}

/* cpuid: AMX-TILE and AMX-BF16 (the library also asks Linux for the tile
 * state; a kernel that refuses it makes the default path f32 and this test
 * fail, as it should be told) */
static int have_amx(void) {
  if (!have_bf16()) return 0;
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
  unsigned a, b, c, d;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1u) &&
         (d >> 24 & 1u);
#else
  return 0;
#endif
}

typedef struct conv_case {
  const char *name;
  sg_conv_desc d;
  int64_t o1, o2;                       /* output extent */
  float *x, *xr, *w, *b, *dy;           /* xr: x rounded to bf16 */
  double *y, *ys, *dx, *dxs, *dw, *dws; /* f64 references, sums of |terms| */
  float *yp;                            /* the scalar pair loop's f32 y */
} conv_case;

#define XI(c, n, ch, i, j) \
  ((((n) * (c)->d.cin + (ch)) * (c)->d.in[0] + (i)) * (c)->d.in[1] + (j))
#define YI(c, n, k, i, j) \
  ((((n) * (c)->d.cout + (k)) * (c)->o1 + (i)) * (c)->o2 + (j))
#define WI(c, k, ch, a, e)                                                   \
  ((((k) * (c)->d.cin + (ch)) * (c)->d.kernel[0] + (a)) * (c)->d.kernel[1] + \
   (e))

/* f64 references of y, dx, dw on the rounded x and their sums of |terms|,
 * and y from f32 sums over channel pairs in the kernel's order. */
static void reference(conv_case *c) {
  const sg_conv_desc *d = &c->d;
  const int64_t d0 = d->dilation[0], d1 = d->dilation[1];
  for (int64_t n = 0; n < d->batch; ++n)
    for (int64_t k = 0; k < d->cout; ++k)
      for (int64_t i = 0; i < c->o1; ++i)
        for (int64_t j = 0; j < c->o2; ++j) {
          const int64_t yi = YI(c, n, k, i, j);
          float acc = c->b[k];
          c->y[yi] = c->b[k];
          c->ys[yi] = fabs(c->b[k]);
          for (int64_t ch2 = 0; ch2 < d->cin; ch2 += 2)
            for (int64_t a = 0; a < d->kernel[0]; ++a)
              for (int64_t e = 0; e < d->kernel[1]; ++e)
                for (int64_t h = 1; h >= 0; --h) {
                  const int64_t ch = ch2 + h;
                  if (ch >= d->cin) continue;
                  const int64_t xi = XI(c, n, ch, i + a * d0, j + e * d1);
                  const int64_t wi = WI(c, k, ch, a, e);
                  const double t = (double)c->w[wi] * c->xr[xi];
                  const double g = (double)c->w[wi] * c->dy[yi];
                  const double f = (double)c->xr[xi] * c->dy[yi];
                  acc += c->w[wi] * c->xr[xi];
                  c->y[yi] += t;
                  c->ys[yi] += fabs(t);
                  c->dx[xi] += g;
                  c->dxs[xi] += fabs(g);
                  c->dw[wi] += f;
                  c->dws[wi] += fabs(f);
                }
          c->yp[yi] = acc;
        }
}

/* max over i of |a[i] - ref[i]| / (sum[i] + tiny), and whether every one is
 * within tol */
static int within(const float *a, const double *ref, const double *sum,
                  int64_t n, double tol, double *worst) {
  int ok = 1;
  *worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double e = fabs((double)a[i] - ref[i]) / (sum[i] + 1e-30);
    if (e > *worst) *worst = e;
    if (!(e <= tol)) ok = 0;
  }
  return ok;
}

static void run_case(conv_case *c, int64_t nx, int64_t ny, int64_t nw,
                     const char *how, int expect_bf16) {
  const double tol = 1e-6;
  float *y = malloc((size_t)ny * sizeof *y), *dx = malloc((size_t)nx * 4);
  float *dw = calloc((size_t)nw, sizeof *dw);
  for (int round = 1; round >= 0; --round) {
    const float *x = round ? c->xr : c->x;
    SG_CHECK_OK(sg_conv_forward(&c->d, SG_DTYPE_F32, x, c->w, c->b, y, NULL));
    double worst;
    if (round)
      SG_CHECK(within(y, c->y, c->ys, ny, tol, &worst),
               "%s (%s): y off the f64 sum by %.2e of sum |terms|", c->name,
               how, worst);
    else /* f32 products of the unrounded x: bf16-sized errors */
      SG_CHECK(!within(y, c->y, c->ys, ny, tol, &worst),
               "%s (%s): y of an f32 x matched the rounded x", c->name, how);
    if (expect_bf16 && round) {
      double m = 0;
      for (int64_t i = 0; i < ny; ++i) {
        const double e = fabs((double)y[i] - c->yp[i]) / (c->ys[i] + 1e-30);
        if (e > m) m = e;
      }
      SG_CHECK(m <= tol, "%s: y off the scalar pair loop by %.2e", c->name, m);
      if (omp_get_max_threads() == 1)
        printf("%s, %s: y vs the scalar pair loop: max %.2e of sum |terms|; "
               "vs f64: %.2e\n",
               c->name, how, m, worst);
    }
  }
  memset(dw, 0, (size_t)nw * sizeof *dw);
  SG_CHECK_OK(sg_conv_backward(&c->d, SG_DTYPE_F32, c->xr, c->w, c->dy, dx, dw,
                               NULL, NULL));
  double worst;
  SG_CHECK(within(dx, c->dx, c->dxs, nx, tol, &worst),
           "%s (%s): dx off the f64 sum by %.2e of sum |terms|", c->name, how,
           worst);
  SG_CHECK(within(dw, c->dw, c->dws, nw, tol, &worst),
           "%s (%s): dw off the f64 sum by %.2e of sum |terms|", c->name, how,
           worst);
  if (omp_get_max_threads() == 1)
    printf("%s, %s: dw vs f64: max %.2e of sum |terms|\n", c->name, how, worst);
  free(y);
  free(dx);
  free(dw);
}

static void test_case(const char *name, int64_t batch, int64_t cin,
                      int64_t cout, int64_t h, int64_t w, int64_t k0,
                      int64_t k1, int64_t dil) {
  conv_case c = {.name = name,
                 .d = {.nsp = 2,
                       .batch = batch,
                       .cin = cin,
                       .cout = cout,
                       .in = {h, w},
                       .kernel = {k0, k1},
                       .stride = {1, 1},
                       .dilation = {dil, dil},
                       .bf16 = 1}};
  int64_t out[2];
  SG_CHECK_OK(sg_conv_out_shape(&c.d, out));
  c.o1 = out[0];
  c.o2 = out[1];
  const int64_t nx = batch * cin * h * w, ny = batch * cout * out[0] * out[1];
  const int64_t nw = cout * cin * k0 * k1;
  c.x = rnd(nx, 0);
  c.xr = malloc((size_t)nx * sizeof *c.xr);
  memcpy(c.xr, c.x, (size_t)nx * sizeof *c.xr);
  sg_round_bf16(c.xr, nx);
  c.w = rnd(nw, 1);
  c.b = rnd(cout, 1);
  c.dy = rnd(ny, 1);
  c.y = calloc((size_t)ny, sizeof(double));
  c.ys = calloc((size_t)ny, sizeof(double));
  c.dx = calloc((size_t)nx, sizeof(double));
  c.dxs = calloc((size_t)nx, sizeof(double));
  c.dw = calloc((size_t)nw, sizeof(double));
  c.dws = calloc((size_t)nw, sizeof(double));
  c.yp = malloc((size_t)ny * sizeof *c.yp);
  reference(&c);
  for (int nth = 1; nth <= 2; ++nth) {
    omp_set_num_threads(nth);
    run_case(&c, nx, ny, nw, "default (AMX where present)", have_amx());
    setenv("SG_CONV_BF16", "avx512", 1);
    run_case(&c, nx, ny, nw, "SG_CONV_BF16=avx512", have_bf16());
    setenv("SG_CONV_BF16", "0", 1);
    run_case(&c, nx, ny, nw, "SG_CONV_BF16=0", 0);
    unsetenv("SG_CONV_BF16");
    const char *simd = getenv("SG_SIMD");
    char *saved = simd ? strdup(simd) : NULL;
    setenv("SG_SIMD", "portable", 1);
    run_case(&c, nx, ny, nw, "SG_SIMD=portable", 0);
    if (saved)
      setenv("SG_SIMD", saved, 1);
    else
      unsetenv("SG_SIMD");
    free(saved);
  }
  omp_set_num_threads(1);
  free(c.x), free(c.xr), free(c.w), free(c.b), free(c.dy), free(c.y);
  free(c.ys), free(c.dx), free(c.dxs), free(c.dw), free(c.dws), free(c.yp);
}

/* x = 2^-130 (a bf16 denormal), w = 1, 2 channels, 3x3, 2 x 8 outputs: the
 * f32 kernels give 18 * 2^-130 (times w), the bf16 ones flush the inputs:
 * 0. Likewise the weight gradient with dy = 1: 16 * 2^-130 in f32, 0 from
 * the AMX kernel (expect_wbf16; there is no vdpbf16ps weight gradient). */
static void test_daz_probe(const char *how, int expect_bf16, int expect_wbf16) {
  sg_conv_desc d = {.nsp = 2,
                    .batch = 1,
                    .cin = 2,
                    .cout = 1,
                    .in = {4, 10},
                    .kernel = {3, 3},
                    .stride = {1, 1},
                    .dilation = {1, 1},
                    .bf16 = 1};
  float x[80], w[18], y[16];
  for (int i = 0; i < 80; ++i) x[i] = ldexpf(1.0f, -130);
  for (int i = 0; i < 18; ++i) w[i] = 1.0f;
  SG_CHECK_OK(sg_conv_forward(&d, SG_DTYPE_F32, x, w, NULL, y, NULL));
  SG_CHECK((y[0] == 0) == expect_bf16,
           "%s: y = %g on denormal inputs: the %s kernel did not run", how,
           (double)y[0], expect_bf16 ? "bf16" : "f32");
  float dy[16], dw[18] = {0};
  for (int i = 0; i < 16; ++i) dy[i] = 1.0f;
  SG_CHECK_OK(
      sg_conv_backward(&d, SG_DTYPE_F32, x, w, dy, NULL, dw, NULL, NULL));
  SG_CHECK((dw[0] == 0) == expect_wbf16 && (expect_wbf16 || dw[0] > 0),
           "%s: dw = %g on denormal inputs: the %s kernel did not run", how,
           (double)dw[0], expect_wbf16 ? "AMX" : "f32");
}

/* ---- the bf16 policy's rounding fused into the kernels ------------------
 * round_out / sg_*_forward_bf16 against the plain kernel followed by
 * sg_round_bf16 (the tape's separate pass before): bit for bit, at 1 and
 * 2 threads, on the paths a forward can take (direct 3x3 in bf16 and f32,
 * the 1x1 kernel, im2col at stride 2, group and layer norm, every
 * activation and binary op over several chunks). */
static void fused_conv_case(const char *name, int64_t cin, int64_t cout,
                            int64_t h, int64_t k, int64_t stride, int bf16) {
  sg_conv_desc d = {.nsp = 2,
                    .batch = 2,
                    .cin = cin,
                    .cout = cout,
                    .in = {h, h + 3},
                    .kernel = {k, k},
                    .stride = {stride, stride},
                    .dilation = {1, 1},
                    .bf16 = bf16};
  int64_t o[2];
  SG_CHECK_OK(sg_conv_out_shape(&d, o));
  const int64_t nx = 2 * cin * h * (h + 3), ny = 2 * cout * o[0] * o[1];
  float *x = rnd(nx, 1), *w = rnd(cout * cin * k * k, 1), *b = rnd(cout, 1);
  float *y0 = malloc((size_t)ny * sizeof *y0), *y1 = malloc((size_t)ny * 4);
  for (int nth = 1; nth <= 2; ++nth) {
    omp_set_num_threads(nth);
    d.round_out = 0;
    SG_CHECK_OK(sg_conv_forward(&d, SG_DTYPE_F32, x, w, b, y0, NULL));
    sg_round_bf16(y0, ny);
    d.round_out = 1;
    SG_CHECK_OK(sg_conv_forward(&d, SG_DTYPE_F32, x, w, b, y1, NULL));
    SG_CHECK(sg_test_cmp_bytes(name, y1, y0, (size_t)ny * 4) == 0,
             "%s, %d threads: fused rounding differs", name, nth);
  }
  omp_set_num_threads(1);
  free(x), free(w), free(b), free(y0), free(y1);
}

static void fused_norm_case(sg_norm_kind kind, int64_t groups) {
  sg_norm_desc d = {.kind = kind,
                    .batch = 3,
                    .channels = 6,
                    .spatial = 777,
                    .groups = groups,
                    .eps = 1e-5};
  int64_t nstat = 0, n = 3 * 6 * 777;
  SG_CHECK_OK(sg_norm_nstat(&d, &nstat));
  float *x = rnd(n, 1), *g = rnd(6, 1), *be = rnd(6, 1);
  float *y0 = malloc((size_t)n * 4), *y1 = malloc((size_t)n * 4);
  sg_moments *m = malloc((size_t)nstat * sizeof *m);
  SG_CHECK_OK(sg_norm_stats(&d, SG_DTYPE_F32, x, m));
  for (int nth = 1; nth <= 2; ++nth) {
    omp_set_num_threads(nth);
    d.round_out = 0;
    SG_CHECK_OK(sg_norm_forward(&d, SG_DTYPE_F32, x, m, g, be, y0));
    sg_round_bf16(y0, n);
    d.round_out = 1;
    SG_CHECK_OK(sg_norm_forward(&d, SG_DTYPE_F32, x, m, g, be, y1));
    SG_CHECK(sg_test_cmp_bytes("norm", y1, y0, (size_t)n * 4) == 0,
             "norm kind %d, %d threads: fused rounding differs", (int)kind,
             nth);
  }
  omp_set_num_threads(1);
  free(x), free(g), free(be), free(y0), free(y1), free(m);
}

static void fused_elementwise(int64_t n) {
  float *a = rnd(n, 0), *b = rnd(n, 0);
  float *y0 = malloc((size_t)n * 4), *y1 = malloc((size_t)n * 4);
  for (int nth = 1; nth <= 2; ++nth) {
    omp_set_num_threads(nth);
    for (int op = 0; op < SG_ACT_COUNT + 3; ++op) {
      const int act = op < SG_ACT_COUNT;
      const int code = act ? op : op - SG_ACT_COUNT;
      if (act) {
        SG_CHECK_OK(sg_act_forward((sg_act)code, SG_DTYPE_F32, n, a, y0));
        SG_CHECK_OK(sg_act_forward_bf16((sg_act)code, SG_DTYPE_F32, n, a, y1));
      } else {
        SG_CHECK_OK(
            sg_binary_forward((sg_binary)code, SG_DTYPE_F32, n, a, b, y0));
        SG_CHECK_OK(
            sg_binary_forward_bf16((sg_binary)code, SG_DTYPE_F32, n, a, b, y1));
      }
      sg_round_bf16(y0, n);
      SG_CHECK(sg_test_cmp_bytes("elementwise", y1, y0, (size_t)n * 4) == 0,
               "%s %d, n %lld, %d threads: fused rounding differs",
               act ? "activation" : "binary op", code, (long long)n, nth);
    }
  }
  omp_set_num_threads(1);
  free(a), free(b), free(y0), free(y1);
}

static void test_fused_rounding(void) {
  fused_conv_case("direct 3x3, bf16", 5, 7, 19, 3, 1, 1);
  fused_conv_case("direct 3x3, f32", 5, 7, 19, 3, 1, 0);
  fused_conv_case("1x1", 6, 9, 13, 1, 1, 1);
  fused_conv_case("3x3 stride 2 (im2col)", 4, 5, 17, 3, 2, 1);
  fused_norm_case(SG_NORM_GROUP, 3);
  fused_norm_case(SG_NORM_LAYER, 1);
  fused_elementwise(5);
  fused_elementwise(100003); /* several chunks, parallel */
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  test_daz_probe("default", have_amx(), have_amx());
  setenv("SG_CONV_BF16", "avx512", 1);
  test_daz_probe("SG_CONV_BF16=avx512", have_bf16(), 0);
  setenv("SG_CONV_BF16", "0", 1);
  test_daz_probe("SG_CONV_BF16=0", 0, 0);
  unsetenv("SG_CONV_BF16");
  /* name, batch, cin, cout, h, w (padded input), kernel, dilation */
  test_case("3x3 odd channels", 2, 3, 5, 11, 13, 3, 3, 1);
  test_case("3x3 one channel", 1, 1, 2, 9, 12, 3, 3, 1);
  test_case("3x3 32->32, two tiles", 1, 32, 32, 40, 34, 3, 3, 1);
  test_case("3x3 7->9 odd sizes", 3, 7, 9, 17, 19, 3, 3, 1);
  test_case("5x5 4->3", 1, 4, 3, 14, 23, 5, 5, 1);
  test_case("1x3 5->4", 2, 5, 4, 6, 15, 1, 3, 1);
  test_case("3x3 dilation 2", 1, 6, 5, 13, 26, 3, 3, 2);
  test_case("3x3 37->35 (pair blocks 16 + 3)", 1, 37, 35, 12, 21, 3, 3, 1);
  test_fused_rounding();
  return sg_test_finish();
}
