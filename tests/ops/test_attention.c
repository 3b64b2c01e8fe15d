/* Fused attention kernels (shardtensor/ops/attention.c): forward against a
 * naive full-softmax reference in f64 (f64 tight, f32 at fp32 tolerance),
 * Nq != Nk, sizes that are not multiples of the 64-token tiles, causal
 * (top-left, bottom-right and with rows that see no key) and not,
 * head_dim 8/16/24 (and 80); backward against the reference's analytic gradient and
 * against central finite differences of sum(dout * o) in f64; the merge
 * primitive (attention over [K1; K2] = merge of the two parts, forward and
 * the ring-attention backward contract); the same bits for 1 and 3
 * threads; bad arguments. Single rank. */
#include "sg_ops.h"
#include "sg_test.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static double urand(void) { /* xorshift64*, in [-1, 1) */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (double)((rng_state * 2685821657736338717ull) >> 11) /
             4503599627370496.0 -
         1.0;
}
static double *rnd(int64_t n, double amp) {
  double *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
  for (int64_t i = 0; i < n; ++i) p[i] = amp * urand();
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
static double *to_f64(const float *x, int64_t n) {
  double *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
  for (int64_t i = 0; i < n; ++i) p[i] = x[i];
  return p;
}

typedef struct attn_case {
  const char *name;
  sg_attn_desc d;
  int64_t nqe, nke, nl; /* elements of q/o, of k/v, of lse */
  double *q, *k, *v, *dout;
} attn_case;

static double eff_scale(const sg_attn_desc *d) {
  return d->scale != 0 ? d->scale : 1 / sqrt((double)d->head_dim);
}

static int sees(const sg_attn_desc *d, int64_t i, int64_t j) {
  return !d->causal || j <= i + d->causal_offset;
}

/* The textbook computation: a full score row, softmax, weighted sum; and
 * the analytic gradient through the normalised probabilities. */
static void naive(const sg_attn_desc *d, const double *q, const double *k,
                  const double *v, const double *dout, double *o, double *lse,
                  double *dq, double *dk, double *dv) {
  const int64_t nq = d->nq, nk = d->nk, hd = d->head_dim;
  const double sc = eff_scale(d);
  double *p = zeros(nk), *dp = zeros(nk);
  if (dk) memset(dk, 0, (size_t)(d->batch * d->heads * nk * hd) * sizeof *dk);
  if (dv) memset(dv, 0, (size_t)(d->batch * d->heads * nk * hd) * sizeof *dv);
  for (int64_t h = 0; h < d->batch * d->heads; ++h) {
    const double *qh = q + h * nq * hd, *kh = k + h * nk * hd,
                 *vh = v + h * nk * hd;
    for (int64_t i = 0; i < nq; ++i) {
      double m = -INFINITY, l = 0;
      for (int64_t j = 0; j < nk; ++j) {
        double s = 0;
        for (int64_t c = 0; c < hd; ++c) s += qh[i * hd + c] * kh[j * hd + c];
        p[j] = sees(d, i, j) ? sc * s : -INFINITY;
        if (p[j] > m) m = p[j];
      }
      for (int64_t j = 0; j < nk; ++j) {
        p[j] = p[j] == -INFINITY ? 0 : exp(p[j] - m);
        l += p[j];
      }
      double *oi = o + (h * nq + i) * hd;
      for (int64_t c = 0; c < hd; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < nk; ++j)
          acc += (l > 0 ? p[j] / l : 0) * vh[j * hd + c];
        oi[c] = acc;
      }
      if (lse) lse[h * nq + i] = l > 0 ? m + log(l) : -INFINITY;
      if (!dq) continue;
      const double *gi = dout + (h * nq + i) * hd;
      double dd = 0;
      for (int64_t j = 0; j < nk; ++j) {
        p[j] = l > 0 ? p[j] / l : 0;
        dp[j] = 0;
        for (int64_t c = 0; c < hd; ++c) dp[j] += gi[c] * vh[j * hd + c];
        dd += p[j] * dp[j];
      }
      double *dqi = dq + (h * nq + i) * hd;
      for (int64_t c = 0; c < hd; ++c) dqi[c] = 0;
      for (int64_t j = 0; j < nk; ++j) {
        double ds = p[j] * (dp[j] - dd) * sc;
        for (int64_t c = 0; c < hd; ++c) {
          dqi[c] += ds * kh[j * hd + c];
          dk[(h * nk + j) * hd + c] += ds * qh[i * hd + c];
          dv[(h * nk + j) * hd + c] += p[j] * gi[c];
        }
      }
    }
  }
  free(p);
  free(dp);
}

static void case_init(attn_case *c, const char *name, sg_attn_desc d) {
  c->name = name;
  c->d = d;
  int64_t bh = d.batch * d.heads;
  c->nqe = bh * d.nq * d.head_dim;
  c->nke = bh * d.nk * d.head_dim;
  c->nl = bh * d.nq;
  c->q = rnd(c->nqe, 1.5);
  c->k = rnd(c->nke, 1.5);
  c->v = rnd(c->nke, 1.0);
  c->dout = rnd(c->nqe, 1.0);
}

static void case_free(attn_case *c) {
  free(c->q);
  free(c->k);
  free(c->v);
  free(c->dout);
}

/* lse arrays may hold -inf (rows that see no key): equal infinities pass */
static int64_t cmp_lse(const char *what, const double *a, const double *b,
                       int64_t n, double tol) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    int ok = (isinf(a[i]) || isinf(b[i]))
                 ? a[i] == b[i]
                 : fabs(a[i] - b[i]) <= tol * (1 + fabs(b[i]));
    if (!ok && !bad++)
      sg_test_fail_at(__FILE__, __LINE__, "%s: lse[%lld] %.17g vs %.17g", what,
                      (long long)i, a[i], b[i]);
  }
  return bad;
}

/* sum(dout * o) through the kernel's f64 forward: the scalar whose
 * gradient the backward computes. */
typedef struct fd_ctx {
  attn_case *c;
  double *o;
} fd_ctx;
static double fd_loss(fd_ctx *x) {
  SG_CHECK_OK(sg_attention_forward(&x->c->d, SG_DTYPE_F64, x->c->q, x->c->k,
                                   x->c->v, x->o, NULL, NULL));
  double s = 0;
  for (int64_t i = 0; i < x->c->nqe; ++i) s += x->c->dout[i] * x->o[i];
  return s;
}

/* Central differences at up to 30 sampled entries of p against g. */
static void check_fd(const char *what, fd_ctx *x, double *p, const double *g,
                     int64_t n) {
  const double h = 1e-6;
  int64_t step = n > 30 ? n / 30 : 1, bad = 0;
  for (int64_t i = n > 30 ? (int64_t)(rng_state % (uint64_t)step) : 0; i < n;
       i += step) {
    double save = p[i];
    p[i] = save + h;
    double lp = fd_loss(x);
    p[i] = save - h;
    double lm = fd_loss(x);
    p[i] = save;
    double fd = (lp - lm) / (2 * h);
    if (!(fabs(fd - g[i]) <= 1e-6 * (1 + fabs(fd))) && !bad++)
      sg_test_fail_at(__FILE__, __LINE__,
                      "%s: d/d[%lld] fd %.12g analytic %.12g", what,
                      (long long)i, fd, g[i]);
  }
  SG_CHECK(bad == 0, "%s: %lld entries differ from finite differences", what,
           (long long)bad);
}

static void test_f64(attn_case *c, int fd) {
  const sg_attn_desc *d = &c->d;
  double *o = zeros(c->nqe), *lse = zeros(c->nl), *oref = zeros(c->nqe),
         *lref = zeros(c->nl);
  double *dq = zeros(c->nqe), *dk = zeros(c->nke), *dv = zeros(c->nke);
  double *dqr = zeros(c->nqe), *dkr = zeros(c->nke), *dvr = zeros(c->nke);
  naive(d, c->q, c->k, c->v, c->dout, oref, lref, dqr, dkr, dvr);
  SG_CHECK_OK(
      sg_attention_forward(d, SG_DTYPE_F64, c->q, c->k, c->v, o, lse, NULL));
  SG_CHECK(sg_test_cmp_f64(c->name, o, oref, c->nqe, 1e-12, 1e-12) == 0,
           "%s: f64 o", c->name);
  SG_CHECK(cmp_lse(c->name, lse, lref, c->nl, 1e-12) == 0, "%s: f64 lse",
           c->name);
  SG_CHECK_OK(sg_attention_backward(d, SG_DTYPE_F64, c->q, c->k, c->v, o, lse,
                                    c->dout, dq, dk, dv, NULL));
  SG_CHECK(sg_test_cmp_f64(c->name, dq, dqr, c->nqe, 1e-11, 1e-11) == 0,
           "%s: f64 dq", c->name);
  SG_CHECK(sg_test_cmp_f64(c->name, dk, dkr, c->nke, 1e-11, 1e-11) == 0,
           "%s: f64 dk", c->name);
  SG_CHECK(sg_test_cmp_f64(c->name, dv, dvr, c->nke, 1e-11, 1e-11) == 0,
           "%s: f64 dv", c->name);
  /* NULL gradients are skipped, the others unchanged */
  double *dv2 = zeros(c->nke);
  SG_CHECK_OK(sg_attention_backward(d, SG_DTYPE_F64, c->q, c->k, c->v, o, lse,
                                    c->dout, NULL, NULL, dv2, NULL));
  SG_CHECK(sg_test_cmp_bytes(c->name, dv2, dv, (size_t)c->nke * 8) == 0,
           "%s: dv alone", c->name);
  /* 3 threads: the same bits (tiles independent in the forward, a head per
   * thread in the backward) */
  double *o3 = zeros(c->nqe), *dq3 = zeros(c->nqe);
  omp_set_num_threads(3);
  SG_CHECK_OK(
      sg_attention_forward(d, SG_DTYPE_F64, c->q, c->k, c->v, o3, NULL, NULL));
  SG_CHECK_OK(sg_attention_backward(d, SG_DTYPE_F64, c->q, c->k, c->v, o, lse,
                                    c->dout, dq3, NULL, NULL, NULL));
  omp_set_num_threads(1);
  SG_CHECK(sg_test_cmp_bytes(c->name, o3, o, (size_t)c->nqe * 8) == 0,
           "%s: o, 3 threads", c->name);
  SG_CHECK(sg_test_cmp_bytes(c->name, dq3, dq, (size_t)c->nqe * 8) == 0,
           "%s: dq, 3 threads", c->name);
  if (fd) {
    fd_ctx x = {c, zeros(c->nqe)};
    check_fd(c->name, &x, c->q, dq, c->nqe);
    check_fd(c->name, &x, c->k, dk, c->nke);
    check_fd(c->name, &x, c->v, dv, c->nke);
    free(x.o);
  }
  free(o);
  free(lse);
  free(oref);
  free(lref);
  free(dq);
  free(dk);
  free(dv);
  free(dqr);
  free(dkr);
  free(dvr);
  free(dv2);
  free(o3);
  free(dq3);
}

/* bf16 storage: x rounded to bf16 (n elements, malloc'd) and back. */
static sg_bf16 *to_bf16(const float *x, int64_t n) {
  sg_bf16 *b = malloc((size_t)(n + 1) * sizeof *b);
  for (int64_t i = 0; i < n; ++i) b[i] = sg_bf16_from_f32(x[i]);
  return b;
}

static float *from_bf16(const sg_bf16 *b, int64_t n) {
  float *x = malloc((size_t)(n + 1) * sizeof *x);
  for (int64_t i = 0; i < n; ++i) x[i] = sg_bf16_to_f32(b[i]);
  return x;
}

/* Largest |a - b| / (max |b| + 1e-30) over n. */
static double rel_err(const float *a, const float *b, int64_t n) {
  double e = 0, m = 1e-30;
  for (int64_t i = 0; i < n; ++i) {
    double d = fabs((double)a[i] - b[i]);
    e = d > e ? d : e;
    m = fabs((double)b[i]) > m ? fabs((double)b[i]) : m;
  }
  return e / m;
}

/* The five outputs of a forward + backward. */
typedef struct attn_out {
  float *o, *lse, *dq, *dk, *dv;
} attn_out;

/* round_o: the backward takes o rounded to bf16, as the bf16 path's does */
static attn_out run_f32(const attn_case *c, const float *q, const float *k,
                        const float *v, const float *g, int round_o) {
  attn_out r = {calloc((size_t)c->nqe + 1, 4), calloc((size_t)c->nl + 1, 4),
                calloc((size_t)c->nqe + 1, 4), calloc((size_t)c->nke + 1, 4),
                calloc((size_t)c->nke + 1, 4)};
  SG_CHECK_OK(
      sg_attention_forward(&c->d, SG_DTYPE_F32, q, k, v, r.o, r.lse, NULL));
  if (round_o) sg_round_bf16(r.o, c->nqe);
  SG_CHECK_OK(sg_attention_backward(&c->d, SG_DTYPE_F32, q, k, v, r.o, r.lse, g,
                                    r.dq, r.dk, r.dv, NULL));
  return r;
}

static void out_free(attn_out *r) {
  free(r->o);
  free(r->lse);
  free(r->dq);
  free(r->dk);
  free(r->dv);
}

/* f32 lse (may hold -inf) against a reference in f64 */
static int64_t cmp_lse_f32(const char *what, const float *a, const double *b,
                           int64_t n, double tol) {
  double *ad = to_f64(a, n);
  int64_t bad = cmp_lse(what, ad, b, n, tol);
  free(ad);
  return bad;
}

/* The f32 kernels against the f64 reference on the rounded inputs (so only
 * their f32 rounding counts): the default one (AVX-512 where the CPU has
 * it, attention_avx512.c; else AVX2 + FMA, attention_avx2.c), the AVX2
 * one (SG_SIMD=avx2: AVX-512 ruled out) and the portable one
 * (SG_SIMD=portable: BLAS tiles, base-e softmax), forward and backward;
 * then the first two against the portable one (base 2 against base e,
 * different tile sums: f32 rounding apart). On a CPU without AVX2 every
 * run is the portable kernel. */
static void test_f32(attn_case *c) {
  float *q = to_f32(c->q, c->nqe), *k = to_f32(c->k, c->nke),
        *v = to_f32(c->v, c->nke), *g = to_f32(c->dout, c->nqe);
  double *qd = to_f64(q, c->nqe), *kd = to_f64(k, c->nke),
         *vd = to_f64(v, c->nke), *gd = to_f64(g, c->nqe);
  double *oref = zeros(c->nqe), *lref = zeros(c->nl);
  double *dqr = zeros(c->nqe), *dkr = zeros(c->nke), *dvr = zeros(c->nke);
  naive(&c->d, qd, kd, vd, gd, oref, lref, dqr, dkr, dvr);
  float *want[4] = {to_f32(oref, c->nqe), to_f32(dqr, c->nqe),
                    to_f32(dkr, c->nke), to_f32(dvr, c->nke)};
  const int64_t n[4] = {c->nqe, c->nqe, c->nke, c->nke};
  const double tol[4] = {2e-5, 1e-4, 1e-4, 1e-4};
  const char *what[4] = {"o", "dq", "dk", "dv"},
             *kern[3] = {"default", "avx2", "portable"};
  attn_out r[3];
  for (int p = 0; p < 3; ++p) {
    if (p) setenv("SG_SIMD", kern[p], 1);
    r[p] = run_f32(c, q, k, v, g, 0);
    unsetenv("SG_SIMD");
    const float *got[4] = {r[p].o, r[p].dq, r[p].dk, r[p].dv};
    for (int i = 0; i < 4; ++i)
      SG_CHECK(sg_test_cmp_f32(c->name, got[i], want[i], n[i], tol[i],
                               tol[i]) == 0,
               "%s: f32 %s %s", c->name, kern[p], what[i]);
    SG_CHECK(cmp_lse_f32(c->name, r[p].lse, lref, c->nl, 2e-6) == 0,
             "%s: f32 %s lse", c->name, kern[p]);
  }
  /* the AVX2 kernel on 3 threads: the same bits */
  setenv("SG_SIMD", "avx2", 1);
  omp_set_num_threads(3);
  attn_out r3 = run_f32(c, q, k, v, g, 0);
  omp_set_num_threads(1);
  unsetenv("SG_SIMD");
  SG_CHECK(!memcmp(r3.o, r[1].o, (size_t)c->nqe * 4) &&
               !memcmp(r3.lse, r[1].lse, (size_t)c->nl * 4) &&
               !memcmp(r3.dq, r[1].dq, (size_t)c->nqe * 4) &&
               !memcmp(r3.dk, r[1].dk, (size_t)c->nke * 4) &&
               !memcmp(r3.dv, r[1].dv, (size_t)c->nke * 4),
           "%s: f32 avx2, 3 threads the same bits", c->name);
  out_free(&r3);
  double *ly = to_f64(r[2].lse, c->nl);
  for (int p = 0; p < 2; ++p) {
    const float *x[4] = {r[p].o, r[p].dq, r[p].dk, r[p].dv},
                *y[4] = {r[2].o, r[2].dq, r[2].dk, r[2].dv};
    for (int i = 0; i < 4; ++i)
      SG_CHECK(sg_test_cmp_f32(c->name, x[i], y[i], n[i], tol[i], tol[i]) == 0,
               "%s: f32 %s, %s = portable", c->name, what[i], kern[p]);
    SG_CHECK(cmp_lse_f32(c->name, r[p].lse, ly, c->nl, 2e-6) == 0,
             "%s: f32 lse, %s = portable", c->name, kern[p]);
  }
  void *fs[] = {q,    k,   v,   g,   qd,      kd,      vd,      gd,      oref,
                lref, dqr, dkr, dvr, want[0], want[1], want[2], want[3], ly};
  for (size_t i = 0; i < sizeof fs / sizeof fs[0]; ++i) free(fs[i]);
  for (int p = 0; p < 3; ++p) out_free(&r[p]);
}

/* The bf16 paths: 0 the portable one (SG_SIMD=portable: widened to f32),
 * 1 the vdpbf16ps tiles (SG_ATTN_BF16=tiles), 2 the default (AMX tiles
 * where the CPU has them, else the widening path). Paths 1 and 2 fall back
 * to the widening path where their tiles are missing. */
static const char *const bf16_path[3] = {"portable", "tiles", "default"};

static void bf16_path_set(int p, int on) {
  const char *var = p == 0 ? "SG_SIMD" : "SG_ATTN_BF16";
  if (p == 2) return;
  if (on)
    setenv(var, p == 0 ? "portable" : "tiles", 1);
  else
    unsetenv(var);
}

/* The bf16 forward and backward on path p on the bf16 inputs in[4] = q, k,
 * v, dout: got = o, dq, dk, dv (bf16), lse. */
static void run_bf16(const attn_case *c, sg_bf16 *const in[4], sg_bf16 *got[4],
                     float *lse, int p) {
  bf16_path_set(p, 1);
  SG_CHECK_OK(sg_attention_forward(&c->d, SG_DTYPE_BF16, in[0], in[1], in[2],
                                   got[0], lse, NULL));
  SG_CHECK_OK(sg_attention_backward(&c->d, SG_DTYPE_BF16, in[0], in[1], in[2],
                                    got[0], lse, in[3], got[1], got[2], got[3],
                                    NULL));
  bf16_path_set(p, 0);
}

/* Path p's forward with 3 threads gives the bits of its 1-thread run. */
static void check_bf16_threads(const attn_case *c, sg_bf16 *const in[4],
                               const sg_bf16 *o1, const float *l1, int p) {
  sg_bf16 *o3 = calloc((size_t)c->nqe + 1, 2);
  float *l3 = calloc((size_t)c->nl + 1, 4);
  omp_set_num_threads(3);
  bf16_path_set(p, 1);
  SG_CHECK_OK(sg_attention_forward(&c->d, SG_DTYPE_BF16, in[0], in[1], in[2],
                                   o3, l3, NULL));
  bf16_path_set(p, 0);
  omp_set_num_threads(1);
  SG_CHECK(sg_test_cmp_bytes(c->name, o3, o1, (size_t)c->nqe * 2) == 0 &&
               sg_test_cmp_bytes(c->name, l3, l1, (size_t)c->nl * 4) == 0,
           "%s: bf16 %s o, lse, 3 threads", c->name, bf16_path[p]);
  free(o3);
  free(l3);
}

/* bf16 storage. (1) The portable path: on the bf16 values widened to f32
 * the f32 kernel's outputs rounded once to bf16 must come out, lse bit for
 * bit. (2) The tile paths (vdpbf16ps, AMX; where the CPU has them, else
 * the widening path again): their forward against the f64 reference on
 * the same bf16 values, lse to 1e-5 (f32 sums of exact bf16 products), o
 * to 1e-2 of the largest value (P rounded to bf16 before P·V, 2^-9
 * relative, and o rounded once more), 3 threads the same bits. (3) Every
 * path against the f32 kernel on the unrounded inputs: bf16 keeps 8
 * significant bits, so every input and output carries a relative rounding
 * error up to 2^-9 (0.2%); through the scores (|scale q.k| sums d products
 * of random sign, each off by ~2 * 2^-9) the probabilities move by ~2^-8
 * sqrt(d) |q||k| scale relative, a few tenths of a percent here (|q|, |k|
 * <= 1.5, d <= 80), and the backward's dS = P (dP - D) differences cancel
 * some digits: 2e-2 of the largest value (measured at most 6e-3). */
static void test_bf16(attn_case *c) {
  const int64_t nq = c->nqe, nk = c->nke;
  float *f[4] = {to_f32(c->q, nq), to_f32(c->k, nk), to_f32(c->v, nk),
                 to_f32(c->dout, nq)};
  const int64_t n[4] = {nq, nq, nk, nk}, nin[4] = {nq, nk, nk, nq};
  sg_bf16 *in[4], *got[3][4];
  float *w[4], *lse[3];
  double *wd[4];
  for (int i = 0; i < 4; ++i) {
    in[i] = to_bf16(f[i], nin[i]);
    w[i] = from_bf16(in[i], nin[i]);
    wd[i] = to_f64(w[i], nin[i]);
  }
  setenv("SG_SIMD", "portable", 1); /* the portable bf16 path's f32 kernel */
  attn_out ref = run_f32(c, w[0], w[1], w[2], w[3], 1);
  unsetenv("SG_SIMD");
  attn_out full = run_f32(c, f[0], f[1], f[2], f[3], 0);
  double *oref = zeros(nq), *lref = zeros(c->nl), *gq = zeros(nq),
         *gk = zeros(nk), *gv = zeros(nk);
  naive(&c->d, wd[0], wd[1], wd[2], wd[3], oref, lref, gq, gk, gv);
  float *of = to_f32(oref, nq);
  const float *want[4] = {ref.o, ref.dq, ref.dk, ref.dv},
              *fullv[4] = {full.o, full.dq, full.dk, full.dv};
  const char *what[4] = {"o", "dq", "dk", "dv"};
  for (int p = 0; p < 3; ++p) {
    for (int i = 0; i < 4; ++i) got[p][i] = calloc((size_t)n[i] + 1, 2);
    lse[p] = calloc((size_t)c->nl + 1, 4);
    run_bf16(c, in, got[p], lse[p], p);
    float *o = from_bf16(got[p][0], nq);
    const double eo = rel_err(o, of, nq);
    free(o);
    SG_CHECK(eo <= 1e-2, "%s: bf16 %s o off f64 by %.3g", c->name, bf16_path[p],
             eo);
    SG_CHECK(cmp_lse_f32(c->name, lse[p], lref, c->nl, 1e-5) == 0,
             "%s: bf16 %s lse", c->name, bf16_path[p]);
    if (p) check_bf16_threads(c, in, got[p][0], lse[p], p);
    for (int i = 0; i < 4; ++i) {
      float *gf = from_bf16(got[p][i], n[i]);
      const double e = rel_err(gf, fullv[i], n[i]);
      SG_CHECK(e <= 2e-2, "%s: bf16 %s %s off f32 by %.3g", c->name,
               bf16_path[p], what[i], e);
      if (getenv("SG_TEST_VERBOSE"))
        printf("%s: bf16 %s %s vs f32 %.3g (o vs f64 %.3g)\n", c->name,
               bf16_path[p], what[i], e, eo);
      free(gf);
    }
  }
  SG_CHECK(sg_test_cmp_bytes(c->name, lse[0], ref.lse, (size_t)c->nl * 4) == 0,
           "%s: bf16 lse is the f32 kernel's", c->name);
  for (int i = 0; i < 4; ++i) {
    sg_bf16 *wb = to_bf16(want[i], n[i]);
    SG_CHECK(sg_test_cmp_bytes(c->name, got[0][i], wb, (size_t)n[i] * 2) == 0,
             "%s: bf16 %s is the f32 kernel's rounded", c->name, what[i]);
    free(wb);
  }
  void *fs[] = {oref, lref, gq, gk, gv, of, lse[0], lse[1], lse[2]};
  for (size_t i = 0; i < sizeof fs / sizeof fs[0]; ++i) free(fs[i]);
  for (int i = 0; i < 4; ++i) {
    void *fi[] = {f[i], in[i], w[i], wd[i], got[0][i], got[1][i], got[2][i]};
    for (size_t j = 0; j < sizeof fi / sizeof fi[0]; ++j) free(fi[j]);
  }
  out_free(&ref);
  out_free(&full);
}

static void test_cases(void) {
  struct {
    const char *name;
    sg_attn_desc d;
    int fd;
  } cs[] = {
      {"plain d8",
       {.batch = 2, .heads = 3, .nq = 37, .nk = 53, .head_dim = 8},
       1},
      {"causal d16",
       {.batch = 1,
        .heads = 2,
        .nq = 70,
        .nk = 131,
        .head_dim = 16,
        .causal = 1},
       0},
      /* bottom-right: the last query sees every key, the first 61 none */
      {"causal bottom-right d24",
       {.batch = 2,
        .heads = 1,
        .nq = 131,
        .nk = 70,
        .head_dim = 24,
        .causal = 1,
        .causal_offset = 70 - 131},
       0},
      {"causal scale d16",
       {.batch = 1,
        .heads = 1,
        .nq = 65,
        .nk = 65,
        .head_dim = 16,
        .scale = 0.3,
        .causal = 1},
       0},
      {"causal fd d8",
       {.batch = 1,
        .heads = 2,
        .nq = 29,
        .nk = 23,
        .head_dim = 8,
        .causal = 1,
        .causal_offset = -3},
       1},
      {"nk 0", {.batch = 1, .heads = 2, .nq = 5, .nk = 0, .head_dim = 8}, 0},
      /* the narrow tiles (head_dim <= 32: 16 rows x 16 or 8 x 32 columns)
       * with remainders in both tile directions */
      {"plain d32",
       {.batch = 1, .heads = 2, .nq = 77, .nk = 45, .head_dim = 32},
       0},
      {"plain d16",
       {.batch = 2, .heads = 1, .nq = 100, .nk = 150, .head_dim = 16},
       0},
      /* odd head_dim: masked vector tails in every tile GEMM (67: a
       * second 64-column strip of 3) */
      {"odd d5",
       {.batch = 1, .heads = 2, .nq = 33, .nk = 19, .head_dim = 5},
       0},
      {"causal odd d67",
       {.batch = 1,
        .heads = 1,
        .nq = 45,
        .nk = 71,
        .head_dim = 67,
        .causal = 1,
        .causal_offset = 26},
       0},
      /* head_dim over the GEMM kernels' 64-column strips */
      {"d80",
       {.batch = 1,
        .heads = 1,
        .nq = 20,
        .nk = 30,
        .head_dim = 80,
        .causal = 1,
        .causal_offset = 12},
       0},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; ++i) {
    attn_case c;
    case_init(&c, cs[i].name, cs[i].d);
    test_f64(&c, cs[i].fd);
    test_f32(&c);
    test_bf16(&c);
    case_free(&c);
  }
}

/* Tokens [t0, t0 + n) of every head of x (bh heads of `tokens` rows of hd). */
static double *slice_tokens(const double *x, int64_t bh, int64_t tokens,
                            int64_t hd, int64_t t0, int64_t n) {
  double *y = zeros(bh * n * hd);
  for (int64_t h = 0; h < bh; ++h)
    memcpy(y + h * n * hd, x + (h * tokens + t0) * hd,
           (size_t)(n * hd) * sizeof *y);
  return y;
}

/* Ring attention's algebra on one process: keys split into two blocks,
 * forward per block + merge equals the whole; the backward per block with
 * the merged (o, lse) gives that block's dk, dv and dq shares that sum to
 * the whole. Causal: the key block's position enters as causal_offset. */
static void test_merge_case(const char *name, int causal) {
  const int64_t bh = 2, nq = 41, nk = 77, n1 = 30, hd = 16;
  sg_attn_desc d = {.batch = 1,
                    .heads = bh,
                    .nq = nq,
                    .nk = nk,
                    .head_dim = hd,
                    .causal = causal,
                    .causal_offset = 20};
  attn_case c;
  case_init(&c, name, d);
  double *o = zeros(c.nqe), *lse = zeros(c.nl), *dq = zeros(c.nqe),
         *dk = zeros(c.nke), *dv = zeros(c.nke);
  SG_CHECK_OK(
      sg_attention_forward(&d, SG_DTYPE_F64, c.q, c.k, c.v, o, lse, NULL));
  SG_CHECK_OK(sg_attention_backward(&d, SG_DTYPE_F64, c.q, c.k, c.v, o, lse,
                                    c.dout, dq, dk, dv, NULL));
  double *om = zeros(c.nqe), *lm = zeros(c.nl), *ob = zeros(c.nqe),
         *lb = zeros(c.nl);
  double *dqs = zeros(c.nqe), *dqb = zeros(c.nqe);
  int64_t t0[2] = {0, n1}, n[2] = {n1, nk - n1};
  double *kb[2], *vb[2];
  for (int p = 0; p < 2; ++p) {
    kb[p] = slice_tokens(c.k, bh, nk, hd, t0[p], n[p]);
    vb[p] = slice_tokens(c.v, bh, nk, hd, t0[p], n[p]);
  }
  /* the second block first: the merge order does not matter beyond
   * rounding */
  for (int p = 1; p >= 0; --p) {
    sg_attn_desc dp = d;
    dp.nk = n[p];
    dp.causal_offset = d.causal_offset - t0[p];
    SG_CHECK_OK(sg_attention_forward(&dp, SG_DTYPE_F64, c.q, kb[p], vb[p],
                                     p == 1 ? om : ob, p == 1 ? lm : lb, NULL));
    if (p == 0)
      SG_CHECK_OK(sg_attention_merge(SG_DTYPE_F64, c.nl, hd, om, lm, ob, lb));
  }
  SG_CHECK(sg_test_cmp_f64(name, om, o, c.nqe, 1e-13, 1e-13) == 0,
           "%s: merged o", name);
  SG_CHECK(cmp_lse(name, lm, lse, c.nl, 1e-13) == 0, "%s: merged lse", name);
  for (int p = 0; p < 2; ++p) {
    sg_attn_desc dp = d;
    dp.nk = n[p];
    dp.causal_offset = d.causal_offset - t0[p];
    int64_t nb = bh * n[p] * hd;
    double *dkb = zeros(nb), *dvb = zeros(nb);
    SG_CHECK_OK(sg_attention_backward(&dp, SG_DTYPE_F64, c.q, kb[p], vb[p], om,
                                      lm, c.dout, dqb, dkb, dvb, NULL));
    for (int64_t i = 0; i < c.nqe; ++i) dqs[i] += dqb[i];
    double *dkr = slice_tokens(dk, bh, nk, hd, t0[p], n[p]);
    double *dvr = slice_tokens(dv, bh, nk, hd, t0[p], n[p]);
    SG_CHECK(sg_test_cmp_f64(name, dkb, dkr, nb, 1e-12, 1e-12) == 0,
             "%s: block %d dk", name, p);
    SG_CHECK(sg_test_cmp_f64(name, dvb, dvr, nb, 1e-12, 1e-12) == 0,
             "%s: block %d dv", name, p);
    free(dkb);
    free(dvb);
    free(dkr);
    free(dvr);
    free(kb[p]);
    free(vb[p]);
  }
  SG_CHECK(sg_test_cmp_f64(name, dqs, dq, c.nqe, 1e-12, 1e-12) == 0,
           "%s: summed dq", name);
  /* f32: the merge to fp32 rounding */
  float *of = to_f32(ob, c.nqe), *lf = to_f32(lb, c.nl),
        *of2 = to_f32(om, c.nqe);
  float *lf2 = to_f32(lm, c.nl);
  float *empty_o = calloc((size_t)c.nqe, 4),
        *empty_l = malloc((size_t)c.nl * 4);
  for (int64_t i = 0; i < c.nl; ++i) empty_l[i] = -INFINITY;
  /* merging into an empty part copies; merging an empty part changes nothing */
  SG_CHECK_OK(
      sg_attention_merge(SG_DTYPE_F32, c.nl, hd, empty_o, empty_l, of2, lf2));
  SG_CHECK(sg_test_cmp_bytes(name, empty_o, of2, (size_t)c.nqe * 4) == 0,
           "%s: into empty", name);
  for (int64_t i = 0; i < c.nl; ++i) empty_l[i] = -INFINITY;
  SG_CHECK_OK(
      sg_attention_merge(SG_DTYPE_F32, c.nl, hd, of2, lf2, empty_o, empty_l));
  SG_CHECK(sg_test_cmp_bytes(name, empty_o, of2, (size_t)c.nqe * 4) == 0,
           "%s: add empty", name);
  free(of);
  free(lf);
  free(of2);
  free(lf2);
  free(empty_o);
  free(empty_l);
  free(o);
  free(lse);
  free(dq);
  free(dk);
  free(dv);
  free(om);
  free(lm);
  free(ob);
  free(lb);
  free(dqs);
  free(dqb);
  case_free(&c);
}

static void test_bad_args(void) {
  double x[64] = {0};
  sg_attn_desc d = {.batch = 1, .heads = 1, .nq = 2, .nk = 2, .head_dim = 4};
  sg_attn_desc bad = d;
  bad.head_dim = 0;
  SG_CHECK_STATUS(sg_attention_forward(&bad, SG_DTYPE_F64, x, x, x, x, x, NULL),
                  SG_ERR_INVALID_ARG);
  SG_CHECK(strstr(sg_last_error(), "head_dim") != NULL,
           "message names head_dim: %s", sg_last_error());
  SG_CHECK(sg_attention_workspace_bytes(&bad, SG_DTYPE_F64) == 0,
           "no workspace for d = 0");
  bad = d;
  bad.nk = -1;
  SG_CHECK_STATUS(sg_attention_backward(&bad, SG_DTYPE_F64, x, x, x, x, x, x, x,
                                        x, x, NULL),
                  SG_ERR_INVALID_ARG);
  SG_CHECK(strstr(sg_last_error(), "negative") != NULL, "message: %s",
           sg_last_error());
  bad = d;
  bad.scale = NAN;
  SG_CHECK_STATUS(sg_attention_forward(&bad, SG_DTYPE_F32, x, x, x, x, x, NULL),
                  SG_ERR_INVALID_ARG);
  bad = d;
  bad.causal = 2;
  SG_CHECK_STATUS(sg_attention_forward(&bad, SG_DTYPE_F64, x, x, x, x, x, NULL),
                  SG_ERR_INVALID_ARG);
  bad.causal = 1;
  bad.causal_offset = INT64_MAX;
  SG_CHECK_STATUS(sg_attention_forward(&bad, SG_DTYPE_F64, x, x, x, x, x, NULL),
                  SG_ERR_INVALID_ARG);
  SG_CHECK_STATUS(sg_attention_forward(NULL, SG_DTYPE_F64, x, x, x, x, x, NULL),
                  SG_ERR_INVALID_ARG);
  SG_CHECK_STATUS(sg_attention_forward(&d, SG_DTYPE_F64, NULL, x, x, x, x,
                                       NULL),
                  SG_ERR_INVALID_ARG);
  SG_CHECK(strstr(sg_last_error(), "q is NULL") != NULL, "message: %s",
           sg_last_error());
  SG_CHECK_STATUS(sg_attention_backward(&d, SG_DTYPE_F64, x, x, x, x, NULL, x,
                                        x, x, x, NULL),
                  SG_ERR_INVALID_ARG);
  SG_CHECK(strstr(sg_last_error(), "lse is NULL") != NULL, "message: %s",
           sg_last_error());
  SG_CHECK_STATUS(sg_attention_forward(&d, SG_DTYPE_I32, x, x, x, x, x, NULL),
                  SG_ERR_NOT_SUPPORTED);
  SG_CHECK_STATUS(sg_attention_merge(SG_DTYPE_BF16, 2, 4, x, x, x, x),
                  SG_ERR_NOT_SUPPORTED);
  SG_CHECK_STATUS(sg_attention_merge(SG_DTYPE_F64, -1, 4, x, x, x, x),
                  SG_ERR_INVALID_ARG);
  SG_CHECK_STATUS(sg_attention_merge(SG_DTYPE_F64, 2, 0, x, x, x, x),
                  SG_ERR_INVALID_ARG);
  SG_CHECK_STATUS(sg_attention_merge(SG_DTYPE_F64, 2, 4, x, NULL, x, x),
                  SG_ERR_INVALID_ARG);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  omp_set_num_threads(1);
  test_cases();
  test_merge_case("merge", 0);
  test_merge_case("merge causal", 1);
  test_bad_args();
  return sg_test_finish();
}
