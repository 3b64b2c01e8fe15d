/* shardgrid — mixture-of-experts MLP on the tape (docs/transformers.md,
 * "Mixture of experts"): a linear router with softmax, top-k (k = 1, 2)
 * gates, a per-sample capacity in global token order, E expert MLPs
 * (fc1, GELU, fc2) split over an expert-parallel group, tokens dispatched
 * to their experts' ranks and combined by all-to-all(v), and the Switch
 * load-balancing loss (applied as its gradient).
 *
 * Expert tensor parallelism (Megatron's, inside each expert): with a tp
 * group every expert's hidden width F is split over it, fc1 column- and
 * fc2 row-parallel. The tokens and the router are replicated over tp (the
 * same bits on every tp rank: the same routing, the same dispatch), each
 * tp rank runs its F slice of every expert on the same rows, and one
 * fixed-order all-reduce over tp of the expert outputs (before the gated
 * combine; fc2's bias added on tp rank 0 only) gives every tp rank the
 * whole output; backward sums the experts' input gradients over tp the
 * same way (one all-reduce). Composes with ep: the experts over ep, F over
 * tp.
 *
 * Mesh invariance. Which (token, choice) pairs an expert keeps must not
 * depend on how the tokens are split: the capacity is per sample, and a
 * pair's place in its expert's queue is its rank in (choice slot, global
 * token index) order. When the domain dims split the tokens, the ranks of
 * the domain group all-gather their routing (the expert ids only, and
 * their token boxes) and every rank ranks its own pairs in the sample's
 * global order. The auxiliary loss is per sample too (its token fractions
 * come from the same gathered routing), averaged over the global batch.
 *
 * Arithmetic is in double whatever the activations' dtype. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd_impl.h"
#include "moe_inl.h"
#include "op_registry_impl.h"
#include "sg_autograd.h"
#include "sg_comm.h"
#include "sg_ops.h"
#include "sg_shardtensor.h"

typedef struct moe_attr {
  sg_moe_desc d;
} moe_attr;

/* The arrays kept for backward, in one saved block (offsets below). */
enum {
  SV_P,    /* M x E router probabilities */
  SV_SEL,  /* M x k chosen experts (int) */
  SV_GATE, /* M x k gates */
  SV_ROW,  /* M x k send row of the pair, -1 dropped (int) */
  SV_FRAC, /* Bl x E the sample's fraction of pairs per expert */
  SV_OUT,  /* S x C expert outputs returned, in send order */
  SV_PAIR, /* S pair index (m k + j) of each send row (int) */
  SV_SCNT, /* P rows sent to each ep rank (int) */
  SV_RCNT, /* P rows received from each ep rank (int) */
  SV_XR,   /* R x (C + 1) rows received: local expert, token */
  SV_A,    /* R x F fc1 pre-activations of the rows received */
  SV_N
};

typedef struct moe_sv {
  int64_t M, S, R, Bl, Tl, T, Bg;
  size_t off[SV_N];
} moe_sv;

typedef struct moe_geo { /* shapes of one node */
  int64_t Bl, C, Tl, M, E, El, F, k;
  int P, me; /* ep group size and rank */
  MPI_Comm ep;
  sg_group_t tp; /* NULL or size 1: F whole */
  int tpr;       /* this rank's index in tp (fc2's bias on 0 only) */
} moe_geo;

static void *sv_at(const moe_sv *s, int i) { return (char *)s + s->off[i]; }

static void to_f64(sg_dtype dt, int64_t n, const void *src, double *dst) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = dt == SG_DTYPE_F64 ? ((const double *)src)[i]
                                : (double)((const float *)src)[i];
}

/* dst (dtype dt) = src, or += src when add */
static void from_f64(sg_dtype dt, int64_t n, const double *src, void *dst,
                     int add) {
  for (int64_t i = 0; i < n; ++i) {
    if (dt == SG_DTYPE_F64)
      ((double *)dst)[i] = (add ? ((double *)dst)[i] : 0.0) + src[i];
    else
      ((float *)dst)[i] = (float)((add ? (double)((float *)dst)[i] : 0.0) +
                                  src[i]);
  }
}

static moe_geo geo_of(const sg_node *node) {
  const moe_attr *a = (const moe_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value, *w1 = &node->in[2]->value;
  moe_geo g = {.Bl = x->shape[0], .C = x->shape[1], .Tl = 1};
  for (int d = 2; d < x->ndim; ++d) g.Tl *= x->shape[d];
  g.M = g.Bl * g.Tl, g.E = a->d.experts, g.k = a->d.topk;
  g.El = w1->shape[0], g.F = w1->shape[1];
  g.P = a->d.ep ? sg_group_size(a->d.ep) : 1;
  g.me = a->d.ep ? sg_group_rank(a->d.ep) : 0;
  g.ep = a->d.ep ? sg_group_comm(a->d.ep) : MPI_COMM_SELF;
  if (a->d.tp && sg_group_size(a->d.tp) > 1)
    g.tp = a->d.tp, g.tpr = sg_group_rank(a->d.tp);
  return g;
}

/* X[m][c] (token rows) from the channels-first block (Bl, C, Tl). */
static void tokens_in(const moe_geo *g, const double *x, double *X) {
  for (int64_t n = 0; n < g->Bl; ++n)
    for (int64_t c = 0; c < g->C; ++c)
      for (int64_t t = 0; t < g->Tl; ++t)
        X[(n * g->Tl + t) * g->C + c] = x[(n * g->C + c) * g->Tl + t];
}

static void tokens_out(const moe_geo *g, const double *X, double *x) {
  for (int64_t n = 0; n < g->Bl; ++n)
    for (int64_t c = 0; c < g->C; ++c)
      for (int64_t t = 0; t < g->Tl; ++t)
        x[(n * g->C + c) * g->Tl + t] = X[(n * g->Tl + t) * g->C + c];
}

/* Router: p = softmax(Wr x), the top-k experts (ties: the lower index) and
 * their gates (k = 2 renormalised over the two): sg_moe_route_token per
 * token (moe_inl.h). */
static void route(const moe_geo *g, const double *X, const double *Wr,
                  double *p, int *sel, double *gate) {
  for (int64_t m = 0; m < g->M; ++m)
    sg_moe_route_token(g->E, g->C, g->k, Wr, X + m * g->C, p + m * g->E,
                       sel + m * g->k, gate + m * g->k);
}

/* This rank's token box in the global spatial grid: offsets and extents of
 * the spatial dims (ns of them), and the global extents. */
static sg_status token_box(const sg_node *node, int64_t *off, int64_t *ext,
                           int64_t *gext, int *ns) {
  sg_status st = SG_OK;
  const sg_var *x = node->in[0];
  const int nd = x->value.ndim;
  int64_t o[SG_TENSOR_MAX_DIMS] = {0}, sh[SG_TENSOR_MAX_DIMS];
  const int64_t *gs = sg_node_in_global_shape(node, 0);
  if (node->mesh)
    SG_TRY(sg_shardtensor_box(node->mesh, nd, gs, node->placements,
                              sg_mesh_rank(node->mesh), o, sh));
  *ns = nd - 2;
  for (int d = 2; d < nd; ++d)
    off[d - 2] = o[d], ext[d - 2] = x->value.shape[d], gext[d - 2] = gs[d];
fail:
  return st;
}

/* The global (row-major) index of local token t of a box. */
static int64_t box_gidx(int ns, const int64_t *off, const int64_t *ext,
                        const int64_t *gext, int64_t t) {
  int64_t gi = 0, stride = 1;
  for (int d = ns - 1; d >= 0; --d) {
    gi += (off[d] + t % ext[d]) * stride;
    t /= ext[d], stride *= gext[d];
  }
  return gi;
}

/* Place the pairs (Bl x tl x k expert ids) of a token box into the global
 * array G (Bl x T x k). */
static void place_box(const moe_geo *g, int ns, const int64_t *off,
                      const int64_t *ext, const int64_t *gext, int64_t T,
                      const int *sel, int *G) {
  int64_t tl = 1;
  for (int d = 0; d < ns; ++d) tl *= ext[d];
  for (int64_t t = 0; t < tl; ++t) {
    const int64_t gi = box_gidx(ns, off, ext, gext, t);
    for (int64_t n = 0; n < g->Bl; ++n)
      for (int64_t j = 0; j < g->k; ++j)
        G[(n * T + gi) * g->k + j] = sel[(n * tl + t) * g->k + j];
  }
}

enum { MOE_BOX = 2 * SG_TENSOR_MAX_DIMS }; /* ints of a box header */

/* The routing of every token of this rank's samples (G: Bl x T x k expert
 * ids), from the domain group dg (NULL: this rank holds every token). */
static sg_status gather_routing(const moe_geo *g, const sg_node *node,
                                sg_group_t dg, const int *sel, int64_t T,
                                int *G) {
  sg_status st = SG_OK;
  int64_t off[SG_TENSOR_MAX_DIMS], ext[SG_TENSOR_MAX_DIMS],
      gext[SG_TENSOR_MAX_DIMS];
  int ns = 0, *buf = NULL, *all = NULL, *cnt = NULL, *dsp = NULL;
  SG_TRY(token_box(node, off, ext, gext, &ns));
  if (!dg || sg_group_size(dg) == 1) {
    place_box(g, ns, off, ext, gext, T, sel, G);
    goto fail;
  }
  const int P = sg_group_size(dg);
  const int64_t mine = MOE_BOX + g->M * g->k;
  int64_t tot = 0;
  buf = malloc((size_t)mine * sizeof *buf);
  cnt = malloc(2 * (size_t)P * sizeof *cnt), dsp = cnt + P;
  if (!buf || !cnt) st = SG_ERR_ALLOC;
  SG_TRY(sg_group_agree(dg, st));
  for (int d = 0; d < ns; ++d)
    buf[d] = (int)off[d], buf[SG_TENSOR_MAX_DIMS + d] = (int)ext[d];
  memcpy(buf + MOE_BOX, sel, (size_t)(g->M * g->k) * sizeof *sel);
  const int mc = (int)mine;
  MPI_Allgather(&mc, 1, MPI_INT, cnt, 1, MPI_INT, sg_group_comm(dg));
  for (int r = 0; r < P; ++r) dsp[r] = (int)tot, tot += cnt[r];
  all = malloc((size_t)tot * sizeof *all);
  SG_TRY(sg_group_agree(dg, all ? SG_OK : SG_ERR_ALLOC));
  MPI_Allgatherv(buf, mc, MPI_INT, all, cnt, dsp, MPI_INT, sg_group_comm(dg));
  for (int r = 0; r < P; ++r) {
    const int *b = all + dsp[r];
    int64_t o[SG_TENSOR_MAX_DIMS], e[SG_TENSOR_MAX_DIMS];
    for (int d = 0; d < ns; ++d) o[d] = b[d], e[d] = b[SG_TENSOR_MAX_DIMS + d];
    place_box(g, ns, o, e, gext, T, b + MOE_BOX, G);
  }
fail:
  free(buf), free(all), free(cnt);
  return st;
}

/* Each pair's place in its expert's queue (slot-major, then global token
 * order, per sample) into Q (Bl x T x k), and the sample's fractions of
 * pairs per expert into frac (Bl x E). */
static void queue_places(const moe_geo *g, int64_t T, const int *G, int *Q,
                         double *frac) {
  for (int64_t n = 0; n < g->Bl; ++n) /* sg_moe_queue_sample (moe_inl.h) */
    sg_moe_queue_sample(g->E, T, g->k, G + n * T * g->k, Q + n * T * g->k,
                        frac + n * g->E);
}

/* The capacity of an expert per sample: ceil(factor T k / E); none (the
 * number of pairs) when factor <= 0. */
static int64_t capacity_of(const sg_moe_desc *d, int64_t T) {
  if (d->capacity <= 0.0) return T * d->topk;
  return (int64_t)ceil(d->capacity * (double)(T * d->topk) /
                       (double)d->experts);
}

/* keep[m k + j] = 1 if pair (m, j) is within its expert's capacity; the
 * fractions per expert of each sample into frac. */
static sg_status plan_keep(const moe_geo *g, const sg_node *node,
                           const sg_moe_desc *d, const int *sel, int64_t T,
                           int *keep, double *frac) {
  sg_status st = SG_OK;
  sg_group_t dg = NULL;
  int64_t off[SG_TENSOR_MAX_DIMS], ext[SG_TENSOR_MAX_DIMS],
      gext[SG_TENSOR_MAX_DIMS];
  int ns = 0;
  int *G = malloc((size_t)(g->Bl * T * g->k) * sizeof *G);
  int *Q = malloc((size_t)(g->Bl * T * g->k) * sizeof *Q);
  SG_TRY(sg_node_group(node, SG_SPLIT_SPACE, &dg));
  st = G && Q ? SG_OK : SG_ERR_ALLOC;
  if (dg) st = sg_group_agree(dg, st);
  if (st != SG_OK) SG_RAISE(st, "moe: out of memory for the routing");
  SG_TRY(gather_routing(g, node, dg, sel, T, G));
  queue_places(g, T, G, Q, frac);
  SG_TRY(token_box(node, off, ext, gext, &ns));
  const int64_t cap = capacity_of(d, T);
  for (int64_t n = 0; n < g->Bl; ++n)
    for (int64_t t = 0; t < g->Tl; ++t) {
      const int64_t gi = box_gidx(ns, off, ext, gext, t);
      for (int64_t j = 0; j < g->k; ++j)
        keep[(n * g->Tl + t) * g->k + j] = Q[(n * T + gi) * g->k + j] < cap;
    }
fail:
  free(G), free(Q);
  return st;
}

/* All-to-all(v) over the ep group of rows of `width` doubles: scnt[r] rows
 * to rank r, rcnt[r] rows from it (each in rank order). */
static sg_status exchange(const moe_geo *g, const double *sbuf, const int *scnt,
                          double *rbuf, const int *rcnt, int64_t width) {
  sg_status st = SG_OK;
  int *c = malloc(4 * (size_t)g->P * sizeof *c);
  if (!c) SG_RAISE(SG_ERR_ALLOC, "moe: out of memory");
  int *sd = c + g->P, *rc = sd + g->P, *rd = rc + g->P, so = 0, ro = 0;
  for (int r = 0; r < g->P; ++r) {
    c[r] = (int)(scnt[r] * width), sd[r] = so, so += c[r];
    rc[r] = (int)(rcnt[r] * width), rd[r] = ro, ro += rc[r];
  }
  if (MPI_Alltoallv(sbuf, c, sd, MPI_DOUBLE, rbuf, rc, rd, MPI_DOUBLE, g->ep) !=
      MPI_SUCCESS)
    SG_RAISE(SG_ERR_MPI, "moe: all-to-all over the ep group failed");
fail:
  free(c);
  return st;
}

/* The owner's rows grouped by expert, each group in arrival order (so the
 * sums inside a group's GEMMs are in the same order on every run): idx[]
 * lists the rows of expert 0, then 1, ...; first[e] .. first[e + 1] are
 * expert e's. */
static void group_rows(const moe_geo *g, int64_t R, const double *xr,
                       int64_t *first, int64_t *idx) {
  for (int64_t e = 0; e <= g->E; ++e) first[e] = 0;
  for (int64_t r = 0; r < R; ++r) ++first[(int64_t)xr[r * (g->C + 1)] + 1];
  for (int64_t e = 0; e < g->E; ++e) first[e + 1] += first[e];
  int64_t *next = first + g->E + 1; /* E cursors after the E + 1 offsets */
  for (int64_t e = 0; e < g->E; ++e) next[e] = first[e];
  for (int64_t r = 0; r < R; ++r) idx[next[(int64_t)xr[r * (g->C + 1)]]++] = r;
}

/* Rows idx[0..n) of the row-major (R x w) array src, at column offset c0 and
 * row stride ld, into the column-major (w x n) block dst (channels first, as
 * sg_linear_* take them), or back (to_rows 1). */
static void pack_cols(int64_t n, const int64_t *idx, int64_t w, int64_t ld,
                      int64_t c0, double *rows, double *cols, int to_rows) {
  for (int64_t i = 0; i < n; ++i) {
    double *r = rows + idx[i] * ld + c0;
    for (int64_t c = 0; c < w; ++c)
      if (to_rows)
        r[c] = cols[c * n + i];
      else
        cols[c * n + i] = r[c];
  }
}

/* The expert GEMMs' scratch: the row groups and four (max(C, F) x R)
 * column blocks. */
typedef struct moe_ex {
  int64_t *first, *idx;
  double *c[4];
  void *mem;
} moe_ex;

static sg_status ex_alloc(const moe_geo *g, int64_t R, const double *xr,
                          moe_ex *x) {
  const int64_t w = g->C > g->F ? g->C : g->F;
  const size_t ni = (size_t)(2 * g->E + 1 + R), nd = (size_t)(w * R + 1);
  x->mem = malloc(ni * sizeof(int64_t) + 4 * nd * sizeof(double));
  if (!x->mem)
    return sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__,
                        "moe: out of memory for the expert GEMMs");
  x->c[0] = x->mem;
  for (int i = 1; i < 4; ++i) x->c[i] = x->c[i - 1] + nd;
  x->first = (int64_t *)(x->c[3] + nd), x->idx = x->first + 2 * g->E + 1;
  group_rows(g, R, xr, x->first, x->idx);
  return SG_OK;
}

/* The experts on the owner's rows, one pair of GEMMs per expert over its
 * rows: a = W1 x + b1, o = W2 gelu(a) + b2 (A: R x F, O: R x C, row-major). */
static sg_status expert_fwd(const moe_geo *g, const double *W1,
                            const double *b1, const double *W2,
                            const double *b2, int64_t R, const double *xr,
                            double *A, double *O) {
  sg_status st = SG_OK;
  const int64_t C = g->C, F = g->F;
  moe_ex x;
  SG_TRY(ex_alloc(g, R, xr, &x));
  double *Xc = x.c[0], *Ac = x.c[1], *Hc = x.c[2], *Oc = x.c[3];
  for (int64_t e = 0; e < g->E; ++e) {
    const int64_t n = x.first[e + 1] - x.first[e], *idx = x.idx + x.first[e];
    if (!n) continue;
    pack_cols(n, idx, C, C + 1, 1, (double *)xr, Xc, 0);
    SG_TRY(sg_linear_forward(SG_DTYPE_F64, 1, C, F, n, Xc, W1 + e * F * C,
                             b1 + e * F, Ac));
    SG_TRY(sg_act_forward(SG_ACT_GELU, SG_DTYPE_F64, F * n, Ac, Hc));
    SG_TRY(sg_linear_forward(SG_DTYPE_F64, 1, F, C, n, Hc, W2 + e * C * F,
                             g->tpr == 0 ? b2 + e * C : NULL, Oc));
    pack_cols(n, idx, F, F, 0, A, Ac, 1);
    pack_cols(n, idx, C, C, 0, O, Oc, 1);
  }
fail:
  free(x.mem);
  return st;
}

/* The weights of the node's inputs 1..5 (Wr, W1, b1, W2, b2) as double, in
 * one buffer; w[i] points at input i + 1's. */
static sg_status weights_f64(const sg_node *node, double **buf, double *w[5]) {
  int64_t tot = 0;
  for (int i = 1; i <= 5; ++i) tot += ag_numel(&node->in[i]->value);
  *buf = malloc((size_t)(tot > 0 ? tot : 1) * sizeof **buf);
  if (!*buf)
    return sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "moe: out of memory");
  double *p = *buf;
  for (int i = 1; i <= 5; ++i) {
    const sg_tensor *v = &node->in[i]->value;
    w[i - 1] = p;
    to_f64(v->dtype, ag_numel(v), v->data, p);
    p += ag_numel(v);
  }
  return SG_OK;
}

/* The forward's arrays (temporaries; the ones backward needs are packed
 * into the node's saved block at the end). */
typedef struct moe_fw {
  double *X, *Y, *p, *gate, *frac, *sbuf, *ores, *xr, *A, *O, *wb;
  int *sel, *row, *pair, *scnt, *rcnt;
  double *w[5]; /* Wr, W1, b1, W2, b2 */
  int64_t S, R;
} moe_fw;

static void fw_free(moe_fw *f) {
  void *v[] = {f->X, f->Y, f->p,  f->gate, f->frac, f->sbuf, f->ores, f->xr,
               f->A, f->O, f->wb, f->sel,  f->row,  f->pair, f->scnt};
  for (size_t i = 0; i < sizeof v / sizeof *v; ++i) free(v[i]);
}

/* A status agreed over the ep and tp groups (every rank of both takes
 * the same branch before the next exchange). */
static sg_status agree_ep(const sg_node *node, sg_status st) {
  const moe_attr *a = (const moe_attr *)node->attr;
  if (a->d.ep) st = sg_group_agree(a->d.ep, st);
  return a->d.tp ? sg_group_agree(a->d.tp, st) : st;
}

/* The rows' partial sums over the F slices (R x C) summed over tp in
 * rank order, in place: the same bits on every tp rank. */
static sg_status tp_rows_sum(const moe_geo *g, double *rows, int64_t n) {
  if (!g->tp) return SG_OK;
  return sg_allreduce_det(g->tp, rows, rows, n, SG_DTYPE_F64, SG_REDUCE_SUM);
}

/* Send rows of the kept pairs, grouped by the ep rank owning the expert
 * (rank order, then pair order): row[i], pair[s], scnt. */
static void assign_rows(const moe_geo *g, moe_fw *f) {
  f->S = 0;
  for (int r = 0; r < g->P; ++r) {
    f->scnt[r] = 0;
    for (int64_t i = 0; i < g->M * g->k; ++i) {
      if (!f->row[i] || f->sel[i] / g->El != r) continue;
      f->pair[f->S] = (int)i, f->scnt[r]++, f->S++;
    }
  }
  for (int64_t i = 0; i < g->M * g->k; ++i) f->row[i] = -1;
  for (int64_t s = 0; s < f->S; ++s) {
    const int64_t i = f->pair[s], m = i / g->k;
    f->row[i] = (int)s;
    f->sbuf[s * (g->C + 1)] = (double)(f->sel[i] % g->El);
    memcpy(f->sbuf + s * (g->C + 1) + 1, f->X + m * g->C,
           (size_t)g->C * sizeof(double));
  }
}

/* The auxiliary loss's value: coef E / Bg sum_n sum_e f_e P_e, summed over
 * the batch and domain ranks. */
static sg_status aux_value(const sg_node *node, const moe_geo *g,
                           const moe_fw *f, int64_t T, int64_t Bg) {
  sg_status st = SG_OK;
  const moe_attr *a = (const moe_attr *)node->attr;
  sg_group_t grp = NULL;
  double s = 0.0;
  for (int64_t m = 0; m < g->M; ++m)
    for (int64_t e = 0; e < g->E; ++e)
      s += f->frac[(m / g->Tl) * g->E + e] * f->p[m * g->E + e];
  s *= a->d.aux_coef * (double)g->E / ((double)Bg * (double)T);
  SG_TRY(sg_node_group(node, SG_SPLIT_BATCH | SG_SPLIT_SPACE, &grp));
  if (grp && sg_group_size(grp) > 1)
    SG_TRY(sg_allreduce_det(grp, &s, &s, 1, SG_DTYPE_F64, SG_REDUCE_SUM));
  *a->d.aux = s;
fail:
  return st;
}

static size_t al8(size_t n) { return (n + 7) & ~(size_t)7; }

/* Pack what backward needs into the node's saved block. */
static sg_status save_state(sg_node *node, const moe_geo *g, const moe_fw *f,
                            int64_t T, int64_t Bg) {
  sg_status st = SG_OK;
  const int64_t M = g->M, k = g->k;
  const void *src[SV_N] = {f->p,    f->sel,  f->gate, f->row, f->frac, f->ores,
                           f->pair, f->scnt, f->rcnt, f->xr,  f->A};
  const size_t D = sizeof(double), I = sizeof(int);
  const size_t sz[SV_N] = {
      M * g->E * D,    M * k * I, M * k * D, M * k * I, g->Bl * g->E * D,
      f->S * g->C * D, f->S * I,  g->P * I,  g->P * I,  f->R * (g->C + 1) * D,
      f->R * g->F * D};
  size_t tot = al8(sizeof(moe_sv));
  for (int i = 0; i < SV_N; ++i) tot += al8(sz[i]);
  moe_sv *s = NULL;
  SG_TRY(sg_node_save(node, tot, (void **)&s));
  *s = (moe_sv){
      .M = M, .S = f->S, .R = f->R, .Bl = g->Bl, .Tl = g->Tl, .T = T, .Bg = Bg};
  size_t o = al8(sizeof(moe_sv));
  for (int i = 0; i < SV_N; ++i) {
    s->off[i] = o;
    if (sz[i]) memcpy((char *)s + o, src[i], sz[i]);
    o += al8(sz[i]);
  }
fail:
  return st;
}

static sg_status moe_alloc_fw(const moe_geo *g, moe_fw *f) {
  const size_t D = sizeof(double), M = (size_t)g->M, k = (size_t)g->k;
  f->X = malloc(M * (size_t)g->C * D), f->Y = calloc(M * (size_t)g->C, D);
  f->p = malloc(M * (size_t)g->E * D), f->gate = malloc(M * k * D);
  f->frac = malloc((size_t)(g->Bl * g->E) * D);
  f->sbuf = malloc(M * k * (size_t)(g->C + 1) * D + D);
  f->sel = malloc(M * k * sizeof(int)), f->row = malloc(M * k * sizeof(int));
  f->pair = malloc(M * k * sizeof(int) + sizeof(int));
  f->scnt = malloc(2 * (size_t)g->P * sizeof(int)), f->rcnt = f->scnt + g->P;
  if (!f->X || !f->Y || !f->p || !f->gate || !f->frac || !f->sbuf || !f->sel ||
      !f->row || !f->pair || !f->scnt)
    return sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "moe: out of memory");
  return SG_OK;
}

static sg_status moe_fwd(sg_node *node) {
  sg_status st = SG_OK;
  const moe_attr *a = (const moe_attr *)node->attr;
  const moe_geo g = geo_of(node);
  const sg_tensor *x = &node->in[0]->value;
  const int64_t *gs = sg_node_in_global_shape(node, 0);
  int64_t T = 1;
  for (int d = 2; d < x->ndim; ++d) T *= gs[d];
  moe_fw f;
  memset(&f, 0, sizeof f);
  st = moe_alloc_fw(&g, &f);
  if (st == SG_OK) st = weights_f64(node, &f.wb, f.w);
  SG_TRY(agree_ep(node, st));
  to_f64(x->dtype, g.M * g.C, x->data, f.Y); /* Y: scratch for x here */
  tokens_in(&g, f.Y, f.X);
  memset(f.Y, 0, (size_t)(g.M * g.C) * sizeof(double));
  route(&g, f.X, f.w[0], f.p, f.sel, f.gate);
  SG_TRY(plan_keep(&g, node, &a->d, f.sel, T, f.row, f.frac));
  assign_rows(&g, &f);
  if (MPI_Alltoall(f.scnt, 1, MPI_INT, f.rcnt, 1, MPI_INT, g.ep) != MPI_SUCCESS)
    SG_RAISE(SG_ERR_MPI, "moe: all-to-all of the counts failed");
  for (int r = 0; r < g.P; ++r) f.R += f.rcnt[r];
  f.xr = malloc((size_t)(f.R * (g.C + 1) + 1) * sizeof(double));
  f.A = malloc((size_t)(f.R * g.F + 1) * sizeof(double));
  f.O = malloc((size_t)(f.R * g.C + 1) * sizeof(double));
  f.ores = malloc((size_t)(f.S * g.C + 1) * sizeof(double));
  st = f.xr && f.A && f.O && f.ores ? SG_OK : SG_ERR_ALLOC;
  if (agree_ep(node, st) != SG_OK)
    SG_RAISE(SG_ERR_ALLOC, "moe: out of memory for the dispatch");
  SG_TRY(exchange(&g, f.sbuf, f.scnt, f.xr, f.rcnt, g.C + 1));
  SG_TRY(agree_ep(node, expert_fwd(&g, f.w[1], f.w[2], f.w[3], f.w[4], f.R,
                                   f.xr, f.A, f.O)));
  SG_TRY(tp_rows_sum(&g, f.O, f.R * g.C));
  SG_TRY(exchange(&g, f.O, f.rcnt, f.ores, f.scnt, g.C));
  for (int64_t s = 0; s < f.S; ++s) { /* combine */
    const int64_t i = f.pair[s], m = i / g.k;
    for (int64_t c = 0; c < g.C; ++c)
      f.Y[m * g.C + c] += f.gate[i] * f.ores[s * g.C + c];
  }
  SG_TRY(sg_node_alloc_out_uninit(node, 0, x->ndim, x->shape));
  tokens_out(&g, f.Y, f.X); /* X: scratch for the output */
  from_f64(x->dtype, g.M * g.C, f.X, node->out[0]->value.data, 0);
  const int64_t Bg = a->d.batch > 0 ? a->d.batch : gs[0];
  if (a->d.aux) SG_TRY(aux_value(node, &g, &f, T, Bg));
  SG_TRY(save_state(node, &g, &f, T, Bg));
fail:
  fw_free(&f);
  return st;
}

/* Owner side of backward: the rows' dO (R x C) give the experts' weight
 * gradients (accumulated into dW1, db1, dW2, db2) and dx rows (R x C). */
static sg_status expert_bwd(const moe_geo *g, double *const *w, double **dw,
                            int64_t R, const double *xr, const double *A,
                            const double *dO, double *dxr) {
  sg_status st = SG_OK;
  const int64_t C = g->C, F = g->F;
  moe_ex x;
  SG_TRY(ex_alloc(g, R, xr, &x));
  double *Xc = x.c[0], *Ac = x.c[1], *Hc = x.c[2], *Dc = x.c[3];
  for (int64_t e = 0; e < g->E; ++e) {
    const int64_t n = x.first[e + 1] - x.first[e], *idx = x.idx + x.first[e];
    if (!n) continue;
    pack_cols(n, idx, F, F, 0, (double *)A, Ac, 0);
    pack_cols(n, idx, C, C, 0, (double *)dO, Dc, 0);
    SG_TRY(sg_act_forward(SG_ACT_GELU, SG_DTYPE_F64, F * n, Ac, Hc));
    /* dW2 += dO h^T, db2 += dO, then dh = W2^T dO (into Xc's space: F x n
     * fits, x is packed after) */
    SG_TRY(sg_linear_backward(SG_DTYPE_F64, 1, F, C, n, Hc, w[3] + e * C * F,
                              Dc, Xc, dw[3] + e * C * F, dw[4] + e * C));
    SG_TRY(sg_act_backward(SG_ACT_GELU, SG_DTYPE_F64, F * n, Ac, Xc, Hc));
    pack_cols(n, idx, C, C + 1, 1, (double *)xr, Ac, 0);
    SG_TRY(sg_linear_backward(SG_DTYPE_F64, 1, C, F, n, Ac, w[1] + e * F * C,
                              Hc, Dc, dw[1] + e * F * C, dw[2] + e * F));
    pack_cols(n, idx, C, C, 0, dxr, Dc, 1);
  }
fail:
  free(x.mem);
  return st;
}

/* Router backward for token m: the gates' gradients dg (k), the aux loss's
 * gradient, the softmax; into dWr and DX[m]. */
static void router_bwd(const moe_geo *g, const sg_moe_desc *d, const moe_sv *s,
                       int64_t m, const double *dg, const double *Wr,
                       const double *X, double *dWr, double *DX, double *dp) {
  const double *p = (const double *)sv_at(s, SV_P) + m * g->E,
               *gate = (const double *)sv_at(s, SV_GATE) + m * g->k,
               *frac = (const double *)sv_at(s, SV_FRAC) + (m / s->Tl) * g->E;
  const int *sel = (const int *)sv_at(s, SV_SEL) + m * g->k;
  const double ac = d->aux_coef * (double)g->E / ((double)s->Bg * (double)s->T);
  for (int64_t e = 0; e < g->E; ++e) dp[e] = ac * frac[e];
  if (g->k == 1) {
    dp[sel[0]] += dg[0];
  } else {
    const double S = p[sel[0]] + p[sel[1]],
                 dot = dg[0] * gate[0] + dg[1] * gate[1];
    for (int j = 0; j < 2; ++j) dp[sel[j]] += (dg[j] - dot) / S;
  }
  double pd = 0.0;
  for (int64_t e = 0; e < g->E; ++e) pd += p[e] * dp[e];
  for (int64_t e = 0; e < g->E; ++e) {
    const double dz = p[e] * (dp[e] - pd);
    for (int64_t c = 0; c < g->C; ++c)
      dWr[e * g->C + c] += dz * X[m * g->C + c],
          DX[m * g->C + c] += Wr[e * g->C + c] * dz;
  }
}

typedef struct moe_bw {
  double *wb, *dwb, *DY, *X, *DX, *dO, *rO, *dxr, *dxs, *dp;
  double *w[5], *dw[5];
} moe_bw;

static void bw_free(moe_bw *b) {
  void *v[] = {b->wb, b->dwb, b->DY,  b->X,   b->DX,
               b->dO, b->rO,  b->dxr, b->dxs, b->dp};
  for (size_t i = 0; i < sizeof v / sizeof *v; ++i) free(v[i]);
}

static sg_status moe_alloc_bw(const sg_node *node, const moe_geo *g,
                              const moe_sv *s, moe_bw *b) {
  sg_status st = weights_f64(node, &b->wb, b->w);
  if (st != SG_OK) return st;
  int64_t tot = 0;
  for (int i = 1; i <= 5; ++i) tot += ag_numel(&node->in[i]->value);
  const size_t D = sizeof(double), MC = (size_t)(g->M * g->C) + 1;
  b->dwb = calloc((size_t)tot + 1, D);
  b->DY = malloc(MC * D), b->X = malloc(MC * D), b->DX = calloc(MC, D);
  b->dO = malloc((size_t)(s->S * g->C + 1) * D);
  b->dxs = malloc((size_t)(s->S * g->C + 1) * D);
  b->rO = malloc((size_t)(s->R * g->C + 1) * D);
  b->dxr = malloc((size_t)(s->R * g->C + 1) * D);
  b->dp = malloc((size_t)(g->E + 1) * D);
  if (!b->dwb || !b->DY || !b->X || !b->DX || !b->dO || !b->dxs || !b->rO ||
      !b->dxr || !b->dp)
    return sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "moe: out of memory");
  double *q = b->dwb;
  for (int i = 1; i <= 5; ++i)
    b->dw[i - 1] = q, q += ag_numel(&node->in[i]->value);
  return SG_OK;
}

static sg_status moe_bwd(sg_node *node) {
  sg_status st = SG_OK;
  const moe_attr *a = (const moe_attr *)node->attr;
  const moe_geo g = geo_of(node);
  moe_sv *s = node->saved;
  const sg_tensor *x = &node->in[0]->value, *gy = &node->out[0]->grad;
  moe_bw b;
  memset(&b, 0, sizeof b);
  SG_TRY(agree_ep(node, moe_alloc_bw(node, &g, s, &b)));
  const int *pair = sv_at(s, SV_PAIR), *scnt = sv_at(s, SV_SCNT),
            *rcnt = sv_at(s, SV_RCNT), *row = sv_at(s, SV_ROW);
  const double *gate = sv_at(s, SV_GATE), *ores = sv_at(s, SV_OUT);
  to_f64(gy->dtype, g.M * g.C, gy->data, b.DX);
  tokens_in(&g, b.DX, b.DY);
  to_f64(x->dtype, g.M * g.C, x->data, b.DX);
  tokens_in(&g, b.DX, b.X);
  memset(b.DX, 0, (size_t)(g.M * g.C) * sizeof(double));
  for (int64_t q = 0; q < s->S; ++q)
    for (int64_t c = 0; c < g.C; ++c)
      b.dO[q * g.C + c] = gate[pair[q]] * b.DY[(pair[q] / g.k) * g.C + c];
  SG_TRY(exchange(&g, b.dO, scnt, b.rO, rcnt, g.C));
  SG_TRY(agree_ep(node, expert_bwd(&g, b.w, b.dw, s->R, sv_at(s, SV_XR),
                                   sv_at(s, SV_A), b.rO, b.dxr)));
  SG_TRY(tp_rows_sum(&g, b.dxr, s->R * g.C));
  SG_TRY(exchange(&g, b.dxr, rcnt, b.dxs, scnt, g.C));
  for (int64_t q = 0; q < s->S; ++q)
    for (int64_t c = 0; c < g.C; ++c)
      b.DX[(pair[q] / g.k) * g.C + c] += b.dxs[q * g.C + c];
  for (int64_t m = 0; m < g.M; ++m) {
    double dg[2] = {0.0, 0.0};
    for (int64_t j = 0; j < g.k; ++j) {
      const int r = row[m * g.k + j];
      for (int64_t c = 0; r >= 0 && c < g.C; ++c)
        dg[j] += b.DY[m * g.C + c] * ores[(int64_t)r * g.C + c];
    }
    router_bwd(&g, &a->d, s, m, dg, b.w[0], b.X, b.dw[0], b.DX, b.dp);
  }
  if (node->gin[0]) {
    tokens_out(&g, b.DX, b.DY);
    from_f64(x->dtype, g.M * g.C, b.DY, node->gin[0], 0);
  }
  for (int i = 1; i <= 5; ++i)
    if (node->gin[i])
      from_f64(node->in[i]->value.dtype, ag_numel(&node->in[i]->value),
               b.dw[i - 1], node->gin[i], 1);
fail:
  bw_free(&b);
  return st;
}

static const sg_op_def moe_op = {
    .name = "moe",
    .slots = {SG_SLOT_ACT, SG_SLOT_PARAM, SG_SLOT_PARAM, SG_SLOT_PARAM,
              SG_SLOT_PARAM, SG_SLOT_PARAM},
    .forward = moe_fwd,
    .backward = moe_bwd,
    .rule = {.windowed_input = -1, .out = SG_OUT_LIKE_INPUT, .writes_gin = 1u}};

sg_status sg_moe_check(const sg_moe_desc *d, int64_t width) {
  sg_status st = SG_OK;
  const int P = d->ep ? sg_group_size(d->ep) : 1;
  if (d->experts < 1)
    SG_RAISE(SG_ERR_CONFIG, "moe: experts must be >= 1 (got %lld)",
             (long long)d->experts);
  if (d->topk < 1 || d->topk > 2 || d->topk > d->experts)
    SG_RAISE(SG_ERR_CONFIG,
             "moe: topk must be 1 or 2 and at most the experts (got topk %d, "
             "%lld experts)",
             d->topk, (long long)d->experts);
  if (d->experts % P)
    SG_RAISE(SG_ERR_CONFIG,
             "moe: experts (%lld) must be divisible by ep (%d): every ep "
             "rank holds experts/ep experts",
             (long long)d->experts, P);
  if (width < 1) SG_RAISE(SG_ERR_CONFIG, "moe: width must be >= 1");
fail:
  return st;
}

sg_status sg_ag_moe(sg_tape_t t, const sg_moe_desc *d, sg_var *x, sg_var *wr,
                    sg_var *w1, sg_var *b1, sg_var *w2, sg_var *b2,
                    sg_var **y) {
  sg_status st = SG_OK;
  if (!t || !d || !x || !wr || !w1 || !b1 || !w2 || !b2 || !y)
    SG_RAISE(SG_ERR_INVALID_ARG, "moe: NULL argument");
  SG_TRY(sg_moe_check(d, x->value.ndim > 1 ? x->value.shape[1] : 0));
  const int64_t E = d->experts, C = x->value.shape[1],
                El = E / (d->ep ? sg_group_size(d->ep) : 1);
  const sg_tensor *W1 = &w1->value;
  if (wr->value.ndim != 2 || wr->value.shape[0] != E ||
      wr->value.shape[1] != C || W1->ndim != 3 || W1->shape[0] != El ||
      W1->shape[2] != C || ag_numel(&b1->value) != El * W1->shape[1] ||
      ag_numel(&w2->value) != El * C * W1->shape[1] ||
      ag_numel(&b2->value) != El * C)
    SG_RAISE(SG_ERR_SHAPE,
             "moe: router (E, C), fc1 (E/ep, F, C), its bias (E/ep, F), fc2 "
             "(E/ep, C, F), its bias (E/ep, C) expected for E = %lld, C = "
             "%lld, E/ep = %lld",
             (long long)E, (long long)C, (long long)El);
  sg_var *in[6] = {x, wr, w1, b1, w2, b2};
  for (int i = 0; i < 6; ++i)
    if (in[i]->value.dtype != SG_DTYPE_F32 &&
        in[i]->value.dtype != SG_DTYPE_F64)
      SG_RAISE(SG_ERR_NOT_SUPPORTED,
               "moe: f32 and f64 only (input %d is neither: bf16 compute "
               "is not built for the experts)",
               i);
  moe_attr at = {.d = *d};
  SG_TRY(sg_tape_apply(t, &moe_op, 6, in, 1, NULL, &at, sizeof at, y));
fail:
  return st;
}

const sg_op_def *sg_ag_moe_op_def(void) { return &moe_op; }
