/* Redistribute round trips between all placement pairs, on every mesh shape
 * that fits the process count, with odd sizes (7x5x3) and sizes smaller
 * than the number of ranks (empty shards), compared bit for bit with a
 * model of what every rank must hold; and errors on every rank.
 *
 * The model. x starts with Partial summands on its Partial mesh dims
 * ("original" dims): small integers h whose sum over the Partial group is
 * the global tensor G exactly. After any chain of redistributions the value
 * a rank holds at global element g is
 *   [coord_m == 0 for every m in MASK] * sum over the coordinates of the
 *   SUMMED original dims of h(g; own coordinates on the KEPT original dims)
 * where, per mesh dim, Partial->Partial changes nothing, Partial->other
 * turns KEPT into SUMMED (and drops m from MASK), other->Partial adds m to
 * MASK (the first rank keeps the values). With no Partial anywhere this is
 * just G's box. All values are small integers, so every sum is exact in
 * every dtype and every order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sg_comm.h"
#include "sg_test.h"
#include "test_shardtensor_util.h"

enum { M_NONE = 0, M_KEPT = 1, M_SUMMED = 2 };

typedef struct model {
  int nm;
  int orig[SG_MESH_MAX_DIMS]; /* M_NONE, M_KEPT or M_SUMMED */
  int mask[SG_MESH_MAX_DIMS];
} model;

static void model_init(model *md, int nm, const sg_placement *pl) {
  memset(md, 0, sizeof *md);
  md->nm = nm;
  for (int m = 0; m < nm; ++m)
    md->orig[m] = pl[m].kind == SG_PLACEMENT_PARTIAL ? M_KEPT : M_NONE;
}

static void model_move(model *md, const sg_placement *a,
                       const sg_placement *b) {
  for (int m = 0; m < md->nm; ++m) {
    const int pa = a[m].kind == SG_PLACEMENT_PARTIAL;
    const int pb = b[m].kind == SG_PLACEMENT_PARTIAL;
    if (pa && !pb) {
      if (md->orig[m] == M_KEPT) md->orig[m] = M_SUMMED;
      md->mask[m] = 0;
    } else if (!pa && pb) {
      md->mask[m] = 1;
    }
  }
}

static double summand_h(int64_t g, int k) {
  return (double)((g * 31 + k * 17) % 7 - 3);
}

/* The original summand with partial index k (mixed radix over the original
 * Partial dims) of K. */
static double summand(const sg_tensor *G, int64_t g, int k, int K) {
  if (k > 0) return summand_h(g, k);
  double v = st_load(G->data, G->dtype, g);
  for (int j = 1; j < K; ++j) v -= summand_h(g, j);
  return v;
}

/* The value this rank must hold at global element g. */
static double model_value(const model *md, sg_mesh_t mesh, const sg_tensor *G,
                          int64_t g) {
  int sizes[SG_MESH_MAX_DIMS], co[SG_MESH_MAX_DIMS];
  const int nm = md->nm;
  sg_mesh_coords(mesh, co);
  for (int m = 0; m < nm; ++m) {
    sizes[m] = sg_mesh_dim_size(mesh, m);
    if (md->mask[m] && co[m] != 0) return 0.0;
  }
  int K = 1, nsum = 1;
  for (int m = 0; m < nm; ++m) {
    if (md->orig[m] != M_NONE) K *= sizes[m];
    if (md->orig[m] == M_SUMMED) nsum *= sizes[m];
  }
  double v = 0.0;
  for (int s = 0; s < nsum; ++s) {
    /* coordinates of the summed dims from s, own ones on kept dims */
    int k = 0, q = s;
    for (int m = nm - 1, mult = 1; m >= 0; --m) {
      if (md->orig[m] == M_NONE) continue;
      int c = co[m];
      if (md->orig[m] == M_SUMMED) {
        c = q % sizes[m];
        q /= sizes[m];
      }
      k += c * mult;
      mult *= sizes[m];
    }
    v += summand(G, g, k, K);
  }
  return v;
}

static int next_index(int nd, const int64_t *shape, int64_t *idx) {
  for (int d = nd - 1; d >= 0; --d) {
    if (++idx[d] < shape[d]) return 1;
    idx[d] = 0;
  }
  return 0;
}

/* Write (or check) x's interior from the model; returns mismatches. */
static int64_t model_apply(const model *md, sg_shardtensor *x,
                           const sg_tensor *G, int write) {
  const sg_dtype dt = x->local.dtype;
  const size_t es = sg_dtype_size(dt);
  int64_t n = 1, bad = 0;
  for (int d = 0; d < x->ndim; ++d) n *= x->local_shape[d];
  if (n == 0) return 0;
  int64_t idx[SG_TENSOR_MAX_DIMS] = {0};
  do {
    int64_t g = 0, o = 0;
    for (int d = 0; d < x->ndim; ++d) {
      g = g * x->global_shape[d] + x->local_offset[d] + idx[d];
      o += (idx[d] + x->halo[d][0]) * x->local.strides[d];
    }
    const double v = model_value(md, x->mesh, G, g);
    if (write) {
      st_store(x->local.data, dt, o, v);
    } else {
      unsigned char want[8];
      st_store(want, dt, 0, v);
      if (memcmp(want, (unsigned char *)x->local.data + (size_t)o * es, es))
        ++bad;
    }
  } while (next_index(x->ndim, x->local_shape, idx));
  return bad;
}

static int plan_sums(int nm, const sg_placement *a, const sg_placement *b) {
  for (int m = 0; m < nm; ++m)
    if (a[m].kind == SG_PLACEMENT_PARTIAL && b[m].kind != SG_PLACEMENT_PARTIAL)
      return 1;
  return 0;
}

static int64_t g_pairs, g_moves;

/* x(A) -> y(B) (-> z(A) when back), each checked against the model;
 * margins of y and z must stay untouched. */
static void round_trip(sg_mesh_t mesh, const char *spec, sg_dtype dt, int ndim,
                       const int64_t *gs, const sg_tensor *G,
                       const sg_placement *A, const sg_placement *B,
                       int halo_on, int back) {
  const int nm = sg_mesh_ndims(mesh);
  sg_shardtensor x, y, z;
  memset(&x, 0, sizeof x);
  memset(&y, 0, sizeof y);
  memset(&z, 0, sizeof z);
  char sa[128], sb[128];
  sg_placements_format(nm, A, sa, sizeof sa);
  sg_placements_format(nm, B, sb, sizeof sb);
  const int64_t hx[3][2] = {{0, 1}, {2, 0}, {1, 1}},
                hy[3][2] = {{1, 2}, {0, 1}, {2, 0}};
  model md;
  model_init(&md, nm, A);
  SG_REQUIRE_OK(
      sg_shardtensor_create(&x, mesh, dt, ndim, gs, A, halo_on ? hx : NULL));
  SG_REQUIRE_OK(
      sg_shardtensor_create(&y, mesh, dt, ndim, gs, B, halo_on ? hy : NULL));
  SG_REQUIRE_OK(
      sg_shardtensor_create(&z, mesh, dt, ndim, gs, A, halo_on ? hy : NULL));
  SG_REQUIRE_OK(st_fill_local(&y, -77.0));
  SG_REQUIRE_OK(st_fill_local(&z, -77.0));
  model_apply(&md, &x, G, 1);

  const sg_status want1 = dt == SG_DTYPE_BF16 && plan_sums(nm, A, B)
                              ? SG_ERR_NOT_SUPPORTED
                              : SG_OK;
  sg_status st = sg_shardtensor_redistribute(&x, &y);
  ++g_moves;
  SG_CHECK(st == want1, "%s %s %s -> %s: %s (%s)", spec, sg_dtype_name(dt), sa,
           sb, sg_status_name(st), sg_last_error());
  if (st != SG_OK) goto done;
  model_move(&md, A, B);
  int64_t bad = model_apply(&md, &y, G, 0);
  SG_CHECK(bad == 0,
           "%s %s %s -> %s (shape %lldx%lldx%lld): %lld elements wrong", spec,
           sg_dtype_name(dt), sa, sb, (long long)gs[0],
           (long long)(ndim > 1 ? gs[1] : 1), (long long)(ndim > 2 ? gs[2] : 1),
           (long long)bad);
  bad = st_margin_changed(&y, -77.0);
  SG_CHECK(bad == 0, "%s %s %s -> %s: %lld margin elements changed", spec,
           sg_dtype_name(dt), sa, sb, (long long)bad);

  if (!back) {
    ++g_pairs;
    goto done;
  }
  const sg_status want2 = dt == SG_DTYPE_BF16 && plan_sums(nm, B, A)
                              ? SG_ERR_NOT_SUPPORTED
                              : SG_OK;
  st = sg_shardtensor_redistribute(&y, &z);
  ++g_moves;
  SG_CHECK(st == want2, "%s %s %s -> %s (back): %s (%s)", spec,
           sg_dtype_name(dt), sb, sa, sg_status_name(st), sg_last_error());
  if (st != SG_OK) goto done;
  model_move(&md, B, A);
  bad = model_apply(&md, &z, G, 0);
  SG_CHECK(bad == 0, "%s %s %s -> %s -> %s: %lld elements wrong", spec,
           sg_dtype_name(dt), sa, sb, sa, (long long)bad);
  bad = st_margin_changed(&z, -77.0);
  SG_CHECK(bad == 0, "%s %s round trip: %lld margin elements changed", spec,
           sg_dtype_name(dt), (long long)bad);
  ++g_pairs;
done:
  sg_shardtensor_destroy(&x);
  sg_shardtensor_destroy(&y);
  sg_shardtensor_destroy(&z);
}

/* f64, every pair over {Shard(0), Shard(1), Replicate, Partial}^nm, round
 * trips, on T = 7 x max(P-1, 1) x 5: odd sizes, uneven splits, and a dim
 * smaller than the number of ranks (empty shards, also when nested). */
static void test_all_pairs(sg_mesh_t mesh, const char *spec) {
  const int nm = sg_mesh_ndims(mesh), p = sg_mesh_size(mesh);
  static sg_placement combos[64][SG_MESH_MAX_DIMS];
  const int nc = st_placement_combos(nm, 2, combos, 64);
  const int64_t gs[3] = {7, p > 2 ? p - 1 : 1, 5};
  sg_tensor G;
  if (st_make_global(&G, SG_DTYPE_F64, 3, gs, 5) != SG_OK) {
    SG_CHECK(0, "global tensor");
    return;
  }
  for (int a = 0; a < nc; ++a)
    for (int b = 0; b < nc; ++b)
      round_trip(mesh, spec, SG_DTYPE_F64, 3, gs, &G, combos[a], combos[b],
                 (a + b) % 3 == 0, 1);
  sg_tensor_free(&G);
}

/* A sample of the pairs: 7x5x3 in f64, and f32, i32, i64, bf16 (moves
 * only) on a 5x3 tensor; every pair on 1-D meshes. */
static void test_sampled_pairs(sg_mesh_t mesh, const char *spec) {
  const int nm = sg_mesh_ndims(mesh);
  static sg_placement combos[64][SG_MESH_MAX_DIMS];
  const int nc = st_placement_combos(nm, 2, combos, 64);
  const int64_t g3[3] = {7, 5, 3}, g2[2] = {5, 3};
  sg_tensor G;
  if (st_make_global(&G, SG_DTYPE_F64, 3, g3, 6) != SG_OK) return;
  for (int a = 0; a < nc; ++a)
    for (int b = 0; b < nc; ++b)
      if (nm == 1 || (a * nc + b) % 5 == 1)
        round_trip(mesh, spec, SG_DTYPE_F64, 3, g3, &G, combos[a], combos[b],
                   a % 2, 0);
  sg_tensor_free(&G);
  const sg_dtype dts[4] = {SG_DTYPE_F32, SG_DTYPE_I32, SG_DTYPE_I64,
                           SG_DTYPE_BF16};
  for (int k = 0; k < 4; ++k) {
    if (st_make_global(&G, dts[k], 2, g2, 9) != SG_OK) return;
    for (int a = 0; a < nc; ++a)
      for (int b = 0; b < nc; ++b)
        if (nm == 1 || (a * nc + b) % 23 == 5 * k)
          round_trip(mesh, spec, dts[k], 2, g2, &G, combos[a], combos[b],
                     (a + b) % 2, 1);
    sg_tensor_free(&G);
  }
}

/* Nested sharding (several mesh dims on one tensor dim) and a 3-D mesh:
 * a sample of pairs over {Shard(0), Shard(1), Shard(2), Replicate,
 * Partial}. */
static void test_nested(sg_mesh_t mesh, const char *spec) {
  const int nm = sg_mesh_ndims(mesh);
  static sg_placement combos[128][SG_MESH_MAX_DIMS];
  const int nc = st_placement_combos(nm, 3, combos, 128);
  const int64_t gs[3] = {7, 5, 3};
  sg_tensor G;
  if (st_make_global(&G, SG_DTYPE_F64, 3, gs, 21) != SG_OK) return;
  for (int a = 0; a < nc; ++a)
    for (int b = 0; b < nc; ++b) {
      int nested = 0; /* keep pairs where one side shards a dim twice */
      for (int m = 0; m < nm; ++m)
        for (int k = m + 1; k < nm; ++k) {
          nested |= combos[a][m].kind == SG_PLACEMENT_SHARD &&
                    sg_placement_equal(combos[a][m], combos[a][k]);
          nested |= combos[b][m].kind == SG_PLACEMENT_SHARD &&
                    sg_placement_equal(combos[b][m], combos[b][k]);
        }
      const int every = nm >= 3 ? 131 : 3;
      if ((nested || nm >= 3) && (a * nc + b) % every == 0)
        round_trip(mesh, spec, SG_DTYPE_F64, 3, gs, &G, combos[a], combos[b],
                   a % 2, 1);
    }
  sg_tensor_free(&G);
}

static void test_errors(sg_mesh_t mesh) {
  const int me = sg_mesh_rank(mesh), p = sg_mesh_size(mesh),
            nm = sg_mesh_ndims(mesh);
  const int64_t gs[3] = {7, 5, 3}, other[3] = {7, 5, 4};
  sg_placement A[SG_MESH_MAX_DIMS], B[SG_MESH_MAX_DIMS];
  for (int m = 0; m < nm; ++m) {
    A[m] = m == 0 ? sg_shard(0) : sg_replicate();
    B[m] = m == nm - 1 ? sg_shard(1) : sg_replicate();
  }
  sg_shardtensor x, y;
  memset(&x, 0, sizeof x);
  memset(&y, 0, sizeof y);
  SG_REQUIRE_OK(sg_shardtensor_create(&x, mesh, SG_DTYPE_F64, 3, gs, A, NULL));
  /* different global shapes */
  SG_REQUIRE_OK(
      sg_shardtensor_create(&y, mesh, SG_DTYPE_F64, 3, other, B, NULL));
  SG_CHECK_STATUS(sg_shardtensor_redistribute(&x, &y), SG_ERR_SHAPE);
  sg_shardtensor_destroy(&y);
  /* different dtypes */
  SG_REQUIRE_OK(sg_shardtensor_create(&y, mesh, SG_DTYPE_F32, 3, gs, B, NULL));
  SG_CHECK_STATUS(sg_shardtensor_redistribute(&x, &y), SG_ERR_INVALID_ARG);
  sg_shardtensor_destroy(&y);
  /* one rank's y is corrupted (a shard dim out of range): every rank fails */
  SG_REQUIRE_OK(sg_shardtensor_create(&y, mesh, SG_DTYPE_F64, 3, gs, B, NULL));
  if (me == p - 1) y.placements[nm - 1] = sg_shard(7);
  SG_CHECK_STATUS(sg_shardtensor_redistribute(&x, &y), SG_ERR_INVALID_ARG);
  /* an unsupported Partial op on one rank */
  if (me == p - 1) {
    y.placements[nm - 1] = sg_partial();
    y.placements[nm - 1].op = SG_REDUCE_MAX;
  }
  SG_CHECK_STATUS(sg_shardtensor_redistribute(&x, &y), SG_ERR_NOT_SUPPORTED);
  y.placements[nm - 1] = B[nm - 1];
  /* ranks that disagree about y's placements (each consistent locally) */
  if (p > 1) {
    sg_shardtensor_destroy(&y);
    SG_REQUIRE_OK(sg_shardtensor_create(&y, mesh, SG_DTYPE_F64, 3, gs,
                                        me == 0 ? A : B, NULL));
    sg_status st = sg_shardtensor_redistribute(&x, &y);
    int same = 1;
    for (int m = 0; m < nm; ++m) same &= sg_placement_equal(A[m], B[m]);
    if (!same) {
      SG_CHECK(st == SG_ERR_SHAPE, "disagreeing placements: %s (%s)",
               sg_status_name(st), sg_last_error());
      SG_CHECK(strstr(sg_last_error(), "differs between ranks") != NULL,
               "message: %s", sg_last_error());
    }
    sg_shardtensor_destroy(&y);
    SG_REQUIRE_OK(
        sg_shardtensor_create(&y, mesh, SG_DTYPE_F64, 3, gs, B, NULL));
  }
  /* bf16 Partial -> Replicate: not supported, on every rank */
  {
    sg_shardtensor bx, by;
    sg_placement P[SG_MESH_MAX_DIMS], R[SG_MESH_MAX_DIMS];
    for (int m = 0; m < nm; ++m) {
      P[m] = sg_partial();
      R[m] = sg_replicate();
    }
    SG_REQUIRE_OK(
        sg_shardtensor_create(&bx, mesh, SG_DTYPE_BF16, 3, gs, P, NULL));
    SG_REQUIRE_OK(
        sg_shardtensor_create(&by, mesh, SG_DTYPE_BF16, 3, gs, R, NULL));
    SG_CHECK_STATUS(sg_shardtensor_redistribute(&bx, &by),
                    SG_ERR_NOT_SUPPORTED);
    SG_CHECK(strstr(sg_last_error(), "bf16") != NULL, "message: %s",
             sg_last_error());
    sg_shardtensor_destroy(&bx);
    sg_shardtensor_destroy(&by);
  }
  /* NULL and destroyed tensors are refused locally */
  SG_CHECK_STATUS(sg_shardtensor_redistribute(NULL, NULL), SG_ERR_INVALID_ARG);
  /* and everything still works afterwards */
  {
    sg_tensor G;
    SG_REQUIRE_OK(st_make_global(&G, SG_DTYPE_F64, 3, gs, 1));
    SG_CHECK_OK(sg_shardtensor_scatter(&x, me == 0 ? &G : NULL, 0));
    SG_CHECK_OK(sg_shardtensor_redistribute(&x, &y));
    SG_CHECK(st_interior_mismatch(&y, &G, 0) == 0, "redistribute after errors");
    sg_tensor_free(&G);
  }
done:
  sg_shardtensor_destroy(&x);
  sg_shardtensor_destroy(&y);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  const int p = sg_test_size;
  /* "pairs": all pairs only; "more": the samples, nested shards, 3-D
   * meshes and errors; no argument: everything */
  const int part = argc > 1 && !strcmp(argv[1], "pairs")  ? 1
                   : argc > 1 && !strcmp(argv[1], "more") ? 2
                                                          : 0;
  /* 1-D, 2-D (1 x P and, for 4 ranks, 2 x 2) and, for even P, a 3-D mesh
   * with a size-1 dim */
  char specs[4][64];
  int ns = 0;
  snprintf(specs[ns++], 64, "a=%d", p);
  snprintf(specs[ns++], 64, "a=1,b=%d", p);
  if (p == 4) snprintf(specs[ns++], 64, "a=2,b=2");
  if (p % 2 == 0 && part != 1) snprintf(specs[ns++], 64, "a=2,b=1,c=%d", p / 2);
  for (int i = 0; i < ns; ++i) {
    sg_mesh_t mesh = NULL;
    sg_status st = sg_mesh_create(MPI_COMM_WORLD, specs[i], &mesh);
    SG_CHECK(st == SG_OK, "mesh %s: %s", specs[i], sg_last_error());
    if (st != SG_OK) continue;
    const double t0 = MPI_Wtime();
    const int64_t m0 = g_moves;
    if (part != 2 && sg_mesh_ndims(mesh) <= 2) test_all_pairs(mesh, specs[i]);
    if (part != 1) {
      if (sg_mesh_ndims(mesh) <= 2) test_sampled_pairs(mesh, specs[i]);
      test_nested(mesh, specs[i]);
      test_errors(mesh);
    }
    if (sg_test_rank == 0)
      printf("mesh %-14s %6lld redistributions  %.2f s\n", specs[i],
             (long long)(g_moves - m0), MPI_Wtime() - t0);
    SG_CHECK_OK(sg_mesh_destroy(&mesh));
  }
  if (sg_test_rank == 0)
    printf("%lld placement pairs checked\n", (long long)g_pairs);
  sg_mem_info mi;
  SG_CHECK_OK(sg_mem_get_info(sg_device_host(), &mi));
  SG_CHECK(mi.current_bytes == 0, "%zu bytes still allocated",
           mi.current_bytes);
  return sg_test_finish();
}
