/* shardgrid — autograd tape: tensors, variables, the tape, hooks, memory. */
#include "op_registry_impl.h"
#include "autograd_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sg_comm.h"
#include "sg_device.h"

/* ---- tensors (host, contiguous) ------------------------------------------ */

int64_t ag_numel(const sg_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}

size_t ag_nbytes(const sg_tensor *t) {
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

sg_status ag_alloc_dz(sg_tensor *t, sg_device dev, sg_dtype dt, int ndim,
                      const int64_t *shape, int zero) {
  sg_status st = SG_OK;
  void *p = NULL;
  if (ndim < 1 || ndim > SG_TENSOR_MAX_DIMS)
    SG_RAISE(SG_ERR_SHAPE, "tensor with %d dims (1..%d)", ndim,
             SG_TENSOR_MAX_DIMS);
  for (int i = 0; i < ndim; ++i)
    if (shape[i] < 0) SG_RAISE(SG_ERR_SHAPE, "negative extent in dim %d", i);
  ag_describe(t, dt, ndim, shape, NULL, 1);
  t->device = dev;
  SG_TRY(ag_mem_alloc(dev, ag_nbytes(t), zero, &p));
  t->data = p;
fail:
  return st;
}

sg_status ag_alloc_z(sg_tensor *t, sg_dtype dt, int ndim, const int64_t *shape,
                     int zero) {
  return ag_alloc_dz(t, sg_device_host(), dt, ndim, shape, zero);
}

sg_status ag_alloc(sg_tensor *t, sg_dtype dt, int ndim, const int64_t *shape) {
  return ag_alloc_z(t, dt, ndim, shape, 1);
}

void ag_free(sg_tensor *t) {
  if (t->owns && t->data) ag_mem_free(t->device, &t->data);
  t->data = NULL;
  t->owns = 0;
}

/* y += x (same dtype and size). */
void ag_add_into(sg_tensor *y, const sg_tensor *x) {
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

sg_status sg_var_set_device(sg_var *v, sg_device dev) {
  sg_status st = SG_OK;
  if (!v) SG_RAISE(SG_ERR_INVALID_ARG, "set device: variable is NULL");
  if ((v->owns_value && v->value.data) || (v->owns_grad && v->grad.data))
    SG_RAISE(SG_ERR_INVALID_ARG,
             "set device of '%s': it owns host memory (give it the device "
             "memory: sg_var_init/sg_var_init_param with data and grad_data)",
             v->name);
  v->value.device = dev;
  v->grad.device = dev;
fail:
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
  if (v->grad.data)
    SG_TRY(ag_mem_zero(v->grad.device, v->grad.data, ag_nbytes(&v->grad)));
fail:
  return st;
}

double sg_var_item(const sg_var *v) {
  if (!v || !v->value.data || ag_numel(&v->value) != 1) return NAN;
  union {
    float f;
    double d;
  } u;
  const int f32 = v->value.dtype == SG_DTYPE_F32;
  if (ag_mem_copy(sg_device_host(), &u, v->value.device, v->value.data,
                  f32 ? sizeof u.f : sizeof u.d) != SG_OK)
    return NAN; /* a device copy failed */
  return f32 ? (double)u.f : u.d;
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
                                   const sg_placement *placements,
                                   const int64_t *global_shape) {
  sg_status st = SG_OK;
  const int nd = v->value.ndim;
  int64_t off[SG_TENSOR_MAX_DIMS], box[SG_TENSOR_MAX_DIMS];
  if (!placements || !global_shape)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "set sharding of '%s': placements and global shape are required",
             v->name);
  SG_TRY(sg_placements_check(sg_mesh_ndims(mesh), nd, placements));
  SG_TRY(sg_shardtensor_box(mesh, nd, global_shape, placements,
                            sg_mesh_rank(mesh), off, box));
  for (int d = 0; d < nd; ++d)
    if (box[d] != v->value.shape[d])
      SG_RAISE(
          SG_ERR_SHAPE,
          "set sharding of '%s': local extent %lld in dim %d, but this rank's box of the "
          "global tensor is %lld",
          v->name, (long long)v->value.shape[d], d, (long long)box[d]);
fail:
  return st;
}

sg_status sg_var_set_sharding(sg_var *v, sg_mesh_t mesh,
                              const sg_placement *placements,
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
  SG_TRY(sg_agree(sg_mesh_comm(mesh),
                  ag_sharding_check(v, mesh, placements, global_shape)));
  /* every rank must describe the same global tensor */
  uint64_t h = ag_hash(1469598103934665603ull, &nd, sizeof nd);
  h = ag_hash(h, &v->value.dtype, sizeof v->value.dtype);
  h = ag_hash(h, global_shape, (size_t)nd * sizeof *global_shape);
  for (int m = 0; m < md; ++m) {
    int k[2] = {(int)placements[m].kind,
                placements[m].kind == SG_PLACEMENT_SHARD ? placements[m].dim
                                                         : -1};
    h = ag_hash(h, k, sizeof k);
  }
  unsigned long long hh[2] = {h, ~h}, mx[2];
  SG_MPI(MPI_Allreduce(hh, mx, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX,
                       sg_mesh_comm(mesh)));
  if (mx[0] != hh[0] || mx[1] != hh[1])
    SG_RAISE(SG_ERR_INVALID_ARG,
             "set sharding of '%s': the ranks describe different global "
             "tensors (dtype, global shape or placements differ)",
             v->name);
  v->mesh = mesh;
  memset(v->placements, 0, sizeof v->placements);
  memcpy(v->placements, placements, (size_t)md * sizeof *placements);
  memset(v->global_shape, 0, sizeof v->global_shape);
  memcpy(v->global_shape, global_shape, (size_t)nd * sizeof *global_shape);
fail:
  return st;
}

/* Make sure a variable has a gradient buffer (zero-filled when new). */
sg_status ag_ensure_grad_z(sg_tape_t tape, sg_var *v, int zero) {
  sg_status st = SG_OK;
  if (v->grad.data || ag_numel(&v->value) == 0) goto fail;
  SG_TRY(ag_alloc_dz(&v->grad, v->value.device, v->value.dtype, v->value.ndim,
                     v->value.shape, zero));
  v->owns_grad = 1;
  if (!v->is_leaf) tape->bytes += ag_nbytes(&v->grad);
fail:
  return st;
}

sg_status ag_ensure_grad(sg_tape_t tape, sg_var *v) {
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
  for (int i = 0; i < (*tape)->nx; ++i)
    sg_sharded_exchange_destroy(&(*tape)->xcache[i].ex);
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
  if (!tape || !hooks)
    SG_RAISE(SG_ERR_INVALID_ARG, "add hooks: tape and hooks are required");
  if (tape->nhooks == SG_TAPE_MAX_HOOKS)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "add hooks: the tape has its %d listeners already",
             SG_TAPE_MAX_HOOKS);
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
      memmove(tape->hooks + k, tape->hooks + k + 1,
              (size_t)(tape->nhooks - k - 1) * sizeof *tape->hooks);
      memmove(tape->hook_id + k, tape->hook_id + k + 1,
              (size_t)(tape->nhooks - k - 1) * sizeof *tape->hook_id);
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


/* Call hook `which` of every listener for parameter v; the first failure
 * stops the calls. Not collective by itself. */
sg_status ag_call_hooks(sg_tape_t tape, ag_hook which, sg_var *v) {
  sg_status st = SG_OK;
  for (int k = 0; k < tape->nhooks && st == SG_OK; ++k) {
    const sg_hooks *h = &tape->hooks[k];
    sg_status (*f)(sg_var *, void *) = which == AG_PRE_USE    ? h->pre_use
                                       : which == AG_POST_USE ? h->post_use
                                       : which == AG_PRE_BACKWARD
                                           ? h->pre_backward
                                       : which == AG_POST_BACKWARD_USE
                                           ? h->post_backward_use
                                           : h->grad_ready;
    if (f) st = f(v, h->user);
  }
  return st;
}

/* The same for every parameter input of a node (inputs 0..nin). */
sg_status ag_call_param_hooks(sg_tape_t tape, ag_hook which, int nin,
                              sg_var *const *in) {
  sg_status st = SG_OK;
  if (tape->nhooks == 0) return SG_OK;
  for (int i = 0; i < nin && st == SG_OK; ++i)
    if (in[i] && in[i]->is_param) st = ag_call_hooks(tape, which, in[i]);
  return st;
}

/* 1 if a hook may run for one of the inputs (a parameter among them). */
int ag_hooked(const sg_tape_t tape, int nin, sg_var *const *in) {
  if (!tape->nhooks) return 0;
  for (int i = 0; i < nin; ++i)
    if (in[i] && in[i]->is_param) return 1;
  return 0;
}

/* The communicator over which an op agrees: its sharded inputs' mesh, else
 * the tape's (only when hooks could have failed). */
MPI_Comm ag_agree_comm(sg_tape_t tape, MPI_Comm mesh_comm, int hooked) {
  if (mesh_comm != MPI_COMM_NULL) return mesh_comm;
  return hooked ? tape->comm : MPI_COMM_NULL;
}

sg_status ag_agree(MPI_Comm comm, sg_status st) {
  return comm == MPI_COMM_NULL ? st : sg_agree(comm, st);
}

sg_status sg_tape_set_storage_dtype(sg_tape_t tape, sg_dtype dt) {
  sg_status st = SG_OK;
  if (!tape) SG_RAISE(SG_ERR_INVALID_ARG, "storage dtype: tape is NULL");
  if (dt != SG_DTYPE_F32 && dt != SG_DTYPE_BF16)
    SG_RAISE(SG_ERR_INVALID_ARG, "storage dtype: %s (f32 or bf16)",
             sg_dtype_name(dt));
  tape->store_dt = dt;
  if (tape->child) tape->child->store_dt = dt;
fail:
  return st;
}

sg_dtype sg_tape_storage_dtype(sg_tape_t tape) {
  return tape ? tape->store_dt : SG_DTYPE_F32;
}

void ag_store_round(const struct sg_tape *tape, sg_tensor *t) {
  if (tape->store_dt != SG_DTYPE_BF16 || t->dtype != SG_DTYPE_F32 || !t->data ||
      t->device.kind != SG_DEVICE_HOST)
    return; /* device variables: refused under bf16 (ag_node_device) */
  sg_round_bf16((float *)t->data, ag_numel(t));
}

int sg_tape_set_grad_enabled(sg_tape_t tape, int enabled) {
  if (!tape) return 0;
  int prev = tape->grad_enabled;
  tape->grad_enabled = enabled != 0;
  return prev;
}

size_t sg_tape_bytes(sg_tape_t tape) {
  return tape ? tape->bytes + sg_tape_bytes(tape->child) : 0;
}
int sg_tape_size(sg_tape_t tape) { return tape ? tape->nnodes : 0; }

/* Free a node's own state (margins block, saved state). */
void ag_node_release(sg_tape_t tape, sg_node *node) {
  if (!node) return;
  for (int i = 0; node->ex && i < tape->nx; ++i)
    if ((void *)tape->xcache[i].ex == node->ex) tape->xcache[i].uses--;
  if (node->xin.owns) {
    tape->bytes -= ag_nbytes(&node->xin);
    ag_free(&node->xin);
  }
  if (node->saved) {
    tape->bytes -= node->saved_bytes;
    ag_mem_free(node->device, &node->saved);
  }
  free(node);
}

void ag_var_drop_memory(sg_tape_t tape, sg_var *v) {
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
  tape->wpending = 0;
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
  SG_TRY(ag_alloc_dz(&v->value, node->device, node->in[0]->value.dtype, ndim,
                     shape, zero));
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
_Thread_local sg_tape_t ag_current_tape;

int ag_time_ops;
void sg_tape_time_ops(int on) { ag_time_ops = on != 0; }

static sg_status node_save(sg_node *node, size_t bytes, int zero, void **ptr) {
  sg_status st = SG_OK;
  if (!node || !ptr) SG_RAISE(SG_ERR_INVALID_ARG, "node or ptr is NULL");
  if (node->saved) SG_RAISE(SG_ERR_INTERNAL, "state saved twice");
  SG_TRY(ag_mem_alloc(node->device, bytes, zero, &node->saved));
  node->saved_bytes = bytes;
  if (ag_current_tape) ag_current_tape->bytes += bytes;
  *ptr = node->saved;
fail:
  return st;
}

sg_status sg_node_save(sg_node *node, size_t bytes, void **ptr) {
  return node_save(node, bytes, 1, ptr);
}

sg_status sg_node_save_uninit(sg_node *node, size_t bytes, void **ptr) {
  return node_save(node, bytes, 0, ptr);
}

sg_status ag_grow(void **arr, int *cap, int need, size_t elem) {
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
