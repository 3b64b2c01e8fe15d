/* shardgrid — internal helpers shared by shardtensor.c and redistribute.c. */
#ifndef SG_SHARDTENSOR_IMPL_H
#define SG_SHARDTENSOR_IMPL_H

#include "sg_shardtensor.h"

/* The mesh's dim sizes and this rank's coordinates. */
void sg_st_mesh_info(sg_mesh_t mesh, int *nm, int *sizes, int *coords);

/* Local checks of a ShardTensor (no communication). */
sg_status sg_st_check(const char *fn, const sg_shardtensor *x);

/* Agree on local (every rank of the mesh), then check that the n
 * descriptions (dtype, ndim, global shape, placements) are the same on every
 * rank. Returns the same status on every rank. Collective over the mesh. */
sg_status sg_st_agree_descs(sg_mesh_t mesh, sg_status local, int n,
                            const sg_shardtensor *const *xs);

/* Move the data of src (this rank's box under placements spl) into dst (its
 * box under dpl); both are views of any strides, host memory. Inputs must be
 * valid and agreed on every rank. Collective over the mesh. */
sg_status sg_st_redistribute_views(sg_mesh_t mesh, sg_dtype dtype, int ndim,
                                   const int64_t *global_shape,
                                   const sg_placement *spl,
                                   const sg_tensor *src,
                                   const sg_placement *dpl, sg_tensor *dst);

/* Copy the sub-box (bo, bl) (global indices) of t, whose element 0 sits at
 * global index toff, to or from the contiguous buffer buf. */
sg_status sg_st_pack(const sg_tensor *t, const int64_t *toff,
                     const int64_t *bo, const int64_t *bl, void *buf);
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
