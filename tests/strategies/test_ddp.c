/* DDP gradient reduction: buckets reduced as they become ready equal the
 * sum over the group derived from placements; deterministic mode gives the
 * same bits on every rank. Meshes: every 2-D shape that fits. */
#include "sg_comm.h"
#include "sg_ddp.h"
#include "sg_mesh.h"
#include "sg_rng.h"
#include "sg_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void run(const char *spec, int deterministic) {
  enum { N = 1000 };
  sg_mesh_t mesh = NULL;
  sg_ddp_t ddp = NULL;
  float *g = malloc(N * sizeof *g), *ref = calloc(N, sizeof *ref),
        *tmp = malloc(N * sizeof *tmp);
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  /* activations (Shard(batch) on dp, Shard(H) on h): both dims reduce */
  sg_placement act[2] = {sg_shard(0), sg_shard(2)};
  unsigned mask = sg_ddp_reduce_dims(mesh, act);
  SG_CHECK(mask == 3u, "mask %u", mask);
  sg_placement act2[2] = {sg_shard(0), sg_replicate()};
  SG_CHECK(sg_ddp_reduce_dims(mesh, act2) == 1u, "replicate dim not reduced");
  SG_CHECK_OK(sg_rng_fill(SG_RNG_NORMAL, 0, 1, 9, (uint64_t)sg_test_rank, 0, N,
                          SG_DTYPE_F32, g));
  for (int r = 0; r < sg_test_size;
       ++r) { /* every rank is in the group (mask = all) */
    SG_CHECK_OK(sg_rng_fill(SG_RNG_NORMAL, 0, 1, 9, (uint64_t)r, 0, N,
                            SG_DTYPE_F32, tmp));
    for (int i = 0; i < N; ++i) ref[i] += tmp[i];
  }
  for (int i = 0; i < N; ++i) ref[i] *= 0.5f;
  SG_REQUIRE_OK(sg_ddp_create(mesh, mask, g, N, 128, deterministic, &ddp));
  SG_CHECK_OK(sg_ddp_begin(ddp));
  /* backward finishes parameters from the last to the first */
  SG_CHECK_OK(sg_ddp_mark_ready(ddp, 700, 300));
  SG_CHECK_OK(sg_ddp_mark_ready(ddp, 250, 450));
  SG_CHECK_OK(sg_ddp_mark_ready(ddp, 0, 100)); /* [100, 250) left for finish */
  SG_CHECK_STATUS(sg_ddp_mark_ready(ddp, 990, 20), SG_ERR_INVALID_ARG);
  SG_CHECK_OK(sg_ddp_finish(ddp, 0.5));
  char what[64];
  snprintf(what, sizeof what, "ddp %s det=%d", spec, deterministic);
  sg_test_cmp_f32(what, g, ref, N, 1e-5, 1e-5);
  if (deterministic) {
    float *mx = malloc(N * sizeof *mx), *mn = malloc(N * sizeof *mn);
    MPI_Allreduce(g, mx, N, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(g, mn, N, MPI_FLOAT, MPI_MIN, MPI_COMM_WORLD);
    sg_test_cmp_bytes("deterministic: same bits on every rank", mx, mn,
                      N * sizeof *mx);
    free(mx);
    free(mn);
  }
  /* a second backward reuses the reducer */
  SG_CHECK_OK(sg_ddp_begin(ddp));
  SG_CHECK_OK(sg_ddp_finish(ddp, 1.0));
done:
  sg_ddp_destroy(&ddp);
  sg_mesh_destroy(&mesh);
  free(g);
  free(ref);
  free(tmp);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  char spec[64];
  for (int a = 1; a <= sg_test_size; ++a) {
    if (sg_test_size % a) continue;
    snprintf(spec, sizeof spec, "dp=%d,h=%d", a, sg_test_size / a);
    run(spec, 0);
    run(spec, 1);
  }
  return sg_test_finish();
}
