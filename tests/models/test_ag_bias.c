/* sg_ag_bias on a channel-split input (issue 20, defect 4): x (2, 5, 3, 4)
 * with its 5 channels Shard(1) over a mesh dim "c" of every rank count
 * (uneven: 3+2, 2+2+1, 2+1+1+1), and at 4 ranks over "h=2,c=2" (channels
 * and rows split). y = x + b[c] must add the GLOBAL channel's bias: forward
 * y, the loss dL/dx and dL/db (partial sums summed over the ranks)
 * (L = sum(y * t)) equal the one-process run of the same tape code, in f64 and f32. */
#include "sg_autograd.h"
#include "sg_mesh.h"
#include "sg_test.h"
#include "sg_test_tensor.h"

#include <stdlib.h>
#include <string.h>

enum { ND = 4 };
static const int64_t G[ND] = {2, 5, 3, 4};

/* global index of local element l of the box (off, shape) */
static int64_t gidx(const int64_t *off, const int64_t *shape, int64_t l) {
  int64_t g = 0, stride = 1;
  for (int d = ND - 1; d >= 0; --d) {
    g += (off[d] + l % shape[d]) * stride;
    l /= shape[d];
    stride *= G[d];
  }
  return g;
}
static double xval(int64_t g) { return 0.1 * (double)(g % 17) - 0.7; }
static double tval(int64_t g) { return 0.05 * (double)(g % 11); }
static double bval(int64_t c) {
  return 1.0 + 10.0 * (double)c;
} /* distinct per channel */

/* The loss: L = sum(y * t), a test op whose output is this rank's partial
 * sum (the framework sums it over the ranks splitting y; the tape's losses
 * do not accept channel splits). dL/dy = t. */
static sg_status dot_fwd(sg_node *node) {
  sg_status st = SG_OK;
  const sg_tensor *y = &node->in[0]->value, *t = &node->in[1]->value;
  int64_t one[1] = {1};
  SG_TRY(sg_node_alloc_out(node, 0, 1, one));
  double s = 0;
  for (int64_t i = 0; i < sg_tensor_numel(y); ++i)
    s += sg_test_get(y->data, y->dtype, i) * sg_test_get(t->data, t->dtype, i);
  sg_test_set(node->out[0]->value.data, y->dtype, 0, s);
fail:
  return st;
}
static sg_status dot_bwd(sg_node *node) {
  const sg_tensor *y = &node->in[0]->value, *t = &node->in[1]->value;
  const double g = sg_test_get(node->out[0]->grad.data, y->dtype, 0);
  for (int64_t i = 0; i < sg_tensor_numel(y); ++i) {
    if (node->gin[0])
      sg_test_set(node->gin[0], y->dtype, i,
                  g * sg_test_get(t->data, t->dtype, i));
    if (node->gin[1])
      sg_test_set(node->gin[1], y->dtype, i,
                  g * sg_test_get(y->data, y->dtype, i));
  }
  return SG_OK;
}
static const sg_op_def dot_op = {.name = "test_dot",
                                 .slots = {SG_SLOT_ACT, SG_SLOT_ACT},
                                 .forward = dot_fwd,
                                 .backward = dot_bwd,
                                 .rule = {.windowed_input = -1,
                                          .accepts = SG_ACCEPT_ALL,
                                          .out = SG_OUT_PARTIAL,
                                          .writes_gin = 3u}};

/* y = bias(x, b); loss = sum(y * t); backward. Fills y (local), loss, dx
 * (local), db (this rank's partial). */
static sg_status run(sg_dtype dt, sg_mesh_t mesh, const sg_placement *pl,
                     double *y, double *loss, double *dx, double *db) {
  sg_status st = SG_OK;
  sg_tape_t tape = NULL;
  sg_var x, t, b, *yv = NULL, *lv = NULL;
  memset(&x, 0, sizeof x), memset(&t, 0, sizeof t), memset(&b, 0, sizeof b);
  void *xb = NULL, *tb = NULL;
  int64_t off[ND] = {0}, shape[ND];
  memcpy(shape, G, sizeof shape);
  if (mesh)
    SG_TRY(sg_shardtensor_box(mesh, ND, G, pl, sg_mesh_rank(mesh), off, shape));
  const int64_t n = sg_test_numel(ND, shape);
  const size_t es = dt == SG_DTYPE_F32 ? 4 : 8;
  xb = calloc((size_t)n + 1, es), tb = calloc((size_t)n + 1, es);
  if (!xb || !tb) SG_RAISE(SG_ERR_ALLOC, "test: out of memory");
  for (int64_t l = 0; l < n; ++l) {
    sg_test_set(xb, dt, l, xval(gidx(off, shape, l)));
    sg_test_set(tb, dt, l, tval(gidx(off, shape, l)));
  }
  int64_t bs[1] = {G[1]};
  SG_TRY(sg_var_init(&x, "x", dt, ND, shape, xb, 1));
  SG_TRY(sg_var_init(&t, "t", dt, ND, shape, tb, 0));
  SG_TRY(sg_var_init_param(&b, "b", dt, 1, bs, NULL, NULL));
  for (int64_t c = 0; c < G[1]; ++c) sg_test_set(b.value.data, dt, c, bval(c));
  if (mesh) {
    SG_TRY(sg_var_set_sharding(&x, mesh, pl, G));
    SG_TRY(sg_var_set_sharding(&t, mesh, pl, G));
  }
  SG_TRY(sg_tape_create(&tape));
  SG_TRY(sg_ag_bias(tape, &x, &b, &yv));
  for (int64_t l = 0; l < n; ++l) y[l] = sg_test_get(yv->value.data, dt, l);
  sg_var *in2[2] = {yv, &t};
  SG_TRY(sg_tape_apply(tape, &dot_op, 2, in2, 1, NULL, NULL, 0, &lv));
  *loss = sg_var_item(lv);
  SG_TRY(sg_tape_backward(tape, lv));
  for (int64_t l = 0; l < n; ++l)
    dx[l] = x.grad.data ? sg_test_get(x.grad.data, dt, l) : 0.0;
  for (int64_t c = 0; c < G[1]; ++c) db[c] = sg_test_get(b.grad.data, dt, c);
fail:
  sg_tape_destroy(&tape);
  sg_var_release(&x);
  sg_var_release(&t);
  sg_var_release(&b);
  free(xb);
  free(tb);
  return st;
}

static void check(sg_dtype dt, const char *spec, const char *const *dims) {
  sg_mesh_t mesh = NULL;
  const int64_t ng = sg_test_numel(ND, G);
  double *ry = calloc((size_t)ng, sizeof *ry),
         *rdx = calloc((size_t)ng, sizeof *rdx);
  double *y = calloc((size_t)ng, sizeof *y),
         *dx = calloc((size_t)ng, sizeof *dx);
  double rdb[5], db[5], rloss = 0, loss = 0;
  const double rel = dt == SG_DTYPE_F32 ? 1e-5 : 1e-12;
  SG_REQUIRE_OK(run(dt, NULL, NULL, ry, &rloss, rdx, rdb));
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  sg_placement pl[SG_MESH_MAX_DIMS];
  for (int m = 0; m < sg_mesh_ndims(mesh); ++m)
    pl[m] = !strcmp(dims[m], "c")   ? sg_shard(1)
            : !strcmp(dims[m], "h") ? sg_shard(2)
                                    : sg_replicate();
  SG_REQUIRE_OK(run(dt, mesh, pl, y, &loss, dx, db));
  int64_t off[ND], shape[ND];
  SG_REQUIRE_OK(
      sg_shardtensor_box(mesh, ND, G, pl, sg_mesh_rank(mesh), off, shape));
  const int64_t n = sg_test_numel(ND, shape);
  double *wy = calloc((size_t)n + 1, sizeof *wy),
         *wdx = calloc((size_t)n + 1, sizeof *wdx);
  for (int64_t l = 0; l < n; ++l) {
    wy[l] = ry[gidx(off, shape, l)];
    wdx[l] = rdx[gidx(off, shape, l)];
  }
  char what[96];
  snprintf(what, sizeof what, "%s y on %s", sg_dtype_name(dt), spec);
  SG_CHECK(sg_test_cmp_f64(what, y, wy, n, rel, 1e-6) == 0, "%s", what);
  snprintf(what, sizeof what, "%s dx on %s", sg_dtype_name(dt), spec);
  SG_CHECK(sg_test_cmp_f64(what, dx, wdx, n, rel, 1e-6) == 0, "%s", what);
  snprintf(what, sizeof what, "%s loss on %s", sg_dtype_name(dt), spec);
  SG_CHECK(sg_test_cmp_f64(what, &loss, &rloss, 1, rel, 0) == 0, "%s", what);
  MPI_Allreduce(MPI_IN_PLACE, db, (int)G[1], MPI_DOUBLE, MPI_SUM,
                MPI_COMM_WORLD);
  snprintf(what, sizeof what, "%s db (summed) on %s", sg_dtype_name(dt), spec);
  SG_CHECK(sg_test_cmp_f64(what, db, rdb, G[1], rel, 1e-6) == 0, "%s", what);
  free(wy);
  free(wdx);
done:
  sg_mesh_destroy(&mesh);
  free(ry), free(rdx), free(y), free(dx);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  char spec[32];
  snprintf(spec, sizeof spec, "c=%d", sg_test_size);
  static const char *const c_only[1] = {"c"}, *const h_c[2] = {"h", "c"};
  for (int k = 0; k < 2; ++k) {
    sg_dtype dt = k ? SG_DTYPE_F32 : SG_DTYPE_F64;
    check(dt, spec, c_only);
    if (sg_test_size == 4) check(dt, "h=2,c=2", h_c);
  }
  return sg_test_finish();
}
