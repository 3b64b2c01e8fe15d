/* shardgrid — the AdamW element update, shared by the host loop (optim.c)
 * and the CUDA kernel (shardtensor/ops/cuda/): written once, so the host
 * tests verify the device path's arithmetic. Internal. */
#ifndef SG_OPTIM_INL_H
#define SG_OPTIM_INL_H

#include <math.h>
#include <stdint.h>

#include "sg_dtype.h" /* SG_HD */
#include "sg_optim.h"

/* The per-step constants of an AdamW step (sg_optim.h). */
typedef struct sg_adamw_coef {
  double b1, b2, ic1, ic2, lr, wd, grad_scale;
  float eps;
} sg_adamw_coef;

static inline SG_HD sg_adamw_coef sg_adamw_coef_at(const sg_adamw_config *cfg,
                                                   int64_t t, double lr,
                                                   double grad_scale) {
  sg_adamw_coef k;
  k.b1 = cfg->beta1;
  k.b2 = cfg->beta2;
  k.ic1 = 1.0 / (1.0 - pow(k.b1, (double)t));
  k.ic2 = 1.0 / (1.0 - pow(k.b2, (double)t));
  k.lr = lr;
  k.wd = cfg->weight_decay;
  k.grad_scale = grad_scale;
  k.eps = (float)cfg->eps;
  return k;
}

/* One element: moments and the parameter in double; the step
 * m^/(sqrt(v^) + eps) in float, as the moments are stored (a double sqrt
 * and division per element were 3% of an FNO step; in float they
 * vectorise twice as wide on units several times faster). k by value: no
 * aliasing with the float arrays, so the host loop vectorises. */
static inline SG_HD void sg_adamw_elem_f32(sg_adamw_coef k, float grad,
                                           float *param, float *m, float *v) {
  double g = (double)grad * k.grad_scale;
  double mi = k.b1 * (double)*m + (1.0 - k.b1) * g;
  double vi = k.b2 * (double)*v + (1.0 - k.b2) * g * g;
  *m = (float)mi;
  *v = (float)vi;
  float upd = (float)(mi * k.ic1) / (sqrtf((float)(vi * k.ic2)) + k.eps);
  double p = (double)*param;
  p -= k.lr * ((double)upd + k.wd * p);
  *param = (float)p;
}

#endif /* SG_OPTIM_INL_H */
