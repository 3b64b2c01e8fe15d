/* shardgrid — the ShardTensor op API (sg_sharded_ops.h): each op is the
 * tape's op on a one-op tape kept in the context, so the sharded logic
 * (exchange, statistics, reductions) has one implementation: the tape's. */
#include "sg_sharded_ops.h"

#include <stdlib.h>
#include <string.h>

#include "sg_autograd.h"
#include "sg_comm.h"
#include "sg_device.h"

enum { CTX_MAX_ACT = 2, CTX_MAX_PAR = 3 };

struct sg_sharded_ctx {
  const char *op;
  sg_mesh_t mesh;
  sg_dtype dtype;
  sg_tape_t tape;
  int nact, npar;
  sg_var act[CTX_MAX_ACT];    /* leaves over the activation inputs' interiors */
  void *act_own[CTX_MAX_ACT]; /* contiguous copies (NULL: the caller's data) */
  sg_var par[CTX_MAX_PAR];    /* parameters over the caller's arrays */
  sg_var *out; /* the op's output on the tape (NULL after backward) */
};

sg_status sg_sharded_ctx_destroy(sg_sharded_ctx_t *ctx) {
  if (!ctx || !*ctx) return SG_OK;
  sg_sharded_ctx_t c = *ctx;
  sg_tape_destroy(&c->tape); /* before the leaves it points to */
  for (int i = 0; i < c->nact; ++i) {
    sg_var_release(&c->act[i]);
    sg_free(sg_device_host(), &c->act_own[i]);
  }
  for (int i = 0; i < c->npar; ++i) sg_var_release(&c->par[i]);
  free(c);
  *ctx = NULL;
  return SG_OK;
}

unsigned sg_sharded_reduce_dims(const sg_shardtensor *x) {
  unsigned batch = 0, space = 0;
  if (!x || !x->mesh ||
      sg_sharded_split_masks(x->mesh, x->ndim, x->placements, &batch, NULL,
                             &space) != SG_OK) {
    sg_clear_error();
    return 0;
  }
  return batch | space;
}

/* ---- the one-op tape ---------------------------------------------------------- */

/* x: created, on a mesh, f32 or f64. Local (the caller's arguments). */
static sg_status check_input(const sg_shardtensor *x, const char *op) {
  sg_status st = SG_OK;
  if (!x || !x->mesh)
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: input is NULL or not created", op);
  if (x->local.dtype != SG_DTYPE_F32 && x->local.dtype != SG_DTYPE_F64)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "%s: f32 or f64, not %s", op,
             sg_dtype_name(x->local.dtype));
fail:
  return st;
}

/* A contiguous view of x's interior: its data when contiguous, else a copy
 * (*own, to free). */
static sg_status interior_contig(const sg_shardtensor *x, void **data,
                                 void **own) {
  sg_status st = SG_OK;
  sg_tensor in = sg_shardtensor_interior(x);
  sg_tensor flat = sg_tensor_wrap(NULL, x->local.dtype, sg_device_host(),
                                  x->ndim, x->local_shape);
  int contig = 1;
  for (int d = 0; d < x->ndim; ++d)
    contig &= x->local_shape[d] <= 1 || in.strides[d] == flat.strides[d];
  *own = NULL;
  *data = in.data;
  const int64_t n = sg_tensor_numel(&flat);
  if (contig || n == 0) goto fail;
  SG_TRY(sg_malloc(sg_device_host(), (size_t)n * sg_dtype_size(x->local.dtype),
                   own));
  flat.data = *own;
  SG_TRY(sg_tensor_copy(&flat, &in));
  *data = *own;
fail:
  return st;
}

/* The context of an op on the activations acts[0..nact) (placed alike: the
 * tape checks): the tape and a sharded leaf per activation. Local steps
 * first, agreed over the mesh, then the collective sharding. */
static sg_status ctx_open(const char *op, int nact,
                          const sg_shardtensor *const *acts,
                          sg_sharded_ctx_t *out) {
  sg_status st = SG_OK;
  sg_sharded_ctx_t c = NULL;
  *out = NULL;
  for (int i = 0; i < nact; ++i) SG_TRY(check_input(acts[i], op));
  const sg_shardtensor *x = acts[0];
  c = calloc(1, sizeof *c);
  st = c ? SG_OK
         : sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "%s: context", op);
  if (st == SG_OK) {
    c->op = op;
    c->mesh = x->mesh;
    c->dtype = x->local.dtype;
    st = sg_tape_create(&c->tape);
  }
  for (int i = 0; i < nact && st == SG_OK; ++i) {
    void *data = NULL;
    st = interior_contig(acts[i], &data, &c->act_own[i]);
    if (st == SG_OK)
      st = sg_var_init(&c->act[i], i ? "b" : "x", acts[i]->local.dtype,
                       acts[i]->ndim, acts[i]->local_shape, data, 1);
    if (st == SG_OK) c->nact = i + 1;
    /* an activation, like the output of an earlier op: backward writes its
     * gradient (the kernel's bits) instead of adding it to a zero-filled
     * leaf gradient (0 + -0 would turn a -0 into +0) */
    if (st == SG_OK) c->act[i].is_leaf = 0;
  }
  st = sg_agree(sg_mesh_comm(x->mesh), st);
  for (int i = 0; i < nact && st == SG_OK; ++i)
    st = sg_var_set_sharding(&c->act[i], acts[i]->mesh, acts[i]->placements,
                             acts[i]->global_shape);
  if (st != SG_OK) goto fail;
  *out = c;
  c = NULL;
fail:
  sg_sharded_ctx_destroy(&c);
  return st;
}

/* Parameter i: a plain variable over the caller's array (shape ndim,
 * shape[]) with a zero-filled gradient of its own (backward points it at
 * the caller's gradient array). Local. */
static sg_status ctx_param(sg_sharded_ctx_t c, const char *name, int ndim,
                           const int64_t *shape, const void *data) {
  sg_status st = SG_OK;
  if (!data)
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: parameter '%s' is NULL", c->op, name);
  if (c->npar == CTX_MAX_PAR)
    SG_RAISE(SG_ERR_INTERNAL, "%s: too many parameters", c->op);
  SG_TRY(sg_var_init_param(&c->par[c->npar], name, c->dtype, ndim, shape,
                           (void *)data, NULL));
  c->npar++;
fail:
  return st;
}

/* A new ShardTensor holding the value of v (a sharded variable of the
 * tape, or the activation gradient `grad`). */
static sg_status var_to_shardtensor(const sg_var *v, const sg_tensor *t,
                                    sg_shardtensor *y) {
  sg_status st = SG_OK;
  SG_TRY(sg_shardtensor_create(y, v->mesh, v->value.dtype, v->value.ndim,
                               v->global_shape, v->placements, NULL));
  sg_tensor in = sg_shardtensor_interior(y);
  if (t->data && sg_tensor_numel(&in) > 0) SG_TRY(sg_tensor_copy(&in, t));
fail:
  return st;
}

/* The end of a forward: y from the op's output (when wanted), agreed over
 * the mesh; on failure the context and y are freed and *ctx is NULL. */
static sg_status forward_end(sg_status st, sg_sharded_ctx_t c,
                             sg_shardtensor *y, sg_sharded_ctx_t *ctx) {
  if (st == SG_OK && y) st = var_to_shardtensor(c->out, &c->out->value, y);
  if (c) st = sg_agree(sg_mesh_comm(c->mesh), st);
  if (st != SG_OK) {
    if (y) sg_shardtensor_destroy(y);
    sg_sharded_ctx_destroy(&c);
  }
  if (ctx)
    *ctx = c;
  else
    sg_sharded_ctx_destroy(&c);
  return st;
}

/* The upstream gradient dy: on the context's mesh, in its dtype, placed and
 * shaped like the output. From global information (every rank finds the
 * same). */
static sg_status grad_check(const sg_sharded_ctx_t c,
                            const sg_shardtensor *dy) {
  sg_status st = SG_OK;
  const sg_var *o = c->out;
  if (!dy || !dy->mesh)
    SG_RAISE(SG_ERR_INVALID_ARG, "%s backward: dy is NULL or not created",
             c->op);
  if (dy->mesh != c->mesh)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "%s backward: dy is on another mesh than the forward", c->op);
  if (dy->local.dtype != c->dtype)
    SG_RAISE(SG_ERR_INVALID_ARG, "%s backward: dy is %s, the forward ran in %s",
             c->op, sg_dtype_name(dy->local.dtype), sg_dtype_name(c->dtype));
  int same = dy->ndim == o->value.ndim;
  for (int d = 0; same && d < dy->ndim; ++d)
    same = dy->global_shape[d] == o->global_shape[d];
  for (int m = 0; same && m < sg_mesh_ndims(c->mesh); ++m)
    same = sg_placement_equal(dy->placements[m], o->placements[m]);
  if (!same)
    SG_RAISE(SG_ERR_SHAPE,
             "%s backward: dy is not shaped and placed like the output", c->op);
fail:
  return st;
}

/* Backward through the one-op tape from the gradient g of its output:
 * parameter i accumulates into pgrad[i] (NULL: not wanted) and reads
 * pval[i] (NULL: the forward's array); dacts[i] (NULL: not wanted) gets the
 * gradient of activation i. Collective; agreed over the mesh. */
static sg_status ctx_backward(sg_sharded_ctx_t c, const sg_tensor *g,
                              void *const *pgrad, const void *const *pval,
                              sg_shardtensor *const *dacts) {
  sg_status st = SG_OK;
  void *own[CTX_MAX_PAR];
  const void *val[CTX_MAX_PAR];
  for (int i = 0; i < c->npar; ++i) {
    own[i] = c->par[i].grad.data;
    val[i] = c->par[i].value.data;
    if (pgrad && pgrad[i]) c->par[i].grad.data = pgrad[i];
    if (pval && pval[i]) c->par[i].value.data = (void *)pval[i];
  }
  /* the wanted input gradients: new ShardTensors (contiguous interiors, no
   * margins) that the tape writes into directly, no copy */
  const sg_tensor none = {0};
  for (int i = 0; i < c->nact && st == SG_OK; ++i) {
    if (!dacts[i]) continue;
    st = var_to_shardtensor(&c->act[i], &none, dacts[i]);
    sg_tensor in = sg_shardtensor_interior(dacts[i]);
    if (st == SG_OK && sg_tensor_numel(&in) > 0) {
      c->act[i].grad = c->act[i].value;
      c->act[i].grad.data = in.data;
      c->act[i].grad.owns = 0;
      c->act[i].owns_grad = 0;
    }
  }
  st = sg_agree(sg_mesh_comm(c->mesh),
                st); /* before the backward's collectives */
  sg_var *out = c->out;
  c->out = NULL; /* the tape is emptied: once per context */
  if (st == SG_OK) st = sg_tape_backward_from(c->tape, 1, &out, g);
  for (int i = 0; i < c->npar; ++i) {
    c->par[i].grad.data = own[i];
    c->par[i].value.data = (void *)val[i];
  }
  st = sg_agree(sg_mesh_comm(c->mesh), st);
  for (int i = 0; i < c->nact && st != SG_OK; ++i)
    if (dacts[i]) sg_shardtensor_destroy(dacts[i]);
  return st;
}

/* The backward of an op with a ShardTensor output: dy checked, then
 * ctx_backward. */
static sg_status ctx_backward_dy(sg_sharded_ctx_t c, const char *op,
                                 const sg_shardtensor *dy, void *const *pgrad,
                                 const void *const *pval,
                                 sg_shardtensor *const *dacts) {
  sg_status st = SG_OK;
  void *data = NULL, *own = NULL;
  for (int i = 0; i < c->nact; ++i)
    if (dacts[i]) memset(dacts[i], 0, sizeof *dacts[i]);
  if (!c->out)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "%s backward: the context's backward ran already", op);
  SG_TRY(grad_check(c, dy));
  st = interior_contig(dy, &data, &own);
  st = sg_agree(sg_mesh_comm(c->mesh), st);
  if (st != SG_OK) goto fail;
  sg_tensor g = sg_tensor_wrap(data, c->dtype, sg_device_host(), dy->ndim,
                               dy->local_shape);
  st = ctx_backward(c, &g, pgrad, pval, dacts);
fail:
  sg_free(sg_device_host(), &own);
  return st;
}

/* The context of a backward: kind and state checked. Local. */
static sg_status ctx_check(sg_sharded_ctx_t c, const char *op) {
  if (!c || !c->op || strcmp(c->op, op))
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "%s backward: not a %s context", op, op);
  return SG_OK;
}

/* ---- window ops ----------------------------------------------------------------- */

sg_status sg_sharded_conv_forward(const sg_shardtensor *x, const sg_window *win,
                                  int64_t cout, const void *w, const void *b,
                                  sg_shardtensor *y, sg_sharded_ctx_t *ctx) {
  sg_status st = SG_OK;
  sg_sharded_ctx_t c = NULL;
  if (y) memset(y, 0, sizeof *y);
  if (ctx) *ctx = NULL;
  SG_TRY(ctx_open("conv", 1, &x, &c));
  int64_t ws[SG_TENSOR_MAX_DIMS] = {cout, x->global_shape[1]}, nb[1] = {cout};
  st = win && cout >= 1
           ? SG_OK
           : sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                          "conv: window and cout >= 1 are required");
  for (int d = 0; st == SG_OK && d < x->ndim - 2; ++d)
    ws[2 + d] = sg_window_normal(win[d]).kernel;
  if (st == SG_OK) st = ctx_param(c, "w", x->ndim, ws, w);
  if (st == SG_OK && b) st = ctx_param(c, "b", 1, nb, b);
  st = sg_agree(sg_mesh_comm(c->mesh), st);
  if (st == SG_OK)
    st = sg_ag_conv(c->tape, &c->act[0], &c->par[0], b ? &c->par[1] : NULL, win,
                    &c->out);
fail:
  return forward_end(st, c, y, ctx);
}

sg_status sg_sharded_conv_backward(sg_sharded_ctx_t c, const void *w,
                                   const sg_shardtensor *dy, sg_shardtensor *dx,
                                   void *dw, void *db) {
  sg_status st = SG_OK;
  SG_TRY(ctx_check(c, "conv"));
  void *pg[2] = {dw, db};
  const void *pv[2] = {w, NULL};
  SG_TRY(ctx_backward_dy(c, "conv", dy, pg, pv, &dx));
fail:
  return st;
}

sg_status sg_sharded_pool_forward(sg_pool_kind kind, const sg_shardtensor *x,
                                  const sg_window *win, sg_shardtensor *y,
                                  sg_sharded_ctx_t *ctx) {
  sg_status st = SG_OK;
  sg_sharded_ctx_t c = NULL;
  if (y) memset(y, 0, sizeof *y);
  if (ctx) *ctx = NULL;
  SG_TRY(ctx_open("pool", 1, &x, &c));
  st = sg_ag_pool(c->tape, kind, &c->act[0], win, &c->out);
fail:
  return forward_end(st, c, y, ctx);
}

sg_status sg_sharded_pool_backward(sg_sharded_ctx_t c, const sg_shardtensor *dy,
                                   sg_shardtensor *dx) {
  sg_status st = SG_OK;
  SG_TRY(ctx_check(c, "pool"));
  SG_TRY(ctx_backward_dy(c, "pool", dy, NULL, NULL, &dx));
fail:
  return st;
}

sg_status sg_sharded_upsample_forward(sg_upsample_kind kind,
                                      const sg_shardtensor *x,
                                      const int64_t *scale, sg_shardtensor *y,
                                      sg_sharded_ctx_t *ctx) {
  sg_status st = SG_OK;
  sg_sharded_ctx_t c = NULL;
  if (y) memset(y, 0, sizeof *y);
  if (ctx) *ctx = NULL;
  SG_TRY(ctx_open("upsample", 1, &x, &c));
  st = sg_ag_upsample(c->tape, kind, &c->act[0], scale, &c->out);
fail:
  return forward_end(st, c, y, ctx);
}

sg_status sg_sharded_upsample_backward(sg_sharded_ctx_t c,
                                       const sg_shardtensor *dy,
                                       sg_shardtensor *dx) {
  sg_status st = SG_OK;
  SG_TRY(ctx_check(c, "upsample"));
  SG_TRY(ctx_backward_dy(c, "upsample", dy, NULL, NULL, &dx));
fail:
  return st;
}

sg_status sg_sharded_convt_forward(const sg_shardtensor *x,
                                   const int64_t *kernel, int64_t cout,
                                   const void *w, const void *b,
                                   sg_shardtensor *y, sg_sharded_ctx_t *ctx) {
  sg_status st = SG_OK;
  sg_sharded_ctx_t c = NULL;
  if (y) memset(y, 0, sizeof *y);
  if (ctx) *ctx = NULL;
  SG_TRY(ctx_open("convt", 1, &x, &c));
  int64_t ws[SG_TENSOR_MAX_DIMS] = {x->global_shape[1], cout}, nb[1] = {cout};
  st = kernel && cout >= 1
           ? SG_OK
           : sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                          "convt: kernel and cout >= 1 are required");
  for (int d = 0; st == SG_OK && d < x->ndim - 2; ++d) ws[2 + d] = kernel[d];
  if (st == SG_OK) st = ctx_param(c, "w", x->ndim, ws, w);
  if (st == SG_OK && b) st = ctx_param(c, "b", 1, nb, b);
  st = sg_agree(sg_mesh_comm(c->mesh), st);
  if (st == SG_OK)
    st = sg_ag_convt(c->tape, &c->act[0], &c->par[0], b ? &c->par[1] : NULL,
                     &c->out);
fail:
  return forward_end(st, c, y, ctx);
}

sg_status sg_sharded_convt_backward(sg_sharded_ctx_t c, const void *w,
                                    const sg_shardtensor *dy,
                                    sg_shardtensor *dx, void *dw, void *db) {
  sg_status st = SG_OK;
  SG_TRY(ctx_check(c, "convt"));
  void *pg[2] = {dw, db};
  const void *pv[2] = {w, NULL};
  SG_TRY(ctx_backward_dy(c, "convt", dy, pg, pv, &dx));
fail:
  return st;
}

/* ---- channel-wise linear, bias: forward + backward on one tape -------------------- */

/* linear (w (cout, C), b (cout) or NULL) or bias-add (w NULL, b (C)) of x
 * on a new context. */
static sg_status affine_open(const char *op, const sg_shardtensor *x,
                             int64_t cout, const void *w, const void *b,
                             sg_sharded_ctx_t *pc) {
  sg_status st = SG_OK;
  sg_sharded_ctx_t c = NULL;
  SG_TRY(ctx_open(op, 1, &x, &c));
  const int64_t cin = x->global_shape[1];
  int64_t ws[2] = {cout, cin}, nb[1] = {w ? cout : cin};
  st = !w || cout >= 1 ? SG_OK
                       : sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                                      "%s: cout %lld", op, (long long)cout);
  if (st == SG_OK && w) st = ctx_param(c, "w", 2, ws, w);
  if (st == SG_OK && b) st = ctx_param(c, "b", 1, nb, b);
  st = sg_agree(sg_mesh_comm(c->mesh), st);
  if (st != SG_OK) goto fail;
  if (w)
    st = sg_ag_linear(c->tape, &c->act[0], &c->par[0], b ? &c->par[1] : NULL,
                      &c->out);
  else
    st = sg_ag_bias(c->tape, &c->act[0], &c->par[0], &c->out);
fail:
  if (st != SG_OK) sg_sharded_ctx_destroy(&c);
  *pc = c;
  return st;
}

sg_status sg_sharded_linear_forward(const sg_shardtensor *x, int64_t cout,
                                    const void *w, const void *b,
                                    sg_shardtensor *y) {
  sg_status st = SG_OK;
  sg_sharded_ctx_t c = NULL;
  if (y) memset(y, 0, sizeof *y);
  if (!w) SG_RAISE(SG_ERR_INVALID_ARG, "linear: weight is NULL");
  st = affine_open("linear", x, cout, w, b, &c);
fail:
  return forward_end(st, c, y, NULL);
}

sg_status sg_sharded_linear_backward(const sg_shardtensor *x, const void *w,
                                     const sg_shardtensor *dy,
                                     sg_shardtensor *dx, void *dw, void *db) {
  sg_status st = SG_OK;
  sg_sharded_ctx_t c = NULL;
  if (dx) memset(dx, 0, sizeof *dx);
  if (!w || !dy)
    SG_RAISE(SG_ERR_INVALID_ARG, "linear backward: weight and dy are required");
  /* the bias only when its gradient is wanted: db is then also its value
   * (the forward's output is not used) */
  SG_TRY(affine_open("linear", x, dy->global_shape[1], w, db, &c));
  void *pg[2] = {dw, db};
  SG_TRY(ctx_backward_dy(c, "linear", dy, pg, NULL, &dx));
fail:
  sg_sharded_ctx_destroy(&c);
  return st;
}

sg_status sg_sharded_bias_forward(const sg_shardtensor *x, const void *b,
                                  sg_shardtensor *y) {
  sg_status st = SG_OK;
  sg_sharded_ctx_t c = NULL;
  if (y) memset(y, 0, sizeof *y);
  if (!b) SG_RAISE(SG_ERR_INVALID_ARG, "bias: b is NULL");
  st = affine_open("bias", x, 0, NULL, b, &c);
fail:
  return forward_end(st, c, y, NULL);
}

sg_status sg_sharded_bias_backward(const sg_shardtensor *dy, void *db) {
  sg_status st = SG_OK;
  sg_sharded_ctx_t c = NULL;
  sg_shardtensor *none = NULL;
  if (!db) SG_RAISE(SG_ERR_INVALID_ARG, "bias backward: db is NULL");
  /* the op on dy itself, db as the bias value: only the gradient is used */
  SG_TRY(affine_open("bias", dy, 0, NULL, db, &c));
  void *pg[1] = {db};
  SG_TRY(ctx_backward_dy(c, "bias", dy, pg, NULL, &none));
fail:
  sg_sharded_ctx_destroy(&c);
  return st;
}

/* ---- pointwise -------------------------------------------------------------------- */

static sg_status pointwise_open(const char *op, int nact,
                                const sg_shardtensor *const *acts, int code,
                                sg_sharded_ctx_t *pc) {
  sg_status st = SG_OK;
  SG_TRY(ctx_open(op, nact, acts, pc));
  sg_sharded_ctx_t c = *pc;
  if (nact == 1)
    st = sg_ag_act(c->tape, (sg_act)code, &c->act[0], &c->out);
  else
    st = sg_ag_binary(c->tape, (sg_binary)code, &c->act[0], &c->act[1],
                      &c->out);
  if (st != SG_OK) sg_sharded_ctx_destroy(pc);
fail:
  return st;
}

sg_status sg_sharded_act_forward(sg_act act, const sg_shardtensor *x,
                                 sg_shardtensor *y) {
  sg_sharded_ctx_t c = NULL;
  if (y) memset(y, 0, sizeof *y);
  sg_status st = pointwise_open("act", 1, &x, (int)act, &c);
  return forward_end(st, c, y, NULL);
}

sg_status sg_sharded_act_backward(sg_act act, const sg_shardtensor *x,
                                  const sg_shardtensor *dy,
                                  sg_shardtensor *dx) {
  sg_status st = SG_OK;
  sg_sharded_ctx_t c = NULL;
  if (dx) memset(dx, 0, sizeof *dx);
  SG_TRY(pointwise_open("act", 1, &x, (int)act, &c));
  SG_TRY(ctx_backward_dy(c, "act", dy, NULL, NULL, &dx));
fail:
  sg_sharded_ctx_destroy(&c);
  return st;
}

sg_status sg_sharded_binary_forward(sg_binary op, const sg_shardtensor *a,
                                    const sg_shardtensor *b,
                                    sg_shardtensor *y) {
  sg_sharded_ctx_t c = NULL;
  if (y) memset(y, 0, sizeof *y);
  const sg_shardtensor *ab[2] = {a, b};
  sg_status st = pointwise_open("binary", 2, ab, (int)op, &c);
  return forward_end(st, c, y, NULL);
}

sg_status sg_sharded_binary_backward(sg_binary op, const sg_shardtensor *a,
                                     const sg_shardtensor *b,
                                     const sg_shardtensor *dy,
                                     sg_shardtensor *da, sg_shardtensor *db) {
  sg_status st = SG_OK;
  sg_sharded_ctx_t c = NULL;
  const sg_shardtensor *ab[2] = {a, b};
  sg_shardtensor *d[2] = {da, db};
  if (da) memset(da, 0, sizeof *da);
  if (db) memset(db, 0, sizeof *db);
  SG_TRY(pointwise_open("binary", 2, ab, (int)op, &c));
  SG_TRY(ctx_backward_dy(c, "binary", dy, NULL, NULL, d));
fail:
  sg_sharded_ctx_destroy(&c);
  return st;
}

/* ---- normalisation ------------------------------------------------------------------ */

sg_status sg_sharded_norm_forward(const sg_norm_desc *d,
                                  const sg_shardtensor *x, const void *gamma,
                                  const void *beta, sg_shardtensor *y,
                                  sg_sharded_ctx_t *ctx) {
  sg_status st = SG_OK;
  sg_sharded_ctx_t c = NULL;
  if (y) memset(y, 0, sizeof *y);
  if (ctx) *ctx = NULL;
  if (!d) SG_RAISE(SG_ERR_INVALID_ARG, "norm: descriptor is NULL");
  SG_TRY(ctx_open("norm", 1, &x, &c));
  int64_t nc[1] = {x->global_shape[1]};
  if (gamma) st = ctx_param(c, "gamma", 1, nc, gamma);
  if (st == SG_OK && beta) st = ctx_param(c, "beta", 1, nc, beta);
  st = sg_agree(sg_mesh_comm(c->mesh), st);
  if (st == SG_OK)
    st = sg_ag_norm(c->tape, d, &c->act[0], gamma ? &c->par[0] : NULL,
                    beta ? &c->par[gamma ? 1 : 0] : NULL, &c->out);
fail:
  return forward_end(st, c, y, ctx);
}

sg_status sg_sharded_norm_backward(sg_sharded_ctx_t c, const void *gamma,
                                   const sg_shardtensor *dy, sg_shardtensor *dx,
                                   void *dgamma, void *dbeta) {
  sg_status st = SG_OK;
  SG_TRY(ctx_check(c, "norm"));
  /* the parameters in the order the forward added them (gamma, beta) */
  const int has_gamma = c->npar > 0 && !strcmp(c->par[0].name, "gamma");
  void *pg[2] = {has_gamma ? dgamma : dbeta, has_gamma ? dbeta : NULL};
  const void *pv[2] = {has_gamma ? gamma : NULL, NULL};
  SG_TRY(ctx_backward_dy(c, "norm", dy, pg, pv, &dx));
fail:
  return st;
}

/* ---- losses --------------------------------------------------------------------------- */

sg_status sg_sharded_loss_forward(sg_loss_kind kind, const sg_shardtensor *p,
                                  const sg_shardtensor *t, double *value,
                                  sg_sharded_ctx_t *ctx) {
  sg_status st = SG_OK;
  sg_sharded_ctx_t c = NULL;
  if (ctx) *ctx = NULL;
  const int needs_t = kind == SG_LOSS_MSE || kind == SG_LOSS_REL_L2;
  if (!value) SG_RAISE(SG_ERR_INVALID_ARG, "loss: value is NULL");
  if (needs_t && !t)
    SG_RAISE(SG_ERR_INVALID_ARG, "loss: the target is required");
  const sg_shardtensor *pt[2] = {p, t};
  SG_TRY(ctx_open("loss", needs_t ? 2 : 1, pt, &c));
  st = sg_ag_loss(c->tape, kind, &c->act[0], needs_t ? &c->act[1] : NULL,
                  &c->out);
  if (st == SG_OK) *value = sg_var_item(c->out);
fail:
  return forward_end(st, c, NULL, ctx);
}

sg_status sg_sharded_loss_backward(sg_sharded_ctx_t c, double g,
                                   sg_shardtensor *dp, sg_shardtensor *dt) {
  sg_status st = SG_OK;
  double gd = g;
  float gf = (float)g;
  if (dp) memset(dp, 0, sizeof *dp);
  if (dt) memset(dt, 0, sizeof *dt);
  SG_TRY(ctx_check(c, "loss"));
  if (!dp) SG_RAISE(SG_ERR_INVALID_ARG, "loss backward: dp is required");
  if (!c->out)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "loss backward: the context's backward ran already");
  const int64_t one = 1;
  sg_tensor gt = sg_tensor_wrap(c->dtype == SG_DTYPE_F32 ? (void *)&gf
                                                         : (void *)&gd,
                                c->dtype, sg_device_host(), 1, &one);
  sg_shardtensor *d[2] = {dp, c->nact > 1 ? dt : NULL};
  SG_TRY(ctx_backward(c, &gt, NULL, NULL, d));
fail:
  return st;
}
