/* shardgrid — the op tables of the autograd tape: local kernels from
 * shardtensor/ops plus each op's sharding rule. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd_impl.h"
#include "op_registry_impl.h"
#include "sg_autograd.h"
#include "sg_config.h"
#include "sg_device.h"
#include "sg_exchange.h"
#if SG_HAVE_CUDA
#include "sg_ops_cuda.h"
/* the CUDA entry points of an op (sg_op_def.forward_cuda): thin wrappers
 * over the launchers of sg_ops_cuda.h on the legacy default stream, which
 * orders them with the tape's device copies; NULL without CUDA */
#define AG_CUDA(f) f
#else
#define AG_CUDA(f) NULL
#endif

/* One body per op for both devices: X_fwd_on / X_bwd_on(node, cuda) call
 * their kernel through AG_KERNEL, the host kernel or (cuda) its launcher of
 * sg_ops_cuda.h with the same arguments and the stream NULL; AG_ENTRIES(X)
 * defines the entries X_fwd, X_bwd (host) and X_fwd_cuda, X_bwd_cuda over
 * them. Without CUDA the host call is all that is compiled. */
#if SG_HAVE_CUDA
#define AG_KERNEL(cuda, host, dev, ...) \
  ((cuda) ? dev(__VA_ARGS__, NULL) : host(__VA_ARGS__))
#define AG_ENTRIES_CUDA(x)                                                     \
  static sg_status x##_fwd_cuda(sg_node *node) { return x##_fwd_on(node, 1); } \
  static sg_status x##_bwd_cuda(sg_node *node) { return x##_bwd_on(node, 1); }
#else
#define AG_KERNEL(cuda, host, dev, ...) ((void)(cuda), host(__VA_ARGS__))
#define AG_ENTRIES_CUDA(x)
#endif
#define AG_ENTRIES(x)                                                     \
  static sg_status x##_fwd(sg_node *node) { return x##_fwd_on(node, 0); } \
  static sg_status x##_bwd(sg_node *node) { return x##_bwd_on(node, 0); } \
  AG_ENTRIES_CUDA(x)

static int64_t spatial_of(const sg_tensor *t) {
  int64_t n = 1;
  for (int i = 2; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}

static void *grad_of(sg_node *node, int j) { return node->out[j]->grad.data; }

int ag_round_fused(void) {
  static int fused = -1; /* read once; a race stores the same value */
  if (fused < 0) {
    const char *env = getenv("SG_BF16_FUSED_ROUND");
    fused = !(env && env[0] == '0');
  }
  return fused;
}

/* ---- convolution --------------------------------------------------------- */

typedef struct conv_attr {
  int has_bias;
} conv_attr;

/* The descriptor of a windowed op (convolution, pooling) on the node's
 * input with its halo (xin) and window, cout output channels. */
static sg_conv_desc window_desc_of(const sg_node *node, int64_t cout) {
  const sg_tensor *x = &node->xin;
  sg_conv_desc d;
  memset(&d, 0, sizeof d);
  d.nsp = node->nsp;
  d.batch = x->shape[0];
  d.cin = x->shape[1];
  d.cout = cout;
  for (int i = 0; i < d.nsp; ++i) {
    d.in[i] = x->shape[2 + i];
    d.kernel[i] = node->win[i].kernel;
    d.stride[i] = node->win[i].stride;
    d.dilation[i] = node->win[i].dilation;
  }
  return d;
}

/* Under a bf16 storage policy the conv's inputs, weights and output
 * gradient hold bf16 values: the kernels may multiply in bf16 (forward, dx
 * and dw; each checks that its operands hold bf16 values). */
static sg_conv_desc conv_desc_of(const sg_node *node) {
  sg_conv_desc d = window_desc_of(node, node->in[1]->value.shape[0]);
  d.bf16 = sg_tape_storage_dtype(ag_current_tape) == SG_DTYPE_BF16;
  d.round_out = ag_round_outputs(); /* in the kernel's epilogue */
  return d;
}

static sg_status conv_fwd_on(sg_node *node, int cuda) {
  sg_status st = SG_OK;
  const conv_attr *a = (const conv_attr *)node->attr;
  sg_conv_desc d = conv_desc_of(node);
  int64_t out[SG_OPS_MAX_SPATIAL], shape[SG_TENSOR_MAX_DIMS];
  SG_TRY(sg_conv_out_shape(&d, out));
  shape[0] = d.batch;
  shape[1] = d.cout;
  for (int i = 0; i < d.nsp; ++i) shape[2 + i] = out[i];
  SG_TRY(sg_node_alloc_out_uninit(node, 0, 2 + d.nsp, shape));
  SG_TRY(AG_KERNEL(cuda, sg_conv_forward, sg_conv_fwd_cuda, &d, node->xin.dtype,
                   node->xin.data, node->in[1]->value.data,
                   a->has_bias ? node->in[2]->value.data : NULL,
                   node->out[0]->value.data, NULL));
fail:
  return st;
}

static sg_status conv_bwd_on(sg_node *node, int cuda) {
  const conv_attr *a = (const conv_attr *)node->attr;
  sg_conv_desc d = conv_desc_of(node);
  return AG_KERNEL(cuda, sg_conv_backward, sg_conv_bwd_cuda, &d,
                   node->xin.dtype, node->xin.data, node->in[1]->value.data,
                   grad_of(node, 0), node->gin[0], node->gin[1],
                   a->has_bias ? node->gin[2] : NULL, NULL);
}

AG_ENTRIES(conv)

static const sg_op_def conv_op = {
    .name = "conv",
    .slots = {SG_SLOT_ACT, SG_SLOT_PARAM, SG_SLOT_PARAM},
    .forward = conv_fwd,
    .backward = conv_bwd,
    .forward_cuda = AG_CUDA(conv_fwd_cuda),
    .backward_cuda = AG_CUDA(conv_bwd_cuda),
    .rule = {.windowed_input = 0,
             .accepts = SG_ACCEPT_REPLICATE | SG_ACCEPT_SHARD_BATCH |
                        SG_ACCEPT_SHARD_SPATIAL,
             .out = SG_OUT_LIKE_INPUT,
             .out_unread = 1,
             .writes_gin = 1u,
             .rounds_bf16 = 1}};

/* x has nsp spatial dims (1..3). */
static sg_status check_window_input(const char *what, const sg_var *x,
                                    int nsp) {
  sg_status st = SG_OK;
  if (!x) SG_RAISE(SG_ERR_INVALID_ARG, "%s: input is NULL", what);
  if (nsp < 1 || nsp > SG_OPS_MAX_SPATIAL)
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: %d spatial dims (1..3)", what, nsp);
  if (x->value.ndim != 2 + nsp)
    SG_RAISE(SG_ERR_SHAPE,
             "%s: input has %d dims, expected (N, C) + %d spatial", what,
             x->value.ndim, nsp);
fail:
  return st;
}

/* The caller's window (nsp dims) with the kernel taken from kernel[] when
 * given (conv: w's shape; the caller's kernel must be 0 or the same) and no
 * up-sampling (the window ops that up-sample build their own). */
static sg_status window_of(const char *what, int nsp, const sg_window *in,
                           const int64_t *kernel, sg_window *w) {
  sg_status st = SG_OK;
  for (int i = 0; i < nsp; ++i) {
    w[i] = sg_window_normal(in[i]);
    if (kernel && in[i].kernel != 0 && in[i].kernel != kernel[i])
      SG_RAISE(SG_ERR_SHAPE,
               "%s: window kernel %lld in spatial dim %d, the weight's is %lld",
               what, (long long)in[i].kernel, i, (long long)kernel[i]);
    if (kernel) w[i].kernel = kernel[i];
    if (w[i].up != 1)
      SG_RAISE(SG_ERR_INVALID_ARG,
               "%s: up-sampling %lld in spatial dim %d (use sg_ag_upsample or "
               "sg_ag_convt)",
               what, (long long)w[i].up, i);
  }
fail:
  return st;
}

sg_status sg_ag_conv(sg_tape_t t, sg_var *x, sg_var *w, sg_var *b,
                     const sg_window *win, sg_var **y) {
  sg_status st = SG_OK;
  if (!w || !win)
    SG_RAISE(SG_ERR_INVALID_ARG, "conv: weight and window are required");
  int nsp = w->value.ndim - 2;
  SG_TRY(check_window_input("conv", x, nsp));
  if (w->value.shape[1] != sg_var_global_shape(x)[1])
    SG_RAISE(SG_ERR_SHAPE, "conv: weight takes %lld channels, input has %lld",
             (long long)w->value.shape[1],
             (long long)sg_var_global_shape(x)[1]);
  if (b && (b->value.ndim != 1 || b->value.shape[0] != w->value.shape[0]))
    SG_RAISE(SG_ERR_SHAPE, "conv: bias must be (%lld)",
             (long long)w->value.shape[0]);
  sg_window ww[SG_OPS_MAX_SPATIAL];
  SG_TRY(window_of("conv", nsp, win, w->value.shape + 2, ww));
  conv_attr at = {.has_bias = b != NULL};
  sg_var *in[3] = {x, w, b};
  SG_TRY(sg_tape_apply(t, &conv_op, b ? 3 : 2, in, 1, ww, &at, sizeof at, y));
fail:
  return st;
}

/* The window of an up-sampling by scale[] (kernel 1, or 3 with a replicate
 * margin of one cell for the linear kinds). */
static void up_window(sg_window *win, int nsp, int linear,
                      const int64_t *scale) {
  for (int i = 0; i < nsp; ++i) {
    sg_window w = {.kernel = linear ? 3 : 1,
                   .stride = 1,
                   .dilation = 1,
                   .pad = {linear ? 1 : 0, linear ? 1 : 0},
                   .up = scale[i],
                   .boundary = linear ? SG_BOUNDARY_REPLICATE
                                      : SG_BOUNDARY_ZERO};
    win[i] = w;
  }
}

/* ---- transposed convolution (k = s) ---------------------------------------- */

static sg_conv_desc convt_desc_of(const sg_node *node) {
  const sg_tensor *x = &node->xin, *w = &node->in[1]->value;
  sg_conv_desc d;
  memset(&d, 0, sizeof d);
  d.nsp = x->ndim - 2;
  d.batch = x->shape[0];
  d.cin = x->shape[1];
  d.cout = w->shape[1];
  for (int i = 0; i < d.nsp; ++i) {
    d.in[i] = x->shape[2 + i];
    d.kernel[i] = d.stride[i] = w->shape[2 + i];
    d.dilation[i] = 1;
  }
  return d;
}

static sg_status convt_fwd_on(sg_node *node, int cuda) {
  sg_status st = SG_OK;
  const conv_attr *a = (const conv_attr *)node->attr;
  sg_conv_desc d = convt_desc_of(node);
  int64_t shape[SG_TENSOR_MAX_DIMS] = {d.batch, d.cout};
  for (int i = 0; i < d.nsp; ++i) shape[2 + i] = d.in[i] * d.kernel[i];
  SG_TRY(sg_node_alloc_out(node, 0, 2 + d.nsp, shape));
  SG_TRY(AG_KERNEL(cuda, sg_convt_forward, sg_convt_fwd_cuda, &d,
                   node->xin.dtype, node->xin.data, node->in[1]->value.data,
                   a->has_bias ? node->in[2]->value.data : NULL,
                   node->out[0]->value.data));
fail:
  return st;
}

static sg_status convt_bwd_on(sg_node *node, int cuda) {
  const conv_attr *a = (const conv_attr *)node->attr;
  sg_conv_desc d = convt_desc_of(node);
  return AG_KERNEL(cuda, sg_convt_backward, sg_convt_bwd_cuda, &d,
                   node->xin.dtype, node->xin.data, node->in[1]->value.data,
                   grad_of(node, 0), node->gin[0], node->gin[1],
                   a->has_bias ? node->gin[2] : NULL);
}

AG_ENTRIES(convt)

static const sg_op_def convt_op = {
    .name = "convt",
    .slots = {SG_SLOT_ACT, SG_SLOT_PARAM, SG_SLOT_PARAM},
    .forward = convt_fwd,
    .backward = convt_bwd,
    .forward_cuda = AG_CUDA(convt_fwd_cuda),
    .backward_cuda = AG_CUDA(convt_bwd_cuda),
    .rule = {.windowed_input = 0,
             .accepts = SG_ACCEPT_REPLICATE | SG_ACCEPT_SHARD_BATCH |
                        SG_ACCEPT_SHARD_SPATIAL,
             .out = SG_OUT_LIKE_INPUT,
             .out_unread = 1}};

sg_status sg_ag_convt(sg_tape_t t, sg_var *x, sg_var *w, sg_var *b,
                      sg_var **y) {
  sg_status st = SG_OK;
  if (!w) SG_RAISE(SG_ERR_INVALID_ARG, "convt: weight is required");
  int nsp = w->value.ndim - 2;
  SG_TRY(check_window_input("convt", x, nsp));
  if (w->value.shape[0] != sg_var_global_shape(x)[1])
    SG_RAISE(SG_ERR_SHAPE, "convt: weight takes %lld channels, input has %lld",
             (long long)w->value.shape[0],
             (long long)sg_var_global_shape(x)[1]);
  if (b && (b->value.ndim != 1 || b->value.shape[0] != w->value.shape[1]))
    SG_RAISE(SG_ERR_SHAPE, "convt: bias must be (%lld)",
             (long long)w->value.shape[1]);
  conv_attr at = {.has_bias = b != NULL};
  sg_var *in[3] = {x, w, b};
  /* output i*k + a reads input i: a window of one cell, up-sampled by k */
  sg_window win[SG_OPS_MAX_SPATIAL];
  up_window(win, nsp, 0, w->value.shape + 2);
  SG_TRY(sg_tape_apply(t, &convt_op, b ? 3 : 2, in, 1, win, &at, sizeof at, y));
fail:
  return st;
}

/* The placements a window op's input may have: the halo exchange
 * (sg_sharded_exchange_create) refuses a channel split (Shard(1)), so no
 * window op accepts one, even those that are per channel (pooling,
 * up-sampling): declaring it made the op table promise what the framework
 * refuses. */
#define WINDOW_ACCEPTS \
  (SG_ACCEPT_REPLICATE | SG_ACCEPT_SHARD_BATCH | SG_ACCEPT_SHARD_SPATIAL)

/* ---- pooling --------------------------------------------------------------- */

typedef struct pool_attr {
  sg_pool_kind kind;
} pool_attr;

/* pooling keeps the channels (and has no weight input) */
static sg_conv_desc pool_desc_of(const sg_node *node) {
  return window_desc_of(node, node->xin.shape[1]);
}

/* Max pooling pads with -inf (the identity of max, PyTorch's convention),
 * not with the zeros the framework put into the zero-padded margins of
 * xin: those cells are set to -inf here (xin is the op's own copy whenever
 * it has margins; without margins nothing lies outside). One process: the
 * margins are the window's padding; sharded: the exchange tells where the
 * box lies in the global input. */
static sg_status pool_fill_padding(sg_node *node, int cuda) {
  const sg_tensor *x = &node->xin;
  const int nsp = node->nsp;
  int64_t origin[SG_OPS_MAX_SPATIAL], extent[SG_OPS_MAX_SPATIAL];
  sg_pad_mode mode[SG_OPS_MAX_SPATIAL];
  for (int i = 0; i < nsp; ++i) mode[i] = node->win[i].boundary;
  if (!x->owns) return SG_OK;
  if (node->ex) {
    sg_exchange_info info;
    sg_sharded_exchange_get_info((sg_sharded_exchange_t)node->ex, &info);
    const int64_t *g = sg_var_global_shape(node->in[0]);
    for (int i = 0; i < nsp; ++i) {
      origin[i] = info.box_origin[i];
      extent[i] = g[2 + i];
    }
  } else {
    for (int i = 0; i < nsp; ++i) {
      origin[i] = -node->win[i].pad[0];
      extent[i] = node->in[0]->value.shape[2 + i];
    }
  }
  return AG_KERNEL(cuda, sg_pad_fill_outside, sg_pad_fill_outside_cuda,
                   x->dtype, nsp, x->shape[0] * x->shape[1], x->shape + 2,
                   origin, extent, mode, -INFINITY, x->data);
}

/* The forward's descriptor and output (max pooling's -inf margins filled
 * on the node's device). */
static sg_status pool_prepare(sg_node *node, int cuda, sg_conv_desc *d) {
  sg_status st = SG_OK;
  const pool_attr *a = (const pool_attr *)node->attr;
  *d = pool_desc_of(node);
  int64_t out[SG_OPS_MAX_SPATIAL],
      shape[SG_TENSOR_MAX_DIMS] = {d->batch, d->cin};
  SG_TRY(sg_pool_out_shape(d, out));
  if (a->kind == SG_POOL_MAX) SG_TRY(pool_fill_padding(node, cuda));
  for (int i = 0; i < d->nsp; ++i) shape[2 + i] = out[i];
  /* the kernels write every element */
  SG_TRY(sg_node_alloc_out_uninit(node, 0, 2 + d->nsp, shape));
fail:
  return st;
}

static sg_status pool_fwd_on(sg_node *node, int cuda) {
  sg_status st = SG_OK;
  const pool_attr *a = (const pool_attr *)node->attr;
  sg_conv_desc d;
  SG_TRY(pool_prepare(node, cuda, &d));
  SG_TRY(AG_KERNEL(cuda, sg_pool_forward, sg_pool_fwd_cuda, a->kind, &d,
                   node->xin.dtype, node->xin.data, node->out[0]->value.data));
fail:
  return st;
}

static sg_status pool_bwd_on(sg_node *node, int cuda) {
  const pool_attr *a = (const pool_attr *)node->attr;
  sg_conv_desc d = pool_desc_of(node);
  return AG_KERNEL(cuda, sg_pool_backward, sg_pool_bwd_cuda, a->kind, &d,
                   node->xin.dtype, node->xin.data, grad_of(node, 0),
                   node->gin[0]);
}

AG_ENTRIES(pool)

static const sg_op_def pool_op = {.name = "pool",
                                  .slots = {SG_SLOT_ACT},
                                  .forward = pool_fwd,
                                  .backward = pool_bwd,
                                  .rule = {.windowed_input = 0,
                                           .accepts = WINDOW_ACCEPTS,
                                           .out = SG_OUT_LIKE_INPUT},
                                  .forward_cuda = AG_CUDA(pool_fwd_cuda),
                                  .backward_cuda = AG_CUDA(pool_bwd_cuda)};

sg_status sg_ag_pool(sg_tape_t t, sg_pool_kind kind, sg_var *x,
                     const sg_window *win, sg_var **y) {
  sg_status st = SG_OK;
  if (!x || !win)
    SG_RAISE(SG_ERR_INVALID_ARG, "pool: input and window are required");
  const int nsp = x->value.ndim - 2;
  SG_TRY(check_window_input("pool", x, nsp));
  sg_window ww[SG_OPS_MAX_SPATIAL];
  SG_TRY(window_of("pool", nsp, win, NULL, ww));
  pool_attr at = {.kind = kind};
  SG_TRY(sg_tape_apply(t, &pool_op, 1, &x, 1, ww, &at, sizeof at, y));
fail:
  return st;
}

/* ---- up-sampling ------------------------------------------------------------ */

typedef struct up_attr {
  sg_upsample_kind kind;
  int nsp;
  int64_t scale[SG_OPS_MAX_SPATIAL];
} up_attr;

static const sg_tensor *up_input(const sg_node *node) { return &node->xin; }

/* The forward's output (the input with margins less its margins, scaled). */
static sg_status up_alloc_out(sg_node *node) {
  const up_attr *a = (const up_attr *)node->attr;
  const sg_tensor *x = up_input(node);
  int lin = a->kind == SG_UPSAMPLE_LINEAR;
  int64_t shape[SG_TENSOR_MAX_DIMS] = {x->shape[0], x->shape[1]};
  for (int i = 0; i < a->nsp; ++i)
    shape[2 + i] = a->scale[i] * (x->shape[2 + i] - (lin ? 2 : 0));
  /* the kernels write every element */
  return sg_node_alloc_out_uninit(node, 0, 2 + a->nsp, shape);
}

static sg_status up_fwd_on(sg_node *node, int cuda) {
  sg_status st = SG_OK;
  const up_attr *a = (const up_attr *)node->attr;
  const sg_tensor *x = up_input(node);
  SG_TRY(up_alloc_out(node));
  SG_TRY(AG_KERNEL(cuda, sg_upsample_forward, sg_upsample_fwd_cuda, a->kind,
                   a->nsp, x->shape[0] * x->shape[1], x->shape + 2, a->scale,
                   x->dtype, x->data, node->out[0]->value.data));
fail:
  return st;
}

static sg_status up_bwd_on(sg_node *node, int cuda) {
  const up_attr *a = (const up_attr *)node->attr;
  const sg_tensor *x = up_input(node);
  return AG_KERNEL(cuda, sg_upsample_backward, sg_upsample_bwd_cuda, a->kind,
                   a->nsp, x->shape[0] * x->shape[1], x->shape + 2, a->scale,
                   x->dtype, grad_of(node, 0), node->gin[0]);
}

AG_ENTRIES(up)

/* The up-sampling ops' table but its name (spelt out in each table: the
 * registry test reads the names from the sources). */
#define UP_OP_DEF                                                \
  .slots = {SG_SLOT_ACT}, .forward = up_fwd, .backward = up_bwd, \
  .rule = {.windowed_input = 0,                                  \
           .accepts = WINDOW_ACCEPTS,                            \
           .out = SG_OUT_LIKE_INPUT},                            \
  .forward_cuda = AG_CUDA(up_fwd_cuda), .backward_cuda = AG_CUDA(up_bwd_cuda)

/* Linear: every input cell needs one neighbour per side (a window of 3,
 * stride 1, replicate at the global border: PyTorch's edge clamping). */
static const sg_op_def up_linear_op = {.name = "upsample_linear", UP_OP_DEF};
static const sg_op_def up_nearest_op = {.name = "upsample_nearest", UP_OP_DEF};

sg_status sg_ag_upsample(sg_tape_t t, sg_upsample_kind kind, sg_var *x,
                         const int64_t *scale, sg_var **y) {
  sg_status st = SG_OK;
  if (!x || !scale)
    SG_RAISE(SG_ERR_INVALID_ARG, "upsample: input and scale are required");
  int nsp = x->value.ndim - 2;
  SG_TRY(check_window_input("upsample", x, nsp));
  up_attr at = {.kind = kind, .nsp = nsp};
  for (int i = 0; i < nsp; ++i) at.scale[i] = scale[i];
  for (int i = 0; i < nsp; ++i)
    if (scale[i] < 1)
      SG_RAISE(SG_ERR_INVALID_ARG, "upsample: scale %lld", (long long)scale[i]);
  sg_window win[SG_OPS_MAX_SPATIAL];
  up_window(win, nsp, kind == SG_UPSAMPLE_LINEAR, scale);
  if (kind == SG_UPSAMPLE_LINEAR) {
    SG_TRY(sg_tape_apply(t, &up_linear_op, 1, &x, 1, win, &at, sizeof at, y));
  } else if (kind == SG_UPSAMPLE_NEAREST) {
    SG_TRY(sg_tape_apply(t, &up_nearest_op, 1, &x, 1, win, &at, sizeof at, y));
  } else {
    SG_RAISE(SG_ERR_INVALID_ARG, "upsample: unknown kind %d", (int)kind);
  }
fail:
  return st;
}

/* ---- pointwise -------------------------------------------------------------- */

typedef struct pw_attr {
  int code;
  double alpha;
} pw_attr;

static sg_status act_fwd_on(sg_node *node, int cuda) {
  sg_status st = SG_OK;
  const pw_attr *a = (const pw_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  SG_TRY(sg_node_alloc_out_uninit(node, 0, x->ndim, x->shape));
  SG_TRY(AG_KERNEL(cuda,
                   (ag_round_outputs() ? sg_act_forward_bf16 : sg_act_forward),
                   sg_act_fwd_cuda, (sg_act)a->code, x->dtype,
                   sg_tensor_numel(x), x->data, node->out[0]->value.data));
fail:
  return st;
}

static sg_status act_bwd_on(sg_node *node, int cuda) {
  const pw_attr *a = (const pw_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  /* dx whole: rounded in the pass (host kernels only) */
  const int rnd = !cuda && (node->round_gin & 1u);
  node->rounded_gin = rnd;
  return AG_KERNEL(cuda, (rnd ? sg_act_backward_bf16 : sg_act_backward),
                   sg_act_bwd_cuda, (sg_act)a->code, x->dtype,
                   sg_tensor_numel(x), x->data, grad_of(node, 0), node->gin[0]);
}

AG_ENTRIES(act)

static const sg_op_def act_op = {.name = "act",
                                 .slots = {SG_SLOT_ACT},
                                 .forward = act_fwd,
                                 .backward = act_bwd,
                                 .rule = {.windowed_input = -1,
                                          .accepts = SG_ACCEPT_ALL,
                                          .out = SG_OUT_LIKE_INPUT,
                                          .writes_gin = 1u,
                                          .rounds_bf16 = 1},
                                 .forward_cuda = AG_CUDA(act_fwd_cuda),
                                 .backward_cuda = AG_CUDA(act_bwd_cuda)};

sg_status sg_ag_act(sg_tape_t t, sg_act act, sg_var *x, sg_var **y) {
  sg_status st = SG_OK;
  if ((int)act < 0 || act >= SG_ACT_COUNT)
    SG_RAISE(SG_ERR_INVALID_ARG, "unknown activation %d", (int)act);
  pw_attr at = {.code = (int)act};
  SG_TRY(sg_tape_apply(t, &act_op, 1, &x, 1, NULL, &at, sizeof at, y));
fail:
  return st;
}

static sg_status binary_fwd_on(sg_node *node, int cuda) {
  sg_status st = SG_OK;
  const pw_attr *a = (const pw_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  SG_TRY(sg_node_alloc_out_uninit(node, 0, x->ndim, x->shape));
  SG_TRY(AG_KERNEL(
      cuda, (ag_round_outputs() ? sg_binary_forward_bf16 : sg_binary_forward),
      sg_binary_fwd_cuda, (sg_binary)a->code, x->dtype, sg_tensor_numel(x),
      x->data, node->in[1]->value.data, node->out[0]->value.data));
fail:
  return st;
}

static sg_status binary_bwd_on(sg_node *node, int cuda) {
  const pw_attr *a = (const pw_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  if (!node->gin[0] && !node->gin[1])
    return SG_OK; /* addition: the tape routes both */
  return AG_KERNEL(cuda, sg_binary_backward, sg_binary_bwd_cuda,
                   (sg_binary)a->code, x->dtype, sg_tensor_numel(x), x->data,
                   node->in[1]->value.data, grad_of(node, 0), node->gin[0],
                   node->gin[1]);
}

AG_ENTRIES(binary)

/* The binary ops' table but its name and grad_identity (as UP_OP_DEF). */
#define BINARY_OP_DEF(identity)                               \
  .slots = {SG_SLOT_ACT, SG_SLOT_ACT}, .forward = binary_fwd, \
  .backward = binary_bwd,                                     \
  .rule = {.windowed_input = -1,                              \
           .accepts = SG_ACCEPT_ALL,                          \
           .out = SG_OUT_LIKE_INPUT,                          \
           .writes_gin = 3u,                                  \
           .grad_identity = identity,                         \
           .rounds_bf16 = 1},                                 \
  .forward_cuda = AG_CUDA(binary_fwd_cuda),                   \
  .backward_cuda = AG_CUDA(binary_bwd_cuda)

static const sg_op_def binary_op = {.name = "binary", BINARY_OP_DEF(0u)};

/* a + b: both input gradients are the output's (no copies: the tape hands
 * the buffer over; the copy kernel was 1.9% of an FNO step) */
static const sg_op_def binary_add_op = {.name = "binary_add",
                                        BINARY_OP_DEF(3u)};

sg_status sg_ag_binary(sg_tape_t t, sg_binary op, sg_var *a, sg_var *b,
                       sg_var **y) {
  sg_status st = SG_OK;
  if (!a || !b) SG_RAISE(SG_ERR_INVALID_ARG, "binary: inputs are required");
  if ((int)op < 0 || op > SG_BINARY_MUL)
    SG_RAISE(SG_ERR_INVALID_ARG, "unknown binary op %d", (int)op);
  if (a->value.ndim != b->value.ndim ||
      memcmp(sg_var_global_shape(a), sg_var_global_shape(b),
             sizeof(int64_t) * (size_t)a->value.ndim))
    SG_RAISE(SG_ERR_SHAPE, "binary: operands of different (global) shapes");
  pw_attr at = {.code = (int)op};
  sg_var *in[2] = {a, b};
  SG_TRY(sg_tape_apply(t, op == SG_BINARY_ADD ? &binary_add_op : &binary_op, 2,
                       in, 1, NULL, &at, sizeof at, y));
fail:
  return st;
}

static sg_status scale_fwd_on(sg_node *node, int cuda) {
  sg_status st = SG_OK;
  const pw_attr *a = (const pw_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  SG_TRY(sg_node_alloc_out_uninit(node, 0, x->ndim, x->shape));
  SG_TRY(AG_KERNEL(cuda, sg_scale, sg_scale_cuda, x->dtype, sg_tensor_numel(x),
                   a->alpha, x->data, node->out[0]->value.data));
fail:
  return st;
}

static sg_status scale_bwd_on(sg_node *node, int cuda) {
  const pw_attr *a = (const pw_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  return AG_KERNEL(cuda, sg_scale, sg_scale_cuda, x->dtype, sg_tensor_numel(x),
                   a->alpha, grad_of(node, 0), node->gin[0]);
}

AG_ENTRIES(scale)

static const sg_op_def scale_op = {.name = "scale",
                                   .slots = {SG_SLOT_ACT},
                                   .forward = scale_fwd,
                                   .backward = scale_bwd,
                                   .rule = {.windowed_input = -1,
                                            .accepts = SG_ACCEPT_ALL,
                                            .out = SG_OUT_LIKE_INPUT,
                                            .writes_gin = 1u},
                                   .forward_cuda = AG_CUDA(scale_fwd_cuda),
                                   .backward_cuda = AG_CUDA(scale_bwd_cuda)};

sg_status sg_ag_scale(sg_tape_t t, double alpha, sg_var *x, sg_var **y) {
  pw_attr at = {.alpha = alpha};
  return sg_tape_apply(t, &scale_op, 1, &x, 1, NULL, &at, sizeof at, y);
}

/* The global index of this rank's first channel: 0 unless x's channels
 * are split over mesh dims (Shard(1)), then the offset of its block (the
 * balanced split, sg_shardtensor_box), so that the bias slice added and
 * accumulated into is the global one. */
static sg_status bias_channel_offset(const sg_node *node, int64_t *c0) {
  sg_status st = SG_OK;
  int64_t off[SG_TENSOR_MAX_DIMS], shape[SG_TENSOR_MAX_DIMS];
  *c0 = 0;
  if (!node->mesh || !node->split_channel) return SG_OK;
  const sg_tensor *x = &node->in[0]->value;
  SG_TRY(sg_shardtensor_box(node->mesh, x->ndim,
                            sg_node_in_global_shape(node, 0), node->placements,
                            sg_mesh_rank(node->mesh), off, shape));
  if (shape[1] != x->shape[1])
    SG_RAISE(SG_ERR_INTERNAL,
             "bias: local channels %lld, the layout gives %lld",
             (long long)x->shape[1], (long long)shape[1]);
  *c0 = off[1];
fail:
  return st;
}

/* On a device too (sharded device variables run bias): c0 offsets the
 * bias pointer, device memory alike. */
static sg_status bias_fwd_on(sg_node *node, int cuda) {
  sg_status st = SG_OK;
  const sg_tensor *x = &node->in[0]->value;
  int64_t c0 = 0;
  SG_TRY(bias_channel_offset(node, &c0));
  SG_TRY(sg_node_alloc_out_uninit(node, 0, x->ndim, x->shape));
  if (sg_tensor_numel(x) == 0) goto fail; /* an empty shard: nothing to add */
  SG_TRY(AG_KERNEL(cuda, sg_bias_forward, sg_bias_fwd_cuda, x->dtype,
                   x->shape[0], x->shape[1], spatial_of(x), x->data,
                   (const char *)node->in[1]->value.data +
                       c0 * (int64_t)sg_dtype_size(x->dtype),
                   node->out[0]->value.data));
fail:
  return st;
}

static sg_status bias_bwd_on(sg_node *node, int cuda) {
  sg_status st = SG_OK;
  const sg_tensor *x = &node->in[0]->value;
  int64_t c0 = 0;
  SG_TRY(bias_channel_offset(node, &c0));
  if (sg_tensor_numel(x) == 0)
    goto fail; /* an empty shard adds nothing to db */
  if (node->gin[0])
    SG_TRY(ag_mem_copy(node->device, node->gin[0], node->device,
                       grad_of(node, 0), sg_tensor_nbytes(x)));
  if (node->gin[1])
    SG_TRY(AG_KERNEL(cuda, sg_bias_backward, sg_bias_bwd_cuda, x->dtype,
                     x->shape[0], x->shape[1], spatial_of(x), grad_of(node, 0),
                     (char *)node->gin[1] +
                         c0 * (int64_t)sg_dtype_size(x->dtype)));
fail:
  return st;
}

AG_ENTRIES(bias)

static const sg_op_def bias_op = {.name = "bias",
                                  .slots = {SG_SLOT_ACT, SG_SLOT_PARAM},
                                  .forward = bias_fwd,
                                  .backward = bias_bwd,
                                  .rule = {.windowed_input = -1,
                                           .accepts = SG_ACCEPT_ALL,
                                           .out = SG_OUT_LIKE_INPUT,
                                           .out_unread = 1,
                                           .writes_gin = 1u},
                                  .forward_cuda = AG_CUDA(bias_fwd_cuda),
                                  .backward_cuda = AG_CUDA(bias_bwd_cuda)};

sg_status sg_ag_bias(sg_tape_t t, sg_var *x, sg_var *b, sg_var **y) {
  sg_status st = SG_OK;
  if (!x || !b) SG_RAISE(SG_ERR_INVALID_ARG, "bias: inputs are required");
  if (x->value.ndim < 2 || b->value.ndim != 1 ||
      b->value.shape[0] != sg_var_global_shape(x)[1])
    SG_RAISE(SG_ERR_SHAPE, "bias: needs x (N, C, ...) and b (C)");
  sg_var *in[2] = {x, b};
  SG_TRY(sg_tape_apply(t, &bias_op, 2, in, 1, NULL, NULL, 0, y));
fail:
  return st;
}

/* ---- channel-wise linear ---------------------------------------------------- */

static sg_status linear_fwd_on(sg_node *node, int cuda) {
  sg_status st = SG_OK;
  const conv_attr *a = (const conv_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value, *w = &node->in[1]->value;
  int64_t shape[SG_TENSOR_MAX_DIMS];
  memcpy(shape, x->shape, sizeof shape);
  shape[1] = w->shape[0];
  SG_TRY(sg_node_alloc_out_uninit(node, 0, x->ndim, shape));
  SG_TRY(AG_KERNEL(
      cuda, (ag_round_outputs() ? sg_linear_forward_bf16 : sg_linear_forward),
      sg_linear_fwd_cuda, x->dtype, x->shape[0], x->shape[1], w->shape[0],
      spatial_of(x), x->data, w->data,
      a->has_bias ? node->in[2]->value.data : NULL, node->out[0]->value.data));
fail:
  return st;
}

static sg_status linear_bwd_on(sg_node *node, int cuda) {
  const conv_attr *a = (const conv_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value, *w = &node->in[1]->value;
  return AG_KERNEL(cuda, sg_linear_backward, sg_linear_bwd_cuda, x->dtype,
                   x->shape[0], x->shape[1], w->shape[0], spatial_of(x),
                   x->data, w->data, grad_of(node, 0), node->gin[0],
                   node->gin[1], a->has_bias ? node->gin[2] : NULL);
}

AG_ENTRIES(linear)

static const sg_op_def linear_op = {
    .name = "linear",
    .slots = {SG_SLOT_ACT, SG_SLOT_PARAM, SG_SLOT_PARAM},
    .forward = linear_fwd,
    .backward = linear_bwd,
    .rule = {.windowed_input = -1,
             .accepts = SG_ACCEPT_REPLICATE | SG_ACCEPT_SHARD_BATCH |
                        SG_ACCEPT_SHARD_SPATIAL,
             .out = SG_OUT_LIKE_INPUT,
             .out_unread = 1,
             .writes_gin = 1u,
             .rounds_bf16 = 1},
    .forward_cuda = AG_CUDA(linear_fwd_cuda),
    .backward_cuda = AG_CUDA(linear_bwd_cuda)};

sg_status sg_ag_linear(sg_tape_t t, sg_var *x, sg_var *w, sg_var *b,
                       sg_var **y) {
  sg_status st = SG_OK;
  if (!x || !w)
    SG_RAISE(SG_ERR_INVALID_ARG, "linear: input and weight are required");
  if (x->value.ndim < 2 || w->value.ndim != 2 ||
      w->value.shape[1] != sg_var_global_shape(x)[1])
    SG_RAISE(SG_ERR_SHAPE, "linear: needs x (N, C, ...) and w (Cout, C)");
  if (b && (b->value.ndim != 1 || b->value.shape[0] != w->value.shape[0]))
    SG_RAISE(SG_ERR_SHAPE, "linear: bias must be (%lld)",
             (long long)w->value.shape[0]);
  conv_attr at = {.has_bias = b != NULL};
  sg_var *in[3] = {x, w, b};
  SG_TRY(
      sg_tape_apply(t, &linear_op, b ? 3 : 2, in, 1, NULL, &at, sizeof at, y));
fail:
  return st;
}

/* ---- concat / split ----------------------------------------------------------- */

typedef struct cat_attr {
  int k;
  int64_t channels[SG_NODE_MAX_OUT];
} cat_attr;

/* The parts of a concatenation on the device: one copy per part at its
 * channel offset (to_whole 1: into whole; 0: back out of it, NULL parts
 * skipped). */
#if SG_HAVE_CUDA
static sg_status cat_parts_cuda(sg_dtype dt, int64_t batch, int64_t spatial,
                                int k, const int64_t *ch, int to_whole,
                                void *const *parts, void *whole) {
  sg_status st = SG_OK;
  int64_t ctot = 0, off = 0;
  for (int i = 0; i < k; ++i) ctot += ch[i];
  for (int i = 0; i < k; off += ch[i], ++i)
    if (parts[i])
      SG_TRY(sg_cat_part_cuda(dt, batch, spatial, ch[i], ctot, off, to_whole,
                              to_whole ? parts[i] : whole,
                              to_whole ? whole : parts[i], NULL));
fail:
  return st;
}
#endif

static sg_status cat_run(int cuda, sg_dtype dt, int64_t batch, int64_t spatial,
                         int k, const int64_t *ch, int to_whole, void **parts,
                         void *whole) {
#if SG_HAVE_CUDA
  if (cuda)
    return cat_parts_cuda(dt, batch, spatial, k, ch, to_whole, parts, whole);
#else
  (void)cuda;
#endif
  return to_whole ? sg_concat(dt, batch, spatial, k, ch,
                              (const void *const *)parts, whole)
                  : sg_split(dt, batch, spatial, k, ch, whole, parts);
}

static sg_status concat_fwd_on(sg_node *node, int cuda) {
  sg_status st = SG_OK;
  const sg_tensor *x = &node->in[0]->value;
  int64_t shape[SG_TENSOR_MAX_DIMS], ch[SG_NODE_MAX_IN];
  void *parts[SG_NODE_MAX_IN];
  memcpy(shape, x->shape, sizeof shape);
  shape[1] = 0;
  for (int i = 0; i < node->nin; ++i) {
    ch[i] = node->in[i]->value.shape[1];
    shape[1] += ch[i];
    parts[i] = node->in[i]->value.data;
  }
  /* the parts fill every element */
  SG_TRY(sg_node_alloc_out_uninit(node, 0, x->ndim, shape));
  if (sg_tensor_numel(&node->out[0]->value) == 0)
    goto fail; /* an empty shard */
  SG_TRY(cat_run(cuda, x->dtype, x->shape[0], spatial_of(x), node->nin, ch, 1,
                 parts, node->out[0]->value.data));
fail:
  return st;
}

static sg_status concat_bwd_on(sg_node *node, int cuda) {
  const sg_tensor *x = &node->in[0]->value;
  int64_t ch[SG_NODE_MAX_IN];
  for (int i = 0; i < node->nin; ++i) ch[i] = node->in[i]->value.shape[1];
  if (sg_tensor_numel(&node->out[0]->value) == 0)
    return SG_OK; /* an empty shard */
  return cat_run(cuda, x->dtype, x->shape[0], spatial_of(x), node->nin, ch, 0,
                 node->gin, grad_of(node, 0));
}

AG_ENTRIES(concat)

static const sg_op_def concat_op = {
    .name = "concat",
    .slots = {SG_SLOT_ACT, SG_SLOT_ACT, SG_SLOT_ACT, SG_SLOT_ACT, SG_SLOT_ACT,
              SG_SLOT_ACT, SG_SLOT_ACT, SG_SLOT_ACT},
    .forward = concat_fwd,
    .backward = concat_bwd,
    .forward_cuda = AG_CUDA(concat_fwd_cuda),
    .backward_cuda = AG_CUDA(concat_bwd_cuda),
    .rule = {.windowed_input = -1,
             .accepts = SG_ACCEPT_REPLICATE | SG_ACCEPT_SHARD_BATCH |
                        SG_ACCEPT_SHARD_SPATIAL,
             .out = SG_OUT_LIKE_INPUT}};

sg_status sg_ag_concat(sg_tape_t t, int k, sg_var *const *xs, sg_var **y) {
  sg_status st = SG_OK;
  if (k < 1 || k > SG_NODE_MAX_IN || !xs)
    SG_RAISE(SG_ERR_INVALID_ARG, "concat: 1..%d inputs", SG_NODE_MAX_IN);
  for (int i = 0; i < k; ++i) {
    if (!xs[i]) SG_RAISE(SG_ERR_INVALID_ARG, "concat: input %d is NULL", i);
    const int64_t *a = sg_var_global_shape(xs[i]),
                  *b = sg_var_global_shape(xs[0]);
    const int nd = xs[i]->value.ndim;
    int same = nd == xs[0]->value.ndim && nd >= 2 && a[0] == b[0];
    for (int d = 2; same && d < nd; ++d) same = a[d] == b[d];
    if (!same)
      SG_RAISE(SG_ERR_SHAPE,
               "concat: input %d differs from input 0 outside the channel dim",
               i);
  }
  SG_TRY(sg_tape_apply(t, &concat_op, k, xs, 1, NULL, NULL, 0, y));
fail:
  return st;
}

static sg_status split_fwd_on(sg_node *node, int cuda) {
  sg_status st = SG_OK;
  const cat_attr *a = (const cat_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  void *parts[SG_NODE_MAX_OUT];
  for (int j = 0; j < a->k; ++j) {
    int64_t shape[SG_TENSOR_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[1] = a->channels[j];
    /* not zeroed: the parts partition x, sg_split writes every element */
    SG_TRY(sg_node_alloc_out_uninit(node, j, x->ndim, shape));
    parts[j] = node->out[j]->value.data;
  }
  if (sg_tensor_numel(x) == 0) goto fail; /* an empty shard */
  SG_TRY(cat_run(cuda, x->dtype, x->shape[0], spatial_of(x), a->k, a->channels,
                 0, parts, x->data));
fail:
  return st;
}

static sg_status split_bwd_on(sg_node *node, int cuda) {
  const cat_attr *a = (const cat_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  void *parts[SG_NODE_MAX_OUT];
  for (int j = 0; j < a->k; ++j) parts[j] = grad_of(node, j);
  if (sg_tensor_numel(x) == 0)
    return SG_OK; /* an empty shard: no gradient buffer */
  return cat_run(cuda, x->dtype, x->shape[0], spatial_of(x), a->k, a->channels,
                 1, parts, node->gin[0]);
}

AG_ENTRIES(split)

static const sg_op_def split_op = {.name = "split",
                                   .slots = {SG_SLOT_ACT},
                                   .forward = split_fwd,
                                   .backward = split_bwd,
                                   .forward_cuda = AG_CUDA(split_fwd_cuda),
                                   .backward_cuda = AG_CUDA(split_bwd_cuda),
                                   .rule = {.windowed_input = -1,
                                            .accepts = SG_ACCEPT_REPLICATE |
                                                       SG_ACCEPT_SHARD_BATCH |
                                                       SG_ACCEPT_SHARD_SPATIAL,
                                            .out = SG_OUT_LIKE_INPUT}};

sg_status sg_ag_split(sg_tape_t t, sg_var *x, int k, const int64_t *channels,
                      sg_var **ys) {
  sg_status st = SG_OK;
  if (!x || !channels || k < 1 || k > SG_NODE_MAX_OUT)
    SG_RAISE(SG_ERR_INVALID_ARG, "split: input, 1..%d parts", SG_NODE_MAX_OUT);
  cat_attr at = {.k = k};
  int64_t total = 0;
  for (int j = 0; j < k; ++j) {
    if (channels[j] < 0) SG_RAISE(SG_ERR_SHAPE, "split: negative channels");
    at.channels[j] = channels[j];
    total += channels[j];
  }
  if (x->value.ndim < 2 || total != sg_var_global_shape(x)[1])
    SG_RAISE(SG_ERR_SHAPE, "split: parts sum to %lld channels, input has %lld",
             (long long)total,
             (long long)(x->value.ndim >= 2 ? sg_var_global_shape(x)[1] : 0));
  SG_TRY(sg_tape_apply(t, &split_op, 1, &x, k, NULL, &at, sizeof at, ys));
fail:
  return st;
}

/* ---- normalisation ------------------------------------------------------------ */

typedef struct norm_attr {
  sg_norm_kind kind;
  int64_t groups;
  double eps;
  int gi, bi; /* input index of gamma, beta (-1: none) */
} norm_attr;

static sg_norm_desc norm_desc_of(const sg_node *node) {
  const norm_attr *a = (const norm_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  sg_norm_desc d = {.kind = a->kind,
                    .batch = x->shape[0],
                    .channels = x->shape[1],
                    .spatial = spatial_of(x),
                    .groups = a->groups,
                    .eps = a->eps,
                    .round_out = ag_round_outputs()};
  return d;
}

/* The split dims a statistic spans (sharded input: global statistics). */
static unsigned norm_split(sg_norm_kind kind) {
  return kind == SG_NORM_BATCH   ? SG_SPLIT_BATCH | SG_SPLIT_SPACE
         : kind == SG_NORM_LAYER ? 0u
                                 : SG_SPLIT_SPACE;
}

/* Gamma's or beta's value or gradient (input i; NULL where absent). */
static const void *norm_param(const sg_node *node, int i) {
  return i >= 0 ? node->in[i]->value.data : NULL;
}

static void *norm_param_grad(const sg_node *node, int i) {
  return i >= 0 ? node->gin[i] : NULL;
}

/* The merge of a sharded device node's statistics (sums = 0: n moments)
 * or backward sums (sums = 1: 2 n doubles) over g: a few numbers per
 * sample and group, copied to the host and merged there by the host's
 * rank-order merge (the same bits as host variables), copied back. A
 * failed allocation is agreed over g before the first message. */
static sg_status norm_merge_dev(const sg_node *node, sg_group_t g, void *p,
                                int64_t n, int sums) {
  sg_status st = SG_OK;
  const sg_device host = sg_device_host();
  const size_t bytes = (size_t)n *
                       (sums ? 2 * sizeof(double) : sizeof(sg_moments));
  void *h = malloc(bytes ? bytes : 1);
  st = h ? ag_mem_copy(host, h, node->device, p, bytes) : SG_ERR_ALLOC;
  SG_TRY(sg_group_agree(g, st));
  if (sums)
    SG_TRY(sg_sum_allreduce(h, 2 * n, sg_group_comm(g)));
  else
    SG_TRY(sg_norm_stats_allreduce(h, n, sg_group_comm(g)));
  SG_TRY(ag_mem_copy(node->device, p, host, h, bytes));
fail:
  free(h);
  return st;
}

/* The statistics and sums span the node's split dims (norm_split), merged
 * over its group; every rank takes part, an empty shard too (on a device
 * its share is zero moments and sums: the kernels are not called). A
 * device node merges through norm_merge_dev; batch norm is refused by the
 * launchers (host only). */
static sg_status norm_fwd_on(sg_node *node, int cuda) {
  sg_status st = SG_OK;
  const norm_attr *a = (const norm_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  sg_norm_desc d = norm_desc_of(node);
  int64_t nstat = 0;
  sg_moments *stats = NULL, *tmp = NULL;
  sg_group_t g = NULL;
  SG_TRY(sg_norm_nstat(&d, &nstat));
  SG_TRY(sg_node_alloc_out_uninit(node, 0, x->ndim, x->shape));
  SG_TRY(sg_node_group(node, norm_split(a->kind), &g));
  const int empty = cuda && sg_tensor_numel(x) == 0;
  if (cuda && (nstat == 0 || (empty && !g))) goto fail;
  if (nstat > 0) {
    SG_TRY(sg_node_save(node, (size_t)nstat * sizeof *stats, (void **)&stats));
  } else {
    stats = tmp = calloc(1, sizeof *tmp);
    if (!tmp) SG_RAISE(SG_ERR_ALLOC, "norm statistics");
  }
  if (empty)
    SG_TRY(ag_mem_zero(node->device, stats, (size_t)nstat * sizeof *stats));
  else
    SG_TRY(AG_KERNEL(cuda, sg_norm_stats, sg_norm_stats_cuda, &d, x->dtype,
                     x->data, stats));
  if (g && cuda)
    SG_TRY(norm_merge_dev(node, g, stats, nstat, 0));
  else if (g)
    SG_TRY(sg_norm_stats_allreduce(stats, nstat, sg_group_comm(g)));
  if (!empty)
    SG_TRY(AG_KERNEL(cuda, sg_norm_forward, sg_norm_fwd_cuda, &d, x->dtype,
                     x->data, stats, norm_param(node, a->gi),
                     norm_param(node, a->bi), node->out[0]->value.data));
fail:
  free(tmp);
  return st;
}

/* The backward's sums: host memory (malloc, as the host kernels' scratch
 * always was) or the node's device memory. */
static sg_status norm_sums_alloc(const sg_node *node, int cuda, int64_t n,
                                 double **sums) {
  sg_status st = SG_OK;
  const size_t bytes = (size_t)n * sizeof **sums;
  if (cuda) return ag_mem_alloc(node->device, bytes, 0, (void **)sums);
  *sums = malloc(bytes);
  if (!*sums) SG_RAISE(SG_ERR_ALLOC, "norm sums");
fail:
  return st;
}

static void norm_sums_free(const sg_node *node, int cuda, double **sums) {
  if (cuda) {
    ag_mem_free(node->device, (void **)sums);
  } else {
    free(*sums);
    *sums = NULL;
  }
}

static sg_status norm_bwd_on(sg_node *node, int cuda) {
  sg_status st = SG_OK;
  const norm_attr *a = (const norm_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  sg_norm_desc d = norm_desc_of(node);
  /* dx whole: rounded per plane (host kernels only) */
  d.round_out = !cuda && (node->round_gin & 1u);
  node->rounded_gin = (unsigned)d.round_out;
  int64_t nstat = 0;
  double *sums = NULL;
  sg_group_t g = NULL;
  SG_TRY(sg_norm_nstat(&d, &nstat));
  if (nstat == 0 || (cuda && !node->saved)) goto fail;
  SG_TRY(norm_sums_alloc(node, cuda, 2 * nstat, &sums));
  const void *gamma = norm_param(node, a->gi);
  const int empty = cuda && sg_tensor_numel(x) == 0;
  if (empty)
    SG_TRY(ag_mem_zero(node->device, sums, 2 * (size_t)nstat * sizeof *sums));
  else
    SG_TRY(AG_KERNEL(cuda, sg_norm_backward_sums, sg_norm_sums_cuda, &d,
                     x->dtype, x->data, node->saved, gamma, grad_of(node, 0),
                     sums));
  SG_TRY(sg_node_group(node, norm_split(a->kind), &g));
  if (g && cuda)
    SG_TRY(norm_merge_dev(node, g, sums, nstat, 1));
  else if (g)
    SG_TRY(sg_sum_allreduce(sums, 2 * nstat, sg_group_comm(g)));
  if (!empty)
    SG_TRY(AG_KERNEL(cuda, sg_norm_backward, sg_norm_bwd_cuda, &d, x->dtype,
                     x->data, node->saved, gamma, grad_of(node, 0), sums,
                     node->gin[0], norm_param_grad(node, a->gi),
                     norm_param_grad(node, a->bi)));
fail:
  norm_sums_free(node, cuda, &sums);
  return st;
}

AG_ENTRIES(norm)

static const sg_op_def norm_op = {
    .name = "norm",
    .slots = {SG_SLOT_ACT, SG_SLOT_PARAM, SG_SLOT_PARAM},
    .forward = norm_fwd,
    .backward = norm_bwd,
    .rule = {.windowed_input = -1,
             .accepts = SG_ACCEPT_REPLICATE | SG_ACCEPT_SHARD_BATCH |
                        SG_ACCEPT_SHARD_SPATIAL,
             .out = SG_OUT_LIKE_INPUT,
             .out_unread = 1,
             .writes_gin = 1u,
             .rounds_bf16 = 1},
    .forward_cuda = AG_CUDA(norm_fwd_cuda),
    .backward_cuda = AG_CUDA(norm_bwd_cuda)};

sg_status sg_ag_norm(sg_tape_t t, const sg_norm_desc *d, sg_var *x,
                     sg_var *gamma, sg_var *beta, sg_var **y) {
  sg_status st = SG_OK;
  if (!d || !x)
    SG_RAISE(SG_ERR_INVALID_ARG, "norm: descriptor and input are required");
  if (x->value.ndim < 2)
    SG_RAISE(SG_ERR_SHAPE, "norm: input must be (N, C, ...)");
  for (int k = 0; k < 2; ++k) {
    sg_var *p = k ? beta : gamma;
    if (p &&
        (p->value.ndim != 1 || p->value.shape[0] != sg_var_global_shape(x)[1]))
      SG_RAISE(SG_ERR_SHAPE, "norm: %s must be (%lld)", k ? "beta" : "gamma",
               (long long)sg_var_global_shape(x)[1]);
  }
  norm_attr at = {
      .kind = d->kind, .groups = d->groups, .eps = d->eps, .gi = -1, .bi = -1};
  sg_var *in[3] = {x, NULL, NULL};
  int nin = 1;
  if (gamma) {
    at.gi = nin;
    in[nin++] = gamma;
  }
  if (beta) {
    at.bi = nin;
    in[nin++] = beta;
  }
  SG_TRY(sg_tape_apply(t, &norm_op, nin, in, 1, NULL, &at, sizeof at, y));
fail:
  return st;
}

/* ---- losses ------------------------------------------------------------------- */

typedef struct loss_attr {
  sg_loss_kind kind;
  int has_target;
} loss_attr;

/* saved: the (global) partial sums, then the gradient scale. On a device
 * the partials are summed there and finished on the host (h, a few
 * doubles; on a mesh reduced over it), then copied back; on the host h is
 * saved itself. */
static sg_status loss_fwd_on(sg_node *node, int cuda) {
  sg_status st = SG_OK;
  const loss_attr *a = (const loss_attr *)node->attr;
  const sg_tensor *p = &node->in[0]->value;
  const sg_device dev = node->device, host = sg_device_host();
  int64_t batch = p->shape[0], np = sg_loss_npartial(a->kind, batch), one = 1;
  double *saved = NULL, *h = NULL, value = 0;
  SG_TRY(
      sg_node_save(node, (size_t)(np + 1) * sizeof(double), (void **)&saved));
  h = cuda ? calloc((size_t)np + 1, sizeof *h) : saved;
  if (!h) SG_RAISE(SG_ERR_ALLOC, "loss partials");
  h[np] = 1.0;
  if (sg_tensor_numel(p) > 0) {
    SG_TRY(AG_KERNEL(cuda, sg_loss_partial, sg_loss_partial_cuda, a->kind,
                     p->dtype, batch, sg_tensor_numel(p), p->data,
                     a->has_target ? node->in[1]->value.data : NULL, saved));
    if (cuda) SG_TRY(ag_mem_copy(host, h, dev, saved, (size_t)np * sizeof *h));
  }
  if (node->mesh)
    SG_TRY(sg_sharded_loss_reduce(node->mesh, a->kind, node->split_space,
                                  node->split_batch, batch,
                                  sg_node_in_global_shape(node, 0)[0], h,
                                  &value, &h[np]));
  else
    SG_TRY(sg_loss_finish(a->kind, batch, h, &value));
  /* the partials as finished (on a mesh: the global ones, which the
   * backward reads) and the scale, as the host saves them */
  if (cuda)
    SG_TRY(ag_mem_copy(dev, saved, host, h, (size_t)(np + 1) * sizeof *h));
  SG_TRY(sg_node_alloc_out(node, 0, 1, &one));
  const float v32 = (float)value;
  const int f32 = p->dtype == SG_DTYPE_F32;
  SG_TRY(ag_mem_copy(dev, node->out[0]->value.data, host,
                     f32 ? (const void *)&v32 : (const void *)&value,
                     f32 ? sizeof v32 : sizeof value));
fail:
  if (cuda) free(h);
  return st;
}

static sg_status loss_bwd_on(sg_node *node, int cuda) {
  sg_status st = SG_OK;
  const loss_attr *a = (const loss_attr *)node->attr;
  const sg_tensor *p = &node->in[0]->value;
  const sg_tensor *g = &node->out[0]->grad;
  const double *saved = node->saved;
  const int64_t np = sg_loss_npartial(a->kind, p->shape[0]);
  double scale = 1, gv = 0;
  float g32 = 0;
  const int f32 = g->dtype == SG_DTYPE_F32;
  SG_TRY(ag_mem_copy(sg_device_host(), f32 ? (void *)&g32 : (void *)&gv,
                     node->device, g->data, f32 ? sizeof g32 : sizeof gv));
  SG_TRY(ag_mem_copy(sg_device_host(), &scale, node->device, saved + np,
                     sizeof scale));
  gv = (f32 ? (double)g32 : gv) * scale;
  if (sg_tensor_numel(p) == 0) goto fail;
  SG_TRY(AG_KERNEL(cuda, sg_loss_backward, sg_loss_bwd_cuda, a->kind, p->dtype,
                   p->shape[0], sg_tensor_numel(p), p->data,
                   a->has_target ? node->in[1]->value.data : NULL, saved, gv,
                   node->gin[0], a->has_target ? node->gin[1] : NULL));
fail:
  return st;
}

AG_ENTRIES(loss)

static const sg_op_def loss_op = {.name = "loss",
                                  .slots = {SG_SLOT_ACT, SG_SLOT_ACT},
                                  .forward = loss_fwd,
                                  .backward = loss_bwd,
                                  .rule = {.windowed_input = -1,
                                           .accepts = SG_ACCEPT_REPLICATE |
                                                      SG_ACCEPT_SHARD_BATCH |
                                                      SG_ACCEPT_SHARD_SPATIAL,
                                           .out = SG_OUT_REPLICATE,
                                           .keep_f32 = 1},
                                  .forward_cuda = AG_CUDA(loss_fwd_cuda),
                                  .backward_cuda = AG_CUDA(loss_bwd_cuda)};

sg_status sg_ag_loss(sg_tape_t t, sg_loss_kind kind, sg_var *pred,
                     sg_var *target, sg_var **loss) {
  sg_status st = SG_OK;
  if (!pred) SG_RAISE(SG_ERR_INVALID_ARG, "loss: prediction is required");
  int needs_t = kind == SG_LOSS_MSE || kind == SG_LOSS_REL_L2;
  if (needs_t && !target)
    SG_RAISE(SG_ERR_INVALID_ARG, "loss: target is required");
  if (needs_t && (target->value.ndim != pred->value.ndim ||
                  memcmp(sg_var_global_shape(target), sg_var_global_shape(pred),
                         sizeof(int64_t) * (size_t)pred->value.ndim)))
    SG_RAISE(SG_ERR_SHAPE, "loss: prediction and target differ in shape");
  loss_attr at = {.kind = kind, .has_target = needs_t};
  sg_var *in[2] = {pred, target};
  SG_TRY(sg_tape_apply(t, &loss_op, needs_t ? 2 : 1, in, 1, NULL, &at,
                       sizeof at, loss));
fail:
  return st;
}

/* ---- the registry (op_registry.c) --------------------------------------------- */

const sg_op_def *const *sg_ag_ops_builtin(int *n) {
  static const sg_op_def *const ops[] = {
      &conv_op,   &convt_op,  &pool_op,       &up_linear_op, &up_nearest_op,
      &act_op,    &binary_op, &binary_add_op, &scale_op,     &bias_op,
      &linear_op, &concat_op, &split_op,      &norm_op,      &loss_op};
  *n = (int)(sizeof ops / sizeof *ops);
  return ops;
}
