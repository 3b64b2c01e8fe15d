/* shardgrid — the local arithmetic of the distributed loss (dist_loss.c) as
 * SG_HD functions: the host loops and the CUDA kernels
 * (models/cuda/dist_loss_cuda.cu) call the same code, so the host tests
 * verify the device path's arithmetic (tests/models/test_dist_loss.c).
 * Everything is in double whatever the data's dtype (f32 values widened).
 * The launchers of the device path are declared at the end (CUDA builds). */
#ifndef SG_DIST_LOSS_INL_H
#define SG_DIST_LOSS_INL_H

#include <math.h>
#include <stdint.h>

#include "sg_dtype.h" /* SG_HD */
#include "sg_status.h"

/* element i of a f32 (f32 != 0) or f64 array, widened to double */
static inline SG_HD double sg_dloss_ld(const void *p, int f32, int64_t i) {
  return f32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

/* The masked sums of elements [j0, j1) (one sample), in index order:
 * *a = sum m (p - t)^2, *b = sum m t^2 (rel != 0: relative L2) or sum m
 * (MSE); returns the number of NaN/Inf values of p, t or m at unmasked
 * points (m NULL: every point counts with weight 1). A masked point (m ==
 * 0) is skipped whatever it holds (0 * NaN would be NaN). */
static inline SG_HD double sg_dloss_sample_sums(int rel, int f32, int64_t j0,
                                                int64_t j1, const void *p,
                                                const void *t, const void *m,
                                                double *a, double *b) {
  double sa = 0.0, sb = 0.0, bad = 0.0;
  for (int64_t j = j0; j < j1; ++j) {
    const double w = m ? sg_dloss_ld(m, f32, j) : 1.0;
    if (w == 0.0) continue;
    const double pv = sg_dloss_ld(p, f32, j), tv = sg_dloss_ld(t, f32, j),
                 d = pv - tv;
    if (!isfinite(pv) || !isfinite(tv) || !isfinite(w)) {
      bad += 1.0;
      continue;
    }
    sa += w * d * d;
    sb += rel ? w * tv * tv : w;
  }
  *a = sa;
  *b = sb;
  return bad;
}

/* The gradient scale of sample i: from the GLOBAL sums (MSE: sums[0] = S,
 * sums[1] = M over every sample of every rank; relative L2: sums[2 i],
 * sums[2 i + 1] = a_i, b_i of sample i over the domain), the upstream
 * gradient g and the global batch. */
static inline SG_HD double sg_dloss_coef(int rel, int64_t i, const double *sums,
                                         double g, int64_t global_batch) {
  if (!rel) return sums[1] > 0 ? 2.0 * g / sums[1] : 0.0;
  const double a2 = sums[2 * i], b2 = sums[2 * i + 1];
  const double r = b2 > 0 ? sqrt(a2 / b2) : 0.0;
  return r > 0 ? g / ((double)global_batch * b2 * r) : 0.0;
}

/* d loss / d p at element j of coefficient c: c m (p - t), 0 at a masked
 * point whatever it holds (0 * NaN is NaN). */
static inline SG_HD double sg_dloss_grad(double c, int f32, int64_t j,
                                         const void *p, const void *t,
                                         const void *m) {
  const double w = m ? sg_dloss_ld(m, f32, j) : 1.0;
  return w == 0.0 ? 0.0
                  : c * w * (sg_dloss_ld(p, f32, j) - sg_dloss_ld(t, f32, j));
}

#ifndef __CUDACC__
#include "sg_config.h"
#endif
#if defined(__CUDACC__) || SG_HAVE_CUDA
#ifdef __cplusplus
extern "C" {
#endif
/* sums (DEVICE memory, 2 batch + 1 doubles) = the per-sample sums of
 * sg_dloss_sample_sums (sums[2 i], sums[2 i + 1]) and the total count of
 * NaN/Inf values (sums[2 batch]): one thread per sample, the host loop's
 * order of sums (the same bits but for FMA contraction). p, t, m (m NULL:
 * no mask) of batch x per elements of dt (f32, f64) on the device. */
sg_status sg_dist_loss_sums_cuda(int rel, sg_dtype dt, int64_t batch,
                                 int64_t per, const void *p, const void *t,
                                 const void *m, double *sums, void *stream);
/* dp (batch x per of dt on the device) = the gradient of the loss from the
 * GLOBAL sums (DEVICE memory, as sg_dloss_coef reads them), the upstream
 * gradient g and the global batch: one thread per element. */
sg_status sg_dist_loss_bwd_cuda(int rel, sg_dtype dt, int64_t batch,
                                int64_t per, const void *p, const void *t,
                                const void *m, const double *sums, double g,
                                int64_t global_batch, void *dp, void *stream);
#ifdef __cplusplus
}
#endif
#endif

#endif
