/* The mixture-of-experts op (models/ag_moe.c), f64: y = moe(x), objective
 * J = sum(y * r) + aux (the load-balancing loss, applied by the op as a
 * gradient). On one process: the gradients of x and of every parameter
 * (router, the experts' fc1/fc2 weights and biases) against central
 * differences, for top-1 with capacity dropping, top-2 with dropping and
 * top-2 without; and that top-1 at capacity factor 0.5 dropped tokens (their
 * y is 0) and no capacity dropped none. On the
 * meshes of 2-4 ranks (tokens split over h, w, h=2,w=2, h=3, w=3; samples
 * over dp; experts over ep=2, ep=4; ep=2,h=2, dp=2,ep=2): y, aux, the
 * loss, dx and every parameter gradient (summed over the ranks that hold
 * a part of it) against one process at 1e-10. With a tp dim (tp=2,
 * ep=2,tp=2) every expert's hidden width (F = 5: 3 + 2 over tp=2,
 * uneven) is split over tp: the same, and y, dx and the replicated
 * gradients (router, fc2's bias) the same bits on every tp rank. Bad input
 * (E % ep, topk > E, topk 3) refused with SG_ERR_CONFIG on every rank. */
#include "sg_autograd.h"
#include "sg_decomp.h"
#include "sg_mesh.h"
#include "sg_shardtensor.h"
#include "sg_test.h"
#include "sg_test_tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, C = 4, HY = 4, WX = 6, T = HY * WX, E = 4, F = 5, NP = 5 };
static const int64_t xshape[4] = {B, C, HY, WX};
/* per expert: Wr is not per expert (its "expert" is the router row) */
static const int64_t per[NP] = {C, F *C, F, C *F, C};

typedef struct problem {
  int k;
  double cf;
} problem;

typedef struct result {
  double y[B * C * T], dx[B * C * T], dp[NP][E * F * C], aux, loss;
} result;

static double xv(int64_t i) { return 0.9 * sin(0.7 * (double)i + 0.3); }
static double rv(int64_t i) { return 0.5 * cos(0.37 * (double)i); }
static double pv(int a, int64_t i) {
  static const double scale[NP] = {1.5, 0.4, 0.2, 0.4, 0.2};
  return scale[a] * sin(1.3 * (double)i + 0.9 * a + 0.1);
}

/* a perturbation of one element for finite differences (a = -1: none; 5:
 * x) */
typedef struct pert {
  int a;
  int64_t i;
  double h;
} pert;

static void placements_of(sg_mesh_t mesh, sg_placement *pl, int *ep) {
  sg_test_nchw_placements(mesh, pl);
  *ep = -1;
  for (int m = 0; m < sg_mesh_ndims(mesh); ++m)
    if (!strcmp(sg_mesh_dim_name(mesh, m), "ep")) *ep = m;
}

typedef struct run_state {
  sg_var x, r, p[NP];
  int64_t off[4], box[4];
  int64_t e0, el, f0, fl; /* this rank's experts and hidden units */
} run_state;

/* The global index in parameter a (E, per[a]) of element i of this rank's
 * block (its experts e0.., its hidden units f0.. of F). */
static int64_t p_gidx(const run_state *s, int a, int64_t i) {
  const int64_t fl = s->fl, f0 = s->f0;
  switch (a) {
  case 1: /* (el, fl, C) */
    return ((s->e0 + i / (fl * C)) * F + f0 + i / C % fl) * C + i % C;
  case 2: /* (el, fl) */ return (s->e0 + i / fl) * F + f0 + i % fl;
  case 3: /* (el, C, fl) */
    return ((s->e0 + i / (C * fl)) * C + i / fl % C) * F + f0 + i % fl;
  case 4: return s->e0 * C + i;
  default: return i;
  }
}

/* Elements of parameter a on this rank. */
static int64_t p_count(const run_state *s, int a) {
  static const int split[NP] = {0, 1, 1, 1, 0}; /* over tp */
  return a ? s->el * (split[a] ? per[a] / F * s->fl : per[a]) : E * per[a];
}

static void rs_release(run_state *s) {
  sg_var_release(&s->x), sg_var_release(&s->r);
  for (int a = 0; a < NP; ++a) sg_var_release(&s->p[a]);
}

/* this rank's block of x (and r) at its box, a perturbation applied */
static void fill_x(run_state *s, const pert *pe) {
  double *x = s->x.value.data, *r = s->r.value.data;
  const int64_t *o = s->off, *b = s->box;
  for (int64_t n = 0; n < b[0]; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < b[2]; ++i)
        for (int64_t j = 0; j < b[3]; ++j) {
          const int64_t g = (((o[0] + n) * C + c) * HY + o[2] + i) * WX + o[3] +
                            j,
                        l = ((n * C + c) * b[2] + i) * b[3] + j;
          x[l] = xv(g) + (pe->a == NP && pe->i == g ? pe->h : 0.0);
          r[l] = rv(g);
        }
}

static sg_status setup(run_state *s, sg_mesh_t mesh, sg_group_t ep,
                       sg_group_t tp, const pert *pe) {
  sg_status st = SG_OK;
  sg_placement pl[SG_MESH_MAX_DIMS];
  int epd = -1;
  memcpy(s->box, xshape, sizeof s->box);
  memset(s->off, 0, sizeof s->off);
  if (mesh) {
    placements_of(mesh, pl, &epd);
    SG_TRY(sg_shardtensor_box(mesh, 4, xshape, pl, sg_mesh_rank(mesh), s->off,
                              s->box));
  }
  SG_TRY(sg_var_init(&s->x, "x", SG_DTYPE_F64, 4, s->box, NULL, 1));
  SG_TRY(sg_var_init(&s->r, "r", SG_DTYPE_F64, 4, s->box, NULL, 0));
  fill_x(s, pe);
  if (mesh) {
    SG_TRY(sg_var_set_sharding(&s->x, mesh, pl, xshape));
    SG_TRY(sg_var_set_sharding(&s->r, mesh, pl, xshape));
  }
  const int P = ep ? sg_group_size(ep) : 1;
  s->el = E / P, s->e0 = (ep ? sg_group_rank(ep) : 0) * s->el;
  const int Q = tp ? sg_group_size(tp) : 1, q = tp ? sg_group_rank(tp) : 0;
  s->fl = sg_split_size(F, Q, q), s->f0 = sg_split_offset(F, Q, q);
  const int64_t shp[NP][3] = {{E, C},
                              {s->el, s->fl, C},
                              {s->el, s->fl},
                              {s->el, C, s->fl},
                              {s->el, C}},
                nd[NP] = {2, 3, 2, 3, 2};
  for (int a = 0; a < NP; ++a) {
    SG_TRY(sg_var_init_param(&s->p[a], "p", SG_DTYPE_F64, (int)nd[a], shp[a],
                             NULL, NULL));
    double *v = s->p[a].value.data;
    for (int64_t i = 0; i < p_count(s, a); ++i) {
      const int64_t g = p_gidx(s, a, i);
      v[i] = pv(a, g) + (pe->a == a && pe->i == g ? pe->h : 0.0);
    }
  }
fail:
  return st;
}

/* One run: forward, J, backward; this rank's parts of y, dx and the
 * parameter gradients into res (global layout, zero elsewhere). */
static sg_status run(sg_mesh_t mesh, sg_group_t ep, sg_group_t tp,
                     const problem *pb, const pert *pe, result *res) {
  sg_status st = SG_OK;
  sg_tape_t t = NULL;
  sg_var *y = NULL, *l = NULL;
  run_state s;
  memset(&s, 0, sizeof s);
  memset(res, 0, sizeof *res);
  SG_TRY(setup(&s, mesh, ep, tp, pe));
  SG_TRY(sg_tape_create(&t));
  sg_moe_desc d = {.experts = E,
                   .topk = pb->k,
                   .capacity = pb->cf,
                   .aux_coef = 0.3,
                   .aux = &res->aux,
                   .ep = ep,
                   .tp = tp};
  SG_TRY(
      sg_ag_moe(t, &d, &s.x, &s.p[0], &s.p[1], &s.p[2], &s.p[3], &s.p[4], &y));
  const int64_t *o = s.off, *b = s.box;
  for (int64_t n = 0, q = 0; n < b[0]; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < b[2]; ++i)
        for (int64_t j = 0; j < b[3]; ++j, ++q) {
          const int64_t g = (((o[0] + n) * C + c) * HY + o[2] + i) * WX + o[3] +
                            j;
          res->y[g] = ((double *)y->value.data)[q];
        }
  SG_TRY(sg_ag_binary(t, SG_BINARY_MUL, y, &s.r, &y));
  SG_TRY(sg_ag_loss(t, SG_LOSS_SUM, y, NULL, &l));
  res->loss = sg_var_item(l);
  SG_TRY(sg_tape_backward(t, l));
  for (int64_t n = 0, q = 0; n < b[0]; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < b[2]; ++i)
        for (int64_t j = 0; j < b[3]; ++j, ++q) {
          const int64_t g = (((o[0] + n) * C + c) * HY + o[2] + i) * WX + o[3] +
                            j;
          res->dx[g] = ((double *)s.x.grad.data)[q];
        }
  for (int a = 0; a < NP; ++a)
    for (int64_t i = 0; i < p_count(&s, a); ++i)
      res->dp[a][p_gidx(&s, a, i)] = ((double *)s.p[a].grad.data)[i];
fail:
  sg_tape_destroy(&t);
  rs_release(&s);
  return st;
}

static double objective(const problem *pb, int a, int64_t i, double h) {
  static result r;
  const pert pe = {a, i, h};
  if (run(NULL, NULL, NULL, pb, &pe, &r) != SG_OK) return NAN;
  return r.loss + r.aux;
}

/* gradients against central differences, a few elements of each */
static void check_fd(const problem *pb, const result *ref) {
  const double h = 1e-6;
  for (int a = 0; a <= NP; ++a) {
    const int64_t n = a == NP ? B * C * T : E * per[a];
    for (int64_t i = 1; i < n; i += n / 7 + 1) {
      const double fd = (objective(pb, a, i, h) - objective(pb, a, i, -h)) /
                        (2 * h);
      const double an = a == NP ? ref->dx[i] : ref->dp[a][i];
      SG_CHECK(fabs(fd - an) <= 1e-6 * (1.0 + fabs(an)),
               "k=%d cf=%g: d/d(%s%d)[%lld] = %.12g, differences %.12g", pb->k,
               pb->cf, a == NP ? "x" : "p", a, (long long)i, an, fd);
    }
  }
}

/* tokens whose every choice was dropped: y = 0 */
static int dropped_tokens(const result *r) {
  int z = 0;
  for (int64_t n = 0; n < B; ++n)
    for (int64_t t = 0; t < T; ++t) {
      int all0 = 1;
      for (int64_t c = 0; c < C; ++c) all0 &= r->y[(n * C + c) * T + t] == 0.0;
      z += all0;
    }
  return z;
}

static void cmp(const char *spec, const problem *pb, const char *what,
                const double *got, const double *want, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    SG_CHECK(fabs(got[i] - want[i]) <= 1e-10 * (1.0 + fabs(want[i])),
             "%s k=%d cf=%g: %s[%lld] %.17g, one process %.17g", spec, pb->k,
             pb->cf, what, (long long)i, got[i], want[i]);
}

/* The whole arrays (y, dx, the router's and fc2 bias's gradients) are the
 * same bits on every tp rank: checked against tp rank 0's, then counted
 * once (the other tp ranks' zeroed). */
static void tp_once(const char *spec, sg_group_t tp, result *got) {
  static result r0;
  if (!tp) return;
  r0 = *got;
  MPI_Bcast(&r0, (int)(sizeof r0 / sizeof(double)), MPI_DOUBLE, 0,
            sg_group_comm(tp));
  int same = !memcmp(r0.y, got->y, sizeof r0.y) &&
             !memcmp(r0.dx, got->dx, sizeof r0.dx) &&
             !memcmp(r0.dp[0], got->dp[0], sizeof r0.dp[0]) &&
             !memcmp(r0.dp[4], got->dp[4], sizeof r0.dp[4]);
  MPI_Allreduce(MPI_IN_PLACE, &same, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  SG_CHECK(same, "%s: y, dx, dWr, db2 differ between the tp ranks", spec);
  if (sg_group_rank(tp) > 0) {
    memset(got->y, 0, sizeof got->y), memset(got->dx, 0, sizeof got->dx);
    memset(got->dp[0], 0, sizeof got->dp[0]);
    memset(got->dp[4], 0, sizeof got->dp[4]);
  }
}

static void test_mesh(const char *spec, const problem *pb, const result *ref) {
  sg_mesh_t mesh = NULL;
  sg_group_t ep = NULL, tp = NULL;
  static result got;
  const pert none = {-1, 0, 0.0};
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  const int epd = sg_mesh_find_dim(mesh, "ep"),
            tpd = sg_mesh_find_dim(mesh, "tp");
  if (epd >= 0) SG_REQUIRE_OK(sg_mesh_group(mesh, 1u << epd, &ep));
  if (tpd >= 0) SG_REQUIRE_OK(sg_mesh_group(mesh, 1u << tpd, &tp));
  SG_REQUIRE_OK(run(mesh, ep, tp, pb, &none, &got));
  tp_once(spec, tp, &got);
  /* every rank's parts summed: y, dx are disjoint boxes; the gradients
   * are partial over the ranks sharing a parameter part */
  MPI_Allreduce(MPI_IN_PLACE, got.y, B * C * T, MPI_DOUBLE, MPI_SUM,
                MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, got.dx, B * C * T, MPI_DOUBLE, MPI_SUM,
                MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, got.dp, NP * E * F * C, MPI_DOUBLE, MPI_SUM,
                MPI_COMM_WORLD);
  cmp(spec, pb, "aux", &got.aux, &ref->aux, 1);
  cmp(spec, pb, "loss", &got.loss, &ref->loss, 1);
  cmp(spec, pb, "y", got.y, ref->y, B * C * T);
  cmp(spec, pb, "dx", got.dx, ref->dx, B * C * T);
  static const char *const nm[NP] = {"dWr", "dW1", "db1", "dW2", "db2"};
  for (int a = 0; a < NP; ++a)
    cmp(spec, pb, nm[a], got.dp[a], ref->dp[a], E * per[a]);
done:
  sg_mesh_destroy(&mesh);
}

/* bad input: the same SG_ERR_CONFIG on every rank, before any message */
static void test_errors(void) {
  sg_mesh_t mesh = NULL;
  sg_group_t ep = NULL;
  char spec[16];
  snprintf(spec, sizeof spec, "ep=%d", sg_test_size);
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  SG_REQUIRE_OK(sg_mesh_group(mesh, 1u, &ep));
  const sg_moe_desc odd = {.experts = 5, .topk = 1, .ep = ep},
                    big = {.experts = 1, .topk = 2},
                    three = {.experts = 4, .topk = 3};
  if (sg_test_size > 1)
    SG_CHECK(sg_moe_check(&odd, 4) == SG_ERR_CONFIG, "E %% ep");
  SG_CHECK(sg_moe_check(&big, 4) == SG_ERR_CONFIG, "topk > E");
  SG_CHECK(sg_moe_check(&three, 4) == SG_ERR_CONFIG, "topk 3");
done:
  sg_mesh_destroy(&mesh);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  static const problem pbs[3] = {{1, 0.5}, {2, 0.5}, {2, 0.0}};
  static const char *const meshes[5][6] = {
      {NULL},
      {NULL},
      {"h=2", "w=2", "ep=2", "dp=2", "tp=2"},
      {"h=3", "w=3", NULL},
      {"ep=2,h=2", "h=2,w=2", "ep=4", "ep=2,tp=2", NULL}};
  static result ref;
  const pert none = {-1, 0, 0.0};
  for (int q = 0; q < 3; ++q) {
    SG_REQUIRE_OK(run(NULL, NULL, NULL, &pbs[q], &none, &ref));
    if (sg_test_size == 1) {
      check_fd(&pbs[q], &ref);
      if (pbs[q].k == 1)
        SG_CHECK(dropped_tokens(&ref) > 0, "k=%d cf=%g: nothing dropped",
                 pbs[q].k, pbs[q].cf);
      else if (pbs[q].cf <= 0)
        SG_CHECK(dropped_tokens(&ref) == 0, "cf 0 dropped %d tokens",
                 dropped_tokens(&ref));
    }
    for (int i = 0; sg_test_size <= 4 && meshes[sg_test_size][i]; ++i)
      test_mesh(meshes[sg_test_size][i], &pbs[q], &ref);
  }
  test_errors();
done:
  return sg_test_finish();
}
