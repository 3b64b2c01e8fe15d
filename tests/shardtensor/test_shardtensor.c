/* ShardTensors: the box rule against a brute-force reference (pure, many
 * synthetic meshes), box tables on real meshes, create with halo margins,
 * scatter then gather bit for bit on every mesh shape that fits the
 * process count, and errors on every rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sg_comm.h"
#include "sg_test.h"
#include "test_shardtensor_util.h"

/* ---- the box rule ---------------------------------------------------------
 * Reference: walk the mesh dims in order; a piece of length L split over p
 * gives part k the count of j in [0, L) with j % p == k (the first L % p
 * parts get one more), parts laid out one after another. */
static void ref_box(int nm, const int *sizes, const int *coords, int ndim,
                    const int64_t *gshape, const sg_placement *pl, int64_t *o,
                    int64_t *l) {
  for (int d = 0; d < ndim; ++d) {
    int64_t start = 0, len = gshape[d];
    for (int m = 0; m < nm; ++m) {
      if (pl[m].kind != SG_PLACEMENT_SHARD || pl[m].dim != d) continue;
      int64_t before = 0, mine = 0;
      for (int k = 0; k <= coords[m]; ++k) {
        int64_t cnt = 0;
        for (int64_t j = 0; j < len; ++j) cnt += j % sizes[m] == k;
        if (k < coords[m])
          before += cnt;
        else
          mine = cnt;
      }
      start += before;
      len = mine;
    }
    o[d] = start;
    l[d] = len;
  }
}

static void test_box_rule(void) {
  const int meshes[][4] = {{1, 1},    {1, 2},    {1, 3},       {1, 5},
                           {2, 2, 3}, {2, 3, 2}, {3, 2, 2, 2}, {3, 4, 1, 3}};
  const int64_t shapes[][3] = {
      {7, 5, 3}, {1, 2, 3}, {0, 4, 1}, {10, 9, 2}, {4, 4, 4}};
  int64_t checked = 0, bad = 0, badcov = 0;
  for (size_t mi = 0; mi < sizeof meshes / sizeof meshes[0]; ++mi) {
    const int nm = meshes[mi][0];
    const int *sizes = meshes[mi] + 1;
    int p = 1;
    for (int m = 0; m < nm; ++m) p *= sizes[m];
    static sg_placement combos[1024][SG_MESH_MAX_DIMS];
    const int nc = st_placement_combos(nm, 3, combos, 1024);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; ++si) {
      const int64_t *gs = shapes[si];
      const int64_t gn = gs[0] * gs[1] * gs[2];
      int *cover = calloc((size_t)(gn > 0 ? gn : 1), sizeof *cover);
      for (int c = 0; c < nc; ++c) {
        const sg_placement *pl = combos[c];
        memset(cover, 0, sizeof(int) * (size_t)(gn > 0 ? gn : 1));
        for (int r = 0; r < p; ++r) {
          int co[SG_MESH_MAX_DIMS];
          for (int m = nm - 1, q = r; m >= 0; --m) {
            co[m] = q % sizes[m];
            q /= sizes[m];
          }
          int64_t o[3], l[3], ro[3], rl[3];
          sg_status st = sg_shardtensor_box_coords(nm, sizes, co, 3, gs, pl, o,
                                                   l);
          ref_box(nm, sizes, co, 3, gs, pl, ro, rl);
          ++checked;
          if (st != SG_OK || memcmp(o, ro, sizeof o) ||
              memcmp(l, rl, sizeof l)) {
            char b[128];
            if (++bad <= 5)
              SG_CHECK(
                  0,
                  "box of %s on mesh %d dims, rank %d: (%lld %lld %lld)+"
                  "(%lld %lld %lld), reference (%lld %lld %lld)+(%lld %lld %lld)",
                  sg_placements_format(nm, pl, b, sizeof b), nm, r,
                  (long long)o[0], (long long)o[1], (long long)o[2],
                  (long long)l[0], (long long)l[1], (long long)l[2],
                  (long long)ro[0], (long long)ro[1], (long long)ro[2],
                  (long long)rl[0], (long long)rl[1], (long long)rl[2]);
            continue;
          }
          for (int64_t i = 0; i < l[0]; ++i)
            for (int64_t j = 0; j < l[1]; ++j)
              for (int64_t k = 0; k < l[2]; ++k)
                ++cover[((o[0] + i) * gs[1] + o[1] + j) * gs[2] + o[2] + k];
        }
        /* every element is held by exactly (product of non-Shard sizes)
         * ranks */
        int copies = 1;
        for (int m = 0; m < nm; ++m)
          if (pl[m].kind != SG_PLACEMENT_SHARD) copies *= sizes[m];
        for (int64_t i = 0; i < gn; ++i) badcov += cover[i] != copies;
      }
      free(cover);
    }
  }
  SG_CHECK(bad == 0, "%lld of %lld boxes differ from the reference",
           (long long)bad, (long long)checked);
  SG_CHECK(badcov == 0, "%lld elements covered the wrong number of times",
           (long long)badcov);
  /* the documented example: 721 over 4 */
  {
    const int sz[1] = {4};
    const int64_t g[1] = {721};
    const sg_placement pl[1] = {sg_shard(0)};
    const int64_t want[4] = {181, 180, 180, 180}, wo[4] = {0, 181, 361, 541};
    for (int c = 0; c < 4; ++c) {
      int64_t o, l;
      SG_CHECK_OK(sg_shardtensor_box_coords(1, sz, &c, 1, g, pl, &o, &l));
      SG_CHECK(o == wo[c] && l == want[c], "721/4 part %d: %lld+%lld", c,
               (long long)o, (long long)l);
    }
  }
  /* nested: Shard(0) on both dims of a (2, 2) mesh over 7: outer first */
  {
    const int sz[2] = {2, 2};
    const int64_t g[1] = {7};
    const sg_placement pl[2] = {sg_shard(0), sg_shard(0)};
    const int64_t wo[4] = {0, 2, 4, 6}, wl[4] = {2, 2, 2, 1};
    for (int r = 0; r < 4; ++r) {
      int co[2] = {r / 2, r % 2};
      int64_t o, l;
      SG_CHECK_OK(sg_shardtensor_box_coords(2, sz, co, 1, g, pl, &o, &l));
      SG_CHECK(o == wo[r] && l == wl[r], "nested part %d: %lld+%lld", r,
               (long long)o, (long long)l);
    }
  }
  /* invalid placements and arguments */
  {
    const int sz[2] = {2, 2}, co[2] = {0, 1}, badco[2] = {0, 2};
    const int64_t g[2] = {4, 4};
    int64_t o[2], l[2];
    sg_placement pl[2] = {sg_shard(2), sg_replicate()};
    SG_CHECK_STATUS(sg_shardtensor_box_coords(2, sz, co, 2, g, pl, o, l),
                    SG_ERR_INVALID_ARG);
    pl[0] = sg_shard(-1);
    SG_CHECK_STATUS(sg_shardtensor_box_coords(2, sz, co, 2, g, pl, o, l),
                    SG_ERR_INVALID_ARG);
    pl[0] = sg_partial();
    pl[0].op = SG_REDUCE_MAX;
    SG_CHECK_STATUS(sg_shardtensor_box_coords(2, sz, co, 2, g, pl, o, l),
                    SG_ERR_NOT_SUPPORTED);
    SG_CHECK(strstr(sg_last_error(), "Partial") != NULL, "message: %s",
             sg_last_error());
    pl[0].kind = (sg_placement_kind)9;
    SG_CHECK_STATUS(sg_shardtensor_box_coords(2, sz, co, 2, g, pl, o, l),
                    SG_ERR_INVALID_ARG);
    pl[0] = sg_shard(0);
    SG_CHECK_STATUS(sg_shardtensor_box_coords(2, sz, badco, 2, g, pl, o, l),
                    SG_ERR_INVALID_ARG);
    char b[96];
    pl[1] = sg_partial();
    SG_CHECK(strcmp(sg_placements_format(2, pl, b, sizeof b),
                    "(Shard(0), Partial)") == 0,
             "format: %s", b);
  }
}

/* ---- on real meshes -------------------------------------------------------- */

static void test_tables(sg_mesh_t mesh) {
  const int nm = sg_mesh_ndims(mesh), p = sg_mesh_size(mesh);
  static sg_placement combos[512][SG_MESH_MAX_DIMS];
  const int nc = st_placement_combos(nm, 3, combos, 512);
  const int64_t gs[3] = {7, 5, 3};
  int sizes[SG_MESH_MAX_DIMS];
  for (int m = 0; m < nm; ++m) sizes[m] = sg_mesh_dim_size(mesh, m);
  int64_t bad = 0;
  int64_t *to = malloc(sizeof(int64_t) * 3 * (size_t)p);
  int64_t *tl = malloc(sizeof(int64_t) * 3 * (size_t)p);
  for (int c = 0; c < nc; ++c) {
    sg_shardtensor x;
    const int64_t halo[3][2] = {{1, 0}, {0, 2}, {1, 1}};
    if (sg_shardtensor_create(&x, mesh, SG_DTYPE_F32, 3, gs, combos[c], halo) !=
        SG_OK) {
      ++bad;
      continue;
    }
    for (int d = 0; d < 3; ++d)
      bad += x.local.shape[d] != x.local_shape[d] + halo[d][0] + halo[d][1];
    sg_tensor in = sg_shardtensor_interior(&x);
    bad += in.ndim != 3 ||
           memcmp(in.shape, x.local_shape, sizeof in.shape) != 0;
    bad += sg_shardtensor_box_table(&x, to, tl) != SG_OK;
    for (int r = 0; r < p; ++r) {
      int co[SG_MESH_MAX_DIMS];
      int64_t ro[3], rl[3];
      sg_mesh_coords_of(mesh, r, co);
      ref_box(nm, sizes, co, 3, gs, combos[c], ro, rl);
      bad += memcmp(ro, to + 3 * r, sizeof ro) != 0 ||
             memcmp(rl, tl + 3 * r, sizeof rl) != 0;
      if (r == sg_mesh_rank(mesh))
        bad += memcmp(ro, x.local_offset, sizeof ro) != 0 ||
               memcmp(rl, x.local_shape, sizeof rl) != 0;
    }
    sg_shardtensor_destroy(&x);
    sg_shardtensor_destroy(&x); /* twice is fine */
  }
  free(to);
  free(tl);
  SG_CHECK(bad == 0, "mesh of %d dims: %lld box-table problems", nm,
           (long long)bad);
}

/* Scatter from root, check every interior (and margins untouched), gather
 * to root and to all, compare with the global tensor bit for bit. */
static void scatter_gather_case(sg_mesh_t mesh, const char *spec, sg_dtype dt,
                                int ndim, const int64_t *gs,
                                const sg_placement *pl, int root, int halo_on) {
  sg_tensor G, H;
  sg_shardtensor x;
  memset(&G, 0, sizeof G);
  memset(&H, 0, sizeof H);
  memset(&x, 0, sizeof x);
  const int me = sg_mesh_rank(mesh), nm = sg_mesh_ndims(mesh);
  char b[128];
  sg_placements_format(nm, pl, b, sizeof b);
  const int64_t halo[3][2] = {{1, 2}, {0, 1}, {2, 0}};
  SG_REQUIRE_OK(st_make_global(&G, dt, ndim, gs, 11));
  SG_REQUIRE_OK(
      sg_shardtensor_create(&x, mesh, dt, ndim, gs, pl, halo_on ? halo : NULL));
  SG_REQUIRE_OK(st_fill_local(&x, -77.0));
  SG_CHECK_OK(sg_shardtensor_scatter(&x, me == root ? &G : NULL, root));
  int64_t bad = st_interior_mismatch(&x, &G, 1);
  SG_CHECK(bad == 0,
           "%s %s %s root %d: %lld interior elements wrong after "
           "scatter",
           spec, sg_dtype_name(dt), b, root, (long long)bad);
  bad = st_margin_changed(&x, -77.0);
  SG_CHECK(bad == 0, "%s %s %s: scatter changed %lld margin elements", spec,
           sg_dtype_name(dt), b, (long long)bad);

  int partial = 0;
  for (int m = 0; m < nm; ++m) partial |= pl[m].kind == SG_PLACEMENT_PARTIAL;
  const sg_status want = partial && dt == SG_DTYPE_BF16 ? SG_ERR_NOT_SUPPORTED
                                                        : SG_OK;
  for (int pass = 0; pass < 2; ++pass) {
    const int groot = pass == 0 ? (root + 1) % sg_mesh_size(mesh) : -1;
    SG_REQUIRE_OK(sg_tensor_alloc(&H, dt, sg_device_host(), ndim, gs));
    SG_REQUIRE_OK(sg_tensor_fill(&H, -5.0));
    sg_status st = sg_shardtensor_gather(&x,
                                         (groot < 0 || me == groot) ? &H : NULL,
                                         groot);
    SG_CHECK(st == want, "%s %s %s gather to %d: %s (%s)", spec,
             sg_dtype_name(dt), b, groot, sg_status_name(st), sg_last_error());
    if (st == SG_OK && (groot < 0 || me == groot))
      SG_CHECK(sg_test_cmp_bytes("gather", H.data, G.data,
                                 sg_tensor_nbytes(&G)) == 0,
               "%s %s %s: gather to %d differs from the scattered tensor", spec,
               sg_dtype_name(dt), b, groot);
    sg_tensor_free(&H);
  }
done:
  sg_tensor_free(&G);
  sg_tensor_free(&H);
  sg_shardtensor_destroy(&x);
}

static void test_scatter_gather(sg_mesh_t mesh, const char *spec) {
  const int nm = sg_mesh_ndims(mesh), p = sg_mesh_size(mesh);
  static sg_placement combos[512][SG_MESH_MAX_DIMS];
  const int64_t shapes[3][3] = {{7, 5, 3}, {1, 3, 2}, {2, 0, 3}};
  /* f64: every placement over {Shard(0..2), Replicate, Partial} */
  int nc = st_placement_combos(nm, 3, combos, 512);
  for (int s = 0; s < 3; ++s)
    for (int c = 0; c < nc; ++c)
      if ((s < 2 || c % 4 == 0) && (nm < 3 || c % 8 == s))
        /* the empty tensor and 3-D meshes on a sample */
        scatter_gather_case(mesh, spec, SG_DTYPE_F64, 3, shapes[s], combos[c],
                            c % p, c % 2);
  /* other dtypes on a 2-D tensor with Shard(0), Shard(1), R, P */
  const sg_dtype dts[4] = {SG_DTYPE_F32, SG_DTYPE_I32, SG_DTYPE_I64,
                           SG_DTYPE_BF16};
  const int64_t g2[2] = {5, 3};
  nc = st_placement_combos(nm, 2, combos, 512);
  for (int k = 0; k < 4; ++k)
    for (int c = 0; c < nc; ++c)
      if (nm == 1 || (nm == 2 && c % 3 == k % 3) || (nm == 3 && c % 16 == k))
        /* a sample on 2-D and 3-D meshes */
        scatter_gather_case(mesh, spec, dts[k], 2, g2, combos[c], (c + k) % p,
                            (c + k) % 2);
}

static void test_errors(sg_mesh_t mesh) {
  const int me = sg_mesh_rank(mesh), p = sg_mesh_size(mesh),
            nm = sg_mesh_ndims(mesh);
  const int64_t gs[3] = {7, 5, 3}, other[3] = {7, 5, 4};
  sg_placement pl[SG_MESH_MAX_DIMS];
  for (int m = 0; m < nm; ++m) pl[m] = m == 0 ? sg_shard(0) : sg_replicate();
  sg_shardtensor x;
  sg_tensor G, Gbad, Gf;
  memset(&x, 0, sizeof x);
  memset(&G, 0, sizeof G);
  memset(&Gbad, 0, sizeof Gbad);
  memset(&Gf, 0, sizeof Gf);
  /* create: local errors */
  pl[0] = sg_shard(3);
  SG_CHECK_STATUS(sg_shardtensor_create(&x, mesh, SG_DTYPE_F64, 3, gs, pl,
                                        NULL),
                  SG_ERR_INVALID_ARG);
  pl[0] = sg_partial();
  pl[0].op = SG_REDUCE_MIN;
  SG_CHECK_STATUS(sg_shardtensor_create(&x, mesh, SG_DTYPE_F64, 3, gs, pl,
                                        NULL),
                  SG_ERR_NOT_SUPPORTED);
  const int64_t neg[3][2] = {{0, 0}, {-1, 0}, {0, 0}};
  pl[0] = sg_shard(0);
  SG_CHECK_STATUS(sg_shardtensor_create(&x, mesh, SG_DTYPE_F64, 3, gs, pl, neg),
                  SG_ERR_INVALID_ARG);
  SG_CHECK(x.mesh == NULL, "failed create leaves a reset struct");

  SG_REQUIRE_OK(sg_shardtensor_create(&x, mesh, SG_DTYPE_F64, 3, gs, pl, NULL));
  SG_REQUIRE_OK(st_make_global(&G, SG_DTYPE_F64, 3, gs, 3));
  SG_REQUIRE_OK(st_make_global(&Gbad, SG_DTYPE_F64, 3, other, 3));
  SG_REQUIRE_OK(st_make_global(&Gf, SG_DTYPE_F32, 3, gs, 3));
  const int root = p - 1;
  /* a wrong global shape on the root: every rank gets SG_ERR_SHAPE */
  SG_CHECK_STATUS(sg_shardtensor_scatter(&x, me == root ? &Gbad : NULL, root),
                  SG_ERR_SHAPE);
  SG_CHECK(strstr(sg_last_error(), "global tensor") != NULL, "message: %s",
           sg_last_error());
  SG_CHECK_STATUS(sg_shardtensor_scatter(&x, me == root ? &Gf : NULL, root),
                  SG_ERR_INVALID_ARG);
  SG_CHECK_STATUS(sg_shardtensor_scatter(&x, &G, p), SG_ERR_INVALID_ARG);
  SG_CHECK_STATUS(sg_shardtensor_scatter(&x, me == root ? NULL : &G, root),
                  SG_ERR_INVALID_ARG);
  /* gather to all with a wrong tensor on one rank only */
  SG_CHECK_STATUS(sg_shardtensor_gather(&x, me == 0 ? &Gbad : &G, -1),
                  SG_ERR_SHAPE);
  /* a rank whose ShardTensor describes another global tensor */
  sg_shardtensor_destroy(&x);
  SG_REQUIRE_OK(sg_shardtensor_create(
      &x, mesh, SG_DTYPE_F64, 3, me == p - 1 && p > 1 ? other : gs, pl, NULL));
  SG_CHECK_STATUS(sg_shardtensor_gather(&x, me == p - 1 && p > 1 ? &Gbad : &G,
                                        -1),
                  p > 1 ? SG_ERR_SHAPE : SG_OK);
  if (p > 1)
    SG_CHECK(strstr(sg_last_error(), "differs between ranks") != NULL,
             "message: %s", sg_last_error());
  /* a corrupted struct on one rank */
  sg_shardtensor_destroy(&x);
  SG_REQUIRE_OK(sg_shardtensor_create(&x, mesh, SG_DTYPE_F64, 3, gs, pl, NULL));
  if (me == 0) x.placements[0] = sg_shard(5);
  SG_CHECK_STATUS(sg_shardtensor_scatter(&x, me == root ? &G : NULL, root),
                  SG_ERR_INVALID_ARG);
  /* everything still works afterwards (no rank is stuck) */
  x.placements[0] = sg_shard(0);
  SG_CHECK_OK(sg_shardtensor_scatter(&x, me == root ? &G : NULL, root));
  SG_CHECK(st_interior_mismatch(&x, &G, 0) == 0, "scatter after errors");
done:
  sg_shardtensor_destroy(&x);
  sg_tensor_free(&G);
  sg_tensor_free(&Gbad);
  sg_tensor_free(&Gf);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  test_box_rule();
  char specs[ST_MAX_SPECS][64];
  const int ns = st_mesh_specs(sg_test_size, 1, specs);
  for (int i = 0; i < ns; ++i) {
    sg_mesh_t mesh = NULL;
    sg_status st = sg_mesh_create(MPI_COMM_WORLD, specs[i], &mesh);
    SG_CHECK(st == SG_OK, "mesh %s: %s", specs[i], sg_last_error());
    if (st != SG_OK) continue;
    const double t0 = MPI_Wtime();
    test_tables(mesh);
    test_scatter_gather(mesh, specs[i]);
    test_errors(mesh);
    if (sg_test_rank == 0)
      printf("mesh %-14s %.2f s\n", specs[i], MPI_Wtime() - t0);
    SG_CHECK_OK(sg_mesh_destroy(&mesh));
  }
  sg_mem_info mi;
  SG_CHECK_OK(sg_mem_get_info(sg_device_host(), &mi));
  SG_CHECK(mi.current_bytes == 0, "%zu bytes still allocated",
           mi.current_bytes);
  return sg_test_finish();
}
