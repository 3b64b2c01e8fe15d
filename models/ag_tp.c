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
 * replicas of the parameters outside the TP regions never drift.
 *
 * tp_copy, tp_reduce and sp_share run on the node's device: one body for
 * both (forward_cuda is forward), the copies through ag_mem_copy, the sums
 * through ag_sum_det (on device buffers the same fixed-order sum as
 * sg_allreduce_det, its collectives through the comm layer: NCCL on a GPU,
 * MPI on host memory, a faked device included), sp_share's scale through
 * ag_dev_scale. They launch no kernel of their own, so their device
 * entries exist in every build (the device table, models/op_device.c).
 * The sequence-parallel moves (tp_seq_*, sp_scatter) likewise: their
 * token slices through ag_dev_slice (concat's part kernel on a device),
 * their gathers and all-to-alls on the device buffers, the reduce-
 * scatter's rank-order sum through ag_dev_add. Over several ranks on a
 * real device the group needs NCCL (or a CUDA-aware MPI): else refused,
 * ag_dev_comm_ok. */
#include <string.h>

#include "autograd_impl.h"
#include "op_registry_impl.h"
#include "sg_autograd.h"
#include "sg_comm.h"
#include "sg_decomp.h"

#include <stdlib.h>

static int tp_on(sg_group_t tp) { return tp && sg_group_size(tp) > 1; }

typedef struct tp_attr {
  sg_group_t g; /* NULL or size 1: no communication */
} tp_attr;

static long long tp_rx; /* bytes this rank received in the tp ops */

static int64_t numel_of(const sg_tensor *t) { return sg_tensor_numel(t); }

/* dst = the sum of src over the group (dst may be src), or a copy, on the
 * node's device. */
static sg_status tp_sum(const tp_attr *a, const sg_node *node,
                        const sg_tensor *like, const void *src, void *dst) {
  /* the fixed-order all-reduce gathers the other ranks' payloads */
  if (a->g && sg_group_size(a->g) > 1)
    tp_rx += (long long)(sg_group_size(a->g) - 1) *
             (long long)sg_tensor_nbytes(like);
  return ag_sum_det(a->g, node->device, like->dtype, numel_of(like), src, dst);
}

static sg_status copy_fwd(sg_node *node) {
  sg_status st = SG_OK;
  const sg_tensor *x = &node->in[0]->value;
  SG_TRY(sg_node_alloc_out_uninit(node, 0, x->ndim, x->shape));
  if (numel_of(x) > 0)
    SG_TRY(ag_mem_copy(node->device, node->out[0]->value.data, node->device,
                       x->data, sg_tensor_nbytes(x)));
fail:
  return st;
}

/* the conjugate: every tp rank's gradient of its replica, summed */
static sg_status copy_bwd(sg_node *node) {
  if (!node->gin[0]) return SG_OK;
  return tp_sum((const tp_attr *)node->attr, node, &node->in[0]->value,
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
  SG_TRY(tp_sum(a, node, x, x->data, node->out[0]->value.data));
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
                                              .writes_gin = 1u},
                                     .forward_cuda = copy_fwd,
                                     .backward_cuda = copy_bwd};

static const sg_op_def tp_reduce_op = {.name = "tp_reduce",
                                       .slots = {SG_SLOT_ACT},
                                       .forward = reduce_fwd,
                                       .backward = reduce_bwd,
                                       .rule = {.windowed_input = -1,
                                                .accepts = SG_ACCEPT_ALL,
                                                .out = SG_OUT_LIKE_INPUT,
                                                .grad_identity = 1u},
                                       .forward_cuda = reduce_fwd,
                                       .backward_cuda = reduce_bwd};

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

/* The weights' replicated parameter p as used on token slices: its
 * gradient there is partial over tp (tp_copy sums it); p itself without
 * tp. */
static sg_status tp_param(sg_tape_t t, sg_group_t tp, sg_var *p, sg_var **q) {
  *q = p;
  if (!p || !tp_on(tp)) return SG_OK;
  return sg_ag_tp_copy(t, tp, p, q);
}

sg_status sg_ag_tp_param(sg_tape_t t, sg_group_t tp, sg_var *p, sg_var **q) {
  if (!t || !q)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "tp_param: tape and q are required");
  return tp_param(t, tp, p, q);
}

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

sg_status sg_ag_linear_col_seq(sg_tape_t t, sg_group_t tp, const sg_var *like,
                               sg_var *x, sg_var *w, sg_var *b, sg_var **y) {
  sg_status st = SG_OK;
  sg_var *h = NULL;
  if (!like) return tp_layer(t, tp, 0, NULL, x, w, b, y);
  SG_TRY(sg_ag_tp_seq_allgather(t, tp, x, like, &h));
  SG_TRY(sg_ag_linear(t, h, w, b, y));
fail:
  return st;
}

sg_status sg_ag_linear_row_seq(sg_tape_t t, sg_group_t tp, int seq, sg_var *x,
                               sg_var *w, sg_var *b, sg_var **y) {
  sg_status st = SG_OK;
  sg_var *h = NULL;
  if (!seq) return tp_layer(t, tp, 1, NULL, x, w, b, y);
  SG_TRY(sg_ag_linear(t, x, w, NULL, &h));
  SG_TRY(sg_ag_tp_seq_reduce_scatter(t, tp, h, b ? &h : y));
  SG_TRY(tp_param(t, tp, b, &b)); /* on the slice: partial over tp */
  if (b) SG_TRY(sg_ag_bias(t, h, b, y));
fail:
  return st;
}

sg_status sg_ag_linear_col(sg_tape_t t, sg_group_t tp, sg_var *x, sg_var *w,
                           sg_var *b, sg_var **y) {
  return sg_ag_linear_col_seq(t, tp, NULL, x, w, b, y);
}

sg_status sg_ag_linear_row(sg_tape_t t, sg_group_t tp, sg_var *x, sg_var *w,
                           sg_var *b, sg_var **y) {
  return sg_ag_linear_row_seq(t, tp, 0, x, w, b, y);
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

/* ---- Megatron sequence parallelism (tp_sequence) -----------------------
 * Between the TP regions the activations are token slices: tp rank r holds
 * the balanced split r of this rank's T local tokens (flattened, row-major),
 * as a plain (N, C, T_r) variable (LayerNorm, dropout and residuals are
 * per token). A full tensor is (N, C, spatial...) sharded like `like`. */

enum { SEQ_MAX_P = 256 }; /* tp ranks (the counts live on the stack) */

/* SEQ_PAD: the full tensor with this rank's slice in place, zeros
 * elsewhere (the slice's conjugate where the full tensor is Partial over
 * the group: the sp dim's scatter) */
typedef enum seq_move { SEQ_SLICE, SEQ_GATHER, SEQ_RSCATTER, SEQ_PAD } seq_move;

typedef struct seq_attr {
  sg_group_t g;
  seq_move fwd, bwd;
  sg_mesh_t mesh; /* the full tensor's sharding (like's) */
  int ndim;
  int64_t shape[SG_TENSOR_MAX_DIMS], global[SG_TENSOR_MAX_DIMS];
  sg_placement pl[SG_MESH_MAX_DIMS];
} seq_attr;

_Static_assert(sizeof(seq_attr) <= 256, "seq_attr fits a node's attributes");

static int seq_size(const seq_attr *a) {
  return a->g ? sg_group_size(a->g) : 1;
}
static int seq_rank(const seq_attr *a) {
  return a->g ? sg_group_rank(a->g) : 0;
}

static int64_t seq_tokens(const seq_attr *a) {
  int64_t n = 1;
  for (int d = 2; d < a->ndim; ++d) n *= a->shape[d];
  return n;
}

/* Rank q's token slice [off, off + cnt) of the T local tokens. */
static void seq_slice(const seq_attr *a, int q, int64_t *off, int64_t *cnt) {
  const int64_t T = seq_tokens(a);
  *off = sg_split_offset(T, seq_size(a), q);
  *cnt = sg_split_size(T, seq_size(a), q);
}

/* Copy between rank q's slice of full (rows = N * C of T tokens) and the
 * packed (rows, cnt) block; to_full: packed -> full. On dev. */
static sg_status seq_pack(const seq_attr *a, sg_device dev, sg_dtype dt, int q,
                          void *full, void *packed, int to_full) {
  int64_t off, cnt;
  seq_slice(a, q, &off, &cnt);
  return ag_dev_slice(dev, dt, a->shape[0] * a->shape[1], cnt, seq_tokens(a),
                      off, to_full, full, packed);
}

/* full (this rank's whole tensor) from the ranks' slices (mine: part), on
 * dev (the gather through the comm layer: NCCL for device buffers). */
static sg_status seq_allgather(const seq_attr *a, sg_device dev, sg_dtype dt,
                               const void *part, void *full) {
  sg_status st = SG_OK;
  const int P = seq_size(a), r = seq_rank(a);
  const int64_t rows = a->shape[0] * a->shape[1];
  const size_t es = sg_dtype_size(dt);
  int64_t cnt[SEQ_MAX_P], dsp[SEQ_MAX_P], off, n;
  char *buf = NULL;
  if (P == 1) {
    if (rows * seq_tokens(a) > 0)
      SG_TRY(ag_mem_copy(dev, full, dev, part,
                         (size_t)(rows * seq_tokens(a)) * es));
    goto fail;
  }
  SG_TRY(ag_dev_comm_ok(a->g, dev, "the token all-gather"));
  int64_t tot = 0;
  for (int q = 0; q < P; ++q) {
    seq_slice(a, q, &off, &n);
    cnt[q] = rows * n, dsp[q] = tot, tot += cnt[q];
  }
  st = ag_mem_alloc(dev, (size_t)(tot > 0 ? tot : 1) * es, 0, (void **)&buf);
  st = sg_group_agree(a->g, st);
  SG_TRY(st);
  SG_TRY(sg_allgatherv(a->g, part, cnt[r], buf, cnt, dsp, dt));
  tp_rx += (long long)((size_t)(tot - cnt[r]) * es);
  for (int q = 0; q < P; ++q)
    SG_TRY(seq_pack(a, dev, dt, q, full, buf + (size_t)dsp[q] * es, 1));
fail:
  if (buf) ag_mem_free(dev, (void **)&buf);
  return st;
}

/* part = my slice of the sum over the group of full: every rank sends each
 * slice to its owner (all-to-allv) and the owner sums them in rank order
 * (deterministic; (P - 1) slices in per rank; the add kernel on a
 * device: the same bits). */
static sg_status seq_reduce_scatter(const seq_attr *a, sg_device dev,
                                    sg_dtype dt, const void *full, void *part) {
  sg_status st = SG_OK;
  const int P = seq_size(a), r = seq_rank(a);
  const int64_t rows = a->shape[0] * a->shape[1];
  const size_t es = sg_dtype_size(dt);
  int64_t sc[SEQ_MAX_P], rc[SEQ_MAX_P], off, n;
  char *sbuf = NULL, *buf = NULL;
  if (P == 1) return seq_allgather(a, dev, dt, full, part); /* a copy */
  if (dt != SG_DTYPE_F64 && dt != SG_DTYPE_F32)
    return sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                        "tp reduce-scatter: f32 or f64 only");
  SG_TRY(ag_dev_comm_ok(a->g, dev, "the token reduce-scatter"));
  seq_slice(a, r, &off, &n);
  const int64_t m = rows * n, tot = rows * seq_tokens(a);
  for (int q = 0; q < P; ++q) {
    int64_t o2, n2;
    seq_slice(a, q, &o2, &n2);
    sc[q] = rows * n2, rc[q] = m;
  }
  st = ag_mem_alloc(dev, (size_t)(tot > 0 ? tot : 1) * es, 0, (void **)&sbuf);
  if (st == SG_OK)
    st = ag_mem_alloc(dev, (size_t)(P * m > 0 ? P * m : 1) * es, 0,
                      (void **)&buf);
  st = sg_group_agree(a->g, st);
  SG_TRY(st);
  for (int q = 0, d = 0; q < P; d += (int)sc[q], ++q)
    SG_TRY(seq_pack(a, dev, dt, q, (void *)full, sbuf + (size_t)d * es, 0));
  SG_TRY(sg_alltoallv(a->g, sbuf, sc, NULL, buf, rc, NULL, dt));
  tp_rx += (long long)((size_t)((P - 1) * m) * es);
  if (m > 0) SG_TRY(ag_mem_copy(dev, part, dev, buf, (size_t)m * es));
  for (int q = 1; q < P; ++q)
    SG_TRY(ag_dev_add(dev, dt, m, part, buf + (size_t)(q * m) * es, part));
fail:
  if (sbuf) ag_mem_free(dev, (void **)&sbuf);
  if (buf) ag_mem_free(dev, (void **)&buf);
  return st;
}

/* dst (slice or full, by `move`'s result) from src, on dev. */
static sg_status seq_do(const seq_attr *a, seq_move move, sg_device dev,
                        sg_dtype dt, const void *src, void *dst) {
  sg_status st = SG_OK;
  if (move == SEQ_GATHER) return seq_allgather(a, dev, dt, src, dst);
  if (move == SEQ_RSCATTER) return seq_reduce_scatter(a, dev, dt, src, dst);
  if (move == SEQ_PAD) {
    const int64_t n = a->shape[0] * a->shape[1] * seq_tokens(a);
    if (n > 0) SG_TRY(ag_mem_zero(dev, dst, (size_t)n * sg_dtype_size(dt)));
    return seq_pack(a, dev, dt, seq_rank(a), dst, (void *)src, 1);
  }
  return seq_pack(a, dev, dt, seq_rank(a), (void *)src, dst, 0);
fail:
  return st;
}

static sg_status seq_fwd(sg_node *node) {
  sg_status st = SG_OK;
  const seq_attr *a = (const seq_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  sg_var *y = node->out[0];
  int64_t off, n;
  seq_slice(a, seq_rank(a), &off, &n);
  const int64_t part[3] = {a->shape[0], a->shape[1], n};
  const int full = a->fwd == SEQ_GATHER;
  st = full ? sg_node_alloc_out_uninit(node, 0, a->ndim, a->shape)
            : sg_node_alloc_out_uninit(node, 0, 3, part);
  if (seq_size(a) > 1) st = sg_group_agree(a->g, st);
  SG_TRY(st);
  SG_TRY(seq_do(a, a->fwd, node->device, x->dtype, x->data, y->value.data));
  if (full && a->mesh) { /* the full tensor is sharded like `like` */
    y->mesh = a->mesh;
    memcpy(y->placements, a->pl, sizeof a->pl);
    memcpy(y->global_shape, a->global, sizeof a->global);
  }
fail:
  return st;
}

static sg_status seq_bwd(sg_node *node) {
  const seq_attr *a = (const seq_attr *)node->attr;
  if (!node->gin[0] && (a->bwd == SEQ_SLICE || a->bwd == SEQ_PAD)) return SG_OK;
  /* a rank whose input needs no gradient still joins the collective */
  void *dx = node->gin[0];
  sg_status st = SG_OK;
  if (!dx)
    st = ag_mem_alloc(node->device, sg_tensor_nbytes(&node->in[0]->value) + 1,
                      0, &dx);
  if (st == SG_OK)
    st = seq_do(a, a->bwd, node->device, node->out[0]->grad.dtype,
                node->out[0]->grad.data, dx);
  if (dx && dx != node->gin[0]) ag_mem_free(node->device, &dx);
  return st;
}

#define SEQ_OP(nm)                                          \
  {                                                         \
    .name = nm, .slots = {SG_SLOT_ACT}, .forward = seq_fwd, \
    .backward = seq_bwd,                                    \
    .rule = {.windowed_input = -1,                          \
             .accepts = SG_ACCEPT_ALL,                      \
             .out = SG_OUT_REPLICATE,                       \
             .writes_gin = 1u},                             \
    .forward_cuda = seq_fwd, .backward_cuda = seq_bwd       \
  }
static const sg_op_def seq_ops[5] = {SEQ_OP("tp_seq_scatter"),
                                     SEQ_OP("tp_seq_gather"),
                                     SEQ_OP("tp_seq_allgather"),
                                     SEQ_OP("tp_seq_reduce_scatter"),
                                     SEQ_OP("sp_scatter")};
#undef SEQ_OP

static sg_status seq_apply(sg_tape_t t, int k, sg_group_t tp, sg_var *x,
                           const sg_var *like, sg_var **y) {
  static const seq_move mv[5][2] = {{SEQ_SLICE, SEQ_GATHER},
                                    {SEQ_GATHER, SEQ_SLICE},
                                    {SEQ_GATHER, SEQ_RSCATTER},
                                    {SEQ_RSCATTER, SEQ_GATHER},
                                    {SEQ_SLICE, SEQ_PAD}};
  if (!t || !x || !y || !like)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "%s: tape, x, like and y are required",
                        seq_ops[k].name);
  if (like->value.ndim < 3 || (tp && sg_group_size(tp) > SEQ_MAX_P))
    return sg_error_set(SG_ERR_SHAPE, __FILE__, __LINE__,
                        "%s: like must be (N, C, spatial...), tp <= %d",
                        seq_ops[k].name, SEQ_MAX_P);
  seq_attr a;
  memset(&a, 0, sizeof a);
  a.g = tp && sg_group_size(tp) > 1 ? tp : NULL;
  a.fwd = mv[k][0], a.bwd = mv[k][1];
  a.mesh = like->mesh, a.ndim = like->value.ndim;
  memcpy(a.shape, like->value.shape, sizeof a.shape);
  memcpy(a.global, like->global_shape, sizeof a.global);
  memcpy(a.pl, like->placements, sizeof a.pl);
  return sg_tape_apply(t, &seq_ops[k], 1, &x, 1, NULL, &a, sizeof a, y);
}

sg_status sg_ag_tp_seq_scatter(sg_tape_t t, sg_group_t tp, sg_var *x,
                               sg_var **y) {
  return seq_apply(t, 0, tp, x, x, y);
}
sg_status sg_ag_tp_seq_gather(sg_tape_t t, sg_group_t tp, sg_var *x,
                              const sg_var *like, sg_var **y) {
  return seq_apply(t, 1, tp, x, like, y);
}
sg_status sg_ag_tp_seq_allgather(sg_tape_t t, sg_group_t tp, sg_var *x,
                                 const sg_var *like, sg_var **y) {
  return seq_apply(t, 2, tp, x, like, y);
}
sg_status sg_ag_tp_seq_reduce_scatter(sg_tape_t t, sg_group_t tp, sg_var *x,
                                      sg_var **y) {
  return seq_apply(t, 3, tp, x, x, y);
}

sg_status sg_ag_sp_scatter(sg_tape_t t, sg_group_t sp, sg_var *x, sg_var **y) {
  return seq_apply(t, 4, sp, x, x, y);
}

/* sp_share: y = x; dx = dy / P (a parameter used after the sp gather, where
 * every sp rank computes the same: its share, so the plan's sum over sp
 * gives the gradient once) */
static sg_status share_bwd(sg_node *node) {
  const tp_attr *a = (const tp_attr *)node->attr;
  if (!node->gin[0]) return SG_OK;
  const sg_tensor *g = &node->out[0]->grad;
  const int P = a->g ? sg_group_size(a->g) : 1; /* no group: one rank */
  if (g->dtype != SG_DTYPE_F64 && g->dtype != SG_DTYPE_F32)
    return sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                        "sp_share: f32 or f64 only");
  /* the scale op's kernel on either device: 1/P rounded to the dtype */
  return ag_dev_scale(node->device, g->dtype, numel_of(g),
                      1.0 / (double)(P > 0 ? P : 1), g->data, node->gin[0]);
}

static const sg_op_def sp_share_op = {.name = "sp_share",
                                      .slots = {SG_SLOT_ACT},
                                      .forward = copy_fwd,
                                      .backward = share_bwd,
                                      .rule = {.windowed_input = -1,
                                               .accepts = SG_ACCEPT_ALL,
                                               .out = SG_OUT_LIKE_INPUT,
                                               .writes_gin = 1u},
                                      .forward_cuda = copy_fwd,
                                      .backward_cuda = share_bwd};

sg_status sg_ag_sp_share(sg_tape_t t, sg_group_t sp, sg_var *p, sg_var **q) {
  if (!t || !q)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sp_share: tape and q are required");
  *q = p;
  if (!p) return SG_OK;
  return tp_apply(t, &sp_share_op, sp, p, q); /* no group: the identity */
}

void sg_ag_tp_bytes(long long *bytes, int reset) {
  if (bytes) *bytes = tp_rx;
  if (reset) tp_rx = 0;
}

const sg_op_def *sg_ag_tp_copy_op_def(void) { return &tp_copy_op; }
const sg_op_def *sg_ag_tp_reduce_op_def(void) { return &tp_reduce_op; }
const sg_op_def *sg_ag_sp_share_op_def(void) { return &sp_share_op; }
