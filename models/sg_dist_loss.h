/* shardgrid — losses over sharded predictions, as autograd ops.
 *
 * A prediction (N, C, spatial...) is split over the domain group (its
 * spatial dims) and the data group (its batch). The loss is the one a single
 * process computes on the whole batch and the whole domain: local partial
 * sums in double are summed over the domain group and then over the data
 * group with the deterministic (rank-order) reduction, so every rank gets
 * the same bits, and backward scales by the GLOBAL batch.
 *
 *   MSE     sum m (p - t)^2 / sum m
 *   REL_L2  mean over samples i of sqrt(sum_i m (p - t)^2 / sum_i m t^2)
 *           (the FNO paper's relative L2)
 *
 * m is an optional mask of the prediction's shape (1 valid, 0 masked: land,
 * missing values); NULL counts every element. Masked points are skipped
 * whatever they hold (NaN included) and get gradient 0. A NaN or Inf in the
 * prediction or the target at an unmasked point (or a loss that
 * overflows) is SG_ERR_INVALID_ARG on every rank of both groups, never a
 * silent 0 or NaN loss. Collective over both groups (NULL group: not split
 * there).
 */
#ifndef SG_DIST_LOSS_H
#define SG_DIST_LOSS_H

#include <stdint.h>

#include "sg_autograd.h"
#include "sg_mesh.h"
#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sg_dist_loss_ctx {
  sg_group_t domain;    /* ranks holding other parts of the same samples */
  sg_group_t data;      /* ranks holding other samples */
  int64_t global_batch; /* samples over all data ranks (REL_L2) */
} sg_dist_loss_ctx;

/* kind: SG_LOSS_MSE or SG_LOSS_REL_L2. pred, target, mask: same shape,
 * dtype f32 or f64 (mask: same dtype, 0/1). Records on the tape (or just
 * computes in no-grad mode). */
sg_status sg_ag_dist_loss(sg_tape_t tape, sg_loss_kind kind, sg_var *pred,
                          sg_var *target, sg_var *mask,
                          const sg_dist_loss_ctx *ctx, sg_var **loss);

/* The loss value in double precision (the variable holds it rounded to its
 * dtype). Valid until backward or sg_tape_clear. */
double sg_dist_loss_value(const sg_var *loss);

/* Per-sample relative L2 errors of the local samples, for evaluation
 * without a tape: rel[i] = sqrt(sum_i m (p-t)^2 / sum_i m t^2) with the sums
 * over the domain group. A NaN/Inf in pred or target at an unmasked point
 * is SG_ERR_INVALID_ARG on every rank of the domain group (the other data
 * ranks do not know: use sg_dist_rel_l2_ctx under data parallelism).
 * Collective over domain. */
sg_status sg_dist_rel_l2(sg_dtype dt, int64_t batch, int64_t per_sample,
                         const void *pred, const void *target, const void *mask,
                         sg_group_t domain, double *rel);

/* The same, with the NaN/Inf check agreed over ctx->domain and ctx->data
 * (global_batch is not used): every rank fails alike. Collective over
 * both groups. */
sg_status sg_dist_rel_l2_ctx(sg_dtype dt, int64_t batch, int64_t per_sample,
                             const void *pred, const void *target,
                             const void *mask, const sg_dist_loss_ctx *ctx,
                             double *rel);

#ifdef __cplusplus
}
#endif
#endif /* SG_DIST_LOSS_H */
