/* Mesh "pp=4,dp=2,tp=2" on 16 ranks matches Megatron-LM's documented
 * layout: TP groups [0,1],[2,3],...; DP groups [0,2],[1,3],[4,6],...;
 * PP groups [0,4,8,12],[1,5,9,13],... (group ranks in that order). */
#include "sg_mesh.h"
#include "sg_test.h"

static void check_group(sg_mesh_t m, const char *name, const int *want, int n) {
  sg_group_t g = NULL;
  SG_CHECK_OK(sg_mesh_group_named(m, name, &g));
  if (!g) return;
  SG_CHECK(sg_group_size(g) == n, "%s: size %d, want %d", name,
           sg_group_size(g), n);
  int got[16] = {0};
  int me = sg_test_rank;
  MPI_Allgather(&me, 1, MPI_INT, got, 1, MPI_INT, sg_group_comm(g));
  for (int i = 0; i < n && i < sg_group_size(g); ++i)
    SG_CHECK(got[i] == want[i] && sg_group_mesh_rank(g, i) == want[i],
             "%s group of rank %d: member %d is %d, want %d", name, me, i,
             got[i], want[i]);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  sg_mesh_t m = NULL;
  if (sg_test_size != 16) {
    sg_test_skip("needs 16 ranks");
    return sg_test_finish();
  }
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, "pp=4,dp=2,tp=2", &m));
  int r = sg_test_rank;
  int tp[2] = {r - r % 2, r - r % 2 + 1};
  int blk = r / 4 * 4, t = r % 2;
  int dp[2] = {blk + t, blk + 2 + t};
  int pp[4] = {r % 4, r % 4 + 4, r % 4 + 8, r % 4 + 12};
  check_group(m, "tp", tp, 2);
  check_group(m, "dp", dp, 2);
  check_group(m, "pp", pp, 4);
  SG_CHECK(sg_mesh_coord(m, 0) == r / 4 && sg_mesh_coord(m, 1) == (r / 2) % 2 &&
               sg_mesh_coord(m, 2) == r % 2,
           "coords of %d", r);
  /* the data-parallel group of Megatron's context (dp x tp) */
  int dptp[4] = {blk, blk + 1, blk + 2, blk + 3};
  check_group(m, "dp,tp", dptp, 4);
  SG_CHECK_OK(sg_mesh_destroy(&m));
done:
  sg_mesh_destroy(&m);
  return sg_test_finish();
}
