/* shardgrid — the memory model of sg-plan (sg_plan.h): the peak bytes per
 * rank of a training step, from the same accounting a run reports
 * (sg_malloc's peak: sg-train's peak_mem_mib).
 *
 * Two parts, as sg-train splits them:
 *   - held before the first step: the parallel plan's flat buffers
 *     (parameters, gradients, AdamW moments, ZeRO pieces and packing
 *     buffers: parallel.c sg_parallel_create) and the model's workspaces
 *     made at build time (the FNO's FFT plans and spectral buffers);
 *   - the step's own peak (peak_work_mib): a replay of the tape's
 *     allocations. The model's forward is written down as its ops (the
 *     shapes of models/fno.c, cnn.c, unet.c, vit.c at the rank's local
 *     shape and batch), and the replay allocates what autograd allocates:
 *     each op's output, the windowed input with its margins (xin), the
 *     saved state, the kernels' workspaces (per OpenMP thread); backward
 *     walks the ops in reverse with ag_backward.c's rules (gradients
 *     allocated on first use, handed over by identity ops, temporaries for
 *     margins and accumulation, outputs and saved state released after
 *     their node). The peak of the replay is the step's peak.
 * Pipeline stages hold the activations of their micro-batches in flight
 * (the schedule's peak) and the received gradients of their outputs;
 * activation checkpointing keeps a block's output and replays its forward
 * in backward. */
#include "plan_impl.h"
#include "sg_model.h"
#include "sg_ops.h"
#include "sg_pipeline.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the tape replay --------------------------------------------------- */

enum { SIM_MAX = 4096, SIM_IN = 3 };

typedef struct sim_var {
  double bytes;
  int requires, grad; /* needs a gradient; its gradient is allocated */
  int value;          /* its value is held */
} sim_var;

typedef struct sim_node {
  int nin, in[SIM_IN], out;
  unsigned ident;    /* inputs whose gradient is the output's (add) */
  int windowed;      /* input with the margins block, -1: none */
  double xin, saved; /* held from the forward to the node's backward */
  double bws;        /* backward workspace */
  int ckpt;          /* 1 + the checkpointed piece it replays (0: an op) */
} sim_node;

struct mshape;

typedef struct sim {
  sim_var v[SIM_MAX];
  sim_node n[SIM_MAX];
  int nv, nn, threads;
  const struct mshape *m; /* the model, for checkpoint replays */
  double xkey[64][4];     /* the halo exchanges made (ag_apply.c xcache) */
  int nx;
  double live, peak;
  int overflow;
  int moe_busy; /* a MoE block at the busiest rank's bounds is replayed */
} sim;

static void sim_touch(sim *s, double extra) {
  if (s->live + extra > s->peak) s->peak = s->live + extra;
}

/* A leaf (data): not on the account (the driver's own buffers). */
static int sim_leaf(sim *s, double bytes) {
  if (s->nv >= SIM_MAX) return s->overflow = 1, 0;
  s->v[s->nv] = (sim_var){bytes, 0, 0, 0};
  return s->nv++;
}

/* An op of inputs in[0..nin) with one output of out bytes; its margins
 * block xin (0: none), saved state, forward and backward workspaces. */
typedef struct sim_op {
  int nin, in[SIM_IN];
  double out, xin, saved, fws, bws;
  unsigned ident;
  int windowed, param; /* param: the op has a parameter input */
} sim_op;

static int sim_apply(sim *s, const sim_op *o) {
  if (s->nv >= SIM_MAX || s->nn >= SIM_MAX) return s->overflow = 1, 0;
  int req = o->param;
  for (int i = 0; i < o->nin; ++i) req |= s->v[o->in[i]].requires;
  s->live += o->xin + o->out + o->saved;
  sim_touch(s, o->fws);
  const int y = s->nv++;
  s->v[y] = (sim_var){o->out, req, 0, 1};
  sim_node *n = &s->n[s->nn++];
  *n = (sim_node){.nin = o->nin,
                  .out = y,
                  .ident = o->ident,
                  .windowed = o->windowed,
                  .xin = o->xin,
                  .saved = o->saved,
                  .bws = o->bws};
  for (int i = 0; i < o->nin; ++i) n->in[i] = o->in[i];
  return y;
}

static int model_piece(sim *s, const struct mshape *m, int k, int h);
static void sim_backward(sim *s, int first_node);

/* A checkpoint's backward (ag_checkpoint.c): the block's forward again on
 * a child tape, its backward from the output's gradient, then the node's
 * release. */
static void sim_ckpt_backward(sim *s, sim_node *n) {
  sim_var *y = &s->v[n->out];
  if (!y->grad) s->live += y->bytes, y->grad = 1;
  const int n1 = s->nn, in = n->in[0], out = n->out;
  const int y2 = model_piece(s, s->m, n->ckpt - 1, in);
  s->live += s->v[y2].bytes; /* its seed: the output's gradient */
  s->v[y2].grad = 1;
  sim_backward(s, n1);
  y = &s->v[out];
  s->live -= y->bytes * (y->value + y->grad);
  y->value = 0, y->grad = 0;
}

/* One node's backward (ag_backward_local and _route), then its release. */
static void sim_node_backward(sim *s, sim_node *n) {
  if (n->ckpt) {
    sim_ckpt_backward(s, n);
    return;
  }
  sim_var *y = &s->v[n->out];
  if (y->requires && !y->grad) {
    s->live += y->bytes;
    y->grad = 1;
  }
  double tmp = 0.0;
  int handed = 0;
  for (int i = 0; y->requires && i < n->nin; ++i) {
    sim_var *x = &s->v[n->in[i]];
    if (!x->requires || (n->ident >> i & 1u)) continue;
    if (i == n->windowed && n->xin > 0)
      tmp += n->xin; /* PAD: the margins' gradient */
    else if (!x->grad)
      s->live += x->bytes, x->grad = 1; /* DIRECT */
    else
      tmp += x->bytes; /* ADD */
  }
  sim_touch(s, tmp + n->bws);
  for (int i = 0; y->requires && i < n->nin; ++i) {
    sim_var *x = &s->v[n->in[i]];
    if (!x->requires) continue;
    if (n->ident >> i & 1u) {
      if (!x->grad && !handed && y->grad)
        handed = 1; /* the output's gradient handed over */
      else if (!x->grad)
        s->live += x->bytes;
      x->grad = 1;
    } else if (i == n->windowed && n->xin > 0) {
      sim_touch(s, tmp + x->bytes); /* tmp2: the margins' adjoint */
      if (!x->grad) s->live += x->bytes, x->grad = 1;
    }
  }
  /* release: the output's value and gradient, the node's own state */
  s->live -= (y->value ? y->bytes : 0.0) +
             (y->grad && !handed ? y->bytes : 0.0);
  y->value = 0, y->grad = 0;
  s->live -= n->xin + n->saved;
}

static void sim_backward(sim *s, int first_node) {
  for (int k = s->nn - 1; k >= first_node; --k) sim_node_backward(s, &s->n[k]);
  s->nn = first_node;
}

/* ---- the models' ops ------------------------------------------------- */

typedef struct mshape {
  double b, ny, nx; /* this rank's batch (one micro-batch) and shard */
  int threads;
  int kind;
  const sg_plan_problem *pb;
  sg_model_config mc; /* the model's keys (sg_model_config_from_kv) */
  int cin;            /* input channels (history x vars) */
  int tp, domain, ckpt_every, ph, pw;
  int seq;      /* the ViT's tp_sequence with tp > 1: token slices over tp */
  int sp;       /* the ViT's sp dim: the blocks on token pieces over sp */
  int ep;       /* the ViT's experts over ep (moe_experts / ep per rank) */
  double wl;    /* the FNO's channels of a tp rank (the largest split) */
  int skip[16]; /* the U-Net's skips (encoder outputs) */
  /* FNO-3D: the output time steps and the padded time axis (0: 2-D). Its
   * blocks are (c, t, ny, nx): time folds into the rows, fbytes(c, t ny,
   * nx) */
  double nt, ntp;
} mshape;

static double fbytes(const mshape *m, double ch, double ny, double nx) {
  return 4.0 * m->b * ch * ny * nx;
}

/* What a convolution's kernels take from sg_malloc on this CPU
 * (sg_conv_alloc_bytes: im2col, direct and pointwise kernels need other
 * scratch), forward (bwd 0) or backward with dW (bwd 1): c -> k channels,
 * kernel kw and stride st on an iny x inx input (trans: the transposed
 * convolution, iny x inx its input). */
static double conv_alloc(const mshape *m, double c, double k, double kw,
                         double st, double iny, double inx, int trans,
                         int bwd) {
  const sg_conv_desc d = {.nsp = 2,
                          .batch = m->b > 1 ? (int64_t)ceil(m->b) : 1,
                          .cin = (int64_t)c,
                          .cout = (int64_t)k,
                          .in = {(int64_t)iny, (int64_t)inx},
                          .kernel = {(int64_t)kw, (int64_t)kw},
                          .stride = {(int64_t)st, (int64_t)st},
                          .dilation = {1, 1}};
  return (double)sg_conv_alloc_bytes(&d, SG_DTYPE_F32, trans, bwd, m->threads);
}

/* ... and a linear c -> k over n points of each of nb samples in dtype dt
 * (sg_linear_*: a 1x1 convolution). */
static double linear_alloc_dt(const mshape *m, sg_dtype dt, double nb, double c,
                              double k, double n, int bwd) {
  const sg_conv_desc d = {.nsp = 1,
                          .batch = nb > 1 ? (int64_t)ceil(nb) : 1,
                          .cin = (int64_t)c,
                          .cout = (int64_t)k,
                          .in = {n > 1 ? (int64_t)n : 1},
                          .kernel = {1},
                          .stride = {1},
                          .dilation = {1}};
  return (double)sg_conv_alloc_bytes(&d, dt, 0, bwd, m->threads);
}

static double linear_alloc(const mshape *m, double c, double k, double n,
                           int bwd) {
  return linear_alloc_dt(m, SG_DTYPE_F32, m->b, c, k, n, bwd);
}

/* A 'same' convolution c -> k channels of kernel kw on an ny x nx shard. */
/* The halo exchange of a window op with a margin of hw cells on c
 * channels of an ny x nx shard: the tape keeps one per shape (ag_apply.c
 * xcache) for the step, with the halo plan's send and receive buffers per
 * neighbour (halo.c) along the split dims. */
static void sim_exchange(sim *s, const mshape *m, double c, double ny,
                         double nx, double hw) {
  if (hw <= 0 || (m->ph < 2 && m->pw < 2)) return;
  const double key[4] = {c, ny, nx, hw};
  for (int i = 0; i < s->nx; ++i)
    if (!memcmp(s->xkey[i], key, sizeof key)) return;
  if (s->nx < 64) memcpy(s->xkey[s->nx++], key, sizeof key);
  const double per = 4.0 * m->b * c * hw;
  if (m->ph > 1) s->live += 4 * per * (nx + 2 * hw); /* rows, both sides */
  if (m->pw > 1) s->live += 4 * per * (ny + 2 * hw);
}

static int op_conv(sim *s, const mshape *m, int x, double c, double k,
                   double kw, double ny, double nx) {
  sim_exchange(s, m, c, ny, nx, (kw - 1) / 2);
  const double iny = ny + kw - 1, inx = nx + kw - 1;
  const double xin = kw == 1 ? 0.0 : fbytes(m, c, iny, inx);
  sim_op o = {.nin = 1,
              .in = {x},
              .out = fbytes(m, k, ny, nx),
              .xin = xin,
              .fws = conv_alloc(m, c, k, kw, 1, iny, inx, 0, 0),
              .bws = conv_alloc(m, c, k, kw, 1, iny, inx, 0, 1),
              .windowed = 0,
              .param = 1};
  return sim_apply(s, &o);
}

static int op_pointwise(sim *s, const mshape *m, int x, double k, double ny,
                        double nx, int param, unsigned ident, int y2) {
  sim_op o = {.nin = y2 >= 0 ? 2 : 1,
              .in = {x, y2 >= 0 ? y2 : 0},
              .out = fbytes(m, k, ny, nx),
              .windowed = -1,
              .param = param,
              .ident = ident};
  return sim_apply(s, &o);
}

static int op_linear(sim *s, const mshape *m, int x, double c, double k,
                     double ny, double nx) {
  sim_op o = {.nin = 1,
              .in = {x},
              .out = fbytes(m, k, ny, nx),
              .fws = linear_alloc(m, c, k, ny * nx, 0),
              .bws = linear_alloc(m, c, k, ny * nx, 1),
              .windowed = -1,
              .param = 1};
  return sim_apply(s, &o);
}

static int op_act(sim *s, const mshape *m, int x, double k, double ny,
                  double nx) {
  return op_pointwise(s, m, x, k, ny, nx, 0, 0, -1);
}

static int op_add(sim *s, const mshape *m, int a, int b, double k, double ny,
                  double nx) {
  return op_pointwise(s, m, a, k, ny, nx, 0, 3u, b);
}

/* The input with the grid channels (sg_cn_domain_input, the FNO's concat). */
static int op_input(sim *s, const mshape *m, int *c) {
  int x = sim_leaf(s, fbytes(m, m->cin, m->ny, m->nx));
  *c = m->cin;
  if (!m->mc.add_grid) return x;
  *c += 2;
  return op_pointwise(s, m, x, *c, m->ny, m->nx, 0, 0, -1);
}

/* The driver's loss (rel_l2 / mse over the output). */
static void op_loss(sim *s, const mshape *m, int y, double cout) {
  int d = op_pointwise(s, m, y, cout, m->ny, m->nx, 0, 0, -1);
  sim_op o = {.nin = 1, .in = {d}, .out = 8.0, .windowed = -1};
  sim_apply(s, &o);
}

static int op_norm(sim *s, const mshape *m, int x, double k, double ny,
                   double nx, double nstat) {
  sim_op o = {.nin = 1,
              .in = {x},
              .out = fbytes(m, k, ny, nx),
              .saved = 24.0 * nstat,
              .windowed = -1,
              .param = 1};
  return sim_apply(s, &o);
}

/* A window op without parameters (pool, up-sampling) whose input has
 * margins of xin bytes (0: none). */
static int op_window(sim *s, const mshape *m, int x, double k, double ny,
                     double nx, double xin) {
  if (xin > 0) sim_exchange(s, m, k, ny / 2, nx / 2, 1);
  sim_op o = {.nin = 1,
              .in = {x},
              .out = fbytes(m, k, ny, nx),
              .xin = xin,
              .windowed = 0};
  return sim_apply(s, &o);
}

/* The conv nets' split over tp (convnet.c sg_cn_tp_slice): of c channels
 * in g GroupNorm groups, the largest tp rank's (whole groups: ceil(g /
 * tp)); *gl its groups. */
static double cn_tp_channels(const mshape *m, double c, double g, double *gl) {
  *gl = m->tp > 1 ? ceil(g / m->tp) : g;
  return c / g * *gl;
}

/* A conv split over tp by output channels (column-parallel: tp_copy, the
 * local conv to cl channels). */
static int op_conv_col(sim *s, const mshape *m, int x, double c, double cl,
                       double kw, double ny, double nx) {
  if (m->tp > 1) x = op_pointwise(s, m, x, c, ny, nx, 0, 0, -1); /* tp_copy */
  return op_conv(s, m, x, c, cl, kw, ny, nx);
}

/* A conv split over tp by input channels (row-parallel: the local conv
 * from cl channels, tp_reduce, the bias). */
static int op_conv_row(sim *s, const mshape *m, int x, double cl, double k,
                       double kw, double ny, double nx) {
  x = op_conv(s, m, x, cl, k, kw, ny, nx);
  if (m->tp <= 1) return x;
  x = op_pointwise(s, m, x, k, ny, nx, 0, 1u, -1);   /* tp_reduce */
  return op_pointwise(s, m, x, k, ny, nx, 1, 0, -1); /* the bias */
}

/* A U-Net level block: (conv, GroupNorm, act) twice (unet.c block), the
 * convs a column-/row-parallel pair over tp. */
static int unet_block(sim *s, const mshape *m, int h, double ci, double co,
                      double ny, double nx) {
  const double kw = (double)m->mc.kernel, g = (double)m->mc.groups;
  double gl = g;
  const double cl = cn_tp_channels(m, co, g, &gl);
  h = op_conv_col(s, m, h, ci, cl, kw, ny, nx);
  h = op_norm(s, m, h, cl, ny, nx, m->b * gl);
  h = op_act(s, m, h, cl, ny, nx);
  h = op_conv_row(s, m, h, cl, co, kw, ny, nx);
  h = op_norm(s, m, h, co, ny, nx, m->b * g);
  return op_act(s, m, h, co, ny, nx);
}

/* The U-Net's piece k (unet.c unet_piece) on h; the encoder outputs the
 * decoder takes wait in m->skip. */
static int unet_piece(sim *s, const mshape *m, int k, int h) {
  const int L = (int)m->mc.levels;
  const double w = (double)m->mc.width;
  int *skip = ((mshape *)m)->skip;
  if (k < L) {
    const double ny = m->ny / (1 << k), nx = m->nx / (1 << k);
    double ci = w * (1 << (k > 0 ? k - 1 : 0));
    if (k == 0) {
      int c0 = 0;
      h = op_input(s, m, &c0);
      ci = c0;
    } else {
      skip[k - 1] = h;
      h = op_window(s, m, h, ci, ny, nx, 0.0); /* 2x2 average pool */
    }
    return unet_block(s, m, h, ci, w * (1 << k), ny, nx);
  }
  if (k < 2 * L - 1) {
    const int l = 2 * L - 2 - k;
    const double ny = m->ny / (1 << l), nx = m->nx / (1 << l),
                 cu = w * (1 << (l + 1)), cl = w * (1 << l);
    const double xin = fbytes(m, cu, ny / 2 + 2, nx / 2 + 2);
    int u = op_window(s, m, h, cu, ny, nx, xin); /* linear up-sampling */
    int c = op_pointwise(s, m, u, cu + cl, ny, nx, 0, 0, skip[l]);
    return unet_block(s, m, c, cu + cl, cl, ny, nx);
  }
  return op_linear(s, m, h, w, (double)m->pb->vars, m->ny, m->nx);
}

/* The attention kernel's workspace (attention.c sg_attn_geom_make). */
static double attn_ws(const mshape *m, double head_dim, double nq) {
  const double bq = 64, bk = 128;
  const double fwd = bq * (head_dim + bk + 3),
               bwd = 2 * bq * bk + nq * (2 * head_dim + 1);
  return ceil((fwd > bwd ? fwd : bwd) * 4.0 / 64.0) * 64.0 * m->threads;
}

/* A linear split over tp by output channels (sg_ag_linear_col). */
static int op_linear_col(sim *s, const mshape *m, int x, double c, double k,
                         double ny, double nx) {
  if (m->tp > 1) x = op_pointwise(s, m, x, c, ny, nx, 0, 0, -1); /* tp_copy */
  return op_linear(s, m, x, c, k / m->tp, ny, nx);
}

/* A linear split over tp by input channels (sg_ag_linear_row): its
 * output's rows are (sy, sx): (ny, nx), or with tp_sequence this rank's
 * token slice, the reduce-scatter's. */
static int op_linear_row(sim *s, const mshape *m, int x, double c, double k,
                         double ny, double nx, double sy, double sx) {
  if (m->tp <= 1) return op_linear(s, m, x, c, k, ny, nx);
  x = op_linear(s, m, x, c / m->tp, k, ny, nx);
  /* tp_reduce (its gradient the output's) or the reduce-scatter */
  x = op_pointwise(s, m, x, k, sy, sx, 0, m->seq ? 0u : 1u, -1);
  return op_pointwise(s, m, x, k, sy, sx, 1, 0, -1); /* the bias */
}

/* tp_sequence's slice of ty x tx tokens: the largest over tp (T_r x 1);
 * the tokens themselves without it. */
static void seq_rows(const mshape *m, double ty, double tx, double *sy,
                     double *sx) {
  *sy = m->seq ? ceil(ty * tx / m->tp) : ty;
  *sx = m->seq ? 1.0 : tx;
}

/* The sp dim's piece of ty x tx tokens: the largest over sp (T_p x 1:
 * every op of the blocks on it, the attention's queries too). */
static void sp_rows(const mshape *m, double ty, double tx, double *py,
                    double *px) {
  *py = m->sp > 1 ? ceil(ty * tx / m->sp) : ty;
  *px = m->sp > 1 ? 1.0 : tx;
}

/* Block b has the experts (vit.c vit_moe_block): the last of every
 * moe_every blocks. */
static int vit_moe_block(const mshape *m, int b) {
  return m->mc.moe_experts > 0 && m->mc.moe_every > 0 &&
         (b + 1) % m->mc.moe_every == 0;
}

/* The mixture of experts on r (vit.c vit_moe; models/ag_moe.c) in place of
 * the MLP: with tp_sequence or sp the rank's whole tokens gathered first
 * and the output sliced again. The op's f64 scratch is malloc'd (not on
 * sg_malloc's account, like every kernel's own temporaries); its saved
 * block is: router probabilities (M x E), the choices, gates and send rows
 * (M x k), the samples' fractions (B x E), the S returned expert outputs
 * (S x C) and their pair indices, and of the R rows received their token
 * and local expert (R x (C + 1)) and fc1's pre-activations (R x F/tp), in
 * f64. S: this rank's kept pairs, at most M k min(1, capacity factor);
 * R: the rows its E/ep experts receive from the ep group, at most ep S and
 * at most the capacity of each expert and sample, ceil(cf T k / E), in this
 * rank's share T_r / T of the sample's tokens (and at most T_r: a token
 * picks an expert once): the peak is the busiest rank's, so the bounds,
 * not the mean (the routing of an untrained router is uneven), but in one
 * MoE block of the replay only (the first; s->moe_busy): the all-to-all
 * conserves rows, so over the ep group a rank receives S rows in the mean,
 * and the busiest rank of one block is seldom the busiest of the next
 * (every block MoE, 4 blocks, ep = 2: R = 157, 640, 515, 540 on one rank,
 * 640, 139, 429, 400 on the other, bound 640). The other MoE blocks hold
 * R = S rows. Each expert's rows run
 * as f64 GEMMs (sg_linear_forward/backward: the 1x1 convolution's
 * scratch, sg_conv_alloc_bytes, on sg_malloc's account) of at most
 * min(R, ep B cap) rows: the fc2 side (F in) is the larger. */
static int vit_moe_ops(sim *s, const mshape *m, int r, double sy, double sx) {
  const double C = (double)m->mc.width, E = (double)m->mc.moe_experts,
               k = (double)m->mc.moe_topk, p = (double)m->mc.patch,
               cf = m->mc.moe_capacity, F = 4.0 * C / m->tp;
  const double ty = floor(m->ny / p), tx = floor(m->nx / p), M = m->b * ty * tx,
               T = floor((double)m->pb->ny / p) * floor((double)m->pb->nx / p),
               S = M * k * (cf > 0.0 && cf < 1.0 ? cf : 1.0), Tl = ty * tx,
               cap = cf > 0.0 ? fmin(ceil(cf * T * k / E * Tl / T), Tl) : Tl,
               R = fmin(m->ep * S, m->ep * m->b * (E / m->ep) * cap);
  const double n = fmin(R, m->ep * m->b * cap),
               fws = linear_alloc_dt(m, SG_DTYPE_F64, 1, F, C, n, 0),
               bws = linear_alloc_dt(m, SG_DTYPE_F64, 1, F, C, n, 1),
               Rh = s->moe_busy ? fmin(R, S) : R; /* the rows held */
  s->moe_busy = 1;
  const int split = m->seq || m->sp > 1;
  if (split) r = op_pointwise(s, m, r, C, ty, tx, 0, 0, -1); /* gather */
  sim_op o = {.nin = 1,
              .in = {r},
              .out = fbytes(m, C, ty, tx),
              .saved = 8.0 * (M * E + M * k + m->b * E + S * C + Rh * (C + 1) +
                              Rh * F) +
                       4.0 * (2.0 * M * k + S + 2.0 * m->ep) + 8.0 * 24,
              .fws = fws,
              .bws = bws,
              .windowed = -1,
              .param = 1};
  r = sim_apply(s, &o);
  return split ? op_pointwise(s, m, r, C, sy, sx, 0, 0, -1) : r; /* slice */
}

/* A ViT block on ty x tx tokens (vit.c vit_block); with tp_sequence the
 * LayerNorms and residuals on token slices (the all-gather before a
 * column-parallel linear is tp_copy's op with a full output). Swin's
 * (shifted: the odd blocks, whose rolls before and after the attention are
 * pointwise copies with a one-sided halo) saves the attention's
 * probabilities, W^2 per query and head, in f64 (models/ag_swin.c). */
static int vit_block_ops(sim *s, const mshape *m, int h, double ty, double tx,
                         int swin, int shifted, int moe) {
  const double C = (double)m->mc.width, H = (double)m->mc.heads / m->tp,
               T = ty * tx, W = swin ? (double)m->mc.window : 0.0;
  double sy, sx; /* the residual stream's rows (sp: ty x tx is the piece) */
  seq_rows(m, ty, tx, &sy, &sx);
  int r = op_norm(s, m, h, C, sy, sx, m->b * sy * sx);
  if (shifted) r = op_pointwise(s, m, r, C, ty, tx, 0, 0, -1); /* roll */
  r = op_linear_col(s, m, r, C, 3 * C, ty, tx);
  r = op_pointwise(s, m, r, 3 * C / m->tp, ty, tx, 0, 0, -1); /* split */
  const double n = m->b * C / m->tp * T,
               ws = swin ? 8.0 * 7 * W * W * C / m->tp / H
                         : attn_ws(m, C / m->tp / H, T);
  sim_op at = {.nin = 1,
               .in = {r},
               .out = fbytes(m, C / m->tp, ty, tx),
               .saved = swin ? 8.0 * m->b * H * T * W * W
                             : 4.0 * (4 * n + m->b * H * T),
               .fws = ws,
               .bws = ws,
               .windowed = -1};
  r = sim_apply(s, &at);
  r = op_linear_row(s, m, r, C, C, ty, tx, sy, sx);
  if (shifted) r = op_pointwise(s, m, r, C, ty, tx, 0, 0, -1); /* roll back */
  h = op_add(s, m, h, r, C, sy, sx);
  r = op_norm(s, m, h, C, sy, sx, m->b * sy * sx);
  if (moe) {
    r = vit_moe_ops(s, m, r, sy, sx);
  } else {
    r = op_linear_col(s, m, r, C, 4 * C, ty, tx);
    r = op_act(s, m, r, 4 * C / m->tp, ty, tx);
    r = op_linear_row(s, m, r, 4 * C, C, ty, tx, sy, sx);
  }
  return op_add(s, m, h, r, C, sy, sx);
}

/* The ViT's piece k (vit.c vit_run) on h. */
static int vit_piece(sim *s, const mshape *m, int k, int h) {
  const double C = (double)m->mc.width, p = (double)m->mc.patch,
               cout = (double)m->pb->vars;
  const double ty = floor(m->ny / p), tx = floor(m->nx / p);
  const int depth = (int)m->mc.depth;
  double py, px, sy, sx; /* the sp piece; its tp_sequence slice */
  sp_rows(m, ty, tx, &py, &px);
  seq_rows(m, py, px, &sy, &sx);
  if (k == 0) {
    int c0 = 0;
    h = op_input(s, m, &c0);
    sim_op e = {.nin = 1,
                .in = {h},
                .out = fbytes(m, C, ty, tx),
                .fws = conv_alloc(m, c0, C, p, p, ty * p, tx * p, 0, 0),
                .bws = conv_alloc(m, c0, C, p, p, ty * p, tx * p, 0, 1),
                .windowed = 0,
                .param = 1};
    h = sim_apply(s, &e);
    h = op_pointwise(s, m, h, C, ty, tx, 1, 0, -1); /* + position field */
    /* tp_sequence, sp: the scatter to this rank's token slice */
    return m->seq || m->sp > 1 ? op_pointwise(s, m, h, C, sy, sx, 0, 0, -1) : h;
  }
  if (k <= depth && m->sp > 1) /* the block on this rank's piece */
    return vit_block_ops(s, m, h, py, px, 0, 0, vit_moe_block(m, k - 1));
  if (k <= depth) {
    const int swin = m->kind == SG_MODEL_SWIN;
    return vit_block_ops(s, m, h, ty, tx, swin,
                         swin && (k - 1) % 2 == 1 && m->mc.window > 1,
                         vit_moe_block(m, k - 1));
  }
  h = op_norm(s, m, h, C, sy, sx, m->b * sy * sx);
  if (m->seq || m->sp > 1) /* gather */
    h = op_pointwise(s, m, h, C, ty, tx, 0, 0, -1);
  sim_op u = {.nin = 1,
              .in = {h},
              .out = fbytes(m, cout, m->ny, m->nx),
              .fws = conv_alloc(m, C, cout, p, p, ty, tx, 1, 0),
              .bws = conv_alloc(m, C, cout, p, p, ty, tx, 1, 1),
              .windowed = 0,
              .param = 1};
  return sim_apply(s, &u);
}

/* The FNO's local spectrum count (sg_spectral_conv_spectrum_count / b / c):
 * 2 M floats, M the kept modes (2 modes x modes) over the domain ranks. */
static double fno_modes(const mshape *m, int domain) {
  const double md = (double)m->mc.modes;
  /* FNO-3D keeps 2 modes_t of the (c2c) time axis too */
  const double mt = m->ntp > 0 ? 2.0 * (double)m->mc.modes_t : 1.0;
  return ceil(2.0 * md * md * mt / domain);
}

/* The rows of the FNO's spectral layers: ny, or FNO-3D's ntp x ny. */
static double fno_rows(const mshape *m) {
  return m->ntp > 0 ? m->ntp * m->ny : m->ny;
}

/* The fused linear + activation (ag_spectral.c sg_ag_linear_act, act 1;
 * with the spectral part, sg_ag_spectral_linear_act: spec the spectrum's
 * bytes): one output, the pre-activation kept when act, the spectrum; in
 * backward what the kernels take (sg_linear_alloc_bytes: without the
 * spectral part sg_linear_act_backward, which the AVX2 tier runs in
 * cache-sized chunks of dz; with it dz = act'(z) dy when act, then
 * sg_linear_backward_add). */
static int op_linear_act(sim *s, const mshape *m, int x, double c, double k,
                         double ny, double nx, int act, double spec) {
  const double z = fbytes(m, k, ny, nx);
  const int64_t nb = m->b > 1 ? (int64_t)ceil(m->b) : 1,
                n = ny * nx > 1 ? (int64_t)(ny * nx) : 1;
  const double bws = spec > 0 ? (act ? z : 0.0) + (double)sg_linear_alloc_bytes(
                                                      SG_DTYPE_F32, nb,
                                                      (int64_t)c, (int64_t)k, n,
                                                      -1, 1, m->threads)
                              : (double)sg_linear_alloc_bytes(
                                    SG_DTYPE_F32, nb, (int64_t)c, (int64_t)k, n,
                                    act ? (int)m->mc.act : -1, 0, m->threads);
  sim_op o = {.nin = 1,
              .in = {x},
              .out = z,
              .saved = (act ? z : 0.0) + spec,
              .fws = linear_alloc(m, c, k, ny * nx, 0),
              .bws = bws,
              .windowed = -1,
              .param = 1};
  return sim_apply(s, &o);
}

/* The FNO's projection head (ag_spectral.c sg_ag_linear_head): c -> k ->
 * cout in one node, its output y kept; saved z, and a = act(z) where the
 * kernels are not fused (sg_linear_head_fused); the scratch of
 * sg_linear_head_alloc_bytes forward and backward. */
static int op_linear_head(sim *s, const mshape *m, int x, double c, double k,
                          double cout, double ny, double nx) {
  const double z = fbytes(m, k, ny, nx);
  const int64_t nb = m->b > 1 ? (int64_t)ceil(m->b) : 1,
                n = ny * nx > 1 ? (int64_t)(ny * nx) : 1;
  const int act = (int)m->mc.act;
  const int fused = sg_linear_head_fused(SG_DTYPE_F32, act);
  sim_op o = {
      .nin = 1,
      .in = {x},
      .out = fbytes(m, cout, ny, nx),
      .saved = fused ? z : 2.0 * z,
      .fws = (double)sg_linear_head_alloc_bytes(SG_DTYPE_F32, nb, (int64_t)c,
                                                (int64_t)k, (int64_t)cout, n,
                                                act, 0, m->threads),
      .bws = (double)sg_linear_head_alloc_bytes(SG_DTYPE_F32, nb, (int64_t)c,
                                                (int64_t)k, (int64_t)cout, n,
                                                act, 1, m->threads),
      .windowed = -1,
      .param = 1};
  return sim_apply(s, &o);
}

/* The FNO's spectral layer l on h: act(spectral + linear) (no act after the
 * last): at tp 1 one fused op (sg_ag_spectral_linear_act), else split over
 * tp by its role (ag_tp.c sg_ag_spectral_linear_tp): a
 * column-parallel layer copies its replicated input into the TP region and
 * makes wl channels; a row-parallel one takes wl, sums the partial outputs
 * over tp and adds the bias after the reduction. */
static int fno_layer(sim *s, const mshape *m, int l, int h) {
  const double w = (double)m->mc.width, ny = fno_rows(m), nx = m->nx;
  const int role = sg_plan_fno_role(&m->mc, m->tp, l);
  const double ci = role == 2 ? m->wl : w, co = role == 1 ? m->wl : w;
  const int act = l + 1 < m->mc.layers;
  if (role == 0)
    return op_linear_act(s, m, h, ci, co, ny, nx, act,
                         4.0 * 2.0 * m->b * ci * fno_modes(m, m->domain));
  if (role == 1) h = op_pointwise(s, m, h, w, ny, nx, 0, 0, -1); /* tp_copy */
  const double M = fno_modes(m, m->domain);
  sim_op sp = {.nin = 1,
               .in = {h},
               .out = fbytes(m, co, ny, nx),
               .saved = 4.0 * 2.0 * m->b * ci * M, /* 2 nb cin M */
               .windowed = -1,
               .param = 1};
  int sv = sim_apply(s, &sp);
  int lv = op_linear(s, m, h, ci, co, ny, nx);
  h = op_add(s, m, sv, lv, co, ny, nx);
  if (role == 2) {
    h = op_pointwise(s, m, h, co, ny, nx, 0, 1u, -1); /* tp_reduce */
    h = op_pointwise(s, m, h, co, ny, nx, 1, 0, -1);  /* the bias */
  }
  return act ? op_act(s, m, h, co, ny, nx) : h;
}

/* Piece k of the FNO or the CNN (fno.c, cnn.c forward_blocks) on h; the
 * FNO's pieces here are its layers (a tp pair is two). */
static int fno_cnn_piece(sim *s, const mshape *m, int k, int h) {
  const sg_plan_problem *pb = m->pb;
  const double w = (double)m->mc.width, ny = m->ny, nx = m->nx,
               P = (double)m->mc.proj_width, cout = (double)pb->vars,
               kw = (double)m->mc.kernel;
  const int npieces = sg_plan_pieces(&m->mc);
  if (k == 0) {
    int cc = 0;
    h = op_input(s, m, &cc);
    return m->kind == SG_MODEL_FNO ? op_linear(s, m, h, cc, w, ny, nx)
                                   : op_conv(s, m, h, cc, w, kw, ny, nx);
  }
  if (k == npieces - 1 && m->kind == SG_MODEL_FNO)
    return op_linear_head(s, m, h, w, P, cout, ny, nx); /* sg_ag_linear_head */
  if (k == npieces - 1) {
    h = op_linear(s, m, h, w, P, ny, nx);
    h = op_act(s, m, h, P, ny, nx);
    return op_linear(s, m, h, P, cout, ny, nx);
  }
  if (m->kind == SG_MODEL_FNO) return fno_layer(s, m, k - 1, h);
  /* a CNN residual block: a column-/row-parallel pair over tp */
  double gl = 0;
  const double cl = cn_tp_channels(m, w, (double)m->mc.groups, &gl);
  int r = op_conv_col(s, m, h, w, cl, kw, ny, nx);
  r = op_norm(s, m, r, cl, ny, nx, m->b * gl);
  r = op_act(s, m, r, cl, ny, nx);
  r = op_conv_row(s, m, r, cl, w, kw, ny, nx);
  return op_add(s, m, h, r, w, ny, nx);
}

/* FNO-3D's piece k (fno.c sg_fno_forward_blocks with a time axis): the
 * input broadcast along time and concatenated with the 3 coordinate
 * channels (the grid, a plain malloc: not on the account), the lift, the
 * time padding; the spectral layers on (ntp, ny, nx); the padding cropped,
 * the projection to one channel, the channel dim dropped (a copy each). */
static int fno3d_piece(sim *s, const mshape *m, int k, int h) {
  const double w = (double)m->mc.width, P = (double)m->mc.proj_width,
               nx = m->nx, T = m->nt * m->ny, Tp = m->ntp * m->ny;
  const int pad = m->ntp > m->nt, n = sg_plan_pieces(&m->mc);
  if (k == 0) {
    double c = m->cin;
    h = sim_leaf(s, fbytes(m, c, m->ny, nx));
    h = op_pointwise(s, m, h, c, T, nx, 0, 0, -1); /* broadcast */
    if (m->mc.add_grid) c += 3, h = op_pointwise(s, m, h, c, T, nx, 0, 0, -1);
    h = op_linear(s, m, h, c, w, T, nx);
    return pad ? op_pointwise(s, m, h, w, Tp, nx, 0, 0, -1) : h;
  }
  if (k < n - 1) return fno_layer(s, m, k - 1, h);
  if (pad) h = op_pointwise(s, m, h, w, T, nx, 0, 0, -1);
  h = op_linear_head(s, m, h, w, P, 1, T, nx); /* sg_ag_linear_head */
  return op_pointwise(s, m, h, 1, T, nx, 0, 0, -1);
}

static int model_piece(sim *s, const struct mshape *m, int k, int h) {
  if (m->kind == SG_MODEL_FNO3D) return fno3d_piece(s, m, k, h);
  if (m->kind == SG_MODEL_VIT || m->kind == SG_MODEL_SWIN)
    return vit_piece(s, m, k, h);
  if (m->kind == SG_MODEL_UNET) return unet_piece(s, m, k, h);
  return fno_cnn_piece(s, m, k, h);
}

/* Piece k is a checkpointed block (the blocks of fno.c, cnn.c, vit.c:
 * every act_ckpt_every-th, counted from 1). */
static int piece_checkpointed(const mshape *m, int k) {
  const int every = m->ckpt_every, n = sg_plan_pieces(&m->mc);
  if (every < 1 || m->kind == SG_MODEL_UNET || k < 1 || k > n - 2) return 0;
  return k % every == 0;
}

/* A checkpointed piece: its forward runs, then only its output stays (the
 * block's activations go with its child tape); backward replays it. */
static int sim_checkpoint(sim *s, const mshape *m, int k, int h) {
  const double live0 = s->live;
  const int n0 = s->nn;
  const int y = model_piece(s, m, k, h);
  s->nn = n0;
  s->live = live0 + s->v[y].bytes;
  if (s->nn >= SIM_MAX) return s->overflow = 1, y;
  sim_node *n = &s->n[s->nn++];
  *n = (sim_node){.nin = 1, .in = {h}, .out = y, .windowed = -1, .ckpt = k + 1};
  return y;
}

/* The ViT's pipeline edge (vit.c vit_run). With tp_sequence alone the
 * stages pass this tp rank's token slices (piece 0 ends in the scatter):
 * nothing at the edges. With the sp dim whole tokens cross: a stage that
 * starts in the blocks (or at the head) slices what it receives, one that
 * ends in the blocks (or at the embedding) gathers its piece before it
 * sends. k: the first piece (start) or the last one (end). */
static int vit_stage_edge(sim *s, const mshape *m, int k, int h, int start) {
  const int vit = m->kind == SG_MODEL_VIT || m->kind == SG_MODEL_SWIN;
  const int depth = (int)m->mc.depth;
  if (!vit || m->sp <= 1 || (start ? k < 1 || k > depth + 1 : k > depth))
    return h;
  const double p = (double)m->mc.patch;
  double ty = floor(m->ny / p), tx = floor(m->nx / p), py, px, sy, sx;
  sp_rows(m, ty, tx, &py, &px);
  seq_rows(m, py, px, &sy, &sx);
  if (!start) sy = ty, sx = tx; /* the gather's output: the whole tokens */
  return op_pointwise(s, m, h, (double)m->mc.width, sy, sx, 0, 0, -1);
}

/* Pieces [first, last) on h (-1 for the model's input). */
static int model_forward(sim *s, const mshape *m, int first, int last, int h) {
  if (first > 0) h = vit_stage_edge(s, m, first, h, 1);
  for (int k = first; k < last; ++k)
    h = piece_checkpointed(m, k) ? sim_checkpoint(s, m, k, h)
                                 : model_piece(s, m, k, h);
  return last > first ? vit_stage_edge(s, m, last - 1, h, 0) : h;
}

/* ---- parameters ------------------------------------------------------- */

/* A conv (cout, cin, k, k) + bias; a norm's scale and shift. */
static double conv_params(double co, double ci, double k) {
  return co * ci * k * k + co;
}

/* FNO-3D's parameter floats of piece k (fno.c fno_add_params; no tp):
 * the lift from the inputs and the 3 coordinates, per layer the spectral
 * weight (complex, over the kept (t, y, x) modes; this rank's with
 * shard_spectral) and the skip, the projection to one channel. */
static double fno3d_params(const mshape *m, int k) {
  const double w = (double)m->mc.width, P = (double)m->mc.proj_width;
  const int n = sg_plan_pieces(&m->mc);
  if (k == 0) return (w * (m->cin + (m->mc.add_grid ? 3 : 0)) + w);
  if (k == n - 1) return P * w + P + P + 1;
  const double K = fno_modes(m, m->mc.shard_spectral ? m->domain : 1);
  return 2.0 * w * w * K + w * w + w;
}

/* The parameter floats of piece k this rank holds (the tables of
 * models/fno.c, cnn.c, unet.c, vit.c, in the order of their pieces). */
static double piece_params(const mshape *m, int k) {
  const sg_plan_problem *pb = m->pb;
  const double w = (double)m->mc.width, P = (double)m->mc.proj_width,
               cout = (double)pb->vars, kw = (double)m->mc.kernel;
  const double c0 = m->cin + (m->mc.add_grid ? 2 : 0);
  const int n = sg_plan_pieces(&m->mc), last = k == n - 1;
  if (m->kind == SG_MODEL_FNO3D) return fno3d_params(m, k);
  if (m->kind == SG_MODEL_FNO || m->kind == SG_MODEL_CNN) {
    if (last) return conv_params(P, w, 1) + conv_params(cout, P, 1);
    if (m->kind == SG_MODEL_FNO) {
      if (k == 0) return conv_params(w, c0, 1);
      const double md = (double)m->mc.modes;
      const double K = m->mc.shard_spectral ? ceil(2.0 * md * md / m->domain)
                                            : 2.0 * md * md;
      /* a tp-split layer holds wl of the channels on one side: the
       * spectral weight and the skip's matrix; its bias is split with
       * the output (column) or whole (row) */
      const int role = sg_plan_fno_role(&m->mc, m->tp, k - 1);
      const double c = role ? m->wl : w;
      return 2.0 * w * c * K + w * c + (role == 1 ? m->wl : w);
    }
    if (k == 0) return conv_params(w, c0, kw);
    double gl = 0; /* conv1 and the norm by output, conv2 by input channel */
    const double cl = cn_tp_channels(m, w, (double)m->mc.groups, &gl);
    return conv_params(cl, w, kw) + 2 * cl + conv_params(w, cl, kw);
  }
  if (m->kind == SG_MODEL_UNET) { /* level blocks: conv, norm, conv, norm */
    const int L = (int)m->mc.levels;
    if (last) return conv_params(cout, w, 1);
    const int l = k < L ? k : 2 * L - 2 - k;
    const double co = w * (1 << l);
    const double ci = k < L ? (l == 0 ? c0 : w * (1 << (l - 1)))
                            : w * (1 << (l + 1)) + co;
    double gl = 0; /* conv1 and norm1 split over tp, conv2 by input */
    const double cl = cn_tp_channels(m, co, (double)m->mc.groups, &gl);
    return conv_params(cl, ci, kw) + 2 * cl + conv_params(co, cl, kw) + 2 * co;
  }
  /* vit: embedding and position field; blocks; final norm and un-patchify */
  const double p = (double)m->mc.patch, tp = m->tp;
  if (k == 0)
    return conv_params(w, c0, p) + w * floor(m->ny / p) * floor(m->nx / p);
  if (last) return 2 * w + w * cout * p * p + cout;
  const double W = (double)m->mc.window,
               rpb = m->kind == SG_MODEL_SWIN
                         ? (double)m->mc.heads * (2 * W - 1) * (2 * W - 1) / tp
                         : 0.0; /* Swin's relative position bias */
  /* the MLP, or the experts: the router (E, C) and this ep rank's E/ep
   * experts of the MLP's shape, their hidden width over tp (fc2's bias
   * whole) */
  const double E = (double)m->mc.moe_experts,
               mlp = vit_moe_block(m, k - 1)
                         ? E * w + E / m->ep *
                                       ((4 * w * w + 4 * w) / tp +
                                        4 * w * w / tp + w)
                         : (4 * w * w + 4 * w) / tp + 4 * w * w / tp + w;
  return 2 * w + (3 * w * w + 3 * w) / tp + w * w / tp + w + 2 * w + mlp + rpb;
}

/* The plan's buffers (parallel.c sg_parallel_create) over n parameter
 * floats: parameters and gradients, the AdamW moments (ZeRO pieces over
 * fsdp from stage 1), the packing buffers of ZeRO 1 and 2; ZeRO >= 2 keeps
 * the gradient pieces and frees the flat gradient, ZeRO 3 keeps the
 * parameter pieces and frees the flat parameters (parallel_hooks.c: the
 * full tensors are gathered per parameter, for a moment). */
static void plan_buffers(const sg_plan_problem *pb, const sg_plan_mesh *mesh,
                         double n, sg_plan_mem *out) {
  const int64_t zero = sg_plan_int(pb, "zero");
  const int f = sg_plan_mesh_dim(mesh, "fsdp");
  const double nstate = zero == 0 ? n : ceil(n / f);
  out->params = 4.0 * ((zero >= 3 ? nstate : n) + 1);
  out->grads = 4.0 * ((zero >= 2 ? nstate : n) + 1);
  out->optim = 2 * 4.0 * (nstate + 1);
  if (zero == 1 || zero == 2) out->workspace += 4.0 * (n + nstate + 1);
}

/* The fraction of a pruned FFT's `fields` that one chunk transforms (fft.c
 * chunk_batch: as many as fit 512 KiB of the full complex block of a
 * field over the domain ranks, the largest divisor of the batch;
 * SG_FFT_CHUNK_BYTES is not read here): 1 for one chunk. */
static double fft_chunk(const mshape *m, double fields) {
  const double T = m->ntp > 0 ? m->ntp : 1.0;
  const double per = 8.0 * T * (double)m->pb->ny * (double)m->pb->nx /
                     m->domain;
  double target = floor(524288.0 / per);
  if (fields <= 1 || target >= fields) return 1.0;
  if (target < 1) target = 1;
  for (double c = target; c > 1; --c)
    if (fmod(fields, c) == 0) return c / fields;
  return 1.0 / fields;
}

/* One spectral convolution's buffers (spectral.c conv_create: the x and
 * z spectra of cin channels, the y spectrum of cout; the mixing kernels'
 * planar copies of the x and y spectra and of W's local modes, padded to
 * 16 modes) and its FFT plans' scratch (fft.c: A, B and the send block, of
 * the larger of the real and the half-spectrum block), one plan when
 * cin == cout. */
static double spectral_conv_bytes(const mshape *m, double cin, double cout) {
  const double M = fno_modes(m, m->domain), Mp = 16.0 * ceil(M / 16.0);
  const double spec = 4.0 * 2.0 * m->b * M * (2.0 * cin + cout) +
                      4.0 * 2.0 * Mp * (m->b * (cin + cout) + cin * cout);
  double plans = 0.0;
  for (int i = 0; i < (cin == cout ? 1 : 2); ++i) {
    const double c = i ? cout : cin;
    const double real = fbytes(m, c, fno_rows(m), m->nx),
                 half = 8.0 * m->b * c * fno_rows(m) * floor(m->nx / 2 + 1);
    /* the blocks hold one chunk of the fields; a plan of several chunks
     * has one more (W) */
    const double f = fft_chunk(m, m->b * c);
    plans += (f < 1.0 ? 4 : 3) * f * (real > half ? real : half);
  }
  return spec + plans;
}

/* The FNO's spectral convolutions, one per shape its layers use (fno.c
 * fno_convs: the replicated one, the column- and the row-parallel one). */
static double fno_workspace(const mshape *m) {
  const double w = (double)m->mc.width;
  int has[3] = {0, 0, 0};
  for (int l = 0; l < (int)m->mc.layers; ++l)
    has[sg_plan_fno_role(&m->mc, m->tp, l)] = 1;
  return (has[0] ? spectral_conv_bytes(m, w, w) : 0.0) +
         (has[1] ? spectral_conv_bytes(m, w, m->wl) : 0.0) +
         (has[2] ? spectral_conv_bytes(m, m->wl, w) : 0.0);
}

/* One micro-batch through the pieces [first, last): the replay's peak
 * (*peak) and what its forward leaves held for backward (*held). The
 * pieces after the first take the previous piece's output, received. */
static void chunk_replay(sim *s, const mshape *m, int first, int last,
                         double *held, double *peak, double *outb) {
  memset(s, 0, sizeof *s);
  s->threads = m->threads, s->m = m;
  int h = 0;
  if (first > 0) { /* the received activation: its size from a dry run */
    h = model_forward(s, m, 0, first, h);
    const double bytes = s->v[h].bytes;
    memset(s, 0, sizeof *s);
    s->threads = m->threads, s->m = m;
    h = sim_leaf(s, bytes);
    s->v[h].requires = 1;
    s->live = bytes;
  }
  h = model_forward(s, m, first, last, h);
  *outb = last < sg_plan_pieces(&m->mc) ? s->v[h].bytes : 0.0;
  if (last == sg_plan_pieces(&m->mc)) /* FNO-3D: nt steps of one variable */
    op_loss(s, m, h, m->nt > 0 ? m->nt : (double)m->pb->vars);
  *held = s->live;
  sim_backward(s, 0);
  *peak = s->peak;
}

/* The pipeline's stages: each holds its pieces' parameters and the
 * activations of its micro-batches in flight (the schedule's peak), one of
 * them replayed through backward; the largest stage. Without pp: one
 * stage of every piece, one micro-batch. */
static sg_status stages(sim *s, const mshape *m, const sg_plan_mesh *mesh,
                        sg_plan_mem *out) {
  sg_status st = SG_OK;
  sg_pp_schedule *sch = NULL;
  /* the pipeline cuts units (an FNO tp pair is one: fno.c fno_units) */
  const int n = sg_plan_pieces(&m->mc), nu = sg_plan_units(&m->mc, m->tp),
            pp = sg_plan_mesh_dim(mesh, "pp");
  int v = 1;
  if (sg_plan_has_dim(mesh, "pp")) {
    sg_pp_kind kind;
    SG_TRY(sg_pp_kind_parse(sg_kv_str(m->pb->cfg, "pp_schedule"), &kind));
    const int64_t pv = sg_plan_int(m->pb, "pp_virtual");
    v = pv > 0 ? (int)pv : kind == SG_PP_INTERLEAVED ? 2 : 1;
    if (kind == SG_PP_ZB_H1) /* an under-estimate is worse than none */
      SG_RAISE(SG_ERR_NOT_SUPPORTED,
               "sg_plan_memory: ZB-H1's deferred weight-gradient state is not "
               "modelled");
    SG_TRY(sg_pp_schedule_create(kind, pp, (int)sg_plan_micro(m->pb, mesh), v,
                                 &sch));
  }
  const int nv = pp * v;
  /* the plan's flat buffers span the whole model's table on every stage
   * (pipeline.c sg_pipe_model_plan: nlocal is the model's count) */
  double params = 0;
  for (int k = 0; k < n; ++k) params += piece_params(m, k);
  for (int q = 0; q < pp; ++q) {
    sg_plan_mem sm;
    memset(&sm, 0, sizeof sm);
    double held = 0, peak = 0, grad_in = 0;
    for (int c = 0; c < v; ++c) { /* even split (pipeline.c pp_cut) */
      const int g = c * pp + q;
      const int a = g * (nu / nv) + (g < nu % nv ? g : nu % nv),
                b = (g + 1) * (nu / nv) + (g + 1 < nu % nv ? g + 1 : nu % nv);
      double hg = 0, pg = 0, og = 0;
      chunk_replay(s, m, sg_plan_unit_start(&m->mc, m->tp, a),
                   sg_plan_unit_start(&m->mc, m->tp, b), &hg, &pg, &og);
      if (og > grad_in) grad_in = og;
      if (hg > held) held = hg;
      if (pg > peak) peak = pg;
    }
    /* pairs held between F and B */
    const int inflight = sch ? sg_pp_peak_formula(sch, q) : 1;
    plan_buffers(m->pb, mesh, params, &sm);
    if (m->kind == SG_MODEL_FNO || m->kind == SG_MODEL_FNO3D)
      sm.workspace += fno_workspace(m);
    /* the gradients of a stage's outputs are received into buffers posted
     * when their headers arrive (pipeline.c pp_post_payloads): one per
     * pair in flight */
    sm.activations = (inflight - 1) * held + peak + inflight * grad_in;
    sm.peak = sm.params + sm.grads + sm.optim + sm.workspace + sm.activations;
    if (sm.peak > out->peak) *out = sm;
  }
  if (s->overflow)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "sg_plan_memory: model too large to replay");
fail:
  sg_pp_schedule_destroy(&sch);
  return st;
}

sg_status sg_plan_memory(const sg_plan_problem *pb, const sg_plan_mesh *mesh,
                         sg_plan_mem *out) {
  sg_status st = SG_OK;
  sim *s = NULL;
  if (!pb || !mesh || !out)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_plan_memory: NULL");
  memset(out, 0, sizeof *out);
  sg_model_config mc;
  SG_TRY(sg_plan_model(pb, &mc));
  const int kind = (int)mc.kind;
  const int ph = sg_plan_mesh_dim(mesh, "h"), pw = sg_plan_mesh_dim(mesh, "w"),
            tp = sg_plan_mesh_dim(mesh, "tp");
  const int64_t micro = sg_plan_micro(pb, mesh);
  const int every = mc.act_ckpt_every;
  if (kind == SG_MODEL_UNET && (every > 0 || sg_plan_has_dim(mesh, "pp")))
    SG_RAISE(
        SG_ERR_NOT_SUPPORTED,
        "sg_plan_memory: the U-Net's memory is modelled without activation "
        "checkpointing and pp only");
  mshape m = {.b = (double)(sg_plan_int(pb, "batch") /
                            sg_plan_data_ranks(mesh) / (micro > 0 ? micro : 1)),
              .ny = ceil((double)pb->ny / ph),
              .nx = ceil((double)pb->nx / pw),
              .threads = pb->threads > 0 ? pb->threads : 1,
              .kind = kind,
              .pb = pb,
              .mc = mc,
              .cin = (int)mc.cin,
              .tp = tp,
              .wl = ceil((double)mc.width / tp),
              .domain = ph * pw,
              .ph = ph,
              .pw = pw,
              .ckpt_every = every};
  m.seq = kind == SG_MODEL_VIT && m.tp > 1 && mc.tp_sequence;
  m.ep = sg_plan_mesh_dim(mesh, "ep");
  m.sp = kind == SG_MODEL_VIT
             ? sg_plan_mesh_dim(mesh, "sp") * sg_plan_mesh_dim(mesh, "cp")
             : 1;
  if (kind == SG_MODEL_FNO3D) {
    m.nt = (double)sg_plan_int(pb, "out_frames");
    if (m.nt < 1) m.nt = 1;
    m.ntp = m.nt + (double)mc.pad_t;
  }
  s = calloc(1, sizeof *s);
  if (!s) SG_RAISE(SG_ERR_ALLOC, "sg_plan_memory: out of memory");
  SG_TRY(stages(s, &m, mesh, out));
fail:
  free(s);
  return st;
}
