/* Device mesh: spec parsing and its errors, layout (row-major, last dim
 * fastest), coordinates, neighbours with and without wrap, and the groups
 * over every subset of dims, checked against the members MPI reports. */
#include "sg_mesh.h"
#include "sg_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_parse(void) {
  sg_mesh_spec s;
  SG_CHECK_OK(sg_mesh_spec_parse("pp=2,dp=2,h=2,w=1,tp=2", &s));
  SG_CHECK(s.ndims == 5, "ndims %d", s.ndims);
  SG_CHECK(strcmp(s.names[0], "pp") == 0 && s.sizes[0] == 2, "dim 0");
  SG_CHECK(strcmp(s.names[3], "w") == 0 && s.sizes[3] == 1, "dim 3");
  SG_CHECK_OK(sg_mesh_spec_parse("  a_1 = 3 ,\t_b=1 ", &s));
  SG_CHECK(s.ndims == 2 && strcmp(s.names[0], "a_1") == 0 && s.sizes[0] == 3 &&
               strcmp(s.names[1], "_b") == 0 && s.sizes[1] == 1,
           "whitespace");

  /* malformed: each message names the bad token */
  struct {
    const char *spec, *want;
  } bad[] = {
      {"", "empty"},
      {"   ", "empty"},
      {"dp=2,,tp=2", "entry 2 is empty"},
      {"dp=2,", "entry 2 is empty"},
      {"dp2", "'dp2' is not name=size"},
      {"dp=2,tp", "'tp' is not name=size"},
      {"1dp=2", "bad dim name '1dp'"},
      {"d-p=2", "bad dim name 'd-p'"},
      {"=2", "bad dim name ''"},
      {"dp=", "size '' of dim 'dp'"},
      {"dp=x", "size 'x' of dim 'dp'"},
      {"dp=2x", "size '2x' of dim 'dp'"},
      {"dp=-1", "size '-1' of dim 'dp'"},
      {"dp=0", "dim 'dp' has size 0"},
      {"dp=2,tp=1,dp=3", "dim name 'dp' appears twice"},
      {"dp=99999999999", "too large"},
      {"a=1,b=1,c=1,d=1,e=1,f=1,g=1,h=1,i=1", "more than 8 dims"},
      {"abcdefghijabcdefghijabcdefghijabcdefghij=1", "longer than"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    SG_CHECK_STATUS(sg_mesh_spec_parse(bad[i].spec, &s), SG_ERR_MESH);
    SG_CHECK(strstr(sg_last_error(), bad[i].want) != NULL,
             "spec '%s': message '%s' lacks '%s'", bad[i].spec, sg_last_error(),
             bad[i].want);
  }
  SG_CHECK_STATUS(sg_mesh_spec_parse(NULL, &s), SG_ERR_MESH);
}

/* Create errors come back on every rank, same status, no hang. */
static void test_create_errors(void) {
  int n = sg_test_size;
  sg_mesh_t m = NULL;
  char spec[64], want[128];
  snprintf(spec, sizeof spec, "pp=2,tp=%d", n + 1);
  snprintf(want, sizeof want,
           "mesh 'pp=2,tp=%d' has %d ranks but the communicator has %d", n + 1,
           2 * (n + 1), n);
  SG_CHECK_STATUS(sg_mesh_create(MPI_COMM_WORLD, spec, &m), SG_ERR_MESH);
  SG_CHECK(m == NULL, "mesh set on failure");
  SG_CHECK(strstr(sg_last_error(), want) != NULL, "message '%s' lacks '%s'",
           sg_last_error(), want);
  SG_CHECK_STATUS(sg_mesh_create(MPI_COMM_WORLD, "dp=2,,tp=1", &m),
                  SG_ERR_MESH);
  SG_CHECK(strstr(sg_last_error(), "entry 2 is empty") != NULL, "%s",
           sg_last_error());
  SG_CHECK_STATUS(sg_mesh_create(MPI_COMM_WORLD, "dp=1,dp=1", &m), SG_ERR_MESH);
  SG_CHECK(strstr(sg_last_error(), "appears twice") != NULL, "%s",
           sg_last_error());
  SG_CHECK_STATUS(sg_mesh_create(MPI_COMM_WORLD, "dp=0", &m), SG_ERR_MESH);
  SG_CHECK(strstr(sg_last_error(), "size 0") != NULL, "%s", sg_last_error());
  if (n > 1) {
    /* rank 0 passes another spec than the others: all fail, none waits */
    snprintf(spec, sizeof spec, sg_test_rank == 0 ? "a=%d" : "b=%d", n);
    SG_CHECK_STATUS(sg_mesh_create(MPI_COMM_WORLD, spec, &m), SG_ERR_MESH);
    SG_CHECK(strstr(sg_last_error(), "different mesh specs") != NULL, "%s",
             sg_last_error());
    /* one rank's spec is malformed */
    snprintf(spec, sizeof spec, sg_test_rank == 1 ? "a=%d," : "a=%d", n);
    SG_CHECK_STATUS(sg_mesh_create(MPI_COMM_WORLD, spec, &m), SG_ERR_MESH);
  }
  sg_mesh_spec s;
  memset(&s, 0, sizeof s);
  SG_CHECK_STATUS(sg_mesh_create_from_spec(MPI_COMM_WORLD, &s, &m),
                  SG_ERR_MESH);
  /* the mesh is still usable afterwards: a good one works */
  snprintf(spec, sizeof spec, "world=%d", n);
  SG_CHECK_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &m));
  SG_CHECK_OK(sg_mesh_destroy(&m));
  SG_CHECK(m == NULL, "destroy sets NULL");
  SG_CHECK_OK(sg_mesh_destroy(&m));
  SG_CHECK_OK(sg_mesh_destroy(NULL));
}

/* Expected members of this rank's group over mask, from the layout rule. */
static void expected_members(const int *sizes, int nd, const int *coords,
                             unsigned mask, int *members, int *count) {
  int n = 1;
  for (int d = 0; d < nd; ++d)
    if (mask & (1u << d)) n *= sizes[d];
  for (int r = 0; r < n; ++r) {
    int c[SG_MESH_MAX_DIMS], rest = r;
    for (int d = nd - 1; d >= 0; --d) {
      c[d] = coords[d];
      if (mask & (1u << d)) {
        c[d] = rest % sizes[d];
        rest /= sizes[d];
      }
    }
    int mr = 0;
    for (int d = 0; d < nd; ++d) mr = mr * sizes[d] + c[d];
    members[r] = mr;
  }
  *count = n;
}

static void check_mesh(const char *spec) {
  sg_mesh_t m = NULL;
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &m));
  int nd = sg_mesh_ndims(m), sizes[SG_MESH_MAX_DIMS], coords[SG_MESH_MAX_DIMS];
  int me = sg_test_rank;
  SG_CHECK(sg_mesh_size(m) == sg_test_size && sg_mesh_rank(m) == me,
           "%s: size/rank", spec);
  int result = 0;
  MPI_Comm_compare(sg_mesh_comm(m), MPI_COMM_WORLD, &result);
  SG_CHECK(result == MPI_CONGRUENT, "%s: mesh comm is not a duplicate (%d)",
           spec, result);
  sg_mesh_coords(m, coords);
  int rest = me;
  for (int d = nd - 1; d >= 0; --d) {
    sizes[d] = sg_mesh_dim_size(m, d);
    SG_CHECK(coords[d] == rest % sizes[d], "%s: coord %d", spec, d);
    SG_CHECK(sg_mesh_coord(m, d) == coords[d], "%s: coord %d", spec, d);
    SG_CHECK(sg_mesh_find_dim(m, sg_mesh_dim_name(m, d)) == d,
             "%s: find dim %d", spec, d);
    rest /= sizes[d];
  }
  SG_CHECK(sg_mesh_find_dim(m, "nope") == -1, "find unknown");
  SG_CHECK(sg_mesh_dim_name(m, nd) == NULL && sg_mesh_dim_size(m, -1) == 0,
           "out of range");
  for (int r = 0; r < sg_test_size; ++r) {
    int c[SG_MESH_MAX_DIMS], back = -1;
    SG_CHECK_OK(sg_mesh_coords_of(m, r, c));
    SG_CHECK_OK(sg_mesh_rank_of(m, c, &back));
    SG_CHECK(back == r, "%s: rank_of(coords_of(%d)) = %d", spec, r, back);
  }
  int c[SG_MESH_MAX_DIMS], r = 0;
  SG_CHECK_STATUS(sg_mesh_coords_of(m, sg_test_size, c), SG_ERR_INVALID_ARG);
  memcpy(c, coords, sizeof c);
  c[0] = sizes[0];
  SG_CHECK_STATUS(sg_mesh_rank_of(m, c, &r), SG_ERR_INVALID_ARG);

  /* neighbours, with and without wrap, several displacements */
  for (int d = 0; d < nd; ++d) {
    for (int disp = -3; disp <= 3; ++disp) {
      int nb = -2, nbp = -2;
      SG_CHECK_OK(sg_mesh_neighbor(m, d, disp, 0, &nb));
      SG_CHECK_OK(sg_mesh_neighbor(m, d, disp, 1, &nbp));
      memcpy(c, coords, sizeof c);
      int t = coords[d] + disp;
      int want = MPI_PROC_NULL;
      if (t >= 0 && t < sizes[d]) {
        c[d] = t;
        sg_mesh_rank_of(m, c, &want);
      }
      SG_CHECK(nb == want, "%s: neighbour dim %d disp %d = %d, want %d", spec,
               d, disp, nb, want);
      c[d] = ((t % sizes[d]) + sizes[d]) % sizes[d];
      sg_mesh_rank_of(m, c, &want);
      SG_CHECK(nbp == want,
               "%s: periodic neighbour dim %d disp %d = %d, want %d", spec, d,
               disp, nbp, want);
    }
  }
  SG_CHECK_STATUS(sg_mesh_neighbor(m, nd, 1, 0, &r), SG_ERR_INVALID_ARG);

  /* every group: analytic members == what MPI says */
  int members[64], count = 0;
  for (unsigned mask = 0; mask < (1u << nd); ++mask) {
    sg_group_t g = NULL;
    SG_CHECK_OK(sg_mesh_group(m, mask, &g));
    if (!g) continue;
    expected_members(sizes, nd, coords, mask, members, &count);
    SG_CHECK(sg_group_size(g) == count, "%s mask %x: size %d want %d", spec,
             mask, sg_group_size(g), count);
    SG_CHECK(sg_group_dims(g) == mask && sg_group_mesh(g) == m, "%s: dims",
             spec);
    int gsize = 0;
    MPI_Comm_size(sg_group_comm(g), &gsize);
    int *got = malloc((size_t)gsize * sizeof *got);
    MPI_Allgather(&me, 1, MPI_INT, got, 1, MPI_INT, sg_group_comm(g));
    for (int i = 0; i < gsize && i < count; ++i) {
      SG_CHECK(got[i] == members[i],
               "%s mask %x: group rank %d is mesh rank %d, want %d", spec, mask,
               i, got[i], members[i]);
      SG_CHECK(sg_group_mesh_rank(g, i) == members[i],
               "%s mask %x: group_mesh_rank(%d)", spec, mask, i);
    }
    SG_CHECK(members[sg_group_rank(g)] == me, "%s mask %x: own group rank",
             spec, mask);
    free(got);
  }
  sg_group_t g = NULL;
  SG_CHECK_STATUS(sg_mesh_group(m, 1u << nd, &g), SG_ERR_INVALID_ARG);
  /* named groups */
  char names[128] = "";
  for (int d = 0; d < nd; ++d) {
    if (d % 2) continue;
    strcat(names, names[0] ? ", " : "");
    strcat(names, sg_mesh_dim_name(m, d));
  }
  unsigned even = 0;
  for (int d = 0; d < nd; d += 2) even |= 1u << d;
  SG_CHECK_OK(sg_mesh_group_named(m, names, &g));
  SG_CHECK(g && sg_group_dims(g) == even, "named '%s'", names);
  SG_CHECK_OK(sg_mesh_group_named(m, "", &g));
  SG_CHECK(g && sg_group_size(g) == 1, "named ''");
  SG_CHECK_STATUS(sg_mesh_group_named(m, "nope", &g), SG_ERR_INVALID_ARG);
  SG_CHECK(strstr(sg_last_error(), "'nope'") != NULL, "%s", sg_last_error());
  SG_CHECK_OK(sg_mesh_destroy(&m));
done:
  sg_mesh_destroy(&m);
}

/* ndims > 6: single-dim groups and the whole mesh exist, others say so. */
static void test_many_dims(void) {
  char spec[128];
  snprintf(spec, sizeof spec, "a=1,b=1,c=1,d=1,e=1,f=1,g=%d", sg_test_size);
  sg_mesh_t m = NULL;
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &m));
  sg_group_t g = NULL;
  SG_CHECK_OK(sg_mesh_group(m, 1u << 6, &g));
  SG_CHECK(g && sg_group_size(g) == sg_test_size, "single dim g");
  SG_CHECK_OK(sg_mesh_group(m, 0x7f, &g));
  SG_CHECK(g && sg_group_size(g) == sg_test_size, "full");
  SG_CHECK_OK(sg_mesh_group(m, 0, &g));
  SG_CHECK_STATUS(sg_mesh_group(m, 0x41, &g), SG_ERR_NOT_SUPPORTED);
  SG_CHECK(g == NULL, "group set on failure");
  SG_CHECK_OK(sg_mesh_destroy(&m));
done:
  sg_mesh_destroy(&m);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  test_parse();
  test_create_errors();
  char spec[128];
  int n = sg_test_size;
  snprintf(spec, sizeof spec, "world=%d", n);
  check_mesh(spec);
  snprintf(spec, sizeof spec, "pp=1,dp=%d,tp=1", n);
  check_mesh(spec);
  snprintf(spec, sizeof spec, "h=%d,w=1", n);
  check_mesh(spec);
  if (n % 2 == 0) {
    snprintf(spec, sizeof spec, "dp=%d,tp=2", n / 2);
    check_mesh(spec);
    snprintf(spec, sizeof spec, "a=2,b=1,c=%d", n / 2);
    check_mesh(spec);
  }
  if (n == 4) check_mesh("pp=2,dp=1,h=2,w=1,tp=1");
  test_many_dims();
  return sg_test_finish();
}
