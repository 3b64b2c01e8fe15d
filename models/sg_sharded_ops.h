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

/* ---- the exchange of a window op (shared with the autograd tape) ----------
 * The halo machinery of every window op, for one input layout and one window:
 * the output of the op is the BALANCED split of its global output extent
 * (the output-partition rule, grid/sg_decomp.h); a rank owning outputs
 * [y0, y1] along a dim gets the input cells they read, taken from its
 * neighbours (halo exchange) and from the dim's boundary kind at the global
 * edges, as one contiguous box (n, c, box...) for a local kernel.
 *
 * A window along one spatial dim is the general form of kernel k, stride s,
 * dilation d, padding (lo, hi) and an up-sampling factor u (>= 1): the op has
 * nc = (n + lo + hi - d(k-1) - 1) / s + 1 "coarse" outputs, coarse output z
 * reads inputs s*z - lo + d*j (j < k), and gives the u outputs u*z .. u*z+u-1
 * (nearest up-sampling and the transposed convolution k = s are the window
 * {1, 1, 1, (0, 0)} with u = s; bi-linear is {3, 1, 1, (1, 1), replicate}
 * with u = s). A rank owning outputs [y0, y1] computes the coarse outputs
 * [floor(y0/u), floor(y1/u)] on its box, i.e. `natural` outputs, of which
 * the owned ones start at `crop` (u = 1: natural = owned, crop = 0).
 * Halos may be negative (the box is then a crop of the interior) and differ
 * per rank and side. */
typedef struct sg_exchange_dim {
  int64_t kernel, stride, dilation; /* >= 1 (0 is taken as 1) */
  int64_t pad[2];                   /* padding (lo, hi) >= 0 */
  int64_t up;                       /* up-sampling factor >= 1 (0: 1) */
  sg_boundary boundary;             /* fill beyond the global edges */
} sg_exchange_dim;

typedef struct sg_exchange_info {
  int nsp;
  int64_t in_local[SG_OPS_MAX_SPATIAL];   /* this rank's input interior */
  int64_t box[SG_OPS_MAX_SPATIAL];        /* input box given to the kernel */
  int64_t box_origin[SG_OPS_MAX_SPATIAL]; /* global input cell of box cell 0
                                             (< 0 or box beyond the extent:
                                             padding at the global edges) */
  int64_t out_global[SG_OPS_MAX_SPATIAL]; /* the op's global output extent */
  int64_t out_local[SG_OPS_MAX_SPATIAL];  /* owned outputs (balanced split) */
  int64_t natural[SG_OPS_MAX_SPATIAL];    /* outputs computed on the box */
  int64_t crop[SG_OPS_MAX_SPATIAL];       /* first owned one among them */
  int identity; /* the box is the interior: nothing to exchange or copy */
  int cropped;  /* natural != out_local in some dim */
} sg_exchange_info;

typedef struct sg_sharded_exchange *sg_sharded_exchange_t;

/* The mesh dims that split a (N, C, spatial...) tensor with these
 * placements: *batch (tensor dim 0), *channel (dim 1), *space (dims 2..), as
 * masks for sg_mesh_group. SG_ERR_INVALID_ARG for Partial or invalid
 * placements. Not collective. */
sg_status sg_sharded_split_masks(sg_mesh_t mesh, int ndim,
                                 const sg_placement *placements,
                                 unsigned *batch, unsigned *channel,
                                 unsigned *space);

/* Create the exchange for inputs (global_shape, placements, dtype) and the
 * window win[0..ndim-2). Validates everything from global information first
 * (so every rank finds the same error before any message): Partial or
 * Shard(1) placements (SG_ERR_INVALID_ARG), a spatial dim split by two mesh
 * dims or an empty shard (SG_ERR_NOT_SUPPORTED), a window that does not fit
 * (SG_ERR_SHAPE), a shard thinner than the halo it must supply or an edge
 * fill it cannot make (SG_ERR_HALO). Then builds the halo plan (halo/).
 * Collective over the mesh; every rank gets the same status. */
sg_status sg_sharded_exchange_create(sg_mesh_t mesh, sg_dtype dtype, int ndim,
                                     const int64_t *global_shape,
                                     const sg_placement *placements,
                                     const sg_exchange_dim *win,
                                     sg_sharded_exchange_t *ex);
/* NULL and *ex == NULL are fine. Not collective. Before the mesh. */
void sg_sharded_exchange_destroy(sg_sharded_exchange_t *ex);
/* The geometry of this rank. Not collective. */
void sg_sharded_exchange_get_info(sg_sharded_exchange_t ex,
                                  sg_exchange_info *info);
/* Forward: x is this rank's input interior (local shape, any strides, host);
 * *box is created (contiguous (n, c, info.box...), owned: sg_free it; its
 * data is NULL only for an empty batch shard). Collective with the
 * neighbours (every rank of the mesh calls it). */
sg_status sg_sharded_exchange_forward(sg_sharded_exchange_t ex,
                                      const sg_tensor *x, sg_tensor *box);
/* Adjoint: dbox (contiguous (n, c, box...); used as scratch, its contents
 * are lost) is summed back onto the interiors it was read from (reverse
 * halo exchange); dx (local shape, any strides) is OVERWRITTEN with the
 * result. Collective with the neighbours. */
sg_status sg_sharded_exchange_adjoint(sg_sharded_exchange_t ex, void *dbox,
                                      const sg_tensor *dx);

/* Losses: turn this rank's partial sums (sg_loss_partial of its local
 * block, local_batch items) into the global loss value. space: the mesh
 * dims sharding the non-batch dims, batch: those sharding the batch (masks
 * as above). partial is replaced by the global partials that
 * sg_loss_backward needs (for REL_L2: per local item); *grad_scale is the
 * factor for the upstream gradient given to sg_loss_backward. Deterministic
 * (rank order). Collective over the groups of both masks. */
sg_status sg_sharded_loss_reduce(sg_mesh_t mesh, sg_loss_kind kind,
                                 unsigned space, unsigned batch,
                                 int64_t local_batch, int64_t global_batch,
                                 double *partial, double *value,
                                 double *grad_scale);

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

/* Pooling (kernel, stride, padding and dilation per dim of win). Max
 * pooling fills the padding of SG_BOUNDARY_ZERO dims with -INFINITY (the
 * identity of max, PyTorch's convention: a negative input never meets a
 * padded zero); the other boundary kinds pad with data. Average pooling
 * divides by the full window (count_include_pad: zero padding counts). */
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
