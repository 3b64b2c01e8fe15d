/* shardgrid — autograd tape: backward (gradient buffers, the adjoint of
 * the margins, routing, hooks). */
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

/* ---- backward ----------------------------------------------------------------- */

/* Which gradients a node's backward computes: all (one pass), the split
 * backward's B (every input but the deferred parameters) or its W (the
 * deferred parameters only). */
typedef enum ag_pass { AG_ALL = 0, AG_INPUTS, AG_WEIGHTS } ag_pass;

typedef struct ag_bwd {
  enum { DIRECT = 0, ADD, PAD, IDENT } how[SG_NODE_MAX_IN];
  sg_tensor tmp[SG_NODE_MAX_IN];
  sg_tensor tmp2;
  sg_tensor grad[SG_NODE_MAX_OUT]; /* cropped outputs: their own gradients */
  unsigned swapped;
  ag_pass pass;
} ag_bwd;

/* Input i's gradient waits for W in a split backward: a leaf requiring a
 * gradient in a parameter slot (the op accumulates into it). A non-leaf in
 * a parameter slot (a computed weight) is on the input-gradient path. Not
 * the local size: a rank holding none of a sharded parameter (the spectral
 * conv's modes) defers alike, its kernels make the same collective calls. */
static int ag_deferred_input(const sg_node *node, int i) {
  const sg_var *v = node->in[i];
  return node->op->slots[i] == SG_SLOT_PARAM && v->requires_grad && v->is_leaf;
}

/* The node runs its parameter gradients in W. Checkpoint nodes run whole
 * in B (their recomputation and inner backward are one unit). */
static int ag_defers(const sg_node *node) {
  if (node->op == &ag_ckpt_op) return 0;
  for (int i = 0; i < node->nin; ++i)
    if (ag_deferred_input(node, i)) return 1;
  return 0;
}

/* Input i takes output 0's gradient unchanged (sg_op_rule.grad_identity). */
static int ag_grad_identity(const sg_node *node, int i) {
  const sg_var *v = node->in[i], *o = node->out[0];
  return (node->op->rule.grad_identity & (1u << i)) &&
         node->op->slots[i] == SG_SLOT_ACT &&
         i != node->op->rule.windowed_input && !node->cropped &&
         node->nout >= 1 && v->value.dtype == o->value.dtype &&
         ag_numel(&v->value) == ag_numel(&o->value);
}

/* Under a bf16 storage policy, v's gradient is whole once this node has
 * written it (v's last consumer in this backward, a first write, an f32
 * host tensor): a kernel may round it as it writes it. Only for a var
 * with a producer on this tape: a checkpointed block's stand-in for its
 * input has none, and its pending counts the block's uses only (the
 * outer var may get more gradient after the block's). */
static int ag_grad_whole_bf16(const sg_tape_t tape, const sg_var *v,
                              const ag_bwd *b) {
  return tape->store_dt == SG_DTYPE_BF16 && ag_round_fused() &&
         b->pass == AG_ALL && v->pending == 1 && !v->is_leaf &&
         v->producer != NULL && v->value.dtype == SG_DTYPE_F32 &&
         v->value.device.kind == SG_DEVICE_HOST;
}

/* v's whole gradient holds bf16 values: its producer skips the rounding
 * pass (the flag lives on the producer's node, per output). */
static void ag_mark_grad_bf16(sg_var *v) {
  sg_node *p = v->producer;
  for (int j = 0; p && j < p->nout; ++j)
    if (p->out[j] == v) p->grad_bf16 |= 1u << j;
}

/* Gradient buffers, the op's backward (outputs' gradients zero-padded to
 * the window's natural extent where the forward was cropped). */
static sg_status ag_backward_local(sg_tape_t tape, sg_node *node, ag_bwd *b) {
  sg_status st = SG_OK;
  const int wi = node->op->rule.windowed_input;
  node->round_gin = node->rounded_gin = 0u;
  for (int j = 0; j < node->nout; ++j)
    SG_TRY(ag_ensure_grad(tape, node->out[j]));
  for (int i = 0; i < node->nin; ++i) {
    sg_var *v = node->in[i];
    node->gin[i] = NULL;
    if (!v->requires_grad || ag_numel(&v->value) == 0) continue;
    if (b->pass != AG_ALL &&
        ag_deferred_input(node, i) != (b->pass == AG_WEIGHTS))
      continue; /* the other pass's gradient */
    /* activation inputs the op's backward writes whole: no zero fill */
    const int zero = node->op->slots[i] == SG_SLOT_PARAM ||
                     !(node->op->rule.writes_gin & (1u << i));
    if (ag_grad_identity(node, i)) {
      b->how[i] = IDENT; /* routed after the backward, gin[i] stays NULL */
    } else if (i == wi && node->xin.owns) {
      SG_TRY(ag_alloc_dz(&b->tmp[i], node->xin.device, node->xin.dtype,
                         node->xin.ndim, node->xin.shape, zero));
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
      if (ag_grad_whole_bf16(tape, v, b)) node->round_gin |= 1u << i;
    } else {
      SG_TRY(ag_alloc_dz(&b->tmp[i], node->device, v->value.dtype,
                         v->value.ndim, v->value.shape, zero));
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
      if (node->device.kind != SG_DEVICE_HOST) { /* ag_halo.c */
        SG_TRY(ag_alloc_dz(&b->grad[j], node->device, v->grad.dtype,
                           v->grad.ndim, shape, 1));
        SG_TRY(ag_dev_crop(node->device, &info, &b->grad[j], &v->grad, 1));
      } else {
        sg_tensor part;
        SG_TRY(ag_alloc(&b->grad[j], v->grad.dtype, v->grad.ndim, shape));
        SG_TRY(sg_tensor_view(&b->grad[j], off, v->grad.shape, &part));
        SG_TRY(sg_tensor_copy(&part, &v->grad));
      }
      sg_tensor t = v->grad; /* swap: the op sees the natural extent */
      v->grad = b->grad[j];
      b->grad[j] = t;
      b->swapped |= 1u << j;
    }
  }
  ag_current_tape = tape;
  if (ag_time_ops) sg_trace_begin(node->op->name);
  st = ag_node_backward_kernel(node);
  if (ag_time_ops) sg_trace_end(node->op->name);
  ag_current_tape = NULL;
  for (int i = 0; i < node->nin; ++i) /* rounded by the op's kernels */
    if (node->round_gin & node->rounded_gin & (1u << i))
      ag_mark_grad_bf16(node->in[i]);
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
      /* o's gradient holds bf16 values (rounded before this backward) */
      const int whole = ag_grad_whole_bf16(tape, v, b) && !v->has_grad;
      if (!v->is_leaf && !v->has_grad && !v->grad.data && o->owns_grad &&
          o->grad.data == gsrc && b->pass == AG_ALL) {
        v->grad = o->grad; /* hand over: same bytes on the tape's account */
        v->owns_grad = 1;
        memset(&o->grad, 0, sizeof o->grad);
        o->owns_grad = 0;
      } else if (!v->is_leaf && !v->has_grad) {
        SG_TRY(ag_ensure_grad_z(tape, v, 0));
        SG_TRY(ag_mem_copy(v->grad.device, v->grad.data, o->grad.device, gsrc,
                           ag_nbytes(&v->grad)));
      } else {
        SG_TRY(ag_ensure_grad(tape, v));
        sg_tensor src = v->grad;
        src.data = (void *)gsrc;
        SG_TRY(ag_grad_add(&v->grad, &src));
      }
      v->has_grad = 1;
      if (whole) ag_mark_grad_bf16(v);
      continue;
    }
    if (!node->gin[i]) continue;
    if (b->how[i] == PAD) {
      int64_t pad[SG_OPS_MAX_SPATIAL][2];
      sg_pad_mode mode[SG_OPS_MAX_SPATIAL];
      ag_pads(node, pad, mode);
      SG_TRY(ag_ensure_grad(tape, v));
      /* the first gradient of a non-leaf: the adjoint writes it in place
       * (every element), no copy; else into a buffer added after */
      const int first = !v->is_leaf && !v->has_grad;
      const int dev = node->device.kind != SG_DEVICE_HOST;
      if (!first)
        SG_TRY(ag_alloc_dz(&b->tmp2, v->value.device, v->value.dtype,
                           v->value.ndim, v->value.shape, 1));
      sg_tensor *dst = first ? &v->grad : &b->tmp2;
      if (node->mesh && dev) /* ag_halo.c: on the device's buffers */
        SG_TRY(ag_dev_exchange_adjoint(node, b->tmp[i].data, dst));
      else if (node->mesh)
        SG_TRY(sg_sharded_exchange_adjoint((sg_sharded_exchange_t)node->ex,
                                           b->tmp[i].data, dst));
#if SG_HAVE_CUDA
      else if (dev && !ag_fake_cuda) /* the pad kernel's adjoint, a gather */
        SG_TRY(sg_pad_bwd_cuda(v->value.dtype, node->nsp,
                               v->value.shape[0] * v->value.shape[1],
                               v->value.shape + 2, (const int64_t(*)[2])pad,
                               mode, b->tmp[i].data, dst->data, NULL));
#endif
      else
        SG_TRY(sg_pad_backward(v->value.dtype, node->nsp,
                               v->value.shape[0] * v->value.shape[1],
                               v->value.shape + 2, (const int64_t(*)[2])pad,
                               mode, b->tmp[i].data, dst->data));
      if (!first)
        SG_TRY(dev ? ag_grad_add(&v->grad, &b->tmp2)
                   : (ag_add_into(&v->grad, &b->tmp2), SG_OK));
      v->has_grad = 1;
      ag_free(&b->tmp2);
    } else if (b->how[i] == ADD) {
      SG_TRY(ag_ensure_grad(tape, v));
      SG_TRY(ag_grad_add(&v->grad, &b->tmp[i]));
      v->has_grad = 1;
    }
  }
fail:
  return st;
}

/* The parameter inputs whose gradient this pass made final: grad_ready
 * after the last use (the inputs of the other pass wait for it). */
static sg_status ag_uses_done(sg_tape_t tape, sg_node *node, ag_pass pass) {
  sg_status st = SG_OK;
  for (int i = 0; i < node->nin && st == SG_OK; ++i) {
    sg_var *v = node->in[i];
    if (!v->requires_grad) continue;
    if (pass != AG_ALL && ag_deferred_input(node, i) != (pass == AG_WEIGHTS))
      continue;
    if (--v->pending == 0 && v->is_param)
      st = ag_call_hooks(tape, AG_GRAD_READY, v);
  }
  return st;
}

/* Run one node's backward (pass: which gradients) and route its input
 * gradients. A sharded node agrees before the adjoint exchange and at the
 * end; the parameter hooks (pre_backward before the kernels,
 * post_backward_use and grad_ready after) join those agreements (or the
 * tape's, for a plain node). Both passes of a split backward read the
 * parameters (B: dx = W^T dy), so both run pre/post_backward_use. */
static sg_status ag_node_backward(sg_tape_t tape, sg_node *node, ag_pass pass) {
  sg_status st = SG_OK;
  if (node->op == &ag_ckpt_op) return ag_ckpt_backward(tape, node);
  ag_bwd b;
  memset(&b, 0, sizeof b);
  b.pass = pass;
  /* every consumer has added its part: the activation gradient is whole
   * (W: rounded in B already) */
  for (int j = 0; j < node->nout && pass != AG_WEIGHTS; ++j)
    if (!(node->grad_bf16 & (1u << j)))
      ag_store_round(tape, &node->out[j]->grad);
  node->grad_bf16 = 0u;
  const int hooked = ag_hooked(tape, node->nin, node->in);
  const MPI_Comm comm = ag_agree_comm(
      tape, node->mesh ? sg_mesh_comm(node->mesh) : MPI_COMM_NULL, hooked);
  st = ag_call_param_hooks(tape, AG_PRE_BACKWARD, node->nin, node->in);
  /* the kernels may be collective (statistics): a failed hook must not
   * leave the other ranks in them */
  if (hooked) st = ag_agree(comm, st);
  if (st == SG_OK) st = ag_backward_local(tape, node, &b);
  if (pass != AG_WEIGHTS) { /* W: parameter gradients only, no routing */
    if (node->mesh && node->has_window) st = ag_agree(comm, st);
    if (st == SG_OK) st = ag_backward_route(tape, node, &b);
  }
  if (st == SG_OK)
    st = ag_call_param_hooks(tape, AG_POST_BACKWARD_USE, node->nin, node->in);
  if (st == SG_OK) st = ag_uses_done(tape, node, pass);
  st = ag_agree(comm, st);
  for (int i = 0; i < SG_NODE_MAX_IN; ++i) ag_free(&b.tmp[i]);
  for (int j = 0; j < SG_NODE_MAX_OUT; ++j) ag_free(&b.grad[j]);
  ag_free(&b.tmp2);
  return st;
}

/* A node deferred to W keeps its outputs' gradients (W's seed), its saved
 * state and margins block, and the values of its inputs (held: their
 * producers leave them); the windowed input's value is not read when the
 * node owns its margins block. Its outputs' values go unless its backward
 * reads them (rule.out_unread 0) or a deferred consumer holds them (every
 * consumer ran before it). */
static void ag_defer_memory(sg_tape_t tape, sg_node *node) {
  for (int i = 0; i < node->nin; ++i) {
    sg_var *v = node->in[i];
    if (v->is_leaf || (i == node->op->rule.windowed_input && node->xin.owns))
      continue;
    v->held++;
  }
  for (int j = 0; j < node->nout && node->op->rule.out_unread; ++j) {
    sg_var *v = node->out[j];
    if (!v->held && v->owns_value && v->value.data) {
      tape->bytes -= ag_nbytes(&v->value);
      ag_free(&v->value);
    }
  }
}

/* A released node's output: its gradient goes; its value too unless a
 * deferred node reads it. */
static void ag_out_release(sg_tape_t tape, sg_var *v) {
  if (!v->held) {
    ag_var_drop_memory(tape, v);
  } else if (v->owns_grad && v->grad.data) {
    tape->bytes -= ag_nbytes(&v->grad);
    ag_free(&v->grad);
  }
}

/* The end of a whole backward: post_backward, agreed. */
static sg_status ag_backward_end(sg_tape_t tape, sg_status st) {
  for (int k = 0; k < tape->nhooks && st == SG_OK; ++k)
    if (tape->hooks[k].post_backward)
      st = tape->hooks[k].post_backward(tape, tape->hooks[k].user);
  return ag_agree(ag_agree_comm(tape, MPI_COMM_NULL, tape->nhooks > 0), st);
}

/* Walk the tape in reverse from gradients already seeded. split: B of a
 * split backward, the nodes with deferred parameter inputs stay on the
 * tape (in order) and the end of the backward waits for W. */
sg_status ag_backward_walk(sg_tape_t tape, int split) {
  sg_status st = SG_OK;
  const int n = tape->nnodes;
  for (int k = n - 1; k >= 0 && st == SG_OK; --k) {
    sg_node *node = tape->nodes[k];
    const int defer = split && ag_defers(node);
    st = ag_node_backward(tape, node, defer ? AG_INPUTS : AG_ALL);
    if (st != SG_OK || defer) {
      if (defer) ag_defer_memory(tape, node);
      continue;
    }
    /* every consumer of this node's outputs ran before it: release them */
    for (int j = 0; j < node->nout; ++j) ag_out_release(tape, node->out[j]);
    ag_node_release(tape, node);
    tape->nodes[k] = NULL;
  }
  int kept = 0; /* deferred (or, on failure, not run): in order */
  for (int k = 0; k < n; ++k)
    if (tape->nodes[k]) tape->nodes[kept++] = tape->nodes[k];
  tape->nnodes = kept;
  if (st != SG_OK) return st; /* agreed by the node that failed */
  if (split) {
    tape->wpending = 1;
    return SG_OK;
  }
  return ag_backward_end(tape, st);
}

/* Checks of a backward seed (not collective). */
static sg_status ag_seed_check(const sg_var *v, const char *what) {
  sg_status st = SG_OK;
  if (!v) SG_RAISE(SG_ERR_INVALID_ARG, "backward: %s is NULL", what);
  if (!v->producer || !v->requires_grad)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "backward from '%s': not produced on this tape with gradients "
             "(no-grad mode, or no input requires a gradient)",
             v->name);
fail:
  return st;
}

/* Seed the loss's gradient with 1. */
static sg_status ag_seed_loss(sg_tape_t tape, sg_var *loss) {
  sg_status st = SG_OK;
  if (!tape) SG_RAISE(SG_ERR_INVALID_ARG, "tape and loss are required");
  if (tape->wpending)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "backward: the tape waits for the W of a split backward "
             "(sg_tape_backward_weights)");
  SG_TRY(ag_seed_check(loss, "the loss"));
  if (ag_numel(&loss->value) != 1)
    SG_RAISE(SG_ERR_SHAPE, "backward from '%s': not a scalar (%lld elements)",
             loss->name, (long long)ag_numel(&loss->value));
  SG_TRY(ag_ensure_grad(tape, loss));
  const float one32 = 1.0f;
  const double one64 = 1.0;
  const int f32 = loss->grad.dtype == SG_DTYPE_F32;
  SG_TRY(ag_mem_copy(loss->grad.device, loss->grad.data, sg_device_host(),
                     f32 ? (const void *)&one32 : (const void *)&one64,
                     f32 ? sizeof one32 : sizeof one64));
  loss->has_grad = 1;
fail:
  return st;
}

/* Seed n (variable, gradient) pairs (copied; a variable twice: summed). */
static sg_status ag_seed_pairs(sg_tape_t tape, int n, sg_var *const *vars,
                               const sg_tensor *grads) {
  sg_status st = SG_OK;
  if (!tape || n < 1 || !vars || !grads)
    SG_RAISE(
        SG_ERR_INVALID_ARG,
        "backward from pairs: tape, n >= 1, variables and gradients are required");
  if (tape->wpending)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "backward: the tape waits for the W of a split backward "
             "(sg_tape_backward_weights)");
  for (int i = 0; i < n; ++i) {
    sg_var *v = vars[i];
    const sg_tensor *g = &grads[i];
    SG_TRY(ag_seed_check(v, "a variable"));
    if (g->dtype != v->value.dtype || g->ndim != v->value.ndim)
      SG_RAISE(
          SG_ERR_SHAPE,
          "backward from '%s': gradient %d is %s with %d dims, the variable %s with %d",
          v->name, i, sg_dtype_name(g->dtype), g->ndim,
          sg_dtype_name(v->value.dtype), v->value.ndim);
    for (int d = 0; d < g->ndim; ++d)
      if (g->shape[d] != v->value.shape[d])
        SG_RAISE(
            SG_ERR_SHAPE,
            "backward from '%s': gradient %d has extent %lld in dim %d, the variable %lld",
            v->name, i, (long long)g->shape[d], d,
            (long long)v->value.shape[d]);
    if (ag_numel(&v->value) == 0) continue;
    if (!g->data)
      SG_RAISE(SG_ERR_INVALID_ARG,
               "backward from '%s': gradient %d has no data", v->name, i);
    SG_TRY(ag_ensure_grad(tape, v));
    sg_tensor src = v->grad;
    src.data = g->data;
    /* a device variable's seed is on its device (a host variable's seed is
     * host memory, whatever its descriptor says, as before) */
    if (v->grad.device.kind != SG_DEVICE_HOST &&
        (g->device.kind != v->grad.device.kind ||
         g->device.index != v->grad.device.index))
      SG_RAISE(SG_ERR_NOT_SUPPORTED,
               "backward from '%s': gradient %d is on %s:%d, the variable on "
               "%s:%d",
               v->name, i, sg_device_kind_name(g->device.kind), g->device.index,
               sg_device_kind_name(v->grad.device.kind), v->grad.device.index);
    if (v->has_grad)
      SG_TRY(ag_grad_add(&v->grad, &src)); /* the same variable twice: sum */
    else
      SG_TRY(ag_mem_copy(v->grad.device, v->grad.data, v->grad.device, g->data,
                         ag_nbytes(&v->grad)));
    v->has_grad = 1;
  }
fail:
  return st;
}

/* The walk after a seed; the tape is cleared unless W follows. A tape that
 * waits for W is left as it is (the refusal is the caller's mistake). */
static sg_status ag_backward_run(sg_tape_t tape, sg_status seeded, int split) {
  sg_status st = seeded;
  if (!tape) return st;
  if (st != SG_OK && tape->wpending) return st;
  if (st == SG_OK) st = ag_backward_walk(tape, split);
  if (st != SG_OK || !split) sg_tape_clear(tape);
  return st;
}

sg_status sg_tape_backward(sg_tape_t tape, sg_var *loss) {
  return ag_backward_run(tape, ag_seed_loss(tape, loss), 0);
}

sg_status sg_tape_backward_from(sg_tape_t tape, int n, sg_var *const *vars,
                                const sg_tensor *grads) {
  return ag_backward_run(tape, ag_seed_pairs(tape, n, vars, grads), 0);
}

sg_status sg_tape_backward_split(sg_tape_t tape, sg_var *loss) {
  return ag_backward_run(tape, ag_seed_loss(tape, loss), 1);
}

sg_status sg_tape_backward_from_split(sg_tape_t tape, int n,
                                      sg_var *const *vars,
                                      const sg_tensor *grads) {
  return ag_backward_run(tape, ag_seed_pairs(tape, n, vars, grads), 1);
}

/* W: the deferred nodes in B's order (the reverse of the tape's), so every
 * parameter gradient gets its parts in the one-pass order. */
sg_status sg_tape_backward_weights(sg_tape_t tape) {
  sg_status st = SG_OK;
  if (!tape) SG_RAISE(SG_ERR_INVALID_ARG, "backward weights: tape is NULL");
  if (!tape->wpending)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "backward weights: no split backward ran on this tape "
             "(sg_tape_backward_split first)");
  for (int k = tape->nnodes - 1; k >= 0 && st == SG_OK; --k)
    st = ag_node_backward(tape, tape->nodes[k], AG_WEIGHTS);
  if (st == SG_OK) st = ag_backward_end(tape, st);
  /* every use is counted off: release the nodes without sg_tape_clear's
   * reset of their inputs' use counts, which would cut the counts of
   * another tape's uses of the same parameters (a pipeline stage's other
   * micro-batches in flight: their grad_ready would never fire) */
  for (int k = 0; k < tape->nnodes && st == SG_OK; ++k)
    ag_node_release(tape, tape->nodes[k]);
  if (st == SG_OK) tape->nnodes = 0;
  sg_tape_clear(tape);
fail:
  return st;
}

int sg_tape_weights_pending(sg_tape_t tape) { return tape && tape->wpending; }
