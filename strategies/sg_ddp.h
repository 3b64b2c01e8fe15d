/* shardgrid — data-parallel gradient reduction (DDP), derived from
 * placements.
 *
 * The rule that lets strategies compose: a weight used by sharded
 * activations gets a Partial gradient on every mesh dim where the data is
 * split — the batch over dp, the domain over h/w, the sequence over sp. So
 * the group a gradient is summed over is computed from the activations'
 * placements (sg_ddp_reduce_dims), never hard-coded per strategy.
 *
 * A reducer works on one flat gradient buffer, cut into buckets. As backward
 * finishes parameters (sg_ddp_mark_ready), every bucket whose elements are
 * all ready starts a non-blocking all-reduce, so communication overlaps the
 * rest of backward; sg_ddp_finish waits for all of them. In deterministic
 * mode the buckets are summed with a fixed-order reduction at finish, giving
 * the same bits on every rank and every run.
 */
#ifndef SG_DDP_H
#define SG_DDP_H

#include <stdint.h>

#include "sg_device.h"
#include "sg_mesh.h"
#include "sg_shardtensor.h"
#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Mesh dims over which the gradient of a weight used by activations with
 * these placements is Partial: the dims whose placement is Shard (data
 * split) or Partial. Returned as a dim mask for sg_mesh_group. Not
 * collective. */
unsigned sg_ddp_reduce_dims(sg_mesh_t mesh, const sg_placement *act_placements);

typedef struct sg_ddp *sg_ddp_t;

/* A reducer for grad[0..n) (f32) over the group of dim_mask. bucket_elems
 * <= 0 picks 1 Mi elements (4 MiB). The buffer must stay valid. Not
 * collective (no communication), but all ranks of the group must create it
 * alike. */
sg_status sg_ddp_create(sg_mesh_t mesh, unsigned dim_mask, float *grad,
                        int64_t n, int64_t bucket_elems, int deterministic,
                        sg_ddp_t *ddp);
sg_status sg_ddp_destroy(sg_ddp_t *ddp);

/* The reducer's buffer moved: grad[0..n) (the same n) on dev from now on
 * (a device plan, sg_parallel_to_device). On a device the buckets go
 * through the comm layer on the device buffers (NCCL on a GPU); the
 * deterministic sum is the host's fixed-order one, the same blocks and
 * rank-order adds on the device (the host's bits). SG_ERR_NOT_SUPPORTED
 * when the group's device buffers can go neither through NCCL nor a
 * CUDA-aware MPI. No reduction may be in flight. Not collective. */
sg_status sg_ddp_set_buffer(sg_ddp_t ddp, float *grad, sg_device dev);

/* Start a new backward (all elements not ready). Not collective. */
sg_status sg_ddp_begin(sg_ddp_t ddp);
/* Elements [offset, offset + count) hold their final local gradient.
 * Buckets that become complete start their reduction. Ranks must mark the
 * same ranges in the same order. Collective over the group (non-blocking). */
sg_status sg_ddp_mark_ready(sg_ddp_t ddp, int64_t offset, int64_t count);
/* Mark everything not yet marked, wait for all reductions, and multiply by
 * scale (e.g. 1 when the loss is already a global mean). Collective. */
sg_status sg_ddp_finish(sg_ddp_t ddp, double scale);

/* Number of group members (1: nothing to reduce). */
int sg_ddp_group_size(sg_ddp_t ddp);

#ifdef __cplusplus
}
#endif
#endif /* SG_DDP_H */
