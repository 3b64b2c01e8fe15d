/* shardgrid — autograd tape: recording, backward, memory, hooks. */
#include "sg_autograd.h"

#include "op_registry_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sg_comm.h"
#include "sg_device.h"
#include "sg_sharded_ops.h"

/* A cached exchange (halo plan) of a window op: key = (mesh, dtype, global
 * shape, placements, window). Every rank makes the same calls in the same
 * order, so every rank hits and misses alike and creates plans (collective)
 * in the same order. Entries in use by a recorded node are not evicted. */
typedef struct ag_xkey {
  sg_mesh_t mesh;
  sg_dtype dtype;
  int ndim;
  int64_t global[SG_TENSOR_MAX_DIMS];
  sg_placement pl[SG_MESH_MAX_DIMS];
  sg_exchange_dim win[SG_OPS_MAX_SPATIAL];
} ag_xkey;

typedef struct ag_xentry {
  ag_xkey key;
  sg_sharded_exchange_t ex;
  int uses; /* recorded nodes using it */
} ag_xentry;

enum { AG_XCACHE_MAX = 64 };

struct sg_tape {
  sg_node **nodes;
  int nnodes, cap_nodes;
  sg_var **owned; /* variables made by ops */
  int nowned, cap_owned;
  int grad_enabled;
  sg_dtype store_dt; /* SG_DTYPE_BF16: f32 activations rounded to bf16 */
  sg_hooks hooks[SG_TAPE_MAX_HOOKS];
  int hook_id[SG_TAPE_MAX_HOOKS];
  int nhooks, next_hook_id;
  MPI_Comm comm; /* agreement on hook failures of plain ops */
  size_t bytes;
  ag_xentry *xcache;
  int nx, cap_x;
  /* activation checkpointing: checkpointed blocks run on the child (made
   * at the first checkpoint; it keeps its own halo plans) */
  struct sg_tape *child;
  /* while a checkpointed block's forward runs on this tape: the leaves
   * requiring gradients it uses (parameters: first-use order) and the
   * stand-ins of its inputs */
  int collecting;
  sg_var **coll;
  int ncoll, cap_coll;
  sg_var *const *ck_in;
  int ck_nin;
};

/* The checkpoint node (sg_ag_checkpoint): its op has no kernels, the tape
 * runs it itself. */
static const sg_op_def ag_ckpt_op = {.name = "checkpoint", .rule = {.windowed_input = -1}};

const sg_op_def *sg_ag_checkpoint_op_def(void) { return &ag_ckpt_op; }
typedef struct ag_ckpt {
  sg_block_fn fn;
  void *ctx;
  int ncap;
  sg_var *cap[]; /* leaves requiring gradients used inside (parameters) */
} ag_ckpt;

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

static sg_status ag_alloc_z(sg_tensor *t, sg_dtype dt, int ndim,
                            const int64_t *shape, int zero) {
  sg_status st = SG_OK;
  void *p = NULL;
  if (ndim < 1 || ndim > SG_TENSOR_MAX_DIMS)
    SG_RAISE(SG_ERR_SHAPE, "tensor with %d dims (1..%d)", ndim,
             SG_TENSOR_MAX_DIMS);
  for (int i = 0; i < ndim; ++i)
    if (shape[i] < 0) SG_RAISE(SG_ERR_SHAPE, "negative extent in dim %d", i);
  ag_describe(t, dt, ndim, shape, NULL, 1);
  if (zero) SG_TRY(sg_calloc(sg_device_host(), ag_nbytes(t), &p));
  else SG_TRY(sg_malloc(sg_device_host(), ag_nbytes(t), &p));
  t->data = p;
fail:
  return st;
}

static sg_status ag_alloc(sg_tensor *t, sg_dtype dt, int ndim,
                          const int64_t *shape) {
  return ag_alloc_z(t, dt, ndim, shape, 1);
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

int sg_var_is_sharded(const sg_var *v) { return v && v->mesh; }

const int64_t *sg_var_global_shape(const sg_var *v) {
  if (!v) return NULL;
  return v->mesh ? v->global_shape : v->value.shape;
}

/* FNV-1a over bytes. */
static uint64_t ag_hash(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* This rank's part of the checks of sg_var_set_sharding. */
static sg_status ag_sharding_check(const sg_var *v, sg_mesh_t mesh,
                                   const sg_placement *placements, const int64_t *global_shape) {
  sg_status st = SG_OK;
  const int nd = v->value.ndim;
  int64_t off[SG_TENSOR_MAX_DIMS], box[SG_TENSOR_MAX_DIMS];
  if (!placements || !global_shape)
    SG_RAISE(SG_ERR_INVALID_ARG, "set sharding of '%s': placements and global shape are required",
             v->name);
  SG_TRY(sg_placements_check(sg_mesh_ndims(mesh), nd, placements));
  SG_TRY(sg_shardtensor_box(mesh, nd, global_shape, placements, sg_mesh_rank(mesh), off, box));
  for (int d = 0; d < nd; ++d)
    if (box[d] != v->value.shape[d])
      SG_RAISE(SG_ERR_SHAPE,
               "set sharding of '%s': local extent %lld in dim %d, but this rank's box of the "
               "global tensor is %lld", v->name, (long long)v->value.shape[d], d,
               (long long)box[d]);
fail:
  return st;
}

sg_status sg_var_set_sharding(sg_var *v, sg_mesh_t mesh, const sg_placement *placements,
                              const int64_t *global_shape) {
  sg_status st = SG_OK;
  if (!v) SG_RAISE(SG_ERR_INVALID_ARG, "set sharding: variable is NULL");
  if (!mesh) {
    v->mesh = NULL;
    memset(v->placements, 0, sizeof v->placements);
    memset(v->global_shape, 0, sizeof v->global_shape);
    goto fail;
  }
  const int nd = v->value.ndim, md = sg_mesh_ndims(mesh);
  SG_TRY(sg_agree(sg_mesh_comm(mesh), ag_sharding_check(v, mesh, placements, global_shape)));
  /* every rank must describe the same global tensor */
  uint64_t h = ag_hash(1469598103934665603ull, &nd, sizeof nd);
  h = ag_hash(h, &v->value.dtype, sizeof v->value.dtype);
  h = ag_hash(h, global_shape, (size_t)nd * sizeof *global_shape);
  for (int m = 0; m < md; ++m) {
    int k[2] = {(int)placements[m].kind,
                placements[m].kind == SG_PLACEMENT_SHARD ? placements[m].dim : -1};
    h = ag_hash(h, k, sizeof k);
  }
  unsigned long long hh[2] = {h, ~h}, mx[2];
  SG_MPI(MPI_Allreduce(hh, mx, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX, sg_mesh_comm(mesh)));
  if (mx[0] != hh[0] || mx[1] != hh[1])
    SG_RAISE(SG_ERR_INVALID_ARG, "set sharding of '%s': the ranks describe different global "
             "tensors (dtype, global shape or placements differ)", v->name);
  v->mesh = mesh;
  memset(v->placements, 0, sizeof v->placements);
  memcpy(v->placements, placements, (size_t)md * sizeof *placements);
  memset(v->global_shape, 0, sizeof v->global_shape);
  memcpy(v->global_shape, global_shape, (size_t)nd * sizeof *global_shape);
fail:
  return st;
}

/* Make sure a variable has a gradient buffer (zero-filled when new). */
static sg_status ag_ensure_grad_z(sg_tape_t tape, sg_var *v, int zero) {
  sg_status st = SG_OK;
  if (v->grad.data || ag_numel(&v->value) == 0) goto fail;
  SG_TRY(ag_alloc_z(&v->grad, v->value.dtype, v->value.ndim, v->value.shape, zero));
  v->owns_grad = 1;
  if (!v->is_leaf) tape->bytes += ag_nbytes(&v->grad);
fail:
  return st;
}

static sg_status ag_ensure_grad(sg_tape_t tape, sg_var *v) {
  return ag_ensure_grad_z(tape, v, 1);
}

/* ---- the tape ------------------------------------------------------------ */

sg_status sg_tape_create(sg_tape_t *tape) {
  sg_status st = SG_OK;
  if (!tape) SG_RAISE(SG_ERR_INVALID_ARG, "tape is NULL");
  *tape = calloc(1, sizeof **tape);
  if (!*tape) SG_RAISE(SG_ERR_ALLOC, "tape");
  (*tape)->grad_enabled = 1;
  (*tape)->store_dt = SG_DTYPE_F32;
  (*tape)->comm = MPI_COMM_NULL;
fail:
  return st;
}

sg_status sg_tape_destroy(sg_tape_t *tape) {
  if (!tape || !*tape) return SG_OK;
  sg_tape_clear(*tape);
  for (int i = 0; i < (*tape)->nx; ++i) sg_sharded_exchange_destroy(&(*tape)->xcache[i].ex);
  free((*tape)->xcache);
  sg_tape_destroy(&(*tape)->child);
  free((*tape)->coll);
  free((*tape)->nodes);
  free((*tape)->owned);
  free(*tape);
  *tape = NULL;
  return SG_OK;
}

void sg_tape_set_hooks(sg_tape_t tape, const sg_hooks *hooks) {
  if (!tape) return;
  tape->nhooks = 0;
  if (hooks) sg_tape_add_hooks(tape, hooks, NULL);
}

sg_status sg_tape_add_hooks(sg_tape_t tape, const sg_hooks *hooks, int *id) {
  sg_status st = SG_OK;
  if (!tape || !hooks) SG_RAISE(SG_ERR_INVALID_ARG, "add hooks: tape and hooks are required");
  if (tape->nhooks == SG_TAPE_MAX_HOOKS)
    SG_RAISE(SG_ERR_INVALID_ARG, "add hooks: the tape has its %d listeners already", SG_TAPE_MAX_HOOKS);
  tape->hooks[tape->nhooks] = *hooks;
  tape->hook_id[tape->nhooks] = ++tape->next_hook_id;
  if (id) *id = tape->next_hook_id;
  tape->nhooks++;
fail:
  return st;
}

sg_status sg_tape_remove_hooks(sg_tape_t tape, int id) {
  sg_status st = SG_OK;
  if (!tape) SG_RAISE(SG_ERR_INVALID_ARG, "remove hooks: tape is NULL");
  for (int k = 0; k < tape->nhooks; ++k)
    if (tape->hook_id[k] == id) {
      memmove(tape->hooks + k, tape->hooks + k + 1, (size_t)(tape->nhooks - k - 1) * sizeof *tape->hooks);
      memmove(tape->hook_id + k, tape->hook_id + k + 1, (size_t)(tape->nhooks - k - 1) * sizeof *tape->hook_id);
      tape->nhooks--;
      goto fail;
    }
  SG_RAISE(SG_ERR_INVALID_ARG, "remove hooks: no listener %d on this tape", id);
fail:
  return st;
}

void sg_tape_set_comm(sg_tape_t tape, MPI_Comm comm) {
  if (tape) tape->comm = comm;
}

/* Which per-parameter hook to call. */
typedef enum ag_hook { AG_PRE_USE, AG_POST_USE, AG_PRE_BACKWARD, AG_POST_BACKWARD_USE, AG_GRAD_READY } ag_hook;

/* Call hook `which` of every listener for parameter v; the first failure
 * stops the calls. Not collective by itself. */
static sg_status ag_call_hooks(sg_tape_t tape, ag_hook which, sg_var *v) {
  sg_status st = SG_OK;
  for (int k = 0; k < tape->nhooks && st == SG_OK; ++k) {
    const sg_hooks *h = &tape->hooks[k];
    sg_status (*f)(sg_var *, void *) = which == AG_PRE_USE        ? h->pre_use
                                       : which == AG_POST_USE     ? h->post_use
                                       : which == AG_PRE_BACKWARD ? h->pre_backward
                                       : which == AG_POST_BACKWARD_USE ? h->post_backward_use
                                                                   : h->grad_ready;
    if (f) st = f(v, h->user);
  }
  return st;
}

/* The same for every parameter input of a node (inputs 0..nin). */
static sg_status ag_call_param_hooks(sg_tape_t tape, ag_hook which, int nin, sg_var *const *in) {
  sg_status st = SG_OK;
  if (tape->nhooks == 0) return SG_OK;
  for (int i = 0; i < nin && st == SG_OK; ++i)
    if (in[i] && in[i]->is_param) st = ag_call_hooks(tape, which, in[i]);
  return st;
}

/* 1 if a hook may run for one of the inputs (a parameter among them). */
static int ag_hooked(const sg_tape_t tape, int nin, sg_var *const *in) {
  if (!tape->nhooks) return 0;
  for (int i = 0; i < nin; ++i)
    if (in[i] && in[i]->is_param) return 1;
  return 0;
}

/* The communicator over which an op agrees: its sharded inputs' mesh, else
 * the tape's (only when hooks could have failed). */
static MPI_Comm ag_agree_comm(sg_tape_t tape, MPI_Comm mesh_comm, int hooked) {
  if (mesh_comm != MPI_COMM_NULL) return mesh_comm;
  return hooked ? tape->comm : MPI_COMM_NULL;
}

static sg_status ag_agree(MPI_Comm comm, sg_status st) {
  return comm == MPI_COMM_NULL ? st : sg_agree(comm, st);
}

sg_status sg_tape_set_storage_dtype(sg_tape_t tape, sg_dtype dt) {
  sg_status st = SG_OK;
  if (!tape) SG_RAISE(SG_ERR_INVALID_ARG, "storage dtype: tape is NULL");
  if (dt != SG_DTYPE_F32 && dt != SG_DTYPE_BF16)
    SG_RAISE(SG_ERR_INVALID_ARG, "storage dtype: %s (f32 or bf16)", sg_dtype_name(dt));
  tape->store_dt = dt;
  if (tape->child) tape->child->store_dt = dt;
fail:
  return st;
}

sg_dtype sg_tape_storage_dtype(sg_tape_t tape) { return tape ? tape->store_dt : SG_DTYPE_F32; }

/* Under a bf16 storage policy: t's f32 values rounded to bf16 in place
 * (what a bf16 kernel stores; the arithmetic before it was f32). */
static void ag_store_round(const sg_tape_t tape, sg_tensor *t) {
  if (tape->store_dt != SG_DTYPE_BF16 || t->dtype != SG_DTYPE_F32 || !t->data) return;
  sg_round_bf16((float *)t->data, ag_numel(t));
}

int sg_tape_set_grad_enabled(sg_tape_t tape, int enabled) {
  if (!tape) return 0;
  int prev = tape->grad_enabled;
  tape->grad_enabled = enabled != 0;
  return prev;
}

size_t sg_tape_bytes(sg_tape_t tape) { return tape ? tape->bytes + sg_tape_bytes(tape->child) : 0; }
int sg_tape_size(sg_tape_t tape) { return tape ? tape->nnodes : 0; }

/* Free a node's own state (margins block, saved state). */
static void ag_node_release(sg_tape_t tape, sg_node *node) {
  if (!node) return;
  for (int i = 0; node->ex && i < tape->nx; ++i)
    if ((void *)tape->xcache[i].ex == node->ex) tape->xcache[i].uses--;
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
    if (node->op == &ag_ckpt_op && node->saved) {
      const ag_ckpt *ck = node->saved;
      for (int j = 0; j < ck->ncap; ++j) ck->cap[j]->pending = 0;
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
  sg_tape_clear(tape->child);
}

sg_status sg_tape_zero_grad(sg_var *const *vars, int n) {
  sg_status st = SG_OK;
  for (int i = 0; i < n; ++i) SG_TRY(sg_var_zero_grad(vars[i]));
fail:
  return st;
}

static sg_status node_alloc_out(sg_node *node, int j, int ndim,
                                const int64_t *shape, int zero) {
  sg_status st = SG_OK;
  if (!node || j < 0 || j >= node->nout)
    SG_RAISE(SG_ERR_INTERNAL, "output %d of a node with %d outputs", j,
             node ? node->nout : 0);
  sg_var *v = node->out[j];
  if (v->value.data) SG_RAISE(SG_ERR_INTERNAL, "output %d allocated twice", j);
  SG_TRY(ag_alloc_z(&v->value, node->in[0]->value.dtype, ndim, shape, zero));
  v->owns_value = 1;
fail:
  return st;
}

sg_status sg_node_alloc_out(sg_node *node, int j, int ndim,
                            const int64_t *shape) {
  return node_alloc_out(node, j, ndim, shape, 1);
}

sg_status sg_node_alloc_out_uninit(sg_node *node, int j, int ndim,
                                   const int64_t *shape) {
  return node_alloc_out(node, j, ndim, shape, 0);
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

/* activation checkpointing (defined at the end) */
static sg_status ag_collect(sg_tape_t t, const char *who, int nin, sg_var *const *in);
static sg_status ag_ckpt_backward(sg_tape_t tape, sg_node *node);

/* Give the windowed input its margins: one process pads per the window. */
static sg_status ag_make_margins(sg_node *node, const sg_var *x) {
  sg_status st = SG_OK;
  const sg_op_window *w = &node->win;
  const sg_tensor *v = &x->value;
  int pads = 0;
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

/* ---- sharded nodes ------------------------------------------------------- */

static int ag_dim_sharded(const sg_node *node, int t) {
  for (int m = 0; m < sg_mesh_ndims(node->mesh); ++m)
    if (node->placements[m].kind == SG_PLACEMENT_SHARD && node->placements[m].dim == t) return 1;
  return 0;
}

/* The first sharded activation input, -1 if none. */
static int ag_sharded_ref(const sg_op_def *op, int nin, sg_var *const *in) {
  for (int i = 0; i < nin; ++i)
    if (op->slots[i] == SG_SLOT_ACT && in[i] && in[i]->mesh) return i;
  return -1;
}

/* The reference input of a sharded node: the windowed one, else the first
 * sharded activation. */
static const sg_var *ag_ref_input(const sg_node *node) {
  if (node->has_window) return node->in[node->op->rule.windowed_input];
  return node->in[ag_sharded_ref(node->op, node->nin, node->in)];
}

/* The sharding rule: placements the op accepts, activation inputs sharded
 * alike, parameters plain. From global information only, so every rank
 * finds the same error. */
static sg_status ag_node_sharding(sg_node *node) {
  sg_status st = SG_OK;
  const sg_op_def *op = node->op;
  for (int i = 0; i < node->nin; ++i)
    if (op->slots[i] == SG_SLOT_PARAM && node->in[i]->mesh)
      SG_RAISE(SG_ERR_INVALID_ARG, "%s: input %d ('%s') is a parameter but sharded: parameters "
               "are plain (Replicate) variables", op->name, i, node->in[i]->name);
  int r = ag_sharded_ref(op, node->nin, node->in);
  if (r < 0) goto fail;
  const sg_var *x = node->in[r];
  const int md = sg_mesh_ndims(x->mesh);
  const unsigned acc = op->rule.accepts ? op->rule.accepts
                                        : SG_ACCEPT_REPLICATE | SG_ACCEPT_SHARD_BATCH |
                                              SG_ACCEPT_SHARD_SPATIAL;
  for (int m = 0; m < md; ++m) {
    sg_placement p = x->placements[m];
    if (p.kind == SG_PLACEMENT_PARTIAL)
      SG_RAISE(SG_ERR_INVALID_ARG, "%s: placement Partial (mesh dim '%s') of input %d ('%s') is "
               "not accepted", op->name, sg_mesh_dim_name(x->mesh, m), r, x->name);
    if (p.kind != SG_PLACEMENT_SHARD) continue;
    unsigned need = p.dim == 0 ? SG_ACCEPT_SHARD_BATCH
                    : p.dim == 1 ? SG_ACCEPT_SHARD_CHANNEL : SG_ACCEPT_SHARD_SPATIAL;
    if (!(acc & need))
      SG_RAISE(SG_ERR_INVALID_ARG, "%s: placement Shard(%d) (%s, mesh dim '%s') of input %d ('%s') "
               "is not accepted", op->name, p.dim,
               p.dim == 0 ? "batch" : p.dim == 1 ? "channels" : "spatial",
               sg_mesh_dim_name(x->mesh, m), r, x->name);
  }
  for (int i = 0; i < node->nin; ++i) {
    const sg_var *v = node->in[i];
    if (op->slots[i] != SG_SLOT_ACT || i == r) continue;
    if (!v->mesh)
      SG_RAISE(SG_ERR_INVALID_ARG, "%s: input %d ('%s') is not sharded but input %d ('%s') is: "
               "activation inputs must be sharded alike", op->name, i, v->name, r, x->name);
    int same = v->mesh == x->mesh && v->value.ndim == x->value.ndim;
    for (int m = 0; same && m < md; ++m)
      same = sg_placement_equal(v->placements[m], x->placements[m]);
    if (!same)
      SG_RAISE(SG_ERR_INVALID_ARG, "%s: inputs %d ('%s') and %d ('%s') are placed differently "
               "(mesh, dims or placements): activation inputs must be sharded alike", op->name,
               r, x->name, i, v->name);
  }
  node->mesh = x->mesh;
  memcpy(node->placements, x->placements, sizeof node->placements);
  for (int i = 0; i < node->nin; ++i) {
    const sg_var *v = node->in[i];
    if (op->slots[i] != SG_SLOT_ACT) continue;
    for (int t = 0; t < v->value.ndim; ++t)
      if (ag_dim_sharded(node, t) && v->global_shape[t] != x->global_shape[t])
        SG_RAISE(SG_ERR_SHAPE, "%s: inputs %d ('%s') and %d ('%s') differ in the global extent "
                 "of sharded dim %d (%lld and %lld)", op->name, r, x->name, i, v->name, t,
                 (long long)x->global_shape[t], (long long)v->global_shape[t]);
  }
  SG_TRY(sg_sharded_split_masks(x->mesh, x->value.ndim, x->placements, &node->split_batch,
                                &node->split_channel, &node->split_space));
fail:
  return st;
}

/* The cached exchange of the windowed input (created on a miss: collective,
 * in the same order on every rank). */
static sg_status ag_node_exchange(sg_tape_t tape, sg_node *node, const sg_var *x) {
  sg_status st = SG_OK;
  ag_xkey k;
  memset(&k, 0, sizeof k);
  k.mesh = x->mesh;
  k.dtype = x->value.dtype;
  k.ndim = x->value.ndim;
  memcpy(k.global, x->global_shape, (size_t)k.ndim * sizeof *k.global);
  for (int m = 0; m < sg_mesh_ndims(x->mesh); ++m) {
    k.pl[m].kind = x->placements[m].kind;
    k.pl[m].dim = x->placements[m].kind == SG_PLACEMENT_SHARD ? x->placements[m].dim : -1;
  }
  const sg_op_window *w = &node->win;
  for (int d = 0; d < w->nsp; ++d) {
    sg_exchange_dim *e = &k.win[d];
    e->kernel = w->kernel[d];
    e->stride = w->stride[d] ? w->stride[d] : 1;
    e->dilation = w->dilation[d] ? w->dilation[d] : 1;
    e->pad[0] = w->pad[d][0];
    e->pad[1] = w->pad[d][1];
    e->up = w->up[d] > 1 ? w->up[d] : 1;
    e->boundary = w->mode[d];
  }
  ag_xentry *hit = NULL;
  for (int i = 0; i < tape->nx && !hit; ++i)
    if (!memcmp(&tape->xcache[i].key, &k, sizeof k)) hit = &tape->xcache[i];
  if (!hit) {
    if (tape->nx >= AG_XCACHE_MAX)
      for (int i = 0; i < tape->nx; ++i)
        if (tape->xcache[i].uses == 0) {
          sg_sharded_exchange_destroy(&tape->xcache[i].ex);
          memmove(tape->xcache + i, tape->xcache + i + 1,
                  (size_t)(tape->nx - i - 1) * sizeof *tape->xcache);
          tape->nx--;
          break;
        }
    SG_TRY(ag_grow((void **)&tape->xcache, &tape->cap_x, tape->nx + 1, sizeof *tape->xcache));
    sg_sharded_exchange_t ex = NULL;
    SG_TRY(sg_sharded_exchange_create(x->mesh, k.dtype, k.ndim, k.global, x->placements, k.win,
                                      &ex));
    hit = &tape->xcache[tape->nx++];
    hit->key = k;
    hit->ex = ex;
    hit->uses = 0;
  }
  hit->uses++;
  node->ex = hit->ex;
fail:
  return st;
}

static sg_exchange_info ag_node_info(const sg_node *node) {
  sg_exchange_info info;
  memset(&info, 0, sizeof info);
  sg_sharded_exchange_get_info((sg_sharded_exchange_t)node->ex, &info);
  return info;
}

/* The owned part of output j (computed over the natural extent). */
static sg_status ag_crop(sg_node *node, int j, const sg_exchange_info *info) {
  sg_status st = SG_OK;
  sg_var *v = node->out[j];
  sg_tensor src, dst = {0};
  int64_t off[SG_TENSOR_MAX_DIMS] = {0}, shape[SG_TENSOR_MAX_DIMS];
  shape[0] = v->value.shape[0];
  shape[1] = v->value.shape[1];
  for (int d = 0; d < info->nsp; ++d) {
    if (v->value.shape[2 + d] != info->natural[d])
      SG_RAISE(SG_ERR_SHAPE, "%s: output %d has extent %lld in spatial dim %d, the window gives "
               "%lld", node->op->name, j, (long long)v->value.shape[2 + d], d,
               (long long)info->natural[d]);
    off[2 + d] = info->crop[d];
    shape[2 + d] = info->out_local[d];
  }
  SG_TRY(ag_alloc(&dst, v->value.dtype, v->value.ndim, shape));
  SG_TRY(sg_tensor_view(&v->value, off, shape, &src));
  SG_TRY(sg_tensor_copy(&dst, &src));
  ag_free(&v->value);
  v->value = dst;
  dst.owns = 0;
  node->cropped |= 1u << j;
fail:
  ag_free(&dst);
  return st;
}

/* Output j summed over the mesh dims that split the inputs (rank order). */
static sg_status ag_partial_sum(sg_node *node, sg_var *v) {
  sg_status st = SG_OK;
  double *buf = NULL;
  sg_group_t g = NULL;
  const int64_t n = ag_numel(&v->value);
  SG_TRY(sg_node_group(node, SG_SPLIT_BATCH | SG_SPLIT_CHANNEL | SG_SPLIT_SPACE, &g));
  if (!g || n == 0) goto fail;
  buf = malloc((size_t)n * sizeof *buf);
  if (!buf) SG_RAISE(SG_ERR_ALLOC, "partial sum");
  const int f32 = v->value.dtype == SG_DTYPE_F32;
  for (int64_t i = 0; i < n; ++i)
    buf[i] = f32 ? (double)((const float *)v->value.data)[i] : ((const double *)v->value.data)[i];
  SG_TRY(sg_sum_allreduce(buf, n, sg_group_comm(g)));
  for (int64_t i = 0; i < n; ++i) {
    if (f32)
      ((float *)v->value.data)[i] = (float)buf[i];
    else
      ((double *)v->value.data)[i] = buf[i];
  }
fail:
  free(buf);
  return st;
}

/* Outputs of a sharded node: crop, then their sharding and global shape. */
static sg_status ag_outputs_sharding(sg_node *node) {
  sg_status st = SG_OK;
  const sg_var *ref = ag_ref_input(node);
  sg_exchange_info info;
  memset(&info, 0, sizeof info);
  if (node->has_window) info = ag_node_info(node);
  for (int j = 0; j < node->nout; ++j) {
    sg_var *v = node->out[j];
    if (node->op->rule.out == SG_OUT_PARTIAL) {
      SG_TRY(ag_partial_sum(node, v));
      continue;
    }
    if (node->op->rule.out != SG_OUT_LIKE_INPUT) continue;
    if (v->value.ndim != ref->value.ndim)
      SG_RAISE(SG_ERR_SHAPE, "%s: output %d has %d dims, its sharded input '%s' %d",
               node->op->name, j, v->value.ndim, ref->name, ref->value.ndim);
    if (node->has_window && info.cropped) SG_TRY(ag_crop(node, j, &info));
    for (int t = 0; t < v->value.ndim; ++t) {
      int64_t want = v->value.shape[t], g = want;
      if (ag_dim_sharded(node, t)) {
        int win = node->has_window && t >= 2;
        want = win ? info.out_local[t - 2] : ref->value.shape[t];
        g = win ? info.out_global[t - 2] : ref->global_shape[t];
      }
      if (v->value.shape[t] != want)
        SG_RAISE(SG_ERR_SHAPE, "%s: output %d has extent %lld in sharded dim %d, this rank's "
                 "share is %lld", node->op->name, j, (long long)v->value.shape[t], t,
                 (long long)want);
      v->global_shape[t] = g;
    }
    v->mesh = node->mesh;
    memcpy(v->placements, node->placements, sizeof v->placements);
  }
fail:
  return st;
}

sg_status sg_node_group(const sg_node *node, unsigned which, sg_group_t *g) {
  sg_status st = SG_OK;
  if (!g) SG_RAISE(SG_ERR_INVALID_ARG, "node group: NULL argument");
  *g = NULL;
  if (!node || !node->mesh) goto fail;
  unsigned mask = ((which & SG_SPLIT_BATCH) ? node->split_batch : 0) |
                  ((which & SG_SPLIT_CHANNEL) ? node->split_channel : 0) |
                  ((which & SG_SPLIT_SPACE) ? node->split_space : 0);
  if (mask) SG_TRY(sg_mesh_group(node->mesh, mask, g));
fail:
  return st;
}

const int64_t *sg_node_in_global_shape(const sg_node *node, int i) {
  if (!node || i < 0 || i >= node->nin) return NULL;
  return sg_var_global_shape(node->in[i]);
}

/* ---- apply ------------------------------------------------------------------ */

/* Everything before the first message: checks, the node, its margins on one
 * process or its cached exchange, the output variables. */
static sg_status ag_apply_prepare(sg_tape_t tape, const sg_op_def *op, int nin,
                                  sg_var *const *in, int nout, const sg_op_window *win,
                                  const void *attr, size_t attr_bytes, sg_node **pnode) {
  sg_status st = SG_OK;
  sg_node *node = calloc(1, sizeof *node);
  if (!node) SG_RAISE(SG_ERR_ALLOC, "node");
  *pnode = node;
  node->op = op;
  node->nin = nin;
  node->nout = nout;
  for (int i = 0; i < nin; ++i) node->in[i] = in[i];
  if (attr_bytes) memcpy(node->attr, attr, attr_bytes);
  SG_TRY(ag_node_sharding(node));
  if (op->rule.windowed_input >= 0) {
    if (!win) SG_RAISE(SG_ERR_INVALID_ARG, "%s needs a window", op->name);
    if (op->rule.windowed_input >= nin)
      SG_RAISE(SG_ERR_INTERNAL, "%s: windowed input %d of %d", op->name,
               op->rule.windowed_input, nin);
    const sg_var *x = in[op->rule.windowed_input];
    if (win->nsp < 1 || win->nsp > SG_OPS_MAX_SPATIAL || x->value.ndim != 2 + win->nsp)
      SG_RAISE(SG_ERR_SHAPE, "%s: input has %d dims, the window is for (N, C) + %d spatial",
               op->name, x->value.ndim, win->nsp);
    node->has_window = 1;
    node->win = *win;
    if (node->mesh && !x->mesh)
      SG_RAISE(SG_ERR_INVALID_ARG, "%s: the windowed input '%s' is not sharded but other inputs "
               "are", op->name, x->name);
    if (node->mesh) {
      SG_TRY(ag_node_exchange(tape, node, x));
    } else {
      SG_TRY(ag_make_margins(node, x));
      if (node->xin.owns) tape->bytes += ag_nbytes(&node->xin);
    }
  }
  SG_TRY(ag_grow((void **)&tape->owned, &tape->cap_owned, tape->nowned + nout,
                 sizeof *tape->owned));
  int requires = 0;
  for (int i = 0; i < nin; ++i) requires |= in[i]->requires_grad;
  requires = requires && tape->grad_enabled;
  for (int j = 0; j < nout; ++j) {
    sg_var *v = calloc(1, sizeof *v);
    if (!v) SG_RAISE(SG_ERR_ALLOC, "variable");
    tape->owned[tape->nowned++] = v;
    snprintf(v->name, sizeof v->name, "%s.%d", op->name, j);
    v->requires_grad = requires;
    node->out[j] = v;
  }
fail:
  return st;
}

/* The exchange (sharded), the forward, the outputs' sharding. */
static sg_status ag_apply_run(sg_tape_t tape, sg_node *node) {
  sg_status st = SG_OK;
  if (node->mesh && node->has_window) {
    const sg_var *x = node->in[node->op->rule.windowed_input];
    if (ag_node_info(node).identity) {
      node->xin = x->value;
      node->xin.owns = 0;
    } else {
      SG_TRY(sg_sharded_exchange_forward((sg_sharded_exchange_t)node->ex, &x->value, &node->xin));
      if (node->xin.owns) tape->bytes += ag_nbytes(&node->xin);
    }
  }
  ag_current_tape = tape;
  st = node->op->forward(node);
  ag_current_tape = NULL;
  if (st != SG_OK) goto fail;
  for (int j = 0; j < node->nout; ++j)
    if (!node->out[j]->value.data && ag_numel(&node->out[j]->value) != 0)
      SG_RAISE(SG_ERR_INTERNAL, "%s did not produce output %d", node->op->name, j);
  if (node->mesh) SG_TRY(ag_outputs_sharding(node));
fail:
  return st;
}

/* The inputs' data: NULL only for an empty tensor (an empty shard, e.g. a
 * rank with no samples of a batch split over more data ranks than samples),
 * one dtype. */
static sg_status ag_check_inputs(const sg_op_def *op, int nin, sg_var *const *in) {
  sg_status st = SG_OK;
  for (int i = 0; i < nin; ++i) {
    if (!in[i]->value.data && (in[i]->value.ndim < 1 || ag_numel(&in[i]->value) != 0))
      SG_RAISE(SG_ERR_INVALID_ARG, "%s: input %d ('%s') is released (no data)", op->name, i, in[i]->name);
    if (in[i]->value.dtype != in[0]->value.dtype)
      SG_RAISE(SG_ERR_SHAPE, "%s: input %d is %s, input 0 is %s", op->name, i,
               sg_dtype_name(in[i]->value.dtype), sg_dtype_name(in[0]->value.dtype));
  }
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
  for (int i = 0; i < nin; ++i)
    if (!in[i]) SG_RAISE(SG_ERR_INVALID_ARG, "%s: input %d is NULL", op->name, i);
  if (tape->collecting) SG_TRY(ag_collect(tape, op->name, nin, in));
  const int r = ag_sharded_ref(op, nin, in);
  const MPI_Comm comm =
      ag_agree_comm(tape, r >= 0 ? sg_mesh_comm(in[r]->mesh) : MPI_COMM_NULL, ag_hooked(tape, nin, in));
  int requires = 0;
  for (int i = 0; i < nin; ++i) requires |= in[i]->requires_grad;
  requires = requires && tape->grad_enabled;
  /* hooks first (a released parameter is gathered here), then the checks;
   * every rank agrees before the exchange and after the forward */
  st = ag_call_param_hooks(tape, AG_PRE_USE, nin, in);
  if (st == SG_OK) st = ag_check_inputs(op, nin, in);
  /* before the preparation, which may create a halo plan (collective) */
  st = ag_agree(comm, st);
  if (st == SG_OK) st = ag_apply_prepare(tape, op, nin, in, nout, win, attr, attr_bytes, &node);
  st = ag_agree(comm, st);
  if (st != SG_OK) goto fail;
  st = ag_apply_run(tape, node);
  if (st == SG_OK) st = ag_call_param_hooks(tape, AG_POST_USE, nin, in);
  st = ag_agree(comm, st);
  if (st != SG_OK) goto fail;
  for (int j = 0; j < nout; ++j) {
    if (!op->rule.keep_f32) ag_store_round(tape, &node->out[j]->value);
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

/* ---- backward ----------------------------------------------------------------- */

typedef struct ag_bwd {
  enum { DIRECT = 0, ADD, PAD, IDENT } how[SG_NODE_MAX_IN];
  sg_tensor tmp[SG_NODE_MAX_IN];
  sg_tensor tmp2;
  sg_tensor grad[SG_NODE_MAX_OUT]; /* cropped outputs: their own gradients */
  unsigned swapped;
} ag_bwd;

/* Input i takes output 0's gradient unchanged (sg_op_rule.grad_identity). */
static int ag_grad_identity(const sg_node *node, int i) {
  const sg_var *v = node->in[i], *o = node->out[0];
  return (node->op->rule.grad_identity & (1u << i)) && node->op->slots[i] == SG_SLOT_ACT &&
         i != node->op->rule.windowed_input && !node->cropped && node->nout >= 1 &&
         v->value.dtype == o->value.dtype && ag_numel(&v->value) == ag_numel(&o->value);
}

/* Gradient buffers, the op's backward (outputs' gradients zero-padded to
 * the window's natural extent where the forward was cropped). */
static sg_status ag_backward_local(sg_tape_t tape, sg_node *node, ag_bwd *b) {
  sg_status st = SG_OK;
  const int wi = node->op->rule.windowed_input;
  for (int j = 0; j < node->nout; ++j) SG_TRY(ag_ensure_grad(tape, node->out[j]));
  for (int i = 0; i < node->nin; ++i) {
    sg_var *v = node->in[i];
    node->gin[i] = NULL;
    if (!v->requires_grad || ag_numel(&v->value) == 0) continue;
    /* activation inputs the op's backward writes whole: no zero fill */
    const int zero = node->op->slots[i] == SG_SLOT_PARAM ||
                     !(node->op->rule.writes_gin & (1u << i));
    if (ag_grad_identity(node, i)) {
      b->how[i] = IDENT; /* routed after the backward, gin[i] stays NULL */
    } else if (i == wi && node->xin.owns) {
      SG_TRY(ag_alloc_z(&b->tmp[i], node->xin.dtype, node->xin.ndim,
                        node->xin.shape, zero));
      node->gin[i] = b->tmp[i].data;
      b->how[i] = PAD;
    } else if (node->op->slots[i] == SG_SLOT_PARAM) {
      SG_TRY(ag_ensure_grad(tape, v));
      v->has_grad = 1;
      node->gin[i] = v->grad.data;
      b->how[i] = DIRECT;
    } else if (!v->is_leaf && !v->has_grad) {
      SG_TRY(ag_ensure_grad_z(tape, v, zero));
      v->has_grad = 1;
      node->gin[i] = v->grad.data;
      b->how[i] = DIRECT;
    } else {
      SG_TRY(ag_alloc_z(&b->tmp[i], v->value.dtype, v->value.ndim,
                        v->value.shape, zero));
      node->gin[i] = b->tmp[i].data;
      b->how[i] = ADD;
    }
  }
  if (node->cropped) {
    sg_exchange_info info = ag_node_info(node);
    for (int j = 0; j < node->nout; ++j) {
      if (!(node->cropped & (1u << j))) continue;
      sg_var *v = node->out[j];
      int64_t off[SG_TENSOR_MAX_DIMS] = {0}, shape[SG_TENSOR_MAX_DIMS];
      shape[0] = v->value.shape[0];
      shape[1] = v->value.shape[1];
      for (int d = 0; d < info.nsp; ++d) {
        off[2 + d] = info.crop[d];
        shape[2 + d] = info.natural[d];
      }
      sg_tensor part;
      SG_TRY(ag_alloc(&b->grad[j], v->grad.dtype, v->grad.ndim, shape));
      SG_TRY(sg_tensor_view(&b->grad[j], off, v->grad.shape, &part));
      SG_TRY(sg_tensor_copy(&part, &v->grad));
      sg_tensor t = v->grad; /* swap: the op sees the natural extent */
      v->grad = b->grad[j];
      b->grad[j] = t;
      b->swapped |= 1u << j;
    }
  }
  ag_current_tape = tape;
  st = node->op->backward(node);
  ag_current_tape = NULL;
fail:
  for (int j = 0; j < node->nout; ++j)
    if (b->swapped & (1u << j)) {
      sg_tensor t = node->out[j]->grad;
      node->out[j]->grad = b->grad[j];
      b->grad[j] = t;
    }
  return st;
}

/* The adjoint of the margins, and the routing of the input gradients. */
static sg_status ag_backward_route(sg_tape_t tape, sg_node *node, ag_bwd *b) {
  sg_status st = SG_OK;
  /* identity inputs: the output's gradient, read from gsrc (still alive
   * when handed over: the input that took it is released after this node) */
  sg_var *o = node->out[0];
  const void *gsrc = node->nout > 0 ? o->grad.data : NULL;
  for (int i = 0; i < node->nin; ++i) {
    sg_var *v = node->in[i];
    if (b->how[i] == IDENT && v->requires_grad && ag_numel(&v->value) > 0) {
      if (!v->is_leaf && !v->has_grad && !v->grad.data && o->owns_grad && o->grad.data == gsrc) {
        v->grad = o->grad; /* hand over: same bytes on the tape's account */
        v->owns_grad = 1;
        memset(&o->grad, 0, sizeof o->grad);
        o->owns_grad = 0;
      } else if (!v->is_leaf && !v->has_grad) {
        SG_TRY(ag_ensure_grad_z(tape, v, 0));
        memcpy(v->grad.data, gsrc, ag_nbytes(&v->grad));
      } else {
        SG_TRY(ag_ensure_grad(tape, v));
        sg_tensor src = v->grad;
        src.data = (void *)gsrc;
        ag_add_into(&v->grad, &src);
      }
      v->has_grad = 1;
      continue;
    }
    if (!node->gin[i]) continue;
    if (b->how[i] == PAD) {
      const sg_op_window *w = &node->win;
      SG_TRY(ag_alloc(&b->tmp2, v->value.dtype, v->value.ndim, v->value.shape));
      if (node->mesh)
        SG_TRY(sg_sharded_exchange_adjoint((sg_sharded_exchange_t)node->ex, b->tmp[i].data,
                                           &b->tmp2));
      else
        SG_TRY(sg_pad_backward(v->value.dtype, w->nsp, v->value.shape[0] * v->value.shape[1],
                               v->value.shape + 2, (const int64_t(*)[2])w->pad, w->mode,
                               b->tmp[i].data, b->tmp2.data));
      SG_TRY(ag_ensure_grad(tape, v));
      if (!v->is_leaf && !v->has_grad)
        memcpy(v->grad.data, b->tmp2.data, ag_nbytes(&b->tmp2));
      else
        ag_add_into(&v->grad, &b->tmp2);
      v->has_grad = 1;
      ag_free(&b->tmp2);
    } else if (b->how[i] == ADD) {
      SG_TRY(ag_ensure_grad(tape, v));
      ag_add_into(&v->grad, &b->tmp[i]);
      v->has_grad = 1;
    }
  }
fail:
  return st;
}

/* Run one node's backward and route its input gradients. A sharded node
 * agrees before the adjoint exchange and at the end; the parameter hooks
 * (pre_backward before the kernels, post_backward_use and grad_ready after)
 * join those agreements (or the tape's, for a plain node). */
static sg_status ag_node_backward(sg_tape_t tape, sg_node *node) {
  sg_status st = SG_OK;
  if (node->op == &ag_ckpt_op) return ag_ckpt_backward(tape, node);
  ag_bwd b;
  memset(&b, 0, sizeof b);
  /* every consumer has added its part: the activation gradient is whole */
  for (int j = 0; j < node->nout; ++j) ag_store_round(tape, &node->out[j]->grad);
  const int hooked = ag_hooked(tape, node->nin, node->in);
  const MPI_Comm comm = ag_agree_comm(tape, node->mesh ? sg_mesh_comm(node->mesh) : MPI_COMM_NULL, hooked);
  st = ag_call_param_hooks(tape, AG_PRE_BACKWARD, node->nin, node->in);
  /* the kernels may be collective (statistics): a failed hook must not
   * leave the other ranks in them */
  if (hooked) st = ag_agree(comm, st);
  if (st == SG_OK) st = ag_backward_local(tape, node, &b);
  if (node->mesh && node->has_window) st = ag_agree(comm, st);
  if (st == SG_OK) st = ag_backward_route(tape, node, &b);
  if (st == SG_OK) st = ag_call_param_hooks(tape, AG_POST_BACKWARD_USE, node->nin, node->in);
  for (int i = 0; i < node->nin && st == SG_OK; ++i) {
    sg_var *v = node->in[i];
    if (!v->requires_grad) continue;
    if (--v->pending == 0 && v->is_param) st = ag_call_hooks(tape, AG_GRAD_READY, v);
  }
  st = ag_agree(comm, st);
  for (int i = 0; i < SG_NODE_MAX_IN; ++i) ag_free(&b.tmp[i]);
  for (int j = 0; j < SG_NODE_MAX_OUT; ++j) ag_free(&b.grad[j]);
  ag_free(&b.tmp2);
  return st;
}

/* Walk the tape in reverse from gradients already seeded. */
static sg_status ag_backward_walk(sg_tape_t tape) {
  sg_status st = SG_OK;
  for (int k = tape->nnodes - 1; k >= 0; --k) {
    sg_node *node = tape->nodes[k];
    SG_TRY(ag_node_backward(tape, node));
    /* every consumer of this node's outputs ran before it: release them */
    for (int j = 0; j < node->nout; ++j) ag_var_drop_memory(tape, node->out[j]);
    ag_node_release(tape, node);
    tape->nodes[k] = NULL;
    tape->nnodes = k;
  }
  for (int k = 0; k < tape->nhooks && st == SG_OK; ++k)
    if (tape->hooks[k].post_backward) st = tape->hooks[k].post_backward(tape, tape->hooks[k].user);
  st = ag_agree(ag_agree_comm(tape, MPI_COMM_NULL, tape->nhooks > 0), st);
fail:
  return st;
}

/* Checks of a backward seed (not collective). */
static sg_status ag_seed_check(const sg_var *v, const char *what) {
  sg_status st = SG_OK;
  if (!v) SG_RAISE(SG_ERR_INVALID_ARG, "backward: %s is NULL", what);
  if (!v->producer || !v->requires_grad)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "backward from '%s': not produced on this tape with gradients "
             "(no-grad mode, or no input requires a gradient)", v->name);
fail:
  return st;
}

sg_status sg_tape_backward(sg_tape_t tape, sg_var *loss) {
  sg_status st = SG_OK;
  if (!tape) SG_RAISE(SG_ERR_INVALID_ARG, "tape and loss are required");
  SG_TRY(ag_seed_check(loss, "the loss"));
  if (ag_numel(&loss->value) != 1)
    SG_RAISE(SG_ERR_SHAPE, "backward from '%s': not a scalar (%lld elements)",
             loss->name, (long long)ag_numel(&loss->value));
  SG_TRY(ag_ensure_grad(tape, loss));
  if (loss->grad.dtype == SG_DTYPE_F32)
    *(float *)loss->grad.data = 1.0f;
  else
    *(double *)loss->grad.data = 1.0;
  loss->has_grad = 1;
  SG_TRY(ag_backward_walk(tape));
fail:
  if (tape) sg_tape_clear(tape);
  return st;
}

sg_status sg_tape_backward_from(sg_tape_t tape, int n, sg_var *const *vars, const sg_tensor *grads) {
  sg_status st = SG_OK;
  if (!tape || n < 1 || !vars || !grads)
    SG_RAISE(SG_ERR_INVALID_ARG, "backward from pairs: tape, n >= 1, variables and gradients are required");
  for (int i = 0; i < n; ++i) {
    sg_var *v = vars[i];
    const sg_tensor *g = &grads[i];
    SG_TRY(ag_seed_check(v, "a variable"));
    if (g->dtype != v->value.dtype || g->ndim != v->value.ndim)
      SG_RAISE(SG_ERR_SHAPE, "backward from '%s': gradient %d is %s with %d dims, the variable %s with %d",
               v->name, i, sg_dtype_name(g->dtype), g->ndim, sg_dtype_name(v->value.dtype), v->value.ndim);
    for (int d = 0; d < g->ndim; ++d)
      if (g->shape[d] != v->value.shape[d])
        SG_RAISE(SG_ERR_SHAPE, "backward from '%s': gradient %d has extent %lld in dim %d, the variable %lld",
                 v->name, i, (long long)g->shape[d], d, (long long)v->value.shape[d]);
    if (ag_numel(&v->value) == 0) continue;
    if (!g->data) SG_RAISE(SG_ERR_INVALID_ARG, "backward from '%s': gradient %d has no data", v->name, i);
    SG_TRY(ag_ensure_grad(tape, v));
    sg_tensor src = v->grad;
    src.data = g->data;
    if (v->has_grad) ag_add_into(&v->grad, &src); /* the same variable twice: sum */
    else memcpy(v->grad.data, g->data, ag_nbytes(&v->grad));
    v->has_grad = 1;
  }
  SG_TRY(ag_backward_walk(tape));
fail:
  if (tape) sg_tape_clear(tape);
  return st;
}

/* ---- activation checkpointing ------------------------------------------------ */

static sg_status ag_coll_add(sg_tape_t t, sg_var *v) {
  sg_status st = SG_OK;
  for (int i = 0; i < t->ncoll; ++i)
    if (t->coll[i] == v) goto fail;
  SG_TRY(ag_grow((void **)&t->coll, &t->cap_coll, t->ncoll + 1, sizeof *t->coll));
  t->coll[t->ncoll++] = v;
fail:
  return st;
}

/* An op (or a nested block) of a checkpointed block's forward reads in:
 * note the leaves requiring gradients; an activation must be one of the
 * block's inputs or made inside the block. The same on every rank. */
static sg_status ag_collect(sg_tape_t t, const char *who, int nin, sg_var *const *in) {
  sg_status st = SG_OK;
  for (int i = 0; i < nin; ++i) {
    sg_var *v = in[i];
    int ok = v->is_leaf;
    if (v->is_leaf && v->requires_grad) SG_TRY(ag_coll_add(t, v));
    for (int k = 0; !ok && k < t->ck_nin; ++k) ok = t->ck_in[k] == v;
    for (int k = t->nowned - 1; !ok && k >= 0; --k) ok = t->owned[k] == v;
    if (!ok)
      SG_RAISE(SG_ERR_INVALID_ARG, "checkpointed block: %s reads '%s', an activation made outside the block: "
               "pass it as one of the block's inputs", who, v->name);
  }
fail:
  return st;
}

/* The tape's child, its listeners refreshed: the tape's, less grad_ready
 * and post_backward (the checkpoint node fires grad_ready itself). */
static sg_status ag_child(sg_tape_t tape, sg_tape_t *child) {
  sg_status st = SG_OK;
  if (!tape->child) SG_TRY(sg_tape_create(&tape->child));
  sg_tape_t c = tape->child;
  c->nhooks = tape->nhooks;
  for (int k = 0; k < tape->nhooks; ++k) {
    c->hooks[k] = tape->hooks[k];
    c->hooks[k].grad_ready = NULL;
    c->hooks[k].post_backward = NULL;
    c->hook_id[k] = tape->hook_id[k];
  }
  c->comm = tape->comm;
  c->store_dt = tape->store_dt;
  c->grad_enabled = 1;
  *child = c;
fail:
  return st;
}

/* The stand-in of input x inside the block: a view of its value, an
 * activation (not a leaf) of x's sharding. */
static void ag_stand_in(sg_var *s, const sg_var *x) {
  memset(s, 0, sizeof *s);
  s->value = x->value;
  s->value.owns = 0;
  s->requires_grad = x->requires_grad;
  snprintf(s->name, sizeof s->name, "%s", x->name);
  s->mesh = x->mesh;
  memcpy(s->placements, x->placements, sizeof s->placements);
  memcpy(s->global_shape, x->global_shape, sizeof s->global_shape);
}

/* Over which communicator a checkpoint agrees: its first sharded input's
 * mesh, else the tape's (when listeners could fail). */
static MPI_Comm ag_ckpt_comm(sg_tape_t tape, int nin, sg_var *const *in, int *ref) {
  *ref = -1;
  for (int i = 0; i < nin && *ref < 0; ++i)
    if (in[i]->mesh) *ref = i;
  return ag_agree_comm(tape, *ref >= 0 ? sg_mesh_comm(in[*ref]->mesh) : MPI_COMM_NULL, tape->nhooks > 0);
}

sg_status sg_ag_checkpoint(sg_tape_t tape, sg_block_fn fn, void *ctx, int nin, sg_var *const *in, int nout,
                           sg_var **out) {
  sg_status st = SG_OK;
  sg_tape_t c = NULL;
  sg_node *node = NULL;
  ag_ckpt *ck = NULL;
  sg_var stand[SG_NODE_MAX_IN], *sp[SG_NODE_MAX_IN], *co[SG_NODE_MAX_OUT];
  int recorded = 0, ref = -1;
  if (!tape || !fn || !in || !out)
    SG_RAISE(SG_ERR_INVALID_ARG, "checkpoint: tape, block function, inputs and outputs are required");
  if (nin < 1 || nin > SG_NODE_MAX_IN || nout < 1 || nout > SG_NODE_MAX_OUT)
    SG_RAISE(SG_ERR_INVALID_ARG, "checkpoint: %d inputs, %d outputs (1..%d, 1..%d)", nin, nout, SG_NODE_MAX_IN,
             SG_NODE_MAX_OUT);
  for (int i = 0; i < nin; ++i)
    if (!in[i]) SG_RAISE(SG_ERR_INVALID_ARG, "checkpoint: input %d is NULL", i);
  sg_var *inl[SG_NODE_MAX_IN]; /* out may alias in (h = block(h)) */
  for (int i = 0; i < nin; ++i) inl[i] = in[i];
  in = inl;
  for (int j = 0; j < nout; ++j) out[j] = NULL;
  if (tape->collecting) SG_TRY(ag_collect(tape, "a nested checkpoint", nin, in));
  const MPI_Comm comm = ag_ckpt_comm(tape, nin, in, &ref);
  /* this rank's preparation may fail alone: agree before the block runs */
  st = ag_child(tape, &c);
  if (st == SG_OK) {
    node = calloc(1, sizeof *node);
    if (!node) st = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "checkpoint node");
  }
  st = ag_agree(comm, st);
  if (st != SG_OK) goto fail;
  for (int i = 0; i < nin; ++i) {
    ag_stand_in(&stand[i], in[i]);
    sp[i] = &stand[i];
  }
  for (int j = 0; j < nout; ++j) co[j] = NULL;
  /* the block without recording, the leaves it uses noted */
  c->grad_enabled = 0;
  c->collecting = 1;
  c->ck_in = sp;
  c->ck_nin = nin;
  c->ncoll = 0;
  st = fn(c, ctx, sp, co);
  c->collecting = 0;
  c->ck_in = NULL;
  c->ck_nin = 0;
  /* outputs: made by the block's ops, distinct */
  for (int j = 0; j < nout && st == SG_OK; ++j) {
    int mine = 0;
    for (int k = 0; co[j] && k < c->nowned && !mine; ++k) mine = c->owned[k] == co[j];
    for (int i = 0; mine && i < j; ++i) mine = co[i] != co[j];
    if (!mine)
      st = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__, "checkpointed block: output %d is %s", j,
                        !co[j] ? "NULL" : "not a variable made by the block's ops (an input, a leaf or "
                                          "another output returned as is)");
  }
  if (st == SG_OK)
    st = sg_calloc(sg_device_host(), sizeof *ck + (size_t)(c->ncoll > 0 ? c->ncoll : 1) * sizeof(sg_var *),
                   (void **)&ck);
  if (st == SG_OK) st = ag_grow((void **)&tape->owned, &tape->cap_owned, tape->nowned + nout, sizeof *tape->owned);
  if (st == SG_OK) st = ag_grow((void **)&tape->nodes, &tape->cap_nodes, tape->nnodes + 1, sizeof *tape->nodes);
  st = ag_agree(comm, st);
  if (st != SG_OK) goto fail;
  /* the node: its inputs, the leaves used inside, the outputs (the block's
   * values moved over) */
  node->op = &ag_ckpt_op;
  node->nin = nin;
  node->nout = nout;
  for (int i = 0; i < nin; ++i) node->in[i] = in[i];
  if (ref >= 0) {
    node->mesh = in[ref]->mesh;
    memcpy(node->placements, in[ref]->placements, sizeof node->placements);
  }
  ck->fn = fn;
  ck->ctx = ctx;
  ck->ncap = c->ncoll;
  memcpy(ck->cap, c->coll, (size_t)c->ncoll * sizeof *ck->cap);
  node->saved = ck;
  node->saved_bytes = sizeof *ck + (size_t)(c->ncoll > 0 ? c->ncoll : 1) * sizeof(sg_var *);
  tape->bytes += node->saved_bytes;
  ck = NULL;
  int requires = 0;
  for (int i = 0; i < nin; ++i) requires |= in[i]->requires_grad;
  for (int k = 0; k < c->ncoll; ++k) requires |= c->coll[k]->requires_grad;
  requires = requires && tape->grad_enabled;
  for (int j = 0; j < nout; ++j) {
    sg_var *v = calloc(1, sizeof *v);
    if (!v) SG_RAISE(SG_ERR_ALLOC, "variable");
    tape->owned[tape->nowned++] = v;
    snprintf(v->name, sizeof v->name, "%s.%d", ag_ckpt_op.name, j);
    v->requires_grad = requires;
    if (co[j]->owns_value) { /* move */
      v->value = co[j]->value;
      v->owns_value = 1;
      c->bytes -= ag_nbytes(&co[j]->value);
      memset(&co[j]->value, 0, sizeof co[j]->value);
      co[j]->owns_value = 0;
    } else {
      SG_TRY(ag_alloc_z(&v->value, co[j]->value.dtype, co[j]->value.ndim, co[j]->value.shape, 0));
      v->owns_value = 1;
      if (ag_numel(&v->value) > 0) memcpy(v->value.data, co[j]->value.data, ag_nbytes(&v->value));
    }
    v->mesh = co[j]->mesh;
    memcpy(v->placements, co[j]->placements, sizeof v->placements);
    memcpy(v->global_shape, co[j]->global_shape, sizeof v->global_shape);
    node->out[j] = v;
    tape->bytes += ag_nbytes(&v->value);
  }
  /* an enclosing block's forward: the leaves of this one are its too */
  if (tape->collecting)
    for (int k = 0; k < c->ncoll; ++k) SG_TRY(ag_coll_add(tape, c->coll[k]));
  if (requires) {
    const ag_ckpt *kk = node->saved;
    tape->nodes[tape->nnodes++] = node;
    recorded = 1;
    for (int i = 0; i < nin; ++i)
      if (in[i]->requires_grad) in[i]->pending++;
    for (int k = 0; k < kk->ncap; ++k) kk->cap[k]->pending++;
    for (int j = 0; j < nout; ++j) node->out[j]->producer = node;
  }
  for (int j = 0; j < nout; ++j) out[j] = node->out[j];
fail:
  if (c) {
    c->collecting = 0;
    c->ck_in = NULL;
    c->ck_nin = 0;
    c->ncoll = 0;
    c->grad_enabled = 1;
    sg_tape_clear(c); /* the block's activations */
  }
  if (ck) sg_free(sg_device_host(), (void **)&ck);
  if (!recorded && node) {
    if (st != SG_OK)
      for (int j = 0; j < nout; ++j) out[j] = NULL;
    ag_node_release(tape, node);
  }
  return st;
}

/* Backward of a checkpoint node: the block again, with gradients, on the
 * child; backward through it from the outputs' gradients; the inputs'
 * gradients handed back (accumulated in the order backward without the
 * checkpoint would use); then the node's uses of its inputs and of the
 * block's parameters are done (grad_ready fires here, once). */
static sg_status ag_ckpt_backward(sg_tape_t tape, sg_node *node) {
  sg_status st = SG_OK;
  const ag_ckpt *ck = node->saved;
  sg_tape_t c = NULL;
  sg_var stand[SG_NODE_MAX_IN], *sp[SG_NODE_MAX_IN], *co[SG_NODE_MAX_OUT];
  int ref = -1;
  const MPI_Comm comm = ag_ckpt_comm(tape, node->nin, node->in, &ref);
  for (int i = 0; i < node->nin; ++i) {
    ag_stand_in(&stand[i], node->in[i]);
    sp[i] = &stand[i];
  }
  for (int j = 0; j < node->nout; ++j) co[j] = NULL;
  st = ag_child(tape, &c);
  for (int j = 0; j < node->nout && st == SG_OK; ++j) st = ag_ensure_grad(tape, node->out[j]);
  /* an input that has a gradient already (a leaf's accumulates; an
   * activation's from uses after the block): the block adds into it, as
   * the ops would on this tape */
  for (int i = 0; i < node->nin && st == SG_OK; ++i) {
    sg_var *v = node->in[i];
    if (!v->requires_grad || ag_numel(&v->value) == 0 || !(v->is_leaf || v->has_grad)) continue;
    st = ag_ensure_grad(tape, v);
    if (st != SG_OK) break;
    stand[i].grad = v->grad;
    stand[i].grad.owns = 0;
    stand[i].has_grad = 1;
  }
  st = ag_agree(comm, st);
  if (st != SG_OK) goto fail;
  c->grad_enabled = 1;
  SG_TRY(ck->fn(c, ck->ctx, sp, co));
  /* seed: the outputs' gradients, lent (not copied) */
  for (int j = 0; j < node->nout; ++j) {
    if (!co[j]) SG_RAISE(SG_ERR_INVALID_ARG, "checkpointed block: output %d is NULL in the recomputation", j);
    if (!co[j]->requires_grad || !co[j]->producer || ag_numel(&co[j]->value) == 0) continue;
    if (ag_numel(&co[j]->value) != ag_numel(&node->out[j]->value) || co[j]->grad.data)
      SG_RAISE(SG_ERR_INTERNAL, "checkpointed block: output %d differs in the recomputation", j);
    co[j]->grad = node->out[j]->grad;
    co[j]->grad.owns = 0;
    co[j]->owns_grad = 0;
    co[j]->has_grad = 1;
  }
  SG_TRY(ag_backward_walk(c));
  /* the inputs' gradients that the block made itself: moved over */
  for (int i = 0; i < node->nin; ++i) {
    sg_var *v = node->in[i], *s = &stand[i];
    if (!s->owns_grad || !s->has_grad || !s->grad.data) continue;
    if (!v->grad.data) {
      v->grad = s->grad;
      v->owns_grad = 1;
      tape->bytes += ag_nbytes(&v->grad);
      memset(&s->grad, 0, sizeof s->grad);
      s->owns_grad = 0;
    } else {
      memcpy(v->grad.data, s->grad.data, ag_nbytes(&v->grad));
    }
    v->has_grad = 1;
  }
  /* the node's uses are done: its inputs', then the block's parameters'
   * (last used first, as backward without the checkpoint meets them) */
  for (int i = 0; i < node->nin && st == SG_OK; ++i) {
    sg_var *v = node->in[i];
    if (v->requires_grad && --v->pending == 0 && v->is_param) st = ag_call_hooks(tape, AG_GRAD_READY, v);
  }
  for (int k = ck->ncap - 1; k >= 0 && st == SG_OK; --k) {
    sg_var *v = ck->cap[k];
    if (--v->pending == 0 && v->is_param) st = ag_call_hooks(tape, AG_GRAD_READY, v);
  }
fail:
  if (c) {
    c->grad_enabled = 1;
    sg_tape_clear(c);
  }
  for (int i = 0; i < node->nin; ++i)
    if (stand[i].owns_grad) ag_free(&stand[i].grad);
  return ag_agree(comm, st);
}
