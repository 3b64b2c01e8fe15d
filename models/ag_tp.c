/* shardgrid — Megatron tensor parallelism on the tape (docs/strategies.md,
 * "Tensor parallelism"): the two conjugate ops over a tensor-parallel group
 * and the column-/row-parallel linear layers made of them.
 *
 * Inside a TP region a variable is this tp rank's channel slice: its
 * sharding over the other mesh dims (batch, domain) is the input's, and
 * its "global" channel count is the local one (the tape never mixes the
 * slices of different tp ranks: only the two ops below cross the group).
 * The collectives are the fixed-order all-reduce (sg_allreduce_det), so
 * every tp rank holds the same bits of a replicated activation and the
 * replicas of the parameters outside the TP regions never drift. */
#include <string.h>

#include "autograd_impl.h"
#include "op_registry_impl.h"
#include "sg_autograd.h"
#include "sg_comm.h"

typedef struct tp_attr {
  sg_group_t g; /* NULL or size 1: no communication */
} tp_attr;

static int64_t numel_of(const sg_tensor *t) { return sg_tensor_numel(t); }

/* dst = the sum of src over the group (dst may be src), or a copy. */
static sg_status tp_sum(const tp_attr *a, const sg_tensor *like,
                        const void *src, void *dst) {
  const int64_t n = numel_of(like);
  if (a->g && sg_group_size(a->g) > 1)
    return sg_allreduce_det(a->g, src, dst, n, like->dtype, SG_REDUCE_SUM);
  if (dst != src && n > 0) memcpy(dst, src, sg_tensor_nbytes(like));
  return SG_OK;
}

static sg_status copy_fwd(sg_node *node) {
  sg_status st = SG_OK;
  const sg_tensor *x = &node->in[0]->value;
  SG_TRY(sg_node_alloc_out_uninit(node, 0, x->ndim, x->shape));
  if (numel_of(x) > 0)
    memcpy(node->out[0]->value.data, x->data, sg_tensor_nbytes(x));
fail:
  return st;
}

/* the conjugate: every tp rank's gradient of its replica, summed */
static sg_status copy_bwd(sg_node *node) {
  if (!node->gin[0]) return SG_OK;
  return tp_sum((const tp_attr *)node->attr, &node->in[0]->value,
                node->out[0]->grad.data, node->gin[0]);
}

static sg_status reduce_fwd(sg_node *node) {
  sg_status st = SG_OK;
  const tp_attr *a = (const tp_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  st = sg_node_alloc_out_uninit(node, 0, x->ndim, x->shape);
  /* a rank without its output must not leave the others in the sum */
  if (a->g && sg_group_size(a->g) > 1) st = sg_group_agree(a->g, st);
  SG_TRY(st);
  SG_TRY(tp_sum(a, x, x->data, node->out[0]->value.data));
fail:
  return st;
}

/* backward of "reduce from TP region" is the identity (rule.grad_identity) */
static sg_status reduce_bwd(sg_node *node) {
  (void)node;
  return SG_OK;
}

static const sg_op_def tp_copy_op = {.name = "tp_copy",
                                     .slots = {SG_SLOT_ACT},
                                     .forward = copy_fwd,
                                     .backward = copy_bwd,
                                     .rule = {.windowed_input = -1,
                                              .accepts = SG_ACCEPT_ALL,
                                              .out = SG_OUT_LIKE_INPUT,
                                              .writes_gin = 1u}};

static const sg_op_def tp_reduce_op = {.name = "tp_reduce",
                                       .slots = {SG_SLOT_ACT},
                                       .forward = reduce_fwd,
                                       .backward = reduce_bwd,
                                       .rule = {.windowed_input = -1,
                                                .accepts = SG_ACCEPT_ALL,
                                                .out = SG_OUT_LIKE_INPUT,
                                                .grad_identity = 1u}};

static sg_status tp_apply(sg_tape_t t, const sg_op_def *op, sg_group_t tp,
                          sg_var *x, sg_var **y) {
  if (!t || !x || !y)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "%s: tape, x and y are required", op->name);
  tp_attr at = {.g = tp};
  return sg_tape_apply(t, op, 1, &x, 1, NULL, &at, sizeof at, y);
}

sg_status sg_ag_tp_copy(sg_tape_t t, sg_group_t tp, sg_var *x, sg_var **y) {
  return tp_apply(t, &tp_copy_op, tp, x, y);
}

sg_status sg_ag_tp_reduce(sg_tape_t t, sg_group_t tp, sg_var *x, sg_var **y) {
  return tp_apply(t, &tp_reduce_op, tp, x, y);
}

static int tp_on(sg_group_t tp) { return tp && sg_group_size(tp) > 1; }

/* The local layer of a column/row pair on this rank's weight slice: a
 * channel-wise linear (win NULL) or a convolution. */
static sg_status tp_local(sg_tape_t t, const sg_window *win, sg_var *x,
                          sg_var *w, sg_var *b, sg_var **y) {
  return win ? sg_ag_conv(t, x, w, b, win, y) : sg_ag_linear(t, x, w, b, y);
}

/* Column-parallel (row 0): tp_copy, the local layer (its output channels).
 * Row-parallel (row 1): the local layer without bias on this rank's input
 * channels, tp_reduce of the partial sums, the bias once after. */
static sg_status tp_layer(sg_tape_t t, sg_group_t tp, int row,
                          const sg_window *win, sg_var *x, sg_var *w, sg_var *b,
                          sg_var **y) {
  sg_status st = SG_OK;
  sg_var *h = x;
  if (!tp_on(tp)) return tp_local(t, win, x, w, b, y);
  if (!row) {
    SG_TRY(sg_ag_tp_copy(t, tp, x, &h));
    return tp_local(t, win, h, w, b, y);
  }
  SG_TRY(tp_local(t, win, x, w, NULL, &h));
  SG_TRY(sg_ag_tp_reduce(t, tp, h, b ? &h : y));
  if (b) SG_TRY(sg_ag_bias(t, h, b, y)); /* once, after the reduction */
fail:
  return st;
}

sg_status sg_ag_linear_col(sg_tape_t t, sg_group_t tp, sg_var *x, sg_var *w,
                           sg_var *b, sg_var **y) {
  return tp_layer(t, tp, 0, NULL, x, w, b, y);
}

sg_status sg_ag_linear_row(sg_tape_t t, sg_group_t tp, sg_var *x, sg_var *w,
                           sg_var *b, sg_var **y) {
  return tp_layer(t, tp, 1, NULL, x, w, b, y);
}

sg_status sg_ag_conv_tp(sg_tape_t t, sg_group_t tp, int row, sg_var *x,
                        sg_var *w, sg_var *b, const sg_window *win,
                        sg_var **y) {
  if (!win)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "conv_tp: windows are required");
  return tp_layer(t, tp, row, win, x, w, b, y);
}

sg_status sg_ag_spectral_linear_tp(sg_tape_t t, sg_group_t tp, int row,
                                   struct sg_spectral_conv *conv, sg_var *x,
                                   sg_var *W, sg_var *w, sg_var *b,
                                   sg_var **y) {
  sg_status st = SG_OK;
  sg_var *h = x, *s = NULL, *c = NULL;
  const int on = tp_on(tp);
  if (on && !row) SG_TRY(sg_ag_tp_copy(t, tp, x, &h));
  SG_TRY(sg_ag_spectral_conv(t, conv, h, W, &s));
  /* the row layer's bias once, after the reduction of the partial sums */
  SG_TRY(sg_ag_linear(t, h, w, on && row ? NULL : b, &c));
  SG_TRY(sg_ag_binary(t, SG_BINARY_ADD, s, c, &h));
  if (on && row) {
    SG_TRY(sg_ag_tp_reduce(t, tp, h, &h));
    if (b) SG_TRY(sg_ag_bias(t, h, b, &h));
  }
  *y = h;
fail:
  return st;
}

const sg_op_def *sg_ag_tp_copy_op_def(void) { return &tp_copy_op; }
const sg_op_def *sg_ag_tp_reduce_op_def(void) { return &tp_reduce_op; }
