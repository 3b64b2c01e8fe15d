/* shardgrid — autograd tape: recording, backward, memory, hooks. */
#include "sg_autograd.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sg_device.h"

struct sg_tape {
  sg_node **nodes;
  int nnodes, cap_nodes;
  sg_var **owned; /* variables made by ops */
  int nowned, cap_owned;
  int grad_enabled;
  sg_hooks hooks;
  size_t bytes;
};

/* ---- tensors (host, contiguous) ------------------------------------------ */

static int64_t ag_numel(const sg_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}

static size_t ag_nbytes(const sg_tensor *t) {
  return (size_t)ag_numel(t) * sg_dtype_size(t->dtype);
}

static void ag_describe(sg_tensor *t, sg_dtype dt, int ndim,
                        const int64_t *shape, void *data, int owns) {
  memset(t, 0, sizeof *t);
  t->dtype = dt;
  t->device = sg_device_host();
  t->ndim = ndim;
  int64_t s = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    t->shape[i] = shape[i];
    t->strides[i] = s;
    s *= shape[i];
  }
  t->data = data;
  t->owns = owns;
}

static sg_status ag_alloc(sg_tensor *t, sg_dtype dt, int ndim,
                          const int64_t *shape) {
  sg_status st = SG_OK;
  void *p = NULL;
  if (ndim < 1 || ndim > SG_TENSOR_MAX_DIMS)
    SG_RAISE(SG_ERR_SHAPE, "tensor with %d dims (1..%d)", ndim,
             SG_TENSOR_MAX_DIMS);
  for (int i = 0; i < ndim; ++i)
    if (shape[i] < 0) SG_RAISE(SG_ERR_SHAPE, "negative extent in dim %d", i);
  ag_describe(t, dt, ndim, shape, NULL, 1);
  SG_TRY(sg_calloc(sg_device_host(), ag_nbytes(t), &p));
  t->data = p;
fail:
  return st;
}

static void ag_free(sg_tensor *t) {
  if (t->owns && t->data) sg_free(sg_device_host(), &t->data);
  t->data = NULL;
  t->owns = 0;
}

/* y += x (same dtype and size). */
static void ag_add_into(sg_tensor *y, const sg_tensor *x) {
  int64_t n = ag_numel(y);
  if (y->dtype == SG_DTYPE_F32) {
    float *a = y->data;
    const float *b = x->data;
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; ++i) a[i] += b[i];
  } else {
    double *a = y->data;
    const double *b = x->data;
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; ++i) a[i] += b[i];
  }
}

/* ---- variables ----------------------------------------------------------- */

static sg_status ag_var_setup(sg_var *v, const char *name, sg_dtype dtype,
                              int ndim, const int64_t *shape, void *data) {
  sg_status st = SG_OK;
  if (!v) SG_RAISE(SG_ERR_INVALID_ARG, "variable is NULL");
  memset(v, 0, sizeof *v);
  if (dtype != SG_DTYPE_F32 && dtype != SG_DTYPE_F64)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "autograd variables are f32 or f64, not %s",
             sg_dtype_name(dtype));
  if (!shape) SG_RAISE(SG_ERR_INVALID_ARG, "shape is NULL");
  if (data) {
    if (ndim < 1 || ndim > SG_TENSOR_MAX_DIMS)
      SG_RAISE(SG_ERR_SHAPE, "tensor with %d dims", ndim);
    ag_describe(&v->value, dtype, ndim, shape, data, 0);
  } else {
    SG_TRY(ag_alloc(&v->value, dtype, ndim, shape));
    v->owns_value = 1;
  }
  snprintf(v->name, sizeof v->name, "%s", name ? name : "");
  v->is_leaf = 1;
fail:
  return st;
}

sg_status sg_var_init(sg_var *v, const char *name, sg_dtype dtype, int ndim,
                      const int64_t *shape, void *data, int requires_grad) {
  sg_status st = SG_OK;
  SG_TRY(ag_var_setup(v, name, dtype, ndim, shape, data));
  v->requires_grad = requires_grad != 0;
fail:
  return st;
}

sg_status sg_var_init_param(sg_var *v, const char *name, sg_dtype dtype,
                            int ndim, const int64_t *shape, void *data,
                            void *grad_data) {
  sg_status st = SG_OK;
  SG_TRY(ag_var_setup(v, name, dtype, ndim, shape, data));
  v->requires_grad = 1;
  v->is_param = 1;
  if (grad_data) {
    ag_describe(&v->grad, dtype, ndim, shape, grad_data, 0);
  } else {
    SG_TRY(ag_alloc(&v->grad, dtype, ndim, shape));
    v->owns_grad = 1;
  }
fail:
  if (st != SG_OK && v) sg_var_release(v);
  return st;
}

void sg_var_release(sg_var *v) {
  if (!v) return;
  if (v->owns_value) ag_free(&v->value);
  if (v->owns_grad) ag_free(&v->grad);
  memset(v, 0, sizeof *v);
}

sg_status sg_var_zero_grad(sg_var *v) {
  sg_status st = SG_OK;
  if (!v) SG_RAISE(SG_ERR_INVALID_ARG, "variable is NULL");
  if (v->grad.data) memset(v->grad.data, 0, ag_nbytes(&v->grad));
fail:
  return st;
}

double sg_var_item(const sg_var *v) {
  if (!v || !v->value.data || ag_numel(&v->value) != 1) return NAN;
  return v->value.dtype == SG_DTYPE_F32 ? (double)*(const float *)v->value.data
                                        : *(const double *)v->value.data;
}

/* Make sure a variable has a gradient buffer (zero-filled when new). */
static sg_status ag_ensure_grad(sg_tape_t tape, sg_var *v) {
  sg_status st = SG_OK;
  if (v->grad.data || ag_numel(&v->value) == 0) goto fail;
  SG_TRY(ag_alloc(&v->grad, v->value.dtype, v->value.ndim, v->value.shape));
  v->owns_grad = 1;
  if (!v->is_leaf) tape->bytes += ag_nbytes(&v->grad);
fail:
  return st;
}

/* ---- the tape ------------------------------------------------------------ */

sg_status sg_tape_create(sg_tape_t *tape) {
  sg_status st = SG_OK;
  if (!tape) SG_RAISE(SG_ERR_INVALID_ARG, "tape is NULL");
  *tape = calloc(1, sizeof **tape);
  if (!*tape) SG_RAISE(SG_ERR_ALLOC, "tape");
  (*tape)->grad_enabled = 1;
fail:
  return st;
}

void sg_tape_destroy(sg_tape_t *tape) {
  if (!tape || !*tape) return;
  sg_tape_clear(*tape);
  free((*tape)->nodes);
  free((*tape)->owned);
  free(*tape);
  *tape = NULL;
}

void sg_tape_set_hooks(sg_tape_t tape, const sg_hooks *hooks) {
  if (!tape) return;
  if (hooks)
    tape->hooks = *hooks;
  else
    memset(&tape->hooks, 0, sizeof tape->hooks);
}

int sg_tape_set_grad_enabled(sg_tape_t tape, int enabled) {
  if (!tape) return 0;
  int prev = tape->grad_enabled;
  tape->grad_enabled = enabled != 0;
  return prev;
}

size_t sg_tape_bytes(sg_tape_t tape) { return tape ? tape->bytes : 0; }
int sg_tape_size(sg_tape_t tape) { return tape ? tape->nnodes : 0; }

/* Free a node's own state (margins block, saved state). */
static void ag_node_release(sg_tape_t tape, sg_node *node) {
  if (!node) return;
  if (node->xin.owns) {
    tape->bytes -= ag_nbytes(&node->xin);
    ag_free(&node->xin);
  }
  if (node->saved) {
    tape->bytes -= node->saved_bytes;
    sg_free(sg_device_host(), &node->saved);
  }
  free(node);
}

static void ag_var_drop_memory(sg_tape_t tape, sg_var *v) {
  if (v->owns_value && v->value.data) {
    tape->bytes -= ag_nbytes(&v->value);
    ag_free(&v->value);
  }
  if (v->owns_grad && v->grad.data) {
    tape->bytes -= ag_nbytes(&v->grad);
    ag_free(&v->grad);
  }
}

void sg_tape_clear(sg_tape_t tape) {
  if (!tape) return;
  for (int i = 0; i < tape->nnodes; ++i) {
    sg_node *node = tape->nodes[i];
    for (int j = 0; j < node->nin; ++j) {
      node->in[j]->pending = 0;
      node->in[j]->has_grad = 0;
    }
    ag_node_release(tape, node);
  }
  tape->nnodes = 0;
  for (int i = 0; i < tape->nowned; ++i) {
    ag_var_drop_memory(tape, tape->owned[i]);
    free(tape->owned[i]);
  }
  tape->nowned = 0;
  tape->bytes = 0;
}

sg_status sg_tape_zero_grad(sg_var *const *vars, int n) {
  sg_status st = SG_OK;
  for (int i = 0; i < n; ++i) SG_TRY(sg_var_zero_grad(vars[i]));
fail:
  return st;
}

sg_status sg_node_alloc_out(sg_node *node, int j, int ndim,
                            const int64_t *shape) {
  sg_status st = SG_OK;
  if (!node || j < 0 || j >= node->nout)
    SG_RAISE(SG_ERR_INTERNAL, "output %d of a node with %d outputs", j,
             node ? node->nout : 0);
  sg_var *v = node->out[j];
  if (v->value.data) SG_RAISE(SG_ERR_INTERNAL, "output %d allocated twice", j);
  SG_TRY(ag_alloc(&v->value, node->in[0]->value.dtype, ndim, shape));
  v->owns_value = 1;
fail:
  return st;
}

/* The tape of the node being run, for byte accounting in callbacks. */
static _Thread_local sg_tape_t ag_current_tape;

sg_status sg_node_save(sg_node *node, size_t bytes, void **ptr) {
  sg_status st = SG_OK;
  if (!node || !ptr) SG_RAISE(SG_ERR_INVALID_ARG, "node or ptr is NULL");
  if (node->saved) SG_RAISE(SG_ERR_INTERNAL, "state saved twice");
  SG_TRY(sg_calloc(sg_device_host(), bytes, &node->saved));
  node->saved_bytes = bytes;
  if (ag_current_tape) ag_current_tape->bytes += bytes;
  *ptr = node->saved;
fail:
  return st;
}

static sg_status ag_grow(void **arr, int *cap, int need, size_t elem) {
  sg_status st = SG_OK;
  if (need <= *cap) goto fail;
  int nc = *cap ? 2 * *cap : 64;
  while (nc < need) nc *= 2;
  void *p = realloc(*arr, (size_t)nc * elem);
  if (!p) SG_RAISE(SG_ERR_ALLOC, "tape arrays");
  *arr = p;
  *cap = nc;
fail:
  return st;
}

/* Give the windowed input its margins: one process pads per the window. */
static sg_status ag_make_margins(sg_node *node, const sg_var *x) {
  sg_status st = SG_OK;
  const sg_op_window *w = &node->win;
  const sg_tensor *v = &x->value;
  int pads = 0;
  if (v->ndim != 2 + w->nsp)
    SG_RAISE(SG_ERR_SHAPE, "%s: input has %d dims, the window needs %d",
             node->op->name, v->ndim, 2 + w->nsp);
  for (int i = 0; i < w->nsp; ++i) pads |= w->pad[i][0] != 0 || w->pad[i][1] != 0;
  if (!pads) {
    node->xin = *v;
    node->xin.owns = 0;
    goto fail;
  }
  int64_t shape[SG_TENSOR_MAX_DIMS];
  shape[0] = v->shape[0];
  shape[1] = v->shape[1];
  for (int i = 0; i < w->nsp; ++i)
    shape[2 + i] = v->shape[2 + i] + w->pad[i][0] + w->pad[i][1];
  SG_TRY(ag_alloc(&node->xin, v->dtype, v->ndim, shape));
  SG_TRY(sg_pad_forward(v->dtype, w->nsp, v->shape[0] * v->shape[1],
                        v->shape + 2, (const int64_t(*)[2])w->pad, w->mode,
                        v->data, node->xin.data));
fail:
  return st;
}

sg_status sg_tape_apply(sg_tape_t tape, const sg_op_def *op, int nin,
                        sg_var *const *in, int nout, const sg_op_window *win,
                        const void *attr, size_t attr_bytes, sg_var **out) {
  sg_status st = SG_OK;
  sg_node *node = NULL;
  int recorded = 0;
  if (!tape || !op || !in || !out)
    SG_RAISE(SG_ERR_INVALID_ARG, "tape, op, inputs and outputs are required");
  if (nin < 1 || nin > SG_NODE_MAX_IN || nout < 1 || nout > SG_NODE_MAX_OUT)
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: %d inputs, %d outputs (1..%d)", op->name,
             nin, nout, SG_NODE_MAX_IN);
  if (attr_bytes > sizeof node->attr)
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: attributes of %zu bytes (max %zu)",
             op->name, attr_bytes, sizeof node->attr);
  for (int i = 0; i < nin; ++i) {
    if (!in[i] || !in[i]->value.data)
      SG_RAISE(SG_ERR_INVALID_ARG, "%s: input %d is NULL or released", op->name, i);
    if (in[i]->value.dtype != in[0]->value.dtype)
      SG_RAISE(SG_ERR_SHAPE, "%s: input %d is %s, input 0 is %s", op->name, i,
               sg_dtype_name(in[i]->value.dtype), sg_dtype_name(in[0]->value.dtype));
  }
  node = calloc(1, sizeof *node);
  if (!node) SG_RAISE(SG_ERR_ALLOC, "node");
  node->op = op;
  node->nin = nin;
  node->nout = nout;
  for (int i = 0; i < nin; ++i) node->in[i] = in[i];
  if (attr_bytes) memcpy(node->attr, attr, attr_bytes);
  int requires = 0;
  for (int i = 0; i < nin; ++i) requires |= in[i]->requires_grad;
  requires = requires && tape->grad_enabled;
  if (tape->hooks.pre_use)
    for (int i = 0; i < nin; ++i)
      if (in[i]->is_param) SG_TRY(tape->hooks.pre_use(in[i], tape->hooks.user));
  if (op->rule.windowed_input >= 0) {
    if (!win) SG_RAISE(SG_ERR_INVALID_ARG, "%s needs a window", op->name);
    if (op->rule.windowed_input >= nin)
      SG_RAISE(SG_ERR_INTERNAL, "%s: windowed input %d of %d", op->name,
               op->rule.windowed_input, nin);
    node->has_window = 1;
    node->win = *win;
    SG_TRY(ag_make_margins(node, in[op->rule.windowed_input]));
    if (node->xin.owns) tape->bytes += ag_nbytes(&node->xin);
  }
  SG_TRY(ag_grow((void **)&tape->owned, &tape->cap_owned, tape->nowned + nout,
                 sizeof *tape->owned));
  for (int j = 0; j < nout; ++j) {
    sg_var *v = calloc(1, sizeof *v);
    if (!v) SG_RAISE(SG_ERR_ALLOC, "variable");
    tape->owned[tape->nowned++] = v;
    snprintf(v->name, sizeof v->name, "%s.%d", op->name, j);
    v->requires_grad = requires;
    node->out[j] = v;
  }
  ag_current_tape = tape;
  st = op->forward(node);
  ag_current_tape = NULL;
  if (st != SG_OK) goto fail;
  for (int j = 0; j < nout; ++j) {
    if (!node->out[j]->value.data && ag_numel(&node->out[j]->value) != 0)
      SG_RAISE(SG_ERR_INTERNAL, "%s did not produce output %d", op->name, j);
    tape->bytes += ag_nbytes(&node->out[j]->value);
    out[j] = node->out[j];
  }
  if (requires) {
    SG_TRY(ag_grow((void **)&tape->nodes, &tape->cap_nodes, tape->nnodes + 1,
                   sizeof *tape->nodes));
    tape->nodes[tape->nnodes++] = node;
    recorded = 1;
    for (int i = 0; i < nin; ++i)
      if (in[i]->requires_grad) in[i]->pending++;
    for (int j = 0; j < nout; ++j) node->out[j]->producer = node;
  }
fail:
  if (!recorded && node) {
    if (st != SG_OK)
      for (int j = 0; j < nout; ++j) out[j] = NULL;
    ag_node_release(tape, node);
  }
  return st;
}

/* Run one node's backward and route its input gradients. */
static sg_status ag_node_backward(sg_tape_t tape, sg_node *node) {
  sg_status st = SG_OK;
  enum { DIRECT = 0, ADD, PAD } how[SG_NODE_MAX_IN] = {DIRECT};
  sg_tensor tmp[SG_NODE_MAX_IN];
  sg_tensor tmp2 = {0};
  memset(tmp, 0, sizeof tmp);
  const int wi = node->op->rule.windowed_input;
  for (int j = 0; j < node->nout; ++j) SG_TRY(ag_ensure_grad(tape, node->out[j]));
  for (int i = 0; i < node->nin; ++i) {
    sg_var *v = node->in[i];
    node->gin[i] = NULL;
    if (!v->requires_grad || ag_numel(&v->value) == 0) continue;
    if (i == wi && node->xin.owns) {
      SG_TRY(ag_alloc(&tmp[i], node->xin.dtype, node->xin.ndim, node->xin.shape));
      node->gin[i] = tmp[i].data;
      how[i] = PAD;
    } else if (node->op->slots[i] == SG_SLOT_PARAM) {
      SG_TRY(ag_ensure_grad(tape, v));
      v->has_grad = 1;
      node->gin[i] = v->grad.data;
      how[i] = DIRECT;
    } else if (!v->is_leaf && !v->has_grad) {
      SG_TRY(ag_ensure_grad(tape, v));
      v->has_grad = 1;
      node->gin[i] = v->grad.data;
      how[i] = DIRECT;
    } else {
      SG_TRY(ag_alloc(&tmp[i], v->value.dtype, v->value.ndim, v->value.shape));
      node->gin[i] = tmp[i].data;
      how[i] = ADD;
    }
  }
  ag_current_tape = tape;
  st = node->op->backward(node);
  ag_current_tape = NULL;
  if (st != SG_OK) goto fail;
  for (int i = 0; i < node->nin; ++i) {
    sg_var *v = node->in[i];
    if (!node->gin[i]) continue;
    if (how[i] == PAD) {
      const sg_op_window *w = &node->win;
      SG_TRY(ag_alloc(&tmp2, v->value.dtype, v->value.ndim, v->value.shape));
      SG_TRY(sg_pad_backward(v->value.dtype, w->nsp,
                             v->value.shape[0] * v->value.shape[1],
                             v->value.shape + 2, (const int64_t(*)[2])w->pad,
                             w->mode, tmp[i].data, tmp2.data));
      SG_TRY(ag_ensure_grad(tape, v));
      if (!v->is_leaf && !v->has_grad)
        memcpy(v->grad.data, tmp2.data, ag_nbytes(&tmp2));
      else
        ag_add_into(&v->grad, &tmp2);
      v->has_grad = 1;
      ag_free(&tmp2);
    } else if (how[i] == ADD) {
      SG_TRY(ag_ensure_grad(tape, v));
      ag_add_into(&v->grad, &tmp[i]);
      v->has_grad = 1;
    }
  }
  for (int i = 0; i < node->nin; ++i) {
    sg_var *v = node->in[i];
    if (!v->requires_grad) continue;
    if (--v->pending == 0 && v->is_param && tape->hooks.grad_ready)
      SG_TRY(tape->hooks.grad_ready(v, tape->hooks.user));
  }
fail:
  for (int i = 0; i < SG_NODE_MAX_IN; ++i) ag_free(&tmp[i]);
  ag_free(&tmp2);
  return st;
}

sg_status sg_tape_backward(sg_tape_t tape, sg_var *loss) {
  sg_status st = SG_OK;
  if (!tape || !loss) SG_RAISE(SG_ERR_INVALID_ARG, "tape and loss are required");
  if (!loss->producer || !loss->requires_grad)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "backward from '%s': not produced on this tape with gradients "
             "(no-grad mode, or no input requires a gradient)", loss->name);
  if (ag_numel(&loss->value) != 1)
    SG_RAISE(SG_ERR_SHAPE, "backward from '%s': not a scalar (%lld elements)",
             loss->name, (long long)ag_numel(&loss->value));
  SG_TRY(ag_ensure_grad(tape, loss));
  if (loss->grad.dtype == SG_DTYPE_F32)
    *(float *)loss->grad.data = 1.0f;
  else
    *(double *)loss->grad.data = 1.0;
  loss->has_grad = 1;
  for (int k = tape->nnodes - 1; k >= 0; --k) {
    sg_node *node = tape->nodes[k];
    SG_TRY(ag_node_backward(tape, node));
    /* every consumer of this node's outputs ran before it: release them */
    for (int j = 0; j < node->nout; ++j) ag_var_drop_memory(tape, node->out[j]);
    ag_node_release(tape, node);
    tape->nodes[k] = NULL;
    tape->nnodes = k;
  }
  if (tape->hooks.post_backward)
    SG_TRY(tape->hooks.post_backward(tape, tape->hooks.user));
fail:
  if (tape) sg_tape_clear(tape);
  return st;
}
