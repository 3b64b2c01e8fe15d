/* Halo error paths: a shard thinner than its halo is reported on every rank
 * (dim, shard size, halo width in the message) before any halo message, and
 * nothing hangs; bad arguments on one rank fail everywhere; misuse of
 * start/finish is an error. After each error a valid exchange still works. */
#include "sg_decomp.h"
#include "sg_halo.h"
#include "sg_mesh.h"
#include "sg_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check_thin_message(const char *what) {
  const char *msg = sg_last_error();
  if (sg_test_rank == sg_test_size - 1 || sg_test_rank == 0)
    printf("%s, rank %d got: %s\n", what, sg_test_rank, msg);
  SG_CHECK(strstr(msg, "dim 1") != NULL && strstr(msg, "1 cells") != NULL &&
               strstr(msg, "width 2") != NULL,
           "%s: message lacks dim/size/width: %s", what, msg);
}

/* A valid exchange on the mesh, to show the ranks are still in step. */
static void valid_exchange(sg_mesh_t mesh, int64_t n1) {
  sg_halo_desc desc;
  sg_halo_plan_t plan = NULL;
  sg_halo_desc_init(&desc);
  desc.ndims = 2;
  desc.interior[0] = 4;
  desc.interior[1] = n1;
  desc.halo[0][0] = desc.halo[0][1] = 1;
  desc.halo[1][0] = desc.halo[1][1] = 1;
  desc.mesh_dim[0] = 0;
  desc.mesh_dim[1] = 1;
  desc.boundary[1] = SG_BOUNDARY_PERIODIC;
  SG_CHECK_OK(sg_halo_plan_create(mesh, &desc, &plan));
  if (!plan) return;
  float *x = calloc((size_t)sg_halo_plan_block_count(plan), sizeof *x);
  SG_CHECK_OK(sg_halo_exchange(plan, x));
  SG_CHECK_OK(sg_halo_adjoint(plan, x));
  free(x);
  SG_CHECK_OK(sg_halo_plan_destroy(&plan));
}

/* A 1-D plan: 4 cells per rank along mesh dim 1, halo 1 on both sides. */
static sg_halo_plan_t ring_plan(sg_mesh_t mesh, sg_boundary b) {
  sg_halo_desc desc;
  sg_halo_plan_t plan = NULL;
  sg_halo_desc_init(&desc);
  desc.interior[0] = 4;
  desc.halo[0][0] = desc.halo[0][1] = 1;
  desc.mesh_dim[0] = 1;
  desc.boundary[0] = b;
  SG_CHECK_OK(sg_halo_plan_create(mesh, &desc, &plan));
  return plan;
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  const int P = sg_test_size;
  char spec[64];
  snprintf(spec, sizeof spec, "h=1,w=%d", P);
  sg_mesh_t mesh = NULL;
  SG_CHECK_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  if (!mesh) return sg_test_finish();

  /* 17 x (2P-1): shards along w of 2,..,2,1 cells (P > 1); with one rank
   * a single periodic cell wrapped locally. A 5-wide window needs halo 2. */
  const int64_t n1 = P > 1 ? 2 * P - 1 : 1;
  const sg_boundary b1 = P > 1 ? SG_BOUNDARY_ZERO : SG_BOUNDARY_PERIODIC;
  sg_decomp_desc dd = {2, {17, n1}, {0, 1}, {SG_BOUNDARY_ZERO, b1}, 0};
  sg_decomp_t dec = NULL;
  SG_CHECK_OK(sg_decomp_create(mesh, &dd, &dec));
  if (P > 1) {
    /* 1. pure detection from the decomposition: same error on every rank */
    sg_window w[2] = {SG_WINDOW_SYM(3, 1, 1, 1), SG_WINDOW_SYM(5, 1, 2, 1)};
    sg_halo_desc desc;
    SG_CHECK_STATUS(sg_halo_desc_from_decomp(dec, w, 1, SG_DTYPE_F32, &desc),
                    SG_ERR_HALO);
    check_thin_message("decomposition");
  }

  /* 2. plan creation with widths 2 everywhere: collective detection */
  {
    sg_halo_desc desc;
    sg_halo_plan_t plan = NULL;
    sg_halo_desc_init(&desc);
    desc.ndims = 2;
    sg_decomp_shard(dec, NULL, desc.interior, NULL);
    desc.halo[0][0] = desc.halo[0][1] = 1;
    desc.halo[1][0] = desc.halo[1][1] = 2;
    desc.mesh_dim[0] = 0;
    desc.mesh_dim[1] = 1;
    desc.boundary[1] = b1;
    SG_CHECK_STATUS(sg_halo_plan_create(mesh, &desc, &plan), SG_ERR_HALO);
    SG_CHECK(plan == NULL, "no plan on failure");
    check_thin_message("plan");
    sg_clear_error();
  }
  valid_exchange(mesh, 3);

  /* 3. only the last rank is thin (the others are wide), with reflect */
  {
    sg_halo_desc desc;
    sg_halo_plan_t plan = NULL;
    sg_halo_desc_init(&desc);
    desc.ndims = 2;
    desc.interior[0] = 5;
    desc.interior[1] = sg_mesh_rank(mesh) == P - 1 ? 1 : 6;
    desc.halo[0][0] = desc.halo[0][1] = 1;
    desc.halo[1][0] = desc.halo[1][1] = 2;
    desc.mesh_dim[0] = 0;
    desc.mesh_dim[1] = 1;
    desc.boundary[1] = SG_BOUNDARY_REFLECT;
    SG_CHECK_STATUS(sg_halo_plan_create(mesh, &desc, &plan), SG_ERR_HALO);
    check_thin_message("reflect plan");
  }
  valid_exchange(mesh, 3);

  /* 4. a bad argument on one rank only */
  {
    sg_halo_desc desc;
    sg_halo_plan_t plan = NULL;
    sg_halo_desc_init(&desc);
    desc.ndims = 2;
    desc.interior[0] = 4;
    desc.interior[1] = 4;
    desc.mesh_dim[1] = 1;
    desc.halo[1][1] = sg_mesh_rank(mesh) == P - 1 ? -1 : 1;
    SG_CHECK_STATUS(sg_halo_plan_create(mesh, &desc, &plan),
                    SG_ERR_INVALID_ARG);
    SG_CHECK(strstr(sg_last_error(), "halo width -1") != NULL, "message: %s",
             sg_last_error());
    /* ranks disagreeing on the layout */
    desc.halo[1][1] = 1;
    desc.boundary[1] = sg_mesh_rank(mesh) == 0 ? SG_BOUNDARY_REFLECT
                                               : SG_BOUNDARY_ZERO;
    if (P > 1)
      SG_CHECK_STATUS(sg_halo_plan_create(mesh, &desc, &plan),
                      SG_ERR_INVALID_ARG);
    /* two spatial dims on one mesh dim */
    desc.boundary[1] = SG_BOUNDARY_ZERO;
    desc.mesh_dim[0] = 1;
    SG_CHECK_STATUS(sg_halo_plan_create(mesh, &desc, &plan),
                    SG_ERR_INVALID_ARG);
  }
  valid_exchange(mesh, 3);

  /* 5. misuse of start/finish */
  {
    sg_halo_plan_t plan = ring_plan(mesh, SG_BOUNDARY_ZERO);
    float x[6] = {0};
    SG_CHECK_STATUS(sg_halo_finish(plan), SG_ERR_INVALID_ARG);
    SG_CHECK_OK(sg_halo_start(plan, x));
    SG_CHECK_STATUS(sg_halo_start(plan, x), SG_ERR_INVALID_ARG);
    SG_CHECK_STATUS(sg_halo_adjoint_finish(plan), SG_ERR_INVALID_ARG);
    SG_CHECK_STATUS(sg_halo_plan_destroy(&plan), SG_ERR_INVALID_ARG);
    SG_CHECK_OK(sg_halo_finish(plan));
    SG_CHECK_OK(sg_halo_plan_destroy(&plan));
    SG_CHECK(plan == NULL, "destroy sets NULL");
    SG_CHECK_OK(sg_halo_plan_destroy(NULL));
  }

  /* 6. plan blocks: at most SG_HALO_MAX_BLOCKS, then the same error on
   * every rank (no hang); not while an exchange is in flight; the blocks
   * work for exchanges and go back to the pool with the plan */
  for (int round = 0; round < 2; ++round) {
    sg_halo_plan_t plan = ring_plan(mesh, SG_BOUNDARY_PERIODIC);
    void *blk[SG_HALO_MAX_BLOCKS + 1] = {0};
    for (int j = 0; j < SG_HALO_MAX_BLOCKS; ++j)
      SG_CHECK_OK(sg_halo_plan_alloc_block(plan, &blk[j]));
    SG_CHECK_STATUS(sg_halo_plan_alloc_block(plan, &blk[SG_HALO_MAX_BLOCKS]),
                    SG_ERR_INVALID_ARG);
    SG_CHECK(blk[SG_HALO_MAX_BLOCKS] == NULL, "no block on failure");
    SG_CHECK(strstr(sg_last_error(), "at most") != NULL, "message: %s",
             sg_last_error());
    float *x = blk[round];
    const int r = sg_mesh_rank(mesh);
    for (int i = 1; i <= 4; ++i) x[i] = (float)(10 * r + i);
    SG_CHECK_OK(sg_halo_start(plan, x));
    SG_CHECK_STATUS(sg_halo_plan_alloc_block(plan, &blk[SG_HALO_MAX_BLOCKS]),
                    SG_ERR_INVALID_ARG);
    SG_CHECK_OK(sg_halo_finish(plan));
    const int lo = (r + P - 1) % P, hi = (r + 1) % P;
    SG_CHECK(x[0] == (float)(10 * lo + 4) && x[5] == (float)(10 * hi + 1),
             "plan block exchange: halo %g %g", (double)x[0], (double)x[5]);
    SG_CHECK_STATUS(sg_halo_plan_alloc_block(NULL, &blk[0]),
                    SG_ERR_INVALID_ARG);
    SG_CHECK_OK(sg_halo_plan_destroy(&plan));
  }

  sg_decomp_destroy(&dec);
  SG_CHECK_OK(sg_mesh_destroy(&mesh));
  return sg_test_finish();
}
