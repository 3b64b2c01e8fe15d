/* Swin's ops (models/ag_swin.c): y = roll(wattn(roll(q, s), roll(k, s),
 * roll(v, s)), -s) + wattn(q, k, v) (a shifted and an unshifted window
 * attention, shift s = W/2 in both dims, relative position bias tables),
 * loss = mse(y, target).
 *  - one process, f64: the gradients of q, k, v and both bias tables
 *    against central finite differences; f32 against f64;
 *  - sharded (h=2, w=2, dp=2; h=3; h=2,w=2, dp=2,h=2 on a 24x8 token grid,
 *    window 4: every block holds whole windows, the shifted windows cross
 *    the shard boundaries): loss, y, dq, dk, dv (this rank's box) and the
 *    bias gradients (summed over the split dims) against one process at
 *    relative 1e-10, f64;
 *  - Swin's mask for non-periodic dims (sg_ag_window_attention_masked on
 *    the shifted attention; y, x or both not periodic): one process
 *    against a direct reference that labels the regions as Swin's paper
 *    does (slices [0, n-W), [n-W, n-s), [n-s, n) of the rolled grid per
 *    masked dim; attend only within a label), the gradients against
 *    central differences, and every mesh above against one process at
 *    1e-10 (f64);
 *  - bad input: a window larger than the token grid, a rank's block that
 *    is not a multiple of the window (w=2, window 8; h=4, window 4):
 *    SG_ERR_CONFIG on every rank. */
#include "sg_autograd.h"
#include "sg_mesh.h"
#include "sg_test.h"
#include "sg_test_tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { NB = 2, C = 4, HY = 24, WX = 8, HEADS = 2, WIN = 4, NV = 6 };
enum { NBIAS = (2 * WIN - 1) * (2 * WIN - 1) };

/* q, k, v, target, bias (shifted), bias (unshifted) */
static const int vnd[NV] = {4, 4, 4, 4, 2, 2};
static const int64_t vshape[NV][4] = {{NB, C, HY, WX}, {NB, C, HY, WX},
                                      {NB, C, HY, WX}, {NB, C, HY, WX},
                                      {HEADS, NBIAS},  {HEADS, NBIAS}};

typedef struct prob {
  sg_var v[NV];
  double *g[NV]; /* global values */
} prob;

static int64_t numel(int nd, const int64_t *s) {
  int64_t n = 1;
  for (int i = 0; i < nd; ++i) n *= s[i];
  return n;
}

static void gen(prob *p) {
  for (int i = 0; i < NV; ++i) {
    const int64_t n = numel(vnd[i], vshape[i]);
    p->g[i] = malloc((size_t)n * sizeof(double));
    sg_test_rand_fill(p->g[i], n, 1 + (uint64_t)i, -1, 1);
  }
}

static void gen_free(prob *p) {
  for (int i = 0; i < NV; ++i) free(p->g[i]);
}

static void release(prob *p) {
  for (int i = 0; i < NV; ++i) sg_var_release(&p->v[i]);
}

/* The periodicity of (y, x) for the shifted attention's mask; NULL: the
 * unmasked op (sg_ag_window_attention). */
static const int *g_per = NULL;

static sg_status forward(sg_tape_t t, prob *p, int64_t win, sg_var **loss,
                         sg_var **y) {
  sg_status st = SG_OK;
  sg_var *r[3] = {NULL, NULL, NULL}, *a = NULL, *b = NULL, *V = p->v;
  const int64_t s[2] = {win / 2, win / 2}, back[2] = {-win / 2, -win / 2};
  for (int i = 0; i < 3; ++i) SG_TRY(sg_ag_roll(t, &V[i], s, &r[i]));
  if (g_per)
    SG_TRY(sg_ag_window_attention_masked(t, HEADS, win, s, g_per, r[0], r[1],
                                         r[2], &V[4], &a));
  else
    SG_TRY(sg_ag_window_attention(t, HEADS, win, r[0], r[1], r[2], &V[4], &a));
  SG_TRY(sg_ag_roll(t, a, back, &a));
  SG_TRY(sg_ag_window_attention(t, HEADS, win, &V[0], &V[1], &V[2], &V[5], &b));
  SG_TRY(sg_ag_binary(t, SG_BINARY_ADD, a, b, &a));
  if (y) *y = a;
  SG_TRY(sg_ag_loss(t, SG_LOSS_MSE, a, &V[3], loss));
fail:
  return st;
}

/* Leaves over the boxes (off, box of the 4-d ones) of the global values. */
static sg_status setup(prob *p, sg_dtype dt, const int64_t *off,
                       const int64_t *box) {
  sg_status st = SG_OK;
  const int64_t z[4] = {0, 0, 0, 0};
  for (int i = 0; i < NV; ++i) {
    const int act = vnd[i] == 4;
    const int64_t *o = act ? off : z, *s = act ? box : vshape[i];
    if (act)
      SG_TRY(sg_var_init(&p->v[i], "x", dt, 4, s, NULL, i != 3));
    else
      SG_TRY(sg_var_init_param(&p->v[i], "bias", dt, 2, s, NULL, NULL));
    sg_test_box_copy(vnd[i], vshape[i], o, s, p->g[i], p->v[i].value.data, dt,
                     0);
  }
fail:
  return st;
}

static double loss_of(sg_tape_t t, prob *p) {
  sg_var *l = NULL;
  int prev = sg_tape_set_grad_enabled(t, 0);
  double v = forward(t, p, WIN, &l, NULL) == SG_OK ? sg_var_item(l) : NAN;
  sg_tape_clear(t);
  sg_tape_set_grad_enabled(t, prev);
  return v;
}

/* central differences on about 40 entries of v (f64) against its gradient */
static int fd_var(sg_tape_t t, prob *p, sg_var *v) {
  double *x = v->value.data, *g = v->grad.data;
  int bad = 0;
  const int64_t n = sg_tensor_numel(&v->value), step = n / 40 + 1;
  for (int64_t i = 0; i < n; i += step) {
    const double e = 1e-6, x0 = x[i];
    x[i] = x0 + e;
    const double lp = loss_of(t, p);
    x[i] = x0 - e;
    const double lm = loss_of(t, p);
    x[i] = x0;
    const double fd = (lp - lm) / (2 * e);
    if (!(fabs(fd - g[i]) <= 1e-8 + 1e-6 * fabs(g[i]))) bad++;
  }
  return bad;
}

static const int64_t zero4[4] = {0, 0, 0, 0};

static void test_fd(void) {
  prob p;
  memset(&p, 0, sizeof p);
  sg_tape_t t = NULL;
  sg_var *l = NULL;
  gen(&p);
  SG_REQUIRE_OK(sg_tape_create(&t));
  SG_REQUIRE_OK(setup(&p, SG_DTYPE_F64, zero4, vshape[0]));
  SG_REQUIRE_OK(forward(t, &p, WIN, &l, NULL));
  SG_CHECK(isfinite(sg_var_item(l)), "loss finite");
  SG_REQUIRE_OK(sg_tape_backward(t, l));
  static const char *nm[NV] = {"q", "k", "v", "", "bias (shifted)", "bias"};
  for (int i = 0; i < NV; ++i)
    if (i != 3)
      SG_CHECK(fd_var(t, &p, &p.v[i]) == 0,
               "d%s differs from finite differences", nm[i]);
done:
  sg_tape_destroy(&t);
  release(&p);
  gen_free(&p);
}

/* f32 against f64: loss and gradients at relative 1e-4 of their scale */
static void test_f32(void) {
  prob p[2];
  memset(p, 0, sizeof p);
  sg_tape_t t = NULL;
  double l[2] = {0, 0};
  char msg[256];
  gen(&p[0]);
  memcpy(p[1].g, p[0].g, sizeof p[0].g);
  SG_REQUIRE_OK(sg_tape_create(&t));
  for (int k = 0; k < 2; ++k) {
    sg_var *lv = NULL;
    SG_REQUIRE_OK(
        setup(&p[k], k ? SG_DTYPE_F32 : SG_DTYPE_F64, zero4, vshape[0]));
    SG_REQUIRE_OK(forward(t, &p[k], WIN, &lv, NULL));
    l[k] = sg_var_item(lv);
    SG_REQUIRE_OK(sg_tape_backward(t, lv));
  }
  SG_CHECK(fabs(l[1] - l[0]) <= 1e-5 * fabs(l[0]), "f32 loss %.9g, f64 %.9g",
           l[1], l[0]);
  for (int i = 0; i < NV; ++i)
    if (i != 3)
      SG_CHECK(sg_test_cmp_ref(p[1].v[i].grad.data, SG_DTYPE_F32,
                               p[0].v[i].grad.data,
                               sg_tensor_numel(&p[0].v[i].value), 1e-4, msg,
                               sizeof msg) == 0,
               "f32 gradient %d: %s", i, msg);
done:
  sg_tape_destroy(&t);
  release(&p[0]);
  release(&p[1]);
  gen_free(&p[0]);
}

/* ---- Swin's mask against a direct reference ---------------------------------- */

/* Swin's region label of rolled index i of a dim of n cells, window W,
 * shift s (the paper's slices (0, -W), (-W, -s), (-s, None)); 0 where the
 * dim is periodic. */
static int region(int per, int64_t n, int64_t i) {
  if (per) return 0;
  return i < n - WIN ? 0 : i < n - WIN / 2 ? 1 : 2;
}

/* o = the masked shifted window attention of the global q, k, v (f64),
 * directly: roll by s, every window's softmax over the keys of its own
 * label, the bias by relative offset. */
static void mask_ref(const prob *p, const int *per, double *o) {
  const int64_t n = NB * C * HY * WX, d = C / HEADS, s = WIN / 2;
  double *r[3];
  for (int i = 0; i < 3; ++i) {
    r[i] = malloc(sizeof(double) * (size_t)n);
    for (int64_t b = 0; b < NB * C; ++b)
      for (int64_t y = 0; y < HY; ++y)
        for (int64_t x = 0; x < WX; ++x)
          r[i][(b * HY + y) * WX + x] =
              p->g[i][(b * HY + (y + s) % HY) * WX + (x + s) % WX];
  }
  const double *bias = p->g[4], scale = 1 / sqrt((double)d);
  for (int64_t b = 0; b < NB; ++b)
    for (int64_t h = 0; h < HEADS; ++h)
      for (int64_t yi = 0; yi < HY; ++yi)
        for (int64_t xi = 0; xi < WX; ++xi) {
          const int li = 3 * region(per[0], HY, yi) + region(per[1], WX, xi);
          double sc[WIN * WIN], mx = -INFINITY, sum = 0;
          int64_t kj[WIN * WIN][2], nk = 0;
          const int64_t y0 = yi / WIN * WIN, x0 = xi / WIN * WIN;
          for (int64_t yj = y0; yj < y0 + WIN; ++yj)
            for (int64_t xj = x0; xj < x0 + WIN; ++xj) {
              if (3 * region(per[0], HY, yj) + region(per[1], WX, xj) != li)
                continue;
              double dotp = 0;
              for (int64_t c = 0; c < d; ++c) {
                const int64_t ch = (b * C + h * d + c) * HY;
                dotp += r[0][(ch + yi) * WX + xi] * r[1][(ch + yj) * WX + xj];
              }
              const int64_t dy = yi - yj + WIN - 1, dx = xi - xj + WIN - 1;
              sc[nk] = scale * dotp + bias[h * NBIAS + dy * (2 * WIN - 1) + dx];
              mx = fmax(mx, sc[nk]);
              kj[nk][0] = yj, kj[nk][1] = xj, ++nk;
            }
          for (int64_t j = 0; j < nk; ++j) sum += (sc[j] = exp(sc[j] - mx));
          for (int64_t c = 0; c < d; ++c) {
            const int64_t ch = (b * C + h * d + c) * HY;
            double acc = 0;
            for (int64_t j = 0; j < nk; ++j)
              acc += sc[j] / sum * r[2][(ch + kj[j][0]) * WX + kj[j][1]];
            o[(ch + yi) * WX + xi] = acc;
          }
        }
  for (int i = 0; i < 3; ++i) free(r[i]);
}

static const int mask_modes[3][2] = {{0, 1}, {1, 0}, {0, 0}};

/* One process: the op against mask_ref, its gradients against central
 * differences, and the mask changing the result (it is applied). */
static void test_mask(void) {
  prob p;
  memset(&p, 0, sizeof p);
  sg_tape_t t = NULL;
  const int64_t n = numel(4, vshape[0]), s[2] = {WIN / 2, WIN / 2};
  double *want = malloc(sizeof(double) * (size_t)n);
  char msg[256];
  gen(&p);
  SG_REQUIRE_OK(sg_tape_create(&t));
  for (int m = 0; m < 3; ++m) {
    const int *per = mask_modes[m];
    sg_var *r[3] = {NULL, NULL, NULL}, *o = NULL, *o0 = NULL, *l = NULL;
    SG_REQUIRE_OK(setup(&p, SG_DTYPE_F64, zero4, vshape[0]));
    for (int i = 0; i < 3; ++i) SG_REQUIRE_OK(sg_ag_roll(t, &p.v[i], s, &r[i]));
    SG_REQUIRE_OK(sg_ag_window_attention_masked(t, HEADS, WIN, s, per, r[0],
                                                r[1], r[2], &p.v[4], &o));
    SG_REQUIRE_OK(
        sg_ag_window_attention(t, HEADS, WIN, r[0], r[1], r[2], &p.v[4], &o0));
    mask_ref(&p, per, want);
    SG_CHECK(sg_test_cmp_ref(o->value.data, SG_DTYPE_F64, want, n, 1e-12, msg,
                             sizeof msg) == 0,
             "mask (periodic y %d, x %d) against the direct reference: %s",
             per[0], per[1], msg);
    double diff = 0;
    for (int64_t i = 0; i < n; ++i)
      diff = fmax(diff, fabs(((const double *)o->value.data)[i] -
                             ((const double *)o0->value.data)[i]));
    SG_CHECK(diff > 1e-3, "mask (periodic y %d, x %d) changes nothing (%g)",
             per[0], per[1], diff);
    sg_tape_clear(t);
    release(&p);
    /* the gradients of the whole forward with the mask */
    g_per = per;
    SG_REQUIRE_OK(setup(&p, SG_DTYPE_F64, zero4, vshape[0]));
    SG_REQUIRE_OK(forward(t, &p, WIN, &l, NULL));
    SG_REQUIRE_OK(sg_tape_backward(t, l));
    for (int i = 0; i < NV; ++i)
      if (i != 3)
        SG_CHECK(fd_var(t, &p, &p.v[i]) == 0,
                 "mask (periodic y %d, x %d): gradient %d differs from "
                 "finite differences",
                 per[0], per[1], i);
    g_per = NULL;
    sg_tape_clear(t);
    release(&p);
  }
done:
  g_per = NULL;
  free(want);
  sg_tape_destroy(&t);
  release(&p);
  gen_free(&p);
}

/* ---- sharded against one process ------------------------------------------ */

/* The reference: loss, y and the gradients (global, f64). */
typedef struct ref {
  double loss, *y, *d[NV];
} ref;

static double *dup(const void *src, int64_t n) {
  double *d = malloc(sizeof(double) * (size_t)(n + 1));
  memcpy(d, src, sizeof(double) * (size_t)n);
  return d;
}

static sg_status run_plain(prob *p, ref *r) {
  sg_status st = SG_OK;
  sg_tape_t t = NULL;
  sg_var *l = NULL, *y = NULL;
  SG_TRY(sg_tape_create(&t));
  SG_TRY(setup(p, SG_DTYPE_F64, zero4, vshape[0]));
  SG_TRY(forward(t, p, WIN, &l, &y));
  r->loss = sg_var_item(l);
  r->y = dup(y->value.data, numel(4, vshape[0]));
  SG_TRY(sg_tape_backward(t, l));
  for (int i = 0; i < NV; ++i)
    if (i != 3) r->d[i] = dup(p->v[i].grad.data, numel(vnd[i], vshape[i]));
fail:
  sg_tape_destroy(&t);
  release(p);
  return st;
}

static void ref_free(ref *r) {
  free(r->y);
  for (int i = 0; i < NV; ++i) free(r->d[i]);
}

/* Compare this rank's values (a box of the global g, summed over mask when
 * mask != 0) against the reference. */
static int cmp_box(sg_mesh_t mesh, unsigned mask, int nd, const int64_t *gs,
                   const int64_t *off, const int64_t *box, const void *got,
                   double *g, char *msg, size_t size) {
  const int64_t n = numel(nd, box);
  double *want = malloc(sizeof(double) * (size_t)(n + 1)), *have = dup(got, n);
  sg_group_t grp = NULL;
  if (mask && sg_mesh_group(mesh, mask, &grp) == SG_OK && grp)
    MPI_Allreduce(MPI_IN_PLACE, have, (int)n, MPI_DOUBLE, MPI_SUM,
                  sg_group_comm(grp));
  sg_test_box_copy(nd, gs, off, box, g, want, SG_DTYPE_F64, 0);
  const int bad = sg_test_cmp_ref(have, SG_DTYPE_F64, want, n, 1e-10, msg,
                                  size) != 0;
  free(want), free(have);
  return bad;
}

static void test_sharded(const char *spec, prob *p, const ref *r) {
  sg_mesh_t mesh = NULL;
  sg_tape_t t = NULL;
  sg_var *l = NULL, *y = NULL;
  sg_placement pl[SG_MESH_MAX_DIMS];
  int64_t off[4], box[4];
  unsigned split = 0;
  char msg[256];
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  SG_REQUIRE_OK(sg_tape_create(&t));
  sg_test_nchw_placements(mesh, pl);
  for (int m = 0; m < sg_mesh_ndims(mesh); ++m)
    if (pl[m].kind == SG_PLACEMENT_SHARD) split |= 1u << m;
  SG_REQUIRE_OK(
      sg_shardtensor_box(mesh, 4, vshape[0], pl, sg_mesh_rank(mesh), off, box));
  SG_REQUIRE_OK(setup(p, SG_DTYPE_F64, off, box));
  for (int i = 0; i < 4; ++i)
    SG_REQUIRE_OK(sg_var_set_sharding(&p->v[i], mesh, pl, vshape[i]));
  SG_REQUIRE_OK(forward(t, p, WIN, &l, &y));
  const double lv = sg_var_item(l);
  SG_CHECK(fabs(lv - r->loss) <= 1e-10 * fabs(r->loss),
           "%s: loss %.17g, one process %.17g", spec, lv, r->loss);
  SG_CHECK(cmp_box(mesh, 0, 4, vshape[0], off, box, y->value.data, r->y, msg,
                   sizeof msg) == 0,
           "%s: y: %s", spec, msg);
  SG_REQUIRE_OK(sg_tape_backward(t, l));
  for (int i = 0; i < NV; ++i) {
    if (i == 3) continue;
    const int act = vnd[i] == 4;
    SG_CHECK(cmp_box(mesh, act ? 0 : split, vnd[i], vshape[i],
                     act ? off : zero4, act ? box : vshape[i],
                     p->v[i].grad.data, r->d[i], msg, sizeof msg) == 0,
             "%s: gradient of input %d: %s", spec, i, msg);
  }
done:
  sg_tape_destroy(&t);
  release(p);
  sg_mesh_destroy(&mesh);
}

/* A forward that must fail with SG_ERR_CONFIG on every rank. */
static void expect_config(const char *spec, int64_t win) {
  prob p;
  memset(&p, 0, sizeof p);
  sg_mesh_t mesh = NULL;
  sg_tape_t t = NULL;
  sg_placement pl[SG_MESH_MAX_DIMS];
  int64_t off[4], box[4];
  gen(&p);
  SG_REQUIRE_OK(sg_tape_create(&t));
  memcpy(box, vshape[0], sizeof box);
  memset(off, 0, sizeof off);
  if (spec) { /* NULL: one process, not sharded */
    SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
    sg_test_nchw_placements(mesh, pl);
    SG_REQUIRE_OK(sg_shardtensor_box(mesh, 4, vshape[0], pl, sg_mesh_rank(mesh),
                                     off, box));
  }
  SG_REQUIRE_OK(setup(&p, SG_DTYPE_F64, off, box));
  for (int i = 0; spec && i < 4; ++i)
    SG_REQUIRE_OK(sg_var_set_sharding(&p.v[i], mesh, pl, vshape[i]));
  sg_var *o = NULL;
  SG_CHECK_STATUS(sg_ag_window_attention(t, HEADS, win, &p.v[0], &p.v[1],
                                         &p.v[2], &p.v[4], &o),
                  SG_ERR_CONFIG);
done:
  sg_tape_destroy(&t);
  release(&p);
  gen_free(&p);
  sg_mesh_destroy(&mesh);
}

static void test_meshes(void) {
  static const char *l2[] = {"h=2", "w=2", "dp=2"};
  static const char *l3[] = {"h=3"};
  static const char *l4[] = {"h=2,w=2", "dp=2,h=2"};
  const int np = sg_test_size;
  const char **l = np == 2 ? l2 : np == 3 ? l3 : np == 4 ? l4 : NULL;
  const int nl = np == 2 ? 3 : np == 3 ? 1 : np == 4 ? 2 : 0;
  prob p;
  memset(&p, 0, sizeof p);
  gen(&p);
  /* unmasked (periodic), then Swin's mask on y, x, both */
  for (int m = -1; m < 3; ++m) {
    ref r;
    memset(&r, 0, sizeof r);
    g_per = m < 0 ? NULL : mask_modes[m];
    SG_CHECK_OK(run_plain(&p, &r));
    for (int k = 0; k < nl; ++k) test_sharded(l[k], &p, &r);
    ref_free(&r);
  }
  g_per = NULL;
  gen_free(&p);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  if (sg_test_size == 1) {
    test_fd();
    test_f32();
    test_mask();
    expect_config(NULL, 9); /* wider than the 8 token columns */
  } else {
    test_meshes();
    if (sg_test_size == 2) expect_config("w=2", 8); /* 4 columns a rank */
    if (sg_test_size == 4) expect_config("h=4", 4); /* 6 rows a rank */
  }
  return sg_test_finish();
}
