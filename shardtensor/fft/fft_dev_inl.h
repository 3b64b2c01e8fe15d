/* shardgrid — the distributed FFT's element arithmetic on device buffers
 * (internal): the kept-index map, the box copies of the transposes (pack,
 * unpack, the local cut of the kept modes), the weights of the halved dim
 * and the self-conjugate columns of a 1-D c2r's input, as SG_HD functions.
 * fft_dev.c runs them in host loops on host memory (the device path's
 * structure on the host: tests and the faked device), cuda/fft_dev.cu one
 * thread per element on a GPU: the same arithmetic, so the host tests
 * check what the GPU runs. */
#ifndef SG_FFT_DEV_INL_H
#define SG_FFT_DEV_INL_H

#include <stdint.h>

#include "sg_dtype.h" /* SG_HD */
#include "sg_status.h"

#define SG_FFT_XBOX_DIMS 4 /* batch + 3 spatial */

/* The kept-index map of a truncated dim: kept index j of a dim of full
 * length n keeping m positive and m negative frequencies. m == 0: identity
 * (also used for the halved dim, whose kept modes are a prefix). */
typedef struct sg_fft_map {
  int64_t m, n;
} sg_fft_map;

static inline SG_HD int64_t sg_fft_map_index(sg_fft_map mp, int64_t j) {
  return (mp.m == 0 || j < mp.m) ? j : mp.n - 2 * mp.m + j;
}

/* A box of nd dims (lengths box[]) copied between two row-major arrays:
 * logical index off[k] + i of dim k lives at map_index(map[k], .) with
 * stride st[k] (elements) on each side. An element is ncomp scalars. */
typedef struct sg_fft_xbox {
  int nd, ncomp;
  int64_t n; /* elements in the box */
  int64_t box[SG_FFT_XBOX_DIMS];
  int64_t sst[SG_FFT_XBOX_DIMS], soff[SG_FFT_XBOX_DIMS];
  int64_t dst[SG_FFT_XBOX_DIMS], doff[SG_FFT_XBOX_DIMS];
  sg_fft_map smap[SG_FFT_XBOX_DIMS], dmap[SG_FFT_XBOX_DIMS];
} sg_fft_xbox;

/* Element e of the box (row-major over box[]): its source and destination
 * element offsets. */
static inline SG_HD void sg_fft_xbox_at(const sg_fft_xbox *b, int64_t e,
                                        int64_t *s, int64_t *d) {
  int64_t so = 0, dof = 0;
  for (int k = b->nd - 1; k >= 0; --k) {
    const int64_t i = e % b->box[k];
    e /= b->box[k];
    so += sg_fft_map_index(b->smap[k], b->soff[k] + i) * b->sst[k];
    dof += sg_fft_map_index(b->dmap[k], b->doff[k] + i) * b->dst[k];
  }
  *s = so;
  *d = dof;
}

/* The factor of mode k of the halved dim (length n): 1 on the
 * self-conjugate modes (k = 0, k = n/2 for even n), else w; times s. The
 * host's weight_halved (fft_exec.c) uses it too. */
static inline SG_HD double sg_fft_halved_factor(int64_t k, int64_t n, double w,
                                                double s) {
  return ((k == 0 || (n % 2 == 0 && k == n / 2)) ? 1.0 : w) * s;
}

#define SG_FFT_DEV_KERNELS(T, S)                                                \
  /* element e of the box: dst = src (ncomp scalars) */                         \
  static inline SG_HD void sg_fft_xbox_copy_##S(const sg_fft_xbox *b,           \
                                                const T *src, T *dst,           \
                                                int64_t e) {                    \
    int64_t so, dof;                                                            \
    sg_fft_xbox_at(b, e, &so, &dof);                                            \
    for (int c = 0; c < b->ncomp; ++c)                                          \
      dst[dof * b->ncomp + c] = src[so * b->ncomp + c];                         \
  }                                                                             \
  /* complex element e of rows of nl modes of the halved dim (global modes    \
   * ol.. of a length-n dim): y *= its factor, rounded to T */ \
  static inline SG_HD void sg_fft_weight_##S(T *y, int64_t e, int64_t nl,       \
                                             int64_t ol, int64_t n, double w,   \
                                             double s) {                        \
    const T f = (T)sg_fft_halved_factor(ol + e % nl, n, w, s);                  \
    y[2 * e] *= f;                                                              \
    y[2 * e + 1] *= f;                                                          \
  }                                                                             \
  /* row r of a 1-D c2r's input (rows of n/2 + 1 modes): the imaginary parts \
   * of its self-conjugate modes zeroed (what FFTW's c2r ignores), so any    \
   * c2r computes the host's function */  \
  static inline SG_HD void sg_fft_c2r_cols_##S(T *y, int64_t r, int64_t n) {    \
    const int64_t nh = n / 2 + 1;                                               \
    y[2 * (r * nh) + 1] = 0;                                                    \
    if (n % 2 == 0) y[2 * (r * nh + n / 2) + 1] = 0;                            \
  }

SG_FFT_DEV_KERNELS(double, f64)
SG_FFT_DEV_KERNELS(float, f32)

#ifdef __cplusplus
extern "C" {
#endif
/* The CUDA launchers (cuda/fft_dev.cu, CUDA builds only), on the legacy
 * default stream: the box copy, the halved-dim weights (rows x nl complex),
 * the c2r's self-conjugate columns (rows of n/2 + 1), y *= f (f rounded to
 * the dtype). f64: double, else float. SG_ERR_CUDA on a failed launch. */
sg_status sg_fft_xbox_cuda(int f64, const sg_fft_xbox *b, const void *src,
                           void *dst);
sg_status sg_fft_weight_cuda(int f64, int64_t rows, int64_t nl, int64_t ol,
                             int64_t n, double w, double s, void *y);
sg_status sg_fft_c2r_cols_cuda(int f64, int64_t rows, int64_t n, void *y);
sg_status sg_fft_scale_cuda(int f64, int64_t n, double f, void *y);
#ifdef __cplusplus
}
#endif

#endif /* SG_FFT_DEV_INL_H */
