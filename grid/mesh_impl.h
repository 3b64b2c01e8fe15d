/* shardgrid — internal: the mesh and group structures (not installed).
 * Shared by mesh.c, comm.c and cuda/nccl.c. */
#ifndef SG_MESH_IMPL_H
#define SG_MESH_IMPL_H

#include "sg_config.h"
#include "sg_mesh.h"

/* Meshes with more dims than this get only the single-dim groups, the full
 * set and the empty set (2^ndims splits would be too many). */
#define SG_MESH_EAGER_ALL_DIMS 6

struct sg_group {
  sg_mesh_t mesh;
  unsigned dims;   /* bit d set: dim d belongs to the group */
  MPI_Comm comm;   /* from MPI_Comm_split of the mesh communicator */
  int size;
  int rank;        /* == key: mixed-radix index of the coords in dims */
  int *mesh_ranks; /* mesh rank of group rank r, r < size */
  void *nccl;      /* ncclComm_t when NCCL was enabled, else NULL */
};

struct sg_mesh {
  MPI_Comm comm; /* duplicate of the user's communicator */
  int size;
  int rank;
  int ndims;
  char names[SG_MESH_MAX_DIMS][SG_MESH_NAME_MAX];
  int sizes[SG_MESH_MAX_DIMS];
  int coords[SG_MESH_MAX_DIMS];
  int strides[SG_MESH_MAX_DIMS]; /* row-major: last dim has stride 1 */
  char spec[SG_MESH_MAX_DIMS * (SG_MESH_NAME_MAX + 16)];
  struct sg_group *groups[1u << SG_MESH_MAX_DIMS]; /* by dim mask; NULL if
                                                       not created */
  int nccl_enabled;
};

#if SG_HAVE_NCCL
/* grid/cuda/nccl.c */
sg_status sg_nccl_group_init(struct sg_group *g);
void sg_nccl_group_free(struct sg_group *g);
#endif

#endif /* SG_MESH_IMPL_H */
