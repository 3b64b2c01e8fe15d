/* shardgrid — autograd tape: activation checkpointing (sg_ag_checkpoint).
 *
 * On device variables the block runs as it would without the checkpoint:
 * each op on its inputs' device (ag_node_device decides, and refuses, per
 * op), the stand-ins are views of the inputs' device buffers, the outputs
 * are moved over (or copied on their device), and the backward's
 * recomputation, seeds and input gradients stay on the device (ag_mem_copy
 * for the copies). No op of the tape draws random numbers, so the
 * recomputation is the forward bit for bit. */
#include "op_registry_impl.h"
#include "autograd_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sg_comm.h"
#include "sg_device.h"

const sg_op_def ag_ckpt_op = {.name = "checkpoint",
                              .rule = {.windowed_input = -1}};

const sg_op_def *sg_ag_checkpoint_op_def(void) { return &ag_ckpt_op; }

/* ---- activation checkpointing ------------------------------------------------ */

static sg_status ag_coll_add(sg_tape_t t, sg_var *v) {
  sg_status st = SG_OK;
  for (int i = 0; i < t->ncoll; ++i)
    if (t->coll[i] == v) goto fail;
  SG_TRY(
      ag_grow((void **)&t->coll, &t->cap_coll, t->ncoll + 1, sizeof *t->coll));
  t->coll[t->ncoll++] = v;
fail:
  return st;
}

/* An op (or a nested block) of a checkpointed block's forward reads in:
 * note the leaves requiring gradients; an activation must be one of the
 * block's inputs or made inside the block. The same on every rank. */
sg_status ag_collect(sg_tape_t t, const char *who, int nin, sg_var *const *in) {
  sg_status st = SG_OK;
  for (int i = 0; i < nin; ++i) {
    sg_var *v = in[i];
    int ok = v->is_leaf;
    if (v->is_leaf && v->requires_grad) SG_TRY(ag_coll_add(t, v));
    for (int k = 0; !ok && k < t->ck_nin; ++k) ok = t->ck_in[k] == v;
    for (int k = t->nowned - 1; !ok && k >= 0; --k) ok = t->owned[k] == v;
    if (!ok)
      SG_RAISE(
          SG_ERR_INVALID_ARG,
          "checkpointed block: %s reads '%s', an activation made outside the block: "
          "pass it as one of the block's inputs",
          who, v->name);
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
static MPI_Comm ag_ckpt_comm(sg_tape_t tape, int nin, sg_var *const *in,
                             int *ref) {
  *ref = -1;
  for (int i = 0; i < nin && *ref < 0; ++i)
    if (in[i]->mesh) *ref = i;
  return ag_agree_comm(tape,
                       *ref >= 0 ? sg_mesh_comm(in[*ref]->mesh) : MPI_COMM_NULL,
                       tape->nhooks > 0);
}

sg_status sg_ag_checkpoint(sg_tape_t tape, sg_block_fn fn, void *ctx, int nin,
                           sg_var *const *in, int nout, sg_var **out) {
  sg_status st = SG_OK;
  sg_tape_t c = NULL;
  sg_node *node = NULL;
  ag_ckpt *ck = NULL;
  sg_var stand[SG_NODE_MAX_IN], *sp[SG_NODE_MAX_IN], *co[SG_NODE_MAX_OUT];
  int recorded = 0, ref = -1;
  if (!tape || !fn || !in || !out)
    SG_RAISE(
        SG_ERR_INVALID_ARG,
        "checkpoint: tape, block function, inputs and outputs are required");
  if (nin < 1 || nin > SG_NODE_MAX_IN || nout < 1 || nout > SG_NODE_MAX_OUT)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "checkpoint: %d inputs, %d outputs (1..%d, 1..%d)", nin, nout,
             SG_NODE_MAX_IN, SG_NODE_MAX_OUT);
  for (int i = 0; i < nin; ++i)
    if (!in[i]) SG_RAISE(SG_ERR_INVALID_ARG, "checkpoint: input %d is NULL", i);
  sg_var *inl[SG_NODE_MAX_IN]; /* out may alias in (h = block(h)) */
  for (int i = 0; i < nin; ++i) inl[i] = in[i];
  in = inl;
  for (int j = 0; j < nout; ++j) out[j] = NULL;
  if (tape->collecting)
    SG_TRY(ag_collect(tape, "a nested checkpoint", nin, in));
  const MPI_Comm comm = ag_ckpt_comm(tape, nin, in, &ref);
  /* this rank's preparation may fail alone: agree before the block runs */
  st = ag_child(tape, &c);
  if (st == SG_OK) {
    node = calloc(1, sizeof *node);
    if (!node)
      st = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "checkpoint node");
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
    for (int k = 0; co[j] && k < c->nowned && !mine; ++k)
      mine = c->owned[k] == co[j];
    for (int i = 0; mine && i < j; ++i) mine = co[i] != co[j];
    if (!mine)
      st = sg_error_set(
          SG_ERR_INVALID_ARG, __FILE__, __LINE__,
          "checkpointed block: output %d is %s", j,
          !co[j]
              ? "NULL"
              : "not a variable made by the block's ops (an input, a leaf or "
                "another output returned as is)");
  }
  if (st == SG_OK)
    st = sg_calloc(sg_device_host(),
                   sizeof *ck +
                       (size_t)(c->ncoll > 0 ? c->ncoll : 1) * sizeof(sg_var *),
                   (void **)&ck);
  if (st == SG_OK)
    st = ag_grow((void **)&tape->owned, &tape->cap_owned, tape->nowned + nout,
                 sizeof *tape->owned);
  if (st == SG_OK)
    st = ag_grow((void **)&tape->nodes, &tape->cap_nodes, tape->nnodes + 1,
                 sizeof *tape->nodes);
  st = ag_agree(comm, st);
  if (st != SG_OK) goto fail;
  /* the node: its inputs, the leaves used inside, the outputs (the block's
   * values moved over) */
  node->op = &ag_ckpt_op;
  node->device = in[0]->value.device; /* its ops ran on their inputs' */
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
  if (c->ncoll > 0) /* a block may use no leaf of its own (coll NULL) */
    memcpy(ck->cap, c->coll, (size_t)c->ncoll * sizeof *ck->cap);
  node->saved = ck;
  node->saved_bytes = sizeof *ck +
                      (size_t)(c->ncoll > 0 ? c->ncoll : 1) * sizeof(sg_var *);
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
    } else { /* a copy on the block output's device */
      SG_TRY(ag_alloc_dz(&v->value, co[j]->value.device, co[j]->value.dtype,
                         co[j]->value.ndim, co[j]->value.shape, 0));
      v->owns_value = 1;
      if (ag_numel(&v->value) > 0)
        SG_TRY(ag_mem_copy(v->value.device, v->value.data, co[j]->value.device,
                           co[j]->value.data, ag_nbytes(&v->value)));
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
sg_status ag_ckpt_backward(sg_tape_t tape, sg_node *node) {
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
  for (int j = 0; j < node->nout && st == SG_OK; ++j)
    st = ag_ensure_grad(tape, node->out[j]);
  /* an input that has a gradient already (a leaf's accumulates; an
   * activation's from uses after the block): the block adds into it, as
   * the ops would on this tape */
  for (int i = 0; i < node->nin && st == SG_OK; ++i) {
    sg_var *v = node->in[i];
    if (!v->requires_grad || ag_numel(&v->value) == 0 ||
        !(v->is_leaf || v->has_grad))
      continue;
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
    if (!co[j])
      SG_RAISE(SG_ERR_INVALID_ARG,
               "checkpointed block: output %d is NULL in the recomputation", j);
    if (!co[j]->requires_grad || !co[j]->producer ||
        ag_numel(&co[j]->value) == 0)
      continue;
    if (ag_numel(&co[j]->value) != ag_numel(&node->out[j]->value) ||
        co[j]->grad.data)
      SG_RAISE(SG_ERR_INTERNAL,
               "checkpointed block: output %d differs in the recomputation", j);
    co[j]->grad = node->out[j]->grad;
    co[j]->grad.owns = 0;
    co[j]->owns_grad = 0;
    co[j]->has_grad = 1;
  }
  SG_TRY(ag_backward_walk(c, 0));
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
      SG_TRY(ag_mem_copy(v->grad.device, v->grad.data, s->grad.device,
                         s->grad.data, ag_nbytes(&v->grad)));
    }
    v->has_grad = 1;
  }
  /* the node's uses are done: its inputs', then the block's parameters'
   * (last used first, as backward without the checkpoint meets them) */
  for (int i = 0; i < node->nin && st == SG_OK; ++i) {
    sg_var *v = node->in[i];
    if (v->requires_grad && --v->pending == 0 && v->is_param)
      st = ag_call_hooks(tape, AG_GRAD_READY, v);
  }
  for (int k = ck->ncap - 1; k >= 0 && st == SG_OK; --k) {
    sg_var *v = ck->cap[k];
    if (--v->pending == 0 && v->is_param)
      st = ag_call_hooks(tape, AG_GRAD_READY, v);
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
