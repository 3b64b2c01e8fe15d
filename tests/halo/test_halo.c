/* Halo exchange against the global grid, on every mesh shape that fits the
 * process count (1: 1x1; 2: 2x1, 1x2, dp=2; 3: 3x1, 1x3; 4: 1x4, 4x1, 2x2,
 * dp=2 x w=2) in 2-D (17 x 23) and 3-D (9 x 10 x 11), for every boundary
 * kind and a mixed one, halo widths 1-3, asymmetric fixed widths, and
 * per-rank widths of window ops by the output-partition rule (strided,
 * dilated, negative halos). For each case:
 *   - every cell of the haloed block (corners included) equals the global
 *     grid extended by the boundary kinds, bit for bit, and the allocated
 *     margins beyond the widths are untouched;
 *   - a stencil (the window op, or a box stencil over the widths) applied to
 *     the local block after the exchange equals the global stencil bit for
 *     bit on the rank's output shard;
 *   - the adjoint identity <Hx, y> = <x, H^T y> holds in double precision
 *     to 1e-12, and H^T leaves the halo cells zero.
 * Blocking and start/progress/finish paths, packed and channels-last
 * layouts, and the message paths (SG_HALO_PATH: auto, mpi, pack, direct
 * from/into the block, shm through the on-node shared window) alternate
 * over the cases; with SG_HALO_TEST_PATH set, every case uses that path.
 * Every case also runs back-to-back exchanges on one plan (forward and
 * adjoint interleaved, no synchronisation between them, changing data),
 * which checks that a sender does not overwrite a message before its
 * receiver consumed it (the sequence numbers of the shm path).
 * The blocks come from malloc ("user"), from sg_halo_plan_alloc_block
 * ("plan": on the shm path the neighbours read the slabs straight from
 * them, single copy) or from both ("mixed": plan blocks on even ranks,
 * malloc on odd ones), rotating over the cases; SG_HALO_TEST_BLOCK fixes
 * one. */
#include "sg_decomp.h"
#include "sg_halo.h"
#include "sg_mesh.h"
#include "sg_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define L 2 /* leading elements (channels) carried along */

typedef struct cfg {
  int ndims;
  int64_t N[3];
  int mesh_dim[3];
  sg_boundary bnd[3];
  int use_window;
  sg_window win[3];
  int64_t hw[3][2];
  int extra_margin;
  int channels_last;
  int nonblocking;
  int block; /* 0 user, 1 plan, 2 mixed */
} cfg;

static const char *block_names[3] = {"user", "plan", "mixed"};

/* A zeroed block of cnt doubles for plan: malloc'd, or the plan's own
 * (sg_halo_plan_alloc_block is collective: every rank calls it in plan and
 * mixed mode; *owned tells the caller to free it). */
static double *get_block(sg_halo_plan_t plan, sg_mesh_t mesh, const cfg *c,
                         int64_t cnt, int *owned) {
  void *pb = NULL;
  *owned = 1;
  if (c->block != 0) {
    SG_CHECK_OK(sg_halo_plan_alloc_block(plan, &pb));
    if (pb && (c->block == 1 || sg_mesh_rank(mesh) % 2 == 0)) {
      *owned = 0;
      return pb;
    }
  }
  return calloc((size_t)(cnt > 0 ? cnt : 1), sizeof(double));
}

static int64_t ncases;

/* Global index -> source index in [0, N), or -1 for a zero fill. */
static int64_t gmap(sg_boundary b, int64_t N, int64_t g) {
  if (g >= 0 && g < N) return g;
  switch (b) {
  case SG_BOUNDARY_PERIODIC: return ((g % N) + N) % N;
  case SG_BOUNDARY_REFLECT: return g < 0 ? -g : 2 * (N - 1) - g;
  case SG_BOUNDARY_REPLICATE: return g < 0 ? 0 : N - 1;
  default: return -1;
  }
}

static double gval(int c, const int64_t *g) {
  /* distinct, non-trivial values, exactly representable in float */
  int64_t h = (c * 7919 + g[0] * 131 + g[1] * 31 + g[2] * 7) % 1013;
  return (double)h / 16.0 - 31.0;
}

/* Value of the extended global grid at global index g (any dims). */
static double gref(const cfg *c, int ch, const int64_t *g) {
  int64_t m[3] = {0, 0, 0};
  for (int d = 0; d < c->ndims; ++d) {
    m[d] = gmap(c->bnd[d], c->N[d], g[d]);
    if (m[d] < 0) return 0.0;
  }
  return gval(ch, m);
}

/* The stencil of a case along one dim: output y reads inputs
 * s*y + off + t*dil, t in [0, k). */
typedef struct sdim {
  int64_t k, s, off, dil;
  int64_t out0, nout; /* this rank's output shard (global) */
} sdim;

static double tapw(const int64_t *t) {
  return 0.25 + 0.125 * (double)t[0] - 0.0625 * (double)t[1] +
         0.03125 * (double)t[2];
}

typedef struct blk {
  int64_t origin, strides[4];
  int64_t n[3], h[3][2], in_off[3];
} blk;

static int64_t blk_at(const blk *b, int ch, const int64_t *i) {
  return b->origin + ch * b->strides[0] + i[0] * b->strides[1] +
         i[1] * b->strides[2] + i[2] * b->strides[3];
}

static void mesh_list(int size, int nd, const char **specs, int (*md)[3],
                      int *count) {
  int n = 0;
#define ADD(s, a, b, c) \
  do {                  \
    specs[n] = s;       \
    md[n][0] = a;       \
    md[n][1] = b;       \
    md[n][2] = c;       \
    ++n;                \
  } while (0)
  if (nd == 2) {
    switch (size) {
    case 1: ADD("h=1,w=1", 0, 1, -1); break;
    case 2:
      ADD("h=2,w=1", 0, 1, -1);
      ADD("h=1,w=2", 0, 1, -1);
      ADD("dp=2", -1, -1, -1);
      break;
    case 3:
      ADD("h=3,w=1", 0, 1, -1);
      ADD("h=1,w=3", 0, 1, -1);
      break;
    case 4:
      ADD("h=1,w=4", 0, 1, -1);
      ADD("h=4,w=1", 0, 1, -1);
      ADD("h=2,w=2", 0, 1, -1);
      ADD("dp=2,w=2", -1, 1, -1);
      break;
    }
  } else {
    switch (size) {
    case 1: ADD("a=1,b=1,c=1", 0, 1, 2); break;
    case 2: ADD("a=1,b=1,c=2", 0, 1, 2); break;
    case 3: ADD("a=3,b=1,c=1", 0, 1, 2); break;
    case 4:
      ADD("a=2,b=2,c=1", 0, 1, 2);
      ADD("a=1,b=2,c=2", 0, 1, 2);
      break;
    }
  }
#undef ADD
  *count = n;
}

/* Build desc + stencil for a case on this rank. */
static sg_status make_desc(sg_mesh_t mesh, const cfg *c, sg_dtype dt,
                           sg_halo_desc *desc, sdim *sd, int64_t *in_off) {
  sg_status st = SG_OK;
  sg_decomp_t dec = NULL;
  sg_decomp_desc dd;
  memset(&dd, 0, sizeof dd);
  dd.ndims = c->ndims;
  for (int d = 0; d < c->ndims; ++d) {
    dd.global[d] = c->N[d];
    dd.mesh_dim[d] = c->mesh_dim[d];
    dd.boundary[d] = c->bnd[d];
  }
  SG_TRY(sg_decomp_create(mesh, &dd, &dec));
  if (c->use_window) {
    SG_TRY(sg_halo_desc_from_decomp(dec, c->win, L, dt, desc));
  } else {
    sg_halo_desc_init(desc);
    desc->ndims = c->ndims;
    desc->lead = L;
    desc->dtype = dt;
    sg_decomp_shard(dec, NULL, desc->interior, NULL);
    for (int d = 0; d < c->ndims; ++d) {
      desc->halo[d][0] = c->hw[d][0];
      desc->halo[d][1] = c->hw[d][1];
      desc->mesh_dim[d] = c->mesh_dim[d];
      desc->boundary[d] = c->bnd[d];
    }
  }
  sg_decomp_shard(dec, NULL, NULL, in_off);
  for (int d = 0; d < 3; ++d) {
    sdim *s = &sd[d];
    if (d >= c->ndims) {
      *s = (sdim){1, 1, 0, 1, 0, 1};
      in_off[d] = 0;
      continue;
    }
    for (int k = 0; k < 2; ++k)
      desc->margin[d][k] = desc->halo[d][k] + (c->extra_margin ? d + k : 0);
    if (c->use_window) {
      int p = sg_decomp_parts(dec, d), me = sg_decomp_coord(dec, d);
      int64_t *osz = malloc(sizeof(int64_t) * (size_t)p * 4);
      SG_TRY(
          sg_decomp_window_halos(dec, d, c->win[d], osz + 2 * p, osz, osz + p));
      *s = (sdim){c->win[d].kernel,   c->win[d].stride, -c->win[d].pad[0],
                  c->win[d].dilation, osz[p + me],      osz[me]};
      free(osz);
    } else {
      *s = (sdim){c->hw[d][0] + c->hw[d][1] + 1,
                  1,
                  -c->hw[d][0],
                  1,
                  in_off[d],
                  desc->interior[d]};
    }
  }
  if (c->channels_last) {
    /* (d0, d1, d2, lead) in memory */
    int64_t s = L;
    desc->strides[0] = 1;
    for (int d = c->ndims - 1; d >= 0; --d) {
      desc->strides[1 + d] = s;
      s *= desc->margin[d][0] + desc->interior[d] + desc->margin[d][1];
    }
  }
fail:
  sg_decomp_destroy(&dec);
  return st;
}

static void blk_from(sg_halo_plan_t plan, const sg_halo_desc *desc,
                     const int64_t *in_off, blk *b) {
  memset(b, 0, sizeof *b);
  b->origin = sg_halo_plan_origin(plan);
  sg_halo_plan_strides(plan, b->strides);
  for (int d = 0; d < 3; ++d) {
    b->n[d] = d < desc->ndims ? desc->interior[d] : 1;
    b->h[d][0] = d < desc->ndims ? desc->halo[d][0] : 0;
    b->h[d][1] = d < desc->ndims ? desc->halo[d][1] : 0;
    b->in_off[d] = in_off[d];
  }
}

#define FOR_BOX(i, lo0, hi0, lo1, hi1, lo2, hi2) \
  for (i[0] = (lo0); i[0] < (hi0); ++i[0])       \
    for (i[1] = (lo1); i[1] < (hi1); ++i[1])     \
      for (i[2] = (lo2); i[2] < (hi2); ++i[2])

static int in_box(const blk *b, const int64_t *i) {
  for (int d = 0; d < 3; ++d)
    if (i[d] < -b->h[d][0] || i[d] >= b->n[d] + b->h[d][1]) return 0;
  return 1;
}

static double rnd(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(*s >> 11) / 9007199254740992.0 - 0.5;
}

static void run_adjoint(sg_mesh_t mesh, const cfg *c, const char *label,
                        sg_halo_plan_t plan, const blk *bp) {
  int64_t i[3];
  double *x = NULL, *y = NULL;
  const blk b = *bp;
  int64_t cnt = sg_halo_plan_block_count(plan);
  int xown = 1, yown = 1;
  x = get_block(plan, mesh, c, cnt, &xown);
  y = get_block(plan, mesh, c, cnt, &yown);
  uint64_t seed = 1234567u + 977u * (uint64_t)sg_mesh_rank(mesh);
  for (int ch = 0; ch < L; ++ch)
    FOR_BOX(i, -b.h[0][0], b.n[0] + b.h[0][1], -b.h[1][0], b.n[1] + b.h[1][1],
            -b.h[2][0], b.n[2] + b.h[2][1]) {
      int interior = 1;
      for (int d = 0; d < 3; ++d)
        if (i[d] < 0 || i[d] >= b.n[d]) interior = 0;
      int64_t e = blk_at(&b, ch, i);
      if (interior) x[e] = rnd(&seed);
      y[e] = rnd(&seed);
    }
  double *x0 = malloc((size_t)cnt * sizeof *x0);
  memcpy(x0, x, (size_t)cnt * sizeof *x);
  if (c->nonblocking) {
    SG_CHECK_OK(sg_halo_start(plan, x));
    SG_CHECK_OK(sg_halo_progress(plan, NULL));
    SG_CHECK_OK(sg_halo_finish(plan));
    SG_CHECK_OK(sg_halo_adjoint_start(plan, y));
    SG_CHECK_OK(sg_halo_progress(plan, NULL));
    SG_CHECK_OK(sg_halo_adjoint_finish(plan));
  } else {
    SG_CHECK_OK(sg_halo_exchange(plan, x));
    SG_CHECK_OK(sg_halo_adjoint(plan, y));
  }
  /* y now holds H^T y_original: recompute <Hx, y0> needs y0; keep it by
   * regenerating the same sequence */
  double *y0 = calloc((size_t)cnt, sizeof *y0);
  seed = 1234567u + 977u * (uint64_t)sg_mesh_rank(mesh);
  int64_t halo_nonzero = 0;
  for (int ch = 0; ch < L; ++ch)
    FOR_BOX(i, -b.h[0][0], b.n[0] + b.h[0][1], -b.h[1][0], b.n[1] + b.h[1][1],
            -b.h[2][0], b.n[2] + b.h[2][1]) {
      int interior = 1;
      for (int d = 0; d < 3; ++d)
        if (i[d] < 0 || i[d] >= b.n[d]) interior = 0;
      int64_t e = blk_at(&b, ch, i);
      if (interior) (void)rnd(&seed);
      y0[e] = rnd(&seed);
      if (!interior && y[e] != 0.0) ++halo_nonzero;
    }
  double loc[2] = {0, 0}, tot[2];
  for (int ch = 0; ch < L; ++ch)
    FOR_BOX(i, -b.h[0][0], b.n[0] + b.h[0][1], -b.h[1][0], b.n[1] + b.h[1][1],
            -b.h[2][0], b.n[2] + b.h[2][1]) {
      int64_t e = blk_at(&b, ch, i);
      loc[0] += x[e] * y0[e]; /* <Hx, y> over interior + halo */
      loc[1] += x0[e] * y[e]; /* <x, H^T y>: x0 is zero in the halo */
    }
  MPI_Allreduce(loc, tot, 2, MPI_DOUBLE, MPI_SUM, sg_mesh_comm(mesh));
  double rel = fabs(tot[0] - tot[1]) / fmax(fabs(tot[0]), 1e-300);
  SG_CHECK(rel <= 1e-12, "%s: <Hx,y> = %.17g, <x,H^T y> = %.17g (rel %.3g)",
           label, tot[0], tot[1], rel);
  SG_CHECK(halo_nonzero == 0, "%s: %lld halo cells nonzero after adjoint",
           label, (long long)halo_nonzero);
  free(x0);
  free(y0);
  if (xown) free(x);
  if (yown) free(y);
}

static void run_forward(sg_mesh_t mesh, const cfg *c, const char *label) {
  sg_halo_desc desc;
  sdim sd[3];
  int64_t in_off[3], i[3], g[3];
  sg_halo_plan_t plan = NULL;
  double *x = NULL;
  int xown = 1;
  SG_REQUIRE_OK(make_desc(mesh, c, SG_DTYPE_F64, &desc, sd, in_off));
  SG_REQUIRE_OK(sg_halo_plan_create(mesh, &desc, &plan));
  {
    /* every test runs on one node: auto and shm take the shared window
     * whenever some rank has a message */
    const char *want = getenv("SG_HALO_PATH"), *got = sg_halo_plan_path(plan);
    double any = (double)sg_halo_plan_send_bytes(plan), all = 0;
    MPI_Allreduce(&any, &all, 1, MPI_DOUBLE, MPI_SUM, sg_mesh_comm(mesh));
    if (want && (!strcmp(want, "auto") || !strcmp(want, "shm")))
      SG_CHECK(!strcmp(got, all > 0 ? "shm" : "mpi"),
               "%s: plan path %s, expected %s", label, got,
               all > 0 ? "shm" : "mpi");
    else if (want)
      SG_CHECK(!strcmp(got, want), "%s: plan path %s, expected %s", label, got,
               want);
  }
  blk b;
  blk_from(plan, &desc, in_off, &b);
  int64_t cnt = sg_halo_plan_block_count(plan);
  x = get_block(plan, mesh, c, cnt, &xown);
  for (int64_t e = 0; e < cnt; ++e) x[e] = -777.0; /* guard */
  for (int ch = 0; ch < L; ++ch)
    FOR_BOX(i, -b.h[0][0], b.n[0] + b.h[0][1], -b.h[1][0], b.n[1] + b.h[1][1],
            -b.h[2][0], b.n[2] + b.h[2][1]) {
      int interior = 1;
      for (int d = 0; d < 3; ++d) {
        g[d] = b.in_off[d] + i[d];
        if (i[d] < 0 || i[d] >= b.n[d]) interior = 0;
      }
      x[blk_at(&b, ch, i)] = interior ? gref(c, ch, g) : NAN;
    }
  if (c->nonblocking) {
    int done = 0, spins = 0;
    SG_CHECK_OK(sg_halo_start(plan, x));
    while (!done && spins < 3) {
      SG_CHECK_OK(sg_halo_progress(plan, &done));
      ++spins;
    }
    SG_CHECK_OK(sg_halo_finish(plan));
  } else {
    SG_CHECK_OK(sg_halo_exchange(plan, x));
  }
  /* every haloed cell against the extended global grid; guards intact */
  int64_t bad = 0, guard_bad = 0, inbox = 0;
  for (int ch = 0; ch < L; ++ch)
    FOR_BOX(i, -b.h[0][0], b.n[0] + b.h[0][1], -b.h[1][0], b.n[1] + b.h[1][1],
            -b.h[2][0], b.n[2] + b.h[2][1]) {
      for (int d = 0; d < 3; ++d) g[d] = b.in_off[d] + i[d];
      double want = gref(c, ch, g), got = x[blk_at(&b, ch, i)];
      if (memcmp(&want, &got, sizeof want) != 0) {
        if (!bad)
          sg_test_fail_at(__FILE__, __LINE__,
                          "%s: ch %d cell (%lld,%lld,%lld) = %g, want %g",
                          label, ch, (long long)i[0], (long long)i[1],
                          (long long)i[2], got, want);
        ++bad;
      }
      ++inbox;
    }
  for (int64_t e = 0; e < cnt; ++e)
    if (x[e] == -777.0) ++guard_bad;
  int64_t margin_cells = 0;
  {
    int64_t tot = L;
    for (int d = 0; d < desc.ndims; ++d)
      tot *= desc.margin[d][0] + desc.interior[d] + desc.margin[d][1];
    margin_cells = tot - inbox;
  }
  SG_CHECK(bad == 0, "%s: %lld haloed cells differ", label, (long long)bad);
  /* every guard left is a margin cell outside the widths (strided layouts
   * have no gaps here, so the counts must match exactly) */
  SG_CHECK(guard_bad == margin_cells, "%s: %lld guard cells, expected %lld",
           label, (long long)guard_bad, (long long)margin_cells);

  /* the stencil after the exchange against the global stencil */
  int64_t sbad = 0, oob = 0;
  int64_t y[3], t[3];
  for (int ch = 0; ch < L; ++ch)
    FOR_BOX(y, sd[0].out0, sd[0].out0 + sd[0].nout, sd[1].out0,
            sd[1].out0 + sd[1].nout, sd[2].out0, sd[2].out0 + sd[2].nout) {
      double accl = 0.0, accg = 0.0;
      FOR_BOX(t, 0, sd[0].k, 0, sd[1].k, 0, sd[2].k) {
        int64_t gx[3], li[3];
        for (int d = 0; d < 3; ++d) {
          gx[d] = sd[d].s * y[d] + sd[d].off + t[d] * sd[d].dil;
          li[d] = gx[d] - b.in_off[d];
        }
        double w = tapw(t);
        accg += w * gref(c, ch, gx);
        if (!in_box(&b, li)) {
          ++oob;
          continue;
        }
        accl += w * x[blk_at(&b, ch, li)];
      }
      if (memcmp(&accl, &accg, sizeof accl) != 0) ++sbad;
    }
  SG_CHECK(oob == 0, "%s: stencil reads %lld cells outside the halo", label,
           (long long)oob);
  SG_CHECK(sbad == 0,
           "%s: %lld stencil outputs differ from the global "
           "stencil",
           label, (long long)sbad);
  run_adjoint(mesh, c, label, plan, &b);
done:
  if (xown) free(x);
  SG_CHECK_OK(sg_halo_plan_destroy(&plan));
  ++ncases;
}

/* Back-to-back use of one plan: 7 rounds of forward exchange of changing
 * data (every haloed cell checked), every third round followed by an
 * adjoint (halo cells must come back zero), alternating blocking and
 * start/progress/finish, no barrier in between. */
static void run_repeat(sg_mesh_t mesh, const cfg *c, const char *label) {
  sg_halo_desc desc;
  sdim sd[3];
  int64_t in_off[3], i[3], g[3];
  sg_halo_plan_t plan = NULL;
  double *x = NULL;
  int xown = 1;
  SG_REQUIRE_OK(make_desc(mesh, c, SG_DTYPE_F64, &desc, sd, in_off));
  SG_REQUIRE_OK(sg_halo_plan_create(mesh, &desc, &plan));
  blk b;
  blk_from(plan, &desc, in_off, &b);
  int64_t cnt = sg_halo_plan_block_count(plan), bad = 0, hbad = 0;
  x = get_block(plan, mesh, c, cnt, &xown);
  for (int it = 0; it < 7; ++it) {
    const double scale = (double)(it + 1); /* exact: small multiples */
    for (int ch = 0; ch < L; ++ch)
      FOR_BOX(i, -b.h[0][0], b.n[0] + b.h[0][1], -b.h[1][0], b.n[1] + b.h[1][1],
              -b.h[2][0], b.n[2] + b.h[2][1]) {
        int interior = 1;
        for (int d = 0; d < 3; ++d) {
          g[d] = b.in_off[d] + i[d];
          if (i[d] < 0 || i[d] >= b.n[d]) interior = 0;
        }
        x[blk_at(&b, ch, i)] = interior ? scale * gref(c, ch, g) : NAN;
      }
    if (it & 1) {
      int fin = 0;
      SG_CHECK_OK(sg_halo_start(plan, x));
      SG_CHECK_OK(sg_halo_progress(plan, &fin));
      SG_CHECK_OK(sg_halo_finish(plan));
    } else {
      SG_CHECK_OK(sg_halo_exchange(plan, x));
    }
    for (int ch = 0; ch < L; ++ch)
      FOR_BOX(i, -b.h[0][0], b.n[0] + b.h[0][1], -b.h[1][0], b.n[1] + b.h[1][1],
              -b.h[2][0], b.n[2] + b.h[2][1]) {
        for (int d = 0; d < 3; ++d) g[d] = b.in_off[d] + i[d];
        double want = scale * gref(c, ch, g), got = x[blk_at(&b, ch, i)];
        if (memcmp(&want, &got, sizeof want) != 0) {
          if (!bad)
            sg_test_fail_at(__FILE__, __LINE__,
                            "%s, round %d: ch %d cell (%lld,%lld,%lld) = %g, "
                            "want %g",
                            label, it, ch, (long long)i[0], (long long)i[1],
                            (long long)i[2], got, want);
          ++bad;
        }
      }
    if (it % 3 == 2) {
      SG_CHECK_OK(sg_halo_adjoint(plan, x));
      for (int ch = 0; ch < L; ++ch)
        FOR_BOX(i, -b.h[0][0], b.n[0] + b.h[0][1], -b.h[1][0],
                b.n[1] + b.h[1][1], -b.h[2][0], b.n[2] + b.h[2][1]) {
          if (in_box(&b, i) && (i[0] < 0 || i[0] >= b.n[0] || i[1] < 0 ||
                                i[1] >= b.n[1] || i[2] < 0 || i[2] >= b.n[2]))
            hbad += x[blk_at(&b, ch, i)] != 0.0;
        }
    }
  }
  SG_CHECK(bad == 0, "%s: %lld cells differ over back-to-back exchanges", label,
           (long long)bad);
  SG_CHECK(hbad == 0, "%s: %lld halo cells nonzero after an adjoint", label,
           (long long)hbad);
done:
  if (xown) free(x);
  SG_CHECK_OK(sg_halo_plan_destroy(&plan));
}

static const char *bname(sg_boundary b) { return sg_boundary_name(b); }

static void run_all(int nd) {
  const char *specs[8];
  int md[8][3], nm = 0;
  mesh_list(sg_test_size, nd, specs, md, &nm);
  const sg_boundary kinds[5][3] = {
      {SG_BOUNDARY_ZERO, SG_BOUNDARY_ZERO, SG_BOUNDARY_ZERO},
      {SG_BOUNDARY_PERIODIC, SG_BOUNDARY_PERIODIC, SG_BOUNDARY_PERIODIC},
      {SG_BOUNDARY_REFLECT, SG_BOUNDARY_REFLECT, SG_BOUNDARY_REFLECT},
      {SG_BOUNDARY_REPLICATE, SG_BOUNDARY_REPLICATE, SG_BOUNDARY_REPLICATE},
      {SG_BOUNDARY_REFLECT, SG_BOUNDARY_PERIODIC, SG_BOUNDARY_REPLICATE}};
  /* fixed widths (lo, hi) per dim */
  const int64_t fixed2[][3][2] = {{{1, 1}, {1, 1}, {0, 0}},
                                  {{2, 2}, {2, 2}, {0, 0}},
                                  {{3, 3}, {3, 3}, {0, 0}},
                                  {{1, 3}, {2, 0}, {0, 0}},
                                  {{0, 2}, {3, 1}, {0, 0}}};
  const int64_t fixed3[][3][2] = {{{1, 1}, {1, 1}, {1, 1}},
                                  {{2, 2}, {2, 2}, {2, 2}},
                                  {{1, 2}, {0, 1}, {2, 0}}};
  /* window ops per dim: kernel, stride, padding, dilation */
  const sg_window wins2[][3] = {
      {SG_WINDOW_SYM(3, 1, 1, 1), SG_WINDOW_SYM(7, 1, 3, 1),
       SG_WINDOW_SYM(1, 1, 0, 1)},
      {SG_WINDOW_SYM(2, 2, 0, 1), SG_WINDOW_SYM(3, 2, 1, 1),
       SG_WINDOW_SYM(1, 1, 0, 1)},
      {SG_WINDOW_SYM(3, 1, 2, 2), SG_WINDOW_SYM(4, 1, 1, 1),
       SG_WINDOW_SYM(1, 1, 0, 1)},
      {SG_WINDOW_SYM(5, 1, 2, 1), SG_WINDOW_SYM(3, 3, 0, 1),
       SG_WINDOW_SYM(1, 1, 0, 1)}};
  const sg_window wins3[][3] = {
      {SG_WINDOW_SYM(3, 1, 1, 1), SG_WINDOW_SYM(3, 1, 1, 1),
       SG_WINDOW_SYM(3, 1, 1, 1)},
      {SG_WINDOW_SYM(2, 2, 0, 1), SG_WINDOW_SYM(5, 1, 2, 1),
       SG_WINDOW_SYM(3, 2, 1, 1)}};
  int nfixed = nd == 2 ? 5 : 3, nwin = nd == 2 ? 4 : 2;
  int toggle = 0;
  const char *paths[5] = {"auto", "mpi", "pack", "direct", "shm"};
  const char *force = getenv("SG_HALO_TEST_PATH");
  for (int m = 0; m < nm; ++m) {
    sg_mesh_t mesh = NULL;
    SG_CHECK_OK(sg_mesh_create(MPI_COMM_WORLD, specs[m], &mesh));
    if (!mesh) continue;
    for (int k = 0; k < 5; ++k) {
      for (int v = 0; v < nfixed + nwin; ++v) {
        /* keep the run short on oversubscribed machines: in 2-D every
         * (mesh, kind) gets widths 1, 2, 3, one asymmetric width set and
         * one window op (rotating); in 3-D one symmetric and one asymmetric
         * width set and one window op */
        if (nd == 2 && v >= 3 && v < nfixed && (v - 3) != (k + m) % 2) continue;
        if (nd == 3 && v < 2 && v != (k + m) % 2) continue;
        if (v >= nfixed && (v - nfixed) != (k + m) % nwin) continue;
        cfg c;
        memset(&c, 0, sizeof c);
        c.ndims = nd;
        c.N[0] = nd == 2 ? 17 : 9;
        c.N[1] = nd == 2 ? 23 : 10;
        c.N[2] = nd == 2 ? 1 : 11;
        for (int d = 0; d < 3; ++d) {
          c.mesh_dim[d] = md[m][d];
          c.bnd[d] = kinds[k][d];
        }
        if (v < nfixed) {
          memcpy(c.hw, nd == 2 ? fixed2[v] : fixed3[v], sizeof c.hw);
        } else {
          c.use_window = 1;
          memcpy(c.win, nd == 2 ? wins2[v - nfixed] : wins3[v - nfixed],
                 sizeof c.win);
        }
        ++toggle;
        c.nonblocking = toggle & 1;
        c.channels_last = (toggle >> 1) & 1;
        c.extra_margin = (toggle % 3) == 0;
        const char *path = force && *force ? force : paths[(toggle / 4) % 5];
        const char *fb = getenv("SG_HALO_TEST_BLOCK");
        c.block = toggle % 3;
        for (int j = 0; j < 3; ++j)
          if (fb && !strcmp(fb, block_names[j])) c.block = j;
        setenv("SG_HALO_PATH", path, 1); /* read at plan creation */
        char label[160];
        snprintf(label, sizeof label,
                 "%dD mesh %s, %s/%s/%s, %s %d, %s, %s, %s path, %s "
                 "blocks%s",
                 nd, specs[m], bname(c.bnd[0]), bname(c.bnd[1]),
                 bname(c.bnd[2]), c.use_window ? "window" : "widths",
                 c.use_window ? v - nfixed : v,
                 c.nonblocking ? "start/finish" : "blocking",
                 c.channels_last ? "channels-last" : "packed", path,
                 block_names[c.block], c.extra_margin ? ", extra margins" : "");
        run_forward(mesh, &c, label);
        run_repeat(mesh, &c, label);
      }
    }
    SG_CHECK_OK(sg_mesh_destroy(&mesh));
  }
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  run_all(2);
  run_all(3);
  unsetenv("SG_HALO_PATH");
  if (sg_test_rank == 0)
    printf("%lld halo cases at %d ranks\n", (long long)ncases, sg_test_size);
  return sg_test_finish();
}
