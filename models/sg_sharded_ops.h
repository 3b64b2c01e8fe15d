/* shardgrid — the ShardTensor op API: the ops of the autograd tape on
 * ShardTensors, one call per forward and per backward.
 *
 * This is a thin layer over the tape (models/sg_autograd.h): each forward
 * records the tape's op (sg_ag_conv, sg_ag_pool, ...) on a one-op tape
 * kept in the context, over the ShardTensor's interior marked sharded
 * (sg_var_set_sharding), and copies the op's output into a new
 * ShardTensor; each backward seeds that tape with dy
 * (sg_tape_backward_from) and copies the input gradients out. So there is
 * ONE implementation of every op's sharded logic: the communication comes
 * from the op's sharding rule (the halo exchange of sg_exchange.h for the
 * window ops, the global statistics of the normalisations, the global
 * reduction of the losses), and what the tape can do, this API can (uneven
 * up-sampling and transposed convolution, every placement an op's rule
 * accepts, one merge of the normalisation statistics). See
 * docs/architecture.md ("One path").
 *
 * Placements: as the tape's ops accept them (sg_op_rule.accepts):
 * activations (N, C, spatial...) Shard(0) (batch) and Shard(2..)
 * (spatial, each tensor dim by at most one mesh dim) on any mesh dim, or
 * Replicate; Partial never; Shard(1) (channels) only for the ops whose
 * rule accepts it (bias-add). Parameters (weights, biases, norm scale and
 * shift) are plain host arrays, the same on every rank; their gradients
 * come back as this rank's PARTIAL sums (+=), to be summed over the mesh
 * dims that shard the activations (sg_sharded_reduce_dims; DDP does this
 * for training). A parameter array given to a forward must stay valid
 * until its backward (the tape reads it there).
 *
 * Outputs (y, dx) are created by the functions (destroy them with
 * sg_shardtensor_destroy). A context carries the one-op tape; destroy it
 * after backward (a backward runs once per context). All functions are
 * collective over the mesh of x; a failure is returned on every rank (an
 * invalid placement, mismatched shapes, a shard thinner than the op's
 * halo: before any halo message is sent); a failed forward leaves *ctx
 * NULL.
 */
#ifndef SG_SHARDED_OPS_H
#define SG_SHARDED_OPS_H

#include "sg_decomp.h"
#include "sg_exchange.h"
#include "sg_ops.h"
#include "sg_shardtensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sg_sharded_ctx *sg_sharded_ctx_t;
/* Free a context; NULL and *ctx == NULL are fine. Not collective. */
sg_status sg_sharded_ctx_destroy(sg_sharded_ctx_t *ctx);

/* Mesh dims whose gradient sums are Partial for activations placed like x
 * (every mesh dim that shards x's batch or spatial dims), as a dim mask
 * for sg_mesh_group; 0 for an invalid x. Not collective. */
unsigned sg_sharded_reduce_dims(const sg_shardtensor *x);

/* Convolution: win[d] per spatial dim of x (sg_window: kernel, stride,
 * dilation, padding, boundary; no up-sampling), w (Cout, Cin, kernel...),
 * b (Cout) or NULL; y = (N, Cout, out...) placed like x (sg_ag_conv). */
sg_status sg_sharded_conv_forward(const sg_shardtensor *x, const sg_window *win,
                                  int64_t cout, const void *w, const void *b,
                                  sg_shardtensor *y, sg_sharded_ctx_t *ctx);
/* dx (created; NULL: not wanted), dw and db (+=, partial; may be NULL). */
sg_status sg_sharded_conv_backward(sg_sharded_ctx_t ctx, const void *w,
                                   const sg_shardtensor *dy, sg_shardtensor *dx,
                                   void *dw, void *db);

/* Pooling (win[d]: kernel, stride, padding, dilation and boundary per
 * spatial dim; sg_ag_pool). Max pooling fills the padding of
 * SG_BOUNDARY_ZERO dims with -INFINITY (the identity of max, PyTorch's
 * convention: a negative input never meets a padded zero); the other
 * boundary kinds pad with data. Average pooling divides by the full window
 * (count_include_pad: zero padding counts). */
sg_status sg_sharded_pool_forward(sg_pool_kind kind, const sg_shardtensor *x,
                                  const sg_window *win, sg_shardtensor *y,
                                  sg_sharded_ctx_t *ctx);
sg_status sg_sharded_pool_backward(sg_sharded_ctx_t ctx,
                                   const sg_shardtensor *dy,
                                   sg_shardtensor *dx);

/* Up-sampling by integer factors and the transposed convolution with
 * kernel == stride (sg_ag_upsample, sg_ag_convt): the output is the
 * balanced split of the scaled global extent on every mesh, also when a
 * sharded extent does not divide evenly over its ranks (each rank computes
 * the scaled outputs of its inputs and keeps its balanced share; the halo
 * brings the inputs it lacks). LINEAR exchanges a halo of one cell
 * (replicate at the global edges: PyTorch's align_corners=False). */
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
                                  const sg_shardtensor *dy, sg_shardtensor *dx);
sg_status sg_sharded_binary_forward(sg_binary op, const sg_shardtensor *a,
                                    const sg_shardtensor *b, sg_shardtensor *y);
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
                                   const sg_shardtensor *dy, sg_shardtensor *dx,
                                   void *dgamma, void *dbeta);

/* A global loss (the same value on every rank; sg_ag_loss): *value is the
 * tape's loss, in the dtype of p (an f32 loss is rounded to f32). t may be
 * NULL for SUM and MEAN. For REL_L2 the per-item sums are reduced over the
 * mesh dims sharding space, the item mean over the batch shards. */
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
