/* shardgrid — spectral convolution (FNO) and spectral derivatives. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fft_impl.h"
#include "sg_comm.h"
#include "sg_device.h"
#include "sg_spectral.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

struct sg_spectral_conv {
  sg_fft_desc desc;
  int64_t cin, cout, nb;
  sg_fft_plan_t pin, pout;          /* pout == pin when cin == cout */
  int64_t K[SG_FFT_MAX_DIMS], ktot; /* kept global lengths, their product */
  int64_t M;                        /* local modes */
  int64_t *gidx;                    /* global flat mode index of local m */
  /* The local modes as runs of consecutive global modes: nrun runs of
   * rlen modes, run r starting at global mode rbase[r] (rows of the local
   * box, or the whole box in one run when it is contiguous), so the
   * mixing loops read W with unit stride and vectorise. */
  int64_t nrun, rlen, *rbase;
  /* With several runs (a split spectrum: runs as short as the rank's share
   * of a row, 6 modes at 2 ranks), W's local modes are gathered into wloc
   * (cin, cout, M) once per call, so the kernels see one run of M modes. */
  void *wloc;
  void *xbuf, *ybuf, *zbuf;
  int64_t boff[SG_FFT_MAX_DIMS], blen[SG_FFT_MAX_DIMS]; /* local mode box */
  int wsharded; /* W and dW hold only the local modes (cin, cout, box) */
};

/* The run geometry the mixing kernels walk: R runs of L modes, run r at
 * mode rbase[r] of W's rows of K modes. */
typedef struct mix_geom {
  int64_t K, L, R;
  const int64_t *rbase;
} mix_geom;

static const int64_t zero_base = 0;

static mix_geom geom_natural(const struct sg_spectral_conv *c) {
  return (mix_geom){c->ktot, c->rlen, c->nrun, c->rbase};
}

static mix_geom geom_local(const struct sg_spectral_conv *c) {
  return (mix_geom){c->M, c->M, 1, &zero_base};
}

static int64_t prod64(const int64_t *v, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; ++i) p *= v[i];
  return p;
}

/* ---- channel mixing kernels ----------------------------------------------- */

/* Channel mixing over the local modes, run by run (see nrun/rlen/rbase):
 * W[i,o,k] of global mode k = rbase[r] + j for local mode m = r*rlen + j. */
#define SG_MIX_KERNELS(T, SFX)                                                         \
  static void mix_fwd_##SFX(const struct sg_spectral_conv *c,                          \
                            const mix_geom *g, const T *x, const T *w, T *y) {         \
    const int64_t nb = c->nb, ci = c->cin, co = c->cout, M = c->M, K = g->K,           \
                  L = g->L, R = g->R;                                                  \
    _Pragma(                                                                           \
        "omp parallel for collapse(2) schedule(static) if (nb * co * M * ci > 16384)") \
    for (int64_t b = 0; b < nb; ++b)                                                   \
      for (int64_t o = 0; o < co; ++o) {                                               \
        T *yo = y + 2 * (b * co + o) * M;                                              \
        for (int64_t m = 0; m < 2 * M; ++m) yo[m] = 0;                                 \
        for (int64_t i = 0; i < ci; ++i)                                               \
          for (int64_t r = 0; r < R; ++r) {                                            \
            const T *xi = x + 2 * ((b * ci + i) * M + r * L);                          \
            const T *wk = w + 2 * ((i * co + o) * K + g->rbase[r]);                    \
            T *yr = yo + 2 * r * L;                                                    \
            for (int64_t j = 0; j < L; ++j) {                                          \
              T wr = wk[2 * j], wi = wk[2 * j + 1];                                    \
              T xr = xi[2 * j], xim = xi[2 * j + 1];                                   \
              yr[2 * j] += xr * wr - xim * wi;                                         \
              yr[2 * j + 1] += xr * wi + xim * wr;                                     \
            }                                                                          \
          }                                                                            \
      }                                                                                \
  }                                                                                    \
  /* dx[b,i,m] = sum_o dy[b,o,m] conj(W[i,o,k]) */                                     \
  static void mix_bwd_x_##SFX(const struct sg_spectral_conv *c,                        \
                              const mix_geom *g, const T *dy, const T *w,              \
                              T *dx) {                                                 \
    const int64_t nb = c->nb, ci = c->cin, co = c->cout, M = c->M, K = g->K,           \
                  L = g->L, R = g->R;                                                  \
    _Pragma(                                                                           \
        "omp parallel for collapse(2) schedule(static) if (nb * co * M * ci > 16384)") \
    for (int64_t b = 0; b < nb; ++b)                                                   \
      for (int64_t i = 0; i < ci; ++i) {                                               \
        T *xo = dx + 2 * (b * ci + i) * M;                                             \
        for (int64_t m = 0; m < 2 * M; ++m) xo[m] = 0;                                 \
        for (int64_t o = 0; o < co; ++o)                                               \
          for (int64_t r = 0; r < R; ++r) {                                            \
            const T *d = dy + 2 * ((b * co + o) * M + r * L);                          \
            const T *wk = w + 2 * ((i * co + o) * K + g->rbase[r]);                    \
            T *xr_ = xo + 2 * r * L;                                                   \
            for (int64_t j = 0; j < L; ++j) {                                          \
              T wr = wk[2 * j], wi = wk[2 * j + 1];                                    \
              T dr = d[2 * j], di = d[2 * j + 1];                                      \
              xr_[2 * j] += dr * wr + di * wi;                                         \
              xr_[2 * j + 1] += di * wr - dr * wi;                                     \
            }                                                                          \
          }                                                                            \
      }                                                                                \
  }                                                                                    \
  /* dW[i,o,k] += sum_b conj(x[b,i,m]) dy[b,o,m] */                                    \
  static void mix_bwd_w_##SFX(const struct sg_spectral_conv *c,                        \
                              const mix_geom *g, const T *x, const T *dy,              \
                              T *dw) {                                                 \
    const int64_t nb = c->nb, ci = c->cin, co = c->cout, M = c->M, K = g->K,           \
                  L = g->L, R = g->R;                                                  \
    _Pragma(                                                                           \
        "omp parallel for collapse(2) schedule(static) if (nb * co * M * ci > 16384)") \
    for (int64_t i = 0; i < ci; ++i)                                                   \
      for (int64_t o = 0; o < co; ++o)                                                 \
        for (int64_t b = 0; b < nb; ++b)                                               \
          for (int64_t r = 0; r < R; ++r) {                                            \
            const T *xi = x + 2 * ((b * ci + i) * M + r * L);                          \
            const T *d = dy + 2 * ((b * co + o) * M + r * L);                          \
            T *wk = dw + 2 * ((i * co + o) * K + g->rbase[r]);                         \
            for (int64_t j = 0; j < L; ++j) {                                          \
              T xr = xi[2 * j], xim = xi[2 * j + 1];                                   \
              T dr = d[2 * j], di = d[2 * j + 1];                                      \
              wk[2 * j] += xr * dr + xim * di;                                         \
              wk[2 * j + 1] += xr * di - xim * dr;                                     \
            }                                                                          \
          }                                                                            \
  }                                                                                    \
  /* wl[i,o,m] = W[i,o,k(m)] (add == 0), or W[i,o,k(m)] += wl[i,o,m] */                \
  static void mix_local_##SFX(const struct sg_spectral_conv *c, T *W, T *wl,           \
                              int add) {                                               \
    const int64_t io = c->cin * c->cout, M = c->M, K = c->ktot, L = c->rlen,           \
                  R = c->nrun;                                                         \
    _Pragma("omp parallel for schedule(static) if (io * M > 16384)")                   \
    for (int64_t p = 0; p < io; ++p)                                                   \
      for (int64_t r = 0; r < R; ++r) {                                                \
        T *a = W + 2 * (p * K + c->rbase[r]), *b = wl + 2 * (p * M + r * L);           \
        if (add)                                                                       \
          for (int64_t j = 0; j < 2 * L; ++j) a[j] += b[j];                            \
        else                                                                           \
          for (int64_t j = 0; j < 2 * L; ++j) b[j] = a[j];                             \
      }                                                                                \
  }

SG_MIX_KERNELS(double, f64)
SG_MIX_KERNELS(float, f32)

/* ---- spectral convolution --------------------------------------------------- */

static sg_status conv_create(sg_mesh_t mesh, MPI_Comm comm, int naxes,
                             const MPI_Comm *axes, const sg_fft_desc *desc,
                             int64_t cin, int64_t cout,
                             sg_spectral_conv_t *out) {
  sg_status st = SG_OK;
  struct sg_spectral_conv *c = NULL;
  if (!out || !desc) SG_RAISE(SG_ERR_INVALID_ARG, "conv or desc is NULL");
  *out = NULL;
  if (cin < 1 || cout < 1)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "spectral conv channels must be >= 1 "
             "(cin %lld, cout %lld)",
             (long long)cin, (long long)cout);
  if (desc->ndim < 2 || desc->ndim > SG_FFT_MAX_DIMS)
    SG_RAISE(SG_ERR_INVALID_ARG, "spectral conv ndim must be 2 or 3");
  for (int d = 0; d < desc->ndim; ++d)
    if (desc->keep[d] < 1)
      SG_RAISE(SG_ERR_INVALID_ARG,
               "spectral conv keep[%d] must be >= 1 "
               "(got %lld)",
               d, (long long)desc->keep[d]);
  if (desc->batch < 1) SG_RAISE(SG_ERR_INVALID_ARG, "nbatch must be >= 1");
  if (desc->device.kind != SG_DEVICE_HOST)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "spectral conv runs on the host only "
                                   "(its channel mixing has no CUDA kernel)");
  c = calloc(1, sizeof *c);
  if (!c) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  c->desc = *desc;
  c->desc.norm = SG_FFT_NORM_BACKWARD;
  c->cin = cin;
  c->cout = cout;
  c->nb = desc->batch;
fail:
  /* agree on the argument checks before the (collective) plan creation */
  st = sg_fft_agree(comm, st);
  if (st != SG_OK) {
    free(c);
    return st;
  }
  {
    sg_fft_desc di = c->desc, dout = c->desc;
    di.batch = c->nb * cin;
    dout.batch = c->nb * cout;
    st = mesh ? sg_fft_plan_create(mesh, &di, &c->pin)
              : sg_fft_plan_create_comms(comm, naxes, axes, &di, &c->pin);
    if (st == SG_OK && cout != cin)
      st = mesh ? sg_fft_plan_create(mesh, &dout, &c->pout)
                : sg_fft_plan_create_comms(comm, naxes, axes, &dout, &c->pout);
    else
      c->pout = c->pin;
    if (st != SG_OK) {
      sg_spectral_conv_destroy(&c);
      return st;
    }
  }
  {
    const int D = c->desc.ndim;
    int64_t off[SG_FFT_MAX_DIMS], len[SG_FFT_MAX_DIMS];
    sg_fft_layout sl;
    sg_fft_plan_layout(c->pin, SG_FFT_SPACE_SPECTRAL, &sl);
    sg_fft_plan_local_box(c->pin, SG_FFT_SPACE_SPECTRAL, off, len);
    for (int d = 0; d < D; ++d) {
      c->K[d] = sl.shape[d];
      c->boff[d] = off[d];
      c->blen[d] = len[d];
    }
    c->ktot = prod64(c->K, D);
    c->M = prod64(len, D);
    c->gidx = malloc(sizeof(int64_t) * (size_t)(c->M > 0 ? c->M : 1));
    if (!c->gidx) {
      st = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
    } else {
      for (int64_t m = 0; m < c->M; ++m) {
        int64_t rem = m, gi = 0, mul = 1;
        for (int d = D - 1; d >= 0; --d) {
          int64_t j = rem % len[d];
          rem /= len[d];
          gi += (off[d] + j) * mul;
          mul *= c->K[d];
        }
        c->gidx[m] = gi;
      }
      /* runs: rows of the local box (its innermost extent), or one run */
      int contiguous = 1;
      for (int64_t m = 0; m < c->M && contiguous; ++m)
        contiguous = c->gidx[m] == c->gidx[0] + m;
      c->rlen = contiguous ? c->M : len[D - 1];
      c->nrun = c->rlen > 0 ? c->M / c->rlen : 0;
      c->rbase = malloc(sizeof(int64_t) * (size_t)(c->nrun > 0 ? c->nrun : 1));
      if (!c->rbase)
        st = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
      for (int64_t r = 0; c->rbase && r < c->nrun; ++r)
        c->rbase[r] = c->gidx[r * c->rlen];
      size_t es = sg_dtype_size(c->desc.dtype);
      size_t bi = (size_t)(2 * c->nb * cin * c->M) * es;
      size_t bo = (size_t)(2 * c->nb * cout * c->M) * es;
      if (st == SG_OK) st = sg_malloc(sg_device_host(), bi ? bi : 64, &c->xbuf);
      if (st == SG_OK) st = sg_malloc(sg_device_host(), bo ? bo : 64, &c->ybuf);
      if (st == SG_OK) st = sg_malloc(sg_device_host(), bi ? bi : 64, &c->zbuf);
      if (st == SG_OK && c->nrun > 1)
        st = sg_malloc(sg_device_host(), (size_t)(2 * cin * cout * c->M) * es,
                       &c->wloc);
    }
  }
  st = sg_fft_agree(comm, st);
  if (st != SG_OK) {
    sg_spectral_conv_destroy(&c);
    return st;
  }
  *out = c;
  return SG_OK;
}

sg_status sg_spectral_conv_create(sg_mesh_t mesh, const sg_fft_desc *desc,
                                  int64_t cin, int64_t cout,
                                  sg_spectral_conv_t *conv) {
  if (!mesh)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_spectral_conv_create: mesh is NULL");
  return conv_create(mesh, sg_mesh_comm(mesh), 0, NULL, desc, cin, cout, conv);
}

sg_status sg_spectral_conv_create_comms(MPI_Comm comm, int naxes,
                                        const MPI_Comm *axes,
                                        const sg_fft_desc *desc, int64_t cin,
                                        int64_t cout,
                                        sg_spectral_conv_t *conv) {
  return conv_create(NULL, comm, naxes, axes, desc, cin, cout, conv);
}

sg_status sg_spectral_conv_destroy(sg_spectral_conv_t *conv) {
  if (!conv || !*conv) return SG_OK;
  struct sg_spectral_conv *c = *conv;
  if (c->pout != c->pin) sg_fft_plan_destroy(&c->pout);
  sg_fft_plan_destroy(&c->pin);
  free(c->gidx);
  free(c->rbase);
  sg_free(sg_device_host(), &c->xbuf);
  sg_free(sg_device_host(), &c->ybuf);
  sg_free(sg_device_host(), &c->zbuf);
  if (c->wloc) sg_free(sg_device_host(), &c->wloc);
  free(c);
  *conv = NULL;
  return SG_OK;
}

int64_t sg_spectral_conv_weight_count(sg_spectral_conv_t c) {
  return 2 * c->cin * c->cout * c->ktot;
}

int64_t sg_spectral_conv_local_weight_count(sg_spectral_conv_t c) {
  return 2 * c->cin * c->cout * c->M;
}

int sg_spectral_conv_weight_box(sg_spectral_conv_t c, int64_t *kept,
                                int64_t *offset, int64_t *extent) {
  for (int d = 0; d < c->desc.ndim; ++d) {
    if (kept) kept[d] = c->K[d];
    if (offset) offset[d] = c->boff[d];
    if (extent) extent[d] = c->blen[d];
  }
  return c->desc.ndim;
}

sg_status sg_spectral_conv_set_weight_layout(sg_spectral_conv_t c,
                                             sg_spectral_weight_layout l) {
  if (!c)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__, "conv is NULL");
  if (l != SG_SPECTRAL_WEIGHT_REPLICATE && l != SG_SPECTRAL_WEIGHT_SHARD_MODES)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "unknown spectral weight layout %d", (int)l);
  c->wsharded = l == SG_SPECTRAL_WEIGHT_SHARD_MODES;
  /* the gather buffer serves replicated W on a split spectrum only */
  if (c->wsharded && c->wloc) sg_free(sg_device_host(), &c->wloc);
  if (!c->wsharded && !c->wloc && c->nrun > 1)
    return sg_malloc(sg_device_host(),
                     (size_t)(2 * c->cin * c->cout * c->M) *
                         sg_dtype_size(c->desc.dtype),
                     &c->wloc);
  return SG_OK;
}

int64_t sg_spectral_conv_spectrum_count(sg_spectral_conv_t c) {
  return 2 * c->nb * c->cin * c->M;
}

sg_fft_plan_t sg_spectral_conv_plan(sg_spectral_conv_t c, int output) {
  return output ? c->pout : c->pin;
}

sg_status sg_spectral_conv_forward(sg_spectral_conv_t c, const void *x,
                                   const void *w, void *y, void *xhat) {
  sg_status st = SG_OK;
  if (!c) SG_RAISE(SG_ERR_INVALID_ARG, "conv is NULL");
  void *xh = xhat ? xhat : c->xbuf;
  SG_TRY(sg_fft_forward(c->pin, x, xh));
  const int f64 = c->desc.dtype == SG_DTYPE_F64;
  mix_geom g = geom_natural(c);
  if (c->wsharded) {
    g = geom_local(c); /* W holds exactly the local modes, in box order */
  } else if (c->wloc) {
    if (f64)
      mix_local_f64(c, (double *)(uintptr_t)w, c->wloc, 0);
    else
      mix_local_f32(c, (float *)(uintptr_t)w, c->wloc, 0);
    g = geom_local(c);
    w = c->wloc;
  }
  if (f64)
    mix_fwd_f64(c, &g, xh, w, c->ybuf);
  else
    mix_fwd_f32(c, &g, xh, w, c->ybuf);
  SG_TRY(sg_fft_inverse(c->pout, c->ybuf, y));
fail:
  return st;
}

sg_status sg_spectral_conv_backward(sg_spectral_conv_t c, const void *x,
                                    const void *xhat, const void *w,
                                    const void *dy, void *dx, void *dw) {
  sg_status st = SG_OK;
  if (!c) SG_RAISE(SG_ERR_INVALID_ARG, "conv is NULL");
  /* no shortcut when dx and dw are NULL: a rank without local modes gets
   * dw NULL while the others compute theirs (a split backward's W), and
   * the adjoint below is collective */
  const int f64 = c->desc.dtype == SG_DTYPE_F64;
  /* dyhat = Inv^T dy */
  SG_TRY(sg_fft_inverse_adjoint(c->pout, dy, c->ybuf));
  if (dw) {
    const void *xh = xhat;
    if (!xh) {
      SG_TRY(sg_fft_forward(c->pin, x, c->xbuf));
      xh = c->xbuf;
    }
    if (c->wsharded) {
      const mix_geom g = geom_local(c);
      if (f64)
        mix_bwd_w_f64(c, &g, xh, c->ybuf, dw);
      else
        mix_bwd_w_f32(c, &g, xh, c->ybuf, dw);
    } else if (c->wloc) {
      /* accumulate the local modes' gradient in wloc, then add it in */
      const mix_geom g = geom_local(c);
      memset(c->wloc, 0,
             (size_t)(2 * c->cin * c->cout * c->M) *
                 sg_dtype_size(c->desc.dtype));
      if (f64) {
        mix_bwd_w_f64(c, &g, xh, c->ybuf, c->wloc);
        mix_local_f64(c, dw, c->wloc, 1);
      } else {
        mix_bwd_w_f32(c, &g, xh, c->ybuf, c->wloc);
        mix_local_f32(c, dw, c->wloc, 1);
      }
    } else {
      const mix_geom g = geom_natural(c);
      if (f64)
        mix_bwd_w_f64(c, &g, xh, c->ybuf, dw);
      else
        mix_bwd_w_f32(c, &g, xh, c->ybuf, dw);
    }
  }
  if (dx) {
    mix_geom g = geom_natural(c);
    if (c->wsharded) {
      g = geom_local(c);
    } else if (c->wloc) {
      if (f64)
        mix_local_f64(c, (double *)(uintptr_t)w, c->wloc, 0);
      else
        mix_local_f32(c, (float *)(uintptr_t)w, c->wloc, 0);
      g = geom_local(c);
      w = c->wloc;
    }
    if (f64)
      mix_bwd_x_f64(c, &g, c->ybuf, w, c->zbuf);
    else
      mix_bwd_x_f32(c, &g, c->ybuf, w, c->zbuf);
    SG_TRY(sg_fft_forward_adjoint(c->pin, c->zbuf, dx));
  }
fail:
  return st;
}

/* ---- spectral derivatives ------------------------------------------------- */

sg_status sg_spectral_apply(sg_fft_plan_t plan, sg_spectral_op op, int dim,
                            const double *lengths, void *yhat) {
  sg_status st = SG_OK;
  double *fr = NULL, *fi = NULL, *kap[SG_FFT_MAX_DIMS] = {NULL, NULL, NULL};
  char *nyq[SG_FFT_MAX_DIMS] = {NULL, NULL, NULL};
  if (!plan) SG_RAISE(SG_ERR_INVALID_ARG, "plan is NULL");
  const sg_fft_desc *desc = sg_fft_plan_desc(plan);
  const int D = desc->ndim;
  if (desc->device.kind != SG_DEVICE_HOST)
    SG_RAISE(SG_ERR_NOT_SUPPORTED,
             "spectral derivatives run on host plans only");
  if (op != SG_SPECTRAL_DERIV && op != SG_SPECTRAL_LAPLACIAN &&
      op != SG_SPECTRAL_INV_LAPLACIAN)
    SG_RAISE(SG_ERR_INVALID_ARG, "unknown spectral op %d", (int)op);
  if (op == SG_SPECTRAL_DERIV && (dim < 0 || dim >= D))
    SG_RAISE(SG_ERR_INVALID_ARG, "derivative dim %d out of range [0, %d)", dim,
             D);
  for (int d = 0; lengths && d < D; ++d)
    if (!(lengths[d] > 0))
      SG_RAISE(SG_ERR_INVALID_ARG, "box length %d must be > 0", d);
  int64_t off[SG_FFT_MAX_DIMS], len[SG_FFT_MAX_DIMS];
  sg_fft_plan_local_box(plan, SG_FFT_SPACE_SPECTRAL, off, len);
  const int64_t S = prod64(len, D), B = desc->batch;
  if (S == 0) return SG_OK;
  for (int d = 0; d < D; ++d) {
    kap[d] = malloc(sizeof(double) * (size_t)len[d]);
    nyq[d] = malloc((size_t)len[d]);
    if (!kap[d] || !nyq[d]) SG_RAISE(SG_ERR_ALLOC, "out of memory");
    double L = lengths ? lengths[d] : 2 * M_PI;
    int64_t n = desc->shape[d];
    for (int64_t j = 0; j < len[d]; ++j) {
      int64_t k = sg_fft_plan_freq(plan, d, off[d] + j);
      kap[d][j] = 2 * M_PI * (double)k / L;
      nyq[d][j] = (char)(n % 2 == 0 && (k == n / 2 || k == -n / 2));
    }
  }
  fr = malloc(sizeof(double) * (size_t)S);
  fi = malloc(sizeof(double) * (size_t)S);
  if (!fr || !fi) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  for (int64_t s = 0; s < S; ++s) {
    int64_t rem = s, j[SG_FFT_MAX_DIMS];
    for (int d = D - 1; d >= 0; --d) {
      j[d] = rem % len[d];
      rem /= len[d];
    }
    double k2 = 0;
    for (int d = 0; d < D; ++d) k2 += kap[d][j[d]] * kap[d][j[d]];
    if (op == SG_SPECTRAL_DERIV) {
      fr[s] = 0;
      fi[s] = nyq[dim][j[dim]] ? 0.0 : kap[dim][j[dim]];
    } else if (op == SG_SPECTRAL_LAPLACIAN) {
      fr[s] = -k2;
      fi[s] = 0;
    } else {
      fr[s] = k2 > 0 ? -1.0 / k2 : 0.0;
      fi[s] = 0;
    }
  }
  if (desc->dtype == SG_DTYPE_F64) {
    double *y = yhat;
#pragma omp parallel for schedule(static) if (B * S > 32768)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s) {
        double *v = y + 2 * (b * S + s), re = v[0], im = v[1];
        v[0] = re * fr[s] - im * fi[s];
        v[1] = re * fi[s] + im * fr[s];
      }
  } else {
    float *y = yhat;
#pragma omp parallel for schedule(static) if (B * S > 32768)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s) {
        float *v = y + 2 * (b * S + s);
        double re = v[0], im = v[1];
        v[0] = (float)(re * fr[s] - im * fi[s]);
        v[1] = (float)(re * fi[s] + im * fr[s]);
      }
  }
fail:
  free(fr);
  free(fi);
  for (int d = 0; d < SG_FFT_MAX_DIMS; ++d) {
    free(kap[d]);
    free(nyq[d]);
  }
  return st;
}

static sg_status real_op(sg_fft_plan_t plan, sg_spectral_op op, int dim,
                         const double *lengths, const void *x, void *out,
                         void *work) {
  sg_status st = SG_OK;
  void *own = NULL;
  if (!plan) SG_RAISE(SG_ERR_INVALID_ARG, "plan is NULL");
  const sg_fft_desc *desc = sg_fft_plan_desc(plan);
  int64_t nc = sg_fft_plan_local_count(plan, SG_FFT_SPACE_SPECTRAL);
  if (!work) {
    SG_TRY(sg_malloc(sg_device_host(),
                     (size_t)(nc > 0 ? nc : 1) * sg_dtype_size(desc->dtype),
                     &own));
    work = own;
  }
  SG_TRY(sg_fft_forward(plan, x, work));
  SG_TRY(sg_spectral_apply(plan, op, dim, lengths, work));
  if (desc->norm == SG_FFT_NORM_NONE) {
    double n = 1;
    for (int d = 0; d < desc->ndim; ++d) n *= (double)desc->shape[d];
    if (desc->dtype == SG_DTYPE_F64)
      for (int64_t i = 0; i < nc; ++i) ((double *)work)[i] /= n;
    else
      for (int64_t i = 0; i < nc; ++i) ((float *)work)[i] /= (float)n;
  }
  SG_TRY(sg_fft_inverse(plan, work, out));
fail:
  sg_free(sg_device_host(), &own);
  return st;
}

sg_status sg_spectral_derivative(sg_fft_plan_t plan, int dim,
                                 const double *lengths, const void *x,
                                 void *out, void *work) {
  return real_op(plan, SG_SPECTRAL_DERIV, dim, lengths, x, out, work);
}

sg_status sg_spectral_laplacian(sg_fft_plan_t plan, const double *lengths,
                                const void *x, void *out, void *work) {
  return real_op(plan, SG_SPECTRAL_LAPLACIAN, 0, lengths, x, out, work);
}

sg_status sg_spectral_inv_laplacian(sg_fft_plan_t plan, const double *lengths,
                                    const void *x, void *out, void *work) {
  return real_op(plan, SG_SPECTRAL_INV_LAPLACIAN, 0, lengths, x, out, work);
}
