/* shardgrid — autograd tape: recording an op (its margins on one process,
 * its cached halo exchange on a mesh, the sharding of its outputs). */
#include "autograd_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sg_comm.h"
#include "sg_config.h"
#include "sg_device.h"
#include "sg_trace.h"
#if SG_HAVE_CUDA
#include "sg_ops_cuda.h"
#endif

/* The padding of the node's window as sg_pad_forward takes it. */
void ag_pads(const sg_node *node, int64_t (*pad)[2], sg_pad_mode *mode) {
  for (int i = 0; i < node->nsp; ++i) {
    pad[i][0] = node->win[i].pad[0];
    pad[i][1] = node->win[i].pad[1];
    mode[i] = node->win[i].boundary;
  }
}

/* Give the windowed input its margins: one process pads per the window. */
static sg_status ag_make_margins(sg_node *node, const sg_var *x) {
  sg_status st = SG_OK;
  const sg_tensor *v = &x->value;
  int64_t pad[SG_OPS_MAX_SPATIAL][2];
  sg_pad_mode mode[SG_OPS_MAX_SPATIAL];
  ag_pads(node, pad, mode);
  int pads = 0;
  for (int i = 0; i < node->nsp; ++i) pads |= pad[i][0] != 0 || pad[i][1] != 0;
  if (!pads) {
    node->xin = *v;
    node->xin.owns = 0;
    goto fail;
  }
  int64_t shape[SG_TENSOR_MAX_DIMS];
  shape[0] = v->shape[0];
  shape[1] = v->shape[1];
  for (int i = 0; i < node->nsp; ++i)
    shape[2 + i] = v->shape[2 + i] + pad[i][0] + pad[i][1];
  if (node->device.kind != SG_DEVICE_HOST && !ag_fake_cuda) {
#if SG_HAVE_CUDA
    /* on the device: the pad kernel writes every element (a faked device's
     * buffers are host memory: the host's pad below) */
    SG_TRY(ag_alloc_dz(&node->xin, node->device, v->dtype, v->ndim, shape, 0));
    SG_TRY(sg_pad_fwd_cuda(v->dtype, node->nsp, v->shape[0] * v->shape[1],
                           v->shape + 2, (const int64_t(*)[2])pad, mode,
                           v->data, node->xin.data, NULL));
    goto fail;
#else
    SG_RAISE(SG_ERR_NOT_SUPPORTED,
             "%s on %s:%d: window margins: built without CUDA", node->op->name,
             sg_device_kind_name(node->device.kind), node->device.index);
#endif
  }
  /* sg_pad_forward writes every element, margins included: no zero fill
   * (1.8% of the U-Net's step) */
  SG_TRY(ag_alloc_z(&node->xin, v->dtype, v->ndim, shape, 0));
  SG_TRY(sg_pad_forward(v->dtype, node->nsp, v->shape[0] * v->shape[1],
                        v->shape + 2, (const int64_t(*)[2])pad, mode, v->data,
                        node->xin.data));
fail:
  return st;
}

/* ---- sharded nodes ------------------------------------------------------- */

static int ag_dim_sharded(const sg_node *node, int t) {
  for (int m = 0; m < sg_mesh_ndims(node->mesh); ++m)
    if (node->placements[m].kind == SG_PLACEMENT_SHARD &&
        node->placements[m].dim == t)
      return 1;
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
      SG_RAISE(SG_ERR_INVALID_ARG,
               "%s: input %d ('%s') is a parameter but sharded: parameters "
               "are plain (Replicate) variables",
               op->name, i, node->in[i]->name);
  int r = ag_sharded_ref(op, node->nin, node->in);
  if (r < 0) goto fail;
  const sg_var *x = node->in[r];
  const int md = sg_mesh_ndims(x->mesh);
  const unsigned acc = op->rule.accepts
                           ? op->rule.accepts
                           : SG_ACCEPT_REPLICATE | SG_ACCEPT_SHARD_BATCH |
                                 SG_ACCEPT_SHARD_SPATIAL;
  for (int m = 0; m < md; ++m) {
    sg_placement p = x->placements[m];
    if (p.kind == SG_PLACEMENT_PARTIAL)
      SG_RAISE(SG_ERR_INVALID_ARG,
               "%s: placement Partial (mesh dim '%s') of input %d ('%s') is "
               "not accepted",
               op->name, sg_mesh_dim_name(x->mesh, m), r, x->name);
    if (p.kind != SG_PLACEMENT_SHARD) continue;
    unsigned need = p.dim == 0   ? SG_ACCEPT_SHARD_BATCH
                    : p.dim == 1 ? SG_ACCEPT_SHARD_CHANNEL
                                 : SG_ACCEPT_SHARD_SPATIAL;
    if (!(acc & need))
      SG_RAISE(SG_ERR_INVALID_ARG,
               "%s: placement Shard(%d) (%s, mesh dim '%s') of input %d ('%s') "
               "is not accepted",
               op->name, p.dim,
               p.dim == 0   ? "batch"
               : p.dim == 1 ? "channels"
                            : "spatial",
               sg_mesh_dim_name(x->mesh, m), r, x->name);
  }
  for (int i = 0; i < node->nin; ++i) {
    const sg_var *v = node->in[i];
    if (op->slots[i] != SG_SLOT_ACT || i == r) continue;
    if (!v->mesh)
      SG_RAISE(SG_ERR_INVALID_ARG,
               "%s: input %d ('%s') is not sharded but input %d ('%s') is: "
               "activation inputs must be sharded alike",
               op->name, i, v->name, r, x->name);
    int same = v->mesh == x->mesh && v->value.ndim == x->value.ndim;
    for (int m = 0; same && m < md; ++m)
      same = sg_placement_equal(v->placements[m], x->placements[m]);
    if (!same)
      SG_RAISE(
          SG_ERR_INVALID_ARG,
          "%s: inputs %d ('%s') and %d ('%s') are placed differently "
          "(mesh, dims or placements): activation inputs must be sharded alike",
          op->name, r, x->name, i, v->name);
  }
  node->mesh = x->mesh;
  memcpy(node->placements, x->placements, sizeof node->placements);
  for (int i = 0; i < node->nin; ++i) {
    const sg_var *v = node->in[i];
    if (op->slots[i] != SG_SLOT_ACT) continue;
    for (int t = 0; t < v->value.ndim; ++t)
      if (ag_dim_sharded(node, t) && v->global_shape[t] != x->global_shape[t])
        SG_RAISE(
            SG_ERR_SHAPE,
            "%s: inputs %d ('%s') and %d ('%s') differ in the global extent "
            "of sharded dim %d (%lld and %lld)",
            op->name, r, x->name, i, v->name, t, (long long)x->global_shape[t],
            (long long)v->global_shape[t]);
  }
  SG_TRY(sg_sharded_split_masks(x->mesh, x->value.ndim, x->placements,
                                &node->split_batch, &node->split_channel,
                                &node->split_space));
fail:
  return st;
}

/* The cached exchange of the windowed input (created on a miss: collective,
 * in the same order on every rank). */
static sg_status ag_node_exchange(sg_tape_t tape, sg_node *node,
                                  const sg_var *x) {
  sg_status st = SG_OK;
  ag_xkey k;
  memset(&k, 0, sizeof k);
  k.mesh = x->mesh;
  k.dtype = x->value.dtype;
  k.ndim = x->value.ndim;
  memcpy(k.global, x->global_shape, (size_t)k.ndim * sizeof *k.global);
  for (int m = 0; m < sg_mesh_ndims(x->mesh); ++m) {
    k.pl[m].kind = x->placements[m].kind;
    k.pl[m].dim = x->placements[m].kind == SG_PLACEMENT_SHARD
                      ? x->placements[m].dim
                      : -1;
  }
  for (int d = 0; d < node->nsp; ++d) k.win[d] = node->win[d];
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
    SG_TRY(ag_grow((void **)&tape->xcache, &tape->cap_x, tape->nx + 1,
                   sizeof *tape->xcache));
    sg_sharded_exchange_t ex = NULL;
    SG_TRY(sg_sharded_exchange_create(x->mesh, k.dtype, k.ndim, k.global,
                                      x->placements, k.win, &ex));
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

sg_exchange_info ag_node_info(const sg_node *node) {
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
      SG_RAISE(
          SG_ERR_SHAPE,
          "%s: output %d has extent %lld in spatial dim %d, the window gives "
          "%lld",
          node->op->name, j, (long long)v->value.shape[2 + d], d,
          (long long)info->natural[d]);
    off[2 + d] = info->crop[d];
    shape[2 + d] = info->out_local[d];
  }
  if (node->device.kind != SG_DEVICE_HOST) { /* ag_halo.c: the pack kernel */
    SG_TRY(ag_alloc_dz(&dst, node->device, v->value.dtype, v->value.ndim, shape,
                       0));
    SG_TRY(ag_dev_crop(node->device, info, &v->value, &dst, 0));
  } else {
    SG_TRY(ag_alloc(&dst, v->value.dtype, v->value.ndim, shape));
    SG_TRY(sg_tensor_view(&v->value, off, shape, &src));
    SG_TRY(sg_tensor_copy(&dst, &src));
  }
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
  SG_TRY(sg_node_group(node, SG_SPLIT_BATCH | SG_SPLIT_CHANNEL | SG_SPLIT_SPACE,
                       &g));
  if (!g || n == 0) goto fail;
  buf = malloc((size_t)n * sizeof *buf);
  if (!buf) SG_RAISE(SG_ERR_ALLOC, "partial sum");
  const int f32 = v->value.dtype == SG_DTYPE_F32;
  for (int64_t i = 0; i < n; ++i)
    buf[i] = f32 ? (double)((const float *)v->value.data)[i]
                 : ((const double *)v->value.data)[i];
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
      SG_RAISE(SG_ERR_SHAPE,
               "%s: output %d has %d dims, its sharded input '%s' %d",
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
        SG_RAISE(SG_ERR_SHAPE,
                 "%s: output %d has extent %lld in sharded dim %d, this rank's "
                 "share is %lld",
                 node->op->name, j, (long long)v->value.shape[t], t,
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
                                  sg_var *const *in, int nout,
                                  const sg_window *win, const void *attr,
                                  size_t attr_bytes, sg_node **pnode) {
  sg_status st = SG_OK;
  sg_node *node = calloc(1, sizeof *node);
  if (!node) SG_RAISE(SG_ERR_ALLOC, "node");
  *pnode = node;
  node->op = op;
  node->nin = nin;
  node->nout = nout;
  node->device = in[0]->value.device; /* all alike (ag_node_device) */
  for (int i = 0; i < nin; ++i) node->in[i] = in[i];
  if (attr_bytes) memcpy(node->attr, attr, attr_bytes);
  SG_TRY(ag_node_sharding(node));
  if (op->rule.windowed_input >= 0) {
    if (!win) SG_RAISE(SG_ERR_INVALID_ARG, "%s needs a window", op->name);
    if (op->rule.windowed_input >= nin)
      SG_RAISE(SG_ERR_INTERNAL, "%s: windowed input %d of %d", op->name,
               op->rule.windowed_input, nin);
    const sg_var *x = in[op->rule.windowed_input];
    const int nsp = x->value.ndim - 2;
    if (nsp < 1 || nsp > SG_OPS_MAX_SPATIAL)
      SG_RAISE(
          SG_ERR_SHAPE,
          "%s: the windowed input has %d dims, expected (N, C) + 1..%d spatial",
          op->name, x->value.ndim, SG_OPS_MAX_SPATIAL);
    node->has_window = 1;
    node->nsp = nsp;
    for (int d = 0; d < nsp; ++d) node->win[d] = sg_window_normal(win[d]);
    if (node->mesh && !x->mesh)
      SG_RAISE(SG_ERR_INVALID_ARG,
               "%s: the windowed input '%s' is not sharded but other inputs "
               "are",
               op->name, x->name);
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
    } else if (node->device.kind != SG_DEVICE_HOST) {
      SG_TRY(ag_dev_exchange_forward(node, &x->value, &node->xin));
      if (node->xin.owns) tape->bytes += ag_nbytes(&node->xin);
    } else {
      SG_TRY(sg_sharded_exchange_forward((sg_sharded_exchange_t)node->ex,
                                         &x->value, &node->xin));
      if (node->xin.owns) tape->bytes += ag_nbytes(&node->xin);
    }
  }
  ag_current_tape = tape;
  if (ag_time_ops) sg_trace_begin(node->op->name);
  st = ag_node_forward(node);
  if (ag_time_ops) sg_trace_end(node->op->name);
  ag_current_tape = NULL;
  if (st != SG_OK) goto fail;
  for (int j = 0; j < node->nout; ++j)
    if (!node->out[j]->value.data && ag_numel(&node->out[j]->value) != 0)
      SG_RAISE(SG_ERR_INTERNAL, "%s did not produce output %d", node->op->name,
               j);
  if (node->mesh) SG_TRY(ag_outputs_sharding(node));
fail:
  return st;
}

/* The inputs' data: NULL only for an empty tensor (an empty shard, e.g. a
 * rank with no samples of a batch split over more data ranks than samples),
 * one dtype. */
static sg_status ag_check_inputs(sg_tape_t tape, const sg_op_def *op, int nin,
                                 sg_var *const *in) {
  sg_device dev;
  sg_status st = ag_node_device(tape, op, nin, in, &dev);
  if (st != SG_OK) return st;
  for (int i = 0; i < nin; ++i) {
    if (!in[i]->value.data &&
        (in[i]->value.ndim < 1 || ag_numel(&in[i]->value) != 0))
      SG_RAISE(SG_ERR_INVALID_ARG, "%s: input %d ('%s') is released (no data)",
               op->name, i, in[i]->name);
    if (in[i]->value.dtype != in[0]->value.dtype)
      SG_RAISE(SG_ERR_SHAPE, "%s: input %d is %s, input 0 is %s", op->name, i,
               sg_dtype_name(in[i]->value.dtype),
               sg_dtype_name(in[0]->value.dtype));
  }
fail:
  return st;
}

sg_status sg_tape_apply(sg_tape_t tape, const sg_op_def *op, int nin,
                        sg_var *const *in, int nout, const sg_window *win,
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
    if (!in[i])
      SG_RAISE(SG_ERR_INVALID_ARG, "%s: input %d is NULL", op->name, i);
  if (tape->collecting) SG_TRY(ag_collect(tape, op->name, nin, in));
  const int r = ag_sharded_ref(op, nin, in);
  const MPI_Comm comm = ag_agree_comm(tape,
                                      r >= 0 ? sg_mesh_comm(in[r]->mesh)
                                             : MPI_COMM_NULL,
                                      ag_hooked(tape, nin, in));
  int requires = 0;
  for (int i = 0; i < nin; ++i) requires |= in[i]->requires_grad;
  requires = requires && tape->grad_enabled;
  /* hooks first (a released parameter is gathered here), then the checks;
   * every rank agrees before the exchange and after the forward */
  st = ag_call_param_hooks(tape, AG_PRE_USE, nin, in);
  if (st == SG_OK) st = ag_check_inputs(tape, op, nin, in);
  /* before the preparation, which may create a halo plan (collective) */
  st = ag_agree(comm, st);
  if (st == SG_OK)
    st = ag_apply_prepare(tape, op, nin, in, nout, win, attr, attr_bytes,
                          &node);
  st = ag_agree(comm, st);
  if (st != SG_OK) goto fail;
  st = ag_apply_run(tape, node);
  if (st == SG_OK) st = ag_call_param_hooks(tape, AG_POST_USE, nin, in);
  st = ag_agree(comm, st);
  if (st != SG_OK) goto fail;
  for (int j = 0; j < nout; ++j) {
    if (!op->rule.keep_f32 && !ag_rounded_by_op(op, &node->out[j]->value))
      ag_store_round(tape, &node->out[j]->value);
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
