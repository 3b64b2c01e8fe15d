/* Helpers for the FFT tests: mesh/layout enumeration over plain
 * communicators, one-process FFTW references, box extraction. */
#ifndef SG_FFT_TESTUTIL_H
#define SG_FFT_TESTUTIL_H

#include <mpi.h>
#include <stdint.h>

#include "sg_dtype.h"
#include "sg_fft.h"
#include "sg_mesh.h"

#define FT_MAX_LAYOUTS 64

typedef struct ft_layout {
  int p[2];       /* axis sizes */
  sg_mesh_t mesh; /* mesh "a=p0,b=p1" (owned by the enumeration) */
  MPI_Comm ax[2]; /* its per-dim group communicators */
  int split[3];   /* per spatial dim: axis or -1 */
  char name[96];
} ft_layout;

/* Every mesh of the world size (1; p; 2x2 for 4) and every way of
 * splitting D dims with its axes of size > 1 (each axis used once). */
int ft_layouts(int D, ft_layout *out);
void ft_layouts_free(void);

/* Deterministic values in [-1, 1]. */
double ft_value(uint64_t seed, int64_t i);
void ft_fill(double *x, int64_t n, uint64_t seed);

/* One-process FFTW references in double (unnormalised). */
void ft_ref_r2c(int D, const int64_t *shape, int64_t batch, const double *x,
                double *y);
void ft_ref_c2r(int D, const int64_t *shape, int64_t batch, const double *y,
                double *x);

/* Copy the box (off, len) of a global (batch, shape) array of ncomp-scalar
 * elements into a local block (dtype f32/f64), or back (insert). */
void ft_extract(const double *g, int D, const int64_t *shape, int64_t batch,
                int ncomp, const int64_t *off, const int64_t *len, void *local,
                sg_dtype dt);
void ft_insert(double *g, int D, const int64_t *shape, int64_t batch, int ncomp,
               const int64_t *off, const int64_t *len, const void *local,
               sg_dtype dt);
/* local block -> double */
void ft_to_f64(const void *x, sg_dtype dt, int64_t n, double *out);
double ft_maxabs(const double *x, int64_t n);
/* |a - b| <= tol everywhere (callers pass rel * max|global reference|,
 * a normwise relative tolerance). */
int64_t ft_cmp(const char *what, const double *a, const double *b, int64_t n,
               double tol);

#endif

/* One-process inverse with a well-defined meaning for any (also
 * non-Hermitian) spectrum: unnormalised c2c backward over the non-halved
 * dims, then 1-D c2r along the last dim (as the distributed inverse). */
void ft_ref_c2r_sep(int D, const int64_t *shape, int64_t batch, const double *y,
                    double *x);
/* Kept-mode selection / zero padding between a full spectrum (batch,
 * full) and a truncated one (batch, K) for keep[] as in sg_fft.h. */
void ft_truncate(int D, const int64_t *shape, int64_t batch,
                 const int64_t *keep, const double *full, double *kept);
void ft_pad(int D, const int64_t *shape, int64_t batch, const int64_t *keep,
            const double *kept, double *full);
void ft_kept_shape(int D, const int64_t *shape, const int64_t *keep,
                   int64_t *K);
