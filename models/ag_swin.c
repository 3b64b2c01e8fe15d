/* shardgrid — Swin's shifted-window attention on the tape
 * (docs/transformers.md, "The swin model"): a periodic roll of the
 * spatial dims (sg_ag_roll) and multi-head attention inside
 * non-overlapping W x W windows with a relative position bias
 * (sg_ag_window_attention).
 *
 * Domain parallelism. Every rank's token block holds whole windows (its
 * extents are multiples of W: checked on every rank), so unshifted windows
 * are local and window attention needs no messages. A shifted block is a
 * roll by W/2 before and a roll back after; a periodic roll of a sharded
 * field is a halo exchange with a one-sided halo: rank r's rolled block is
 * its own cells from the shift on plus the first `shift` cells of the next
 * rank along the dim, which the halo layer brings into the high margin
 * (periodic boundary: the last rank gets the first rank's). Backward of the
 * roll is the halo layer's adjoint (the margin's gradient sent back and
 * added to the cells it came from). Neighbour traffic only: per roll and
 * rank `shift` rows (and/or columns) of the block. Because the roll is
 * periodic in both dims, windows that wrap around join cells that are
 * neighbours on the periodic domain, and no attention mask is used
 * (Swin's mask exists for non-periodic images). On a non-periodic dim
 * (latitude) sg_ag_window_attention_masked applies Swin's mask: tokens
 * that wrapped across the dim's end and tokens that did not do not attend
 * to each other (the same windows, no messages: each rank knows its
 * tokens' global positions). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd_impl.h"
#include "op_registry_impl.h"
#include "sg_autograd.h"
#include "sg_comm.h"
#include "sg_config.h"
#include "sg_decomp.h"
#include "sg_halo.h"
#include "sg_ops_inl.h"   /* sg_roll_src, shared with the CUDA kernel */
#include "sg_wattn_inl.h" /* the CUDA window attention's rows */
#if SG_HAVE_CUDA
#include "sg_ops_cuda.h"
#define SWIN_CUDA(f) f
#else
#define SWIN_CUDA(f) NULL
#endif

enum { ROLL_MAX_SP = 3 };

/* Element i of a f32 or f64 buffer as a double, and back. */
static double load_d(sg_dtype dt, const void *p, int64_t i) {
  return dt == SG_DTYPE_F32 ? (double)((const float *)p)[i]
                            : ((const double *)p)[i];
}
static void store_d(sg_dtype dt, void *p, int64_t i, double v) {
  if (dt == SG_DTYPE_F32)
    ((float *)p)[i] = (float)v;
  else
    ((double *)p)[i] = v;
}

/* ---- the periodic roll ------------------------------------------------------ */

typedef struct roll_attr {
  int64_t shift[ROLL_MAX_SP];
} roll_attr;

/* The spatial extents of t (padded to 3 dims with 1). */
static void sp_ext(const sg_tensor *t, int64_t *n) {
  for (int d = 0; d < ROLL_MAX_SP; ++d)
    n[d] = d + 2 < t->ndim ? t->shape[d + 2] : 1;
}

/* One process (no mesh): y[.., i] = x[.., (i + s) mod n] (fwd) or the
 * transpose, dx[.., (i + s) mod n] = dy[.., i] (!fwd). */
static void roll_local(const sg_tensor *t, const int64_t *s, const void *src,
                       void *dst, int fwd) {
  int64_t n[ROLL_MAX_SP];
  sp_ext(t, n);
  const int64_t total = t->shape[0] * t->shape[1] * n[0] * n[1] * n[2];
  const size_t es = sg_dtype_size(t->dtype);
  for (int64_t y = 0; y < total; ++y) { /* the CUDA kernel's map */
    const int64_t x = sg_roll_src(y, n, s);
    memcpy((char *)dst + (fwd ? y : x) * (int64_t)es,
           (const char *)src + (fwd ? x : y) * (int64_t)es, es);
  }
}

/* The halo plan of a roll of node's block: a one-sided periodic halo of
 * |shift| cells per spatial dim (high side for a positive shift). */
static sg_status roll_plan(const sg_node *node, const sg_tensor *t,
                           const int64_t *s, sg_halo_plan_t *plan) {
  sg_halo_desc d;
  sg_halo_desc_init(&d);
  d.ndims = t->ndim - 2;
  /* a rank without samples (a batch split unevenly over dp) still takes
   * part in the collective plan: one dummy leading element, nothing
   * copied */
  d.lead = t->shape[0] * t->shape[1] > 0 ? t->shape[0] * t->shape[1] : 1;
  d.dtype = t->dtype;
  for (int k = 0; k < d.ndims; ++k) {
    d.interior[k] = t->shape[k + 2];
    d.halo[k][0] = d.margin[k][0] = s[k] < 0 ? -s[k] : 0;
    d.halo[k][1] = d.margin[k][1] = s[k] > 0 ? s[k] : 0;
    d.boundary[k] = SG_BOUNDARY_PERIODIC;
    d.mesh_dim[k] = -1;
  }
  for (int m = 0; m < sg_mesh_ndims(node->mesh); ++m) {
    const sg_placement *p = &node->placements[m];
    if (p->kind == SG_PLACEMENT_SHARD && p->dim >= 2)
      d.mesh_dim[p->dim - 2] = m;
  }
  return sg_halo_plan_create(node->mesh, &d, plan);
}

/* Copy between the dense t-shaped data and the plan's block cells
 * (l, i + off): to_block 1 writes the block. Rows are contiguous in both
 * (the plan's block is packed row-major). */
static void block_copy(sg_halo_plan_t plan, const sg_tensor *t, void *dense,
                       char *blk, const int64_t *off, int to_block) {
  int64_t n[ROLL_MAX_SP], bs[1 + SG_HALO_MAX_DIMS] = {0};
  sp_ext(t, n);
  sg_halo_plan_strides(plan, bs);
  const int nsp = t->ndim - 2;
  int64_t st[ROLL_MAX_SP] = {0, 0, 0};
  for (int k = 0; k < nsp; ++k) st[k] = bs[1 + k];
  const size_t es = sg_dtype_size(t->dtype);
  const int64_t lead = t->shape[0] * t->shape[1],
                org = sg_halo_plan_origin(plan), row = n[nsp - 1] * (int64_t)es;
  int64_t o3[ROLL_MAX_SP] = {0, 0, 0}, n3[ROLL_MAX_SP] = {1, 1, 1};
  for (int k = 0; k < nsp; ++k) o3[k] = off[k], n3[k] = n[k];
  n3[nsp - 1] = 1; /* the last spatial dim is the row */
  char *dn = dense;
  for (int64_t l = 0; l < lead; ++l)
    for (int64_t i = 0; i < n3[0]; ++i)
      for (int64_t j = 0; j < n3[1]; ++j)
        for (int64_t k = 0; k < n3[2]; ++k) {
          const int64_t e = org + l * bs[0] + (i + o3[0]) * st[0] +
                            (j + o3[1]) * st[1] + (k + o3[2]) * st[2];
          char *b = blk + e * (int64_t)es;
          if (to_block)
            memcpy(b, dn, (size_t)row);
          else
            memcpy(dn, b, (size_t)row);
          dn += row;
        }
}

/* Forward (fwd 1): y = the block rolled by s; backward: dx from dy by the
 * halo layer's adjoint. Collective over the mesh. */
static sg_status roll_halo(const sg_node *node, const sg_tensor *t,
                           const int64_t *s, void *src, void *dst, int fwd) {
  sg_status st = SG_OK;
  sg_halo_plan_t plan = NULL;
  char *blk = NULL;
  const int64_t zero[ROLL_MAX_SP] = {0, 0, 0};
  SG_TRY(roll_plan(node, t, s, &plan));
  const size_t es = sg_dtype_size(t->dtype);
  blk = calloc((size_t)sg_halo_plan_block_count(plan) + 1, es);
  if (!blk) st = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "roll: block");
  SG_TRY(sg_agree(sg_mesh_comm(node->mesh), st));
  if (fwd) {
    block_copy(plan, t, src, blk, zero, 1);
    SG_TRY(sg_halo_exchange(plan, blk));
    block_copy(plan, t, dst, blk, s, 0);
  } else {
    block_copy(plan, t, src, blk, s, 1);
    SG_TRY(sg_halo_adjoint(plan, blk));
    block_copy(plan, t, dst, blk, zero, 0);
  }
fail:
  free(blk);
  sg_halo_plan_destroy(&plan);
  return st;
}

/* 1 if a mesh dim splits a spatial dim of the node's inputs. */
static int split_in_space(const sg_node *node) {
  for (int m = 0; node->mesh && m < sg_mesh_ndims(node->mesh); ++m)
    if (node->placements[m].kind == SG_PLACEMENT_SHARD &&
        node->placements[m].dim >= 2 && sg_mesh_dim_size(node->mesh, m) > 1)
      return 1;
  return 0;
}

/* Locally when no mesh dim splits space (no messages), else by the halo
 * layer: collective over the mesh, so a rank without samples (dst NULL,
 * nothing to copy) takes part too. */
static sg_status roll_run(sg_node *node, const sg_tensor *t, void *src,
                          void *dst, int fwd) {
  const roll_attr *a = (const roll_attr *)node->attr;
  if (!split_in_space(node)) {
    roll_local(t, a->shift, src, dst, fwd);
    return SG_OK;
  }
  return roll_halo(node, t, a->shift, src, dst, fwd);
}

static sg_status roll_fwd(sg_node *node) {
  sg_status st = SG_OK;
  const sg_tensor *x = &node->in[0]->value;
  SG_TRY(sg_node_alloc_out_uninit(node, 0, x->ndim, x->shape));
  SG_TRY(roll_run(node, x, x->data, node->out[0]->value.data, 1));
fail:
  return st;
}

static sg_status roll_bwd(sg_node *node) {
  const sg_tensor *dy = &node->out[0]->grad;
  if (!node->gin[0] && sg_tensor_numel(dy) > 0) return SG_OK; /* not wanted */
  return roll_run(node, dy, dy->data, node->gin[0], 0);
}

#if SG_HAVE_CUDA
/* On a device: one process (the tape refuses sharded device variables). */
static sg_status roll_cuda_run(sg_node *node, const sg_tensor *t,
                               const void *src, void *dst, int fwd) {
  const roll_attr *a = (const roll_attr *)node->attr;
  int64_t n[ROLL_MAX_SP];
  sp_ext(t, n);
  if (t->shape[0] * t->shape[1] * n[0] * n[1] * n[2] == 0) return SG_OK;
  return sg_roll_cuda(t->dtype, t->shape[0] * t->shape[1], n, a->shift, fwd,
                      src, dst, NULL);
}

static sg_status roll_fwd_cuda(sg_node *node) {
  sg_status st = SG_OK;
  const sg_tensor *x = &node->in[0]->value;
  SG_TRY(sg_node_alloc_out_uninit(node, 0, x->ndim, x->shape));
  SG_TRY(roll_cuda_run(node, x, x->data, node->out[0]->value.data, 1));
fail:
  return st;
}

static sg_status roll_bwd_cuda(sg_node *node) {
  const sg_tensor *dy = &node->out[0]->grad;
  if (!node->gin[0]) return SG_OK; /* not wanted */
  return roll_cuda_run(node, dy, dy->data, node->gin[0], 0);
}
#endif

static const sg_op_def roll_op = {.name = "roll",
                                  .slots = {SG_SLOT_ACT},
                                  .forward = roll_fwd,
                                  .backward = roll_bwd,
                                  .forward_cuda = SWIN_CUDA(roll_fwd_cuda),
                                  .backward_cuda = SWIN_CUDA(roll_bwd_cuda),
                                  .rule = {.windowed_input = -1,
                                           .accepts = SG_ACCEPT_ALL,
                                           .out = SG_OUT_LIKE_INPUT,
                                           .writes_gin = 1u}};

sg_status sg_ag_roll(sg_tape_t t, sg_var *x, const int64_t *shift, sg_var **y) {
  sg_status st = SG_OK;
  roll_attr a;
  memset(&a, 0, sizeof a);
  if (!x || !shift || !y)
    SG_RAISE(SG_ERR_INVALID_ARG, "roll: x, shift and y are required");
  const int nsp = x->value.ndim - 2;
  if (nsp < 1 || nsp > ROLL_MAX_SP)
    SG_RAISE(SG_ERR_SHAPE, "roll: x must be (N, C, spatial...), 1-3 dims");
  const int64_t *g = sg_var_global_shape(x);
  for (int k = 0; k < nsp; ++k) /* the same roll, in 0 .. n - 1 or below */
    a.shift[k] = g[k + 2] ? shift[k] % g[k + 2] : 0;
  sg_var *in[1] = {x};
  SG_TRY(sg_tape_apply(t, &roll_op, 1, in, 1, NULL, &a, sizeof a, y));
fail:
  return st;
}

/* ---- attention in windows with a relative position bias ------------------ */

/* Swin's mask (a shifted block on a non-periodic dim): per spatial dim
 * (y, x) the roll the input came by (shift, 0: none), the global token
 * count n and this rank's first token off, mask 1 where the dim is not
 * periodic. Local token i of such a dim wrapped across the dim's end iff
 * off + i + shift lies outside [0, n); a query and a key on different
 * sides of that line in any masked dim do not attend to each other. */
typedef struct wattn_attr {
  int64_t heads, window;
  int64_t shift[2], n[2], off[2];
  int mask[2];
} wattn_attr;

/* The local geometry: B samples, C = H d channels, a Hl x Wl block of
 * nwy x nwx windows of T = W^2 tokens. */
typedef struct wgeo {
  sg_dtype dt;
  int64_t B, C, H, d, Hl, Wl, W, T, nwy, nwx, R; /* R = 2W - 1 */
  double scale;
  const wattn_attr *a; /* the mask's geometry */
} wgeo;

static wgeo wgeo_of(const sg_node *node) {
  const wattn_attr *a = (const wattn_attr *)node->attr;
  const sg_tensor *q = &node->in[0]->value;
  wgeo g = {.dt = q->dtype,
            .B = q->shape[0],
            .C = q->shape[1],
            .H = a->heads,
            .Hl = q->shape[2],
            .Wl = q->shape[3],
            .W = a->window};
  g.d = g.C / g.H, g.T = g.W * g.W, g.nwy = g.Hl / g.W, g.nwx = g.Wl / g.W;
  g.R = 2 * g.W - 1;
  g.scale = 1.0 / sqrt((double)g.d);
  g.a = a;
  return g;
}

/* Which side of the wrap line local token i of spatial dim k is on (0
 * where the dim is not masked). */
static int wside(const wattn_attr *a, int k, int64_t i) {
  if (!a->mask[k]) return 0;
  const int64_t src = a->off[k] + i + a->shift[k];
  return src < 0 || src >= a->n[k];
}

/* The mask of window (wy, wx): token t's side in y and x as bits (2 y +
 * x), side[t]; returns 1 if the window mixes sides (some pair masked). */
static int wsides(const wgeo *g, int64_t wy, int64_t wx, unsigned char *side) {
  unsigned char any = 0, all = 3;
  for (int64_t t = 0; t < g->T; ++t) {
    side[t] = (unsigned char)(2 * wside(g->a, 0, wy * g->W + t / g->W) +
                              wside(g->a, 1, wx * g->W + t % g->W));
    any |= side[t], all &= side[t];
  }
  return any != all;
}

/* Element of token t of window (b, wy, wx), channel h d + j. */
static int64_t widx(const wgeo *g, int64_t b, int64_t wy, int64_t wx, int64_t h,
                    int64_t j, int64_t t) {
  const int64_t y = wy * g->W + t / g->W, x = wx * g->W + t % g->W;
  return ((b * g->C + h * g->d + j) * g->Hl + y) * g->Wl + x;
}

/* The bias table's entry of query token i and key token j. */
static int64_t rel(const wgeo *g, int64_t i, int64_t j) {
  const int64_t dy = i / g->W - j / g->W, dx = i % g->W - j % g->W;
  return (dy + g->W - 1) * g->R + dx + g->W - 1;
}

/* One window's head: gather (T, d) of src into dst (or scatter back). */
typedef struct wsel {
  int64_t b, wy, wx, h;
} wsel;

static void wgather(const wgeo *g, const wsel *s, const void *src,
                    double *dst) {
  for (int64_t t = 0; t < g->T; ++t)
    for (int64_t j = 0; j < g->d; ++j)
      dst[t * g->d + j] = load_d(g->dt, src,
                                 widx(g, s->b, s->wy, s->wx, s->h, j, t));
}
static void wscatter(const wgeo *g, const wsel *s, const double *src,
                     void *dst) {
  for (int64_t t = 0; t < g->T; ++t)
    for (int64_t j = 0; j < g->d; ++j)
      store_d(g->dt, dst, widx(g, s->b, s->wy, s->wx, s->h, j, t),
              src[t * g->d + j]);
}

static double dot(const double *a, const double *b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

/* P = softmax(scale Q K^T + bias) (T x T), O = P V; side (NULL: no
 * mask): P[i, j] = 0 where tokens i and j are on different sides (every
 * query sees itself, so no row is empty). */
static void wforward(const wgeo *g, const double *Q, const double *K,
                     const double *V, const double *bias,
                     const unsigned char *side, double *P, double *O) {
  const int64_t T = g->T, d = g->d;
  for (int64_t i = 0; i < T; ++i) {
    double *p = P + i * T, mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < T; ++j) {
      p[j] = side && side[i] != side[j]
                 ? -INFINITY
                 : g->scale * dot(Q + i * d, K + j * d, d) + bias[rel(g, i, j)];
      mx = fmax(mx, p[j]);
    }
    for (int64_t j = 0; j < T; ++j) sum += (p[j] = exp(p[j] - mx));
    for (int64_t j = 0; j < T; ++j) p[j] /= sum;
    for (int64_t c = 0; c < d; ++c) {
      double o = 0;
      for (int64_t j = 0; j < T; ++j) o += p[j] * V[j * d + c];
      O[i * d + c] = o;
    }
  }
}

/* The backward of one window's head: dP = dO V^T, dS = P (dP -
 * rowsum(P dP)); dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO, dbias +=
 * dS by relative offset (a masked pair: P = 0, so dS = 0). dp: T doubles
 * of scratch. */
static void wbackward(const wgeo *g, const double *Q, const double *K,
                      const double *V, const double *dO, const double *P,
                      double *dp, double *dQ, double *dK, double *dV,
                      double *dbias) {
  const int64_t T = g->T, d = g->d;
  memset(dQ, 0, sizeof(double) * (size_t)(T * d));
  memset(dK, 0, sizeof(double) * (size_t)(T * d));
  memset(dV, 0, sizeof(double) * (size_t)(T * d));
  for (int64_t i = 0; i < T; ++i) {
    const double *p = P + i * T;
    double r = 0;
    for (int64_t j = 0; j < T; ++j) {
      for (int64_t c = 0; c < d; ++c) dV[j * d + c] += p[j] * dO[i * d + c];
      dp[j] = dot(dO + i * d, V + j * d, d);
      r += p[j] * dp[j];
    }
    for (int64_t j = 0; j < T; ++j) {
      const double ds = p[j] * (dp[j] - r);
      dbias[rel(g, i, j)] += ds;
      for (int64_t c = 0; c < d; ++c) {
        dQ[i * d + c] += g->scale * ds * K[j * d + c];
        dK[j * d + c] += g->scale * ds * Q[i * d + c];
      }
    }
  }
}

/* The bias table (H, R^2) of the node in f64 (dt elements). */
static sg_status bias_load(const wgeo *g, const sg_tensor *b, double **out) {
  sg_status st = SG_OK;
  const int64_t n = g->H * g->R * g->R;
  double *v = malloc(sizeof(double) * (size_t)(n + 1));
  if (!v) SG_RAISE(SG_ERR_ALLOC, "window attention: bias table");
  for (int64_t i = 0; i < n; ++i) v[i] = load_d(b->dtype, b->data, i);
  *out = v;
fail:
  return st;
}

static int64_t wcount(const wgeo *g) { return g->B * g->nwy * g->nwx * g->H; }

/* Window k of the loop over (b, wy, wx, h). */
static wsel wsel_of(const wgeo *g, int64_t k) {
  wsel s;
  s.h = k % g->H, k /= g->H;
  s.wx = k % g->nwx, k /= g->nwx;
  s.wy = k % g->nwy, s.b = k / g->nwy;
  return s;
}

static sg_status wattn_fwd(sg_node *node) {
  sg_status st = SG_OK;
  const wgeo g = wgeo_of(node);
  const sg_tensor *q = &node->in[0]->value;
  const int64_t TT = g.T * g.T, Td = g.T * g.d, RR = g.R * g.R;
  double *P = NULL, *bias = NULL, *w = NULL;
  SG_TRY(sg_node_save(node, sizeof(double) * (size_t)(wcount(&g) * TT + 1),
                      (void **)&P));
  SG_TRY(bias_load(&g, &node->in[3]->value, &bias));
  w = malloc(sizeof(double) * (size_t)(4 * Td) + (size_t)g.T);
  if (!w) SG_RAISE(SG_ERR_ALLOC, "window attention: buffers");
  unsigned char *side = (unsigned char *)(w + 4 * Td);
  SG_TRY(sg_node_alloc_out_uninit(node, 0, q->ndim, q->shape));
  for (int64_t k = 0; k < wcount(&g); ++k) {
    const wsel s = wsel_of(&g, k);
    for (int i = 0; i < 3; ++i)
      wgather(&g, &s, node->in[i]->value.data, w + i * Td);
    const int masked = wsides(&g, s.wy, s.wx, side);
    wforward(&g, w, w + Td, w + 2 * Td, bias + s.h * RR, masked ? side : NULL,
             P + k * TT, w + 3 * Td);
    wscatter(&g, &s, w + 3 * Td, node->out[0]->value.data);
  }
fail:
  free(bias), free(w);
  return st;
}

static sg_status wattn_bwd(sg_node *node) {
  sg_status st = SG_OK;
  const wgeo g = wgeo_of(node);
  const int64_t TT = g.T * g.T, Td = g.T * g.d, RR = g.R * g.R;
  const double *P = node->saved;
  double *db = calloc((size_t)(g.H * RR + 1), sizeof(double)),
         *w = malloc(sizeof(double) * (size_t)(7 * Td + g.T));
  if (!db || !w) SG_RAISE(SG_ERR_ALLOC, "window attention: backward buffers");
  for (int64_t k = 0; k < wcount(&g); ++k) {
    const wsel s = wsel_of(&g, k);
    for (int i = 0; i < 3; ++i)
      wgather(&g, &s, node->in[i]->value.data, w + i * Td);
    wgather(&g, &s, node->out[0]->grad.data, w + 3 * Td);
    wbackward(&g, w, w + Td, w + 2 * Td, w + 3 * Td, P + k * TT, w + 7 * Td,
              w + 4 * Td, w + 5 * Td, w + 6 * Td, db + s.h * RR);
    for (int i = 0; i < 3; ++i)
      if (node->gin[i]) wscatter(&g, &s, w + (4 + i) * Td, node->gin[i]);
  }
  if (node->gin[3])
    for (int64_t i = 0; i < g.H * RR; ++i)
      store_d(g.dt, node->gin[3], i, load_d(g.dt, node->gin[3], i) + db[i]);
fail:
  free(db), free(w);
  return st;
}

#if SG_HAVE_CUDA
/* On one device: the rows of sg_wattn_inl.h (test_attn_device checks them
 * against wattn_fwd / wattn_bwd), P saved on the device. */
static sg_wattn_geo wattn_hd(const wgeo *g) {
  const sg_wattn_geo h = {g->B, g->C, g->H,   g->d,   g->Hl, g->Wl,
                          g->W, g->T, g->nwy, g->nwx, g->R,  g->scale};
  return h;
}

/* Swin's mask (a non-periodic dim) is host-only: refused, never ignored */
static sg_status wattn_mask_on_device(const wgeo *g) {
  if (g->a->mask[0] || g->a->mask[1])
    return sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                        "window attention: the mask of a non-periodic dim is "
                        "not supported on cuda (issue 22); periodic dims "
                        "only");
  return SG_OK;
}

static sg_status wattn_fwd_cuda(sg_node *node) {
  sg_status st = SG_OK;
  const wgeo g = wgeo_of(node);
  SG_TRY(wattn_mask_on_device(&g));
  const sg_wattn_geo h = wattn_hd(&g);
  const sg_tensor *q = &node->in[0]->value;
  double *P = NULL;
  SG_TRY(sg_node_save_uninit(
      node, sizeof(double) * (size_t)(wcount(&g) * g.T * g.T + 1),
      (void **)&P));
  SG_TRY(sg_node_alloc_out_uninit(node, 0, q->ndim, q->shape));
  SG_TRY(sg_wattn_fwd_cuda(g.dt, &h, q->data, node->in[1]->value.data,
                           node->in[2]->value.data, node->in[3]->value.data, P,
                           node->out[0]->value.data, NULL));
fail:
  return st;
}

static sg_status wattn_bwd_cuda(sg_node *node) {
  const wgeo g = wgeo_of(node);
  const sg_wattn_geo h = wattn_hd(&g);
  const sg_status st = wattn_mask_on_device(&g);
  if (st != SG_OK) return st;
  return sg_wattn_bwd_cuda(g.dt, &h, node->in[0]->value.data,
                           node->in[1]->value.data, node->in[2]->value.data,
                           node->out[0]->grad.data, node->saved, node->gin[0],
                           node->gin[1], node->gin[2], node->gin[3], NULL);
}
#endif

static const sg_op_def wattn_op = {
    .name = "window_attention",
    .slots = {SG_SLOT_ACT, SG_SLOT_ACT, SG_SLOT_ACT, SG_SLOT_PARAM},
    .forward = wattn_fwd,
    .backward = wattn_bwd,
    .forward_cuda = SWIN_CUDA(wattn_fwd_cuda),
    .backward_cuda = SWIN_CUDA(wattn_bwd_cuda),
    .rule = {.windowed_input = -1,
             .accepts = SG_ACCEPT_REPLICATE | SG_ACCEPT_SHARD_BATCH |
                        SG_ACCEPT_SHARD_SPATIAL,
             .out = SG_OUT_LIKE_INPUT,
             .writes_gin = 7u}};

/* Every rank's block must hold whole windows: one flag reduced over the
 * mesh, so every rank reports the same error. */
static sg_status wattn_blocks_check(const sg_var *q, int64_t W) {
  sg_status st = SG_OK;
  const int64_t *s = q->value.shape;
  int bad = s[2] % W != 0 || s[3] % W != 0;
  if (q->mesh)
    SG_MPI(MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX,
                         sg_mesh_comm(q->mesh)));
  if (bad)
    SG_RAISE(SG_ERR_CONFIG,
             "window attention: a rank's token block is not a multiple of the "
             "window %lld (this rank's: %lldx%lld): every block of the token "
             "grid must hold whole windows (choose h, w ranks that split the "
             "windows evenly)",
             (long long)W, (long long)s[2], (long long)s[3]);
fail:
  return st;
}

/* The mask's geometry of q's rank: its first token per spatial dim (one
 * mesh dim splits each, as for the roll). */
static sg_status wattn_mask_geo(const sg_var *q, const int64_t *shift,
                                const int *periodic, wattn_attr *a) {
  sg_status st = SG_OK;
  const int64_t *g = sg_var_global_shape(q);
  for (int k = 0; k < 2; ++k) {
    a->n[k] = g[k + 2];
    a->shift[k] = shift ? shift[k] % g[k + 2] : 0;
    a->mask[k] = periodic && !periodic[k] && a->shift[k] != 0;
    a->off[k] = 0;
  }
  int splits[2] = {0, 0};
  for (int m = 0; q->mesh && m < sg_mesh_ndims(q->mesh); ++m) {
    const sg_placement *p = &q->placements[m];
    const int sz = sg_mesh_dim_size(q->mesh, m);
    if (p->kind != SG_PLACEMENT_SHARD || p->dim < 2 || p->dim > 3 || sz == 1)
      continue;
    const int k = p->dim - 2;
    a->off[k] = sg_split_offset(a->n[k], sz, sg_mesh_coord(q->mesh, m));
    ++splits[k];
  }
  for (int k = 0; k < 2; ++k)
    if (a->mask[k] && splits[k] > 1)
      SG_RAISE(SG_ERR_NOT_SUPPORTED,
               "window attention: the mask of a non-periodic dim split over "
               "%d mesh dims is not supported (one mesh dim per spatial dim)",
               splits[k]);
fail:
  return st;
}

sg_status sg_ag_window_attention(sg_tape_t t, int64_t heads, int64_t window,
                                 sg_var *q, sg_var *k, sg_var *v, sg_var *bias,
                                 sg_var **o) {
  return sg_ag_window_attention_masked(t, heads, window, NULL, NULL, q, k, v,
                                       bias, o);
}

sg_status sg_ag_window_attention_masked(sg_tape_t t, int64_t heads,
                                        int64_t window, const int64_t *shift,
                                        const int *periodic, sg_var *q,
                                        sg_var *k, sg_var *v, sg_var *bias,
                                        sg_var **o) {
  sg_status st = SG_OK;
  SG_TRY(sg_ag_attention_check(heads, q, k, v, o));
  if (!bias) SG_RAISE(SG_ERR_INVALID_ARG, "window attention: bias is required");
  const int64_t *g = sg_var_global_shape(q), R = 2 * window - 1;
  if (q->value.ndim != 4)
    SG_RAISE(SG_ERR_SHAPE, "window attention: q, k, v must be (N, C, H, W)");
  if (window < 1 || window > g[2] || window > g[3])
    SG_RAISE(SG_ERR_CONFIG,
             "window attention: window %lld must be in 1 .. the token grid "
             "%lldx%lld",
             (long long)window, (long long)g[2], (long long)g[3]);
  SG_TRY(wattn_blocks_check(q, window));
  if (bias->value.ndim != 2 || bias->value.shape[0] != heads ||
      bias->value.shape[1] != R * R)
    SG_RAISE(SG_ERR_SHAPE,
             "window attention: the bias table must be (heads, (2W-1)^2) = "
             "(%lld, %lld)",
             (long long)heads, (long long)(R * R));
  wattn_attr at = {.heads = heads, .window = window};
  SG_TRY(wattn_mask_geo(q, shift, periodic, &at));
  sg_var *in[4] = {q, k, v, bias};
  SG_TRY(sg_tape_apply(t, &wattn_op, 4, in, 1, NULL, &at, sizeof at, o));
fail:
  return st;
}

const sg_op_def *sg_ag_roll_op_def(void) { return &roll_op; }
const sg_op_def *sg_ag_window_attention_op_def(void) { return &wattn_op; }
