/* sg_threads_auto: one thread per core of the node, shared by its ranks,
 * unless OMP_NUM_THREADS says otherwise. All ranks of a test run on one
 * node. */
#include "sg_device.h"
#include "sg_test.h"
#include "sg_threads.h"

#include <stdlib.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  int nth = 0, on_node = 0;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int expect = cores > sg_test_size ? (int)(cores / sg_test_size) : 1;

  unsetenv("OMP_NUM_THREADS");
  SG_REQUIRE_OK(sg_threads_auto(MPI_COMM_WORLD, &nth, &on_node));
  SG_CHECK(on_node == sg_test_size, "ranks on node %d, expected %d", on_node,
           sg_test_size);
  /* the node-local rank (one node: the world rank) and the GPU it takes */
  int lr = -1, ls = 0, dev = -2, ndev = 0;
  SG_REQUIRE_OK(sg_node_rank(MPI_COMM_WORLD, &lr, &ls));
  SG_CHECK(lr == sg_test_rank && ls == sg_test_size, "node rank %d of %d", lr,
           ls);
  SG_REQUIRE_OK(sg_device_count(SG_DEVICE_CUDA, &ndev));
  SG_REQUIRE_OK(sg_cuda_device_local(MPI_COMM_WORLD, &dev));
  SG_CHECK(dev == (ndev ? sg_test_rank % ndev : -1),
           "cuda device %d with %d devices", dev, ndev);
  /* one rank per GPU (sg-train device = cuda): every rank of the node on
   * the same index shares it; distinct indices do not; a pinned index */
  int share = 0;
  SG_REQUIRE_OK(sg_cuda_device_sharing(MPI_COMM_WORLD, 0, &share));
  SG_CHECK(share == sg_test_size, "index 0 everywhere: %d sharing", share);
  SG_REQUIRE_OK(sg_cuda_device_sharing(MPI_COMM_WORLD, sg_test_rank, &share));
  SG_CHECK(share == 1, "one index per rank: %d sharing", share);
  sg_cuda_device_pin(0);
  SG_REQUIRE_OK(sg_cuda_device_local(MPI_COMM_WORLD, &dev));
  SG_CHECK(dev == (ndev ? 0 : -1), "pinned to 0: device %d", dev);
  sg_cuda_device_pin(-1);
#ifdef _OPENMP
  SG_CHECK(nth == expect,
           "auto: %d threads with %ld cores and %d ranks, expected %d", nth,
           cores, sg_test_size, expect);
  /* a user setting is left alone */
  omp_set_num_threads(3);
  setenv("OMP_NUM_THREADS", "3", 1);
  SG_REQUIRE_OK(sg_threads_auto(MPI_COMM_WORLD, &nth, NULL));
  SG_CHECK(nth == 3, "OMP_NUM_THREADS=3 gave %d threads", nth);
#else
  (void)expect;
  SG_CHECK(nth == 1, "no OpenMP: %d threads", nth);
#endif
done:
  return sg_test_finish();
}
