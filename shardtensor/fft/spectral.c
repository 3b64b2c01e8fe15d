/* shardgrid — spectral convolution (FNO) and spectral derivatives. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fft_plan_impl.h"
#include "mix_impl.h"
#include "ops_impl.h"
#include "sg_comm.h"
#include "sg_config.h"
#include "sg_device.h"
#include "sg_spec_inl.h"
#include "sg_spectral.h"
#if SG_HAVE_CUDA
#include "spectral_cuda.h"
#endif

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
  void *xbuf, *ybuf, *zbuf;
  /* planar copies the mixing kernels run on (see mix_blk): the input-side
   * spectrum (nb*cin rows), the output side (nb*cout), W's local modes */
  void *xp, *yp, *wp;
  int64_t boff[SG_FFT_MAX_DIMS], blen[SG_FFT_MAX_DIMS]; /* local mode box */
  int wsharded; /* W and dW hold only the local modes (cin, cout, box) */
  /* the device path's cuFFT plans and scratch (made on first use) */
  struct sg_spectral_cuda *cuda;
  /* the plans' communicators (the split domain's device path makes its own
   * plans over them) */
  sg_mesh_t mesh; /* sg_spectral_conv_create's, else NULL */
  MPI_Comm comm;
  int naxes;
  MPI_Comm axes[SG_FFT_MAX_AXES];
  struct spec_dev *dev; /* the split domain's device path (made on use) */
};

/* The device path on a split domain (sg_spectral_conv_forward_dev): plans
 * with device stages on the pointers' device (host memory: FFTW, the
 * device path's steps on the host), the comm layer's group of each of
 * their axes, the kept spectra and W's local modes. */
typedef struct spec_dev {
  sg_device dev;
  sg_mesh_t mesh;
  sg_fft_plan_t pin, pout; /* pout == pin when cin == cout */
  sg_group_t grp[SG_FFT_MAX_AXES];
  void *xk, *yk, *zk, *wl;
  int64_t *gidx; /* on dev: the global kept index of each local mode */
} spec_dev;

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

/* The mixing runs on planar copies: each row (one (b, channel) spectrum or
 * one (i, o) weight) holds the M local modes' real parts, then their
 * imaginary parts, each padded with zeros to Mp, a multiple of SG_MIX_CH.
 * The kernel then keeps a block of SG_MIX_Q output rows x SG_MIX_CH modes
 * in registers across the whole sum (vectorised FMAs, no shuffles, one
 * load of the shared operand per block), where the interleaved loop it
 * replaces reloaded and stored its output row for every summand. */
/* SG_MIX_CH, SG_MIX_Q: mix_impl.h */

static int64_t mix_padded(int64_t M) {
  return (M + SG_MIX_CH - 1) / SG_MIX_CH * SG_MIX_CH;
}

/* The block product (mix_impl.h); f32 on a CPU with AVX2 but not AVX-512
 * runs mix_avx2.c's kernel, the same bits (the portable one spills its 16
 * vectors of sums there, or 32 in a baseline build). */
typedef sg_mix_blk mix_blk;

static int mix_avx2(void) {
  return sg_mix_avx2_built() && sg_simd_avx2() && !sg_simd_avx512();
}

#define SG_MIX_PLANAR(T, SFX)                                                     \
  static inline void mix_blk_##SFX(const mix_blk *k, const int Q, const T sgn,    \
                                   int64_t j0, const T *a, const T *b,            \
                                   T *out) {                                      \
    const int64_t Mp = k->Mp;                                                     \
    T cr[SG_MIX_Q][SG_MIX_CH] = {{0}}, ci[SG_MIX_Q][SG_MIX_CH] = {{0}};           \
    for (int64_t s = 0; s < k->S; ++s) {                                          \
      const T *ar = a + s * k->sa + j0, *ai = ar + Mp;                            \
      for (int q = 0; q < Q; ++q) {                                               \
        const T *br = b + q * k->bq + s * k->sb + j0, *bi = br + Mp;              \
        for (int t = 0; t < SG_MIX_CH; ++t) {                                     \
          const T vi = sgn * bi[t];                                               \
          cr[q][t] += ar[t] * br[t] - ai[t] * vi;                                 \
          ci[q][t] += ar[t] * vi + ai[t] * br[t];                                 \
        }                                                                         \
      }                                                                           \
    }                                                                             \
    for (int q = 0; q < Q; ++q) {                                                 \
      T *orr = out + q * k->oq + j0, *oi = orr + Mp;                              \
      for (int t = 0; t < SG_MIX_CH; ++t) {                                       \
        orr[t] = cr[q][t];                                                        \
        oi[t] = ci[q][t];                                                         \
      }                                                                           \
    }                                                                             \
  }                                                                               \
  /* Q = SG_MIX_Q and the sign as constants (unrolled, in registers) */           \
  static inline void mix_run_sgn_##SFX(const mix_blk *k, int64_t Q,               \
                                       const T sgn, const T *a, const T *b,       \
                                       T *out) {                                  \
    _Pragma(                                                                      \
        "omp parallel for schedule(static) if (k->N * Q * k->Mp * k->S > 16384)") \
    for (int64_t j0 = 0; j0 < k->Mp; j0 += SG_MIX_CH) {                           \
      int64_t q = 0;                                                              \
      for (; q + SG_MIX_Q <= Q; q += SG_MIX_Q)                                    \
        for (int64_t n = 0; n < k->N; ++n)                                        \
          mix_blk_##SFX(k, SG_MIX_Q, sgn, j0, a + n * k->an, b + q * k->bq,       \
                        out + n * k->on + q * k->oq);                             \
      for (; q < Q; ++q)                                                          \
        for (int64_t n = 0; n < k->N; ++n)                                        \
          mix_blk_##SFX(k, 1, sgn, j0, a + n * k->an, b + q * k->bq,              \
                        out + n * k->on + q * k->oq);                             \
    }                                                                             \
  }                                                                               \
  static void mix_run_##SFX(const mix_blk *k, int64_t Q, const T *a,              \
                            const T *b, T *out) {                                 \
    if (sizeof(T) == sizeof(float) && mix_avx2()) {                               \
      sg_mix_run_avx2_f32(k, Q, (const float *)(const void *)a,                   \
                          (const float *)(const void *)b,                         \
                          (float *)(void *)out);                                  \
      return;                                                                     \
    }                                                                             \
    if (k->conj_b)                                                                \
      mix_run_sgn_##SFX(k, Q, (T)-1, a, b, out);                                  \
    else                                                                          \
      mix_run_sgn_##SFX(k, Q, (T)1, a, b, out);                                   \
  }                                                                               \
  /* rows of M interleaved modes <-> planar rows (zero padded) */                 \
  static void mix_to_planar_##SFX(int64_t rows, int64_t M, const T *src,          \
                                  T *dst) {                                       \
    const int64_t Mp = mix_padded(M);                                             \
    _Pragma("omp parallel for schedule(static) if (rows * M > 32768)")            \
    for (int64_t r = 0; r < rows; ++r) {                                          \
      const T *s = src + 2 * r * M;                                               \
      T *dr = dst + 2 * r * Mp, *di = dr + Mp;                                    \
      for (int64_t m = 0; m < M; ++m) {                                           \
        dr[m] = s[2 * m];                                                         \
        di[m] = s[2 * m + 1];                                                     \
      }                                                                           \
      for (int64_t m = M; m < Mp; ++m) dr[m] = di[m] = 0;                         \
    }                                                                             \
  }                                                                               \
  static void mix_from_planar_##SFX(int64_t rows, int64_t M, const T *src,        \
                                    T *dst) {                                     \
    const int64_t Mp = mix_padded(M);                                             \
    _Pragma("omp parallel for schedule(static) if (rows * M > 32768)")            \
    for (int64_t r = 0; r < rows; ++r) {                                          \
      const T *sr = src + 2 * r * Mp, *si = sr + Mp;                              \
      T *d = dst + 2 * r * M;                                                     \
      for (int64_t m = 0; m < M; ++m) {                                           \
        d[2 * m] = sr[m];                                                         \
        d[2 * m + 1] = si[m];                                                     \
      }                                                                           \
    }                                                                             \
  }                                                                               \
  /* W's local modes (geometry g) -> planar rows wp[i, o] (add == 0), or      \
   * W[i, o, k(m)] += wp[i, o, m] (add == 1); the two loops apart, so each     \
   * vectorises */   \
  static void mix_weight_##SFX(const struct sg_spectral_conv *c,                  \
                               const mix_geom *g, T *W, T *wp, int add) {         \
    const int64_t io = c->cin * c->cout, M = c->M, Mp = mix_padded(M);            \
    const int64_t K = g->K, L = g->L, R = g->R;                                   \
    _Pragma("omp parallel for schedule(static) if (io * M > 32768)")              \
    for (int64_t p = 0; p < io; ++p) {                                            \
      T *pr = wp + 2 * p * Mp, *pi = pr + Mp;                                     \
      for (int64_t r = 0; r < R; ++r) {                                           \
        T *w = W + 2 * (p * K + g->rbase[r]);                                     \
        T *qr = pr + r * L, *qi = pi + r * L;                                     \
        if (add)                                                                  \
          for (int64_t j = 0; j < L; ++j) {                                       \
            w[2 * j] += qr[j];                                                    \
            w[2 * j + 1] += qi[j];                                                \
          }                                                                       \
        else                                                                      \
          for (int64_t j = 0; j < L; ++j) {                                       \
            qr[j] = w[2 * j];                                                     \
            qi[j] = w[2 * j + 1];                                                 \
          }                                                                       \
      }                                                                           \
      for (int64_t m = M; !add && m < Mp; ++m) pr[m] = pi[m] = 0;                 \
    }                                                                             \
  }                                                                               \
  /* y[b, o] = sum_i x[b, i] W[i, o] (planar) */                                  \
  static void mix_fwd_##SFX(const struct sg_spectral_conv *c, const T *x,         \
                            const T *w, T *y) {                                   \
    const int64_t ci = c->cin, co = c->cout, P = 2 * mix_padded(c->M);            \
    const mix_blk k = {P / 2, ci, P, co * P, P, P, c->nb, ci * P, co * P, 0};     \
    mix_run_##SFX(&k, co, x, w, y);                                               \
  }                                                                               \
  /* dx[b, i] = sum_o dy[b, o] conj(W[i, o]) (planar) */                          \
  static void mix_bwd_x_##SFX(const struct sg_spectral_conv *c, const T *dy,      \
                              const T *w, T *dx) {                                \
    const int64_t ci = c->cin, co = c->cout, P = 2 * mix_padded(c->M);            \
    const mix_blk k = {P / 2, co, P, P, co * P, P, c->nb, co * P, ci * P, 1};     \
    mix_run_##SFX(&k, ci, dy, w, dx);                                             \
  }                                                                               \
  /* dW[i, o] = sum_b dy[b, o] conj(x[b, i]) (planar, overwritten) */             \
  static void mix_bwd_w_##SFX(const struct sg_spectral_conv *c, const T *x,       \
                              const T *dy, T *dw) {                               \
    const int64_t ci = c->cin, co = c->cout, P = 2 * mix_padded(c->M);            \
    const mix_blk k = {P / 2, c->nb, co * P, ci * P, P, co * P, co, P, P, 1};     \
    mix_run_##SFX(&k, ci, dy, x, dw);                                             \
  }

SG_MIX_PLANAR(double, f64)
SG_MIX_PLANAR(float, f32)

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
    SG_RAISE(SG_ERR_NOT_SUPPORTED,
             "spectral conv plans are host plans (device data, one process: "
             "sg_spectral_conv_forward_cuda with this host desc)");
  c = calloc(1, sizeof *c);
  if (!c) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  c->desc = *desc;
  c->desc.norm = SG_FFT_NORM_BACKWARD;
  c->cin = cin;
  c->cout = cout;
  c->nb = desc->batch;
  c->mesh = mesh;
  c->comm = comm;
  c->naxes = naxes;
  for (int a = 0; a < naxes && a < SG_FFT_MAX_AXES; ++a) c->axes[a] = axes[a];
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
      /* at least one padded row: a rank may hold no modes */
      const size_t P = (size_t)(2 * mix_padded(c->M > 0 ? c->M : 1)) * es;
      if (st == SG_OK)
        st = sg_malloc(sg_device_host(), (size_t)(c->nb * cin) * P, &c->xp);
      if (st == SG_OK)
        st = sg_malloc(sg_device_host(), (size_t)(c->nb * cout) * P, &c->yp);
      if (st == SG_OK)
        st = sg_malloc(sg_device_host(), (size_t)(cin * cout) * P, &c->wp);
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

static void spec_dev_free(struct sg_spectral_conv *c);

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
  sg_free(sg_device_host(), &c->xp);
  sg_free(sg_device_host(), &c->yp);
  sg_free(sg_device_host(), &c->wp);
#if SG_HAVE_CUDA
  sg_spectral_cuda_destroy(&c->cuda);
#endif
  spec_dev_free(c);
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
  return SG_OK;
}

int64_t sg_spectral_conv_spectrum_count(sg_spectral_conv_t c) {
  return 2 * c->nb * c->cin * c->M;
}

sg_fft_plan_t sg_spectral_conv_plan(sg_spectral_conv_t c, int output) {
  return output ? c->pout : c->pin;
}

/* W's geometry: exactly the local modes in box order when sharded, else
 * the local runs of the whole spectrum */
static mix_geom conv_geom(const struct sg_spectral_conv *c) {
  return c->wsharded ? geom_local(c) : geom_natural(c);
}

/* wp = W's local modes, planar */
static void gather_w(struct sg_spectral_conv *c, const mix_geom *g,
                     const void *w, int f64) {
  if (f64)
    mix_weight_f64(c, g, (double *)(uintptr_t)w, c->wp, 0);
  else
    mix_weight_f32(c, g, (float *)(uintptr_t)w, c->wp, 0);
}

sg_status sg_spectral_conv_forward(sg_spectral_conv_t c, const void *x,
                                   const void *w, void *y, void *xhat) {
  sg_status st = SG_OK;
  if (!c) SG_RAISE(SG_ERR_INVALID_ARG, "conv is NULL");
  void *xh = xhat ? xhat : c->xbuf;
  SG_TRY(sg_fft_forward(c->pin, x, xh));
  const int f64 = c->desc.dtype == SG_DTYPE_F64;
  const mix_geom g = conv_geom(c);
  const int64_t M = c->M, ri = c->nb * c->cin, ro = c->nb * c->cout;
  gather_w(c, &g, w, f64);
  if (f64) {
    mix_to_planar_f64(ri, M, xh, c->xp);
    mix_fwd_f64(c, c->xp, c->wp, c->yp);
    mix_from_planar_f64(ro, M, c->yp, c->ybuf);
  } else {
    mix_to_planar_f32(ri, M, xh, c->xp);
    mix_fwd_f32(c, c->xp, c->wp, c->yp);
    mix_from_planar_f32(ro, M, c->yp, c->ybuf);
  }
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
  const mix_geom g = conv_geom(c);
  const int64_t M = c->M, ri = c->nb * c->cin, ro = c->nb * c->cout;
  /* dyhat = Inv^T dy */
  SG_TRY(sg_fft_inverse_adjoint(c->pout, dy, c->ybuf));
  if (dw || dx) {
    if (f64)
      mix_to_planar_f64(ro, M, c->ybuf, c->yp);
    else
      mix_to_planar_f32(ro, M, c->ybuf, c->yp);
  }
  if (dw) {
    const void *xh = xhat;
    if (!xh) {
      SG_TRY(sg_fft_forward(c->pin, x, c->xbuf));
      xh = c->xbuf;
    }
    /* the local modes' gradient in wp, then added into dW */
    if (f64) {
      mix_to_planar_f64(ri, M, xh, c->xp);
      mix_bwd_w_f64(c, c->xp, c->yp, c->wp);
      mix_weight_f64(c, &g, dw, c->wp, 1);
    } else {
      mix_to_planar_f32(ri, M, xh, c->xp);
      mix_bwd_w_f32(c, c->xp, c->yp, c->wp);
      mix_weight_f32(c, &g, dw, c->wp, 1);
    }
  }
  if (dx) {
    gather_w(c, &g, w, f64);
    if (f64) {
      mix_bwd_x_f64(c, c->yp, c->wp, c->xp);
      mix_from_planar_f64(ri, M, c->xp, c->zbuf);
    } else {
      mix_bwd_x_f32(c, c->yp, c->wp, c->xp);
      mix_from_planar_f32(ri, M, c->xp, c->zbuf);
    }
    SG_TRY(sg_fft_forward_adjoint(c->pin, c->zbuf, dx));
  }
fail:
  return st;
}

/* ---- the device path (one process) ----------------------------------------- */

/* The convolution's device state, made on first use: refused unless this
 * rank holds the whole domain and every kept mode (one process, or an
 * unsplit transform). */
static sg_status conv_cuda(struct sg_spectral_conv *c, const char *what) {
  sg_status st = SG_OK;
  if (!c) SG_RAISE(SG_ERR_INVALID_ARG, "%s: conv is NULL", what);
#if SG_HAVE_CUDA
  if (c->cuda) return SG_OK;
  int64_t off[SG_FFT_MAX_DIMS], len[SG_FFT_MAX_DIMS];
  sg_fft_plan_local_box(c->pin, SG_FFT_SPACE_REAL, off, len);
  int whole = c->M == c->ktot;
  for (int d = 0; d < c->desc.ndim; ++d) whole &= len[d] == c->desc.shape[d];
  if (!whole)
    SG_RAISE(SG_ERR_NOT_SUPPORTED,
             "%s: the domain is split over ranks (this path runs one "
             "process's whole transform; a split domain: "
             "sg_spectral_conv_forward_dev / _backward_dev)",
             what);
  sg_spec_geo g;
  sg_spec_geo_init(&g, c->desc.ndim, c->desc.shape, c->desc.keep);
  SG_TRY(sg_spectral_cuda_create(c->desc.dtype, &g, c->nb, c->cin, c->cout,
                                 &c->cuda));
#else
  SG_RAISE(SG_ERR_NOT_SUPPORTED, "%s: shardgrid was built without CUDA", what);
#endif
fail:
  return st;
}

sg_status sg_spectral_conv_forward_cuda(sg_spectral_conv_t c, const void *x,
                                        const void *w, void *y, void *xhat) {
  sg_status st = SG_OK;
  SG_TRY(conv_cuda(c, "sg_spectral_conv_forward_cuda"));
#if SG_HAVE_CUDA
  SG_TRY(sg_spectral_cuda_forward(c->cuda, x, w, y, xhat));
#else
  (void)x, (void)w, (void)y, (void)xhat;
#endif
fail:
  return st;
}

sg_status sg_spectral_conv_backward_cuda(sg_spectral_conv_t c, const void *x,
                                         const void *xhat, const void *w,
                                         const void *dy, void *dx, void *dw) {
  sg_status st = SG_OK;
  SG_TRY(conv_cuda(c, "sg_spectral_conv_backward_cuda"));
#if SG_HAVE_CUDA
  SG_TRY(sg_spectral_cuda_backward(c->cuda, x, xhat, w, dy, dx, dw));
#else
  (void)x, (void)xhat, (void)w, (void)dy, (void)dx, (void)dw;
#endif
fail:
  return st;
}

/* ---- the device path on a split domain -------------------------------------- */

static int dev_host_memory(sg_device dev) { return dev.kind == SG_DEVICE_HOST; }

static sg_status dev_alloc(sg_device dev, size_t bytes, void **p) {
  return sg_malloc(dev, bytes ? bytes : 64, p);
}

static void spec_dev_free(struct sg_spectral_conv *c) {
  spec_dev *s = c->dev;
  if (!s) return;
  if (s->pout != s->pin) sg_fft_plan_destroy(&s->pout);
  sg_fft_plan_destroy(&s->pin);
  void **bufs[5] = {&s->xk, &s->yk, &s->zk, &s->wl, (void **)&s->gidx};
  for (int i = 0; i < 5; ++i) sg_free(s->dev, bufs[i]);
  free(s);
  c->dev = NULL;
}

/* The comm layer's group of the mesh whose communicator is comm's (the
 * same ranks in the same order), NULL when comm has one rank. */
static sg_status axis_group(sg_mesh_t mesh, sg_device dev, MPI_Comm comm, int a,
                            sg_group_t *out) {
  sg_status st = SG_OK;
  int size = 1;
  *out = NULL;
  if (comm == MPI_COMM_NULL) goto fail;
  SG_MPI(MPI_Comm_size(comm, &size));
  if (size <= 1) goto fail;
  for (int m = 0; m < sg_mesh_ndims(mesh); ++m) {
    sg_group_t g = NULL;
    int cmp = MPI_UNEQUAL;
    SG_TRY(sg_mesh_group(mesh, 1u << m, &g));
    SG_MPI(MPI_Comm_compare(sg_group_comm(g), comm, &cmp));
    if (cmp == MPI_IDENT || cmp == MPI_CONGRUENT) {
      *out = g;
      /* device buffers: NCCL on the mesh or a CUDA-aware MPI (as the
       * halo exchange's, ag_dev_comm_ok) */
      if (!dev_host_memory(dev) && !sg_group_nccl(g) &&
          sg_mpi_cuda_aware() != 1)
        SG_RAISE(SG_ERR_NOT_SUPPORTED,
                 "spectral conv on %s:%d: FFT axis %d (%d ranks) moves device "
                 "buffers: NCCL on the mesh (sg_mesh_enable_nccl) or a "
                 "CUDA-aware MPI is needed",
                 sg_device_kind_name(dev.kind), dev.index, a, size);
      goto fail;
    }
  }
  SG_RAISE(SG_ERR_NOT_SUPPORTED,
           "spectral conv on a device: FFT axis %d (%d ranks) is not one mesh "
           "dim of the mesh given (its transposes go through the mesh's "
           "groups)",
           a, size);
fail:
  return st;
}

static sg_status dev_plan(struct sg_spectral_conv *c, sg_device dev,
                          int64_t batch, sg_fft_plan_t *plan) {
  sg_fft_desc d = c->desc;
  d.batch = batch;
  d.flags |= SG_FFT_DEVICE_STAGES | SG_FFT_MPI_ALLTOALL;
  d.device = dev;
  d.chunk = 0;
  return c->mesh
             ? sg_fft_plan_create(c->mesh, &d, plan)
             : sg_fft_plan_create_comms(c->comm, c->naxes, c->axes, &d, plan);
}

/* The split domain's device state for dev on mesh, made on first use
 * (collective over the convolution's ranks: its plans). */
static sg_status conv_dev(struct sg_spectral_conv *c, sg_mesh_t mesh,
                          sg_device dev, const char *what) {
  sg_status st = SG_OK;
  spec_dev *s = NULL;
  if (c->dev && c->dev->dev.kind == dev.kind &&
      c->dev->dev.index == dev.index && c->dev->mesh == mesh)
    return SG_OK;
  spec_dev_free(c);
  if (!mesh) {
    st = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                      "%s: the mesh is NULL", what);
    return sg_fft_agree(c->comm, st);
  }
  s = calloc(1, sizeof *s);
  if (!s) st = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
  st = sg_fft_agree(c->comm, st);
  if (st != SG_OK) return st;
  s->dev = dev;
  s->mesh = mesh;
  c->dev = s;
  /* collective: every rank makes the plans */
  SG_TRY(dev_plan(c, dev, c->nb * c->cin, &s->pin));
  if (c->cout != c->cin)
    SG_TRY(dev_plan(c, dev, c->nb * c->cout, &s->pout));
  else
    s->pout = s->pin;
  {
    const int D = c->desc.ndim;
    int64_t o1[SG_FFT_MAX_DIMS], l1[SG_FFT_MAX_DIMS], o2[SG_FFT_MAX_DIMS],
        l2[SG_FFT_MAX_DIMS];
    int same = 1;
    for (int sp = 0; sp < 2; ++sp) {
      sg_fft_plan_local_box(c->pin, (sg_fft_space)sp, o1, l1);
      sg_fft_plan_local_box(s->pin, (sg_fft_space)sp, o2, l2);
      for (int d = 0; d < D; ++d) same &= o1[d] == o2[d] && l1[d] == l2[d];
    }
    if (!same)
      st = sg_error_set(SG_ERR_INTERNAL, __FILE__, __LINE__,
                        "%s: the device plan's boxes differ from the host's",
                        what);
    const struct sg_fft_plan *pp = s->pin;
    for (int a = 0; st == SG_OK && a < pp->axes.naxes; ++a)
      st = axis_group(mesh, dev, pp->axes.comm[a], a, &s->grp[a]);
    const size_t es = sg_dtype_size(c->desc.dtype);
    const size_t bi = (size_t)(2 * c->nb * c->cin * c->M) * es,
                 bo = (size_t)(2 * c->nb * c->cout * c->M) * es,
                 bw = (size_t)(2 * c->cin * c->cout * c->M) * es;
    if (st == SG_OK) st = dev_alloc(dev, bi, &s->xk);
    if (st == SG_OK) st = dev_alloc(dev, bo, &s->yk);
    if (st == SG_OK) st = dev_alloc(dev, bi, &s->zk);
    if (st == SG_OK) st = dev_alloc(dev, bw, &s->wl);
    if (st == SG_OK)
      st = dev_alloc(dev, sizeof(int64_t) * (size_t)c->M, (void **)&s->gidx);
    if (st == SG_OK && c->M > 0)
      st = sg_memcpy(dev, s->gidx, sg_device_host(), c->gidx,
                     sizeof(int64_t) * (size_t)c->M);
  }
fail:
  st = sg_fft_agree(c->comm, st);
  if (st != SG_OK) spec_dev_free(c);
  return st;
}

/* which 0: out = x W, 1: out = dy W^H, 2: out += dy x^H (per local mode) */
static sg_status dev_mix(const struct sg_spectral_conv *c, const spec_dev *s,
                         int which, const void *a, const void *b, void *out) {
  const int64_t M = c->M, nb = c->nb, ci = c->cin, co = c->cout;
  const int f64 = c->desc.dtype == SG_DTYPE_F64;
  if (!dev_host_memory(s->dev)) {
#if SG_HAVE_CUDA
    return sg_spec_mix_cuda(f64, which, nb, ci, co, M, a, b, out);
#else
    return sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                        "spectral conv on a device: built without CUDA");
#endif
  }
  const int64_t n = which == 0 ? nb * co * M
                               : (which == 1 ? nb * ci * M : ci * co * M);
  for (int64_t e = 0; e < n; ++e) {
    if (f64) {
      const double *da = a, *db = b;
      if (which == 0) sg_spec_mix_fwd_f64(ci, co, M, da, db, out, e);
      if (which == 1) sg_spec_mix_bwd_x_f64(ci, co, M, da, db, out, e);
      if (which == 2) sg_spec_mix_bwd_w_f64(nb, ci, co, M, da, db, out, e);
    } else {
      const float *fa = a, *fb = b;
      if (which == 0) sg_spec_mix_fwd_f32(ci, co, M, fa, fb, out, e);
      if (which == 1) sg_spec_mix_bwd_x_f32(ci, co, M, fa, fb, out, e);
      if (which == 2) sg_spec_mix_bwd_w_f32(nb, ci, co, M, fa, fb, out, e);
    }
  }
  return SG_OK;
}

/* add 0: s->wl = W's local modes (a replicated W); add 1: W += s->wl */
static sg_status dev_wlocal(const struct sg_spectral_conv *c, const spec_dev *s,
                            int add, void *W) {
  const int64_t io = c->cin * c->cout, M = c->M, K = c->ktot;
  const int f64 = c->desc.dtype == SG_DTYPE_F64;
  if (!dev_host_memory(s->dev)) {
#if SG_HAVE_CUDA
    return sg_spec_wlocal_cuda(f64, add, io, M, K, s->gidx, W, s->wl);
#else
    (void)W;
    return sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                        "spectral conv on a device: built without CUDA");
#endif
  }
  for (int64_t e = 0; e < io * M; ++e) {
    if (f64)
      sg_spec_wlocal_f64(M, K, s->gidx, W, s->wl, e, add);
    else
      sg_spec_wlocal_f32(M, K, s->gidx, W, s->wl, e, add);
  }
  return SG_OK;
}

/* W's local modes in (cin, cout, M) order: W itself when sharded */
static sg_status dev_w(const struct sg_spectral_conv *c, const spec_dev *s,
                       const void *w, const void **wl) {
  *wl = w;
  if (c->wsharded) return SG_OK;
  *wl = s->wl;
  return dev_wlocal(c, s, 0, (void *)(uintptr_t)w);
}

/* One process on a GPU: the convolution's cuFFT path of one process. */
static int dev_whole(const struct sg_spectral_conv *c, sg_device dev) {
  if (dev_host_memory(dev)) return 0;
  int64_t off[SG_FFT_MAX_DIMS], len[SG_FFT_MAX_DIMS];
  sg_fft_plan_local_box(c->pin, SG_FFT_SPACE_REAL, off, len);
  int whole = c->M == c->ktot;
  for (int d = 0; d < c->desc.ndim; ++d) whole &= len[d] == c->desc.shape[d];
  return whole;
}

sg_status sg_spectral_conv_forward_dev(sg_spectral_conv_t c, sg_mesh_t mesh,
                                       sg_device dev, const void *x,
                                       const void *w, void *y, void *xhat) {
  sg_status st = SG_OK;
  if (!c) SG_RAISE(SG_ERR_INVALID_ARG, "conv is NULL");
  if (dev_whole(c, dev)) return sg_spectral_conv_forward_cuda(c, x, w, y, xhat);
  SG_TRY(conv_dev(c, mesh, dev, "sg_spectral_conv_forward_dev"));
  {
    spec_dev *s = c->dev;
    void *xh = xhat ? xhat : s->xk;
    const void *wl = NULL;
    SG_TRY(sg_fft_dev_run(s->pin, s->grp, 0, x, xh));
    SG_TRY(dev_w(c, s, w, &wl));
    SG_TRY(dev_mix(c, s, 0, xh, wl, s->yk));
    SG_TRY(sg_fft_dev_run(s->pout, s->grp, 1, s->yk, y));
  }
fail:
  return st;
}

sg_status sg_spectral_conv_backward_dev(sg_spectral_conv_t c, sg_mesh_t mesh,
                                        sg_device dev, const void *x,
                                        const void *xhat, const void *w,
                                        const void *dy, void *dx, void *dw) {
  sg_status st = SG_OK;
  if (!c) SG_RAISE(SG_ERR_INVALID_ARG, "conv is NULL");
  if (dev_whole(c, dev))
    return sg_spectral_conv_backward_cuda(c, x, xhat, w, dy, dx, dw);
  SG_TRY(conv_dev(c, mesh, dev, "sg_spectral_conv_backward_dev"));
  {
    spec_dev *s = c->dev;
    const size_t es = sg_dtype_size(c->desc.dtype);
    /* dyhat = Inv^T dy; collective, as the host's (whatever is NULL) */
    SG_TRY(sg_fft_dev_run(s->pout, s->grp, 3, dy, s->yk));
    if (dw) {
      const void *xh = xhat;
      if (!xh) {
        SG_TRY(sg_fft_dev_run(s->pin, s->grp, 0, x, s->xk));
        xh = s->xk;
      }
      if (c->wsharded) {
        SG_TRY(dev_mix(c, s, 2, xh, s->yk, dw));
      } else {
        const size_t bw = (size_t)(2 * c->cin * c->cout * c->M) * es;
        if (bw && dev_host_memory(dev))
          memset(s->wl, 0, bw);
        else if (bw)
          SG_TRY(sg_memset(dev, s->wl, 0, bw));
        SG_TRY(dev_mix(c, s, 2, xh, s->yk, s->wl));
        SG_TRY(dev_wlocal(c, s, 1, dw));
      }
    }
    if (dx) {
      const void *wl = NULL;
      SG_TRY(dev_w(c, s, w, &wl));
      SG_TRY(dev_mix(c, s, 1, s->yk, wl, s->zk));
      SG_TRY(sg_fft_dev_run(s->pin, s->grp, 2, s->zk, dx));
    }
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
