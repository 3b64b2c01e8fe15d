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

#include "sg_comm.h"
#include "sg_decomp.h" /* the balanced split (sg_split_part) */
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
  int dim;         /* the tensor dim, for SG_PLACEMENT_SHARD */
  sg_reduce_op op; /* for SG_PLACEMENT_PARTIAL: only SG_REDUCE_SUM (0) is
                      supported; others give SG_ERR_NOT_SUPPORTED */
} sg_placement;

static inline sg_placement sg_shard(int dim) {
  sg_placement p = {SG_PLACEMENT_SHARD, dim, SG_REDUCE_SUM};
  return p;
}
static inline sg_placement sg_replicate(void) {
  sg_placement p = {SG_PLACEMENT_REPLICATE, -1, SG_REDUCE_SUM};
  return p;
}
static inline sg_placement sg_partial(void) {
  sg_placement p = {SG_PLACEMENT_PARTIAL, -1, SG_REDUCE_SUM};
  return p;
}
static inline int sg_placement_equal(sg_placement a, sg_placement b) {
  if (a.kind != b.kind) return 0;
  if (a.kind == SG_PLACEMENT_SHARD) return a.dim == b.dim;
  if (a.kind == SG_PLACEMENT_PARTIAL) return a.op == b.op;
  return 1;
}

/* Check placements for a tensor of ndim dims on a mesh of mesh_ndims dims:
 * SG_ERR_INVALID_ARG for an unknown kind or a shard dim outside 0..ndim-1,
 * SG_ERR_NOT_SUPPORTED for a Partial whose op is not a sum. Not
 * collective. */
sg_status sg_placements_check(int mesh_ndims, int ndim,
                              const sg_placement *placements);
/* Write "(Shard(0), Replicate, Partial)" into buf (always terminated);
 * returns buf. Not collective. */
const char *sg_placements_format(int mesh_ndims, const sg_placement *placements,
                                 char *buf, size_t size);

typedef struct sg_shardtensor {
  sg_mesh_t mesh; /* not owned */
  int ndim;
  int64_t global_shape[SG_TENSOR_MAX_DIMS];
  sg_placement placements[SG_MESH_MAX_DIMS]; /* one per mesh dim */
  int64_t local_shape[SG_TENSOR_MAX_DIMS];   /* owned interior, this rank */
  int64_t local_offset[SG_TENSOR_MAX_DIMS];  /* global index of interior[0] */
  int64_t halo[SG_TENSOR_MAX_DIMS][2];       /* margins (lo, hi), >= 0 */
  sg_tensor local; /* interior + margins: shape local_shape + lo + hi */
} sg_shardtensor;

/* The box rule. For each tensor dim d, start from [0, n); for each mesh dim
 * m in order (outermost first) whose placement is Shard(d), replace the
 * current piece by part coords[m] of mesh_sizes[m] of it (balanced split).
 * Replicate and Partial leave the box unchanged. Shards may be empty (more
 * ranks than elements): shape 0, offset where the piece would start.
 * Pure: needs no mesh. Not collective. */
sg_status sg_shardtensor_box_coords(int mesh_ndims, const int *mesh_sizes,
                                    const int *coords, int ndim,
                                    const int64_t *global_shape,
                                    const sg_placement *placements,
                                    int64_t *offset, int64_t *shape);

/* Local box (offset, shape) of any mesh rank for a global shape and
 * placements. Not collective. */
sg_status sg_shardtensor_box(sg_mesh_t mesh, int ndim,
                             const int64_t *global_shape,
                             const sg_placement *placements, int mesh_rank,
                             int64_t *offset, int64_t *shape);

/* The table of every rank's box: offsets and shapes hold mesh size x ndim
 * entries, row r for mesh rank r. Not collective. */
sg_status sg_shardtensor_box_table(const sg_shardtensor *x, int64_t *offsets,
                                   int64_t *shapes);

/* Make a ShardTensor (zero-filled local block with the given halo margins,
 * NULL for none; margins >= 0). Not collective (no communication), but
 * every rank of the mesh must describe the same global tensor: the
 * collective functions below check that and fail on every rank if not. */
sg_status sg_shardtensor_create(sg_shardtensor *x, sg_mesh_t mesh,
                                sg_dtype dtype, int ndim,
                                const int64_t *global_shape,
                                const sg_placement *placements,
                                const int64_t (*halo)[2]);
/* Free the local block and reset x; NULL and reset structs are fine (a
 * no-op, SG_OK). Not collective. */
sg_status sg_shardtensor_destroy(sg_shardtensor *x);

/* A view of the owned interior of the local block (no halo); a tensor
 * with ndim -1 for an invalid x. Not collective. */
sg_tensor sg_shardtensor_interior(const sg_shardtensor *x);

/* Scatter a global tensor held on mesh rank root (other ranks pass NULL)
 * into x's interior, according to x's placements (Partial: root's values go
 * to the first rank of each partial group, zeros elsewhere). The global
 * tensor has x's global shape and dtype, any strides, host memory. The
 * ranks with coordinate 0 on every non-Shard mesh dim receive their box from
 * root (point to point), then each Replicate mesh dim broadcasts. Collective
 * over the mesh. */
sg_status sg_shardtensor_scatter(sg_shardtensor *x, const sg_tensor *global,
                                 int root);
/* Gather x's interiors into a global tensor (x's global shape and dtype, any
 * strides, host) on root (global is ignored elsewhere), or on every rank
 * when root < 0. Partial placements are summed first (all-reduce; not for
 * bf16). To root: the ranks with coordinate 0 on every non-Shard mesh dim
 * send their box; to all: a redistribute to all-Replicate. Collective over
 * the mesh. */
sg_status sg_shardtensor_gather(const sg_shardtensor *x, sg_tensor *global,
                                int root);

/* Redistribute x into y, which was created on the same mesh with the same
 * global shape and dtype and the target placements. Only the interiors
 * move; halo margins of y are left untouched. Each step changes the
 * placement of one mesh dim and communicates over that dim's group only:
 *   Shard->Replicate     all-gather-v
 *   Shard(i)->Shard(j)   all-to-all-v
 *   Partial->Replicate   all-reduce
 *   Partial->Shard(j)    reduce-scatter (counts may differ)
 *   Replicate->Shard(j)  local slice
 *   Replicate->Partial   the group's first rank keeps the values, the
 *                        others hold zeros
 * Order of the steps (docs/concepts-placements.md):
 *   1. Partial->Replicate, every mesh dim where the target is Replicate;
 *   2. mesh dims whose shard must change (its placement differs, or an outer
 *      mesh dim sharding the same tensor dim changes), innermost first:
 *      Shard(i)->Shard(j) when that already gives the final box, else
 *      Shard->Replicate;
 *   3. Partial->Shard(j), outermost first (reduce-scatter when that gives
 *      the final box, else all-reduce);
 *   4. Replicate->Shard(j) and Replicate->Partial, outermost first.
 * Shard(d)->Partial is Shard->Replicate then Replicate->Partial. bf16 moves
 * but cannot be reduced (SG_ERR_NOT_SUPPORTED when a Partial must be
 * summed). Errors (different mesh, shape, dtype, invalid placements,
 * descriptions that differ between ranks) are returned on every rank before
 * any data moves. Collective over the mesh. */
sg_status sg_shardtensor_redistribute(const sg_shardtensor *x,
                                      sg_shardtensor *y);

#ifdef __cplusplus
}
#endif
#endif /* SG_SHARDTENSOR_H */
