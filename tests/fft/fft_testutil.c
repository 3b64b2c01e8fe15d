#include "fft_testutil.h"

#include <fftw3.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sg_test.h"

static sg_mesh_t meshes_made[16];
static int nmeshes = 0;

static sg_mesh_t make_axes(int p0, int p1, MPI_Comm *ax) {
  char spec[64];
  sg_mesh_t m = NULL;
  snprintf(spec, sizeof spec, "a=%d,b=%d", p0, p1);
  SG_CHECK_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &m));
  for (int d = 0; d < 2; ++d) {
    sg_group_t g = NULL;
    SG_CHECK_OK(sg_mesh_group(m, 1u << d, &g));
    ax[d] = sg_group_comm(g);
  }
  meshes_made[nmeshes++] = m;
  return m;
}

void ft_layouts_free(void) {
  for (int i = 0; i < nmeshes; ++i) sg_mesh_destroy(&meshes_made[i]);
  nmeshes = 0;
}

int ft_layouts(int D, ft_layout *out) {
  int size;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int meshes[3][2], nm = 0;
  meshes[nm][0] = size;
  meshes[nm][1] = 1;
  ++nm;
  if (size > 1) {
    meshes[nm][0] = 1;
    meshes[nm][1] = size;
    ++nm;
  }
  if (size == 4) {
    meshes[nm][0] = 2;
    meshes[nm][1] = 2;
    ++nm;
  }
  int n = 0;
  for (int m = 0; m < nm; ++m) {
    MPI_Comm ax[2];
    sg_mesh_t mesh = make_axes(meshes[m][0], meshes[m][1], ax);
    /* split[d] in {-1, 0, 1}: 3^D assignments */
    int total = 1;
    for (int d = 0; d < D; ++d) total *= 3;
    for (int code = 0; code < total; ++code) {
      int sp[3] = {-1, -1, -1}, c = code, used[2] = {0, 0}, ok = 1;
      for (int d = 0; d < D; ++d) {
        sp[d] = c % 3 - 1;
        c /= 3;
        if (sp[d] >= 0) {
          if (used[sp[d]] || meshes[m][sp[d]] == 1) ok = 0;
          used[sp[d]] = 1;
        }
      }
      for (int a = 0; a < 2; ++a)
        if (meshes[m][a] > 1 && !used[a]) ok = 0;
      if (size == 1 && code != 0) ok = (code == 0);
      if (!ok || n >= FT_MAX_LAYOUTS) continue;
      ft_layout *l = &out[n++];
      l->p[0] = meshes[m][0];
      l->p[1] = meshes[m][1];
      l->mesh = mesh;
      l->ax[0] = ax[0];
      l->ax[1] = ax[1];
      memcpy(l->split, sp, sizeof sp);
      snprintf(l->name, sizeof l->name, "mesh %dx%d split (%d,%d,%d)", l->p[0],
               l->p[1], sp[0], sp[1], D == 3 ? sp[2] : -1);
    }
  }
  return n;
}

double ft_value(uint64_t seed, int64_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull +
               (uint64_t)i * 0xBF58476D1CE4E5B9ull + 1;
  z ^= z >> 30;
  z *= 0xBF58476D1CE4E5B9ull;
  z ^= z >> 27;
  z *= 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (double)(z >> 11) / (double)(1ull << 53) * 2.0 - 1.0;
}

void ft_fill(double *x, int64_t n, uint64_t seed) {
  for (int64_t i = 0; i < n; ++i) x[i] = ft_value(seed, i);
}

/* FFTW's int extents of a D-dim real transform, and the real / complex
 * element counts of one batch entry (the last dim halved + 1). */
static void ref_geom(int D, const int64_t *shape, int *n, int64_t *nr,
                     int64_t *nc) {
  *nr = *nc = 1;
  for (int d = 0; d < D; ++d) {
    n[d] = (int)shape[d];
    *nr *= shape[d];
    *nc *= d == D - 1 ? shape[d] / 2 + 1 : shape[d];
  }
}

void ft_ref_r2c(int D, const int64_t *shape, int64_t batch, const double *x,
                double *y) {
  int n[3];
  int64_t nr, nc;
  ref_geom(D, shape, n, &nr, &nc);
  double *xc = fftw_malloc(sizeof(double) * (size_t)(nr * batch));
  memcpy(xc, x, sizeof(double) * (size_t)(nr * batch));
  fftw_complex *yc = fftw_malloc(sizeof(fftw_complex) * (size_t)(nc * batch));
  fftw_plan_with_nthreads(1);
  fftw_plan p = fftw_plan_many_dft_r2c(D, n, (int)batch, xc, NULL, 1, (int)nr,
                                       yc, NULL, 1, (int)nc, FFTW_ESTIMATE);
  fftw_execute(p);
  memcpy(y, yc, sizeof(fftw_complex) * (size_t)(nc * batch));
  fftw_destroy_plan(p);
  fftw_free(xc);
  fftw_free(yc);
}

void ft_ref_c2r(int D, const int64_t *shape, int64_t batch, const double *y,
                double *x) {
  int n[3];
  int64_t nr, nc;
  ref_geom(D, shape, n, &nr, &nc);
  fftw_complex *yc = fftw_malloc(sizeof(fftw_complex) * (size_t)(nc * batch));
  memcpy(yc, y, sizeof(fftw_complex) * (size_t)(nc * batch));
  double *xc = fftw_malloc(sizeof(double) * (size_t)(nr * batch));
  fftw_plan_with_nthreads(1);
  fftw_plan p = fftw_plan_many_dft_c2r(D, n, (int)batch, yc, NULL, 1, (int)nc,
                                       xc, NULL, 1, (int)nr, FFTW_ESTIMATE);
  fftw_execute(p);
  memcpy(x, xc, sizeof(double) * (size_t)(nr * batch));
  fftw_destroy_plan(p);
  fftw_free(xc);
  fftw_free(yc);
}

static void box_walk(double *g, int D, const int64_t *shape, int64_t batch,
                     int ncomp, const int64_t *off, const int64_t *len,
                     void *local, sg_dtype dt, int insert) {
  int64_t nloc = batch;
  for (int d = 0; d < D; ++d) nloc *= len[d];
  for (int64_t i = 0; i < nloc; ++i) {
    int64_t rem = i, gi = 0, mul = 1, idx[4];
    for (int d = D - 1; d >= 0; --d) {
      idx[d + 1] = rem % len[d];
      rem /= len[d];
    }
    idx[0] = rem;
    gi = 0;
    mul = 1;
    for (int d = D - 1; d >= 0; --d) {
      gi += (off[d] + idx[d + 1]) * mul;
      mul *= shape[d];
    }
    gi += idx[0] * mul;
    for (int c = 0; c < ncomp; ++c) {
      int64_t li = i * ncomp + c, gg = gi * ncomp + c;
      if (insert) {
        g[gg] = dt == SG_DTYPE_F64 ? ((const double *)local)[li]
                                   : (double)((const float *)local)[li];
      } else if (dt == SG_DTYPE_F64) {
        ((double *)local)[li] = g[gg];
      } else {
        ((float *)local)[li] = (float)g[gg];
      }
    }
  }
}

void ft_extract(const double *g, int D, const int64_t *shape, int64_t batch,
                int ncomp, const int64_t *off, const int64_t *len, void *local,
                sg_dtype dt) {
  box_walk((double *)(uintptr_t)g, D, shape, batch, ncomp, off, len, local, dt,
           0);
}

void ft_insert(double *g, int D, const int64_t *shape, int64_t batch, int ncomp,
               const int64_t *off, const int64_t *len, const void *local,
               sg_dtype dt) {
  box_walk(g, D, shape, batch, ncomp, off, len, (void *)(uintptr_t)local, dt,
           1);
}

void ft_to_f64(const void *x, sg_dtype dt, int64_t n, double *out) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = dt == SG_DTYPE_F64 ? ((const double *)x)[i]
                                : (double)((const float *)x)[i];
}

double ft_maxabs(const double *x, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = fmax(m, fabs(x[i]));
  return m;
}

int64_t ft_cmp(const char *what, const double *a, const double *b, int64_t n,
               double tol) {
  return sg_test_cmp_f64(what, a, b, n, 0.0, tol);
}

void ft_ref_c2r_sep(int D, const int64_t *shape, int64_t batch, const double *y,
                    double *x) {
  int64_t nh = shape[D - 1] / 2 + 1, nother = 1;
  int n[3];
  for (int d = 0; d < D - 1; ++d) {
    n[d] = (int)shape[d];
    nother *= shape[d];
  }
  int64_t nc = nother * nh, nr = nother * shape[D - 1];
  fftw_complex *t = fftw_malloc(sizeof(fftw_complex) * (size_t)(nc * batch));
  memcpy(t, y, sizeof(fftw_complex) * (size_t)(nc * batch));
  double *xr = fftw_malloc(sizeof(double) * (size_t)(nr * batch));
  fftw_plan_with_nthreads(1);
  for (int64_t b = 0; b < batch; ++b) {
    fftw_plan p = fftw_plan_many_dft(D - 1, n, (int)nh, t + b * nc, NULL,
                                     (int)nh, 1, t + b * nc, NULL, (int)nh, 1,
                                     FFTW_BACKWARD, FFTW_ESTIMATE);
    fftw_execute(p);
    fftw_destroy_plan(p);
  }
  int nl = (int)shape[D - 1];
  fftw_plan q = fftw_plan_many_dft_c2r(1, &nl, (int)(nother * batch), t, NULL,
                                       1, (int)nh, xr, NULL, 1, nl,
                                       FFTW_ESTIMATE);
  fftw_execute(q);
  fftw_destroy_plan(q);
  memcpy(x, xr, sizeof(double) * (size_t)(nr * batch));
  fftw_free(t);
  fftw_free(xr);
}

void ft_kept_shape(int D, const int64_t *shape, const int64_t *keep,
                   int64_t *K) {
  for (int d = 0; d < D; ++d) {
    int64_t full = d == D - 1 ? shape[d] / 2 + 1 : shape[d];
    K[d] = keep[d] == 0 ? full : (d == D - 1 ? keep[d] : 2 * keep[d]);
  }
}

static void trunc_walk(int D, const int64_t *shape, int64_t batch,
                       const int64_t *keep, double *full, double *kept,
                       int pad) {
  int64_t K[3], F[3];
  ft_kept_shape(D, shape, keep, K);
  for (int d = 0; d < D; ++d) F[d] = d == D - 1 ? shape[d] / 2 + 1 : shape[d];
  int64_t nk = batch, nf = batch;
  for (int d = 0; d < D; ++d) {
    nk *= K[d];
    nf *= F[d];
  }
  if (pad) memset(full, 0, sizeof(double) * 2 * (size_t)nf);
  for (int64_t i = 0; i < nk; ++i) {
    int64_t rem = i, fi = 0, mul = 1, j[3];
    for (int d = D - 1; d >= 0; --d) {
      j[d] = rem % K[d];
      rem /= K[d];
    }
    for (int d = D - 1; d >= 0; --d) {
      int64_t m = keep[d], src = j[d];
      if (d != D - 1 && m > 0 && j[d] >= m) src = shape[d] - 2 * m + j[d];
      fi += src * mul;
      mul *= F[d];
    }
    fi += rem * mul;
    for (int c = 0; c < 2; ++c) {
      if (pad)
        full[2 * fi + c] = kept[2 * i + c];
      else
        kept[2 * i + c] = full[2 * fi + c];
    }
  }
}

void ft_truncate(int D, const int64_t *shape, int64_t batch,
                 const int64_t *keep, const double *full, double *kept) {
  trunc_walk(D, shape, batch, keep, (double *)(uintptr_t)full, kept, 0);
}

void ft_pad(int D, const int64_t *shape, int64_t batch, const int64_t *keep,
            const double *kept, double *full) {
  trunc_walk(D, shape, batch, keep, full, (double *)(uintptr_t)kept, 1);
}
