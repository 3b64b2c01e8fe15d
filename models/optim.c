/* shardgrid — optimizers on flat parameter buffers. */
#include "sg_optim.h"

#include "optim_inl.h"
#include "sg_comm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

sg_adamw_config sg_adamw_defaults(void) {
  sg_adamw_config c = {0.9, 0.999, 1e-8, 0.0};
  return c;
}

sg_status sg_adamw_step_f32(float *param, const float *grad, float *m, float *v,
                            int64_t n, int64_t t, double lr, double grad_scale,
                            const sg_adamw_config *cfg) {
  sg_status st = SG_OK;
  if (n < 0 || t < 1 || !cfg)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_adamw_step_f32: n = %lld, t = %lld",
             (long long)n, (long long)t);
  if (n > 0 && (!param || !grad || !m || !v))
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_adamw_step_f32: NULL buffer");
  const sg_adamw_coef k = sg_adamw_coef_at(cfg, t, lr, grad_scale);
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i)
    sg_adamw_elem_f32(k, grad[i], &param[i], &m[i], &v[i]);
fail:
  return st;
}

sg_status sg_sgd_step_f32(float *param, const float *grad, float *m, int64_t n,
                          double lr, double momentum, double weight_decay,
                          double grad_scale) {
  sg_status st = SG_OK;
  if (n < 0)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_sgd_step_f32: n = %lld", (long long)n);
  if (n > 0 && (!param || !grad || (momentum != 0.0 && !m)))
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_sgd_step_f32: NULL buffer");
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) {
    double g = (double)grad[i] * grad_scale;
    if (momentum != 0.0) {
      g = momentum * (double)m[i] + g;
      m[i] = (float)g;
    }
    double p = (double)param[i];
    param[i] = (float)(p - lr * (g + weight_decay * p));
  }
fail:
  return st;
}

sg_status sg_lr_schedule_parse(const char *name, sg_lr_schedule *kind) {
  sg_status st = SG_OK;
  if (!name || !kind)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_lr_schedule_parse: NULL argument");
  if (strcmp(name, "constant") == 0)
    *kind = SG_LR_CONSTANT;
  else if (strcmp(name, "cosine") == 0)
    *kind = SG_LR_COSINE;
  else if (strcmp(name, "step") == 0)
    *kind = SG_LR_STEP;
  else
    SG_RAISE(SG_ERR_CONFIG,
             "unknown learning-rate schedule '%s' (constant, cosine, step)",
             name);
fail:
  return st;
}

double sg_lr_at(const sg_lr_config *c, int64_t t) {
  if (c->warmup > 0 && t <= c->warmup)
    return c->lr * (double)t / (double)c->warmup;
  switch (c->kind) {
  case SG_LR_COSINE: {
    int64_t span = c->total - c->warmup;
    if (span <= 0) return c->lr;
    double x = (double)(t - c->warmup) / (double)span;
    if (x > 1.0) x = 1.0;
    return c->min_lr +
           0.5 * (c->lr - c->min_lr) * (1.0 + cos(3.14159265358979323846 * x));
  }
  case SG_LR_STEP: {
    int64_t k = c->step_size > 0 ? (t - c->warmup) / c->step_size : 0;
    return c->lr * pow(c->gamma, (double)k);
  }
  default: return c->lr;
  }
}

double sg_sumsq_f32(const float *x, int64_t n) {
  /* block sums in parallel, then summed in block order: the same bits for
   * any thread count */
  enum { B = 4096, NB_STACK = 256 };
  int64_t nb = (n + B - 1) / B;
  double stack[NB_STACK], total = 0.0;
  double *part = nb <= NB_STACK ? stack : malloc((size_t)nb * sizeof *part);
  if (!part) { /* no memory: sequential, same order */
    for (int64_t i = 0; i < n; ++i) total += (double)x[i] * (double)x[i];
    return total;
  }
#pragma omp parallel for schedule(static) if (nb > 8)
  for (int64_t b = 0; b < nb; ++b) {
    /* 8 interleaved lanes (vectorises; fixed order), then in lane order */
    double acc[8] = {0}, s = 0.0;
    int64_t i = b * B, e = (b + 1) * B < n ? (b + 1) * B : n;
    for (; i + 8 <= e; i += 8)
      for (int l = 0; l < 8; ++l) acc[l] += (double)x[i + l] * (double)x[i + l];
    for (; i < e; ++i) s += (double)x[i] * (double)x[i];
    for (int l = 0; l < 8; ++l) s += acc[l];
    part[b] = s;
  }
  for (int64_t b = 0; b < nb; ++b) total += part[b];
  if (part != stack) free(part);
  return total;
}

sg_status sg_grad_global_norm(double local_sumsq, sg_group_t group,
                              double *norm) {
  sg_status st = SG_OK;
  double total = local_sumsq;
  if (!norm) SG_RAISE(SG_ERR_INVALID_ARG, "sg_grad_global_norm: NULL norm");
  if (group && sg_group_size(group) > 1)
    SG_TRY(sg_allreduce_det(group, &local_sumsq, &total, 1, SG_DTYPE_F64,
                            SG_REDUCE_SUM));
  *norm = sqrt(total);
fail:
  return st;
}

double sg_clip_scale(double norm, double max_norm) {
  if (max_norm <= 0.0 || !(norm > max_norm)) return 1.0;
  return max_norm / (norm + 1e-6);
}
