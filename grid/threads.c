/* shardgrid — threads per rank (see sg_threads.h). */
#include "sg_threads.h"

#include <stdlib.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

sg_status sg_threads_auto(MPI_Comm comm, int *nthreads, int *ranks_on_node) {
  sg_status st = SG_OK;
  MPI_Comm node = MPI_COMM_NULL;
  int local = 1;
  SG_MPI(
      MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  SG_MPI(MPI_Comm_size(node, &local));
  const char *env = getenv("OMP_NUM_THREADS");
  int use = 1;
#ifdef _OPENMP
  if (env == NULL || env[0] == '\0') {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    use = cores > local ? (int)(cores / local) : 1;
    omp_set_num_threads(use);
  }
  use = omp_get_max_threads();
#else
  (void)env;
#endif
  if (nthreads) *nthreads = use;
  if (ranks_on_node) *ranks_on_node = local;
fail:
  if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
  return st;
}
