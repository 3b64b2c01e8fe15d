/* shardgrid — internal helpers shared by shardtensor.c and redistribute.c. */
#ifndef SG_SHARDTENSOR_IMPL_H
#define SG_SHARDTENSOR_IMPL_H

#include "sg_shardtensor.h"

/* The mesh's dim sizes and this rank's coordinates. */
void sg_st_mesh_info(sg_mesh_t mesh, int *nm, int *sizes, int *coords);

/* Local checks of a ShardTensor (no communication). */
sg_status sg_st_check(const char *fn, const sg_shardtensor *x);

/* Agree on local (every rank of the mesh) and check that the n <= 2
 * descriptions (dtype, ndim, global shape, placements) are the same on
 * every rank: one all-reduce when all is well. Returns the same status on
 * every rank. xs is not read on a rank whose local status is an error.
 * Collective over the mesh. */
sg_status sg_st_agree_descs(sg_mesh_t mesh, sg_status local, int n,
                            const sg_shardtensor *const *xs);

/* A prepared redistribution: its plan and all of its workspace, allocated
 * before the ranks agree, so the steps themselves need no agreement. */
#define SG_ST_MAX_STEPS (2 * SG_MESH_MAX_DIMS)
typedef struct sg_st_redist {
  sg_mesh_t mesh;
  int nm, sizes[SG_MESH_MAX_DIMS], coords[SG_MESH_MAX_DIMS];
  int nd;
  int64_t gshape[SG_TENSOR_MAX_DIMS];
  sg_dtype dt;
  size_t es;
  sg_placement spl[SG_MESH_MAX_DIMS], dpl[SG_MESH_MAX_DIMS];
  int nsteps;
  struct {
    int m;
    int kind;
    sg_placement to;
  } steps[SG_ST_MAX_STEPS];
  char *blk[2];      /* ping-pong intermediate blocks */
  char *sbuf, *rbuf; /* send / receive scratch */
  int64_t *cnt, *rcnt;
} sg_st_redist;

/* Plan and allocate (local; no communication). src and dst are views of
 * this rank's boxes under spl and dpl (any strides, host). On failure r is
 * released. */
sg_status sg_st_redist_prepare(sg_st_redist *r, sg_mesh_t mesh, sg_dtype dtype,
                               int ndim, const int64_t *global_shape,
                               const sg_placement *spl, const sg_tensor *src,
                               const sg_placement *dpl, const sg_tensor *dst);
/* Run it: collective over the mesh (after the ranks agreed). */
sg_status sg_st_redist_run(sg_st_redist *r, const sg_tensor *src,
                           sg_tensor *dst);
/* Free the workspace; a zeroed or released r is fine. */
void sg_st_redist_release(sg_st_redist *r);

/* Copy the sub-box (bo, bl) (global indices) of t, whose element 0 sits at
 * global index toff, to or from the contiguous buffer buf. */
sg_status sg_st_pack(const sg_tensor *t, const int64_t *toff, const int64_t *bo,
                     const int64_t *bl, void *buf);
sg_status sg_st_unpack(sg_tensor *t, const int64_t *toff, const int64_t *bo,
                       const int64_t *bl, const void *buf);

/* Intersection of two boxes; returns its element count (0 if empty). */
int64_t sg_st_box_isect(int ndim, const int64_t *ao, const int64_t *al,
                        const int64_t *bo, const int64_t *bl, int64_t *o,
                        int64_t *l);

static inline int64_t sg_st_numel(int ndim, const int64_t *l) {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= l[d];
  return n;
}

#define SG_ST_TAG 7301

#endif /* SG_SHARDTENSOR_IMPL_H */
