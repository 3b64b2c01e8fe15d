/* shardgrid example — pseudo-spectral 2-D Navier–Stokes (vorticity form). */
#include "sg_ns2d.h"

#include "sg_device.h"
#include "sg_rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SG_PI 3.14159265358979323846

struct sg_ns2d {
  sg_ns2d_config cfg;
  sg_fft_plan_t plan;
  int64_t batch;
  int64_t ry0, rny, rx0, rnx; /* real box */
  int64_t ky0, nky, kx0, nkx; /* spectral box: dim 0 (ky), dim 1 (kx, halved) */
  int64_t nreal, nspec;       /* doubles per batch item */
  double *kx, *ky;            /* 2 pi * integer frequency, per local index */
  double *w_hat, *f_hat;      /* (batch, spec) complex; forcing (1, spec) */
  double *n1, *n2, *tmp_hat;  /* spectral work */
  double *u, *v, *wx, *wy;    /* real work */
  double t;
};

static void free_all(struct sg_ns2d *s) {
  sg_device h = sg_device_host();
  void **bufs[] = {(void **)&s->w_hat, (void **)&s->f_hat,   (void **)&s->n1,
                   (void **)&s->n2,    (void **)&s->tmp_hat, (void **)&s->u,
                   (void **)&s->v,     (void **)&s->wx,      (void **)&s->wy};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; ++i) sg_free(h, bufs[i]);
  free(s->kx);
  free(s->ky);
  sg_fft_plan_destroy(&s->plan);
}

sg_status sg_ns2d_destroy(sg_ns2d_t *ns) {
  if (!ns || !*ns) return SG_OK;
  free_all(*ns);
  free(*ns);
  *ns = NULL;
  return SG_OK;
}

sg_status sg_ns2d_create(sg_mesh_t mesh, const sg_ns2d_config *cfg,
                         int64_t batch, sg_ns2d_t *out) {
  sg_status st = SG_OK;
  struct sg_ns2d *s = NULL;
  if (!mesh || !cfg || !out || batch < 1 || cfg->n < 4)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "sg_ns2d_create: bad arguments (n = %lld, batch = %lld)",
             (long long)(cfg ? cfg->n : 0), (long long)batch);
  *out = NULL;
  s = calloc(1, sizeof *s);
  if (!s) SG_RAISE(SG_ERR_ALLOC, "sg_ns2d_create: out of memory");
  s->cfg = *cfg;
  s->batch = batch;
  sg_fft_desc d;
  sg_fft_desc_init(&d);
  d.dtype = SG_DTYPE_F64;
  d.ndim = 2;
  d.shape[0] = d.shape[1] = cfg->n;
  /* axes 0 and 1: the groups along "h" and "w" (when the mesh has them);
   * the transforms of different data-parallel ranks are independent */
  static const char *const hw[2] = {"h", "w"};
  MPI_Comm axes[2], comm;
  SG_TRY(sg_fft_mesh_axes(mesh, 2, hw, axes, d.split, &comm, NULL));
  d.batch = batch;
  SG_TRY(sg_fft_plan_create_comms(comm, 2, axes, &d, &s->plan));
  int64_t off[2], shp[2];
  sg_fft_plan_local_box(s->plan, SG_FFT_SPACE_REAL, off, shp);
  s->ry0 = off[0], s->rny = shp[0], s->rx0 = off[1], s->rnx = shp[1];
  sg_fft_plan_local_box(s->plan, SG_FFT_SPACE_SPECTRAL, off, shp);
  s->ky0 = off[0], s->nky = shp[0], s->kx0 = off[1], s->nkx = shp[1];
  s->nreal = s->rny * s->rnx;
  s->nspec = 2 * s->nky * s->nkx;
  s->kx = malloc((size_t)(s->nkx ? s->nkx : 1) * sizeof *s->kx);
  s->ky = malloc((size_t)(s->nky ? s->nky : 1) * sizeof *s->ky);
  if (!s->kx || !s->ky) SG_RAISE(SG_ERR_ALLOC, "sg_ns2d_create: out of memory");
  for (int64_t j = 0; j < s->nky; ++j)
    s->ky[j] = 2 * SG_PI * (double)sg_fft_plan_freq(s->plan, 0, s->ky0 + j);
  for (int64_t j = 0; j < s->nkx; ++j)
    s->kx[j] = 2 * SG_PI * (double)sg_fft_plan_freq(s->plan, 1, s->kx0 + j);
  sg_device h = sg_device_host();
  size_t spec = (size_t)(batch * s->nspec) * sizeof(double);
  size_t real = (size_t)(batch * s->nreal) * sizeof(double);
  SG_TRY(sg_calloc(h, spec, (void **)&s->w_hat));
  SG_TRY(sg_calloc(h, spec, (void **)&s->n1));
  SG_TRY(sg_calloc(h, spec, (void **)&s->n2));
  SG_TRY(sg_calloc(h, spec, (void **)&s->tmp_hat));
  SG_TRY(sg_calloc(h, (size_t)s->nspec * sizeof(double), (void **)&s->f_hat));
  SG_TRY(sg_calloc(h, real, (void **)&s->u));
  SG_TRY(sg_calloc(h, real, (void **)&s->v));
  SG_TRY(sg_calloc(h, real, (void **)&s->wx));
  SG_TRY(sg_calloc(h, real, (void **)&s->wy));
  /* forcing A (sin 2pi(x+y) + cos 2pi(x+y)) in spectral space: modes
   * (ky, kx) = +-(1, 1). With the unscaled forward transform of an N x N
   * grid, cos -> N^2/2 at both, sin -> -i N^2/2 at (1,1), +i N^2/2 at
   * (-1,-1); the halved dim keeps kx = +1 only, so (ky, kx) = (1, 1) holds
   * N^2/2 (1 - i) A and c2r supplies the conjugate. */
  if (cfg->forcing != 0.0) {
    double n2 = (double)cfg->n * (double)cfg->n;
    for (int64_t j = 0; j < s->nky; ++j)
      for (int64_t i = 0; i < s->nkx; ++i) {
        int64_t fy = sg_fft_plan_freq(s->plan, 0, s->ky0 + j);
        int64_t fx = sg_fft_plan_freq(s->plan, 1, s->kx0 + i);
        if (fy == 1 && fx == 1) {
          s->f_hat[2 * (j * s->nkx + i)] = 0.5 * n2 * cfg->forcing;
          s->f_hat[2 * (j * s->nkx + i) + 1] = -0.5 * n2 * cfg->forcing;
        }
      }
  }
  *out = s;
  return SG_OK;
fail:
  if (s) {
    free_all(s);
    free(s);
  }
  return st;
}

void sg_ns2d_box(sg_ns2d_t s, int64_t *y0, int64_t *ny, int64_t *x0,
                 int64_t *nx) {
  *y0 = s->ry0, *ny = s->rny, *x0 = s->rx0, *nx = s->rnx;
}

double sg_ns2d_time(sg_ns2d_t s) { return s->t; }

void sg_ns2d_times(sg_ns2d_t s, double *fft_s, double *transpose_s) {
  sg_fft_plan_times(s->plan, fft_s, transpose_s);
}

sg_status sg_ns2d_init_state(sg_ns2d_t s, int64_t sample0) {
  sg_status st = SG_OK;
  const int64_t n = s->cfg.n;
  s->t = 0.0;
  if (s->cfg.init == SG_NS2D_INIT_TAYLOR_GREEN) {
    for (int64_t b = 0; b < s->batch; ++b)
      for (int64_t j = 0; j < s->rny; ++j)
        for (int64_t i = 0; i < s->rnx; ++i) {
          double y = (double)(s->ry0 + j) / (double)n,
                 x = (double)(s->rx0 + i) / (double)n;
          s->u[(b * s->rny + j) * s->rnx + i] = sin(2 * SG_PI * x) *
                                                sin(2 * SG_PI * y);
        }
    SG_TRY(sg_fft_forward(s->plan, s->u, s->w_hat));
    return SG_OK;
  }
  /* white noise keyed by (seed, sample, global index), then coloured:
   * w_hat = N s(k) fft(xi), s(k)^2 = c (4 pi^2 |k|^2 + 49)^{-2.5} with
   * c = 2 * 7^3 (reference generator) or 7^{3/2} (paper text); the inverse
   * transform carries 1/N^2, so Var w = sum_k s(k)^2 */
  const int64_t gshape[2] = {n, n}, off[2] = {s->ry0, s->rx0},
                ext[2] = {s->rny, s->rnx};
  for (int64_t b = 0; b < s->batch; ++b)
    SG_TRY(sg_rng_fill_box(SG_RNG_NORMAL, 0.0, 1.0, s->cfg.seed,
                           (uint64_t)(sample0 + b), 2, gshape, off, ext,
                           SG_DTYPE_F64, s->u + b * s->nreal));
  SG_TRY(sg_fft_forward(s->plan, s->u, s->w_hat));
  const double amp = (s->cfg.grf_scale == SG_NS2D_GRF_TEXT
                          ? pow(7.0, 0.75)
                          : sqrt(2.0) * pow(7.0, 1.5)) *
                     (double)n;
  for (int64_t b = 0; b < s->batch; ++b)
    for (int64_t j = 0; j < s->nky; ++j)
      for (int64_t i = 0; i < s->nkx; ++i) {
        double k2 = s->ky[j] * s->ky[j] + s->kx[i] * s->kx[i];
        double c = k2 == 0.0 ? 0.0 : amp * pow(k2 + 49.0, -1.25);
        double *z = s->w_hat + b * s->nspec + 2 * (j * s->nkx + i);
        z[0] *= c;
        z[1] *= c;
      }
fail:
  return st;
}

/* nonlinear term N = fft(u wx + v wy), dealiased (2/3 rule) */
static sg_status nonlinear(struct sg_ns2d *s, const double *w_hat,
                           double *out) {
  sg_status st = SG_OK;
  const int64_t nb = s->batch, nk = s->nky * s->nkx;
  const double kmax = 2 * SG_PI * (double)s->cfg.n / 3.0;
  double *h = s->tmp_hat;
  /* psi = w / |k|^2;  u = d psi/dy -> i ky psi;  v = -d psi/dx -> -i kx psi */
  for (int pass = 0; pass < 4; ++pass) {
#pragma omp parallel for schedule(static) if (nb * nk > 16384)
    for (int64_t q = 0; q < nb * nk; ++q) {
      int64_t r = q % nk, j = r / s->nkx, i = r % s->nkx;
      double kx = s->kx[i], ky = s->ky[j], k2 = kx * kx + ky * ky;
      const double *z = w_hat + 2 * q;
      double fac; /* multiply z by i * fac */
      switch (pass) {
      case 0: fac = k2 == 0.0 ? 0.0 : ky / k2; break;  /* u */
      case 1: fac = k2 == 0.0 ? 0.0 : -kx / k2; break; /* v */
      case 2: fac = kx; break;                         /* w_x */
      default: fac = ky; break;                        /* w_y */
      }
      h[2 * q] = -fac * z[1];
      h[2 * q + 1] = fac * z[0];
    }
    double *dst = pass == 0   ? s->u
                  : pass == 1 ? s->v
                  : pass == 2 ? s->wx
                              : s->wy;
    SG_TRY(sg_fft_inverse(s->plan, h, dst));
  }
  const int64_t nr = nb * s->nreal;
#pragma omp parallel for schedule(static) if (nr > 16384)
  for (int64_t q = 0; q < nr; ++q)
    s->u[q] = s->u[q] * s->wx[q] + s->v[q] * s->wy[q];
  SG_TRY(sg_fft_forward(s->plan, s->u, out));
#pragma omp parallel for schedule(static) if (nb * nk > 16384)
  for (int64_t q = 0; q < nb * nk; ++q) {
    int64_t r = q % nk, j = r / s->nkx, i = r % s->nkx;
    if (fabs(s->kx[i]) > kmax || fabs(s->ky[j]) > kmax)
      out[2 * q] = out[2 * q + 1] = 0.0;
  }
fail:
  return st;
}

/* Crank-Nicolson for diffusion with the explicit term dt (f - nl): one
 * stage of Heun's method for a mode with a = dt nu |k|^2 / 2 */
static inline double cn_stage(double a, double dt, double w, double f,
                              double nl) {
  return ((1 - a) * w + dt * (f - nl)) / (1 + a);
}

sg_status sg_ns2d_step(sg_ns2d_t s, int64_t nsteps) {
  sg_status st = SG_OK;
  const int64_t nb = s->batch, nk = s->nky * s->nkx;
  const double dt = s->cfg.dt, nu = s->cfg.nu;
  for (int64_t it = 0; it < nsteps; ++it) {
    SG_TRY(nonlinear(s, s->w_hat, s->n1));
    /* predictor into n2's place: w~ = ((1-a) w + dt (f - N1)) / (1+a) */
    double *wt = s->n2;
#pragma omp parallel for schedule(static) if (nb * nk > 16384)
    for (int64_t q = 0; q < nb * nk; ++q) {
      int64_t r = q % nk, j = r / s->nkx, i = r % s->nkx;
      double a = 0.5 * dt * nu * (s->kx[i] * s->kx[i] + s->ky[j] * s->ky[j]);
      for (int c = 0; c < 2; ++c)
        wt[2 * q + c] = cn_stage(a, dt, s->w_hat[2 * q + c],
                                 s->f_hat[2 * r + c], s->n1[2 * q + c]);
    }
    /* N2 = N(w~) into tmp_hat (its use as scratch ends before the output
     * is written) */
    SG_TRY(nonlinear(s, wt, s->tmp_hat));
    double *n2v = s->tmp_hat;
#pragma omp parallel for schedule(static) if (nb * nk > 16384)
    for (int64_t q = 0; q < nb * nk; ++q) {
      int64_t r = q % nk, j = r / s->nkx, i = r % s->nkx;
      double a = 0.5 * dt * nu * (s->kx[i] * s->kx[i] + s->ky[j] * s->ky[j]);
      for (int c = 0; c < 2; ++c)
        s->w_hat[2 * q + c] = cn_stage(
            a, dt, s->w_hat[2 * q + c], s->f_hat[2 * r + c],
            0.5 * (s->n1[2 * q + c] + n2v[2 * q + c]));
    }
    s->t += dt;
  }
fail:
  return st;
}

sg_status sg_ns2d_vorticity(sg_ns2d_t s, double *w) {
  return sg_fft_inverse(s->plan, s->w_hat, w);
}
