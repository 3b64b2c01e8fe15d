/* Links against the installed library and uses its public headers. */
#include <sg_config.h>
#include <sg_mesh.h>
#include <sg_rng.h>
#include <stdio.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sg_mesh_t mesh = NULL;
  sg_status st = sg_mesh_create(MPI_COMM_WORLD, "w=1", &mesh);
  double x = sg_rng_uniform_f64(1, 2, 3);
  printf("consumer: shardgrid %s, mesh %s, rng %.3f\n", SG_VERSION_STRING,
         st == SG_OK ? "ok" : sg_last_error(), x);
  sg_mesh_destroy(&mesh);
  MPI_Finalize();
  return st == SG_OK ? 0 : 1;
}
