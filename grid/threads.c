/* shardgrid — threads per rank (see sg_threads.h). */
#include "sg_threads.h"

#include "sg_device.h"

#include <stdlib.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

sg_status sg_node_rank(MPI_Comm comm, int *local_rank, int *local_size) {
  sg_status st = SG_OK;
  MPI_Comm node = MPI_COMM_NULL;
  int r = 0, n = 1;
  SG_MPI(
      MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  SG_MPI(MPI_Comm_rank(node, &r));
  SG_MPI(MPI_Comm_size(node, &n));
  if (local_rank) *local_rank = r;
  if (local_size) *local_size = n;
fail:
  if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
  return st;
}

static int sg_cuda_pinned = -1;

void sg_cuda_device_pin(int index) { sg_cuda_pinned = index < 0 ? -1 : index; }

sg_status sg_cuda_device_local(MPI_Comm comm, int *index) {
  sg_status st = SG_OK;
  int r = 0, ndev = 0;
  if (!index) SG_RAISE(SG_ERR_INVALID_ARG, "sg_cuda_device_local: NULL index");
  *index = -1;
  SG_TRY(sg_node_rank(comm, &r, NULL));
  SG_TRY(sg_device_count(SG_DEVICE_CUDA, &ndev));
  if (ndev > 0) *index = sg_cuda_pinned >= 0 ? sg_cuda_pinned : r % ndev;
fail:
  return st;
}

/* FNV-1a of the devices this process sees (CUDA_VISIBLE_DEVICES; unset:
 * all of them), as a non-negative int. */
static long long visible_hash(void) {
  const char *v = getenv("CUDA_VISIBLE_DEVICES");
  unsigned long long h = 1469598103934665603ull;
  for (const char *c = v ? v : "\001all"; *c; ++c)
    h = (h ^ (unsigned char)*c) * 1099511628211ull;
  return (long long)(h >> 1);
}

sg_status sg_cuda_device_sharing(MPI_Comm comm, int index, int *sharing) {
  sg_status st = SG_OK;
  MPI_Comm node = MPI_COMM_NULL;
  long long *all = NULL;
  int n = 1;
  if (!sharing)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_cuda_device_sharing: NULL count");
  *sharing = 1;
  SG_MPI(
      MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  SG_MPI(MPI_Comm_size(node, &n));
  all = malloc(2 * (size_t)n * sizeof *all);
  if (!all) SG_RAISE(SG_ERR_ALLOC, "sg_cuda_device_sharing: out of memory");
  const long long mine[2] = {visible_hash(), index};
  SG_MPI(MPI_Allgather(mine, 2, MPI_LONG_LONG, all, 2, MPI_LONG_LONG, node));
  int same = 0;
  for (int k = 0; k < n; ++k)
    same += all[2 * k] == mine[0] && all[2 * k + 1] == mine[1];
  *sharing = same;
fail:
  free(all);
  if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
  return st;
}

sg_status sg_threads_auto(MPI_Comm comm, int *nthreads, int *ranks_on_node) {
  sg_status st = SG_OK;
  int local = 1;
  SG_TRY(sg_node_rank(comm, NULL, &local));
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
  return st;
}
