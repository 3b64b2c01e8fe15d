/* shardgrid — the spectral convolution's device arithmetic as SG_HD
 * functions (internal): the kept modes gathered from a full r2c spectrum,
 * the per-mode complex channel contractions (forward and the two backward
 * products) and the kept modes scattered back into a full spectrum ready
 * for a complex-to-real transform. The CUDA path
 * (shardtensor/fft/cuda/spectral_cuda.cu) runs one thread per element over
 * these; tests/fft/test_spectral_device.c runs them on the host, with
 * FFTW's multi-dimensional r2c/c2r in place of cuFFT's, against
 * sg_spectral_conv_forward/backward.
 *
 * Conventions are the host's (sg_spectral.h, spectral.c, fft_exec.c):
 * - full spectrum: rows of F = (n0[, n1], n_last/2 + 1) complex modes,
 *   re/im interleaved (FFTW's and cuFFT's r2c layout);
 * - kept spectrum: rows of K = (2 keep0[, 2 keep1], keep_last) modes in
 *   sg_fft_map_index order (0..k-1 then -k..-1; a prefix in the halved
 *   dim), the host's spectrum (xhat) and W's mode order;
 * - W (cin, cout, K), yhat[b, o] = sum_i xhat[b, i] W[i, o];
 *   dxhat[b, i] = sum_o dyhat[b, o] conj(W[i, o]);
 *   dW[i, o] += sum_b dyhat[b, o] conj(xhat[b, i]) (the host's mix_fwd,
 *   mix_bwd_x, mix_bwd_w: the same products summed in the same order);
 * - the gather scales by s, and pair modes of the halved dim (neither 0
 *   nor n/2) by s * pairw: forward s = pairw = 1; the adjoint of the
 *   normalised inverse s = 1/N, pairw = 2 (sg_fft_inverse_adjoint);
 * - the scatter writes every mode of the full spectrum: pair modes s *
 *   pairw * Y (0 where not kept); the self-conjugate columns of the halved
 *   dim (index 0, and n/2 for even n) get s * (Y[k] + conj(Y[-k])) / 2,
 *   their Hermitian part along the other dims. The host's inverse (c2c over
 *   the other dims, then a 1-D c2r that ignores the imaginary parts of
 *   those columns, as FFTW's) equals any complex-to-real transform of that
 *   exactly Hermitian spectrum, so cuFFT's multi-dimensional C2R computes
 *   the host's function: forward s = 1/N, pairw = 1; the adjoint of the
 *   forward transform s = 1, pairw = 1/2 (sg_fft_forward_adjoint). */
#ifndef SG_SPEC_INL_H
#define SG_SPEC_INL_H

#include <stdint.h>

#include "sg_dtype.h" /* SG_HD */

typedef struct sg_spec_geo {
  int nd;          /* spatial dims, 2 or 3 */
  int64_t n[3];    /* real shape */
  int64_t keep[3]; /* kept modes per dim (>= 1) */
  int64_t F[3];    /* full spectrum shape (last: n/2 + 1) */
  int64_t K[3];    /* kept shape (2 keep, last: keep) */
  int64_t nf, M;   /* prod F, prod K */
} sg_spec_geo;

/* From the real shape and keep (as sg_fft_desc; keep[d] >= 1). */
static inline void sg_spec_geo_init(sg_spec_geo *g, int nd, const int64_t *n,
                                    const int64_t *keep) {
  g->nd = nd;
  g->nf = g->M = 1;
  for (int d = 0; d < 3; ++d) {
    const int last = d == nd - 1;
    g->n[d] = d < nd ? n[d] : 1;
    g->keep[d] = d < nd ? keep[d] : 1;
    g->F[d] = d < nd ? (last ? n[d] / 2 + 1 : n[d]) : 1;
    g->K[d] = d < nd ? (last ? keep[d] : 2 * keep[d]) : 1;
    g->nf *= g->F[d];
    g->M *= g->K[d];
  }
}

/* The full-spectrum index of kept mode m. */
static inline SG_HD int64_t sg_spec_full_of(const sg_spec_geo *g, int64_t m) {
  int64_t f = 0, mul = 1;
  for (int d = g->nd - 1; d >= 0; --d) {
    int64_t j = m % g->K[d];
    m /= g->K[d];
    if (d != g->nd - 1 && j >= g->keep[d]) j += g->n[d] - 2 * g->keep[d];
    f += j * mul;
    mul *= g->F[d];
  }
  return f;
}

/* The kept index of full-spectrum mode f, -1 when truncated; *mf (may be
 * NULL) gets the full index of its mirror (-k along every dim but the
 * halved one). */
static inline SG_HD int64_t sg_spec_kept_of(const sg_spec_geo *g, int64_t f,
                                            int64_t *mf) {
  int64_t m = 0, mul = 1, r = 0, rmul = 1, kept = 1;
  for (int d = g->nd - 1; d >= 0; --d) {
    const int64_t j = f % g->F[d];
    f /= g->F[d];
    int64_t k = j, jr = j;
    if (d == g->nd - 1) {
      kept &= j < g->K[d];
    } else {
      jr = j == 0 ? 0 : g->n[d] - j;
      if (j >= g->keep[d]) {
        k = j - (g->n[d] - 2 * g->keep[d]);
        kept &= k >= g->keep[d];
      }
    }
    m += k * mul;
    mul *= g->K[d];
    r += jr * rmul;
    rmul *= g->F[d];
  }
  if (mf) *mf = r;
  return kept ? m : -1;
}

/* Is full mode f in a self-conjugate column of the halved dim? */
static inline SG_HD int sg_spec_self(const sg_spec_geo *g, int64_t f) {
  const int64_t jl = f % g->F[g->nd - 1], nl = g->n[g->nd - 1];
  return jl == 0 || (nl % 2 == 0 && jl == nl / 2);
}

#define SG_SPEC_KERNELS(T, S)                                                    \
  /* element e of rows x M kept modes: xh[e] = w X[row, full(m)] */              \
  static inline SG_HD void sg_spec_gather_##S(const sg_spec_geo *g,              \
                                              const T *X, T *xh, int64_t e,      \
                                              double s, double pairw) {          \
    const int64_t r = e / g->M, f = sg_spec_full_of(g, e % g->M);                \
    const T w = (T)((sg_spec_self(g, f) ? 1.0 : pairw) * s);                     \
    const T *v = X + 2 * (r * g->nf + f);                                        \
    xh[2 * e] = v[0] * w;                                                        \
    xh[2 * e + 1] = v[1] * w;                                                    \
  }                                                                              \
  /* element e of rows x nf full modes, from the kept modes yh */                \
  static inline SG_HD void sg_spec_scatter_##S(const sg_spec_geo *g,             \
                                               const T *yh, T *Y, int64_t e,     \
                                               double s, double pairw) {         \
    const int64_t r = e / g->nf, f = e % g->nf;                                  \
    int64_t mf = 0;                                                              \
    const int64_t m = sg_spec_kept_of(g, f, &mf);                                \
    const T *a = m >= 0 ? yh + 2 * (r * g->M + m) : 0;                           \
    T re = 0, im = 0;                                                            \
    if (sg_spec_self(g, f)) {                                                    \
      const int64_t m2 = sg_spec_kept_of(g, mf, 0);                              \
      const T *b = m2 >= 0 ? yh + 2 * (r * g->M + m2) : 0;                       \
      const T h = (T)(0.5 * s);                                                  \
      re = ((a ? a[0] : (T)0) + (b ? b[0] : (T)0)) * h;                          \
      im = ((a ? a[1] : (T)0) - (b ? b[1] : (T)0)) * h;                          \
    } else if (a) {                                                              \
      const T w = (T)(pairw * s);                                                \
      re = a[0] * w;                                                             \
      im = a[1] * w;                                                             \
    }                                                                            \
    Y[2 * e] = re;                                                               \
    Y[2 * e + 1] = im;                                                           \
  }                                                                              \
  /* y[b, o, m] = sum_i x[b, i, m] W[i, o, m]; e over nb * cout * M */           \
  static inline SG_HD void sg_spec_mix_fwd_##S(int64_t cin, int64_t cout,        \
                                               int64_t M, const T *x,            \
                                               const T *W, T *y, int64_t e) {    \
    const int64_t m = e % M, o = (e / M) % cout, b = e / (M * cout);             \
    T cr = 0, ci = 0;                                                            \
    for (int64_t i = 0; i < cin; ++i) {                                          \
      const T *a = x + 2 * ((b * cin + i) * M + m);                              \
      const T *w = W + 2 * ((i * cout + o) * M + m);                             \
      cr += a[0] * w[0] - a[1] * w[1];                                           \
      ci += a[0] * w[1] + a[1] * w[0];                                           \
    }                                                                            \
    y[2 * e] = cr;                                                               \
    y[2 * e + 1] = ci;                                                           \
  }                                                                              \
  /* dx[b, i, m] = sum_o dy[b, o, m] conj(W[i, o, m]); e over nb * cin * M */    \
  static inline SG_HD void sg_spec_mix_bwd_x_##S(int64_t cin, int64_t cout,      \
                                                 int64_t M, const T *dy,         \
                                                 const T *W, T *dx,              \
                                                 int64_t e) {                    \
    const int64_t m = e % M, i = (e / M) % cin, b = e / (M * cin);               \
    T cr = 0, ci = 0;                                                            \
    for (int64_t o = 0; o < cout; ++o) {                                         \
      const T *a = dy + 2 * ((b * cout + o) * M + m);                            \
      const T *w = W + 2 * ((i * cout + o) * M + m);                             \
      const T vi = -w[1];                                                        \
      cr += a[0] * w[0] - a[1] * vi;                                             \
      ci += a[0] * vi + a[1] * w[0];                                             \
    }                                                                            \
    dx[2 * e] = cr;                                                              \
    dx[2 * e + 1] = ci;                                                          \
  }                                                                              \
  /* dW[i, o, m] += sum_b dy[b, o, m] conj(x[b, i, m]); e over cin * cout *    \
   * M */ \
  static inline SG_HD void sg_spec_mix_bwd_w_##S(int64_t nb, int64_t cin,        \
                                                 int64_t cout, int64_t M,        \
                                                 const T *x, const T *dy,        \
                                                 T *dW, int64_t e) {             \
    const int64_t m = e % M, o = (e / M) % cout, i = e / (M * cout);             \
    T cr = 0, ci = 0;                                                            \
    for (int64_t b = 0; b < nb; ++b) {                                           \
      const T *a = dy + 2 * ((b * cout + o) * M + m);                            \
      const T *v = x + 2 * ((b * cin + i) * M + m);                              \
      const T vi = -v[1];                                                        \
      cr += a[0] * v[0] - a[1] * vi;                                             \
      ci += a[0] * vi + a[1] * v[0];                                             \
    }                                                                            \
    dW[2 * e] += cr;                                                             \
    dW[2 * e + 1] += ci;                                                         \
  }                                                                              \
  /* a replicated W's local modes (the split domain's device path): e over     \
   * io * M pairs (i, o) x local modes, gidx[m] the global kept index of local \
   * mode m (K kept modes); add 0: wl[p, m] = W[p, gidx[m]]; add 1:            \
   * W[p, gidx[m]] += wl[p, m] (the host's mix_weight) */ \
  static inline SG_HD void sg_spec_wlocal_##S(int64_t M, int64_t K,              \
                                              const int64_t *gidx, T *W,         \
                                              T *wl, int64_t e, int add) {       \
    const int64_t m = e % M, p = e / M;                                          \
    T *g = W + 2 * (p * K + gidx[m]), *l = wl + 2 * e;                           \
    if (add) {                                                                   \
      g[0] += l[0];                                                              \
      g[1] += l[1];                                                              \
    } else {                                                                     \
      l[0] = g[0];                                                               \
      l[1] = g[1];                                                               \
    }                                                                            \
  }

SG_SPEC_KERNELS(double, f64)
SG_SPEC_KERNELS(float, f32)

#endif /* SG_SPEC_INL_H */
