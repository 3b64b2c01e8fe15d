/* The CUDA attention's arithmetic on the host: the SG_HD row functions of
 * sg_attn_inl.h (what shardtensor/ops/cuda/attention_cuda.cu runs, one
 * thread per query row or key row) called here in host loops, against the
 * host kernel sg_attention_forward / sg_attention_backward: o, lse, dq, dk,
 * dv in f64 (1e-12 relative to max(1, |x|)) and f32 (2e-5), on odd sizes,
 * Nq != Nk both ways, several head dims, causal with offsets 0, Nk - Nq and
 * negative (rows that see no key: o = 0, lse = -inf, dq = 0), more keys and
 * queries than one block (SG_ATTN_HD_B), an empty key set. And the
 * attention op's layout map sg_attn_heads_src against ag_heads_copy.
 * Needs no GPU; runs in every build. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd_impl.h" /* ag_heads_copy */
#include "sg_attn_inl.h"
#include "sg_autograd.h"
#include "sg_device.h"
#include "sg_ops.h"
#include "sg_wattn_inl.h"

static void fill(double *v, int64_t n, unsigned seed) {
  unsigned s = seed * 2654435761u + 1;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    v[i] = ((s >> 8) & 0xffff) / 32768.0 - 1;
  }
}

/* max |got - want| / max(1, |want|); equal infinities count as 0. */
static double err_of(const double *got, const double *want, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (got[i] == want[i]) continue;
    double e = fabs(got[i] - want[i]) / (fabs(want[i]) > 1 ? fabs(want[i]) : 1);
    if (!(e <= worst)) worst = e;
  }
  return worst;
}

typedef struct cfg {
  int64_t b, h, nq, nk, d;
  double scale;
  int causal;
  int64_t offset;
} cfg;

/* The SG_HD rows over every head (f64 or f32 through T, S). */
#define ROWS(T, S)                                                             \
  static void rows_##S(const cfg *c, const T *q, const T *k, const T *v,       \
                       const T *dout, T *o, T *lse, T *dd, T *dq, T *dk,       \
                       T *dv) {                                                \
    const sg_attn_rows g = {                                                   \
        c->nq,     c->nk,                                                      \
        c->d,      c->scale != 0 ? c->scale : 1 / sqrt((double)c->d),          \
        c->causal, c->causal ? c->offset : 0};                                 \
    const int64_t bh = c->b * c->h, d = c->d, nq = c->nq, nk = c->nk;          \
    for (int64_t r = 0; r < bh * nq; ++r) {                                    \
      const int64_t kh = r / nq * nk * d;                                      \
      sg_attn_row_fwd_##S(&g, r % nq, q + r * d, k + kh, v + kh, o + r * d,    \
                          lse + r);                                            \
    }                                                                          \
    for (int64_t r = 0; r < bh * nq; ++r)                                      \
      dd[r] = sg_attn_dot_##S(dout + r * d, o + r * d, d);                     \
    for (int64_t r = 0; r < bh * nq; ++r) {                                    \
      const int64_t kh = r / nq * nk * d;                                      \
      sg_attn_row_dq_##S(&g, r % nq, q + r * d, k + kh, v + kh, lse[r], dd[r], \
                         dout + r * d, dq + r * d);                            \
    }                                                                          \
    for (int64_t r = 0; r < bh * nk; ++r) {                                    \
      const int64_t h = r / nk, qh = h * nq * d;                               \
      sg_attn_row_dkv_##S(&g, r % nk, q + qh, k + r * d, v + r * d,            \
                          lse + h * nq, dd + h * nq, dout + qh, dk + r * d,    \
                          dv + r * d);                                         \
    }                                                                          \
  }
ROWS(double, f64)
ROWS(float, f32)

/* One configuration in one dtype; 0 when every output is within tol. */
static int check_cfg(const cfg *c, sg_dtype dt) {
  const int64_t bh = c->b * c->h, nqe = bh * c->nq * c->d,
                nke = bh * c->nk * c->d, nr = bh * c->nq;
  const int f32 = dt == SG_DTYPE_F32;
  const double tol = f32 ? 2e-5 : 1e-12;
  /* q, k, v, dout; host o, lse, dq, dk, dv; rows' o, lse, dq, dk, dv, dd */
  const int64_t len[16] = {nqe, nke, nke, nqe, nqe, nr,  nqe, nke,
                           nke, nqe, nr,  nqe, nke, nke, nr,  0};
  double *a[16];
  void *x[16];
  int fails = 0;
  for (int i = 0; i < 15; ++i) {
    a[i] = calloc((size_t)(len[i] + 1), sizeof(double));
    x[i] = calloc((size_t)(len[i] + 1), sizeof(double));
  }
  for (int i = 0; i < 4; ++i) {
    fill(a[i], len[i], 7 + (unsigned)i + (unsigned)(c->nq * 31 + c->nk));
    for (int64_t e = 0; e < len[i]; ++e)
      if (f32)
        ((float *)x[i])[e] = (float)a[i][e];
      else
        ((double *)x[i])[e] = a[i][e];
  }
  const sg_attn_desc ad = {.batch = c->b,
                           .heads = c->h,
                           .nq = c->nq,
                           .nk = c->nk,
                           .head_dim = c->d,
                           .scale = c->scale,
                           .causal = c->causal,
                           .causal_offset = c->offset};
  if (sg_attention_forward(&ad, dt, x[0], x[1], x[2], x[4], x[5], NULL) !=
          SG_OK ||
      sg_attention_backward(&ad, dt, x[0], x[1], x[2], x[4], x[5], x[3], x[6],
                            x[7], x[8], NULL) != SG_OK) {
    printf("FAIL: host attention refused the configuration\n");
    fails = 1;
    goto done;
  }
  if (f32)
    rows_f32(c, x[0], x[1], x[2], x[3], x[9], x[10], x[14], x[11], x[12],
             x[13]);
  else
    rows_f64(c, x[0], x[1], x[2], x[3], x[9], x[10], x[14], x[11], x[12],
             x[13]);
  for (int i = 4; i < 14; ++i)
    for (int64_t e = 0; e < len[i]; ++e)
      a[i][e] = f32 ? (double)((float *)x[i])[e] : ((double *)x[i])[e];
  static const char *name[5] = {"o", "lse", "dq", "dk", "dv"};
  printf("attn rows %s b%lld h%lld nq %2lld nk %2lld d %2lld causal %d "
         "off %3lld:",
         f32 ? "f32" : "f64", (long long)c->b, (long long)c->h,
         (long long)c->nq, (long long)c->nk, (long long)c->d, c->causal,
         (long long)c->offset);
  for (int i = 0; i < 5; ++i) {
    double e = err_of(a[9 + i], a[4 + i], len[4 + i]);
    printf(" %s %.1e", name[i], e);
    if (!(e <= tol)) fails = 1;
  }
  printf(" %s\n", fails ? "FAIL" : "ok");
done:
  for (int i = 0; i < 15; ++i) free(a[i]), free(x[i]);
  return fails;
}

/* Window attention (the Swin op): the SG_HD rows of sg_wattn_inl.h over
 * every window, head and row, against the host op on the tape (forward o;
 * backward from a given dO: dq, dk, dv and the bias gradient). B 2, 2
 * heads of 3, a 6 x 9 grid of 3 x 3 windows. */
#define WROWS(E_, S)                                                          \
  static void wrows_##S(const sg_wattn_geo *g, const E_ *q, const E_ *k,      \
                        const E_ *v, const E_ *bias, const E_ *dout, E_ *o,   \
                        double *P, double *r, E_ *dq, E_ *dk, E_ *dv,         \
                        E_ *db) {                                             \
    const int64_t nk = sg_wattn_count(g), TT = g->T * g->T, RR = g->R * g->R; \
    for (int64_t w = 0; w < nk; ++w) {                                        \
      int64_t h;                                                              \
      const int64_t b = sg_wattn_base(g, w, &h);                              \
      for (int64_t i = 0; i < g->T; ++i)                                      \
        sg_wattn_row_fwd_##S(g, i, q + b, k + b, v + b, bias + h * RR,        \
                             P + w * TT + i * g->T, o + b);                   \
    }                                                                         \
    for (int64_t w = 0; w < nk; ++w) {                                        \
      int64_t h;                                                              \
      const int64_t b = sg_wattn_base(g, w, &h);                              \
      for (int64_t i = 0; i < g->T; ++i)                                      \
        sg_wattn_row_dq_##S(g, i, k + b, v + b, dout + b,                     \
                            P + w * TT + i * g->T, r + w * g->T + i, dq + b); \
    }                                                                         \
    for (int64_t w = 0; w < nk; ++w) {                                        \
      int64_t h;                                                              \
      const int64_t b = sg_wattn_base(g, w, &h);                              \
      for (int64_t j = 0; j < g->T; ++j)                                      \
        sg_wattn_row_dkv_##S(g, j, q + b, v + b, dout + b, P + w * TT,        \
                             r + w * g->T, dk + b, dv + b);                   \
    }                                                                         \
    for (int64_t e = 0; e < g->H * RR; ++e)                                   \
      db[e] = (E_)((double)db[e] +                                            \
                   sg_wattn_dbias_##S(g, e / RR, e % RR, v, dout, P, r));     \
  }
WROWS(double, f64)
WROWS(float, f32)

static int check_wattn(sg_dtype dt) {
  enum { B = 2, H = 2, D = 3, C = H * D, HL = 6, WL = 9, W = 3, R = 2 * W - 1 };
  const sg_wattn_geo g = {B, C,     H,      D,      HL, WL,
                          W, W * W, HL / W, WL / W, R,  1 / sqrt((double)D)};
  const int64_t n = B * C * HL * WL, nb = H * R * R, nw = sg_wattn_count(&g);
  const int64_t xs[4] = {B, C, HL, WL}, bs[2] = {H, R * R};
  const int f32 = dt == SG_DTYPE_F32;
  const size_t es = f32 ? 4 : 8;
  /* 0 q, 1 k, 2 v, 3 bias, 4 dout, 5 o, 6 dq, 7 dk, 8 dv, 9 db (rows);
   * 10 db (host) */
  const int64_t len[11] = {n, n, n, nb, n, n, n, n, n, nb, nb};
  void *x[11];
  double tmp[B * C * HL * WL];
  int fails = 0;
  for (int i = 0; i < 11; ++i) x[i] = calloc((size_t)len[i], es);
  for (int i = 0; i < 5; ++i) {
    fill(tmp, len[i], 91 + (unsigned)i);
    for (int64_t e = 0; e < len[i]; ++e)
      if (f32)
        ((float *)x[i])[e] = (float)tmp[e];
      else
        ((double *)x[i])[e] = tmp[e];
  }
  double *P = calloc((size_t)(nw * g.T * g.T), sizeof *P),
         *r = calloc((size_t)(nw * g.T), sizeof *r);
  if (f32)
    wrows_f32(&g, x[0], x[1], x[2], x[3], x[4], x[5], P, r, x[6], x[7], x[8],
              x[9]);
  else
    wrows_f64(&g, x[0], x[1], x[2], x[3], x[4], x[5], P, r, x[6], x[7], x[8],
              x[9]);
  /* the host op */
  sg_tape_t tape = NULL;
  sg_var qv[3], bv, *o = NULL;
  static const char *nm[3] = {"q", "k", "v"};
  int ok = sg_tape_create(&tape) == SG_OK;
  for (int i = 0; i < 3 && ok; ++i)
    ok = sg_var_init(&qv[i], nm[i], dt, 4, xs, x[i], 1) == SG_OK;
  ok = ok && sg_var_init_param(&bv, "bias", dt, 2, bs, x[3], x[10]) == SG_OK;
  ok = ok && sg_ag_window_attention(tape, H, W, &qv[0], &qv[1], &qv[2], &bv,
                                    &o) == SG_OK;
  double e[5] = {0};
  if (ok) {
    double want[B * C * HL * WL], got[B * C * HL * WL];
    for (int64_t i = 0; i < n; ++i) {
      want[i] = f32 ? ((float *)o->value.data)[i]
                    : ((double *)o->value.data)[i];
      got[i] = f32 ? ((float *)x[5])[i] : ((double *)x[5])[i];
    }
    e[0] = err_of(got, want, n);
    sg_tensor gt = sg_tensor_wrap(x[4], dt, sg_device_host(), 4, xs);
    ok = sg_tape_backward_from(tape, 1, &o, &gt) == SG_OK;
    for (int k = 0; k < 4 && ok; ++k) {
      const void *hv = k < 3 ? qv[k].grad.data : x[10];
      const int64_t m = k < 3 ? n : nb;
      for (int64_t i = 0; i < m; ++i) {
        want[i] = f32 ? ((const float *)hv)[i] : ((const double *)hv)[i];
        got[i] = f32 ? ((float *)x[6 + k])[i] : ((double *)x[6 + k])[i];
      }
      e[1 + k] = err_of(got, want, m);
    }
  }
  if (!ok) printf("FAIL: the host window attention did not run\n");
  const double tol = f32 ? 2e-5 : 1e-12;
  static const char *en[5] = {"o", "dq", "dk", "dv", "dbias"};
  printf("wattn rows %s:", f32 ? "f32" : "f64");
  for (int i = 0; i < 5; ++i) {
    printf(" %s %.1e", en[i], e[i]);
    if (!(e[i] <= tol)) fails = 1;
  }
  printf(" %s\n", fails || !ok ? "FAIL" : "ok");
  sg_tape_destroy(&tape);
  for (int i = 0; i < 3; ++i) sg_var_release(&qv[i]);
  sg_var_release(&bv);
  for (int i = 0; i < 11; ++i) free(x[i]);
  free(P), free(r);
  return fails || !ok;
}

/* sg_attn_heads_src against ag_heads_copy, both ways. */
static int check_heads(void) {
  enum { B = 2, H = 3, T = 5, D = 4, N = B * H * T * D };
  double x[N], y[N], got[N];
  fill(x, N, 3);
  ag_heads_copy(SG_DTYPE_F64, B, H, T, D, x, y, 0);
  for (int64_t i = 0; i < N; ++i) got[i] = x[sg_attn_heads_src(i, T, D)];
  int fails = err_of(got, y, N) != 0;
  fill(y, N, 5);
  ag_heads_copy(SG_DTYPE_F64, B, H, T, D, x, y, 1);
  for (int64_t i = 0; i < N; ++i) got[sg_attn_heads_src(i, T, D)] = y[i];
  fails += err_of(got, x, N) != 0;
  printf("attn heads map: %s\n", fails ? "FAIL" : "ok");
  return fails;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  static const cfg cfgs[] = {
      {1, 2, 7, 7, 5, 0, 0, 0},     /* square, not causal */
      {2, 1, 7, 13, 3, 0, 1, 6},    /* Nk > Nq, offset Nk - Nq */
      {1, 3, 11, 5, 8, 0.37, 1, 0}, /* Nq > Nk, top-left */
      {1, 1, 9, 70, 4, 0, 1, -3},   /* rows without keys; 3 key blocks */
      {1, 1, 67, 33, 16, 0, 0, 0},  /* 3 query blocks, 2 key blocks */
      {2, 1, 37, 41, 1, 0, 1, 5},   /* d = 1 */
      {1, 2, 3, 0, 3, 0, 0, 0},     /* no keys */
  };
  int fails = 0;
  for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; ++i) {
    fails += check_cfg(&cfgs[i], SG_DTYPE_F64);
    fails += check_cfg(&cfgs[i], SG_DTYPE_F32);
  }
  fails += check_heads();
  fails += check_wattn(SG_DTYPE_F64);
  fails += check_wattn(SG_DTYPE_F32);
  printf("%s\n", fails ? "FAILED" : "PASSED");
  MPI_Finalize();
  return fails ? 1 : 0;
}
