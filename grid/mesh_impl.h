/* shardgrid — internal: the mesh and group structures (not installed).
 * Shared by mesh.c, comm.c, comm_mpi.c and cuda/nccl.c. */
#ifndef SG_MESH_IMPL_H
#define SG_MESH_IMPL_H

#include "sg_config.h"
#include "sg_mesh.h"

/* Meshes with more dims than this get only the single-dim groups, the full
 * set and the empty set (2^ndims splits would be too many). */
#define SG_MESH_EAGER_ALL_DIMS 6

struct sg_group {
  sg_mesh_t mesh;
  unsigned dims; /* bit d set: dim d belongs to the group */
  MPI_Comm comm; /* from MPI_Comm_split of the mesh communicator */
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
/* grid/cuda/nccl.c: NCCL communicators for the groups, and the device-buffer
 * collectives comm.c dispatches to (blocking: they synchronise the stream). */
#include <stdint.h>

#include "sg_comm.h"
sg_status sg_nccl_mesh_enable(sg_mesh_t mesh);
/* Destroys g's NCCL communicator and sets g->nccl to NULL; NULL and a
 * group without one are fine (SG_OK). */
sg_status sg_nccl_group_free(struct sg_group *g);
/* 1 if p points to CUDA device (or managed) memory. */
int sg_nccl_is_device(const void *p);
sg_status sg_nccl_allreduce(struct sg_group *g, const void *send, void *recv,
                            int64_t count, sg_dtype dt, sg_reduce_op op);
sg_status sg_nccl_bcast(struct sg_group *g, void *buf, int64_t count,
                        sg_dtype dt, int root);
sg_status sg_nccl_allgather(struct sg_group *g, const void *send, int64_t count,
                            void *recv, sg_dtype dt);
sg_status sg_nccl_allgatherv(struct sg_group *g, const void *send,
                             int64_t sendcount, void *recv,
                             const int64_t *recvcounts, const int64_t *displs,
                             sg_dtype dt);
sg_status sg_nccl_reduce_scatter(struct sg_group *g, const void *send,
                                 void *recv, const int64_t *recvcounts,
                                 sg_dtype dt, sg_reduce_op op);
sg_status sg_nccl_alltoall(struct sg_group *g, const void *send, int64_t count,
                           void *recv, sg_dtype dt);
sg_status sg_nccl_alltoallv(struct sg_group *g, const void *send,
                            const int64_t *sendcounts, const int64_t *sdispls,
                            void *recv, const int64_t *recvcounts,
                            const int64_t *rdispls, sg_dtype dt);
sg_status sg_nccl_p2p(struct sg_group *g, int is_send, void *buf, int64_t count,
                      sg_dtype dt, int peer);
#endif

#endif /* SG_MESH_IMPL_H */
