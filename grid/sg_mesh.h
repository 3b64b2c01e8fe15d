/* shardgrid — the device mesh.
 *
 * A mesh arranges the processes of a communicator as an N-D grid with named
 * dims, written outermost first: "pp=2,dp=2,h=2,w=1,tp=2". Ranks are laid out
 * row-major (last dim fastest), so tensor parallelism, written last, gets
 * neighbouring ranks. Size-1 dims are allowed everywhere.
 *
 * The group over a subset M of dims holds the ranks that differ only in the
 * coordinates of M. It is built with MPI_Comm_split, color = mixed-radix index
 * of the coordinates not in M, key = mixed-radix index of those in M (so
 * group ranks follow the coordinates of M, row-major). All groups are made at
 * sg_mesh_create, in the same order on every rank (by dim mask), and freed at
 * destroy. A mesh of more than 6 dims makes only the groups of single dims,
 * of all dims and of none (sg_mesh_group says SG_ERR_NOT_SUPPORTED for other
 * subsets) instead of 2^ndims splits.
 */
#ifndef SG_MESH_H
#define SG_MESH_H

#include <mpi.h>

#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SG_MESH_MAX_DIMS 8
#define SG_MESH_NAME_MAX 32

typedef struct sg_mesh *sg_mesh_t;
/* A group is owned by its mesh: never destroy it, it lives until the mesh
 * is destroyed. */
typedef struct sg_group *sg_group_t;

typedef struct sg_mesh_spec {
  int ndims;
  char names[SG_MESH_MAX_DIMS][SG_MESH_NAME_MAX];
  int sizes[SG_MESH_MAX_DIMS];
} sg_mesh_spec;

/* Parse "name=size,name=size,..." (whitespace around tokens allowed; names
 * are [A-Za-z_][A-Za-z0-9_]*, unique; sizes >= 1). A clear message names the
 * offending token. Not collective. */
sg_status sg_mesh_spec_parse(const char *text, sg_mesh_spec *spec);

/* Create a mesh over comm (duplicated). Collective over comm. Fails on every
 * rank with SG_ERR_MESH, with the same message, when the spec is malformed,
 * the product of sizes differs from the size of comm (the message gives both
 * numbers), or the ranks passed different specs. The mesh's communicators
 * return MPI errors as statuses (MPI_ERRORS_RETURN). */
sg_status sg_mesh_create(MPI_Comm comm, const char *spec, sg_mesh_t *mesh);
sg_status sg_mesh_create_from_spec(MPI_Comm comm, const sg_mesh_spec *spec,
                                   sg_mesh_t *mesh);

/* Free the mesh, its groups and its communicators; accepts NULL and sets
 * *mesh to NULL. Collective over the mesh's communicator. */
sg_status sg_mesh_destroy(sg_mesh_t *mesh);

/* Queries; none is collective. */
int sg_mesh_ndims(sg_mesh_t mesh);
int sg_mesh_size(sg_mesh_t mesh);
int sg_mesh_rank(sg_mesh_t mesh); /* rank in the mesh communicator */
MPI_Comm sg_mesh_comm(sg_mesh_t mesh);
const char *sg_mesh_dim_name(sg_mesh_t mesh, int dim);
int sg_mesh_dim_size(sg_mesh_t mesh, int dim);
/* Index of a named dim, or -1. */
int sg_mesh_find_dim(sg_mesh_t mesh, const char *name);
/* This rank's coordinate along dim. */
int sg_mesh_coord(sg_mesh_t mesh, int dim);
/* This rank's coordinates (ndims entries). */
void sg_mesh_coords(sg_mesh_t mesh, int *coords);
/* Coordinates of any mesh rank. */
sg_status sg_mesh_coords_of(sg_mesh_t mesh, int rank, int *coords);
/* The mesh rank at coords. */
sg_status sg_mesh_rank_of(sg_mesh_t mesh, const int *coords, int *rank);
/* The rank disp steps away along dim; with periodic wrap, or MPI_PROC_NULL
 * past an edge when periodic is 0. */
sg_status sg_mesh_neighbor(sg_mesh_t mesh, int dim, int disp, int periodic,
                           int *rank);

/* The group over the dims whose bits are set in dim_mask (bit d = dim d);
 * mask 0 is the group of this rank alone. Not collective. */
sg_status sg_mesh_group(sg_mesh_t mesh, unsigned dim_mask, sg_group_t *group);
/* Same, from comma-separated dim names ("dp,h,w"; "" for none). */
sg_status sg_mesh_group_named(sg_mesh_t mesh, const char *names,
                              sg_group_t *group);

/* Group queries; not collective. */
MPI_Comm sg_group_comm(sg_group_t group);
int sg_group_size(sg_group_t group);
int sg_group_rank(sg_group_t group);
unsigned sg_group_dims(sg_group_t group);
sg_mesh_t sg_group_mesh(sg_group_t group);
/* Mesh rank of the member with group rank r. */
int sg_group_mesh_rank(sg_group_t group, int r);

#ifdef __cplusplus
}
#endif
#endif /* SG_MESH_H */
