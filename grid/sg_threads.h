/* shardgrid — threads per rank.
 *
 * Ranks on one node share its cores. When OMP_NUM_THREADS is not set,
 * OpenMP starts one thread per core in EVERY rank, so P ranks on a node
 * run P times too many threads; OpenMP barriers then spin against each
 * other and MPI's busy-polling (measured here: a 4-sample sg-ns2d run took
 * 23 s instead of 0.7 s on a loaded 2-core node). sg_threads_auto picks
 * max(1, cores of the node / ranks on the node) instead, unless the user
 * said otherwise.
 */
#ifndef SG_THREADS_H
#define SG_THREADS_H

#include <mpi.h>

#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* If OMP_NUM_THREADS is unset or empty: count the ranks of comm on this
 * node (MPI_Comm_split_type, shared memory) and set the OpenMP thread count
 * to max(1, online cores / ranks on the node). If it is set, leave it.
 * *nthreads (may be NULL) gets the count in use; *ranks_on_node (may be
 * NULL) the ranks of comm sharing this node. Collective over comm. */
sg_status sg_threads_auto(MPI_Comm comm, int *nthreads, int *ranks_on_node);

/* This rank's place on its node: its rank among the ranks of comm that
 * share its node (MPI_Comm_split_type, shared memory; in comm's rank
 * order) and their number. Collective over comm. */
sg_status sg_node_rank(MPI_Comm comm, int *local_rank, int *local_size);

/* The CUDA device of this rank, one rank per GPU: its node-local rank
 * modulo the number of CUDA devices it sees (with CUDA_VISIBLE_DEVICES
 * set per rank that is 0); -1 when it sees none (or CUDA is not built).
 * sg_mesh_enable_nccl makes it the current device. Collective over comm. */
sg_status sg_cuda_device_local(MPI_Comm comm, int *index);
/* Pin this process's CUDA device: sg_cuda_device_local (and so
 * sg_mesh_enable_nccl) returns index from now on, when the process sees
 * a device; -1 returns to the node-local rule. Not collective. */
void sg_cuda_device_pin(int index);
/* How many ranks of comm on this node (this one included) would use the
 * same GPU as this rank with device index: the same index among the same
 * visible devices (CUDA_VISIBLE_DEVICES, or unset: all). One rank per GPU
 * means 1 everywhere. Collective over comm. */
sg_status sg_cuda_device_sharing(MPI_Comm comm, int index, int *sharing);

#ifdef __cplusplus
}
#endif
#endif /* SG_THREADS_H */
