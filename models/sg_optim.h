/* shardgrid — optimizers on flat parameter buffers.
 *
 * Parameters, gradients and optimizer state each live in one contiguous
 * buffer (llm.c style), so the optimizer, the gradient reduction, ZeRO
 * sharding and checkpoints each work on one span. An optimizer step is
 * element-wise: on a shard of the buffer it computes exactly the values the
 * whole-buffer step computes for those elements, which is what makes
 * ZeRO-1/2/3 give the same trajectory as one process.
 *
 * None of these functions is collective, except sg_grad_global_norm.
 */
#ifndef SG_OPTIM_H
#define SG_OPTIM_H

#include <stdint.h>

#include "sg_mesh.h"
#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sg_adamw_config {
  double beta1;        /* 0.9 */
  double beta2;        /* 0.999 */
  double eps;          /* 1e-8 */
  double weight_decay; /* decoupled (AdamW), 0 disables */
} sg_adamw_config;

sg_adamw_config sg_adamw_defaults(void);

/* One AdamW step (Loshchilov & Hutter) on n elements, t >= 1 the step number
 * (for bias correction), lr the learning rate of this step:
 *   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
 *   p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p)
 * grad_scale multiplies g first (gradient clipping, loss scaling).
 * The arithmetic is done in double per element and rounded to float once,
 * so it is the same whatever the partition or thread count. */
sg_status sg_adamw_step_f32(float *param, const float *grad, float *m, float *v,
                            int64_t n, int64_t t, double lr, double grad_scale,
                            const sg_adamw_config *cfg);

/* Plain SGD with momentum (m = mu m + g; p -= lr (m + wd p)). */
sg_status sg_sgd_step_f32(float *param, const float *grad, float *m, int64_t n,
                          double lr, double momentum, double weight_decay,
                          double grad_scale);

typedef enum sg_lr_schedule {
  SG_LR_CONSTANT = 0,
  SG_LR_COSINE, /* warmup, then cosine from lr to min_lr at total steps */
  SG_LR_STEP    /* warmup, then lr * gamma^(floor(step / step_size)) */
} sg_lr_schedule;

typedef struct sg_lr_config {
  sg_lr_schedule kind;
  double lr, min_lr;
  int64_t warmup, total; /* steps */
  int64_t step_size;     /* SG_LR_STEP */
  double gamma;          /* SG_LR_STEP */
} sg_lr_config;

/* Parse "constant", "cosine" or "step". */
sg_status sg_lr_schedule_parse(const char *name, sg_lr_schedule *kind);
/* The learning rate at step t (1-based). */
double sg_lr_at(const sg_lr_config *cfg, int64_t t);

/* Sum of squares of n elements, accumulated in double in a fixed order
 * (blocks of 4096 summed pairwise), so it does not depend on threads. */
double sg_sumsq_f32(const float *x, int64_t n);

/* The global L2 norm of a gradient: local_sumsq is this rank's sum of
 * squares over the elements it owns; group is the set of ranks over which
 * the gradient is sharded (NULL: not sharded, the norm is local). The
 * reduction is deterministic. Collective over group. */
sg_status sg_grad_global_norm(double local_sumsq, sg_group_t group,
                              double *norm);

/* The factor that clips a gradient of norm `norm` to max_norm
 * (1 when max_norm <= 0 or the norm is within it). */
double sg_clip_scale(double norm, double max_norm);

#ifdef __cplusplus
}
#endif
#endif /* SG_OPTIM_H */
