/* shardgrid — ShardTensors: tensors distributed over a device mesh.
 *
 * A ShardTensor has a global shape, a mesh, and one placement per mesh dim:
 *   Shard(d)    the tensor dim d is split over that mesh dim (balanced rule:
 *               n over p ranks, the first n % p get one more);
 *   Replicate   every rank along that mesh dim holds the same values;
 *   Partial     every rank holds a summand; the value is the sum over that
 *               mesh dim.
 * Several mesh dims may shard the same tensor dim: the outer mesh dim splits
 * first, the inner one splits each piece again (DTensor's rule).
 *
 * Every rank can compute the local shape and offset of every other rank
 * (sg_shardtensor_box), so no code needs even splits. The local block may
 * carry halo margins (lo, hi per tensor dim) around the owned interior.
 */
#ifndef SG_SHARDTENSOR_H
#define SG_SHARDTENSOR_H

#include <stdint.h>

#include "sg_mesh.h"
#include "sg_status.h"
#include "sg_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sg_placement_kind {
  SG_PLACEMENT_REPLICATE = 0,
  SG_PLACEMENT_SHARD,
  SG_PLACEMENT_PARTIAL
} sg_placement_kind;

typedef struct sg_placement {
  sg_placement_kind kind;
  int dim; /* the tensor dim, for SG_PLACEMENT_SHARD */
} sg_placement;

static inline sg_placement sg_shard(int dim) {
  sg_placement p = {SG_PLACEMENT_SHARD, dim};
  return p;
}
static inline sg_placement sg_replicate(void) {
  sg_placement p = {SG_PLACEMENT_REPLICATE, -1};
  return p;
}
static inline sg_placement sg_partial(void) {
  sg_placement p = {SG_PLACEMENT_PARTIAL, -1};
  return p;
}

typedef struct sg_shardtensor {
  sg_mesh_t mesh;                             /* not owned */
  int ndim;
  int64_t global_shape[SG_TENSOR_MAX_DIMS];
  sg_placement placements[SG_MESH_MAX_DIMS];  /* one per mesh dim */
  int64_t local_shape[SG_TENSOR_MAX_DIMS];    /* owned interior, this rank */
  int64_t local_offset[SG_TENSOR_MAX_DIMS];   /* global index of interior[0] */
  int64_t halo[SG_TENSOR_MAX_DIMS][2];        /* margins (lo, hi), >= 0 */
  sg_tensor local; /* interior + margins: shape local_shape + lo + hi */
} sg_shardtensor;

/* The balanced split: the part of n owned by index i of p. Not collective. */
static inline void sg_split_balanced(int64_t n, int p, int i, int64_t *offset,
                                     int64_t *size) {
  int64_t base = n / p, extra = n % p;
  *size = base + (i < extra ? 1 : 0);
  *offset = (int64_t)i * base + (i < extra ? i : extra);
}

/* Local box (offset, shape) of any mesh rank for a global shape and
 * placements. Not collective. */
sg_status sg_shardtensor_box(sg_mesh_t mesh, int ndim,
                             const int64_t *global_shape,
                             const sg_placement *placements, int mesh_rank,
                             int64_t *offset, int64_t *shape);

/* Make a ShardTensor (zero-filled local block with the given halo margins,
 * NULL for none). Not collective (no communication), but every rank of the
 * mesh must describe the same global tensor. */
sg_status sg_shardtensor_create(sg_shardtensor *x, sg_mesh_t mesh,
                                sg_dtype dtype, int ndim,
                                const int64_t *global_shape,
                                const sg_placement *placements,
                                const int64_t (*halo)[2]);
void sg_shardtensor_destroy(sg_shardtensor *x);

/* A view of the owned interior of the local block (no halo). */
sg_tensor sg_shardtensor_interior(const sg_shardtensor *x);

/* Scatter a global tensor held on mesh rank root (other ranks pass NULL)
 * into x, according to x's placements (Partial: root's values go to the
 * first rank of each partial group, zeros elsewhere). Collective over the
 * mesh. */
sg_status sg_shardtensor_scatter(sg_shardtensor *x, const sg_tensor *global,
                                 int root);
/* Gather x into a global tensor on root (global is ignored elsewhere), or on
 * every rank when root < 0. Partial placements are summed. Collective. */
sg_status sg_shardtensor_gather(const sg_shardtensor *x, sg_tensor *global,
                                int root);

/* Redistribute x into y, which was created with the same global shape and
 * dtype and the target placements. Shard->Replicate (all-gather-v),
 * Shard(i)->Shard(j) (all-to-all-v), Partial->Replicate (all-reduce),
 * Partial->Shard (reduce-scatter), Replicate->Shard (local slice),
 * Replicate->Partial (keep on the group's first rank, zeros elsewhere);
 * uneven and empty shards included. Collective over the mesh. */
sg_status sg_shardtensor_redistribute(const sg_shardtensor *x,
                                      sg_shardtensor *y);

#ifdef __cplusplus
}
#endif
#endif /* SG_SHARDTENSOR_H */
