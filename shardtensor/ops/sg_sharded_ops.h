/* shardgrid — sharded ops: the local kernels of sg_ops.h on ShardTensors.
 *
 * Each sharded op is: (1) the framework's communication, derived from the
 * op's sharding rule, then (2) the local kernel on the local block.
 *   window ops (convolution, pooling): a halo exchange per the op's window
 *     (halo/ plan from the decomposition of the input's spatial dims; the
 *     halo widths follow from the OUTPUT partition, grid/sg_decomp.h), the
 *     local kernel on the block with margins; backward runs the local
 *     backward, then the adjoint exchange (reverse, summing);
 *   pointwise ops: the local kernel on the interiors (no communication);
 *   normalisation: local partial statistics merged over the mesh dims that
 *     split the statistic's elements (Chan, rank order: deterministic),
 *     and the backward's partial sums summed likewise;
 *   losses: local partial sums summed over every mesh dim that shards the
 *     prediction (rank order: deterministic), then the finish step.
 *
 * Accepted placements: activations (N, C, spatial...) may be Shard(0)
 * (batch) and Shard(2..) (spatial, each tensor dim by at most one mesh dim)
 * on any mesh dim, or Replicate; Shard(1) (channels) and Partial are not
 * accepted (SG_ERR_INVALID_ARG on every rank). Parameters (weights, biases,
 * norm scale/shift) are plain host arrays, the same on every rank; their
 * gradients come back as this rank's PARTIAL sums (+=), to be summed over
 * the mesh dims that shard the activations (grid group of
 * sg_sharded_reduce_dims; DDP does this for training).
 *
 * Outputs (y, dx) are created by the functions (destroy them with
 * sg_shardtensor_destroy). A context carries what backward needs (the
 * exchanged input block, the halo plan, statistics); destroy it after
 * backward. All functions are collective over the mesh of x; a failure is
 * returned on every rank (an invalid placement, mismatched shapes, a shard
 * thinner than the op's halo: before any message is sent).
 */
#ifndef SG_SHARDED_OPS_H
#define SG_SHARDED_OPS_H

#include "sg_decomp.h"
#include "sg_ops.h"
#include "sg_shardtensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A window per spatial dim (grid's sg_window: kernel, stride, symmetric
 * padding, dilation) and the boundary of each spatial dim (how the padding
 * is filled at the global edges; periodic wraps across ranks). */
typedef struct sg_sharded_window {
  int nsp;
  sg_window w[SG_OPS_MAX_SPATIAL];
  sg_boundary boundary[SG_OPS_MAX_SPATIAL];
} sg_sharded_window;

typedef struct sg_sharded_ctx *sg_sharded_ctx_t;
/* Free a context; NULL and *ctx == NULL are fine. Not collective. */
void sg_sharded_ctx_destroy(sg_sharded_ctx_t *ctx);

/* Mesh dims whose gradient sums are Partial for activations placed like x
 * (every mesh dim that shards x), as a dim mask for sg_mesh_group. Not
 * collective. */
unsigned sg_sharded_reduce_dims(const sg_shardtensor *x);

/* Convolution: w (Cout, Cin, kernel...) with the kernel of win, b (Cout) or
 * NULL; y = (N, Cout, out...) placed like x. */
sg_status sg_sharded_conv_forward(const sg_shardtensor *x,
                                  const sg_sharded_window *win, int64_t cout,
                                  const void *w, const void *b,
                                  sg_shardtensor *y, sg_sharded_ctx_t *ctx);
/* dx (created; NULL: not wanted), dw and db (+=, partial; may be NULL). */
sg_status sg_sharded_conv_backward(sg_sharded_ctx_t ctx, const void *w,
                                   const sg_shardtensor *dy,
                                   sg_shardtensor *dx, void *dw, void *db);

/* Pooling (dilation 1). */
sg_status sg_sharded_pool_forward(sg_pool_kind kind, const sg_shardtensor *x,
                                  const sg_sharded_window *win,
                                  sg_shardtensor *y, sg_sharded_ctx_t *ctx);
sg_status sg_sharded_pool_backward(sg_sharded_ctx_t ctx,
                                   const sg_shardtensor *dy,
                                   sg_shardtensor *dx);

/* Up-sampling by integer factors and the transposed convolution with
 * kernel == stride: the output shard of each rank is `scale` times its
 * input shard, which is the balanced split of the output only when every
 * sharded spatial extent divides evenly over its ranks; otherwise
 * SG_ERR_NOT_SUPPORTED (on every rank). LINEAR exchanges a halo of one
 * cell (replicate at the global edges: PyTorch's align_corners=False). */
sg_status sg_sharded_upsample_forward(sg_upsample_kind kind,
                                      const sg_shardtensor *x,
                                      const int64_t *scale, sg_shardtensor *y,
                                      sg_sharded_ctx_t *ctx);
sg_status sg_sharded_upsample_backward(sg_sharded_ctx_t ctx,
                                       const sg_shardtensor *dy,
                                       sg_shardtensor *dx);
/* w (Cin, Cout, kernel...), b (Cout) or NULL; the kernel per dim is
 * kernel[d] (= stride). dx created, dw and db (+=, partial). */
sg_status sg_sharded_convt_forward(const sg_shardtensor *x,
                                   const int64_t *kernel, int64_t cout,
                                   const void *w, const void *b,
                                   sg_shardtensor *y, sg_sharded_ctx_t *ctx);
sg_status sg_sharded_convt_backward(sg_sharded_ctx_t ctx, const void *w,
                                    const sg_shardtensor *dy,
                                    sg_shardtensor *dx, void *dw, void *db);

/* Channel-wise linear (1x1 convolution; w (Cout, Cin), b (Cout) or NULL)
 * and bias-add (b (C)): local on the interiors; parameter gradients are
 * partial (+=). */
sg_status sg_sharded_linear_forward(const sg_shardtensor *x, int64_t cout,
                                    const void *w, const void *b,
                                    sg_shardtensor *y);
sg_status sg_sharded_linear_backward(const sg_shardtensor *x, const void *w,
                                     const sg_shardtensor *dy,
                                     sg_shardtensor *dx, void *dw, void *db);
sg_status sg_sharded_bias_forward(const sg_shardtensor *x, const void *b,
                                  sg_shardtensor *y);
/* The gradient of x is dy itself; db += partial sums. */
sg_status sg_sharded_bias_backward(const sg_shardtensor *dy, void *db);

/* Pointwise (interiors; a and b placed and shaped alike). Bit for bit the
 * one-process result. */
sg_status sg_sharded_act_forward(sg_act act, const sg_shardtensor *x,
                                 sg_shardtensor *y);
sg_status sg_sharded_act_backward(sg_act act, const sg_shardtensor *x,
                                  const sg_shardtensor *dy,
                                  sg_shardtensor *dx);
sg_status sg_sharded_binary_forward(sg_binary op, const sg_shardtensor *a,
                                    const sg_shardtensor *b,
                                    sg_shardtensor *y);
/* da, db created (either may be NULL). */
sg_status sg_sharded_binary_backward(sg_binary op, const sg_shardtensor *a,
                                     const sg_shardtensor *b,
                                     const sg_shardtensor *dy,
                                     sg_shardtensor *da, sg_shardtensor *db);

/* Normalisation with global statistics (d->kind, groups, eps; sizes come
 * from x): BATCH merges over the mesh dims sharding batch and space,
 * INSTANCE and GROUP over those sharding space, LAYER (over channels)
 * needs none. gamma, beta: (C) or NULL. */
sg_status sg_sharded_norm_forward(const sg_norm_desc *d,
                                  const sg_shardtensor *x, const void *gamma,
                                  const void *beta, sg_shardtensor *y,
                                  sg_sharded_ctx_t *ctx);
/* dx created; dgamma, dbeta (+=, partial; may be NULL). */
sg_status sg_sharded_norm_backward(sg_sharded_ctx_t ctx, const void *gamma,
                                   const sg_shardtensor *dy,
                                   sg_shardtensor *dx, void *dgamma,
                                   void *dbeta);

/* A global loss (the same value on every rank). t may be NULL for SUM and
 * MEAN. For REL_L2 the batch dim must not be split across the reduction
 * (per-item sums are reduced over the mesh dims sharding space; the item
 * mean over the batch shards). */
sg_status sg_sharded_loss_forward(sg_loss_kind kind, const sg_shardtensor *p,
                                  const sg_shardtensor *t, double *value,
                                  sg_sharded_ctx_t *ctx);
/* dp, dt created (dt may be NULL); g: the upstream gradient. */
sg_status sg_sharded_loss_backward(sg_sharded_ctx_t ctx, double g,
                                   sg_shardtensor *dp, sg_shardtensor *dt);

#ifdef __cplusplus
}
#endif
#endif /* SG_SHARDED_OPS_H */
