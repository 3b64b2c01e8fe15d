/* shardgrid — internal: the spectral convolution's CUDA state and passes
 * (cuda/spectral_cuda.cu, CUDA builds only), driven by spectral.c's
 * sg_spectral_conv_forward_cuda / sg_spectral_conv_backward_cuda. */
#ifndef SG_SPECTRAL_CUDA_H
#define SG_SPECTRAL_CUDA_H

#include <stdint.h>

#include "sg_dtype.h"
#include "sg_spec_inl.h"
#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cuFFT plans (multi-dimensional r2c and c2r over the spatial dims,
 * batched over nb*cin and nb*cout rows) and the device scratch (one full
 * spectrum of max(cin, cout) * nb rows, the kept spectra of both sides), on
 * the device current at creation, ordered on the legacy default stream. */
typedef struct sg_spectral_cuda sg_spectral_cuda;

sg_status sg_spectral_cuda_create(sg_dtype dt, const sg_spec_geo *g, int64_t nb,
                                  int64_t cin, int64_t cout,
                                  sg_spectral_cuda **out);
/* NULL and *s == NULL are fine; sets *s to NULL. */
void sg_spectral_cuda_destroy(sg_spectral_cuda **s);
/* y = irfftn(scatter(W . gather(rfftn(x)))) / N; xhat (may be NULL) gets
 * the kept spectrum of x. Device pointers. */
sg_status sg_spectral_cuda_forward(sg_spectral_cuda *s, const void *x,
                                   const void *w, void *y, void *xhat);
/* dx (NULL: skipped) OVERWRITTEN, dw (NULL: skipped) +=; xhat NULL:
 * recomputed from x. Device pointers. */
sg_status sg_spectral_cuda_backward(sg_spectral_cuda *s, const void *x,
                                    const void *xhat, const void *w,
                                    const void *dy, void *dx, void *dw);

/* The passes of the split domain's device path (spectral.c,
 * sg_spectral_conv_forward_dev) on device pointers, legacy default
 * stream: which 0 y = x W, 1 dx = dy W^H, 2 dW += dy x^H over M local
 * modes (sg_spec_mix_*); W's local modes of a replicated W
 * (sg_spec_wlocal_*: add 0 gather into wl, 1 add wl into W; gidx on the
 * device). */
sg_status sg_spec_mix_cuda(int f64, int which, int64_t nb, int64_t cin,
                           int64_t cout, int64_t M, const void *a,
                           const void *b, void *out);
sg_status sg_spec_wlocal_cuda(int f64, int add, int64_t io, int64_t M,
                              int64_t K, const int64_t *gidx, void *W,
                              void *wl);

#ifdef __cplusplus
}
#endif
#endif /* SG_SPECTRAL_CUDA_H */
