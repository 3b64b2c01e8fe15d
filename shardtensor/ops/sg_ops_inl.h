/* shardgrid — element-wise arithmetic of the op kernels, shared by the host
 * loops (ops_tmpl.h) and the CUDA kernels (shardtensor/ops/cuda/): written
 * once, so the host tests verify the device path's arithmetic. SG_HD is
 * __host__ __device__ under nvcc and empty otherwise (sg_dtype.h). Internal;
 * included by the op sources. */
#ifndef SG_OPS_INL_H
#define SG_OPS_INL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "sg_dtype.h" /* SG_HD */

#define SG_GELU_K0 0.7978845608028654 /* sqrt(2/pi) */
#define SG_GELU_K1 0.044715

/* act: 0 relu, 1 gelu (tanh approximation), 2 silu, 3 tanh. */
static inline SG_HD double sg_act_f64(int act, double x) {
  switch (act) {
  case 0: return x > 0 ? x : 0;
  case 1:
    return 0.5 * x * (1 + tanh(SG_GELU_K0 * (x + SG_GELU_K1 * x * x * x)));
  case 2: return x / (1 + exp(-x));
  default: return tanh(x);
  }
}
static inline SG_HD double sg_act_grad_f64(int act, double x) {
  switch (act) {
  case 0: return x > 0 ? 1 : 0;
  case 1: {
    double u = SG_GELU_K0 * (x + SG_GELU_K1 * x * x * x);
    double th = tanh(u);
    double du = SG_GELU_K0 * (1 + 3 * SG_GELU_K1 * x * x);
    return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * du;
  }
  case 2: {
    double sg = 1 / (1 + exp(-x));
    return sg * (1 + x * (1 - sg));
  }
  default: {
    double th = tanh(x);
    return 1 - th * th;
  }
  }
}
/* The clamp range of sg_expf, {-87, 88}, defined in ops.c. Kept out of
 * sight of the compiler on purpose: with literal bounds GCC evaluates the
 * clamped arm of a vectorised loop as a constant and multiplies it into
 * every lane (x * e^-87 ...), and those denormal products cost microcode
 * assists on every element (GELU 10.5 ns/element instead of 1.4). */
#ifndef __CUDA_ARCH__
extern const float sg_expf_bounds[2];
#endif

/* e^x in f32: Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, a
 * degree-6 Taylor polynomial for e^r (truncation < 1.2e-7 relative) and
 * 2^n put into the exponent bits; round-to-nearest n by the 1.5 * 2^23
 * shifter. Straight-line arithmetic, so loops over it vectorise (libm's
 * expf/tanhf are calls, one element at a time: GELU through tanhf was a
 * third of an FNO training step). x is clamped to [-87, 88] (results stay
 * normal and finite). Relative error below 3e-7 (tested against exp in
 * double). Device code uses expf. */
static inline SG_HD float sg_expf(float x) {
#ifdef __CUDA_ARCH__
  return expf(x);
#else
  x = x < sg_expf_bounds[0] ? sg_expf_bounds[0] : x;
  x = x > sg_expf_bounds[1] ? sg_expf_bounds[1] : x;
  const float shifter = 12582912.0f; /* 1.5 * 2^23 */
  const float n = (x * 1.44269504088896341f + shifter) - shifter;
  float r = x - n * 0.693359375f; /* ln2, high part (exact product) */
  r = r - n * -2.12194440e-4f;    /* ln2, low part */
  float p = 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = ((int32_t)n + 127) * (1 << 23);
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return p * scale;
#endif
}

static inline SG_HD float sg_act_f32(int act, float x) {
  switch (act) {
  case 0: return x > 0 ? x : 0.0f;
  case 1: { /* 0.5 x (1 + tanh u) = x e / (e + 1), e = e^{2u}; 2u capped
              * at 40, where e / (e + 1) is 1 in f32 */
    float v = 2.0f * (float)SG_GELU_K0 * (x + (float)SG_GELU_K1 * x * x * x);
    float e = sg_expf(v < 40.0f ? v : 40.0f);
    return x * (e / (e + 1.0f));
  }
  case 2: return x / (1 + sg_expf(-x));
  default: return tanhf(x);
  }
}
static inline SG_HD float sg_act_grad_f32(int act, float x) {
  switch (act) {
  case 0: return x > 0 ? 1.0f : 0.0f;
  case 1: {
    /* with e = e^{2u}: 1 + tanh u = 2e / (e + 1) and 1 - tanh^2 u =
     * 4e / (e + 1)^2, both without cancellation (2u capped as above) */
    float v = 2.0f * (float)SG_GELU_K0 * (x + (float)SG_GELU_K1 * x * x * x);
    float e = sg_expf(v < 40.0f ? v : 40.0f), q = 1.0f / (e + 1.0f);
    float du = (float)SG_GELU_K0 * (1 + 3 * (float)SG_GELU_K1 * x * x);
    return e * q + 2.0f * x * (e * q) * q * du;
  }
  case 2: {
    float sg = 1 / (1 + sg_expf(-x));
    return sg * (1 + x * (1 - sg));
  }
  default: {
    float th = tanhf(x);
    return 1 - th * th;
  }
  }
}

/* Source index of padded index i (in [-lo, n + hi)) for a boundary mode
 * (0 zero: -1 outside, 1 periodic, 2 reflect, 3 replicate). */
static inline SG_HD int64_t sg_pad_src_index(int mode, int64_t i, int64_t n) {
  if (i >= 0 && i < n) return i;
  switch (mode) {
  case 0: return -1;
  case 1: {
    int64_t r = i % n;
    return r < 0 ? r + n : r;
  }
  case 2: {
    if (n == 1) return 0;
    int64_t period = 2 * (n - 1);
    int64_t r = i % period;
    if (r < 0) r += period;
    return r < n ? r : period - r;
  }
  default: return i < 0 ? 0 : n - 1;
  }
}
/* ---- binary, scale, bias, loss: one element --------------------------------
 * Generated for T = float (_f32) and double (_f64); the host template loops
 * and the CUDA kernels call the same functions. */
#define SG_ELEMENTWISE_HD(T, S)                                             \
  /* a (op) b; op 0 add, 1 sub, 2 mul (SG_BINARY_*) */                      \
  static inline SG_HD T sg_el_binary_##S(int op, T a, T b) {                \
    return op == 0 ? a + b : (op == 1 ? a - b : a * b);                     \
  }                                                                         \
  /* the gradients of a (op) b for the upstream gradient g */               \
  static inline SG_HD T sg_el_binary_grad_a_##S(int op, T g, T b) {         \
    return op == 2 ? g * b : g;                                             \
  }                                                                         \
  static inline SG_HD T sg_el_binary_grad_b_##S(int op, T g, T a) {         \
    return op == 2 ? g * a : (op == 1 ? -g : g);                            \
  }                                                                         \
  /* y = alpha x (alpha rounded to T first, as the host always did) */      \
  static inline SG_HD T sg_el_scale_##S(T alpha, T x) { return alpha * x; } \
  /* y = x + b[channel] */                                                  \
  static inline SG_HD T sg_el_bias_add_##S(T x, T b) { return x + b; }
SG_ELEMENTWISE_HD(float, f32)
SG_ELEMENTWISE_HD(double, f64)
#undef SG_ELEMENTWISE_HD

/* The channel of element i of an (N, C, S) tensor (bias add). */
static inline SG_HD int64_t sg_bias_channel(int64_t i, int64_t c, int64_t s) {
  return (i / s) % c;
}

/* The MSE/relative-L2 element term of the loss partials: (p - t)^2 in
 * double (the second partial of REL_L2 is t^2). */
static inline SG_HD double sg_loss_sq_diff(double p, double t) {
  double d = p - t;
  return d * d;
}

/* The loss partials of row r from its nblk blocks' sums (blk[2 (r nblk +
 * b)], [.. + 1]) in block order: REL_L2 one pair per row, the other kinds
 * (one row) the sum and, but for SUM, the element count n. Host and device
 * sum in the same order, so the partials are the same bits. */
static inline SG_HD void sg_loss_row_partials(int kind, int64_t r, int64_t nblk,
                                              int64_t n, const double *blk,
                                              double *partial) {
  double s0 = 0, s1 = 0;
  for (int64_t b = 0; b < nblk; ++b) {
    s0 += blk[2 * (r * nblk + b)];
    s1 += blk[2 * (r * nblk + b) + 1];
  }
  if (kind == 3) { /* SG_LOSS_REL_L2 */
    partial[2 * r] = s0;
    partial[2 * r + 1] = s1;
  } else {
    partial[0] = s0;
    if (kind != 0) partial[1] = (double)n; /* SG_LOSS_SUM: no count */
  }
}

/* The gradient of the loss (kind 0 sum, 1 mean, 2 MSE, 3 relative L2:
 * SG_LOSS_*) at element i with prediction p and target t, given the GLOBAL
 * partials (sg_ops.h) and the upstream gradient g; per = elements per batch
 * row (REL_L2). Returns d/dp; *gt gets d/dt. */
static inline SG_HD double sg_loss_grad(int kind, int64_t i, int64_t batch,
                                        int64_t per, double p, double t,
                                        const double *partial, double g,
                                        double *gt) {
  double gp = 0;
  *gt = 0;
  switch (kind) {
  case 0: gp = g; break;
  case 1: gp = g / partial[1]; break;
  case 2:
    gp = 2.0 * g * (p - t) / partial[1];
    *gt = -gp;
    break;
  default: {
    int64_t r = i / per;
    double a = partial[2 * r], b = partial[2 * r + 1];
    double sa = sqrt(a), sb = sqrt(b);
    double diff = p - t;
    double scale = g / (double)batch;
    gp = sa > 0 ? scale * diff / (sa * sb) : 0;
    *gt = -gp - scale * sa * t / (b * sb);
    break;
  }
  }
  return gp;
}
/* ---- pooling: one output ---------------------------------------------------
 * A pooling window over one plane (3 dims; unused ones 1): padded input
 * extent in[], output extent out[], kernel, stride, dilation. The host
 * loops (ops_tmpl.h) and the CUDA kernels call the same functions. */
typedef struct sg_pool_win {
  int64_t in[3], out[3], ker[3], str[3], dil[3];
} sg_pool_win;

/* Offset in the plane of window row (a, b) of output (o0, o1, o2). */
static inline SG_HD int64_t sg_pool_row(const sg_pool_win *w, int64_t o0,
                                        int64_t o1, int64_t o2, int64_t a,
                                        int64_t b) {
  return ((o0 * w->str[0] + a * w->dil[0]) * w->in[1] + o1 * w->str[1] +
          b * w->dil[1]) *
             w->in[2] +
         o2 * w->str[2];
}

/* Output (o0, o1, o2) of plane xp: the window's maximum (kind 1; a NaN
 * is the maximum) or its sum times inv = 1/(window size) (kind 0). Offset
 * of the window's first maximum (max backward). */
#define SG_POOL_HD(T, S)                                                       \
  static inline SG_HD T sg_pool_out_##S(int kind, const sg_pool_win *w, T inv, \
                                        const T *xp, int64_t o0, int64_t o1,   \
                                        int64_t o2) {                          \
    T acc = kind == 1 ? -INFINITY : 0;                                         \
    for (int64_t a = 0; a < w->ker[0]; ++a)                                    \
      for (int64_t b = 0; b < w->ker[1]; ++b) {                                \
        const T *row = xp + sg_pool_row(w, o0, o1, o2, a, b);                  \
        if (kind == 1) {                                                       \
          for (int64_t e = 0; e < w->ker[2]; ++e) {                            \
            const T v = row[e * w->dil[2]];                                    \
            if (v > acc || v != v) acc = v;                                    \
          }                                                                    \
        } else {                                                               \
          for (int64_t e = 0; e < w->ker[2]; ++e) acc += row[e * w->dil[2]];   \
        }                                                                      \
      }                                                                        \
    return kind == 1 ? acc : acc * inv;                                        \
  }                                                                            \
  static inline SG_HD int64_t sg_pool_argmax_##S(const sg_pool_win *w,         \
                                                 const T *xp, int64_t o0,      \
                                                 int64_t o1, int64_t o2) {     \
    int64_t best = -1;                                                         \
    T bv = -INFINITY;                                                          \
    for (int64_t a = 0; a < w->ker[0]; ++a)                                    \
      for (int64_t b = 0; b < w->ker[1]; ++b) {                                \
        const int64_t base = sg_pool_row(w, o0, o1, o2, a, b);                 \
        for (int64_t e = 0; e < w->ker[2]; ++e) {                              \
          const int64_t i = base + e * w->dil[2];                              \
          if (best < 0 || xp[i] > bv || (xp[i] != xp[i] && bv == bv)) {        \
            best = i;                                                          \
            bv = xp[i];                                                        \
          }                                                                    \
        }                                                                      \
      }                                                                        \
    return best;                                                               \
  }
SG_POOL_HD(float, f32)
SG_POOL_HD(double, f64)
#undef SG_POOL_HD

/* The output along one dim whose window position j (o s + j d) is input
 * cell c: 1 and *o when there is one in [0, nout). */
static inline SG_HD int sg_pool_src(int64_t c, int64_t j, int64_t s, int64_t d,
                                    int64_t nout, int64_t *o) {
  const int64_t r = c - j * d;
  if (r < 0 || r % s) return 0;
  *o = r / s;
  return *o < nout;
}
/* Pooling backward at input cell c of a plane as a gather (the CUDA
 * kernel, one thread per cell; the host scatters per output): the sum over
 * the outputs whose window holds c of inv dy (average, kind 0) or of dy
 * where c is the window's first maximum (kind 1). Sums in window order,
 * not the host's output order (rounding only; test_op_device compares). */
#define SG_POOL_GRAD_HD(T, S)                                                  \
  static inline SG_HD T sg_pool_grad_cell_##S(int kind, const sg_pool_win *w,  \
                                              T inv, const T *xp,              \
                                              const T *dyp, int64_t c) {       \
    const int64_t c0 = c / (w->in[1] * w->in[2]);                              \
    const int64_t c1 = (c / w->in[2]) % w->in[1], c2 = c % w->in[2];           \
    T acc = 0;                                                                 \
    int64_t o0, o1, o2;                                                        \
    for (int64_t a = 0; a < w->ker[0]; ++a) {                                  \
      if (!sg_pool_src(c0, a, w->str[0], w->dil[0], w->out[0], &o0)) continue; \
      for (int64_t b = 0; b < w->ker[1]; ++b) {                                \
        if (!sg_pool_src(c1, b, w->str[1], w->dil[1], w->out[1], &o1))         \
          continue;                                                            \
        for (int64_t e = 0; e < w->ker[2]; ++e) {                              \
          if (!sg_pool_src(c2, e, w->str[2], w->dil[2], w->out[2], &o2))       \
            continue;                                                          \
          const T gy = dyp[(o0 * w->out[1] + o1) * w->out[2] + o2];            \
          if (kind == 0)                                                       \
            acc += gy * inv;                                                   \
          else if (sg_pool_argmax_##S(w, xp, o0, o1, o2) == c)                 \
            acc += gy;                                                         \
        }                                                                      \
      }                                                                        \
    }                                                                          \
    return acc;                                                                \
  }
SG_POOL_GRAD_HD(float, f32)
SG_POOL_GRAD_HD(double, f64)
#undef SG_POOL_GRAD_HD
/* ---- up-sampling: one dim, one output --------------------------------------
 * Output o of a dim up-sampled by s (sg_upsample_*): source cells i0, i1
 * and the weight of i1 (returned). Linear: the padded coordinate
 * (o + 0.5)/s + 0.5 (the unpadded (o + 0.5)/s - 0.5 plus the margin);
 * otherwise (nearest, or a linear op's unused dim) i0 = i1 = o / s, 0. */
static inline SG_HD double sg_up_src(int linear, int64_t s, int64_t o,
                                     int64_t *i0, int64_t *i1) {
  if (!linear) {
    *i0 = *i1 = o / s;
    return 0;
  }
  const double src = ((double)o + 0.5) / (double)s + 0.5;
  const int64_t f = (int64_t)floor(src);
  *i0 = f;
  *i1 = f + 1;
  return src - (double)f;
}
/* The bilinear weights of rows (a0|a1, b0|b1) and the value at columns
 * c0, c1 (weight lc of c1) of the four rows r00, r01, r10, r11. */
#define SG_UP_HD(T, S)                                                         \
  static inline SG_HD void sg_up_w4_##S(T la, T lb, T *w) {                    \
    w[0] = (1 - la) * (1 - lb);                                                \
    w[1] = (1 - la) * lb;                                                      \
    w[2] = la * (1 - lb);                                                      \
    w[3] = la * lb;                                                            \
  }                                                                            \
  static inline SG_HD T sg_up_lerp_##S(const T *w, T lc, const T *r00,         \
                                       const T *r01, const T *r10,             \
                                       const T *r11, int64_t c0, int64_t c1) { \
    T v0 = w[0] * r00[c0] + w[1] * r01[c0] + w[2] * r10[c0] + w[3] * r11[c0];  \
    T v1 = w[0] * r00[c1] + w[1] * r01[c1] + w[2] * r10[c1] + w[3] * r11[c1];  \
    return (1 - lc) * v0 + lc * v1;                                            \
  }
SG_UP_HD(float, f32)
SG_UP_HD(double, f64)
#undef SG_UP_HD

/* Up-sampling backward at input cell c of a plane as a gather (the CUDA
 * kernel; the host scatters per output), over 3 dims (in, out, scale,
 * linear as sg_up_geom). Along a dim, output o reads c with weight
 * 1 - lambda (its first source cell), lambda (its second) or 1 (nearest);
 * the outputs that read c lie within 2 s of c s. Each term is the host's
 * (w_a w_b)(w_c dy), summed in another order (rounding only). */
#define SG_UP_GRAD_HD(T, S)                                                   \
  static inline SG_HD T sg_up_weight_##S(int linear, int64_t s, int64_t o,    \
                                         int64_t c, int *reads) {             \
    int64_t i0, i1;                                                           \
    const T l = (T)sg_up_src(linear, s, o, &i0, &i1);                         \
    *reads = i0 == c || i1 == c;                                              \
    return i0 == c ? 1 - l : l;                                               \
  }                                                                           \
  static inline SG_HD T sg_up_grad_cell_##S(                                  \
      const int64_t *in, const int64_t *out, const int64_t *scale,            \
      const int *linear, const T *dyp, int64_t c) {                           \
    const int64_t cc[3] = {c / (in[1] * in[2]), (c / in[2]) % in[1],          \
                           c % in[2]};                                        \
    int64_t lo[3], hi[3];                                                     \
    for (int d = 0; d < 3; ++d) {                                             \
      lo[d] = (cc[d] - 2) * scale[d] > 0 ? (cc[d] - 2) * scale[d] : 0;        \
      hi[d] = (cc[d] + 2) * scale[d] < out[d] ? (cc[d] + 2) * scale[d]        \
                                              : out[d];                       \
    }                                                                         \
    T acc = 0;                                                                \
    int ra, rb, rc;                                                           \
    for (int64_t o0 = lo[0]; o0 < hi[0]; ++o0) {                              \
      const T wa = sg_up_weight_##S(linear[0], scale[0], o0, cc[0], &ra);     \
      if (!ra) continue;                                                      \
      for (int64_t o1 = lo[1]; o1 < hi[1]; ++o1) {                            \
        const T wb = sg_up_weight_##S(linear[1], scale[1], o1, cc[1], &rb);   \
        if (!rb) continue;                                                    \
        for (int64_t o2 = lo[2]; o2 < hi[2]; ++o2) {                          \
          const T wc = sg_up_weight_##S(linear[2], scale[2], o2, cc[2], &rc); \
          if (rc)                                                             \
            acc += (wa * wb) * (wc * dyp[(o0 * out[1] + o1) * out[2] + o2]);  \
        }                                                                     \
      }                                                                       \
    }                                                                         \
    return acc;                                                               \
  }
SG_UP_GRAD_HD(float, f32)
SG_UP_GRAD_HD(double, f64)
#undef SG_UP_GRAD_HD
/* ---- normalisation (sg_norm_*): the per-group and per-element arithmetic
 * of the host loops (ops_tmpl.h) and the CUDA kernels. Kinds as
 * sg_norm_kind: 0 batch, 1 instance, 2 group, 3 layer. */

/* The statistic group of element (n, c, s). */
static inline SG_HD int64_t sg_norm_group_of(int kind, int64_t channels,
                                             int64_t groups, int64_t spatial,
                                             int64_t n, int64_t c, int64_t s) {
  switch (kind) {
  case 0: return c;
  case 1: return n * channels + c;
  case 2: return n * groups + c / (channels / groups);
  default: return n * spatial + s;
  }
}
/* 1/std of merged moments (biased variance; 0 for an empty group). */
static inline SG_HD double sg_norm_rstd(double count, double m2, double eps) {
  double var = count > 0 ? m2 / count : 0;
  return 1.0 / sqrt(var + eps);
}
/* The divisor of the backward's means (1 for an empty group). */
static inline SG_HD double sg_norm_count(double count) {
  return count > 0 ? count : 1;
}
/* A (sample, channel) plane's forward as y = x a + b. */
static inline SG_HD void sg_norm_plane_coef(double mean, double rs, double gk,
                                            double bk, double *a, double *b) {
  *a = rs * gk;
  *b = bk - mean * *a;
}
/* A plane's dx = a dy - b - c (x - mean) from its group's sums s0, s1:
 * dx = rs (dy gk - s0/cnt - xh s1/cnt), xh = (x - mean) rs. */
static inline SG_HD void sg_norm_plane_dx_coef(double rs, double gk, double cnt,
                                               double s0, double s1, double *a,
                                               double *b, double *c) {
  *a = rs * gk;
  *b = rs * s0 / cnt;
  *c = rs * rs * s1 / cnt;
}
static inline SG_HD double sg_norm_plane_dx(double a, double b, double c,
                                            double dy, double x, double mean) {
  return a * dy - b - c * (x - mean);
}
/* LayerNorm, one element: y = xh gk + bk, xh = (x - mean) rs. */
static inline SG_HD double sg_norm_ln_y(double x, double mean, double rs,
                                        double gk, double bk) {
  double xh = (x - mean) * rs;
  return xh * gk + bk;
}
/* LayerNorm dx of one element: rs (dy gk - a0 - xh s1 / cnt), a0 = s0/cnt. */
static inline SG_HD double sg_norm_ln_dx(double x, double dy, double mean,
                                         double rs, double gk, double a0,
                                         double s1, double cnt) {
  double xh = (x - mean) * rs;
  return rs * (dy * gk - a0 - xh * s1 / cnt);
}

/* ---- convolution on a GEMM: im2col, its adjoint, the transposed conv ------
 * The CUDA convolutions (shardtensor/ops/cuda/gemm_cublas.cu) build the
 * column matrix of a batch item with these, multiply on cuBLAS, and gather
 * the adjoints back; test_op_device runs them on the host against
 * sg_conv_* / sg_convt_* in f64. The window is an sg_pool_win (3 dims,
 * unused ones 1) over the padded input block: valid windows only. */

/* The coordinates p[3] of flat index o of a 3-dim extent ext (row-major). */
static inline SG_HD void sg_unflat3(const int64_t *ext, int64_t o, int64_t *p) {
  p[2] = o % ext[2];
  p[1] = (o / ext[2]) % ext[1];
  p[0] = o / (ext[1] * ext[2]);
}

/* sg_pad_fill_outside's geometry: a box of nsp dims as 3 (leading dims 1,
 * b3), and per dim the cells [lo, hi) that lie inside the domain [0,
 * extent) when the box starts at origin; dims that are not zero-padded
 * (zero[i] 0: their margins hold data) are inside whole. Returns 1 when
 * some cell of the box lies outside. Host code (the launchers' geometry). */
static inline int sg_fill_outside_geom(int nsp, const int64_t *box,
                                       const int64_t *origin,
                                       const int64_t *extent, const int *zero,
                                       int64_t *b3, int64_t *lo, int64_t *hi) {
  int any = 0;
  for (int j = 0; j < 3; ++j) b3[j] = 1, lo[j] = 0, hi[j] = 1;
  for (int i = 0; i < nsp; ++i) {
    const int j = 3 - nsp + i;
    b3[j] = box[i];
    lo[j] = 0;
    hi[j] = box[i];
    if (zero[i]) {
      lo[j] = -origin[i] > 0 ? -origin[i] : 0;
      hi[j] = extent[i] - origin[i] < box[i] ? extent[i] - origin[i] : box[i];
      if (hi[j] < lo[j]) hi[j] = lo[j];
      any |= lo[j] > 0 || hi[j] < box[i];
    }
  }
  return any;
}
/* Whether cell i of a plane of b3 lies outside [lo, hi) (gets the fill). */
static inline SG_HD int sg_fill_outside_cell(const int64_t *b3,
                                             const int64_t *lo,
                                             const int64_t *hi, int64_t i) {
  int64_t p[3];
  sg_unflat3(b3, i, p);
  return p[0] < lo[0] || p[0] >= hi[0] || p[1] < lo[1] || p[1] >= hi[1] ||
         p[2] < lo[2] || p[2] >= hi[2];
}

/* im2col: entry (r, o) of a batch item's column matrix (ckk rows r = (c, a,
 * b, e), c-major as the host's; sout columns o, the output cells) is the
 * image's (C, in...) element at the returned offset. */
static inline SG_HD int64_t sg_im2col_src(const sg_pool_win *w, int64_t r,
                                          int64_t o) {
  const int64_t kk = w->ker[0] * w->ker[1] * w->ker[2];
  const int64_t c = r / kk, q = r % kk;
  int64_t ab[3], op[3];
  sg_unflat3(w->ker, q, ab);
  sg_unflat3(w->out, o, op);
  return c * (w->in[0] * w->in[1] * w->in[2]) +
         sg_pool_row(w, op[0], op[1], op[2], ab[0], ab[1]) + ab[2] * w->dil[2];
}

/* col2im as a gather: image cell i (of channel c's plane) collects the
 * column-matrix entries that im2col read from it (dcol: ckk rows of ld),
 * in (a, b, e) order (the host scatters per row: rounding only). */
#define SG_COL2IM_HD(T, S)                                                  \
  static inline SG_HD T sg_col2im_cell_##S(const sg_pool_win *w,            \
                                           const T *dcol, int64_t ld,       \
                                           int64_t c, int64_t i) {          \
    int64_t ip[3], o0 = 0, o1 = 0, o2 = 0;                                  \
    sg_unflat3(w->in, i, ip);                                               \
    T acc = 0;                                                              \
    int64_t r = c * w->ker[0] * w->ker[1] * w->ker[2];                      \
    for (int64_t a = 0; a < w->ker[0]; ++a) {                               \
      const int h0 = sg_pool_src(ip[0], a, w->str[0], w->dil[0], w->out[0], \
                                 &o0);                                      \
      for (int64_t b = 0; b < w->ker[1]; ++b) {                             \
        const int h1 = h0 && sg_pool_src(ip[1], b, w->str[1], w->dil[1],    \
                                         w->out[1], &o1);                   \
        for (int64_t e = 0; e < w->ker[2]; ++e, ++r) {                      \
          if (h1 &&                                                         \
              sg_pool_src(ip[2], e, w->str[2], w->dil[2], w->out[2], &o2))  \
            acc += dcol[r * ld + (o0 * w->out[1] + o1) * w->out[2] + o2];   \
        }                                                                   \
      }                                                                     \
    }                                                                       \
    return acc;                                                             \
  }
SG_COL2IM_HD(float, f32)
SG_COL2IM_HD(double, f64)
#undef SG_COL2IM_HD

/* Transposed convolution, kernel == stride (w->in: the input extent,
 * w->ker the kernel, w->out = in * ker): output cell p of channel k is
 * entry (k kk + a, j) of the product T = W^T x (rows (k, a), columns the
 * input cells j), a = p mod ker and j = p / ker per dim. Returns that
 * row-major offset of T (columns ld = sin); the forward adds b[k], the
 * backward gathers dy into T's shape with the same map. */
static inline SG_HD int64_t sg_convt_src(const sg_pool_win *w, int64_t k,
                                         int64_t p) {
  int64_t pp[3], a[3], j[3];
  sg_unflat3(w->out, p, pp);
  for (int d = 0; d < 3; ++d) {
    a[d] = pp[d] % w->ker[d];
    j[d] = pp[d] / w->ker[d];
  }
  const int64_t kk = w->ker[0] * w->ker[1] * w->ker[2];
  const int64_t sin = w->in[0] * w->in[1] * w->in[2];
  return (k * kk + (a[0] * w->ker[1] + a[1]) * w->ker[2] + a[2]) * sin +
         (j[0] * w->in[1] + j[1]) * w->in[2] + j[2];
}

/* ---- layout ops: concat / split, the FNO-3D time ops, roll, add_field -----
 * Index maps (and the one sum each adjoint needs) shared by the host ops
 * (models/) and the CUDA kernels (shardtensor/ops/cuda/layout_cuda.cu);
 * test_op_device checks the maps against the host ops. */

/* concat: element i of a part of ch channels ((N, ch, s) row-major) sits
 * at this offset of the concatenation of ctot channels, the part starting
 * at channel off; split reads it back from there. */
static inline SG_HD int64_t sg_cat_index(int64_t i, int64_t ch, int64_t ctot,
                                         int64_t off, int64_t s) {
  const int64_t per = ch * s;
  return (i / per) * ctot * s + off * s + i % per;
}
/* fno3d_broadcast_t: output j of (P, nt, s) reads input (P, s) here. */
static inline SG_HD int64_t sg_bcast_t_src(int64_t j, int64_t nt, int64_t s) {
  return (j / (nt * s)) * s + j % s;
}
/* fno3d_time_window: output j of (P, t2, s) copies input (P, t1, s) at the
 * returned offset, or is 0 (-1: a step t >= t1). Its adjoint is the same
 * map from t2 to t1. */
static inline SG_HD int64_t sg_twin_src(int64_t j, int64_t t1, int64_t t2,
                                        int64_t s) {
  const int64_t p = j / (t2 * s), t = (j / s) % t2;
  return t < t1 ? (p * t1 + t) * s + j % s : -1;
}
/* roll: y[l, i] = x[l, (i + sh) mod n] per dim (3 dims, unused ones 1, the
 * shifts in (-n, n)): the offset of output j's source. A bijection: the
 * backward writes dx[sg_roll_src(j)] = dy[j]. */
static inline SG_HD int64_t sg_roll_src(int64_t j, const int64_t *n,
                                        const int64_t *sh) {
  const int64_t m = n[0] * n[1] * n[2];
  int64_t p[3];
  sg_unflat3(n, j % m, p);
  for (int d = 0; d < 3; ++d) p[d] = ((p[d] + sh[d]) % n[d] + n[d]) % n[d];
  return (j / m) * m + (p[0] * n[1] + p[1]) * n[2] + p[2];
}
/* fno3d_broadcast_t's adjoint at input e of (P, s): the sum over t of
 * dy (P, nt, s), in t order. add_field's parameter gradient at element i
 * of a sample of m: p + dy[0, i] + dy[1, i] + ... in batch order. */
#define SG_LAYOUT_SUM_HD(T, S)                                                 \
  static inline SG_HD T sg_bcast_t_sum_##S(const T *dy, int64_t nt, int64_t s, \
                                           int64_t e) {                        \
    const T *g = dy + (e / s) * nt * s + e % s;                                \
    T acc = 0;                                                                 \
    for (int64_t t = 0; t < nt; ++t) acc += g[t * s];                          \
    return acc;                                                                \
  }                                                                            \
  static inline SG_HD T sg_field_acc_##S(T p, const T *dy, int64_t nb,         \
                                         int64_t m, int64_t i) {               \
    for (int64_t b = 0; b < nb; ++b) p += dy[b * m + i];                       \
    return p;                                                                  \
  }
SG_LAYOUT_SUM_HD(float, f32)
SG_LAYOUT_SUM_HD(double, f64)
#undef SG_LAYOUT_SUM_HD

/* ---- padding as gathers (the CUDA kernels of sg_pad_forward/backward) -----
 * A plane of extent in[3] padded by lo[d] low to out[3] (unused dims 1, no
 * padding), boundary mode[d] as sg_pad_src_index. */

/* The source offset of padded cell o of a plane, or -1 (a zero margin). */
static inline SG_HD int64_t sg_pad_src_cell(const int64_t *in,
                                            const int64_t *out,
                                            const int64_t *lo, const int *mode,
                                            int64_t o) {
  int64_t p[3];
  sg_unflat3(out, o, p);
  for (int d = 0; d < 3; ++d) {
    p[d] = sg_pad_src_index(mode[d], p[d] - lo[d], in[d]);
    if (p[d] < 0) return -1;
  }
  return (p[0] * in[1] + p[1]) * in[2] + p[2];
}
/* Along one dim, candidate slot s of source cell i: slot 0 the interior
 * position i + lo, slot s >= 1 the (s-1)-th margin position; 1 and *p when
 * that position's source is i. */
static inline SG_HD int sg_pad_cand(int mode, int64_t in, int64_t out,
                                    int64_t lo, int64_t i, int64_t s,
                                    int64_t *p) {
  if (s == 0) {
    *p = i + lo;
    return 1;
  }
  const int64_t m = s - 1;
  *p = m < lo ? m : in + m;
  return *p < out && sg_pad_src_index(mode, *p - lo, in) == i;
}
/* The adjoint at source cell i of a plane: the sum of the padded plane dpp
 * over every position copied from i (interior first, then the margins per
 * dim; the host adds row by row: rounding only). */
#define SG_PAD_GRAD_HD(T, S)                                             \
  static inline SG_HD T sg_pad_grad_cell_##S(                            \
      const int64_t *in, const int64_t *out, const int64_t *lo,          \
      const int *mode, const T *dpp, int64_t i) {                        \
    int64_t c[3], p0, p1, p2;                                            \
    sg_unflat3(in, i, c);                                                \
    T acc = 0;                                                           \
    for (int64_t s0 = 0; s0 <= out[0] - in[0]; ++s0) {                   \
      if (!sg_pad_cand(mode[0], in[0], out[0], lo[0], c[0], s0, &p0))    \
        continue;                                                        \
      for (int64_t s1 = 0; s1 <= out[1] - in[1]; ++s1) {                 \
        if (!sg_pad_cand(mode[1], in[1], out[1], lo[1], c[1], s1, &p1))  \
          continue;                                                      \
        for (int64_t s2 = 0; s2 <= out[2] - in[2]; ++s2)                 \
          if (sg_pad_cand(mode[2], in[2], out[2], lo[2], c[2], s2, &p2)) \
            acc += dpp[(p0 * out[1] + p1) * out[2] + p2];                \
      }                                                                  \
    }                                                                    \
    return acc;                                                          \
  }
SG_PAD_GRAD_HD(float, f32)
SG_PAD_GRAD_HD(double, f64)
#undef SG_PAD_GRAD_HD

#endif /* SG_OPS_INL_H */
