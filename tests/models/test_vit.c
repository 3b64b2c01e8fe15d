/* The vit model of the zoo (models/vit.c).
 *  - one process: the model's gradient (backward through patch embedding,
 *    position field, two pre-LN blocks, un-patchify) against central
 *    differences of the loss along random directions of all parameters
 *    (f32 parameters: a directional check, relative 2e-2);
 *  - the parameter table: the position field is this rank's box of
 *    (width, hp, wp), Shard over the domain dims;
 *  - bad input, refused on every rank with SG_ERR_CONFIG and a message
 *    naming the cause: a grid not divisible by the patch (no padding),
 *    heads not dividing width, a patch larger than the smallest shard
 *    (on 2, 3, 4 ranks), depth out of range, heads not divisible by tp,
 *    the mixture of experts' keys and ep (below);
 *  - tensor parallelism (2, 4 ranks: tp=2, tp=4 with 4 heads, tp=2,h=2):
 *    every parameter's gradient, summed over the dims that split the data
 *    (none for tp alone; h) but never over tp, equals the one-process
 *    gradient on this rank's box (the Shard-over-tp linears: their rows or
 *    columns; the replicated LayerNorms, row-parallel biases, position
 *    field, embedding and head: the whole array), and the replicated ones
 *    are the same bits on every tp rank; the same with tp_sequence
 *    (Megatron-SP: tokens split over tp outside the TP regions) on tp=2,
 *    tp=3 (16 tokens: 6+5+5, width 12, 3 heads), tp=4 and tp=2,h=2, where
 *    the LayerNorms' and row biases' gradients are summed over tp by the
 *    model;
 *  - tp_sequence with fewer tokens than tp ranks: refused;
 *  - the sp dim (sp=2, sp=3, sp=2,h=2, tp=2,sp=2, and tp=2,sp=2 with
 *    tp_sequence: the tp slices of each sp piece): every gradient, summed
 *    over sp (and h), equals the one-process one; fewer tokens than sp
 *    ranks refused;
 *  - mixture of experts (4 experts, top-2, capacity 1) with the tokens
 *    over h=2, w=3, h=2,w=2, sp=2 and tp=2,sp=2 with tp_sequence (the
 *    experts on the tokens gathered over sp): every gradient, summed over h, w, equals the
 *    one-process one; with the experts' hidden width over tp on tp=2
 *    (plain and tp_sequence) the same check as tp's; topk > experts, ep without experts and experts not divisible
 *    by ep refused on every rank;
 *  - the swin with experts (h=2) and with experts and tp_sequence (tp=2,
 *    tp=2,h=2: the shifted windows cross the h boundary): the same
 *    gradient check;
 *  - the swin (patch 2, window 4): the same gradient check (the rolls and
 *    window attention in the chain); windows larger than the token grid,
 *    not dividing it, or not tiling every rank's block (h=2, h=3, h=4)
 *    refused on every rank with SG_ERR_CONFIG. */
#include "sg_comm.h"
#include "sg_mesh.h"
#include "sg_model.h"
#include "sg_test.h"
#include "sg_test_tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static sg_model_config tiny(void) {
  sg_model_config c = sg_model_defaults(SG_MODEL_VIT);
  c.cin = 2, c.cout = 1, c.width = 8, c.heads = 2, c.depth = 2, c.patch = 4;
  return c;
}

typedef struct run {
  sg_model_t m;
  sg_tape_t t;
  sg_var x, target;
  float *p, *g;
  int64_t np;
} run;

static double loss_of(run *r, int grad) {
  sg_var *y = NULL, *l = NULL;
  int prev = sg_tape_set_grad_enabled(r->t, grad);
  double v = NAN;
  if (sg_model_forward(r->m, r->t, &r->x, &y) == SG_OK &&
      sg_model_mark(r->m, &r->target) == SG_OK &&
      sg_ag_loss(r->t, SG_LOSS_MSE, y, &r->target, &l) == SG_OK) {
    v = sg_var_item(l);
    if (grad && sg_tape_backward(r->t, l) != SG_OK) v = NAN;
  }
  sg_tape_clear(r->t);
  sg_tape_set_grad_enabled(r->t, prev);
  return v;
}

/* The Swin of the same size: patch 2 (8 x 8 tokens), window 4, the second
 * block shifted by 2 (periodic). */
static sg_model_config tiny_swin(void) {
  sg_model_config c = tiny();
  c.kind = SG_MODEL_SWIN, c.patch = 2, c.window = 4;
  return c;
}

static void test_gradient(const sg_model_config c) {
  run r;
  memset(&r, 0, sizeof r);
  sg_mesh_t mesh = NULL;
  const int64_t xs[4] = {2, 2, 16, 16}, ts[4] = {2, 1, 16, 16};
  float *dir = NULL, *p0 = NULL;
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_SELF, "h=1", &mesh));
  SG_REQUIRE_OK(sg_model_create(mesh, &c, 16, 16, 2, &r.m));
  SG_REQUIRE_OK(sg_tape_create(&r.t));
  r.np = sg_model_param_count(r.m);
  r.p = calloc((size_t)r.np, sizeof(float));
  r.g = calloc((size_t)r.np, sizeof(float));
  dir = calloc((size_t)r.np, sizeof(float));
  p0 = calloc((size_t)r.np, sizeof(float));
  SG_CHECK(r.p && r.g && dir && p0, "memory");
  if (!r.p || !r.g || !dir || !p0) goto done;
  SG_REQUIRE_OK(sg_model_bind(r.m, r.p, r.g));
  SG_REQUIRE_OK(sg_model_init(r.m, 7));
  SG_REQUIRE_OK(sg_var_init(&r.x, "x", SG_DTYPE_F32, 4, xs, NULL, 0));
  SG_REQUIRE_OK(sg_var_init(&r.target, "t", SG_DTYPE_F32, 4, ts, NULL, 0));
  for (int64_t i = 0; i < 2 * 2 * 256; ++i)
    ((float *)r.x.value.data)[i] = (float)sg_test_rand(3, i, -1, 1);
  for (int64_t i = 0; i < 2 * 256; ++i)
    ((float *)r.target.value.data)[i] = (float)sg_test_rand(4, i, -1, 1);
  const double l0 = loss_of(&r, 1);
  SG_CHECK(isfinite(l0) && l0 > 0, "loss %g", l0);
  memcpy(p0, r.p, (size_t)r.np * sizeof(float));
  for (int k = 0; k < 3; ++k) {
    double gd = 0;
    for (int64_t i = 0; i < r.np; ++i) {
      dir[i] = (float)sg_test_rand(100 + (uint64_t)k, i, -1, 1);
      gd += (double)dir[i] * r.g[i];
    }
    const double e = 1e-3; /* |e dir| ~ 0.03: small curvature error */
    for (int64_t i = 0; i < r.np; ++i) r.p[i] = p0[i] + (float)e * dir[i];
    const double lp = loss_of(&r, 0);
    for (int64_t i = 0; i < r.np; ++i) r.p[i] = p0[i] - (float)e * dir[i];
    const double lm = loss_of(&r, 0);
    memcpy(r.p, p0, (size_t)r.np * sizeof(float));
    const double fd = (lp - lm) / (2 * e);
    SG_CHECK(fabs(fd - gd) <= 2e-2 * fabs(gd) + 1e-3,
             "direction %d: finite differences %.6g, gradient %.6g", k, fd, gd);
  }
done:
  free(dir), free(p0), free(r.p), free(r.g);
  sg_var_release(&r.x);
  sg_var_release(&r.target);
  sg_tape_destroy(&r.t);
  sg_model_destroy(&r.m);
  sg_mesh_destroy(&mesh);
}

/* the position field's entry of the parameter table on mesh spec */
static void test_param_table(const char *spec) {
  sg_mesh_t mesh = NULL;
  sg_model_t m = NULL;
  const sg_model_config c = tiny();
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  SG_REQUIRE_OK(sg_model_create(mesh, &c, 16, 24, 1, &m));
  sg_var **vars = NULL;
  int n = sg_model_params(m, &vars), found = 0;
  int64_t total = 0;
  for (int i = 0; i < n; ++i) {
    sg_param_info pi;
    SG_REQUIRE_OK(sg_model_param_info(m, i, &pi));
    if (strcmp(pi.name, "pos")) continue;
    found = 1;
    total = pi.count[1] * pi.count[2];
    SG_CHECK(pi.global_shape[0] == 8 && pi.global_shape[1] == 4 &&
                 pi.global_shape[2] == 6,
             "%s: pos is (8, 4, 6), got (%lld, %lld, %lld)", spec,
             (long long)pi.global_shape[0], (long long)pi.global_shape[1],
             (long long)pi.global_shape[2]);
    SG_CHECK(pi.shard_dims != 0, "%s: pos Shard over the domain dims (mask %u)",
             spec, pi.shard_dims);
  }
  SG_CHECK(found, "%s: a 'pos' parameter", spec);
  /* the boxes tile the 4 x 6 patch grid */
  MPI_Allreduce(MPI_IN_PLACE, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  SG_CHECK(total == 24, "%s: the position boxes cover %lld of 24 patches", spec,
           (long long)total);
done:
  sg_model_destroy(&m);
  sg_mesh_destroy(&mesh);
}

/* create must fail with SG_ERR_CONFIG on every rank, naming `what` */
static void expect_refused(const char *spec, sg_model_config c, int64_t ny,
                           int64_t nx, const char *what) {
  sg_mesh_t mesh = NULL;
  sg_model_t m = NULL;
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  sg_status st = sg_model_create(mesh, &c, ny, nx, 1, &m);
  int ok = st == SG_ERR_CONFIG && strstr(sg_last_error(), what) != NULL;
  SG_CHECK(ok, "%s, %lldx%lld: expected SG_ERR_CONFIG naming '%s', got %s: %s",
           spec, (long long)ny, (long long)nx, what, sg_status_name(st),
           sg_last_error());
  int all = ok;
  MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  SG_CHECK(all, "%s: refused on every rank", spec);
done:
  sg_model_destroy(&m);
  sg_mesh_destroy(&mesh);
}

static void test_bad_input(void) {
  const char *spec = sg_test_size == 1   ? "h=1"
                     : sg_test_size == 2 ? "h=2"
                     : sg_test_size == 3 ? "h=3"
                                         : "h=4";
  sg_model_config c = tiny();
  expect_refused(spec, c, 18, 16, "not divisible by patch 4");
  c.heads = 3;
  expect_refused(spec, c, 16, 16, "heads (3) must divide width (8)");
  c = tiny();
  c.depth = -1;
  expect_refused(spec, c, 16, 16, "depth");
  if (sg_test_size > 1) {
    c = tiny();
    c.patch = 8; /* 16 rows over 2: 8 (fits); over 3, 4: 5, 4 (too thin) */
    if (sg_test_size > 2)
      expect_refused(spec, c, 16, 16, "larger than the smallest shard");
    c.patch = 4; /* 4 (np - 1) rows over np ranks: shards thinner than 4 */
    expect_refused(spec, c, 4 * (sg_test_size - 1), 16,
                   "larger than the smallest shard");
  }
  /* mixture of experts: topk > E; and on ep = the ranks: no experts,
   * E % ep */
  c = tiny();
  c.moe_experts = 1, c.moe_topk = 2;
  expect_refused(spec, c, 16, 16, "topk must be 1 or 2 and at most");
  if (sg_test_size > 1) {
    char ep[16];
    snprintf(ep, sizeof ep, "ep=%d", sg_test_size);
    c = tiny();
    expect_refused(ep, c, 16, 16, "splits the experts: set moe_experts");
    c.moe_experts = 5;
    expect_refused(ep, c, 16, 16, "moe_experts (5) must be divisible by ep");
  }
}

/* Global linear index of local element l of the box (start, count) of an
 * array of shape g (row-major). */
static int64_t box_index(const sg_param_info *pi, int64_t l) {
  int64_t gi = 0, stride = 1;
  for (int d = pi->ndim - 1; d >= 0; --d) {
    gi += (pi->start[d] + l % pi->count[d]) * stride;
    l /= pi->count[d];
    stride *= pi->global_shape[d];
  }
  return gi;
}

/* The model on mesh (NULL: one process, MPI_COMM_SELF), config c, seed 7,
 * the 16x16 input of global index: loss and backward; r keeps the
 * gradients. */
static sg_status grad_run(sg_mesh_t mesh, const sg_model_config *c, run *r) {
  sg_status st = SG_OK;
  int64_t y0, ny, x0, nx;
  SG_TRY(sg_model_create(mesh, c, 16, 16, 2, &r->m));
  SG_TRY(sg_tape_create(&r->t));
  r->np = sg_model_param_count(r->m);
  r->p = calloc((size_t)r->np + 1, sizeof(float));
  r->g = calloc((size_t)r->np + 1, sizeof(float));
  if (!r->p || !r->g) SG_RAISE(SG_ERR_ALLOC, "test: out of memory");
  SG_TRY(sg_model_bind(r->m, r->p, r->g));
  SG_TRY(sg_model_init(r->m, 7));
  sg_model_box(r->m, &y0, &ny, &x0, &nx);
  const int64_t xs[4] = {2, 2, ny, nx}, ts[4] = {2, 1, ny, nx};
  SG_TRY(sg_var_init(&r->x, "x", SG_DTYPE_F32, 4, xs, NULL, 0));
  SG_TRY(sg_var_init(&r->target, "t", SG_DTYPE_F32, 4, ts, NULL, 0));
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t k = 0; k < 2; ++k)
      for (int64_t i = 0; i < ny * nx; ++i) {
        const int64_t gy = y0 + i / nx, gx = x0 + i % nx,
                      gc = (n * 2 + k) * 256 + gy * 16 + gx;
        ((float *)r->x.value.data)[(n * 2 + k) * ny * nx + i] = (float)
            sg_test_rand(3, gc, -1, 1);
        if (k == 0)
          ((float *)r->target.value.data)[n * ny * nx + i] = (float)
              sg_test_rand(4, n * 256 + gy * 16 + gx, -1, 1);
      }
  if (!isfinite(loss_of(r, 1)))
    SG_RAISE(SG_ERR_INTERNAL, "test: the loss is not finite");
fail:
  return st;
}

static void run_free(run *r) {
  free(r->p), free(r->g);
  sg_var_release(&r->x);
  sg_var_release(&r->target);
  sg_tape_destroy(&r->t);
  sg_model_destroy(&r->m);
}

/* The model c (the vit or the swin); seq: tp_sequence (Megatron-SP); moe:
 * 4 experts, top-2, capacity 1 in both blocks (tokens split over h, w: the
 * capacity ranks them in global order; with tp the experts' hidden width
 * split over it) */
static void test_grads(sg_model_config c, const char *spec, int64_t heads,
                       int seq, int moe) {
  sg_mesh_t self = NULL, mesh = NULL;
  run ref, got;
  memset(&ref, 0, sizeof ref), memset(&got, 0, sizeof got);
  c.heads = heads;
  if (heads == 3) c.width = 12; /* tp = 3 */
  c.tp_sequence = seq;
  if (moe) c.moe_experts = 4, c.moe_topk = 2, c.moe_capacity = 1.0;
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_SELF, "h=1", &self));
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  sg_model_config c1 = c;
  c1.tp_sequence = 0;
  SG_REQUIRE_OK(grad_run(self, &c1, &ref));
  SG_REQUIRE_OK(grad_run(mesh, &c, &got));
  unsigned data = 0, tp = 0; /* the dims that split the data; tp */
  for (int k = 0; k < sg_mesh_ndims(mesh); ++k) {
    const char *nm = sg_mesh_dim_name(mesh, k);
    if (!strcmp(nm, "h") || !strcmp(nm, "w") || !strcmp(nm, "sp"))
      data |= 1u << k; /* sp: every gradient Partial over it */
    if (!strcmp(nm, "tp")) tp |= 1u << k;
  }
  sg_var **vars = NULL;
  const int n = sg_model_params(got.m, &vars);
  for (int i = 0; i < n; ++i) {
    sg_param_info pi, pr;
    SG_REQUIRE_OK(sg_model_param_info(got.m, i, &pi));
    SG_REQUIRE_OK(sg_model_param_info(ref.m, i, &pr));
    float *g = got.g + pi.offset;
    sg_group_t dg = NULL, tg = NULL;
    SG_REQUIRE_OK(sg_mesh_group(mesh, data & ~pi.shard_dims, &dg));
    SG_REQUIRE_OK(
        sg_allreduce_det(dg, g, g, pi.numel, SG_DTYPE_F32, SG_REDUCE_SUM));
    double mx = 0;
    for (int64_t l = 0; l < pr.numel; ++l)
      mx = fmax(mx, fabs(ref.g[pr.offset + l]));
    int64_t bad = 0, first = -1;
    for (int64_t l = 0; l < pi.numel; ++l) {
      const double want = ref.g[pr.offset + box_index(&pi, l)];
      if (!(fabs(g[l] - want) <= 1e-4 * mx + 1e-7))
        bad += first < 0 ? (first = l, 1) : 1;
    }
    SG_CHECK(bad == 0,
             "%s %s%s%s: gradient of %s: %lld of %lld differ (first %lld)",
             c.kind == SG_MODEL_SWIN ? "swin" : "vit", spec,
             seq ? " tp_sequence" : "", moe ? " moe" : "", pi.name,
             (long long)bad, (long long)pi.numel, (long long)first);
    if (pi.shard_dims & tp) continue;
    /* replicated over tp: the same bits on every tp rank */
    SG_REQUIRE_OK(sg_mesh_group(mesh, tp, &tg));
    float *all = calloc((size_t)(pi.numel * sg_group_size(tg)) + 1,
                        sizeof *all);
    SG_REQUIRE_OK(sg_allgather(tg, g, pi.numel, all, SG_DTYPE_F32));
    int same = 1;
    for (int r = 1; r < sg_group_size(tg); ++r)
      same &= !memcmp(all, all + r * pi.numel, (size_t)pi.numel * sizeof *all);
    free(all);
    SG_CHECK(same, "%s: gradient of %s (replicated over tp) differs over tp",
             spec, pi.name);
  }
done:
  run_free(&ref);
  run_free(&got);
  sg_mesh_destroy(&mesh);
  sg_mesh_destroy(&self);
}

static void test_tp_gradients(const char *spec, int64_t heads, int seq,
                              int moe) {
  test_grads(tiny(), spec, heads, seq, moe);
}

/* The Swin's windows: larger than the token grid, not dividing it, or
 * blocks of a split that are not whole windows (8 token rows over h=2 with
 * window 8: 4, 4; over h=3 with window 2: 3, 3, 2; over h=4 with window 4:
 * 2 each). */
static void test_swin_bad_input(void) {
  sg_model_config c = tiny_swin();
  if (sg_test_size == 1) {
    c.window = 16;
    expect_refused("h=1", c, 16, 16,
                   "swin: window 16 is larger than the 8x8 token grid");
    c.window = 3;
    expect_refused("h=1", c, 16, 16,
                   "swin: the 8 token rows are not a multiple of window 3");
    return;
  }
  static const char *const spec[5] = {"", "", "h=2", "h=3", "h=4"};
  static const char *const what[5] = {
      "", "", "split of 8 token rows gives blocks of 4 and 4",
      "split of 8 token rows gives blocks of 3 and 2",
      "split of 8 token rows gives blocks of 2 and 2"};
  const int64_t win[5] = {0, 0, 8, 2, 4};
  c.window = win[sg_test_size];
  expect_refused(spec[sg_test_size], c, 16, 16, what[sg_test_size]);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  if (sg_test_size == 1) {
    test_gradient(tiny());
    test_gradient(tiny_swin());
  }
  test_swin_bad_input();
  test_param_table(sg_test_size == 1   ? "h=1"
                   : sg_test_size == 2 ? "h=2"
                   : sg_test_size == 3 ? "h=3"
                                       : "h=2,w=2");
  test_bad_input();
  for (int seq = 0; seq < 2; ++seq) { /* plain TP, then Megatron-SP */
    if (sg_test_size == 2) test_tp_gradients("tp=2", 2, seq, 0);
    if (sg_test_size == 3 && seq) test_tp_gradients("tp=3", 3, seq, 0);
    if (sg_test_size == 4) {
      test_tp_gradients("tp=4", 4, seq, 0);
      test_tp_gradients("tp=2,h=2", 2, seq, 0);
    }
  }
  /* the sp dim: the tokens split over sp (16 over 3: 6+5+5; 4 per rank
   * over sp=2 x h=2, with tp=2) */
  if (sg_test_size == 2) test_tp_gradients("sp=2", 2, 0, 0);
  if (sg_test_size == 3) test_tp_gradients("sp=3", 2, 0, 0);
  if (sg_test_size == 4) {
    test_tp_gradients("sp=2,h=2", 2, 0, 0);
    test_tp_gradients("tp=2,sp=2", 2, 0, 0);
    test_tp_gradients("tp=2,sp=2", 2, 1, 0); /* tp_sequence: 8 tokens per
                                                 sp piece, 4 per tp slice */
    sg_model_config c = tiny();
    expect_refused("sp=4", c, 4, 4, "at least one token per sp rank");
  }
  if (sg_test_size == 2) test_tp_gradients("h=2", 2, 0, 1);
  /* experts with the sp dim: on the whole tokens gathered over sp, their
   * parameters by their sp share; with tp_sequence too (ep splits the
   * samples: sg-train, by hand) */
  if (sg_test_size == 2) test_tp_gradients("sp=2", 2, 0, 1);
  if (sg_test_size == 4) test_tp_gradients("tp=2,sp=2", 2, 1, 1);
  if (sg_test_size == 3) test_tp_gradients("w=3", 2, 0, 1);
  /* the experts' hidden width over tp (with tp_sequence: the experts on
   * the gathered tokens); the swin with experts and with tp_sequence */
  if (sg_test_size == 2) {
    test_tp_gradients("tp=2", 2, 0, 1);
    test_tp_gradients("tp=2", 2, 1, 1);
    test_grads(tiny_swin(), "h=2", 2, 0, 1);
    test_grads(tiny_swin(), "tp=2", 2, 1, 1);
  }
  if (sg_test_size == 4) test_grads(tiny_swin(), "tp=2,h=2", 2, 1, 1);
  if (sg_test_size == 4) {
    test_tp_gradients("h=2,w=2", 2, 0, 1);
    sg_model_config c = tiny(); /* 2 heads over 4 tp ranks */
    expect_refused("tp=4", c, 16, 16, "heads (2) must be divisible by tp (4)");
    c.tp_sequence = 1;
    c.heads = 4;
    expect_refused("tp=4", c, 4, 4, "at least one token per tp rank");
  }
  return sg_test_finish();
}
