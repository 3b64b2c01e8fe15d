/* shardgrid — the communication of the sharded ops: the halo exchange of a
 * window op on a sharded (N, C, spatial...) tensor and the global reduction
 * of a loss. This is the framework side of the autograd tape
 * (models/sg_autograd.h): the tape creates one exchange per (layout,
 * window) and runs it before a window op's forward and its adjoint after
 * the backward; a user kernel never calls it. The ShardTensor op API
 * (models/sg_sharded_ops.h) is a thin layer over the tape, so there is one
 * implementation of every op's sharded logic (docs/architecture.md).
 *
 * Accepted placements: batch Shard(0) and spatial Shard(2..) (each tensor
 * dim by at most one mesh dim) on any mesh dim, or Replicate; Shard(1)
 * (channels) and Partial are refused by the exchange.
 */
#ifndef SG_EXCHANGE_H
#define SG_EXCHANGE_H

#include "sg_decomp.h"
#include "sg_ops.h"
#include "sg_shardtensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the exchange of a window op ------------------------------------------
 * The halo machinery of every window op, for one input layout and one window:
 * the output of the op is the BALANCED split of its global output extent
 * (the output-partition rule, grid/sg_decomp.h); a rank owning outputs
 * [y0, y1] along a dim gets the input cells they read, taken from its
 * neighbours (halo exchange) and from the dim's boundary kind at the global
 * edges, as one contiguous box (n, c, box...) for a local kernel.
 *
 * The window per spatial dim is grid's sg_window (kernel, stride, dilation,
 * padding (lo, hi), up-sampling u, boundary; nearest up-sampling and the
 * transposed convolution k = s are {kernel 1, up s}; bi-linear is {3, 1, 1,
 * (1, 1), up s, replicate}). A rank owning outputs [y0, y1] computes the coarse outputs
 * [floor(y0/u), floor(y1/u)] on its box, i.e. `natural` outputs, of which
 * the owned ones start at `crop` (u = 1: natural = owned, crop = 0).
 * Halos may be negative (the box is then a crop of the interior) and differ
 * per rank and side. */
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
 * placements: *batch (tensor dim 0, any number of mesh dims: dp and fsdp
 * both), *channel (dim 1), *space (dims 2..), as masks for sg_mesh_group. SG_ERR_INVALID_ARG for Partial or invalid
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
                                     const sg_window *win,
                                     sg_sharded_exchange_t *ex);
/* NULL and *ex == NULL are fine. Not collective. Before the mesh. */
sg_status sg_sharded_exchange_destroy(sg_sharded_exchange_t *ex);
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

/* The block behind an exchange, for a caller that runs it on device
 * buffers (models/ag_halo.c): the halo plan (NULL when info.identity), the
 * block's element count, the element offset of interior cell 0, the
 * block's element strides per tensor dim (ds[0] batch, ds[1] channel,
 * ds[2 + d] spatial) and the element offset of the kernel's box (its cell
 * 0). The forward copies the interior into a zeroed block at origin, runs
 * the plan's exchange and reads the box from box_base; the adjoint
 * writes dbox into a zeroed block at box_base, runs the plan's adjoint and
 * reads the interior at origin. Not collective. */
typedef struct sg_exchange_block {
  struct sg_halo_plan *plan;
  int64_t count, origin, box_base;
  int64_t ds[SG_TENSOR_MAX_DIMS];
} sg_exchange_block;
void sg_sharded_exchange_get_block(sg_sharded_exchange_t ex,
                                   sg_exchange_block *block);

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

#ifdef __cplusplus
}
#endif
#endif /* SG_EXCHANGE_H */
