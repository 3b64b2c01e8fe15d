/* shardgrid — window attention's per-row arithmetic (the Swin op,
 * models/ag_swin.c) as SG_HD functions: q, k, v, o (N, C, Hl, Wl) with
 * C = H d, windows of W x W tokens (T = W^2, token t at (t / W, t % W)),
 * a relative position bias (H, R^2), R = 2W - 1; the probabilities P of
 * every (window, head) saved in f64 by the forward, all arithmetic in f64
 * as the host op's. Window k of the loop over (b, wy, wx, h), h fastest.
 * The CUDA launchers (shardtensor/ops/cuda/attention_cuda.cu) run one
 * thread per query row (forward; r_i = sum_j p_ij dp_ij and dq), per key
 * row (dk, dv) and per bias entry (its gradient as a gather: no atomics);
 * tests/ops/test_attn_device.c runs them on the host against the host op.
 * Internal. */
#ifndef SG_WATTN_INL_H
#define SG_WATTN_INL_H

#include <math.h>
#include <stdint.h>

#include "sg_dtype.h" /* SG_HD */

#ifndef SG_WATTN_B
#define SG_WATTN_B 32 /* ds of a block of rows kept per thread */
#endif

typedef struct sg_wattn_geo {
  int64_t B, C, H, d, Hl, Wl, W, T, nwy, nwx, R;
  double scale;
} sg_wattn_geo;

/* Window count (b, wy, wx, h) and the first element (channel h d, token 0)
 * of window k in q's layout; h_out its head. */
static inline SG_HD int64_t sg_wattn_count(const sg_wattn_geo *g) {
  return g->B * g->nwy * g->nwx * g->H;
}
static inline SG_HD int64_t sg_wattn_base(const sg_wattn_geo *g, int64_t k,
                                          int64_t *h_out) {
  const int64_t h = k % g->H;
  k /= g->H;
  const int64_t wx = k % g->nwx;
  k /= g->nwx;
  const int64_t wy = k % g->nwy, b = k / g->nwy;
  *h_out = h;
  return ((b * g->C + h * g->d) * g->Hl + wy * g->W) * g->Wl + wx * g->W;
}
/* Offset of channel j of token t from the window's base. */
static inline SG_HD int64_t sg_wattn_off(const sg_wattn_geo *g, int64_t j,
                                         int64_t t) {
  return (j * g->Hl + t / g->W) * g->Wl + t % g->W;
}
/* The bias entry of query token i and key token j. */
static inline SG_HD int64_t sg_wattn_rel(const sg_wattn_geo *g, int64_t i,
                                         int64_t j) {
  const int64_t dy = i / g->W - j / g->W, dx = i % g->W - j % g->W;
  return (dy + g->W - 1) * g->R + dx + g->W - 1;
}

#define SG_WATTN_HD(E_, S)                                                      \
  static inline SG_HD double sg_wattn_dot_##S(const sg_wattn_geo *g,            \
                                              const E_ *a, int64_t ta,          \
                                              const E_ *b, int64_t tb) {        \
    double s = 0;                                                               \
    for (int64_t c = 0; c < g->d; ++c)                                          \
      s += (double)a[sg_wattn_off(g, c, ta)] *                                  \
           (double)b[sg_wattn_off(g, c, tb)];                                   \
    return s;                                                                   \
  }                                                                             \
  /* Query row i of window k: p (E_, the saved softmax row) and o's row.      \
   * q, k, v, o at the window's base; bias at its head's table. */ \
  static inline SG_HD void sg_wattn_row_fwd_##S(                                \
      const sg_wattn_geo *g, int64_t i, const E_ *q, const E_ *k, const E_ *v,  \
      const E_ *bias, double *p, E_ *o) {                                       \
    double mx = -INFINITY, sum = 0;                                             \
    for (int64_t j = 0; j < g->T; ++j) {                                        \
      p[j] = g->scale * sg_wattn_dot_##S(g, q, i, k, j) +                       \
             (double)bias[sg_wattn_rel(g, i, j)];                               \
      mx = fmax(mx, p[j]);                                                      \
    }                                                                           \
    for (int64_t j = 0; j < g->T; ++j) sum += (p[j] = exp(p[j] - mx));          \
    for (int64_t j = 0; j < g->T; ++j) p[j] /= sum;                             \
    for (int64_t c = 0; c < g->d; ++c) {                                        \
      double a = 0;                                                             \
      for (int64_t j = 0; j < g->T; ++j)                                        \
        a += p[j] * (double)v[sg_wattn_off(g, c, j)];                           \
      o[sg_wattn_off(g, c, i)] = (E_)a;                                         \
    }                                                                           \
  }                                                                             \
  /* Query row i: *r = sum_j p_ij dp_ij (dp_ij = dout_i . v_j) and dq's row  \
   * (OVERWRITTEN), dq_i = scale sum_j ds_ij k_j, ds_ij = p_ij (dp_ij - r). */  \
  static inline SG_HD void sg_wattn_row_dq_##S(                                 \
      const sg_wattn_geo *g, int64_t i, const E_ *k, const E_ *v,               \
      const E_ *dout, const double *p, double *r, E_ *dq) {                     \
    double rr = 0, ds[SG_WATTN_B];                                              \
    for (int64_t j = 0; j < g->T; ++j)                                          \
      rr += p[j] * sg_wattn_dot_##S(g, dout, i, v, j);                          \
    *r = rr;                                                                    \
    for (int64_t c = 0; c < g->d; ++c) dq[sg_wattn_off(g, c, i)] = 0;           \
    for (int64_t j0 = 0; j0 < g->T; j0 += SG_WATTN_B) {                         \
      const int64_t bj = g->T - j0 < SG_WATTN_B ? g->T - j0 : SG_WATTN_B;       \
      for (int64_t j = 0; j < bj; ++j)                                          \
        ds[j] = p[j0 + j] * (sg_wattn_dot_##S(g, dout, i, v, j0 + j) - rr);     \
      for (int64_t c = 0; c < g->d; ++c) {                                      \
        double a = 0;                                                           \
        for (int64_t j = 0; j < bj; ++j)                                        \
          a += g->scale * ds[j] * (double)k[sg_wattn_off(g, c, j0 + j)];        \
        E_ *e = dq + sg_wattn_off(g, c, i);                                     \
        *e = (E_)((double)*e + a);                                              \
      }                                                                         \
    }                                                                           \
  }                                                                             \
  /* Key row j: dk, dv rows (OVERWRITTEN) from the window's P (E_ x E_) and   \
   * r (E_). */ \
  static inline SG_HD void sg_wattn_row_dkv_##S(                                \
      const sg_wattn_geo *g, int64_t j, const E_ *q, const E_ *v,               \
      const E_ *dout, const double *P, const double *r, E_ *dk, E_ *dv) {       \
    double ds[SG_WATTN_B], pj[SG_WATTN_B];                                      \
    for (int64_t c = 0; c < g->d; ++c)                                          \
      dk[sg_wattn_off(g, c, j)] = 0, dv[sg_wattn_off(g, c, j)] = 0;             \
    for (int64_t i0 = 0; i0 < g->T; i0 += SG_WATTN_B) {                         \
      const int64_t bi = g->T - i0 < SG_WATTN_B ? g->T - i0 : SG_WATTN_B;       \
      for (int64_t i = 0; i < bi; ++i) {                                        \
        pj[i] = P[(i0 + i) * g->T + j];                                         \
        ds[i] = pj[i] * (sg_wattn_dot_##S(g, dout, i0 + i, v, j) - r[i0 + i]);  \
      }                                                                         \
      for (int64_t c = 0; c < g->d; ++c) {                                      \
        double a = 0, b = 0;                                                    \
        for (int64_t i = 0; i < bi; ++i) {                                      \
          a += g->scale * ds[i] * (double)q[sg_wattn_off(g, c, i0 + i)];        \
          b += pj[i] * (double)dout[sg_wattn_off(g, c, i0 + i)];                \
        }                                                                       \
        E_ *e = dk + sg_wattn_off(g, c, j), *f = dv + sg_wattn_off(g, c, j);    \
        *e = (E_)((double)*e + a);                                              \
        *f = (E_)((double)*f + b);                                              \
      }                                                                         \
    }                                                                           \
  }                                                                             \
  /* The sum of ds_ij over the (i, j) of bias entry e of head h, over every  \
   * window of that head (the bias gradient's increment). P, r: all windows'. \
   */  \
  static inline SG_HD double sg_wattn_dbias_##S(                                \
      const sg_wattn_geo *g, int64_t h, int64_t e, const E_ *v,                 \
      const E_ *dout, const double *P, const double *r) {                       \
    const int64_t dy = e / g->R - (g->W - 1), dx = e % g->R - (g->W - 1);       \
    const int64_t nw = g->B * g->nwy * g->nwx;                                  \
    double s = 0;                                                               \
    for (int64_t w = 0; w < nw; ++w) {                                          \
      int64_t hh;                                                               \
      const int64_t k = w * g->H + h, base = sg_wattn_base(g, k, &hh);          \
      for (int64_t i = 0; i < g->T; ++i) {                                      \
        const int64_t yj = i / g->W - dy, xj = i % g->W - dx;                   \
        if (yj < 0 || yj >= g->W || xj < 0 || xj >= g->W) continue;             \
        const int64_t j = yj * g->W + xj;                                       \
        const double p = P[(k * g->T + i) * g->T + j];                          \
        s += p * (sg_wattn_dot_##S(g, dout + base, i, v + base, j) -            \
                  r[k * g->T + i]);                                             \
      }                                                                         \
    }                                                                           \
    return s;                                                                   \
  }

SG_WATTN_HD(float, f32)
SG_WATTN_HD(double, f64)
#undef SG_WATTN_HD

#endif /* SG_WATTN_INL_H */
